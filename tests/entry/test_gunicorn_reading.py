"""A gunicorn.conf.py read as gunicorn reads it (issue 30): gunicorn's values, spellings and
environment, ``raw_env``, the ``server``/``worker`` objects its hooks are given, its
``logconfig_dict``, app factories with arguments, keepalive 0. Real subprocesses on 127.0.0.1,
each bounded in time, and the installed gunicorn as the oracle where it can say.
"""

import json
import signal
import socket
import subprocess
import sys

import pytest

from greenserve.entry.configfile import GUNICORN_ALIASES
from greenserve.settings import Config, SettingError
from tests.conftest import Client, children_of, free_port, wait_for_port, wait_until
from tests.entry.test_cli import assert_usage_error
from tests.entry.test_config_file import APP, gunicorn_print_config, printed, run_cli, same_value, start, stop, write

pytestmark = pytest.mark.timeout(90)


def http_get(port, path="/", unix=None):
    """One HTTP/1.1 request with Connection: close, read to the close: (status line, head lines, body)."""
    client = Client(unix if unix is not None else ("127.0.0.1", port))
    try:
        client.send(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
        data = client.read_until_close(10)
    finally:
        client.sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    return lines[0], lines[1:], body


class Serving:
    """``greenserve -c conf.py ARGS`` in tmp_path, bound to a free port; stopped (SIGTERM) on exit,
    with its stdout and stderr kept."""

    def __init__(self, tmp_path, conf, *args, env=None, app="app:app", port=True):
        if not (tmp_path / "app.py").exists():
            write(tmp_path, "app.py", APP)
        self.port = free_port() if port else None
        write(tmp_path, "conf.py", conf)
        bind = ("-b", "127.0.0.1:%d" % self.port) if port else ()
        self.process = start(tmp_path, "-c", "conf.py", *bind, *args, app, env=env)
        self.out = self.err = None

    def __enter__(self):
        try:
            if self.port is not None:
                wait_for_port(self.port, 20, self.process)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.out, self.err = self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.out, self.err = self.process.communicate()


# --- values and spellings gunicorn accepts ------------------------------------------------------

# What real files write: booleans as words, numbers as text (gunicorn's int(text, 0)), the zeros
# that mean "none" or "no limit" to gunicorn.
GUNICORN_VALUES = [
    ("capture_output", "True"), ("capture_output", "false"), ("daemon", " FALSE "), ("preload_app", "true"),
    ("reuse_port", "True"), ("reload", "false"),
    ("graceful_timeout", 0), ("graceful_timeout", "0"), ("keepalive", 0), ("keepalive", "0"), ("timeout", 0),
    ("workers", "4"), ("backlog", "0x400"), ("max_requests", " 1000 "), ("umask", "0o22"),
    ("limit_request_line", 0), ("limit_request_fields", 0), ("limit_request_field_size", 0),
    ("limit_request_line", "8190"), ("bind", "unix://tmp/app.sock"), ("bind", "unix:///run/app.sock"),
    ("bind", "tcp://127.0.0.1:9000"), ("raw_env", ["A=1", "B=x=y"]), ("raw_env", "A=1"),
]


@pytest.mark.parametrize("name, value", GUNICORN_VALUES, ids=["%s=%r" % item for item in GUNICORN_VALUES])
def test_a_value_gunicorn_accepts_is_accepted(name, value):
    gunicorn_config = pytest.importorskip("gunicorn.config", reason="gunicorn is not installed")
    theirs = gunicorn_config.Config()
    theirs.set(name, value)  # the oracle: gunicorn takes it
    ours = Config(**{GUNICORN_ALIASES[name]: value})
    got = getattr(ours, GUNICORN_ALIASES[name])
    expected = theirs.settings[name].get()
    if name.startswith("limit_request") and expected == 0:
        from greenserve.settings import UNLIMITED

        assert got == UNLIMITED[name]  # gunicorn's "no limit", as the largest greenserve takes
    elif name == "bind":
        assert got == expected
    else:
        assert same_value(got, str(expected)), (got, expected)


def test_a_value_gunicorn_refuses_is_refused_with_the_setting_named():
    for name, value in (("capture_output", "maybe"), ("workers", "four"), ("raw_env", ["NOEQUALS"]),
                        ("graceful_timeout", -1), ("keepalive", "soon")):
        with pytest.raises(SettingError, match=GUNICORN_ALIASES[name]):
            Config(**{GUNICORN_ALIASES[name]: value})


def test_unix_double_slash_is_relative_to_the_directory_as_in_gunicorn(tmp_path):
    # gunicorn's util.parse_address: "unix://tmp/nginx.socket" is tmp/nginx.socket (Heroku's
    # nginx buildpack writes it so); "unix:///tmp/x" is /tmp/x.
    (tmp_path / "tmp").mkdir()
    with Serving(tmp_path, 'bind = "unix://tmp/nginx.socket"\n', port=False) as served:
        path = str(tmp_path / "tmp" / "nginx.socket")
        wait_until(lambda: (tmp_path / "tmp" / "nginx.socket").exists(), 20, "the unix socket")
        status, _, body = http_get(None, unix=path)
        assert status == "HTTP/1.1 200 OK" and body == b"hello"
    assert served.process.returncode == 0, served.err


def test_gunicorn_reads_the_environment_variables_as_greenserve_does(tmp_path):
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", "timeout = 20\n")
    env = {"FORWARDED_ALLOW_IPS": "10.0.0.5,10.0.0.6", "SENDFILE": "0"}
    theirs = gunicorn_print_config(tmp_path, "-c", "gunicorn.conf.py", "app:app", env=env)
    ours = printed(run_cli("-c", "gunicorn.conf.py", "--print-config", cwd=tmp_path, env=env))
    assert same_value(ours["forwarded_allow_ips"][0], theirs["forwarded_allow_ips"])
    assert ours["forwarded_allow_ips"][1] == "env FORWARDED_ALLOW_IPS"
    # gunicorn prints the setting (None); its Config.sendfile property reads SENDFILE: off.
    assert ours["sendfile"] == (False, "env SENDFILE")
    # A file's value wins over the variable, as over PORT.
    write(tmp_path, "gunicorn.conf.py", "forwarded_allow_ips = '10.0.0.9'\n")
    ours = printed(run_cli("-c", "gunicorn.conf.py", "--print-config", cwd=tmp_path, env=env))
    assert ours["forwarded_allow_ips"] == (["10.0.0.9"], "file gunicorn.conf.py:1")


FILE_APP = """
import os

def app(environ, start_response):
    if environ["PATH_INFO"] == "/file":
        start_response("200 OK", [("Content-Length", str(os.path.getsize(__file__)))])
        return environ["wsgi.file_wrapper"](open(__file__, "rb"))
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [os.environ.get("MULTIPROC", "unset").encode()]
"""


def test_sendfile_off_still_sends_files_by_reading_them(tmp_path):
    write(tmp_path, "app.py", FILE_APP)
    with Serving(tmp_path, "sendfile = False\n") as served:
        status, _, body = http_get(served.port, "/file")
        assert status == "HTTP/1.1 200 OK" and body == (tmp_path / "app.py").read_bytes()


# --- raw_env -----------------------------------------------------------------------------------------


def test_raw_env_reaches_the_hooks_and_the_application(tmp_path):
    # The file of the issue: PROMETHEUS_MULTIPROC_DIR set through raw_env, read by worker_exit.
    write(tmp_path, "app.py", FILE_APP)
    (tmp_path / "prom").mkdir()
    conf = """
        import os

        raw_env = ["MULTIPROC=%s", "OTHER=a=b"]

        def on_starting(server):
            server.log.info("on_starting sees %%s", os.environ["MULTIPROC"])

        def worker_exit(server, worker):
            server.log.info("worker_exit sees %%s", os.environ["MULTIPROC"])
    """ % (tmp_path / "prom")
    with Serving(tmp_path, conf) as served:
        assert http_get(served.port)[2] == str(tmp_path / "prom").encode()
    assert served.process.returncode == 0, served.err
    assert "on_starting sees %s" % (tmp_path / "prom") in served.err
    assert "worker_exit sees %s" % (tmp_path / "prom") in served.err
    assert "raised" not in served.err, served.err


def test_env_flag_is_raw_env_and_a_bad_entry_is_one_line(tmp_path):
    write(tmp_path, "app.py", APP)
    assert printed(run_cli("--print-config", "-e", "A=1", "--env", "B=2", cwd=tmp_path))["raw_env"] == (
        ["A=1", "B=2"], "flag")
    assert_usage_error(run_cli("--print-config", "-e", "NOEQUALS", cwd=tmp_path), "--env: ", "'NOEQUALS' is not KEY=VALUE")


# --- what hooks are given -------------------------------------------------------------------------------

# Each line a hook's read of the server or worker object, as gunicorn.conf.py files in the wild
# read gunicorn's Arbiter and Worker (and its docs' examples/example_config.py).
HOOKS_READING_THE_ARBITER = """
import os

workers = 2
accesslog = "-"
preload_app = False

def on_starting(server):
    server.log.info("ON_STARTING address=%r", server.address)
    server.log.info("ON_STARTING listeners=%s", ",".join(str(l) for l in server.LISTENERS))
    server.log.info("ON_STARTING cfg=%s %s %s %s", server.cfg.workers, server.cfg.accesslog, server.cfg.preload_app,
                    server.app.cfg.bind)
    server.log.info("ON_STARTING app_uri=%s proc_name=%s num_workers=%d pid_ok=%s timeout=%s class=%s",
                    server.app.app_uri, server.proc_name, server.num_workers, server.pid == os.getpid(),
                    server.timeout, server.cfg.worker_class_str)

def when_ready(server):
    server.log.info("WHEN_READY workers=%d", len(server.WORKERS))

def post_fork(server, worker):
    server.log.info("Worker spawned (pid: %s) age=%s sockets=%d", worker.pid, worker.age, len(worker.sockets))

def post_worker_init(worker):
    worker.log.info("POST_WORKER_INIT wsgi=%s cfg.workers=%s max_requests=%s", callable(worker.wsgi),
                    worker.cfg.workers, worker.max_requests)

def pre_fork(server, worker):
    pass

def worker_exit(server, worker):
    server.log.info("WORKER_EXIT alive=%s", worker.alive)

def child_exit(server, worker):
    server.log.info("CHILD_EXIT pid=%s", worker.pid)
"""


def test_hooks_read_the_server_and_worker_as_gunicorns_arbiter_offers_them(tmp_path):
    with Serving(tmp_path, HOOKS_READING_THE_ARBITER) as served:
        assert http_get(served.port)[0] == "HTTP/1.1 200 OK"
        wait_until(lambda: len(children_of(served.process.pid)) == 2, 20, "two workers")
        first = set(children_of(served.process.pid))
        served.process.send_signal(signal.SIGHUP)
        # The old generation stops once the new one serves.
        wait_until(lambda: not first & set(children_of(served.process.pid)), 20, "the new workers serving")
        assert http_get(served.port)[0] == "HTTP/1.1 200 OK"
    err = served.err
    assert served.process.returncode == 0, err
    assert "raised" not in err and "Traceback" not in err, err
    assert "ON_STARTING address=[('127.0.0.1', %d)]" % served.port in err
    assert "ON_STARTING listeners=http://127.0.0.1:%d" % served.port in err
    assert "ON_STARTING cfg=2 - False ['127.0.0.1:%d']" % served.port in err
    assert "ON_STARTING app_uri=app:app proc_name=app:app num_workers=2 pid_ok=True timeout=30.0 class=gevent" in err
    assert "WHEN_READY workers=2" in err
    assert err.count("Worker spawned (pid: ") >= 4  # two, then two more after the HUP
    assert "POST_WORKER_INIT wsgi=True cfg.workers=2 max_requests=%d" % sys.maxsize in err  # gunicorn: none
    assert "WORKER_EXIT alive=False" in err and "CHILD_EXIT pid=" in err


def test_hooks_can_signal_the_master_through_gunicorns_methods(tmp_path):
    # A when_ready that asks for a reload and a kill_worker, as some deploy scripts' hooks do.
    conf = """
        import signal

        done = []

        def when_ready(server):
            if not done:
                done.append(1)
                pid = sorted(server.WORKERS)[0]
                server.log.info("KILLING %s", pid)
                server.kill_worker(pid, signal.SIGTERM)
    """
    with Serving(tmp_path, conf, "--workers", "2") as served:
        seen = set()

        def replaced():
            seen.update(children_of(served.process.pid))
            return len(seen) >= 3

        wait_until(replaced, 20, "the signalled worker replaced")
        assert http_get(served.port)[0] == "HTTP/1.1 200 OK"
    assert served.process.returncode == 0, served.err
    killed = served.err.split("KILLING ", 1)[1].split()[0]
    # (exited 0 if it already served, killed by SIGTERM if its handlers were not set yet)
    replaced = [line for line in served.err.splitlines() if "(pid %s)" % killed in line and "starting another" in line]
    assert len(replaced) == 1, served.err


# --- logconfig_dict with gunicorn's loggers ------------------------------------------------------

LOGCONFIG_DICT = """
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "pythonjsonlogger.json.JsonFormatter",
                            "fmt": "%(asctime)s %(name)s %(levelname)s %(message)s"}},
    "handlers": {"out": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stdout"}},
    "root": {"level": "WARNING", "handlers": ["out"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["out"], "propagate": False},
        "gunicorn.access": {"level": "INFO", "handlers": ["out"], "propagate": False},
    },
}
"""


def test_a_logconfig_dict_for_gunicorns_loggers_writes_greenserves_logs(tmp_path):
    pytest.importorskip("pythonjsonlogger", reason="python-json-logger is not installed")
    with Serving(tmp_path, LOGCONFIG_DICT) as served:
        http_get(served.port, "/seen")
    assert served.process.returncode == 0, served.err
    records = [json.loads(line) for line in served.out.splitlines()]
    names = {record["name"] for record in records}
    assert names == {"gunicorn.error", "gunicorn.access"}, records
    assert any("listening on" in record["message"] for record in records if record["name"] == "gunicorn.error")
    access = [record for record in records if record["name"] == "gunicorn.access"]
    assert len(access) == 1 and access[0]["path"] == "/seen" and access[0]["status"] == 200, access
    assert served.err == "", served.err


def test_a_dict_naming_only_gunicorns_loggers_is_completed_with_gunicorns_defaults(tmp_path):
    # The dict names gunicorn's "console" handler without defining it: gunicorn completes the
    # dict with its CONFIG_DEFAULTS, so this file works under gunicorn, and here.
    conf = """
        logconfig_dict = {
            "loggers": {"gunicorn.error": {"level": "INFO", "handlers": ["console"], "propagate": False}},
        }
    """
    with Serving(tmp_path, conf) as served:
        http_get(served.port)
    assert served.process.returncode == 0, served.err
    assert "listening on http://127.0.0.1:%d" % served.port in served.out  # gunicorn's console: stdout


def test_a_dict_that_leaves_the_error_log_nowhere_is_said_and_the_log_kept(tmp_path):
    # disable_existing_loggers without configuring the error log, as some Django settings do:
    # gunicorn's own error log would be silenced; greenserve keeps --error-log and says so.
    conf = """
        logconfig_dict = {
            "version": 1,
            "disable_existing_loggers": True,
            "handlers": {"null": {"class": "logging.NullHandler"}},
            "loggers": {"greenserve.error": {"handlers": ["null"], "propagate": False}},
        }
    """
    with Serving(tmp_path, conf) as served:
        http_get(served.port)
    assert served.process.returncode == 0, served.err
    warnings = [line for line in served.err.splitlines() if "greenserve.error" in line and "[WARNING]" in line]
    assert len(warnings) == 1 and "--error-log - instead" in warnings[0], served.err
    assert "listening on" in served.err  # nothing lost


# --- app factories, keepalive 0 -------------------------------------------------------------------------

FACTORY = """
def create_app(environment, debug=False, extra=None):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [("%s %s %s" % (environment, debug, extra)).encode()]
    return app
"""


@pytest.mark.parametrize("spec, body", [
    ('factory:create_app("production")', b"production False None"),
    ("factory:create_app('staging', debug=True, extra=[1, {'a': 2}])", b"staging True [1, {'a': 2}]"),
])
def test_a_factory_with_literal_arguments_as_gunicorn_takes_it(tmp_path, spec, body):
    write(tmp_path, "factory.py", FACTORY)
    with Serving(tmp_path, "", app=spec) as served:
        assert http_get(served.port)[2] == body
    assert served.process.returncode == 0, served.err


@pytest.mark.parametrize("spec, fragment", [
    ("factory:create_app(os.environ)", "a factory's arguments must be literals"),
    ("factory:create_app(", "cannot read"),
    ("factory:(lambda: 1)()", "the factory must be named"),
])
def test_a_factory_call_that_is_not_literal_is_one_line(tmp_path, spec, fragment):
    write(tmp_path, "factory.py", FACTORY)
    assert_usage_error(run_cli("check", spec, cwd=tmp_path), fragment)


def test_keepalive_zero_closes_after_each_response_as_gunicorn(tmp_path):
    with Serving(tmp_path, "keepalive = 0\n") as served:
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break  # closed by the server after the response
                data += chunk
        assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\nConnection: close\r\n" in data, data
    assert served.process.returncode == 0, served.err


# --- how a gunicorn file is read where the two servers' names differ -------------------------------


def test_what_gunicorn_reads_differently_is_one_warning_each(tmp_path):
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", """
        loglevel = "warn"
        preload = True
        accesslog = "-"
        forwarded_allow_ips = "10.0.0.1"
        proxy_allow_ips = "10.0.0.2,10.0.0.1"
    """)
    result = run_cli("-c", "gunicorn.conf.py", "--print-config", "app:app", cwd=tmp_path)
    ours = printed(result)
    warnings = result.stderr.splitlines()
    assert len(warnings) == 3, result.stderr
    # gunicorn logs at info for a level it does not know; so does greenserve, and says so.
    assert "gunicorn.conf.py:1: loglevel = 'warn' is no level gunicorn knows: it logs at info" in warnings[0]
    assert ours["log_level"][0] == "info"
    # gunicorn 27's two trust lists are one here: both, in one list.
    assert "proxy_allow_ips and forwarded_allow_ips (line 4) are one list in greenserve" in warnings[1]
    assert ours["forwarded_allow_ips"][0] == ["10.0.0.1", "10.0.0.2"]
    # A name of greenserve's own that gunicorn would ignore: applied, and said.
    assert "greenserve's own names, which gunicorn ignores and greenserve applies: preload (line 2; " \
           "gunicorn's name: preload_app)" in warnings[2]
    assert ours["preload"] == (True, "file gunicorn.conf.py:2")


def test_the_same_trust_list_under_both_names_is_silent(tmp_path):
    write(tmp_path, "conf.py", "forwarded_allow_ips = '*'\nproxy_allow_ips = ['*']\n")
    result = run_cli("-c", "conf.py", "--print-config", cwd=tmp_path)
    assert printed(result)["forwarded_allow_ips"][0] == ["*"] and result.stderr == "", result.stderr


def test_post_worker_init_may_set_the_workers_request_limit_as_in_gunicorn(tmp_path):
    # gunicorn.conf.py files add a jitter of their own: worker.max_requests is the worker's limit.
    conf = """
        def post_worker_init(worker):
            worker.max_requests = 3
    """
    with Serving(tmp_path, conf, "--workers", "1") as served:
        # The master listens before it forks: the first worker is the one that answers.
        assert http_get(served.port)[0] == "HTTP/1.1 200 OK"
        first = set(children_of(served.process.pid))
        assert first, "the worker that answered is not among the master's children"
        for _ in range(2):
            assert http_get(served.port)[0] == "HTTP/1.1 200 OK"
        wait_until(lambda: set(children_of(served.process.pid)) - first, 20, "the replacement worker")
        wait_until(lambda: not first & set(children_of(served.process.pid)), 20, "the first worker gone")
    assert served.process.returncode == 0, served.err
    assert "served 3 requests (the limit post_worker_init set, 3): starting its replacement" in served.err, served.err

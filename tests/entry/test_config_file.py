"""``greenserve -c FILE``, GREENSERVE_CMD_ARGS, PORT, WEB_CONCURRENCY, ``--print-config`` and the
config file read again on SIGHUP, through the CLI in real subprocesses (loopback only, every run
bounded in time), with the installed gunicorn as the oracle of what a gunicorn.conf.py means.
"""

import ast
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from greenserve.entry.configfile import GUNICORN_ALIASES, GUNICORN_APP, GUNICORN_UNUSED
from greenserve.settings import SETTINGS, SETTINGS_BY_NAME
from tests.entry.test_cli import assert_usage_error
from tests.conftest import children_of, free_port, greenserve_command, subprocess_env, wait_for_port, wait_until

pytestmark = pytest.mark.timeout(90)

RUN_TIMEOUT = 30

APP = """
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]
"""


def write(directory, name, source):
    path = directory / name
    path.write_text(textwrap.dedent(source).lstrip("\n"), encoding="utf-8")
    return path


def run_cli(*args, cwd, env=None):
    # No PORT, WEB_CONCURRENCY or GREENSERVE_CMD_ARGS from the environment the tests run in.
    environ = subprocess_env(**(env or {}))
    for name in ("PORT", "WEB_CONCURRENCY", "GREENSERVE_CMD_ARGS"):
        if name not in (env or {}):
            environ.pop(name, None)
    return subprocess.run(
        greenserve_command(*args), cwd=str(cwd), env=environ, capture_output=True, text=True, timeout=RUN_TIMEOUT
    )


def printed(result):
    """--print-config's lines as {name: (value, source)}: split at the first ' = ' and the last '  # '."""
    assert result.returncode == 0, result.stderr
    settings = {}
    for line in result.stdout.splitlines():
        if line.startswith("#"):
            continue
        name, _, rest = line.partition(" = ")
        value, _, source = rest.rpartition("  # ")
        settings[name.strip()] = (ast.literal_eval(value.strip()), source)
    return settings


# --- the file ---------------------------------------------------------------------------------------


def test_the_file_sets_settings_and_print_config_says_where_from(tmp_path):
    write(tmp_path, "conf.py", """
        import os
        import multiprocessing
        from os import environ
        from collections import OrderedDict

        _helper = 3
        workers = 2 + 1
        keepalive = 7
        limit_request_line = 2048
        bind = ["127.0.0.1:9001", "unix:/tmp/greenserve-test.sock"]
        server_header = environ.get("NO_SUCH_VARIABLE", "edge")
    """)
    settings = printed(run_cli("-c", "conf.py", "--print-config", cwd=tmp_path))
    assert settings["workers"] == (3, "file conf.py:7")
    assert settings["keepalive"] == (7.0, "file conf.py:8")
    assert settings["limit_request_line"] == (2048, "file conf.py:9")
    assert settings["bind"] == (["127.0.0.1:9001", "unix:/tmp/greenserve-test.sock"], "file conf.py:10")
    assert settings["server_header"] == ("edge", "file conf.py:11")
    assert settings["timeout"] == (30.0, "default")
    # Every setting of the table, once, in its order.
    assert list(settings) == [setting.name for setting in SETTINGS]


def test_print_config_output_is_itself_a_config_file(tmp_path):
    write(tmp_path, "conf.py", """
        workers = 3
        umask = 0o027
        access_log_format = '%(h)s "%(r)s" %(s)s'
    """)
    first = run_cli("-c", "conf.py", "--print-config", "--timeout", "9", cwd=tmp_path)
    (tmp_path / "printed.py").write_text(first.stdout)
    again = printed(run_cli("-c", "printed.py", "--print-config", cwd=tmp_path))
    assert {name: value for name, (value, _) in again.items()} == {
        name: value for name, (value, _) in printed(first).items()
    }



def test_print_config_names_the_line_of_the_assignment_that_ran(tmp_path):
    # gpodder's shape: a value set on line 1, then again in a branch that does not run; a
    # loop; a re-assignment of the same value; an if/else; a name bound in a branch that
    # ran only through the environment. The text's last binding of each is the wrong line.
    write(tmp_path, "gunicorn.conf.py", """
        workers = 3
        import os
        for timeout in (10, 20, 30):
            if timeout == 20:
                break
        keepalive = 4
        if os.environ.get("DEPLOY") == "production":
            workers = 9
        keepalive = 4
        if os.environ.get("DEPLOY") == "staging":
            backlog = 100
        else:
            backlog = 200
        while False:
            keepalive = 1
        try:
            max_requests = int(os.environ["NO_SUCH_VARIABLE"])
        except KeyError:
            pass
        max_requests = 7 if os.environ.get("DEPLOY") else 5
    """)
    settings = printed(run_cli("-c", "gunicorn.conf.py", "--print-config", cwd=tmp_path))
    assert settings["workers"] == (3, "file gunicorn.conf.py:1")
    assert settings["timeout"] == (20, "file gunicorn.conf.py:3")
    assert settings["keepalive"] == (4, "file gunicorn.conf.py:9")
    assert settings["backlog"] == (200, "file gunicorn.conf.py:13")
    assert settings["max_requests"] == (5, "file gunicorn.conf.py:20")
    staged = printed(run_cli("-c", "gunicorn.conf.py", "--print-config", cwd=tmp_path, env={"DEPLOY": "staging"}))
    assert staged["backlog"] == (100, "file gunicorn.conf.py:11")
    assert staged["max_requests"] == (7, "file gunicorn.conf.py:20")
    production = printed(run_cli("-c", "gunicorn.conf.py", "--print-config", cwd=tmp_path, env={"DEPLOY": "production"}))
    assert production["workers"] == (9, "file gunicorn.conf.py:8")

def test_gunicorn_spellings_are_aliases(tmp_path):
    write(tmp_path, "gunicorn.conf.py", """
        accesslog = "-"
        errorlog = "errors.log"
        loglevel = "WARNING"
        pidfile = "/tmp/app.pid"
        preload_app = True
        worker_connections = 500
        user = 0
    """)
    settings = printed(run_cli("-c", "gunicorn.conf.py", "--print-config", cwd=tmp_path))
    assert settings["access_log"] == ("-", "file gunicorn.conf.py:1")
    assert settings["error_log"] == ("errors.log", "file gunicorn.conf.py:2")
    assert settings["log_level"] == ("warning", "file gunicorn.conf.py:3")
    assert settings["pid"] == ("/tmp/app.pid", "file gunicorn.conf.py:4")
    assert settings["preload"] == (True, "file gunicorn.conf.py:5")
    assert settings["worker_connections"] == (500, "file gunicorn.conf.py:6")
    assert settings["user"] == ("0", "file gunicorn.conf.py:7")  # gunicorn's numeric uid


@pytest.mark.parametrize(
    "source, fragments",
    [
        pytest.param("workers = 2\nworker = 4\n", ["worker (line 2: did you mean workers?)"], id="typo"),
        pytest.param("import os\n\ndef post_forkk(server, worker):\n    pass\n",
                     ["post_forkk (line 3: did you mean post_fork?)"], id="hook-typo"),
        pytest.param("keep_alive = 5\naccess_logfile = '-'\n",
                     ["keep_alive (line 1: did you mean keepalive?)", "access_logfile (line 2: did you mean accesslog?)"],
                     id="pre-19-names"),
        pytest.param("def helper():\n    return 2\n\nworkers = helper()\nlog_dir = '/var/log'\n",
                     ["the file's own names: helper, log_dir"], id="helpers"),
    ],
)
def test_names_that_are_no_setting_are_one_warning_and_the_file_loads(tmp_path, source, fragments):
    # gunicorn ignores them (its load_config_from_module_name_or_filename: "Ignore unknown
    # names"); a deploy must not fail over a helper, and a typo must still be seen.
    write(tmp_path, "conf.py", source)
    result = run_cli("-c", "conf.py", "--print-config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith(
        "greenserve: warning: conf.py: names that are no setting, ignored as gunicorn ignores them: "), warnings[0]
    for fragment in fragments:
        assert fragment in warnings[0], warnings[0]


def test_check_refuses_a_name_close_to_a_setting(tmp_path):
    write(tmp_path, "app.py", APP)
    write(tmp_path, "conf.py", "keep_alive = 5\nworkers_per_core = 2\n")
    result = run_cli("check", "-c", "conf.py", "app:app", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert "greenserve: error: conf.py: keep_alive: not settings, and close to one" in result.stderr, result.stderr
    # Names of the file's own alone pass the check.
    write(tmp_path, "conf.py", "workers_per_core = 2\n")
    result = run_cli("check", "-c", "conf.py", "app:app", cwd=tmp_path)
    assert result.returncode == 0, result.stderr


def test_the_same_setting_under_two_names_is_refused(tmp_path):
    write(tmp_path, "conf.py", "accesslog = '-'\naccess_log = 'x.log'\n")
    assert_usage_error(run_cli("-c", "conf.py", "--print-config", cwd=tmp_path),
                       "conf.py:2: access_log and accesslog (line 1) are the same setting")


def test_gunicorn_names_without_meaning_are_one_warning(tmp_path):
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", """
        worker_class = "gevent"
        threads = 4
        enable_backlog_metric = True
        workers = 2
        statsd_host = "localhost:8125"
        statsd_prefix = "web"
    """)
    result = run_cli("-c", "gunicorn.conf.py", "--print-config", "app:app", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    warnings = result.stderr.splitlines()
    assert len(warnings) == 1, result.stderr
    assert warnings[0].startswith("greenserve: warning: gunicorn.conf.py: "), warnings[0]
    for fragment in ("worker_class (greenserve is the gevent worker)", "threads ("):
        assert fragment in warnings[0], warnings[0]
    assert "statsd" not in warnings[0] and "backlog" not in warnings[0], warnings[0]
    # gunicorn 24.1's backlog metric is greenserve's too (gunicorn.backlog to statsd).
    assert printed(result)["enable_backlog_metric"] == (True, "file gunicorn.conf.py:3")
    assert printed(result)["workers"] == (2, "file gunicorn.conf.py:4")
    # gunicorn's statsd settings are greenserve's (the prefix as gunicorn writes it, with its dot).
    assert printed(result)["statsd_host"] == ("localhost:8125", "file gunicorn.conf.py:5")
    assert printed(result)["statsd_prefix"] == ("web.", "file gunicorn.conf.py:6")


@pytest.mark.parametrize(
    "source, fragments",
    [
        pytest.param("workers = 2\nbind = (\n", ["conf.py:2: syntax error"], id="syntax-error"),
        pytest.param("import json\n\nworkers = json.loads('{')\n", ["conf.py:3: JSONDecodeError"], id="exception"),
        pytest.param("workers = undefined_name\n", ["conf.py:1: NameError", "undefined_name"], id="name-error"),
        pytest.param("import sys\nsys.exit(3)\n", ["conf.py:2: the file called sys.exit(3)"], id="sys-exit"),
        pytest.param("workers = -2\n", ["conf.py:1: workers: must be at least 0"], id="bad-value"),
        pytest.param("preload_app = 'maybe'\n", ["conf.py:1: preload_app (preload): expected True or False"],
                     id="bad-alias-value"),
        pytest.param("chdir = 'no/such/dir'\n", ["conf.py:1: chdir: can't chdir to 'no/such/dir'"], id="chdir"),
        pytest.param("user = 'no-such-user'\n", ["conf.py:1: user: unknown user 'no-such-user'"], id="user"),
        pytest.param("wsgi_app = 42\n", ["conf.py:1: wsgi_app"], id="bad-wsgi-app"),
    ],
)
def test_a_file_that_does_not_load_is_one_line(tmp_path, source, fragments):
    write(tmp_path, "app.py", APP)
    write(tmp_path, "conf.py", source)
    assert_usage_error(run_cli("-c", "conf.py", "-b", "127.0.0.1:%d" % free_port(), "app:app", cwd=tmp_path), *fragments)


def test_a_missing_file_is_one_line(tmp_path):
    assert_usage_error(run_cli("-c", "nosuch.py", "--print-config", cwd=tmp_path), "-c nosuch.py", "No such file")


def test_wsgi_app_in_the_file_is_the_application_and_the_warning_is_said_once(tmp_path):
    write(tmp_path, "app.py", APP)
    port = free_port()
    write(tmp_path, "conf.py", "wsgi_app = 'app:app'\nbind = '127.0.0.1:%d'\nworkers = 2\nthreads = 8\n" % port)
    process = start(tmp_path, "-c", "conf.py")
    try:
        wait_for_port(port, 20, process)
        serving_workers(process, 2)
    finally:
        err = stop(process)
    warnings = [line for line in err.splitlines() if "threads" in line]
    assert len(warnings) == 1 and "[WARNING]" in warnings[0], err  # by the master, in the error log


# --- the environment and precedence -------------------------------------------------------------------


def test_precedence_defaults_file_environment_flags(tmp_path):
    write(tmp_path, "conf.py", """
        workers = 2
        timeout = 40
        backlog = 100
        keepalive = 9
    """)
    result = run_cli(
        "-c", "conf.py", "--print-config", "--timeout", "50", cwd=tmp_path,
        env={"GREENSERVE_CMD_ARGS": "--timeout 45 --backlog '200'"},
    )
    settings = printed(result)
    assert settings["max_requests"] == (0, "default")
    assert settings["workers"] == (2, "file conf.py:1")
    assert settings["keepalive"] == (9.0, "file conf.py:4")
    assert settings["backlog"] == (200, "env GREENSERVE_CMD_ARGS")
    assert settings["timeout"] == (50.0, "flag")


def test_greenserve_cmd_args_may_name_the_config_file(tmp_path):
    write(tmp_path, "conf.py", "workers = 4\n")
    settings = printed(run_cli("--print-config", cwd=tmp_path, env={"GREENSERVE_CMD_ARGS": "-c conf.py"}))
    assert settings["workers"] == (4, "file conf.py:1")


def test_port_and_web_concurrency_are_defaults_under_the_file(tmp_path):
    # As gunicorn: PORT and WEB_CONCURRENCY replace the defaults of bind and workers...
    env = {"PORT": "5123", "WEB_CONCURRENCY": "3"}
    settings = printed(run_cli("--print-config", cwd=tmp_path, env=env))
    assert settings["bind"] == (["0.0.0.0:5123"], "env PORT")
    assert settings["workers"] == (3, "env WEB_CONCURRENCY")
    # ... and a config file, GREENSERVE_CMD_ARGS or a flag overrides them.
    write(tmp_path, "conf.py", "bind = '127.0.0.1:6000'\n")
    settings = printed(run_cli("-c", "conf.py", "--print-config", "-w", "5", cwd=tmp_path, env=env))
    assert settings["bind"] == (["127.0.0.1:6000"], "file conf.py:1")
    assert settings["workers"] == (5, "flag")


def test_port_binds_all_addresses(tmp_path):
    write(tmp_path, "app.py", APP)
    port = free_port()
    process = start(tmp_path, "app:app", env={"PORT": str(port)})
    try:
        wait_for_port(port, 20, process)  # 127.0.0.1 is one of 0.0.0.0's
    finally:
        stop(process)


@pytest.mark.parametrize(
    "env, fragments",
    [
        pytest.param({"PORT": "http"}, ["PORT='http'", "invalid port"], id="port"),
        pytest.param({"WEB_CONCURRENCY": "many"}, ["WEB_CONCURRENCY='many'", "expected an integer"], id="web-concurrency"),
        pytest.param({"GREENSERVE_CMD_ARGS": "--workers x"}, ["GREENSERVE_CMD_ARGS: --workers: expected an integer"],
                     id="cmd-args-value"),
        pytest.param({"GREENSERVE_CMD_ARGS": "--wrkers 2"}, ["GREENSERVE_CMD_ARGS: unknown flag --wrkers"],
                     id="cmd-args-flag"),
        pytest.param({"GREENSERVE_CMD_ARGS": "--server-header 'unclosed"}, ["GREENSERVE_CMD_ARGS: ", "quotation"],
                     id="cmd-args-quote"),
        pytest.param({"GREENSERVE_CMD_ARGS": "app:app"}, ["GREENSERVE_CMD_ARGS holds flags only"], id="cmd-args-app"),
    ],
)
def test_a_bad_environment_value_names_the_variable(tmp_path, env, fragments):
    assert_usage_error(run_cli("--print-config", cwd=tmp_path, env=env), *fragments)


def test_print_config_neither_binds_nor_imports_the_app(tmp_path):
    write(tmp_path, "app.py", "raise RuntimeError('imported')\n")
    with __import__("socket").socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_cli("--print-config", "-b", "127.0.0.1:%d" % port, "app:app", cwd=tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert printed(result)["bind"] == (["127.0.0.1:%d" % port], "flag")


# --- gunicorn: its names, and its reading of the same file ----------------------------------------------


def test_gunicorn_names_match_the_installed_gunicorn():
    config = pytest.importorskip("gunicorn.config", reason="gunicorn is not installed")
    theirs = {setting.name for setting in config.KNOWN_SETTINGS}
    ours = set(GUNICORN_ALIASES) | set(GUNICORN_UNUSED) | {GUNICORN_APP}
    assert len(ours) == len(GUNICORN_ALIASES) + len(GUNICORN_UNUSED) + 1  # each name in one list
    assert ours == theirs, "gunicorn's settings changed: new %s, gone %s" % (sorted(theirs - ours), sorted(ours - theirs))
    for ours in GUNICORN_ALIASES.values():
        assert ours in SETTINGS_BY_NAME, ours
    # A name greenserve has come to take (a hook, a TLS option) is an alias, not "no meaning".
    assert not set(GUNICORN_UNUSED) & set(SETTINGS_BY_NAME), set(GUNICORN_UNUSED) & set(SETTINGS_BY_NAME)


def test_reuse_port_beside_a_unix_bind_in_a_file_is_ignored_with_one_warning(tmp_path):
    # gunicorn sets SO_REUSEPORT on TCP sockets only: the option means nothing on unix:.
    path = tmp_path / "app.sock"
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", """
        bind = "unix:%s"
        workers = 2
        reuse_port = True
    """ % path)
    result = run_cli("-c", "gunicorn.conf.py", "--print-config", "app:app", cwd=tmp_path)
    assert printed(result)["reuse_port"] == (False, "file gunicorn.conf.py:3")
    assert result.stderr.splitlines() == [
        "greenserve: warning: gunicorn.conf.py:3: reuse_port = True with unix:%s: ignored, as gunicorn ignores "
        "it on a socket that is not TCP; the workers share the master's sockets. Leave reuse_port out (or "
        "bind HOST:PORT addresses only)" % path
    ]
    assert gunicorn_print_config(tmp_path, "-c", "gunicorn.conf.py", "app:app")["reuse_port"] == "True"
    # And it serves, both workers on the master's one socket.
    process = start(tmp_path, "-c", "gunicorn.conf.py", "app:app")
    try:
        serving_workers(process, 2)
        wait_until(path.exists, 20, "the unix socket")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(10)
            client.connect(str(path))
            client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = b""
            while True:
                data = client.recv(65536)
                if not data:
                    break
                answer += data
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\nhello"), answer
    finally:
        err = stop(process)
    assert err.count("reuse_port = True with unix:") == 1
    assert process.returncode == 0, err


def test_reuse_port_and_a_unix_bind_as_flags_stay_an_error(tmp_path):
    # Typed as greenserve's flag it asks for a socket per worker, which a unix socket cannot be.
    assert_usage_error(
        run_cli("--reuse-port", "-b", "unix:%s" % (tmp_path / "s.sock"), "--print-config", cwd=tmp_path),
        "--reuse-port works only with HOST:PORT addresses",
    )


def test_a_gunicorn_27_file_with_proxy_protocol_and_reload_extra_files_loads(tmp_path):
    # gunicorn 27 spells proxy_protocol as a word and the PROXY peers as proxy_allow_ips; its
    # reload_extra_files is --reload-extra-file.
    write(tmp_path, "conf.py", """
        proxy_protocol = "v2"
        proxy_allow_ips = "10.0.0.5"
        reload = True
        reload_extra_files = ["templates/index.html"]
    """)
    settings = printed(run_cli("-c", "conf.py", "--print-config", cwd=tmp_path))
    assert settings["proxy_protocol"][0] is True
    assert settings["forwarded_allow_ips"] == (["10.0.0.5"], "file conf.py:2"), settings["forwarded_allow_ips"]
    assert settings["reload_extra_file"][0] == ["templates/index.html"]
    write(tmp_path, "conf.py", 'proxy_protocol = "v3"\n')
    assert_usage_error(run_cli("-c", "conf.py", "--print-config", cwd=tmp_path),
                       "conf.py:1: proxy_protocol: expected True or False (or gunicorn's off, v1, v2 or auto), got 'v3'")


def gunicorn_print_config(tmp_path, *args, env=None):
    """gunicorn's own --print-config: ``name = str(value)`` per line, sorted, names padded."""
    environ = subprocess_env(**(env or {}))
    for name in ("PORT", "WEB_CONCURRENCY", "GUNICORN_CMD_ARGS"):
        if name not in (env or {}):
            environ.pop(name, None)
    result = subprocess.run(
        [sys.executable, "-m", "gunicorn", "--print-config", *args], cwd=str(tmp_path), env=environ,
        capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    values = {}
    for line in result.stdout.splitlines():
        name, sep, value = line.partition(" = ")
        if sep:
            values[name.strip()] = value
    return values


def same_value(ours, theirs):
    """Whether our value (a Python value) and gunicorn's printed ``str(value)`` mean the same.

    The normalizations, each because the two tables hold one meaning in different types:
    numbers compare as numbers (gunicorn keeps ``timeout = 45`` an int, our seconds are floats;
    gunicorn prints ``umask = 0o027`` in decimal, 23); a uid or gid compares as its decimal text
    (gunicorn resolves ``user`` to an int, we keep the name or id the user wrote, as text); a
    list prints as its repr in both; strings, booleans and None as their str.
    """
    if isinstance(ours, bool) or ours is None:
        return str(ours) == theirs
    if isinstance(ours, (int, float)):
        return float(ours) == float(theirs)
    if isinstance(ours, list):
        return ours == ast.literal_eval(theirs)
    return str(ours) == theirs


def test_gunicorn_reads_the_same_file_the_same_way(tmp_path):
    pytest.importorskip("gunicorn", reason="gunicorn is not installed")
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", """
        import os

        bind = ["127.0.0.1:8123", "[::1]:8124"]
        workers = 3
        timeout = 45
        graceful_timeout = 12
        keepalive = 7
        backlog = 512
        max_requests = 1000
        max_requests_jitter = 50
        worker_connections = 500
        limit_request_line = 2048
        limit_request_fields = 50
        limit_request_field_size = 4096
        accesslog = "-"
        errorlog = "-"
        loglevel = "warning"
        access_log_format = '%(h)s "%(r)s" %(s)s %(D)s'
        preload_app = True
        reuse_port = True
        daemon = False
        pidfile = "/tmp/greenserve-oracle.pid"
        umask = 0o027
        user = os.getuid()
        group = os.getgid()
        chdir = os.path.dirname(os.path.abspath(__file__))
        forwarded_allow_ips = "10.0.0.0/8,127.0.0.1"
        root_path = "/app"
        certfile = None
        worker_class = "gevent"
    """)
    # The same flags in the environment and on the command line, to compare the precedence too.
    theirs = gunicorn_print_config(
        tmp_path, "-c", "gunicorn.conf.py", "--max-requests", "7", "app:app",
        env={"GUNICORN_CMD_ARGS": "--backlog 99 --max-requests 8"},
    )
    ours = printed(run_cli(
        "-c", "gunicorn.conf.py", "--print-config", "--max-requests", "7", "app:app", cwd=tmp_path,
        env={"GREENSERVE_CMD_ARGS": "--backlog 99 --max-requests 8"},
    ))
    compared = 0
    for name, ours_name in GUNICORN_ALIASES.items():
        value, source = ours[ours_name]
        if source == "default":
            continue  # defaults differ by design (keepalive 2 s there, 5 s here): the file's values count
        if name != ours_name and ours_name in GUNICORN_ALIASES:
            continue  # gunicorn's other name for it (proxy_allow_ips): the file set it by this one
        assert same_value(value, theirs[name]), (name, value, theirs[name])
        compared += 1
    assert compared == 27  # every setting the file sets but worker_class (no meaning here)
    assert theirs["backlog"] == "99" and theirs["max_requests"] == "7"


def test_gunicorn_takes_port_and_web_concurrency_the_same_way(tmp_path):
    pytest.importorskip("gunicorn", reason="gunicorn is not installed")
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", "timeout = 20\n")
    env = {"PORT": "5123", "WEB_CONCURRENCY": "3"}
    theirs = gunicorn_print_config(tmp_path, "-c", "gunicorn.conf.py", "app:app", env=env)
    ours = printed(run_cli("-c", "gunicorn.conf.py", "--print-config", cwd=tmp_path, env=env))
    for name in ("bind", "workers", "timeout"):
        assert same_value(ours[name][0], theirs[name]), (name, ours[name], theirs[name])


# --- SIGHUP: the file read again --------------------------------------------------------------------


def start(cwd, *args, env=None):
    environ = subprocess_env(**(env or {}))
    for name in ("PORT", "WEB_CONCURRENCY", "GREENSERVE_CMD_ARGS"):
        if name not in (env or {}):
            environ.pop(name, None)
    return subprocess.Popen(
        greenserve_command(*args), cwd=str(cwd), env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )


def stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=20)[1]
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()[1]


class Served:
    """The CLI serving app:app with ``-c conf.py`` (its bind from the file), its stderr once stopped."""

    def __init__(self, tmp_path, source):
        write(tmp_path, "app.py", APP)
        self.port = free_port()
        self.conf = tmp_path / "conf.py"
        self.write(source)
        self.process = start(tmp_path, "-c", "conf.py", "app:app")
        self.stderr = None

    def write(self, source):
        self.conf.write_text("bind = '127.0.0.1:%d'\n" % self.port + textwrap.dedent(source))

    def __enter__(self):
        try:
            wait_for_port(self.port, 20, self.process)
        except BaseException:
            stop(self.process)
            raise
        return self

    def __exit__(self, *exc_info):
        self.stderr = stop(self.process)

    def hup(self):
        self.process.send_signal(signal.SIGHUP)


def serving_workers(process, count, replacing=()):
    """The master's ``count`` workers, once there are that many and none of them is in ``replacing``."""
    found = []

    def settled():
        found[:] = children_of(process.pid)
        return len(found) == count and not set(found) & set(replacing)

    wait_until(settled, 30, "%d workers" % count)
    return set(found)


def test_hup_applies_the_new_worker_count(tmp_path):
    with Served(tmp_path, "workers = 1\n") as served:
        first = serving_workers(served.process, 1)
        served.write("workers = 3\n")
        served.hup()
        serving_workers(served.process, 3, replacing=first)  # a new generation, all three of it
    err = served.stderr
    assert "SIGHUP: reloading: starting 3 new worker(s)" in err, err
    assert "restart" not in err, err


def test_hup_names_a_changed_bind_as_needing_a_restart(tmp_path):
    with Served(tmp_path, "timeout = 20\n") as served:
        process = served.process
        first = serving_workers(process, 1)
        served.conf.write_text("bind = '127.0.0.1:%d'\ntimeout = 20\nuser = %r\n" % (free_port(), str(os.getuid())))
        served.hup()
        wait_until(lambda: set(children_of(process.pid)) - first and len(children_of(process.pid)) == 1, 30,
                   "the new generation")
        wait_for_port(served.port, 5, process)  # still the old address: the master's sockets stay
    restart = [line for line in served.stderr.splitlines() if "restart" in line]
    assert len(restart) == 1, served.stderr
    assert "WARNING" in restart[0] and "bind, user changed" in restart[0], restart[0]


def test_hup_with_a_broken_file_keeps_the_workers(tmp_path):
    with Served(tmp_path, "workers = 2\n") as served:
        first = serving_workers(served.process, 2)
        served.write("workers = (\n")
        served.hup()
        # Given the time a reload takes to fork, the workers stay the same processes.
        time.sleep(2)
        assert set(children_of(served.process.pid)) == first
        wait_for_port(served.port, 5, served.process)
        # Fixed, one more SIGHUP reloads.
        served.write("workers = 1\n")
        served.hup()
        serving_workers(served.process, 1, replacing=first)
    errors = [line for line in served.stderr.splitlines() if "ERROR" in line]
    assert len(errors) == 1, served.stderr
    assert "SIGHUP: not reloading" in errors[0] and "conf.py:2: syntax error" in errors[0], errors[0]


# --- greenserve.run(config=PATH) ----------------------------------------------------------------------

RUN_WITH_CONFIG = """
import sys
import greenserve
from greenserve import WSGIServer
from greenserve.settings import SettingError


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"hello"]


try:
    code = greenserve.run(lambda listener: WSGIServer(listener, app, log=None), config="conf.py", timeout=20)
except SettingError as exc:
    print("SettingError: %s" % exc, file=sys.stderr)
    code = 2
sys.exit(code)
"""


def test_run_takes_a_config_file_and_reads_it_again_on_hup(tmp_path):
    script = write(tmp_path, "serve.py", RUN_WITH_CONFIG)
    port = free_port()
    conf = write(tmp_path, "conf.py", "bind = '127.0.0.1:%d'\nworkers = 1\n" % port)
    process = subprocess.Popen(
        [sys.executable, str(script)], cwd=str(tmp_path), env=subprocess_env(), stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_port(port, 20, process)
        first = serving_workers(process, 1)
        conf.write_text("bind = '127.0.0.1:%d'\nworkers = 2\n" % port)
        process.send_signal(signal.SIGHUP)
        serving_workers(process, 2, replacing=first)
    finally:
        err = stop(process)
    assert process.returncode == 0, err
    conf.write_text("workers = 'many'\n")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=str(tmp_path), env=subprocess_env(), capture_output=True, text=True,
        timeout=RUN_TIMEOUT,
    )
    assert result.stderr == "SettingError: conf.py:1: workers: expected an integer, got 'many'\n", result.stderr


HOOKS_IN_THE_FILE = """
import os

workers = 2
_LOG = %r


def _line(*words):
    with open(_LOG, "a") as log:
        log.write(" ".join(str(word) for word in words) + "\\n")


def when_ready(server):
    _line("when_ready", os.getpid())


def post_fork(server, worker):
    _line("post_fork", os.getpid(), worker.pid)


def child_exit(server, worker):
    _line("child_exit", os.getpid(), worker.pid)


def on_reload(server):
    _line("on_reload", os.getpid(), server.num_workers)
"""


def test_hooks_defined_in_the_file_run_as_gunicorn_runs_them(tmp_path):
    # A gunicorn.conf.py's hooks are functions at module level: the same file, unchanged, hooks
    # greenserve's master and workers; read again on SIGHUP, its new count reaches on_reload.
    log = tmp_path / "hooks.log"
    source = HOOKS_IN_THE_FILE % str(log)
    write(tmp_path, "conf.py", source)
    printed_lines = run_cli("-c", "conf.py", "--print-config", cwd=tmp_path)
    assert printed_lines.returncode == 0, printed_lines.stderr
    hook_line = [line for line in printed_lines.stdout.splitlines() if line.startswith("# post_fork ")]
    assert len(hook_line) == 1 and "<post_fork()>" in hook_line[0] and "conf.py:16" in hook_line[0], hook_line
    (tmp_path / "printed.py").write_text(printed_lines.stdout)  # still a config file that loads
    assert run_cli("-c", "printed.py", "--print-config", cwd=tmp_path).returncode == 0
    with Served(tmp_path, source) as served:
        master = served.process.pid
        first = serving_workers(served.process, 2)
        def said():
            return log.read_text() if log.exists() else ""

        wait_until(lambda: said().count("post_fork") == 2 and "when_ready" in said(), 10,
                   "post_fork in both workers and when_ready")
        victim = sorted(first)[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: "child_exit %d %d" % (master, victim) in said(), 10, "child_exit")
        # The replacement's post_fork before the HUP: a reload that comes first forks the new
        # generation instead of a replacement (one post_fork fewer, rightly).
        wait_until(lambda: said().count("post_fork") == 3, 10, "the replacement's post_fork")
        served.write(source.replace("workers = 2", "workers = 3"))
        served.hup()
        serving_workers(served.process, 3, replacing=first)
    lines = log.read_text().splitlines()
    assert "when_ready %d" % master in lines, lines
    assert "on_reload %d 3" % master in lines, lines
    forked = [line.split() for line in lines if line.startswith("post_fork ")]
    # Each in its worker (its own pid), and for every worker: 2, the replacement, 3 after the reload.
    assert len(forked) == 6 and all(words[1] == words[2] and int(words[1]) != master for words in forked), lines


def test_reload_reads_file_settings_relative_to_where_the_command_was_typed(tmp_path, monkeypatch):
    # At start the command makes certfile, keyfile and ca_certs absolute from where it was typed;
    # read again on SIGHUP, after --chdir (or a daemon's chdir to /), they must name the same files.
    from greenserve.entry import configfile

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    write(tmp_path, "conf.py", 'certfile = "cert.pem"\nkeyfile = "key.pem"\nca_certs = "ca.pem"\n')
    loader = configfile.Loader("conf.py")
    running = loader.load().config
    monkeypatch.chdir(tmp_path / "sub")
    fresh, warnings = loader.reload(running)
    assert fresh.ca_certs == str(tmp_path / "ca.pem")
    assert warnings == []  # certfile and keyfile did not change: no restart asked for

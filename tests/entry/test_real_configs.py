"""gunicorn configuration files written after those of public projects, read by gunicorn 27 and by greenserve.

Each file of tests/entry/gunicorn_configs/ stands for one real project's gunicorn configuration:
written for this corpus, it has the same settings with the same kinds of values, the same names
that are no setting, the same hooks and the same environment-driven computations (its README
says which project each stands for, and what the test makes for it). Third-party code is kept
out of the repository, so the projects' own files are not here.

Each file is copied, unchanged, into a fresh directory as gunicorn.conf.py, with whatever it
needs to load (environment variables, directories, certificates, small stand-ins for the
project's own modules: ``NEEDS`` below). gunicorn's own ``--print-config`` is the oracle: every
setting the file sets, as gunicorn reads it, must be what greenserve's ``--print-config`` says,
but for the differences decided on (``accepted_differences``); a file gunicorn refuses,
greenserve refuses too, with one line. The files that define hooks are then started for real:
the hooks run, SIGHUP reloads, requests are served, SIGTERM stops with exit code 0.
"""

import ast
import contextlib
import grp
import http.client
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time

import pytest

from greenserve.process.hooks import HOOKS_BY_NAME
from greenserve.entry.configfile import GUNICORN_ALIASES
from greenserve.settings import SETTINGS_BY_NAME
from tests.conftest import free_port, wait_for_port, wait_until
from tests.entry.test_cli import assert_usage_error
from tests.entry.test_config_file import (
    APP, gunicorn_print_config, printed, run_cli, same_value, serving_workers, start, stop,
)
from tests.process.test_reloader import POLLING_WARNING, without_watchfiles
from tests.test_tls import _ca, _signed

pytestmark = pytest.mark.timeout(120)

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gunicorn_configs")
FILES = sorted(name for name in os.listdir(CONFIGS) if name.endswith(".py"))
KINDS = ("image", "django", "flask", "example", "other")
HEADER = re.compile(
    r"# Written for greenserve's corpus; stands for the gunicorn configuration of "
    r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+ \([^)]+\): .+\.\r?$"
)


def source_of(name):
    with open(os.path.join(CONFIGS, name), encoding="utf-8", newline="") as source:
        return source.read()


def test_the_corpus_is_there():
    # At least 30 files, as the issue asks (Docker base images, Django and Flask projects, hooks, ...).
    assert len(FILES) >= 30, "%d configuration files in %s: see its README.md" % (len(FILES), CONFIGS)


@pytest.mark.parametrize("name", FILES)
def test_a_file_says_what_it_stands_for(name):
    # <kind>_<what it exercises>.py, a first line naming the project (owner/repo and path, no
    # address), and a row of the README.
    assert name.split("_", 1)[0] in KINDS, name
    first = source_of(name).split("\n", 1)[0]
    assert HEADER.match(first), first
    assert not re.search(r"https?://|www\.|github\.com", first), first
    with open(os.path.join(CONFIGS, "README.md"), encoding="utf-8") as readme:
        assert "| `%s` |" % name in readme.read(), "%s has no row in gunicorn_configs/README.md" % name


class Needs:
    """What one file needs to load and to serve, all of it made inside the test's directory.

    ``env`` values may say ``{tmp}`` for that directory; ``files`` are written there (a stand-in
    module the file imports, or an app.py in place of the test's own); ``tls`` names the
    certificate, key and CA files the file points at (made with the openssl command);
    ``modules`` are imported or the test is skipped; ``serve_flags`` are added when the file is
    started (flags override the file: a pid file in /var/run cannot be written here);
    ``leaves`` are absolute paths the file's own hooks write, removed after the run when they
    were not there before; ``not_served`` says why a file with hooks is not started;
    ``unix_relative``: the file binds a unix socket at a relative path, which the test binds as
    the file says (its ``dirs`` make the path's directory).
    """

    def __init__(self, env=None, dirs=(), files=None, tls=None, modules=(), serve_flags=(), leaves=(),
                 not_served=None, unix_relative=False):
        self.env = env or {}
        self.dirs = dirs
        self.files = files or {}
        self.tls = tls
        self.modules = modules
        self.serve_flags = serve_flags
        self.leaves = leaves
        self.not_served = not_served
        self.unix_relative = unix_relative


PROMETHEUS = Needs(env={"PROMETHEUS_MULTIPROC_DIR": "{tmp}/prometheus"}, dirs=["prometheus"])

NEEDS = {
    "flask_prometheus_exporter_hooks.py": Needs(
        modules=["prometheus_flask_exporter"],
        not_served="its when_ready starts a metrics server on 0.0.0.0:9200",
    ),
    "other_prometheus_child_exit_reload_mode.py": PROMETHEUS,
    "django_prometheus_child_exit_access_logfile.py": PROMETHEUS,
    "other_int_getenv_without_default.py": Needs(env={"TASKS_WORKERS": "3", "TASKS_THREADS": "2"}),
    "image_flask_json_logconfig_server_software.py": Needs(files={
        # The application's own config.py, which the image puts beside the file: the three names it imports.
        "config.py": "import logging\n\nJSON_LOGGER = True\nCONSOLE_LOG_LEVEL = logging.WARNING\n"
                     "CONSOLE_LOG_FORMAT_JSON = {'time': 'asctime', 'level': 'levelname', 'message': 'message'}\n",
    }),
    "other_tls_relative_cert_files.py": Needs(dirs=["logs"], tls={"certfile": "site.crt", "keyfile": "site.key"}),
    "other_tls_ssl_version_preload.py": Needs(
        tls={"certfile": "chain.pem", "keyfile": "key.pem", "ca_certs": "clients-ca.pem"},
    ),
    "image_graceful_zero_on_exit.py": Needs(
        # on_exit imports a module of the image's (from /opt/panel/ui there).
        files={"panel_events.py": "def record_event(*args, **kwargs):\n    pass\n"},
        serve_flags=["--pid", "ui.pid"],
    ),
    "image_flag_spellings_psycogreen_post_fork.py": Needs(files={
        # Its logger_class, which gunicorn imports when it starts.
        "txservice/__init__.py": "",
        "txservice/logs.py": "from gunicorn.glogging import Logger\n\n\nclass ServerLogger(Logger):\n    pass\n",
    }),
    "django_close_caches_post_fork.py": Needs(
        # post_fork closes Django's caches and when_ready reads settings.DEBUG: a Django settings module.
        env={"DJANGO_SETTINGS_MODULE": "django_settings"},
        files={"django_settings.py": "SECRET_KEY = 'test'\nDEBUG = False\nCACHES = {'default': "
                                     "{'BACKEND': 'django.core.cache.backends.locmem.LocMemCache'}}\n"},
    ),
    "other_post_worker_init_jitter_wsgi.py": Needs(files={
        # post_worker_init calls worker.wsgi(None, None), which the application takes as "set yourself up".
        "app.py": APP + "\n\n_app = app\n\n\ndef app(environ, start_response):\n"
                        "    if environ is None:\n        return None\n    return _app(environ, start_response)\n",
    }),
    # Logs and a pid file in directories of the server's: here, the error log on stderr (where the
    # test reads it) and the rest in the test's directory.
    "django_statsd_capture_output_string.py": Needs(
        serve_flags=["--pid", "server.pid", "--error-log", "-", "--access-log", "access.log"],
    ),
    "django_string_workers_dated_logs.py": Needs(serve_flags=["--error-log", "-", "--access-log", "access.log"]),
    "django_relative_unix_socket_banner.py": Needs(dirs=["tmp"], leaves=["/tmp/app-initialized"], unix_relative=True),
    "other_proxy_protocol_worker_exit.py": Needs(
        not_served="its worker_exit calls os._exit(4), gunicorn's exit code for an application that failed to "
                   "load: gunicorn itself stops on the first SIGHUP",
    ),
}

NOTHING = Needs()


def needs(name):
    return NEEDS.get(name, NOTHING)


def prepare(tmp_path, name):
    """The file as tmp_path/gunicorn.conf.py with app.py and what it needs; the environment to run it in."""
    need = needs(name)
    for module in need.modules:
        pytest.importorskip(module, reason="%s imports %s" % (name, module))
    shutil.copyfile(os.path.join(CONFIGS, name), tmp_path / "gunicorn.conf.py")
    (tmp_path / "app.py").write_text(APP, encoding="utf-8")
    for directory in need.dirs:
        (tmp_path / directory).mkdir()
    for file_name, text in need.files.items():
        (tmp_path / file_name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / file_name).write_text(text, encoding="utf-8")
    if need.tls:
        make_tls_files(tmp_path, need.tls)
    return {variable: value.format(tmp=tmp_path) for variable, value in need.env.items()}


def make_tls_files(tmp_path, names):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (needed to make the test certificates)")
    pki = tmp_path / "pki"
    pki.mkdir()
    _ca("ca", "/CN=Test CA", str(pki))
    _signed("server", "/CN=127.0.0.1", "ca", str(pki), server=True)
    made = {"certfile": "server.pem", "keyfile": "server.key", "ca_certs": "ca.pem"}
    for setting, file_name in names.items():
        shutil.copyfile(pki / made[setting], tmp_path / file_name)


def hooks_printed(result):
    """The hooks --print-config shows as comment lines: {name: (text of the value, source)}."""
    hooks = {}
    for line in result.stdout.splitlines():
        name, sep, rest = line[2:].partition(" = ")
        if line.startswith("# ") and sep and name.strip() in HOOKS_BY_NAME:
            value, _, source = rest.rpartition("  # ")
            hooks[name.strip()] = (value.strip(), source)
    return hooks


CERT_REQS = {"none": 0, "optional": 1, "required": 2}  # ssl.CERT_NONE, CERT_OPTIONAL, CERT_REQUIRED


def as_gunicorn_prints(name, ours, theirs):
    """(ours, theirs) with the differences of form only taken out: gunicorn resolves user and group
    to ids (None to our own), keeps cert_reqs as ssl's number, loglevel as written,
    proxy_protocol as a version, statsd_host as the (host, port) it parsed and statsd_prefix
    without the dot its statsd logger adds when it starts."""
    if name in ("user", "group") and (ours is None or not str(ours).isdigit()):
        if name == "user":
            ours = os.geteuid() if ours is None else pwd.getpwnam(ours).pw_uid
        else:
            ours = os.getegid() if ours is None else grp.getgrnam(ours).gr_gid
    elif name == "cert_reqs":
        ours = CERT_REQS.get(ours, ours)
    elif name == "log_level":
        theirs = theirs.lower()
    elif name == "proxy_protocol":
        theirs = str(theirs != "off")  # gunicorn 27 says v1, v2 or auto (its reading of True); ours is on or off
    elif name == "statsd_host" and theirs.startswith("("):
        theirs = "%s:%s" % ast.literal_eval(theirs)
    elif name == "statsd_prefix" and theirs and not theirs.endswith("."):
        theirs += "."  # gunicorn.instrument.statsd: the prefix used is the setting with one dot after it
    return ours, theirs


def differences(ours, hooks, theirs, defaults, accepted=()):
    """The settings the file sets, by gunicorn's reading or by ours, on which the two disagree.

    A setting counts as set when gunicorn prints another value than with no file, or when our
    source is not "default"; gunicorn's names for one of ours (proxy_allow_ips and
    forwarded_allow_ips, logconfig_dict and logconfig) are compared by whichever the file set.
    ``accepted``: our settings left out (accepted_differences).
    """
    found = []
    for ours_name in sorted(set(GUNICORN_ALIASES.values()) - set(accepted)):
        names = [name for name in GUNICORN_ALIASES if GUNICORN_ALIASES[name] == ours_name and name in theirs]
        set_there = [name for name in names if theirs[name] != defaults.get(name)]
        if ours_name in HOOKS_BY_NAME:
            value, source = hooks.get(ours_name, (None, "default"))
        else:
            value, source = ours[ours_name]
        if not set_there and source == "default":
            continue
        for name in set_there or [ours_name if ours_name in names else names[0]]:
            if ours_name in HOOKS_BY_NAME:
                agree = (source != "default") == bool(set_there)
            else:
                agree = same_value(*as_gunicorn_prints(ours_name, value, theirs[name]))
            if not agree:
                found.append("%s: gunicorn %s, greenserve %r (%s)" % (name, theirs[name], value, source))
    return found


def without_the_files_prints(result):
    """The run with its stdout from --print-config's heading on: a file may print too (the
    image_* files print their settings as JSON when they load)."""
    heading = result.stdout.find("# NAME = VALUE")
    stdout = result.stdout[heading:] if heading > 0 else result.stdout
    return subprocess.CompletedProcess(result.args, result.returncode, stdout=stdout, stderr=result.stderr)


def names_assigned(name):
    """The names the file assigns at module level (its settings, by whatever name, and its own)."""
    names = set()
    for node in ast.parse(source_of(name)).body:
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        names.update(target.id for target in targets if isinstance(target, ast.Name))
    return names


GUNICORN_LEVELS = ("critical", "error", "warning", "info", "debug")  # gunicorn.glogging.Logger.LOG_LEVELS


def warned(result, *words):
    """Whether one line of greenserve's stderr holds every word (each as a whole word)."""
    patterns = [re.compile(r"(?<![\w.])%s(?![\w])" % re.escape(word)) for word in words]
    return any(all(pattern.search(line) for pattern in patterns) for line in result.stderr.splitlines())


def accepted_differences(name, ours, theirs):
    """Our settings that the comparison leaves out for this file, each a difference decided on,
    with the warning greenserve owes for it asserted here."""
    accepted = set()
    # Our setting names that gunicorn (whose --print-config lists all of its own) has not:
    # preload, pid, log_level, access_log, error_log.
    ours_only = set(SETTINGS_BY_NAME) - set(theirs)
    for written in sorted(names_assigned(name) & ours_only):
        # A greenserve name in a gunicorn file (preload = True, log_level = "info"): gunicorn ignores
        # it, greenserve honours it, and says so in a warning that names it.
        accepted.add(written)
        assert warned(ours, written, "gunicorn ignores"), (
            "%s sets %s, which gunicorn ignores: greenserve's warning should name it\n%s" % (name, written, ours.stderr)
        )
    level = theirs["loglevel"]
    if level.lower() not in GUNICORN_LEVELS:
        # loglevel = "warn": gunicorn logs at info for a level it does not know; greenserve does too,
        # with a warning that names the level.
        accepted.add("log_level")
        assert printed(ours)["log_level"][0] == "info", printed(ours)["log_level"]
        assert warned(ours, level), "loglevel %r: greenserve's warning should name it\n%s" % (level, ours.stderr)
    return accepted


@pytest.mark.parametrize("name", FILES)
def test_greenserve_reads_the_file_as_gunicorn_does(tmp_path, name):
    env = prepare(tmp_path, name)
    ours = without_the_files_prints(
        run_cli("-c", "gunicorn.conf.py", "--print-config", "app:app", cwd=tmp_path, env=env)
    )
    try:
        theirs, refused = gunicorn_print_config(tmp_path, "-c", "gunicorn.conf.py", "app:app", env=env), None
    except AssertionError as failure:
        theirs, refused = None, str(failure).split("\nassert ")[0].strip().splitlines()[-1].strip()
    if refused is not None:
        # gunicorn cannot load it here: greenserve must refuse it too, with one line.
        assert ours.returncode != 0, "gunicorn refuses the file (%s), greenserve reads it" % refused
        assert_usage_error(ours)
        return
    defaults = gunicorn_print_config(tmp_path, "-c", os.devnull, "app:app", env=env)
    accepted = accepted_differences(name, ours, theirs)
    found = differences(printed(ours), hooks_printed(ours), theirs, defaults, accepted)
    assert not found, "\n".join(found)


def defines_hooks(name):
    tree = ast.parse(source_of(name))
    return any(isinstance(node, ast.FunctionDef) and node.name in HOOKS_BY_NAME for node in tree.body)


HOOKED = [name for name in FILES if defines_hooks(name)]


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.path)


def get(port=None, unix=None):
    """GET / on 127.0.0.1:port or on the unix socket at path unix: (status, body)."""
    if unix is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        connection = UnixHTTPConnection(unix, timeout=10)
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@contextlib.contextmanager
def running(tmp_path, name, env, *flags):
    """greenserve started with the prepared file and flags; after the block it is stopped
    (SIGTERM) and must have exited 0 with no hook that raised. Yields the process."""
    need = needs(name)
    left_before = {path for path in need.leaves if os.path.exists(path)}
    process = start(tmp_path, "-c", "gunicorn.conf.py", *flags, *need.serve_flags, "app:app", env=env)
    failure = None
    try:
        yield process
    except (AssertionError, OSError) as exc:
        failure = exc
    finally:
        err = process.stderr_text = stop(process)
        for path in set(need.leaves) - left_before:
            if os.path.exists(path):
                os.unlink(path)
    if failure is not None:
        raise AssertionError("%s\ngreenserve's stderr:\n%s" % (failure, err)) from None
    assert process.returncode == 0, err
    assert "hook raised" not in err, err


def served(tmp_path, name):
    """The file prepared for a start, or the test skipped when it is not started (NEEDS says why)."""
    if needs(name).not_served:
        pytest.skip("not started: " + needs(name).not_served)
    return prepare(tmp_path, name)


@pytest.mark.parametrize("name", HOOKED)
def test_a_file_with_hooks_serves_and_reloads(tmp_path, name):
    env = served(tmp_path, name)
    port = free_port()
    with running(tmp_path, name, env, "-b", "127.0.0.1:%d" % port, "--workers", "1") as process:
        wait_for_port(port, 30, process)
        first = serving_workers(process, 1)
        assert get(port) == (200, b"hello")
        process.send_signal(signal.SIGHUP)
        serving_workers(process, 1, replacing=first)
        assert get(port) == (200, b"hello")


UNIX_RELATIVE = [name for name in FILES if needs(name).unix_relative]


@pytest.mark.parametrize("name", UNIX_RELATIVE)
def test_a_relative_unix_socket_is_where_gunicorn_puts_it(tmp_path, name):
    # gunicorn reads unix://tmp/x as the path tmp/x, relative to the directory it starts in.
    from gunicorn.util import parse_address

    env = served(tmp_path, name)
    binds = ast.literal_eval(gunicorn_print_config(tmp_path, "-c", "gunicorn.conf.py", "app:app", env=env)["bind"])
    paths = [parse_address(bind) for bind in binds if bind.startswith("unix:")]
    assert paths and all(not os.path.isabs(path) for path in paths), binds
    with running(tmp_path, name, env, "--workers", "1") as process:
        for path in paths:
            wait_until(lambda: process.poll() is not None or os.path.exists(tmp_path / path), 30, path)
            assert get(unix=str(tmp_path / path)) == (200, b"hello")


def sets_reload(name):
    """Whether the file says ``reload = True`` at module level, whatever the environment."""
    return any(
        isinstance(node, ast.Assign) and any(isinstance(target, ast.Name) and target.id == "reload" for target in node.targets)
        and isinstance(node.value, ast.Constant) and node.value.value is True
        for node in ast.parse(source_of(name)).body
    )


RELOADING = [name for name in FILES if sets_reload(name)]


@pytest.mark.parametrize("name", RELOADING)
def test_reload_without_watchfiles_polls_with_one_warning(tmp_path, name):
    # gunicorn falls back to polling when inotify is missing; greenserve when watchfiles is: the
    # file loads as gunicorn reads it, and an edit of the application is served.
    env = dict(prepare(tmp_path, name), **without_watchfiles(tmp_path))
    ours = without_the_files_prints(run_cli("-c", "gunicorn.conf.py", "--print-config", "app:app", cwd=tmp_path, env=env))
    assert ours.returncode == 0, ours.stderr
    assert printed(ours)["reload"] == (True, "file gunicorn.conf.py:%d" % reload_line(name))
    theirs = gunicorn_print_config(tmp_path, "-c", "gunicorn.conf.py", "app:app", env=env)
    defaults = gunicorn_print_config(tmp_path, "-c", os.devnull, "app:app", env=env)
    found = differences(printed(ours), hooks_printed(ours), theirs, defaults, accepted_differences(name, ours, theirs))
    assert not found, "\n".join(found)
    if needs(name).not_served:
        return
    port = free_port()
    with running(tmp_path, name, env, "-b", "127.0.0.1:%d" % port, "--workers", "1") as process:
        wait_for_port(port, 30, process)
        assert get(port) == (200, b"hello")
        time.sleep(1.2)  # the watcher's first look at the files is taken
        (tmp_path / "app.py.tmp").write_text(APP.replace('b"hello"', 'b"edited"'), encoding="utf-8")
        os.replace(tmp_path / "app.py.tmp", tmp_path / "app.py")
        wait_until(lambda: get(port) == (200, b"edited"), 15, "the edit served")
    assert process.stderr_text.count(POLLING_WARNING) == 1, process.stderr_text
    assert "--reload: app.py changed: reloading" in process.stderr_text


def reload_line(name):
    return next(node.lineno for node in ast.parse(source_of(name)).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "reload")

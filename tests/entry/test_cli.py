"""The ``greenserve`` command as a user runs it: ``python -m greenserve [options] MODULE:APP``.

Every test runs the CLI in a real subprocess, on loopback only, and every subprocess is bounded
in time (``timeout=`` on run/communicate; servers are stopped with SIGTERM by PID, then killed).
"""

import concurrent.futures
import http.client
import importlib.machinery
import importlib.util
import json
import os
import re
import select
import pwd
import shutil
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from greenserve import __version__
from greenserve.settings import SETTINGS, cli_flags
from tests.conftest import (
    CLIServer,
    Client,
    another_group,
    children_of,
    ROOT,
    free_port,
    greenserve_command,
    subprocess_env,
    wait_for_port,
    wait_until,
)

pytestmark = pytest.mark.timeout(60)

RUN_TIMEOUT = 30  # seconds any one-shot CLI run may take before it counts as hung


# --- helpers ----------------------------------------------------------------------------------------


def run_cli(*args, cwd=ROOT, env=None, timeout=RUN_TIMEOUT):
    """Run the CLI to completion (it must end by itself within timeout)."""
    return subprocess.run(
        greenserve_command(*args),
        cwd=cwd,
        env=subprocess_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def write_module(directory, name, source):
    path = os.path.join(str(directory), name + ".py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(source))
    return path


def get(address, target="/", **kwargs):
    with Client(address, timeout=kwargs.pop("timeout", 10)) as client:
        return client.get(target, **kwargs)


def get_json(address, target="/", **kwargs):
    response = get(address, target, **kwargs)
    assert response.status == 200, response
    return json.loads(response.body)


def wait_connectable(family, address, process, timeout=20):
    """Like conftest.wait_for_port, for unix and IPv6 addresses."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise AssertionError("server exited early with %s: %s" % (process.returncode, process.stderr.read()))
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.settimeout(0.5)
        try:
            sock.connect(address)
            return
        except OSError:
            time.sleep(0.05)
        finally:
            sock.close()
    raise AssertionError("nothing listens on %r after %s s" % (address, timeout))


def assert_refused(port):
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=5).close()


# A WSGI app that reports what it sees; /sleep?SECONDS sleeps with time.sleep (cooperative only
# when patched) after touching $GS_TEST_MARK, so a test knows the request reached the app, and
# reports when its sleep began and ended (the server's monotonic clock).
PROBE_SOURCE = '''
import json
import os
import socket
import time

import gevent.monkey
import gevent.socket

SOCKET_PATCHED_AT_IMPORT = gevent.monkey.is_module_patched("socket")
SOCKET_IS_GEVENT_AT_IMPORT = socket.socket is gevent.socket.socket


def app(environ, start_response):
    slept = None
    if environ["PATH_INFO"].endswith("/sleep"):
        mark = os.environ.get("GS_TEST_MARK")
        if mark:
            open(mark, "a").close()
        began = time.monotonic()
        time.sleep(float(environ["QUERY_STRING"] or "1"))
        slept = [began, time.monotonic()]
    body = json.dumps(
        {
            "slept": slept,
            "script_name": environ["SCRIPT_NAME"],
            "path_info": environ["PATH_INFO"],
            "url_scheme": environ["wsgi.url_scheme"],
            "socket_patched": SOCKET_PATCHED_AT_IMPORT,
            "socket_is_gevent": SOCKET_IS_GEVENT_AT_IMPORT,
            "multiprocess": environ["wsgi.multiprocess"],
        }
    ).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
'''


@pytest.fixture
def probe_dir(tmp_path):
    write_module(tmp_path, "probe", PROBE_SOURCE)
    return str(tmp_path)


@pytest.fixture
def spawn_cli():
    """Start a CLIServer without waiting on its default port (for unix/IPv6 binds); stop at the end."""
    servers = []

    def start(*args, **kwargs):
        server = CLIServer(*args, **kwargs)
        servers.append(server)
        return server

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.stop()


# --- --version and --help ---------------------------------------------------------------------------


def test_version():
    import gevent
    import greenlet

    result = run_cli("--version")
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert re.fullmatch(
        r"greenserve \d+\.\d+\.\d+ \(gevent [^,]+, greenlet [^,]+, Python \d+\.\d+\.\d+\S*, [^)]+\) from \S+", line
    ), line
    assert line.endswith(") from %s" % os.path.join(ROOT, "greenserve")), line
    assert line.startswith("greenserve %s (gevent %s, greenlet %s, Python %s, " % (
        __version__, gevent.__version__, greenlet.__version__, sys.version.split()[0]
    )), line
    # It says which build of the hot path runs, the same one this test process runs.
    from greenserve import _accel

    if _accel.build() == "compiled":
        assert ", compiled hot path) from " in line, line
    else:
        assert ", pure Python: " in line, line
    assert result.stderr == ""


def _package_copy(destination, compiled):
    """A copy of this checkout's greenserve package (with its compiled modules and their .c files,
    or without), mtimes kept; returns the copy's package directory."""
    binaries = tuple(suffix for suffix in importlib.machinery.EXTENSION_SUFFIXES) + (".c",)
    ignore = shutil.ignore_patterns("__pycache__", *(() if compiled else ["*" + s for s in binaries]))
    package = os.path.join(str(destination), "greenserve")
    shutil.copytree(os.path.join(ROOT, "greenserve"), package, ignore=ignore)
    return package


def _version_from(cwd, **env):
    """--version's line, run in ``cwd``; the build as found on disk (GREENSERVE_PURE_PYTHON unset
    unless given), whichever build this test process runs."""
    env.setdefault("GREENSERVE_PURE_PYTHON", "")
    result = subprocess.run(greenserve_command("--version"), cwd=str(cwd), env=subprocess_env(**env),
                            capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def _skip_unless_this_checkout_is_compiled():
    if ", compiled hot path) from " not in _version_from(ROOT):
        pytest.skip("this checkout is not compiled (pip install -e .): no compiled build to compare with")


def test_version_run_in_an_unbuilt_checkout_says_it_shadows_the_compiled_build(tmp_path):
    # python -m greenserve in a source checkout imports the checkout (the current directory comes
    # first on sys.path), not the build pip installed: --version says so, and how to get the other.
    _skip_unless_this_checkout_is_compiled()
    for name in ("setup.py", "pyproject.toml"):
        shutil.copy(os.path.join(ROOT, name), str(tmp_path))
    package = _package_copy(tmp_path, compiled=False)
    line = _version_from(tmp_path)
    assert line.endswith(", pure Python: this source checkout is not built, and Python imports it before the"
                         " compiled build at %s (the current directory comes first on sys.path): run from"
                         " another directory, or build the checkout with pip install -e .) from %s"
                         % (os.path.join(ROOT, "greenserve"), package)), line


def test_version_of_an_install_without_compiled_modules_says_so(tmp_path):
    # An installed copy (no setup.py beside it) whose install found no compiler: first on PYTHONPATH.
    site = tmp_path / "site"
    package = _package_copy(site, compiled=False)
    line = _version_from(tmp_path, PYTHONPATH=str(site) + os.pathsep + ROOT)
    assert line.endswith(", pure Python: no compiled modules beside its .py files (Cython or a C compiler was"
                         " missing at install time: install gcc and the Python headers, then reinstall)) from %s"
                         % package), line


def test_version_says_the_pure_python_variable_is_set():
    line = _version_from(ROOT, GREENSERVE_PURE_PYTHON="1")
    assert line.endswith(", pure Python: GREENSERVE_PURE_PYTHON is set) from %s" % os.path.join(ROOT, "greenserve")), line


def test_version_names_a_source_newer_than_its_compiled_build(tmp_path):
    _skip_unless_this_checkout_is_compiled()
    site = tmp_path / "site"
    package = _package_copy(site, compiled=True)
    edited = os.path.join(package, "http11.py")
    os.utime(edited, None)  # an edit not yet rebuilt
    line = _version_from(tmp_path, PYTHONPATH=str(site) + os.pathsep + ROOT)
    assert line.endswith(", pure Python: %s is newer than the compiled build beside it (an edit not rebuilt:"
                         " python setup.py build_ext --inplace, or pip install -e .)) from %s"
                         % (edited, package)), line


def test_help_lists_flags_of_every_section():
    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for flag in ("--limit-request-line", "--keepalive", "--access-log", "--no-monkey-patch", "--bind"):
        assert flag in text, flag
    sections = []
    for setting in SETTINGS:
        if not setting.cli:
            continue
        if setting.section not in sections:
            sections.append(setting.section)
        if setting.boolean and not setting.flags:  # a flag of its own spelling: gunicorn's --no-control-socket
            flags = ["--" + setting.name.replace("_", "-"), "--no-" + setting.name.replace("_", "-")]
        else:
            flags = cli_flags(setting)
        for flag in flags:
            assert re.search(re.escape(flag) + r"\b", text), "flag %s (section %s) missing" % (flag, setting.section)
    for section in sections:
        assert "\n%s:\n" % section in text, "section %r missing from --help" % section
    assert len(sections) >= 6
    # The subcommand is named where people look first: the usage lines and the description.
    assert text.startswith("usage: greenserve [options] MODULE:APP\n       greenserve check [options] MODULE:APP\n")
    assert "'greenserve check' (the same as --check-config)" in " ".join(text.split())


def test_help_starts_with_the_commands_people_start_with():
    from greenserve.entry import cli

    result = run_cli("--help")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = lines.index("Start with:")
    assert start < 15, lines[:start]  # before the reference of every option, not after it
    commands = lines[start + 1:start + 6]
    assert "\n".join(commands) == cli.QUICK_START.split("\n", 1)[1]
    assert "\n".join(commands) + "\n" in result.stdout  # kept whole, not re-wrapped
    for line in commands:
        command = line.split("#")[0].split()
        assert command[0] == "greenserve" and command[-1] == "myapp:app", line
        # Each parses as it is written (a renamed flag would break it).
        args = cli.build_parser().parse_args(command[2:] if command[1] == "check" else command[1:])
        assert args.app == "myapp:app", line


def test_greenserve_alone_points_at_help(tmp_path):
    result = run_cli(cwd=str(tmp_path))  # no ./gunicorn.conf.py to take the application from
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == ("usage: greenserve [options] MODULE:APP (for example: greenserve myapp:app)\n"
                             "greenserve --help for all options\n")


def test_flags_without_an_application_say_where_help_is(tmp_path):
    assert_usage_error(run_cli("--workers", "2", cwd=str(tmp_path)),
                       "the application is missing: greenserve [options] MODULE:APP (see greenserve --help)")


# --- usage errors: one line, no traceback, exit code 2 ---------------------------------------------


def assert_usage_error(result, *fragments):
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 1, "expected one line on stderr, got:\n%s" % result.stderr
    assert lines[0].startswith("greenserve: error:"), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    assert result.returncode == 2, (result.returncode, result.stderr)


BAD_APPS_SOURCE = '''
NOT_CALLABLE = "I am a string, not an application"


def app(environ, start_response):
    start_response("200 OK", [("Content-Length", "0")])
    return [b""]
'''


@pytest.mark.parametrize(
    "args, fragments",
    [
        pytest.param(["--no-such-flag", "badapps:app"], ["--no-such-flag"], id="unknown-flag"),
        pytest.param([], ["missing"], id="missing-app"),
        pytest.param(["no_such_module_zz:app"], ["no_such_module_zz"], id="module-not-found"),
        pytest.param(["no_such_package_zz.sub:app"], ["no_such_package_zz"], id="package-not-found"),
        pytest.param(["badapps:nope"], ["nope"], id="no-such-attribute"),
        pytest.param(["badapps:NOT_CALLABLE"], ["NOT_CALLABLE", "str"], id="attribute-not-callable"),
        pytest.param(["badapps:NOT_CALLABLE()"], ["NOT_CALLABLE", "factory"], id="factory-not-callable"),
        pytest.param(["--backlog", "abc", "badapps:app"], ["--backlog", "abc"], id="int-flag-not-a-number"),
        pytest.param(["--limit-request-line", "-5", "badapps:app"], ["--limit-request-line"], id="int-flag-too-small"),
        pytest.param(["--bind", "1.2.3.4:99999", "badapps:app"], ["99999"], id="bind-port-out-of-range"),
        pytest.param(["--bind", "::1:80", "badapps:app"], ["bracket"], id="bind-ipv6-without-brackets"),
        pytest.param(["--keyfile", "key.pem", "badapps:app"], ["--keyfile", "--certfile"], id="keyfile-without-certfile"),
        pytest.param(["--certfile", "no-such-cert.pem", "badapps:app"], ["no-such-cert.pem"], id="certfile-missing"),
        pytest.param(["--chdir", "no/such/dir", "badapps:app"], ["no/such/dir"], id="chdir-missing"),
        pytest.param(["--keep-alive", "5", "badapps:app"], ["--keep-alive (gunicorn's spelling): use --keepalive"],
                     id="gunicorn-spelling"),
        pytest.param(["--access-logfile", "-", "badapps:app"], ["--access-logfile", "use --access-log"],
                     id="gunicorn-spelling-access-log"),
        pytest.param(["-k", "gevent", "badapps:app"], ["-k", "no such flag", "greenserve.workers.GreenserveWorker"],
                     id="gunicorn-worker-class"),
        pytest.param(["--threads", "4", "badapps:app"], ["--threads", "--worker-connections"], id="gunicorn-threads"),
        pytest.param(["--keepalve", "3", "badapps:app"], ["did you mean --keepalive?"], id="close-spelling"),
    ],
)
def test_usage_error(tmp_path, args, fragments):
    write_module(tmp_path, "badapps", BAD_APPS_SOURCE)
    if not any(a == "--bind" for a in args):
        # Should the error not happen, the server must not grab a well-known port: run() then
        # times out and kills it, and the test fails on the timeout.
        args = ["--bind", "127.0.0.1:%d" % free_port()] + args
    result = run_cli(*args, cwd=str(tmp_path))
    assert_usage_error(result, *fragments)
    assert result.stdout == ""


def test_usage_error_port_in_use(tmp_path):
    write_module(tmp_path, "badapps", BAD_APPS_SOURCE)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = run_cli("--bind", "127.0.0.1:%d" % port, "badapps:app", cwd=str(tmp_path))
    assert_usage_error(result, "127.0.0.1:%d" % port, "in use")


def test_import_time_exception_shows_traceback(tmp_path):
    write_module(
        tmp_path,
        "broken",
        """
        import json

        raise RuntimeError("boom at import time")

        def app(environ, start_response):
            pass
        """,
    )
    result = run_cli("--bind", "127.0.0.1:%d" % free_port(), "broken:app", cwd=str(tmp_path))
    assert result.returncode != 0
    assert "Traceback" in result.stderr, result.stderr
    assert "RuntimeError: boom at import time" in result.stderr
    assert "broken.py" in result.stderr  # the user's own file is named in the traceback


@pytest.mark.parametrize("flags", [[], ["--preload"], ["--check-config"]], ids=["worker", "preload", "check-config"])
def test_an_app_raising_at_import_exits_3_with_its_own_traceback(tmp_path, flags):
    write_module(tmp_path, "broken", """
        def connect():
            raise RuntimeError("no database configured")

        connect()
        """)
    result = run_cli("--bind", "127.0.0.1:%d" % free_port(), *flags, "broken:app", cwd=str(tmp_path))
    assert result.returncode == 3, result.stderr
    lines = result.stderr.splitlines()
    # The application's frames, not greenserve's or importlib's on the way to it.
    assert lines[:2] == ["Traceback (most recent call last):", '  File "%s", line 5, in <module>' % (tmp_path / "broken.py")]
    assert "greenserve" not in "\n".join(lines[:-1]) and "importlib" not in result.stderr, result.stderr
    assert lines[-2] == "RuntimeError: no database configured"
    assert lines[-1].startswith("greenserve: error: the application failed to load")


def test_missing_module_imported_by_the_app_shows_traceback(tmp_path):
    # Not a usage error: the import string resolves, the app's own import is broken.
    write_module(tmp_path, "needsdep", "import no_such_dependency_zz\napp = None\n")
    result = run_cli("--bind", "127.0.0.1:%d" % free_port(), "needsdep:app", cwd=str(tmp_path))
    assert result.returncode != 0
    assert "Traceback" in result.stderr, result.stderr
    assert "no_such_dependency_zz" in result.stderr


# --- serving ------------------------------------------------------------------------------------------


def test_chdir_and_module_colon_app(cli_server):
    server = cli_server("--chdir", "examples", "hello:app")
    response = get(("127.0.0.1", server.port))
    assert response.status == 200
    assert response.body == b"Hello from greenserve!\n"
    returncode, out, err = server.stop()
    assert returncode == 0, err
    assert "Traceback" not in err


def test_dotted_module_from_repo_root(cli_server):
    server = cli_server("examples.hello:app", cwd=ROOT)
    response = get(("127.0.0.1", server.port))
    assert response.status == 200
    assert response.body == b"Hello from greenserve!\n"


def test_current_directory_is_importable(tmp_path, cli_server):
    # PYTHONSAFEPATH keeps `python -m` from putting the current directory on sys.path itself
    # (as an installed `greenserve` script would not), and PYTHONPATH is set without an empty
    # entry: only greenserve's own "current directory is importable" can find this module.
    write_module(tmp_path, "cwd_only_mod", "from examples.hello import app\n")
    server = cli_server("cwd_only_mod:app", cwd=str(tmp_path), env={"PYTHONSAFEPATH": "1", "PYTHONPATH": ROOT})
    response = get(("127.0.0.1", server.port))
    assert response.status == 200
    assert response.body == b"Hello from greenserve!\n"


def _named_app(name):
    return '''
def {0}(environ, start_response):
    body = b"{0}"
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
'''.format(name)


@pytest.mark.parametrize(
    "names, expected",
    [(["application", "app"], b"application"), (["app"], b"app"), (["application"], b"application")],
    ids=["application-first", "app-only", "application-only"],
)
def test_module_alone_finds_application_then_app(tmp_path, cli_server, names, expected):
    write_module(tmp_path, "bare", "".join(_named_app(name) for name in names))
    server = cli_server("--chdir", str(tmp_path), "bare")
    response = get(("127.0.0.1", server.port))
    assert response.status == 200
    assert response.body == expected


def test_factory_is_called(tmp_path, cli_server):
    write_module(
        tmp_path,
        "factory",
        """
        CALLS = []

        def create():
            CALLS.append(1)
            def app(environ, start_response):
                body = b"made by the factory, called %d time(s)" % len(CALLS)
                start_response("200 OK", [("Content-Length", str(len(body)))])
                return [body]
            return app
        """,
    )
    server = cli_server("--chdir", str(tmp_path), "factory:create()")
    for _ in range(2):
        response = get(("127.0.0.1", server.port))
        assert response.status == 200
        assert response.body == b"made by the factory, called 1 time(s)"


def test_bind_twice_serves_on_both(cli_server):
    first, second = free_port(), free_port()
    while second == first:
        second = free_port()
    server = cli_server(
        "--bind", "127.0.0.1:%d" % first, "--bind", "127.0.0.1:%d" % second, "examples.hello:app", port=first
    )
    wait_for_port(second, 20, server.process)
    for port in (first, second):
        response = get(("127.0.0.1", port))
        assert response.status == 200
        assert response.body == b"Hello from greenserve!\n"
    returncode, _, err = server.stop()
    assert returncode == 0, err
    assert "http://127.0.0.1:%d" % first in err and "http://127.0.0.1:%d" % second in err
    assert_refused(first)
    assert_refused(second)


@pytest.fixture
def short_dir(tmp_path):
    # AF_UNIX paths are limited to ~107 bytes; pytest's tmp_path can be longer.
    if len(str(tmp_path)) < 80:
        yield str(tmp_path)
        return
    directory = tempfile.mkdtemp(prefix="gs")
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_bind_unix_socket(short_dir, probe_dir, spawn_cli):
    path = os.path.join(short_dir, "gs.sock")
    server = spawn_cli("--bind", "unix:" + path, "--chdir", probe_dir, "probe:app")
    wait_connectable(socket.AF_UNIX, path, server.process)
    response = get(path)
    assert response.status == 200
    assert json.loads(response.body)["path_info"] == "/"
    returncode, _, err = server.stop()
    assert returncode == 0, err
    assert "Traceback" not in err
    assert not os.path.exists(path), "the unix socket file is left behind after SIGTERM"


def _stat_socket(path):
    st = os.stat(path)
    return stat.S_IMODE(st.st_mode), st.st_gid


@pytest.mark.parametrize("flags", ["default", "mode-and-group"])
def test_unix_socket_mode_and_group(short_dir, probe_dir, spawn_cli, flags):
    path = os.path.join(short_dir, "gs.sock")
    if flags == "default":
        args, expected = [], (0o660, os.getegid())  # the owner and the group: nginx needs the group
    else:
        name, gid = another_group()
        args, expected = ["--unix-socket-mode", "0666", "--unix-socket-group", name], (0o666, gid)
    server = spawn_cli(*args, "--bind", "unix:" + path, "--chdir", probe_dir, "probe:app")
    wait_connectable(socket.AF_UNIX, path, server.process)
    assert _stat_socket(path) == expected
    assert get(path).status == 200
    returncode, _, err = server.stop()
    assert returncode == 0, err
    assert "WARNING" not in err, err


@pytest.mark.parametrize("flags", ["owner-only", "group-without-write"])
def test_a_unix_socket_only_its_owner_can_connect_to_is_warned_about(short_dir, probe_dir, spawn_cli, flags):
    path = os.path.join(short_dir, "gs.sock")
    if flags == "owner-only":
        args, mode, says = ["--unix-socket-mode", "0600"], 0o600, "only its owner can connect (mode 0600)"
    else:
        name, _ = another_group()
        args, mode = ["--unix-socket-mode", "0604", "--unix-socket-group", name], 0o604
        says = "--unix-socket-group %s lets no one in, since the mode 0604 has no group write permission" % name
    error_log = os.path.join(short_dir, "error.log")
    server = spawn_cli(*args, "--error-log", error_log, "--bind", "unix:" + path, "--chdir", probe_dir, "probe:app")
    wait_connectable(socket.AF_UNIX, path, server.process)
    assert _stat_socket(path)[0] == mode
    wait_until(lambda: "listening on" in open(error_log).read(), 20, "the startup lines")
    returncode, _, err = server.stop()
    assert returncode == 0, err
    log = open(error_log).read()
    warnings = [line for line in log.splitlines() if "[WARNING]" in line]
    assert len(warnings) == 1, log
    assert "unix:%s: %s" % (path, says) in warnings[0]
    assert "--unix-socket-mode 0660" in warnings[0]


UMASK_SOURCE = '''
import os


def app(environ, start_response):
    umask = os.umask(0)
    os.umask(umask)
    open(os.path.join(os.path.dirname(__file__), "made-by-the-app"), "w").close()
    body = b"%04o" % umask
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


def test_umask_applies_to_the_workers_and_the_logs_but_not_the_socket(short_dir, spawn_cli):
    write_module(short_dir, "masked", UMASK_SOURCE)
    path = os.path.join(short_dir, "gs.sock")
    access_log = os.path.join(short_dir, "access.log")
    server = spawn_cli(
        "--umask", "0077", "--access-log", access_log, "--bind", "unix:" + path, "--chdir", short_dir, "masked:app",
    )
    wait_connectable(socket.AF_UNIX, path, server.process)
    assert get(path).body == b"0077"  # the worker's umask
    modes = [stat.S_IMODE(os.stat(os.path.join(short_dir, name)).st_mode) for name in ("made-by-the-app", "access.log")]
    assert modes == [0o600, 0o600]
    assert _stat_socket(path)[0] == 0o660  # --unix-socket-mode's, whatever the umask
    returncode, _, err = server.stop()
    assert returncode == 0, err


@pytest.mark.parametrize(
    "args, says",
    [
        (["--unix-socket-mode", "rw-rw----"], "--unix-socket-mode: expected octal digits"),
        (["--unix-socket-mode", "1777"], "--unix-socket-mode: must be 0000 to 0777"),
        (["--unix-socket-mode", "660.0"], "--unix-socket-mode: expected octal digits"),
        (["--unix-socket-group", "no-such-group-zz"], "--unix-socket-group: unknown group 'no-such-group-zz'"),
        (["--umask", "0o1000"], "--umask: must be 0000 to 0777"),
        (["--umask", "9"], "--umask: expected octal digits"),
    ],
    ids=["mode-not-octal", "mode-too-large", "mode-not-digits", "unknown-group", "umask-too-large", "umask-not-octal"],
)
def test_bad_socket_permissions_are_one_line(short_dir, args, says):
    path = os.path.join(short_dir, "gs.sock")
    assert_usage_error(run_cli(*args, "--bind", "unix:" + path, "examples.hello:app"), says)
    assert not os.path.exists(path)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to become a user that is no member of the group")
def test_a_socket_group_we_may_not_give_it_to_is_one_line():
    # chown(2) to a group needs root, or a member of that group: as nobody, the group root fails.
    # Imported now, what the CLI imports on its way: nobody may not read this Python's files.
    import gevent.monkey  # noqa: F401
    import resource  # noqa: F401

    from greenserve.entry import cli

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody here")
    directory = tempfile.mkdtemp(prefix="gs")  # under /tmp, which nobody can enter
    try:
        os.chown(directory, nobody.pw_uid, nobody.pw_gid)
        path, errors = os.path.join(directory, "gs.sock"), os.path.join(directory, "stderr")
        pid = os.fork()
        if pid == 0:  # the CLI as nobody, in a child of ours (nobody cannot run this Python)
            code = 99
            try:
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                sys.stderr = open(errors, "w")
                code = cli.main(["--bind", "unix:" + path, "--unix-socket-group", "root", "examples.hello:app"])
                sys.stderr.flush()
            except BaseException:
                import traceback

                traceback.print_exc(file=sys.stderr)
                sys.stderr.flush()
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        with open(errors) as stderr:
            result = subprocess.CompletedProcess([], os.waitstatus_to_exitcode(status), "", stderr.read())
        assert_usage_error(result, "cannot give unix:%s to group root: only root, or a member of that group, may" % path)
        assert not os.path.exists(path)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_bind_ipv6_loopback(spawn_cli):
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
            port = probe.getsockname()[1]
    except OSError as exc:
        pytest.skip("IPv6 is not available on loopback (cannot bind ::1: %s)" % exc)
    server = spawn_cli("--bind", "[::1]:%d" % port, "examples.hello:app")
    wait_connectable(socket.AF_INET6, ("::1", port), server.process)
    response = get(("::1", port))
    assert response.status == 200
    assert response.body == b"Hello from greenserve!\n"
    returncode, _, err = server.stop()
    assert returncode == 0, err
    assert "http://[::1]:%d" % port in err


# --- signals --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_with_exit_code_0(cli_server, signum):
    server = cli_server("examples.hello:app")
    assert get(("127.0.0.1", server.port)).status == 200
    server.process.send_signal(signum)
    out, err = server.process.communicate(timeout=15)
    assert server.process.returncode == 0, err
    assert "Traceback" not in err
    assert "KeyboardInterrupt" not in err
    assert signum.name in err  # "SIGTERM: stopping gracefully ..."
    assert_refused(server.port)


def test_sigterm_lets_in_flight_request_finish(tmp_path, probe_dir, cli_server):
    mark = str(tmp_path / "reached-the-app")
    server = cli_server("--chdir", probe_dir, "probe:app", env={"GS_TEST_MARK": mark})
    with Client(("127.0.0.1", server.port), timeout=15) as client:
        client.request(target="/sleep", headers=[])  # sleeps 1 s
        wait_until(lambda: os.path.exists(mark), 10, "the request to reach the app")
        server.process.send_signal(signal.SIGTERM)
        response = client.read_response()
        assert response.status == 200
        assert response.header("Connection", "").lower() == "close"
        assert json.loads(response.body)["path_info"] == "/sleep"
        client.assert_closed()
    out, err = server.process.communicate(timeout=15)
    assert server.process.returncode == 0, err
    assert "Traceback" not in err
    assert_refused(server.port)


def test_a_second_signal_stops_without_waiting_for_the_graceful_timeout(tmp_path, probe_dir, cli_server):
    mark = str(tmp_path / "reached-the-app")
    server = cli_server("--chdir", probe_dir, "probe:app", env={"GS_TEST_MARK": mark})
    with Client(("127.0.0.1", server.port), timeout=15) as client:
        client.request(target="/sleep?20")  # far longer than the test may take
        wait_until(lambda: os.path.exists(mark), 10, "the request to reach the app")
        started = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        time.sleep(0.3)
        assert server.process.poll() is None  # the first one waits for the request
        server.process.send_signal(signal.SIGINT)
        out, err = server.process.communicate(timeout=15)
    assert time.monotonic() - started < 5
    assert server.process.returncode == 0, err
    assert "SIGINT again: closing every connection now" in err
    assert "fast stop: closing 1 connection(s) still busy" in err
    assert "graceful timeout (0.0 s)" not in err  # the graceful timeout was not what ran out
    assert "Traceback" not in err


# --- monkey-patching -------------------------------------------------------------------------------------


def _concurrent_sleeps(port, count=10, seconds=0.5):
    """Send count /sleep requests at once; return the (began, ended) of each sleep, sorted."""

    def one(_):
        with Client(("127.0.0.1", port), timeout=30) as client:
            response = client.get("/sleep?%s" % seconds)
            assert response.status == 200
            return tuple(json.loads(response.body)["slept"])

    with concurrent.futures.ThreadPoolExecutor(count) as pool:
        return sorted(pool.map(one, range(count)))


def test_time_sleep_is_cooperative_by_default(probe_dir, cli_server):
    # Behaviour, not speed: patched, the ten sleeps run at the same time in one process, so
    # every one of them begins before any of them ends.
    server = cli_server("--chdir", probe_dir, "probe:app")
    sleeps = _concurrent_sleeps(server.port)
    last_begin = max(began for began, _ in sleeps)
    first_end = min(ended for _, ended in sleeps)
    assert last_begin < first_end, "time.sleep is not cooperative: the sleeps ran one after another: %r" % sleeps


@pytest.mark.parametrize("workers, multiprocess", [("1", False), ("2", True)])
def test_wsgi_multiprocess_says_whether_other_workers_serve(probe_dir, cli_server, workers, multiprocess):
    server = cli_server("--workers", workers, "--chdir", probe_dir, "probe:app")
    assert get_json(("127.0.0.1", server.port))["multiprocess"] is multiprocess


def test_no_monkey_patch_serializes_time_sleep(probe_dir, cli_server):
    # Unpatched, time.sleep blocks the whole process: each sleep begins after the previous ended.
    server = cli_server("--no-monkey-patch", "--chdir", probe_dir, "probe:app")
    sleeps = _concurrent_sleeps(server.port)
    for (_, ended), (began, _) in zip(sleeps, sleeps[1:]):
        assert began >= ended, "sleeps overlapped without patching: %r" % sleeps


@pytest.mark.parametrize("flags, patched", [([], True), (["--no-monkey-patch"], False)], ids=["default", "no-patch"])
def test_app_module_sees_socket_patched(probe_dir, cli_server, flags, patched):
    server = cli_server(*flags, "--chdir", probe_dir, "probe:app")
    seen = get_json(("127.0.0.1", server.port))
    assert seen["socket_patched"] is patched
    assert seen["socket_is_gevent"] is patched
    returncode, _, err = server.stop()
    expected = "all (patch_all)" if patched else "off (--no-monkey-patch)"
    assert "gevent monkey-patching: %s" % expected in err


@pytest.mark.parametrize("module", ["greenserve.entry.cli", "greenserve"])
def test_import_does_not_import_ssl(module):
    # An ssl module imported before gevent patches it stays unpatched: gevent's best-known trap.
    # greenserve.entry.cli also promises to import nothing of gevent before it has parsed the flags.
    code = (
        "import %s, sys\n"
        "assert 'ssl' not in sys.modules, 'ssl imported'\n"
        "assert 'gevent' not in sys.modules, 'gevent imported'\n" % module
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert result.returncode == 0, result.stderr


# --- access log ----------------------------------------------------------------------------------------------

COMBINED = re.compile(
    r'(?P<host>\d+\.\d+\.\d+\.\d+) - - '
    r'\[\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}\] '
    r'"(?P<request>[^"]*)" (?P<status>\d{3}) (?P<size>\d+|-) '
    r'"(?P<referer>[^"]*)" "(?P<agent>[^"]*)"'
)


def test_access_log_stdout_combined_format(probe_dir, cli_server):
    server = cli_server("--access-log", "-", "--chdir", probe_dir, "probe:app")
    with Client(("127.0.0.1", server.port)) as client:
        first = client.get("/one?x=1", headers=[("Referer", "http://ref.example/"), ("User-Agent", "cli-test/1.0")])
        second = client.get("/two")
    assert first.status == second.status == 200
    returncode, out, err = server.stop()
    assert returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 2, out
    matches = [COMBINED.fullmatch(line) for line in lines]
    assert all(matches), lines
    one, two = matches
    assert one["host"] == "127.0.0.1"
    assert one["request"] == "GET /one?x=1 HTTP/1.1"
    assert one["status"] == "200"
    assert one["size"] == str(len(first.body))
    assert one["referer"] == "http://ref.example/"
    assert one["agent"] == "cli-test/1.0"
    assert two["request"] == "GET /two HTTP/1.1"
    assert two["referer"] == "-" and two["agent"] == "-"
    assert "GET /one" not in err  # the access log is not on the error log


def test_access_log_to_file(tmp_path, probe_dir, cli_server):
    log_path = tmp_path / "access.log"
    server = cli_server("--access-log", str(log_path), "--chdir", probe_dir, "probe:app")
    assert get(("127.0.0.1", server.port), "/to-file").status == 200
    returncode, out, err = server.stop()
    assert returncode == 0, err
    assert out == ""
    lines = log_path.read_text().splitlines()
    assert len(lines) == 1, lines
    match = COMBINED.fullmatch(lines[0])
    assert match, lines[0]
    assert match["request"] == "GET /to-file HTTP/1.1"
    assert match["status"] == "200"


def test_access_log_format(probe_dir, cli_server):
    server = cli_server(
        "--access-log", "-", "--access-log-format", "%(m)s %(U)s %(s)s", "--chdir", probe_dir, "probe:app"
    )
    assert get(("127.0.0.1", server.port), "/fmt?q=1").status == 200
    returncode, out, err = server.stop()
    assert returncode == 0, err
    assert out == "GET /fmt 200\n"


def test_no_access_log_by_default(probe_dir, cli_server):
    server = cli_server("--chdir", probe_dir, "probe:app")
    for target in ("/a", "/b"):
        assert get(("127.0.0.1", server.port), target).status == 200
    returncode, out, err = server.stop()
    assert returncode == 0, err
    assert out == ""
    assert "GET /a" not in err and "GET /b" not in err


# --- HTTP flags ---------------------------------------------------------------------------------------------------


def test_empty_server_header_removes_it(cli_server):
    server = cli_server("--server-header", "", "examples.hello:app")
    response = get(("127.0.0.1", server.port))
    assert response.status == 200
    assert response.header_list("Server") == []


def test_limit_request_line(cli_server):
    server = cli_server("--limit-request-line", "100", "examples.hello:app")
    assert get(("127.0.0.1", server.port), "/" + "a" * 50).status == 200
    with Client(("127.0.0.1", server.port)) as client:
        response = client.get("/" + "a" * 200)
        assert response.status == 414
        assert response.header("Connection", "").lower() == "close"
        client.assert_closed()


def test_root_path_sets_script_name(probe_dir, cli_server):
    server = cli_server("--root-path", "/app", "--chdir", probe_dir, "probe:app")
    seen = get_json(("127.0.0.1", server.port), "/app/x")
    assert seen["script_name"] == "/app"
    assert seen["path_info"] == "/x"


# --- TLS ---------------------------------------------------------------------------------------------------------


@pytest.fixture
def certificate(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (needed to make a self-signed certificate)")
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    result = subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", key, "-out", cert, "-days", "2",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        ],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )
    if result.returncode != 0:
        pytest.skip("openssl could not make a self-signed certificate: %s" % result.stderr.strip())
    return cert, key


def _https_get(port, cert, target="/"):
    context = ssl.create_default_context(cafile=cert)
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_tls(certificate, probe_dir, cli_server):
    cert, key = certificate
    server = cli_server("--certfile", cert, "--keyfile", key, "--chdir", probe_dir, "probe:app")
    status, body = _https_get(server.port, cert)
    assert status == 200
    assert json.loads(body)["url_scheme"] == "https"

    # Plain HTTP to the TLS port: the handshake fails, the connection closes, the server lives on.
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as plain:
        plain.sendall(b"GET / HTTP/1.1\r\nHost: test\r\n\r\n")
        received = b""
        try:
            while True:
                data = plain.recv(65536)
                if not data:
                    break
                received += data
        except ConnectionResetError:
            pass
    assert b"HTTP/1.1 200" not in received

    status, body = _https_get(server.port, cert, "/again")
    assert status == 200
    assert json.loads(body)["path_info"] == "/again"
    returncode, out, err = server.stop()
    assert returncode == 0, err
    assert "https://127.0.0.1:%d" % server.port in err
    assert "Traceback" not in err, err
    assert "[ERROR]" not in err, err


# --- log level ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, shown", [(["--log-level", "debug"], True), ([], False)], ids=["debug", "default"])
def test_log_level_debug_shows_bad_requests(cli_server, flags, shown):
    server = cli_server(*flags, "examples.hello:app")
    with Client(("127.0.0.1", server.port)) as client:
        client.send(b"THIS IS NOT HTTP\r\n\r\n")
        response = client.read_response()
        assert response.status == 400
    returncode, out, err = server.stop()
    assert returncode == 0, err
    debug_lines = [line for line in err.splitlines() if "[DEBUG]" in line]
    if shown:
        assert any("400 from 127.0.0.1" in line for line in debug_lines), err
    else:
        assert debug_lines == [], err
    assert "Traceback" not in err


# --- log targets, certificates and socket files: user mistakes found by these tests ---------------------


@pytest.mark.parametrize(
    "args",
    [
        ["--access-log", "/nonexistent-dir-zz/access.log"],
        ["--error-log", "/nonexistent-dir-zz/error.log"],
        ["--access-log", "-", "--access-log-format", "%(bogus"],
        # Checked without --access-log too: a typo must not wait until the log is turned on.
        ["--access-log-format", "%(h)s %(bogus)s"],
    ],
    ids=["access-log-unopenable", "error-log-unopenable", "access-log-format-invalid", "access-log-format-unknown-atom"],
)
def test_usage_error_log_targets(tmp_path, args):
    write_module(tmp_path, "badapps", BAD_APPS_SOURCE)
    result = run_cli("--bind", "127.0.0.1:%d" % free_port(), *args, "badapps:app", cwd=str(tmp_path))
    assert_usage_error(result, args[0])
    if "%(bogus)s" in args[-1]:
        assert "unknown atom %(bogus)s; the atoms are h l u t r m U q H s B b f a T M D L p, {name}i" in result.stderr


def test_relative_certfile_with_chdir(tmp_path, certificate, spawn_cli):
    cert, key = certificate
    app_dir = tmp_path / "appdir"
    app_dir.mkdir()
    write_module(app_dir, "probe", PROBE_SOURCE)
    server = spawn_cli(
        "--certfile", "cert.pem", "--keyfile", "key.pem", "--chdir", str(app_dir), "probe:app", cwd=str(tmp_path)
    )
    # Wait for "listening on" or the exit.
    fd = server.process.stderr.fileno()
    seen = b""
    deadline = time.monotonic() + 20
    while b"listening on" not in seen:
        assert time.monotonic() < deadline, "the server neither started nor exited: %r" % seen
        if select.select([fd], [], [], 0.1)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += chunk
    if b"listening on" in seen:
        # Served: the certificate the check accepted is the one loaded.
        status, body = _https_get(server.port, cert)
        assert status == 200
        return
    server.process.wait(timeout=5)
    err = seen.decode()
    # Refused: acceptable only as a usage error that says which file.
    assert server.process.returncode == 2, err
    assert "cert.pem" in err, err


def test_a_file_that_is_not_a_certificate_is_named_in_the_error(tmp_path):
    write_module(tmp_path, "badapps", BAD_APPS_SOURCE)
    not_a_cert = tmp_path / "notes.txt"
    not_a_cert.write_text("hello")
    result = run_cli("--bind", "127.0.0.1:%d" % free_port(), "--certfile", str(not_a_cert), "badapps:app", cwd=str(tmp_path))
    assert_usage_error(result, "--certfile %s holds no PEM certificate" % not_a_cert)


def test_a_certificate_without_its_key_asks_for_the_keyfile(tmp_path, certificate):
    cert, key = certificate
    write_module(tmp_path, "badapps", BAD_APPS_SOURCE)
    result = run_cli("--bind", "127.0.0.1:%d" % free_port(), "--certfile", cert, "badapps:app", cwd=str(tmp_path))
    assert_usage_error(result, "the certificate file %s holds no private key: give --keyfile KEYFILE" % cert)
    result = run_cli(
        "--bind", "127.0.0.1:%d" % free_port(), "--certfile", cert, "--keyfile", cert, "badapps:app", cwd=str(tmp_path)
    )
    assert_usage_error(result, "--keyfile %s holds no PEM private key" % cert)


def test_the_unix_socket_file_is_removed_when_the_app_cannot_be_imported(tmp_path):
    path = tmp_path / "app.sock"
    result = run_cli("--bind", "unix:%s" % path, "no_such_module_zz:app", cwd=str(tmp_path))
    assert_usage_error(result)
    assert not path.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["--bind", "fd://-1", "examples.hello:app"],
        ["--backlog", "99999999999", "examples.hello:app"],
        ["--server-header", "bad\x01header", "examples.hello:app"],
        ["--server-header", "\u65e5\u672c", "examples.hello:app"],
        [".relative:app"],
        ["--bind", "unix:/tmp/" + "x" * 200, "examples.hello:app"],
    ],
    ids=["negative-fd", "backlog-overflow", "control-char-server-header", "non-latin1-server-header",
         "relative-module", "unix-path-too-long"],
)
def test_more_usage_errors(args):
    assert_usage_error(run_cli(*args))


# --- --check-config ----------------------------------------------------------------------------


def test_check_config_loads_the_app_binds_nothing_and_says_what_would_run():
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    try:
        # The port is in use: a check must not need it (it can run beside the live server).
        result = run_cli("--check-config", "--bind", "127.0.0.1:%d" % port, "examples.hello:app")
    finally:
        taken.close()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("greenserve %s (" % __version__)
    assert lines[1].startswith("application: examples.hello:app -> <function app")
    assert lines[2] == "bind: 127.0.0.1:%d" % port
    assert lines[3] == "gevent monkey-patching: all (patch_all)"
    assert lines[-1] == "configuration OK"


def test_check_reports_the_monitor_that_max_blocking_time_turns_on():
    result = run_cli("check", "--max-blocking-time", "0.25", "examples.hello:app",
                     env={"GEVENT_MONITOR_THREAD_ENABLE": ""})
    assert result.returncode == 0, result.stderr
    monitor = [line.split(None, 1)[1] for line in result.stdout.splitlines() if line.startswith("  monitor ")]
    assert monitor == ["on: a greenlet that keeps the loop from running for more than 0.25 s is reported"
                       " with its stack"], result.stdout
    off = run_cli("check", "examples.hello:app", env={"GEVENT_MONITOR_THREAD_ENABLE": ""})
    assert [line.split(None, 1)[1][:36] for line in off.stdout.splitlines() if line.startswith("  monitor ")] == [
        "off: --max-blocking-time SECONDS (or"], off.stdout


def _warnings(stdout):
    lines = stdout.splitlines()
    start = lines.index("warnings:")
    return [line.strip() for line in lines[start + 1:] if line.startswith("  - ")]


@pytest.mark.skipif(importlib.util.find_spec("requests") is None, reason="requests is not installed")
@pytest.mark.parametrize("how", ["sitecustomize", "wrapper-script"])
def test_check_names_ssl_and_requests_imported_before_patching(tmp_path, how):
    # Two real ways they get in first: a sitecustomize (an APM agent's bootstrap) or a script of
    # the user's that imports things and then calls greenserve's main().
    write_module(tmp_path, "plainapp", """
        def app(environ, start_response):
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
    """)
    if how == "sitecustomize":
        write_module(tmp_path, "sitecustomize", "import ssl, requests\n")
        result = run_cli("check", "plainapp:app", cwd=str(tmp_path),
                         env={"PYTHONPATH": str(tmp_path) + os.pathsep + ROOT})
    else:
        write_module(tmp_path, "launch", """
            import ssl, sys
            import requests
            from greenserve.entry.cli import main
            sys.exit(main(["check", "plainapp:app"]))
        """)
        result = subprocess.run([sys.executable, "launch.py"], cwd=str(tmp_path), env=subprocess_env(),
                                capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # gevent's MonkeyPatchWarning became a line of the report, not noise
    assert result.stdout.splitlines()[-1] == "configuration OK"
    warnings = _warnings(result.stdout)
    ssl_line = [w for w in warnings if w.startswith("- ssl was imported before patching")]
    assert len(ssl_line) == 1 and "urllib3" in ssl_line[0] and "may block or fail" in ssl_line[0], warnings
    assert any(w.startswith("- requests was imported before patching") for w in warnings), warnings
    blames_sitecustomize = any(w.startswith("- sitecustomize ran when Python started") for w in warnings)
    assert blames_sitecustomize == (how == "sitecustomize")


@pytest.mark.skipif(importlib.util.find_spec("requests") is None, reason="requests is not installed")
def test_check_does_not_blame_a_sitecustomize_that_imported_none_of_them(tmp_path):
    # Debian's python3 always runs its own sitecustomize (apport's hook, loaded from /etc, not
    # the standard library's directory): a wrapper script's imports are not its doing.
    site = tmp_path / "site"
    site.mkdir()
    write_module(site, "sitecustomize", "import json, zlib\n")
    write_module(tmp_path, "plainapp", """
        def app(environ, start_response):
            start_response("200 OK", [("Content-Length", "0")])
            return [b""]
    """)
    write_module(tmp_path, "launch", """
        import ssl, sys
        import requests
        from greenserve.entry.cli import main
        sys.exit(main(["check", "plainapp:app"]))
    """)
    result = subprocess.run([sys.executable, "launch.py"], cwd=str(tmp_path),
                            env=subprocess_env(PYTHONPATH=str(site) + os.pathsep + ROOT),
                            capture_output=True, text=True, timeout=RUN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    warnings = _warnings(result.stdout)
    assert any(w.startswith("- requests was imported before patching") for w in warnings), warnings
    assert not [w for w in warnings if "sitecustomize" in w], warnings


def test_check_blames_a_sitecustomize_whose_import_brought_ssl_in(tmp_path):
    # An agent's bootstrap: sitecustomize holds only its own package, which imported ssl.
    write_module(tmp_path, "agentboot", "import ssl\n")
    site = write_module(tmp_path, "sitecustomize", "import agentboot\n")
    result = run_cli("check", "examples.hello:app", env={"PYTHONPATH": str(tmp_path) + os.pathsep + ROOT})
    assert result.returncode == 0, result.stderr
    startup = [w for w in _warnings(result.stdout) if "sitecustomize" in w]
    assert startup == ["- sitecustomize ran when Python started, before greenserve, and imported ssl (%s);"
                       " have it import gevent.monkey and call patch_all() first, or import those modules later"
                       " (an agent's bootstrap often is the cause: ddtrace-run, newrelic-admin,"
                       " opentelemetry-instrument)" % site], result.stdout


# A view that makes an HTTPS call with requests, to a port that accepts and says nothing: with
# requests imported before patching, urllib3's context creation recurses (gevent issue #1016)
# before a byte is sent. Each worker marks its import, so a test knows they all passed boot.
HTTPS_CALLER_SOURCE = """
import os

import requests

open(os.path.join(os.environ["GS_TEST_MARKS"], str(os.getpid())), "w").close()


def app(environ, start_response):
    try:
        requests.get("https://127.0.0.1:%s/" % os.environ["GS_TEST_TLS_PORT"], timeout=5)
    except RecursionError:
        body = b"RecursionError"
    except requests.RequestException as exc:
        body = type(exc).__name__.encode()
    start_response("500 Internal Server Error", [("Content-Length", str(len(body)))])
    return [body]
"""


@pytest.mark.skipif(importlib.util.find_spec("requests") is None, reason="requests is not installed")
@pytest.mark.parametrize("preload", [False, True], ids=["in-the-workers", "preload"])
def test_patching_too_late_is_one_warning_at_boot(tmp_path, spawn_cli, preload):
    # A sitecustomize (an APM agent's bootstrap) imports ssl and requests before greenserve
    # runs: every HTTPS call from a view then fails. The server says so once, at boot: what
    # was imported, by what, what fails and the fix, with gevent's own warning folded in.
    site, marks = tmp_path / "site", tmp_path / "marks"
    site.mkdir()
    marks.mkdir()
    write_module(site, "sitecustomize", "import ssl, requests\n")
    write_module(tmp_path, "httpscaller", HTTPS_CALLER_SOURCE)
    silent_tls = socket.socket()
    silent_tls.bind(("127.0.0.1", 0))
    silent_tls.listen(8)
    log = tmp_path / "error.log"
    flags = ["--workers", "2", "--error-log", str(log)] + (["--preload"] if preload else [])
    server = spawn_cli(*flags, "httpscaller:app", cwd=str(tmp_path), env={
        "PYTHONPATH": str(site) + os.pathsep + ROOT, "GS_TEST_MARKS": str(marks),
        "GS_TEST_TLS_PORT": str(silent_tls.getsockname()[1])})
    try:
        server.wait_ready()
        deadline = time.monotonic() + 20
        while len(os.listdir(marks)) < (1 if preload else 2):  # every worker is past its boot
            assert time.monotonic() < deadline and server.process.poll() is None, log.read_text()
            time.sleep(0.05)
        assert get(("127.0.0.1", server.port)).body == b"RecursionError"  # what the warning explains
        code, _, err = server.stop()
    finally:
        silent_tls.close()
    assert code == 0, err
    assert "MonkeyPatchWarning" not in err and "Traceback" not in err, err
    warnings = [line for line in log.read_text().splitlines() if "[WARNING]" in line and "patching" in line]
    assert len(warnings) == 1, warnings
    line = warnings[0]
    assert "monkey-patching came too late: ssl, requests and urllib3 were imported before it" in line
    assert "by sitecustomize (%s)" % (site / "sitecustomize.py") in line
    assert "urllib3.util.ssl_" in line and "RecursionError" in line  # gevent's warning, folded in
    assert "fix: in %s, call gevent.monkey.patch_all() before those imports" % (site / "sitecustomize.py") in line
    assert ("--preload imports it after patching" in line) == preload


def test_ssl_alone_imported_by_the_master_is_no_warning(tmp_path, certificate, spawn_cli):
    # --certfile makes the master import ssl before the workers patch; gevent then patches it
    # whole (nothing kept its original classes): not worth a warning.
    cert, key = certificate
    log = tmp_path / "error.log"
    server = spawn_cli("--certfile", cert, "--keyfile", key, "--error-log", str(log), "examples.hello:app")
    server.wait_ready()
    _https_get(server.port, cert, "/")
    code, _, err = server.stop()
    assert code == 0, err
    assert "[WARNING]" not in log.read_text()


def test_check_config_with_an_app_that_cannot_import_fails_with_one_line():
    result = run_cli("--check-config", "examples.nosuch:app")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("greenserve: error: cannot import 'examples.nosuch'")


# --- open-file limit ---------------------------------------------------------------------------------------


def _open_file_limits(pid):
    with open("/proc/%d/limits" % pid) as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no open-file limit for pid %d" % pid)


def _serve_with_limits(soft, hard, *args):
    import resource

    port = free_port()
    process = subprocess.Popen(
        greenserve_command("--bind", "127.0.0.1:%d" % port, *args, "examples.hello:app"),
        cwd=ROOT,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)),
    )
    try:
        wait_for_port(port, 20, process)
        assert get(("127.0.0.1", port)).status == 200  # a worker has booted and serves
        workers = children_of(process.pid)
        assert workers, "no worker"
        limits = [_open_file_limits(pid) for pid in [process.pid] + workers]
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=15)
    assert process.returncode == 0, err
    return limits, err


def test_open_file_limit_is_raised_for_the_worker_connections():
    # A soft limit of 512 cannot hold 1,000 connections: greenserve raises it (never the hard one).
    _, hard = _open_file_limits(os.getpid())
    if hard < 1300:
        pytest.skip("the hard open-file limit here is %d" % hard)
    limits, err = _serve_with_limits(512, hard, "--worker-connections", "1000")
    assert limits == [(1000 + 256, hard)] * len(limits), limits
    assert "open-file limit" not in err, err


def test_open_file_limit_below_the_worker_connections_is_said():
    limits, err = _serve_with_limits(300, 400, "--worker-connections", "1000")
    assert all(limit == (400, 400) for limit in limits), limits
    assert "the open-file limit is 400 (hard limit 400): a worker cannot hold 1000 connections" in err, err

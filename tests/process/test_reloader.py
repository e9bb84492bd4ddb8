"""``--reload``: the command in a subprocess, an application file in a temporary directory edited
while clients keep requesting it; watchfiles watches for real (inotify on Linux), and without it
(hidden by a package first on PYTHONPATH that raises ImportError) the files are polled."""

import contextlib
import os
import signal
import subprocess
import time

import pytest

from tests.conftest import ROOT, KeepAliveFetch, Load, free_port, greenserve_command, subprocess_env, wait_until

pytestmark = pytest.mark.timeout(90)

RUN_TIMEOUT = 30

APP = '''
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [%r]
'''


def write_app(directory, body, source=None):
    # Written whole in one rename, as editors save: a half-written file is never imported.
    # The body's length differs from edit to edit: Python trusts a cached .pyc whose source has
    # the same size and the same mtime second, and the edits here come within one second.
    path = os.path.join(directory, "app.py")
    with open(path + ".tmp", "w") as f:
        f.write(source if source is not None else APP % body)
    os.replace(path + ".tmp", path)


def log_text(path):
    with open(path) as f:
        return f.read()


POLLING_WARNING = (
    "--reload: watchfiles is not installed, so the files are polled every second instead of watched "
    "(inotify): pip install watchfiles for that"
)


def without_watchfiles(tmp_path):
    """The environment of a subprocess in which ``import watchfiles`` raises ImportError, as where
    it is not installed: a package of that name first on PYTHONPATH."""
    package = tmp_path / "hidden" / "watchfiles"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('raise ImportError("hidden by the test: tests/process/test_reloader.py")\n')
    existing = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join([ROOT, str(package.parent)] + ([existing] if existing else []))}


@pytest.fixture(params=["watchfiles", "polling"])
def watching(request):
    if request.param == "watchfiles":
        pytest.importorskip("watchfiles", reason="--reload's inotify watching needs watchfiles (pip install watchfiles)")
    return request.param


@contextlib.contextmanager
def reloading_server(tmp_path, *flags, watching="watchfiles"):
    """A greenserve --reload serving tmp_path/app/app.py; yields (process, port, app dir, log path).
    ``watching``: "watchfiles", or "polling" with watchfiles hidden."""
    env = subprocess_env(**(without_watchfiles(tmp_path) if watching == "polling" else {}))
    app_dir = tmp_path / "app"
    app_dir.mkdir()
    write_app(str(app_dir), b"v1")
    # Standard error, where the error log and the tracebacks of a broken edit both go, to a file
    # the test reads while the server runs.
    log = str(tmp_path / "stderr.log")
    port = free_port()
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            greenserve_command("--reload", *flags, "--bind", "127.0.0.1:%d" % port, "--chdir", str(app_dir), "app:app"),
            cwd=str(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=stderr,
        )
    try:
        wait_until(lambda: "listening on" in log_text(log), 20, "the server to listen")
        first_line = "--reload: watching" if watching == "watchfiles" else "--reload: polling every 1 s"
        wait_until(lambda: first_line in log_text(log), 10, "the watcher")
        # The watcher's inotify watches are set up, or its first look at the files taken, right after its first line.
        time.sleep(0.3)
        yield process, port, str(app_dir), log
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_an_edit_is_served_and_a_broken_one_is_not(tmp_path, watching):
    with reloading_server(tmp_path, "--workers", "2", watching=watching) as (process, port, app_dir, log):
        fetch = KeepAliveFetch("127.0.0.1", port)
        assert fetch() == "v1"
        with Load(fetch, threads=3) as load:
            write_app(app_dir, b"v2 (an edit)")
            wait_until(lambda: load.served[-10:] == ["v2 (an edit)"] * 10, 15, "v2 served")

            # A syntax error: the new workers cannot boot; the v2 ones keep serving.
            write_app(app_dir, None, source="def app(environ, start_response)\n    return []\n")
            # Both workers of the broken generation boot and fail (on a busy machine one may take seconds more).
            wait_until(lambda: log_text(log).count("SyntaxError") == 2, 30, "the broken edit's traceback from each worker")
            wait_until(lambda: "serve until the next change (--reload)" in log_text(log), 15, "the wait for a fix")
            served_while_broken = len(load.served)
            time.sleep(1.0)
            assert set(load.served[served_while_broken:]) == {"v2 (an edit)"}

            write_app(app_dir, b"v3, fixed")
            wait_until(lambda: load.served[-10:] == ["v3, fixed"] * 10, 15, "v3 served")
        assert load.failures == [], load.failures[:5]
        assert set(load.served) == {"v1", "v2 (an edit)", "v3, fixed"}
        text = log_text(log)
        assert "--reload: app.py changed: reloading" in text
        assert "SyntaxError: expected ':'" in text
        assert text.count("SyntaxError") == 2, text  # one per worker of the broken generation, not retried
        assert process.poll() is None
        # Polling is said once, as a warning, with how to get watchfiles; watching says nothing.
        assert text.count(POLLING_WARNING) == (1 if watching == "polling" else 0), text
    assert process.returncode == 0


def test_other_files_do_not_reload_but_extra_files_do(tmp_path, watching):
    (tmp_path / "templates").mkdir()
    template = tmp_path / "templates" / "page.html"
    template.write_text("<p>1</p>")
    with reloading_server(tmp_path, "--reload-extra-file", "templates/page.html", watching=watching) as (
        process, _, app_dir, log
    ):
        with open(os.path.join(app_dir, "notes.txt"), "w") as notes:
            notes.write("not code")
        time.sleep(2.5)  # two looks of the polling watcher
        assert "changed: reloading" not in log_text(log)
        template.write_text("<p>2</p>")
        wait_until(lambda: "page.html changed: reloading" in log_text(log), 15, "the template's reload")
        wait_until(lambda: "SIGHUP: reloading" in log_text(log), 15, "the master's reload")
    assert process.returncode == 0


def _run(*args, cwd, command=None):
    return subprocess.run(
        command or greenserve_command(*args), cwd=cwd, env=subprocess_env(), capture_output=True, text=True,
        timeout=RUN_TIMEOUT,
    )


@pytest.mark.parametrize(
    "flag, fragment",
    [
        ("--preload", "--reload cannot be used with --preload: the master would hold the code it imported"),
        ("--daemon", "--reload cannot be used with --daemon"),
    ],
)
def test_refused_with_preload_and_daemon(tmp_path, flag, fragment):
    write_app(str(tmp_path), b"v1")
    result = _run("--reload", flag, "--bind", "127.0.0.1:%d" % free_port(), "app:app", cwd=str(tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("greenserve: error: "), result.stderr
    assert fragment in lines[0]


def test_reload_dir_needs_reload_and_a_directory(tmp_path):
    write_app(str(tmp_path), b"v1")
    result = _run("--reload-dir", ".", "app:app", cwd=str(tmp_path))
    assert (result.returncode, result.stderr) == (2, "greenserve: error: --reload-dir needs --reload\n")
    result = _run("--reload", "--reload-dir", "no-such-dir", "app:app", cwd=str(tmp_path))
    assert result.returncode == 2
    assert result.stderr == "greenserve: error: --reload-dir: no such directory: no-such-dir\n"


def test_without_watchfiles_reload_is_accepted(tmp_path):
    # (It was refused; the warning is the start's: test_an_edit_is_served_and_a_broken_one_is_not.)
    write_app(str(tmp_path), b"v1")
    result = subprocess.run(
        greenserve_command("--reload", "--print-config", "app:app"), cwd=str(tmp_path),
        env=subprocess_env(**without_watchfiles(tmp_path)), capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert [line.split("#")[0].split() for line in result.stdout.splitlines() if line.startswith("reload ")] == [
        ["reload", "=", "True"]
    ]

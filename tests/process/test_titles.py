"""Process titles (--name, gunicorn's proc_name): read back from /proc/PID/cmdline, as ps shows them.

Each test starts `python -m greenserve` in its own session (test_master's Master) and reads the
master's and every worker's title from the kernel, at start and after a SIGHUP; run in both
builds (the workers import the compiled or the pure hot path, GREENSERVE_PURE_PYTHON=1).
"""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import children_of, free_port, greenserve_command, subprocess_env, wait_until
from tests.process import test_master

pytest.importorskip("setproctitle")  # the `test` extra installs it; the titles need it

master = test_master.master  # the fixture: a master started in its own session, killed at the end

APP = """
import os


def app(environ, start_response):
    if environ["PATH_INFO"] == "/title":
        import setproctitle  # the application's own import, after greenserve loaded its C module

        body = setproctitle.getproctitle().encode()
    else:
        body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
"""


def title(pid):
    """The process's title: its command line as the kernel shows it, up to the first NUL."""
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return f.read().split(b"\0", 1)[0].decode()


def start(master, tmp_path, *args, env=None):
    (tmp_path / "titleapp.py").write_text(textwrap.dedent(APP))
    return master(*args, app="titleapp:app", env=env)


def titles(m, workers):
    """The master's title and its workers', once ``workers`` workers have taken theirs (one forked
    a moment ago still has the master's title until its first step)."""
    wait_until(lambda: len(m.worker_pids()) == workers
               and all(title(pid).startswith("greenserve: worker") for pid in m.worker_pids()),
               30, "%d titled workers" % workers)
    return title(m.process.pid), sorted(title(pid) for pid in m.worker_pids())


def reload(m, workers):
    """SIGHUP; return once ``workers`` workers, all of the new generation, are left."""
    old = set(m.worker_pids())
    m.process.send_signal(signal.SIGHUP)
    wait_until(lambda: len(m.worker_pids()) == workers and not old & set(m.worker_pids()), 30,
               "the new generation to replace the old one")


def test_name_titles_the_master_and_each_worker_and_a_reload_keeps_them(master, tmp_path):
    m = start(master, tmp_path, "--name", "shop-web", "--workers", "2")
    assert titles(m, 2) == ("greenserve: master [shop-web]", ["greenserve: worker [shop-web]"] * 2)
    # The application may import setproctitle itself: it gets the module greenserve loaded.
    assert m.get("/title") == "greenserve: worker [shop-web]"
    reload(m, 2)
    assert titles(m, 2) == ("greenserve: master [shop-web]", ["greenserve: worker [shop-web]"] * 2)
    assert m.stop() == 0
    assert "setproctitle" not in m.log_text()


def test_the_default_name_is_the_application_as_given(master, tmp_path):
    # gunicorn's default_proc_name: the application's import string.
    m = start(master, tmp_path, "--workers", "1")
    assert titles(m, 1) == ("greenserve: master [titleapp:app]", ["greenserve: worker [titleapp:app]"])


def test_a_reload_renames_the_master_and_the_new_workers_from_the_config_file(master, tmp_path):
    # gunicorn's spelling in a gunicorn.conf.py; SIGHUP reads the file again, as gunicorn retitles.
    conf = tmp_path / "gunicorn.conf.py"
    conf.write_text('proc_name = "blue"\nworkers = 2\n')
    m = start(master, tmp_path, "-c", str(conf))
    assert titles(m, 2) == ("greenserve: master [blue]", ["greenserve: worker [blue]"] * 2)
    conf.write_text('proc_name = "green"\nworkers = 2\n')
    reload(m, 2)
    assert titles(m, 2) == ("greenserve: master [green]", ["greenserve: worker [green]"] * 2)


def hide_setproctitle(tmp_path):
    """A PYTHONPATH on which setproctitle has no C module, as when it is not installed."""
    hidden = tmp_path / "hidden"
    (hidden / "setproctitle").mkdir(parents=True)
    (hidden / "setproctitle" / "__init__.py").write_text('raise ImportError("hidden by tests/process/test_titles.py")\n')
    return {"PYTHONPATH": "%s%s%s" % (hidden, os.pathsep, subprocess_env()["PYTHONPATH"])}


def test_without_setproctitle_a_name_is_one_warning_naming_the_extra(master, tmp_path):
    m = start(master, tmp_path, "--name", "shop-web", "--workers", "2", env=hide_setproctitle(tmp_path))
    reload(m, 2)
    assert m.get() != ""
    assert m.stop() == 0
    warnings = [line for line in m.log_text().splitlines() if "setproctitle" in line]
    assert len(warnings) == 1, warnings
    assert "[WARNING] --name shop-web: process titles need setproctitle" in warnings[0]
    assert "pip install setproctitle" in warnings[0]


def test_without_setproctitle_and_without_a_name_nothing_is_said(master, tmp_path):
    m = start(master, tmp_path, "--workers", "1", env=hide_setproctitle(tmp_path))
    assert m.get() != ""
    # The command line, as started.
    assert (title(m.process.pid), [title(pid) for pid in m.worker_pids()]) == (sys.executable, [sys.executable])
    assert m.stop() == 0
    assert "setproctitle" not in m.log_text()


def test_a_bad_name_is_one_line():
    result = subprocess.run(greenserve_command("--name", "", "titleapp:app"), env=subprocess_env(),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "greenserve: error: --name: expected a non-empty name without NUL characters, got ''"
    ]


RUN_SCRIPT = """
import greenserve
from gevent.server import StreamServer


def answer(sock, address):
    sock.sendall(b"hi")


greenserve.run(lambda listener: StreamServer(listener, answer), bind="127.0.0.1:%d", workers=1)
"""


def test_run_names_its_processes_after_the_script(tmp_path):
    # greenserve.run() has no MODULE:APP: the script that called it stands in.
    (tmp_path / "serve_answers.py").write_text(RUN_SCRIPT % free_port())
    process = subprocess.Popen([sys.executable, str(tmp_path / "serve_answers.py")], env=subprocess_env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_until(lambda: len(children_of(process.pid)) == 1
                   and title(children_of(process.pid)[0]).startswith("greenserve: worker"), 30, "the worker")
        assert title(process.pid) == "greenserve: master [serve_answers.py]"
        assert title(children_of(process.pid)[0]) == "greenserve: worker [serve_answers.py]"
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0, process.stderr.read()

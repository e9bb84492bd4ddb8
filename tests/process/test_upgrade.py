"""Binary upgrade on SIGUSR2 with the real `greenserve` command: a new master of new code on the
old master's sockets, WINCH and TERM to the old one, the rollback, the pid files, a new master
that cannot start, and systemd's MAINPID=.

Each test starts `python -m greenserve --preload` (its own session) over an application module
in a directory of its own on PYTHONPATH: the master imports it, so only a new master (a new
interpreter) serves a new version of it, and its answers say which version, which worker and
which master. Every wait is bounded; what a test started is killed by PID at its end.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

import pytest

from tests.conftest import KeepAliveFetch, Load, children_of, free_port, greenserve_command, subprocess_env, wait_until
from tests.process.test_systemd import Systemd

APP = '''
import os

VERSION = %r


def app(environ, start_response):
    body = ("%%s %%d %%d" %% (VERSION, os.getpid(), os.getppid())).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''

BROKEN = '''
raise ImportError("upgradeapp v3 does not import")
'''

WRK = shutil.which("wrk")


def write_app(directory, version=None, source=None):
    # No bytecode is written (PYTHONDONTWRITEBYTECODE): a .pyc of the same size and second
    # would be taken for the new source.
    (directory / "upgradeapp.py").write_text(textwrap.dedent(source if source is not None else APP % version))


class Server:
    """The old master, as an operator starts it, and what its pid files say."""

    def __init__(self, tmp_path, *args, env=None, bind=None, cwd=None):
        self.dir = tmp_path
        self.code = tmp_path / "code"
        self.code.mkdir()
        write_app(self.code, "v1")
        self.port = free_port()
        self.pid_path = tmp_path / "app.pid"
        self.oldbin_path = tmp_path / "app.pid.oldbin"
        self.log = tmp_path / "error.log"
        environ = subprocess_env(PYTHONDONTWRITEBYTECODE="1", **(env or {}))
        if cwd is None:
            environ["PYTHONPATH"] = str(self.code) + os.pathsep + environ["PYTHONPATH"]
        else:
            environ["PWD"] = str(cwd)  # as a shell sets it: the directory as the operator named it
        self.process = subprocess.Popen(
            greenserve_command("--bind", bind or "127.0.0.1:%d" % self.port, "--workers", "2", "--preload",
                               "--pid", str(self.pid_path), "--graceful-timeout", "10", *args, "upgradeapp:app"),
            cwd=str(cwd or tmp_path), env=environ, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"),
            start_new_session=True,
        )
        self.pid = self.process.pid
        self.new_pid = None
        wait_until(lambda: self._serving(self.pid), 30, "the master to serve: %s" % self.log_text)

    @property
    def log_text(self):
        return self.log.read_text()

    def get(self, timeout=10):
        with urllib.request.urlopen("http://127.0.0.1:%d/" % self.port, timeout=timeout) as response:
            return response.read().decode()

    def answer(self):
        """(version, worker pid, master pid) of one request."""
        version, worker, master = self.get().split()
        return version, int(worker), int(master)

    def _serving(self, master):
        assert self.process.poll() is None or master != self.pid, "the master exited: %s" % self.log_text
        return len(children_of(master)) >= 2 and read_pid(self.pid_path) == master

    def upgrade(self):
        """kill -USR2 $(cat app.pid); wait for the new master's workers: its pid."""
        os.kill(read_pid(self.pid_path), signal.SIGUSR2)
        wait_until(lambda: read_pid(self.oldbin_path) == self.pid, 10, "app.pid.oldbin: %s" % self.log_text)

        def new_master_serves():
            pid = read_pid(self.pid_path)
            return pid not in (None, self.pid) and len(children_of(pid)) == 2

        wait_until(new_master_serves, 30, "the new master's workers: %s" % self.log_text)
        self.new_pid = read_pid(self.pid_path)
        assert self.new_pid in children_of(self.pid)  # the old master's child: it reaps it
        return self.new_pid

    def masters_workers(self, master):
        """The workers of ``master``: its children, but for the new master it started."""
        return set(children_of(master)) - {self.new_pid}

    def kill_all(self):
        # Every master this test may have started: a third one (an upgrade of the new master) is
        # in the pid files, and in this test's session.
        pids = {self.pid, self.new_pid, read_pid(self.pid_path), read_pid(self.oldbin_path)} - {None}
        for pid in pids:
            if _alive(pid) and _session(pid) == self.pid:
                for worker in children_of(pid):
                    _kill(worker)
                _kill(pid)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def read_pid(path):
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _session(pid):
    try:
        return os.getsid(pid)
    except OSError:
        return None


def _kill(pid):
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def server(tmp_path):
    started = []

    def start(*args, **kwargs):
        started.append(Server(tmp_path, *args, **kwargs))
        return started[-1]

    yield start
    for s in started:
        s.kill_all()


def wait_gone(pid, timeout, what):
    wait_until(lambda: not _alive(pid), timeout, what)


def finish_upgrade(s):
    """kill -WINCH $(cat app.pid.oldbin); kill -TERM $(cat app.pid.oldbin)."""
    old_workers = s.masters_workers(s.pid)
    os.kill(read_pid(s.oldbin_path), signal.SIGWINCH)
    wait_until(lambda: not s.masters_workers(s.pid), 20, "the old master's workers to stop: %s" % s.log_text)
    assert _alive(s.pid)  # it stays, to be rolled back to
    for pid in old_workers:
        assert not _alive(pid)
    os.kill(read_pid(s.oldbin_path), signal.SIGTERM)
    assert s.process.wait(timeout=20) == 0, s.log_text
    assert not s.oldbin_path.exists()


def test_usr2_winch_term_under_load_fails_no_request_and_the_new_master_serves_the_new_code(server):
    s = server()
    assert s.answer()[::2] == ("v1", s.pid)
    with Load(KeepAliveFetch("127.0.0.1", s.port), threads=6) as load:
        time.sleep(0.5)
        write_app(s.code, "v2")
        new = s.upgrade()
        # Both masters serve: the old one's workers keep accepting until WINCH.
        time.sleep(0.5)
        finish_upgrade(s)
        wait_until(lambda: any(body.startswith("v2 ") for body in load.served[-20:]), 10, "the new code served")
        time.sleep(0.3)
    assert load.failures == [], load.failures[:5]
    versions = {body.split()[0] for body in load.served}
    assert versions == {"v1", "v2"}, versions
    # The new version came from the new master: --preload imported it there, not in a worker.
    assert {int(body.split()[2]) for body in load.served if body.startswith("v2 ")} == {new}
    assert s.answer()[::2] == ("v2", new)
    assert read_pid(s.pid_path) == new and not s.oldbin_path.exists()
    log = s.log_text
    assert "SIGUSR2: upgrading: the new master (pid %d)" % new in log
    assert "serving the 1 socket(s) of the old master" in log
    assert "SIGWINCH: this master's workers stop gracefully" in log
    # The new master, on its own now, stops as any master and removes its pid file.
    os.kill(new, signal.SIGTERM)
    wait_gone(new, 20, "the new master to stop")
    assert not s.pid_path.exists()


@pytest.mark.skipif(WRK is None, reason="wrk is not installed (apt-get install wrk)")
def test_usr2_winch_term_under_wrk_load_gives_no_socket_error_nor_non_2xx(server):
    s = server()
    wrk = subprocess.Popen([WRK, "-t1", "-c20", "-d7s", "http://127.0.0.1:%d/" % s.port],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1)
        write_app(s.code, "v2")
        new = s.upgrade()
        time.sleep(0.5)
        finish_upgrade(s)
        out = wrk.communicate(timeout=30)[0]
    finally:
        if wrk.poll() is None:
            wrk.kill()
            wrk.wait()
    assert "requests in" in out, out
    # wrk says "Socket errors: connect N, read N, write N, timeout N" and "Non-2xx" only when there were any.
    assert "Socket errors" not in out and "Non-2xx" not in out, out
    assert s.answer()[::2] == ("v2", new)


def test_rollback_under_load_hup_the_old_master_then_term_the_new_one(server):
    s = server()
    write_app(s.code, "v2")
    new = s.upgrade()
    os.kill(s.pid, signal.SIGWINCH)
    wait_until(lambda: not s.masters_workers(s.pid), 20, "the old master's workers to stop")
    assert s.answer()[::2] == ("v2", new)
    with Load(KeepAliveFetch("127.0.0.1", s.port), threads=4) as load:
        # The rollback: the old master's workers again (HUP), then the new master ends: TERM,
        # gracefully (QUIT would close its connections now, requests in flight with them).
        os.kill(s.pid, signal.SIGHUP)
        wait_until(lambda: len(s.masters_workers(s.pid)) == 2, 20, "the old master's workers again")
        os.kill(new, signal.SIGTERM)
        wait_gone(new, 20, "the new master to end")
        wait_until(lambda: read_pid(s.pid_path) == s.pid, 10, "app.pid back: %s" % s.log_text)
        time.sleep(0.3)
    assert load.failures == [], load.failures[:5]
    assert not s.oldbin_path.exists()
    assert s.answer()[::2] == ("v1", s.pid)  # the old code, which the old master preloaded
    assert ("the new master (pid %d) stopped: the upgrade is over, this master (pid %d) serves on; %s is its pid "
            "file again" % (new, s.pid, s.pid_path)) in s.log_text
    assert s.process.poll() is None
    s.process.send_signal(signal.SIGTERM)
    assert s.process.wait(timeout=20) == 0
    assert not s.pid_path.exists()


def test_quitting_the_new_master_after_winch_restarts_the_old_masters_workers(server):
    # The operator forgot the HUP: the old master, left without workers, starts them itself.
    s = server()
    new = s.upgrade()
    os.kill(s.pid, signal.SIGWINCH)
    wait_until(lambda: not s.masters_workers(s.pid), 20, "the old master's workers to stop")
    os.kill(new, signal.SIGTERM)
    wait_gone(new, 20, "the new master to end")
    wait_until(lambda: len(s.masters_workers(s.pid)) == 2, 20, "the old master's workers again: %s" % s.log_text)
    assert s.answer()[::2] == ("v1", s.pid)
    assert "its 2 worker(s) start again" in s.log_text


def test_a_new_master_that_cannot_start_leaves_the_old_one_serving(server):
    s = server()
    write_app(s.code, source=BROKEN)
    os.kill(s.pid, signal.SIGUSR2)
    wait_until(lambda: "the upgrade is over" in s.log_text, 30, "the new master's failure: %s" % s.log_text)
    log = s.log_text
    assert "upgradeapp v3 does not import" in log  # the new master's own traceback
    line = next(line for line in log.splitlines() if "the upgrade is over" in line)
    assert "[ERROR]" in line and "exited with code 3 (its log above says why)" in line, line
    assert read_pid(s.pid_path) == s.pid and not s.oldbin_path.exists()
    assert s.answer()[::2] == ("v1", s.pid)
    assert len(s.masters_workers(s.pid)) == 2
    # It may be tried again once the code is fixed.
    write_app(s.code, "v2")
    new = s.upgrade()
    assert s.answer()[0] in ("v1", "v2")
    finish_upgrade(s)
    assert s.answer()[::2] == ("v2", new)


def test_a_second_usr2_is_refused_by_either_master_while_an_upgrade_is_in_progress(server):
    s = server()
    new = s.upgrade()
    os.kill(s.pid, signal.SIGUSR2)
    os.kill(new, signal.SIGUSR2)
    wait_until(lambda: s.log_text.count("SIGUSR2 ignored") == 2, 10, "two refusals: %s" % s.log_text)
    log = s.log_text
    assert ("SIGUSR2 ignored: an upgrade is in progress: the new master (pid %d) runs" % new) in log
    assert ("SIGUSR2 ignored: this is the new master of an upgrade, and the old master (pid %d) still runs: "
            "end it first (kill -TERM %d)" % (s.pid, s.pid)) in log
    time.sleep(0.5)
    assert set(children_of(s.pid)) - {new} == s.masters_workers(s.pid)
    assert len(children_of(s.pid)) == 3 and len(children_of(new)) == 2  # no third master
    assert read_pid(s.pid_path) == new and read_pid(s.oldbin_path) == s.pid
    # Once the old master is gone the new one may be upgraded in its turn.
    finish_upgrade(s)
    os.kill(new, signal.SIGUSR2)
    wait_until(lambda: read_pid(s.oldbin_path) == new, 10, "the new master's own .oldbin: %s" % s.log_text)
    wait_until(lambda: read_pid(s.pid_path) not in (None, new), 30, "a third master")
    third = read_pid(s.pid_path)
    wait_until(lambda: len(children_of(third)) == 2, 30, "the third master's workers")
    s.new_pid = new
    for pid in (third, new):
        os.kill(pid, signal.SIGTERM)
        wait_gone(pid, 20, "a master to stop")


def test_winch_without_an_upgrade_is_ignored(server):
    # A terminal's resize sends SIGWINCH to the foreground master: its workers must stay.
    s = server()
    workers = s.masters_workers(s.pid)
    for _ in range(3):
        s.process.send_signal(signal.SIGWINCH)
    wait_until(lambda: "SIGWINCH ignored" in s.log_text, 10, "the line")
    time.sleep(0.5)
    assert s.masters_workers(s.pid) == workers
    assert s.log_text.count("SIGWINCH ignored: no new master runs") == 1


def test_a_unix_socket_file_outlives_the_old_master_and_goes_with_the_last(server, tmp_path):
    path = str(tmp_path / "app.sock")
    s = server(bind="unix:" + path)

    def get():
        client = socket.socket(socket.AF_UNIX)
        client.settimeout(10)
        client.connect(path)
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = client.recv(65536)
            if not chunk:
                break
            data += chunk
        client.close()
        return data.decode().split("\r\n\r\n", 1)[1].split()

    write_app(s.code, "v2")
    new = s.upgrade()
    finish_upgrade(s)
    assert os.path.exists(path)  # the old master left it to the new one
    assert get()[0] == "v2" and int(get()[2]) == new
    os.kill(new, signal.SIGTERM)
    wait_gone(new, 20, "the new master to stop")
    assert not os.path.exists(path)


def test_the_new_master_tells_systemd_its_mainpid_and_the_old_one_does_not_stop_the_unit(server, tmp_path):
    manager = Systemd(str(tmp_path / "notify.sock"))
    try:
        s = server(env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
        wait_until(lambda: manager.kinds() == ["READY"], 10, "READY=1")
        assert manager.received()[0]["MAINPID"] == str(s.pid)
        new = s.upgrade()
        wait_until(lambda: manager.kinds() == ["READY", "READY"], 10, "READY=1 of the new master")
        assert manager.received()[1]["MAINPID"] == str(new)
        finish_upgrade(s)
        time.sleep(0.5)
        assert manager.kinds() == ["READY", "READY"]  # no STOPPING=1 from the old master
        os.kill(new, signal.SIGTERM)
        wait_gone(new, 20, "the new master to stop")
        wait_until(lambda: manager.kinds() == ["READY", "READY", "STOPPING"], 10, "STOPPING=1 of the new master")
    finally:
        manager.close()


def test_a_rolled_back_new_master_hands_mainpid_back_to_the_old_one(server, tmp_path):
    manager = Systemd(str(tmp_path / "notify.sock"))
    try:
        s = server(env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
        wait_until(lambda: manager.kinds() == ["READY"], 10, "READY=1")
        new = s.upgrade()
        wait_until(lambda: manager.kinds() == ["READY", "READY"], 10, "READY=1 of the new master")
        os.kill(new, signal.SIGQUIT)
        wait_gone(new, 20, "the new master to end")
        wait_until(lambda: len(manager.kinds()) == 4, 10, "MAINPID= twice more: %s" % manager.received())
        handed, taken = manager.received()[2:]
        assert handed == {"MAINPID": str(s.pid), "STATUS": "rolled back: the old master serves"}
        assert taken["READY"] == "1" and taken["MAINPID"] == str(s.pid)
        assert "STOPPING" not in [kind for kind in manager.kinds()]
    finally:
        manager.close()


def test_metrics_bind_is_handed_on_and_pre_exec_runs_in_the_forked_child(server, tmp_path):
    # The new master cannot bind --metrics-bind's port while the old one holds it: it takes the
    # old master's socket, as it takes the listeners.
    metrics_port = free_port()
    (tmp_path / "upgradehooks.py").write_text(textwrap.dedent('''
        import os


        def pre_exec(server):
            with open(os.path.join(os.path.dirname(__file__), "pre_exec"), "w") as out:
                out.write("%d %d" % (os.getpid(), os.getppid()))
    '''))
    s = server("--metrics-bind", "127.0.0.1:%d" % metrics_port, "--pre-exec", "upgradehooks:pre_exec")

    def scrape():
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=10) as response:
            return response.read().decode()

    assert "greenserve_" in scrape()
    new = s.upgrade()
    # Run in the child that became the new master, before it executed (the old master is its parent).
    child, parent = map(int, (tmp_path / "pre_exec").read_text().split())
    assert (child, parent) == (new, s.pid)
    finish_upgrade(s)
    assert "greenserve_" in scrape()
    assert "address already in use" not in s.log_text


def test_usr2_to_a_run_master_is_one_warning_and_it_serves_on(tmp_path):
    # greenserve.run() cannot re-execute what started it (the user's own program): it says so.
    port = free_port()
    (tmp_path / "runner.py").write_text(textwrap.dedent('''
        import sys

        import greenserve
        from gevent.pywsgi import WSGIServer


        def app(environ, start_response):
            start_response("200 OK", [("Content-Length", "2")])
            return [b"ok"]


        sys.exit(greenserve.run(lambda listener: WSGIServer(listener, app, log=None), bind=sys.argv[1], workers=1))
    '''))
    log = tmp_path / "error.log"
    process = subprocess.Popen([sys.executable, str(tmp_path / "runner.py"), "127.0.0.1:%d" % port], cwd=str(tmp_path),
                               env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=open(log, "w"),
                               start_new_session=True)
    try:
        wait_until(lambda: len(children_of(process.pid)) == 1 and _get_ok(port), 30, "run() to serve: %s" % log.read_text())
        workers = children_of(process.pid)
        process.send_signal(signal.SIGUSR2)
        wait_until(lambda: "SIGUSR2 ignored" in log.read_text(), 10, "the line")
        assert ("SIGUSR2 ignored: only the greenserve command re-executes itself (a binary upgrade)"
                in log.read_text())
        assert _get_ok(port) and children_of(process.pid) == workers
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)


def _get_ok(port):
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=5) as response:
            return response.read() == b"ok"
    except OSError:
        return False


def test_a_release_symlink_repointed_before_usr2_gives_the_new_master_the_new_release(server, tmp_path):
    # Capistrano's layout: started in /srv/app/current, a symlink to the release; a deploy points
    # it at the next release, then USR2. The new master must start in current as named ($PWD),
    # not in the directory getcwd() resolved it to (the old release).
    releases = tmp_path / "releases"
    for version in ("v1", "v2"):
        (releases / version).mkdir(parents=True)
        write_app(releases / version, version)
    current = tmp_path / "current"
    current.symlink_to(releases / "v1")
    s = server(cwd=current)
    assert s.answer()[::2] == ("v1", s.pid)
    current.unlink()
    current.symlink_to(releases / "v2")
    new = s.upgrade()
    finish_upgrade(s)
    assert s.answer()[::2] == ("v2", new)


@pytest.mark.parametrize("value, said", [
    ("3,x", "GREENSERVE_LISTEN_FDS=3,x: not a list of descriptors"),
    ("97", "the old master's socket 97 (GREENSERVE_LISTEN_FDS) is not a usable socket: Bad file descriptor"),
])
def test_a_bad_inherited_descriptor_is_one_line_and_exit_2(tmp_path, value, said):
    # What only an old master sets, set by hand or left over in an environment: said, not a traceback.
    write_app(tmp_path, "v1")
    env = subprocess_env(GREENSERVE_LISTEN_FDS=value)
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    done = subprocess.run(greenserve_command("--bind", "127.0.0.1:%d" % free_port(), "upgradeapp:app"),
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "greenserve: error: " + said


def test_a_daemon_upgrades_and_its_new_master_stays_its_child(tmp_path):
    # gunicorn's own case for WINCH: a --daemon master. Its new master must not detach again,
    # or the old one could not reap it (a failed start, a rollback).
    write_app(tmp_path, "v1")
    port, pid_path, oldbin_path = free_port(), tmp_path / "app.pid", tmp_path / "app.pid.oldbin"
    env = subprocess_env(PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = str(tmp_path) + os.pathsep + env["PYTHONPATH"]
    started = []
    try:
        done = subprocess.run(greenserve_command("--bind", "127.0.0.1:%d" % port, "--workers", "1", "--preload",
                                                 "--daemon", "--pid", str(pid_path), "--error-log",
                                                 str(tmp_path / "error.log"), "upgradeapp:app"),
                              cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        old = read_pid(pid_path)
        started.append(old)
        write_app(tmp_path, "v2")
        os.kill(old, signal.SIGUSR2)
        wait_until(lambda: read_pid(pid_path) not in (None, old), 30, "the new master's pid file")
        new = read_pid(pid_path)
        started.append(new)
        assert read_pid(oldbin_path) == old and new in children_of(old)
        wait_until(lambda: len(children_of(new)) == 1, 30, "the new master's worker")
        os.kill(old, signal.SIGWINCH)
        wait_until(lambda: children_of(old) == [new], 20, "the old master's worker to stop")
        os.kill(old, signal.SIGTERM)
        wait_gone(old, 20, "the old master to end")
        with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=10) as response:
            version, _, master = response.read().decode().split()
        assert (version, int(master)) == ("v2", new)
        os.kill(new, signal.SIGTERM)
        wait_gone(new, 20, "the new master to end")
        assert not pid_path.exists() and not oldbin_path.exists()
    finally:
        for pid in started:
            if _alive(pid):
                for worker in children_of(pid):
                    _kill(worker)
                _kill(pid)


def test_systemds_socket_is_handed_on_and_the_new_master_is_told_nothing_of_listen_fds(tmp_path):
    # Socket activation: the old master took systemd's socket (LISTEN_FDS, for its own pid). The
    # new master gets it in GREENSERVE_LISTEN_FDS; LISTEN_PID would name the old master.
    from tests.process import test_listeners

    pid_path = tmp_path / "app.pid"
    process, port, log = test_listeners._activated(tmp_path, "us", "socket", "--workers", "1", "--pid", str(pid_path))
    started = [process.pid]
    try:
        wait_until(lambda: read_pid(pid_path) == process.pid and len(children_of(process.pid)) == 1, 30,
                   "the master: %s" % log.read_text())
        assert test_listeners._get_json(port)["pid"] in children_of(process.pid)
        os.kill(process.pid, signal.SIGUSR2)
        wait_until(lambda: read_pid(pid_path) not in (None, process.pid), 30, "the new master: %s" % log.read_text())
        new = read_pid(pid_path)
        started.append(new)
        wait_until(lambda: len(children_of(new)) == 1, 30, "the new master's worker")
        os.kill(process.pid, signal.SIGWINCH)
        wait_until(lambda: children_of(process.pid) == [new], 20, "the old master's worker to stop")
        body = test_listeners._get_json(port)
        assert body["pid"] in children_of(new) and body["listen"] == []
        assert "serving the 1 socket(s) of the old master" in log.read_text()
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
        assert test_listeners._get_json(port)["pid"] in children_of(new)
    finally:
        for pid in started:
            if _alive(pid) and _session(pid) == process.pid:
                for worker in children_of(pid):
                    _kill(worker)
                _kill(pid)
        if process.poll() is None:
            process.wait(timeout=5)

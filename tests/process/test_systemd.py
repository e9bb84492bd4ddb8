"""systemd's Type=notify: the master's sd_notify messages, received as systemd receives them.

Each test binds a unix datagram socket itself (in tmp_path, or in the abstract namespace), starts
`python -m greenserve` with NOTIFY_SOCKET naming it, and reads what arrives and in which order:
READY=1 once a worker serves, RELOADING=1 then READY=1 around a SIGHUP, STOPPING=1 on SIGTERM,
WATCHDOG=1 under WATCHDOG_USEC. Run in both builds, as every test of the process model.
"""

import json
import os
import signal
import socket
import subprocess
import textwrap
import threading
import time
import urllib.request

import pytest

from tests.conftest import free_port, greenserve_command, subprocess_env, wait_until
from tests.process import test_master

master = test_master.master  # the fixture: a master started in its own session, killed at the end

APP = """
import json
import os
import time


def systemd_environ():
    return json.dumps({name: os.environ.get(name) for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")})


time.sleep(0.5)  # a slow import: READY=1 must wait for it
with open(os.path.join(os.path.dirname(__file__), "imported"), "w") as out:
    out.write(systemd_environ())  # what the import saw (in the master, with --preload)


def app(environ, start_response):
    if environ["PATH_INFO"] == "/environ":
        body = systemd_environ()
    else:
        body = str(os.getpid())
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body.encode()]
"""


class Systemd:
    """The service manager's end of NOTIFY_SOCKET: every datagram, parsed, in arrival order."""

    def __init__(self, address):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.2)
        self.messages = []  # (monotonic arrival time, {key: value})
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._receive, daemon=True)
        self.thread.start()

    def _receive(self):
        while not self.done.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            fields = dict(line.split("=", 1) for line in data.decode().split("\n") if line)
            with self.lock:
                self.messages.append((time.monotonic(), fields))

    def received(self, without_watchdog=True):
        with self.lock:
            return [fields for _, fields in self.messages if not (without_watchdog and set(fields) == {"WATCHDOG"})]

    def kinds(self):
        """The messages' first keys in order (READY, RELOADING, STOPPING), watchdog pings left out."""
        return [next(iter(fields)) for fields in self.received()]

    def wait_for(self, kinds, timeout=30):
        wait_until(lambda: self.kinds() == kinds, timeout, "%s (so far: %s)" % (kinds, self.kinds()))
        return self.received()

    def pings(self):
        with self.lock:
            return [at for at, fields in self.messages if fields == {"WATCHDOG": "1"}]

    def close(self):
        self.done.set()
        self.thread.join(timeout=5)
        self.sock.close()


@pytest.fixture
def systemd(tmp_path):
    made = []

    def make(address=None):
        made.append(Systemd(address or str(tmp_path / "notify.sock")))
        return made[-1]

    yield make
    for manager in made:
        manager.close()


def start(master, tmp_path, address, *args, **env):
    (tmp_path / "notifyapp.py").write_text(textwrap.dedent(APP))
    return master("--workers", "2", *args, app="notifyapp:app", env=dict(NOTIFY_SOCKET=address, **env))


NOTHING = {"NOTIFY_SOCKET": None, "WATCHDOG_USEC": None, "WATCHDOG_PID": None}


@pytest.mark.parametrize("preload", [[], ["--preload"]], ids=["", "preload"])
def test_ready_reloading_and_stopping_arrive_in_order_and_the_app_does_not_see_the_socket(master, systemd, tmp_path,
                                                                                           preload):
    manager = systemd()
    m = start(master, tmp_path, manager.sock.getsockname(), *preload, WATCHDOG_USEC="0")
    ready = manager.wait_for(["READY"])[0]
    # READY=1 came after the application's import, and the port serves as it arrives.
    assert json.loads((tmp_path / "imported").read_text()) == NOTHING
    assert m.get() in {str(pid) for pid in m.worker_pids()}
    old_workers = set(m.worker_pids())
    assert ready["READY"] == "1" and ready["MAINPID"] == str(m.process.pid) and ready["STATUS"].startswith("serving")
    assert json.loads(m.get("/environ")) == NOTHING

    m.process.send_signal(signal.SIGHUP)
    reloading = manager.wait_for(["READY", "RELOADING", "READY"])[1]
    # MONOTONIC_USEC is when the reload began, on CLOCK_MONOTONIC (systemd >= 253 checks it).
    assert abs(int(reloading["MONOTONIC_USEC"]) / 1e6 - time.clock_gettime(time.CLOCK_MONOTONIC)) < 10
    # READY=1 again once the new generation serves: two workers that were not there before.
    assert len(set(m.worker_pids()) - old_workers) == 2

    m.process.send_signal(signal.SIGTERM)
    stopping = manager.wait_for(["READY", "RELOADING", "READY", "STOPPING"])[3]
    assert stopping["STOPPING"] == "1" and stopping["STATUS"] == "stopping gracefully"
    assert m.process.wait(timeout=30) == 0, m.log_text()  # (m.stop() would send a second TERM)
    assert manager.kinds() == ["READY", "RELOADING", "READY", "STOPPING"]
    assert "NOTIFY_SOCKET" not in m.log_text()  # no warning
    assert manager.pings() == []  # WATCHDOG_USEC=0: no watchdog


def test_the_watchdog_is_pinged_every_half_interval(master, systemd, tmp_path):
    manager = systemd()
    m = start(master, tmp_path, manager.sock.getsockname(), WATCHDOG_USEC="200000")
    manager.wait_for(["READY"])
    wait_until(lambda: len(manager.pings()) >= 12, 10, "a dozen WATCHDOG=1")
    pings = manager.pings()
    gaps = sorted(later - earlier for earlier, later in zip(pings, pings[1:]))
    # Every 0.1 s, half of the 0.2 s systemd waits (the slowest gap has a busy test machine's slack).
    assert 0.08 < gaps[len(gaps) // 2] < 0.15 and gaps[-1] < 0.5, gaps
    assert json.loads(m.get("/environ")) == NOTHING


def test_no_watchdog_pings_when_watchdog_pid_names_another_process(master, systemd, tmp_path):
    manager = systemd()
    start(master, tmp_path, manager.sock.getsockname(), WATCHDOG_USEC="200000", WATCHDOG_PID=str(os.getpid()))
    manager.wait_for(["READY"])
    time.sleep(1)
    assert manager.pings() == []


def test_the_watchdog_is_pinged_when_watchdog_pid_is_the_masters(systemd, tmp_path):
    manager = systemd()
    (tmp_path / "notifyapp.py").write_text(textwrap.dedent(APP))
    # The shell's pid is the master's after exec: systemd sets WATCHDOG_PID to the pid it started.
    command = " ".join("'%s'" % part for part in greenserve_command(
        "--bind", "127.0.0.1:%d" % free_port(), "--chdir", str(tmp_path), "notifyapp:app"))
    process = subprocess.Popen(["sh", "-c", "WATCHDOG_PID=$$ exec " + command], cwd=str(tmp_path),
                               env=subprocess_env(NOTIFY_SOCKET=manager.sock.getsockname(), WATCHDOG_USEC="200000"),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        ready = manager.wait_for(["READY"])[0]
        assert ready["MAINPID"] == str(process.pid)
        wait_until(lambda: len(manager.pings()) >= 3, 10, "WATCHDOG=1")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def test_an_abstract_socket_name_is_reached(master, systemd, tmp_path):
    name = "greenserve-test-%d-%d" % (os.getpid(), time.monotonic_ns())
    manager = systemd("\0" + name)
    m = start(master, tmp_path, "@" + name)
    assert manager.wait_for(["READY"])[0]["MAINPID"] == str(m.process.pid)


@pytest.mark.parametrize("address, said", [
    ("/nonexistent/notify.sock", "NOTIFY_SOCKET=/nonexistent/notify.sock: cannot tell systemd (No such file or "
                                 "directory); greenserve serves on without it"),
    ("vsock:2:1234", "NOTIFY_SOCKET=vsock:2:1234: not a socket path (/...) or an abstract socket name (@...): "
                     "systemd is not told that greenserve serves"),
], ids=["missing", "vsock"])
def test_a_socket_that_cannot_be_reached_is_one_warning(master, tmp_path, address, said):
    m = start(master, tmp_path, address, WATCHDOG_USEC="200000")
    m.process.send_signal(signal.SIGHUP)
    wait_until(lambda: "stopped: reloaded (SIGHUP)" in m.log_text(), 30, "a reload")
    assert json.loads(m.get("/environ"))["NOTIFY_SOCKET"] is None
    assert m.stop() == 0
    warnings = [line for line in m.log_text().splitlines() if "NOTIFY_SOCKET" in line]
    assert len(warnings) == 1 and warnings[0].endswith("[WARNING] " + said), warnings


def test_daemon_tells_its_own_pid_as_mainpid(systemd, tmp_path):
    manager = systemd()
    (tmp_path / "notifyapp.py").write_text(textwrap.dedent(APP))
    port = free_port()
    pid_path = tmp_path / "gs.pid"
    result = subprocess.run(
        greenserve_command("--daemon", "--pid", str(pid_path), "--error-log", str(tmp_path / "daemon.log"),
                           "--bind", "127.0.0.1:%d" % port, "--chdir", str(tmp_path), "notifyapp:app"),
        cwd=str(tmp_path), env=subprocess_env(NOTIFY_SOCKET=manager.sock.getsockname()),
        capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 0, result.stderr
    pid = int(pid_path.read_text())
    try:
        # Sent before the launcher returned: systemd knows the daemon's pid before its child is gone.
        assert manager.wait_for(["READY"], timeout=5)[0]["MAINPID"] == str(pid)
        with urllib.request.urlopen("http://127.0.0.1:%d/environ" % port, timeout=10) as response:
            assert json.loads(response.read())["NOTIFY_SOCKET"] is None
    finally:
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: not pid_path.exists(), 30, "the daemon to stop")
    manager.wait_for(["READY", "STOPPING"], timeout=5)

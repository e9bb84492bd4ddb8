"""Where the listening sockets come from: --reuse-port (one per worker), systemd socket activation
(LISTEN_FDS), inherited descriptors; who may connect to a unix socket. Real processes on loopback,
every wait bounded."""

import os
import signal
import socket
import stat
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from greenserve import listeners
from tests.conftest import another_group, children_of, free_port, greenserve_command, read_to_close, subprocess_env, wait_until
from tests.process.test_master import Master

needs_reuse_port = pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="no SO_REUSEPORT here")

ENV_APP = '''
import json
import os


def app(environ, start_response):
    body = json.dumps({"pid": os.getpid(), "listen": sorted(k for k in os.environ if k.startswith("LISTEN_"))})
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body.encode()]
'''


def _listening_inodes(port):
    """Inodes of the sockets in LISTEN state on 127.0.0.1:port (from /proc/net/tcp)."""
    inodes = []
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.split(":")[1], 16) == port:
                inodes.append(inode)
    return inodes


def _socket_inodes(pid):
    found = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


@needs_reuse_port
def test_reuse_port_gives_each_worker_its_own_listening_socket(tmp_path):
    m = Master(tmp_path, "--workers", "2", "--reuse-port").wait_ready()
    try:
        wait_until(lambda: len(m.worker_pids()) == 2 and len(_listening_inodes(m.port)) == 2, 10, "two listeners")
        inodes = _listening_inodes(m.port)
        workers = m.worker_pids()
        # One listening socket in each worker; the master only holds the port (bound, not listening).
        assert [len(_socket_inodes(pid) & set(inodes)) for pid in workers] == [1, 1]
        assert not _socket_inodes(m.process.pid) & set(inodes)
        # The kernel spreads new connections over both queues (by a hash of the client's port).
        pids = {int(m.get().split()[1]) for _ in range(40)}
        assert pids == set(workers)
        assert "(a socket per worker: --reuse-port)" in m.log_text()
    finally:
        assert m.stop() == 0


@needs_reuse_port
def test_reuse_port_still_refuses_a_port_another_server_holds():
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        result = subprocess.run(
            greenserve_command("--reuse-port", "--bind", "127.0.0.1:%d" % port, "examples.hello:app"),
            env=subprocess_env(), capture_output=True, text=True, timeout=30,
        )
    assert result.returncode == 2
    assert result.stderr == "greenserve: error: cannot listen on 127.0.0.1:%d: address already in use\n" % port


def test_reuse_port_with_a_unix_socket_is_a_usage_error(tmp_path):
    result = subprocess.run(
        greenserve_command("--reuse-port", "--bind", "unix:%s" % (tmp_path / "s.sock"), "examples.hello:app"),
        env=subprocess_env(), capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("greenserve: error: --reuse-port works only with HOST:PORT addresses")
    assert not (tmp_path / "s.sock").exists()


# What systemd does for a .socket unit: listening sockets from fd 3 on, LISTEN_FDS counts them,
# LISTEN_PID names the process they are for; then exec (the pid stays the same).
ACTIVATE = """
import os, socket, sys
port, pid_for, fd_kind = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if fd_kind == "socket":
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(16)
    fd = sock.fileno()
else:
    fd = os.open(os.devnull, os.O_RDONLY)
if fd != 3:
    os.dup2(fd, 3)  # inheritable by default
os.set_inheritable(3, True)  # dup2 onto itself would have left it close-on-exec
os.environ["LISTEN_FDS"] = "1"
os.environ["LISTEN_PID"] = str(os.getpid()) if pid_for == "us" else "1"
os.environ["LISTEN_FDNAMES"] = "web"
os.execv(sys.executable, [sys.executable, "-m", "greenserve"] + sys.argv[4:])
"""


def _activated(tmp_path, pid_for, fd_kind, *args):
    (tmp_path / "envapp.py").write_text(textwrap.dedent(ENV_APP))
    port = free_port()
    log = tmp_path / "error.log"
    process = subprocess.Popen(
        [sys.executable, "-c", ACTIVATE, str(port), pid_for, fd_kind, "--chdir", str(tmp_path), *args, "envapp:app"],
        cwd=str(tmp_path), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=open(log, "w"),
        start_new_session=True,
    )
    return process, port, log


def _stop(process):
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)
        raise


def _get_json(port):
    import json

    with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=10) as response:
        return json.loads(response.read())


def test_systemd_socket_activation_serves_the_passed_socket(tmp_path):
    ignored = free_port()
    process, port, log = _activated(tmp_path, "us", "socket", "--workers", "2", "--bind", "127.0.0.1:%d" % ignored)
    try:
        wait_until(lambda: "listening on" in log.read_text() or process.poll() is not None, 20, "the server")
        assert process.poll() is None, log.read_text()
        text = log.read_text()
        assert "serving the 1 socket(s) systemd passed (LISTEN_FDS); --bind 127.0.0.1:%d ignored" % ignored in text
        assert "listening on http://127.0.0.1:%d" % port in text
        body = _get_json(port)
        # Taken out of the environment, so that the application's subprocesses leave the socket alone.
        assert body["listen"] == []
        assert body["pid"] in children_of(process.pid)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", ignored), timeout=5).close()
    finally:
        assert _stop(process) == 0, log.read_text()


def test_listen_fds_meant_for_another_process_are_ignored(tmp_path):
    bind = free_port()
    process, port, log = _activated(tmp_path, "other", "socket", "--bind", "127.0.0.1:%d" % bind)
    try:
        wait_until(lambda: "listening on" in log.read_text() or process.poll() is not None, 20, "the server")
        assert "LISTEN_FDS" not in log.read_text()
        assert _get_json(bind)["listen"] == []  # removed all the same
    finally:
        assert _stop(process) == 0, log.read_text()


def test_listen_fds_that_is_not_a_socket_is_one_line(tmp_path):
    process, port, log = _activated(tmp_path, "us", "file")
    assert process.wait(timeout=30) == 2
    assert log.read_text() == (
        "greenserve: error: systemd socket 3 (LISTEN_FDS) is not a usable socket: Socket operation on non-socket\n"
    )


def test_inherited_fd_that_is_not_listening_is_refused():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        with pytest.raises(listeners.ListenerError, match=r"^fd://\d+ is not listening"):
            listeners.make_listener(("fd", sock.fileno()), 16)
        assert sock.fileno() >= 0  # left open for its owner
    finally:
        sock.close()


def test_systemd_listen_fds_reads_and_removes_the_variables():
    env = {"LISTEN_PID": str(os.getpid() + 1), "LISTEN_FDS": "2", "LISTEN_FDNAMES": "a:b", "PATH": "/bin"}
    assert listeners.systemd_listen_fds(env) == []
    assert env == {"PATH": "/bin"}
    with pytest.raises(listeners.ListenerError, match="must be numbers"):
        listeners.systemd_listen_fds({"LISTEN_PID": "x", "LISTEN_FDS": "1"})
    assert listeners.systemd_listen_fds({}) == []


def _ok_app(environ, start_response):
    start_response("200 OK", [("Content-Length", "2")])
    return [b"ok"]


def _assert_answered_then_closed(received):
    """A queued request's answer from a stop: served whole, with Connection: close."""
    assert received.startswith(b"HTTP/1.1 200 OK\r\n") and received.endswith(b"\r\n\r\nok"), received
    assert b"Connection: close\r\n" in received


@needs_reuse_port
def test_a_private_queue_is_served_before_its_listener_closes():
    # A worker's own SO_REUSEPORT socket: what the kernel queued on it no other worker can take,
    # so stop() accepts and answers it (with Connection: close) instead of letting close() reset it.
    from greenserve.server import WSGIServer

    placeholder = listeners.make_listener(("tcp", "127.0.0.1", 0), 16, reuse_port=True)
    own = listeners.adopt(listeners.worker_listener(placeholder, 16))
    server = WSGIServer(own, _ok_app, log=None)
    server.private_queue = True
    client = socket.create_connection(own.getsockname(), timeout=5)
    try:
        client.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # queued: nothing has accepted yet
        server.start()  # its accept loop would run at the next switch to the hub; stop() comes first
        server.stop(5)
        received = read_to_close(client)
    finally:
        client.close()
        placeholder.close()
    _assert_answered_then_closed(received)


def test_a_shared_queue_is_served_before_its_listener_closes():
    # A listener the master and sibling workers share: when a whole instance stops, the last
    # process to close it resets what is queued (a balancer's request, sent, never read), and no
    # worker knows it is the last; so each stop takes what waits, as with a private queue.
    from greenserve.server import WSGIServer

    listener = listeners.adopt(listeners.make_listener(("tcp", "127.0.0.1", 0), 16))
    server = WSGIServer(listener, _ok_app, log=None)
    assert not server.private_queue
    clients = [socket.create_connection(listener.getsockname(), timeout=5) for _ in range(3)]
    try:
        for client in clients:
            client.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi")  # queued, unread
        server.start()
        server.stop(5)
        answers = []
        for client in clients:
            answers.append(read_to_close(client))
    finally:
        for client in clients:
            client.close()
    for received in answers:
        _assert_answered_then_closed(received)


@needs_reuse_port
def test_reuse_port_refuses_an_address_another_reuse_port_server_listens_on():
    # Sockets that all set SO_REUSEPORT would share the port without a word.
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        with pytest.raises(listeners.ListenerError, match="address already in use"):
            listeners.make_listener(("tcp", "127.0.0.1", port), 16, reuse_port=True)


def test_unix_socket_of_another_server_is_never_removed(tmp_path):
    path = str(tmp_path / "in-use.sock")
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(path)
        other.listen(1)
        for extra in ([], ["--reuse-port", "--bind", "127.0.0.1:0"]):
            # The second: the unix address fails --reuse-port after a TCP listener was made.
            result = subprocess.run(
                greenserve_command(*extra, "--bind", "unix:" + path, "examples.hello:app"),
                env=subprocess_env(), capture_output=True, text=True, timeout=30,
            )
            assert result.returncode == 2, result.stderr
            assert os.path.exists(path), extra


def test_run_refuses_an_address_in_use_before_forking():
    import greenserve

    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen(1)
        port = other.getsockname()[1]
        with pytest.raises(listeners.ListenerError, match="address already in use"):
            greenserve.run(lambda listener: None, bind="127.0.0.1:%d" % port)


# --- unix socket permissions -------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077])
def test_a_unix_socket_is_0660_whatever_the_umask(tmp_path, umask):
    path = str(tmp_path / "gs.sock")
    old = os.umask(umask)
    try:
        sock = listeners.make_listener(("unix", path), 16)
        restored = os.umask(umask)  # bound under a umask of its own, then ours again
    finally:
        os.umask(old)
    try:
        st = os.stat(path)
        assert (stat.S_IMODE(st.st_mode), st.st_gid, restored) == (0o660, os.getegid(), umask)
    finally:
        sock.close()


def test_a_unix_socket_gets_the_mode_and_group_asked_for(tmp_path):
    name, gid = another_group()
    for group in (name, gid, str(gid)):
        path = str(tmp_path / "gs.sock")
        sock = listeners.make_listener(("unix", path), 16, unix_mode=0o666, unix_group=group)
        try:
            st = os.stat(path)
            assert (stat.S_IMODE(st.st_mode), st.st_gid) == (0o666, gid)
        finally:
            sock.close()
            os.unlink(path)


def test_an_unknown_socket_group_makes_no_socket(tmp_path):
    path = tmp_path / "gs.sock"
    with pytest.raises(listeners.ListenerError, match="^--unix-socket-group: unknown group 'no-such-group-zz'$"):
        listeners.make_listener(("unix", str(path)), 16, unix_group="no-such-group-zz")
    assert not path.exists()


@pytest.mark.parametrize(
    "mode, group, expected",
    [
        (0o660, None, None),
        (0o666, None, None),
        (0o600, None, "only its owner can connect (mode 0600)"),
        (0o644, None, "only its owner can connect (mode 0644)"),
        (0o600, "www-data", "--unix-socket-group www-data lets no one in, since the mode 0600"),
        (0o646, "www-data", "--unix-socket-group www-data lets no one in, since the mode 0646"),
        (0o660, "www-data", None),
    ],
    ids=["0660", "0666", "0600", "0644", "0600-group", "0646-group", "0660-group"],
)
def test_the_owner_only_warning(mode, group, expected):
    warning = listeners.unix_socket_warning(("unix", "/run/app.sock"), mode, group)
    if expected is None:
        assert warning is None
    else:
        assert warning.startswith("unix:/run/app.sock: " + expected), warning
        assert "--unix-socket-mode 0660" in warning
    assert listeners.unix_socket_warning(("tcp", "127.0.0.1", 8000), mode, group) is None


def test_run_checks_its_settings_as_the_command_does_before_binding(tmp_path):
    import greenserve
    from greenserve.settings import SettingError

    path = tmp_path / "gs.sock"
    with pytest.raises(SettingError, match=r"^--reuse-port works only with HOST:PORT addresses, not unix:"):
        greenserve.run(lambda listener: None, bind="unix:%s" % path, reuse_port=True, workers=2)
    with pytest.raises(TypeError, match="unknown setting 'worker'"):
        greenserve.run(lambda listener: None, bind="unix:%s" % path, worker=2)
    assert not path.exists()


def test_reuse_port_with_systemd_sockets_is_a_usage_error(tmp_path):
    process, port, log = _activated(tmp_path, "us", "socket", "--reuse-port", "--workers", "2")
    assert process.wait(timeout=30) == 2
    assert log.read_text() == (
        "greenserve: error: --reuse-port cannot be used with systemd socket activation: systemd owns the sockets\n"
    )


def test_run_takes_the_socket_settings_and_refuses_bad_ones_before_forking(tmp_path):
    import greenserve
    from greenserve.settings import SettingError

    path = tmp_path / "gs.sock"
    with pytest.raises(SettingError, match="^unix_socket_mode: "):
        greenserve.run(lambda listener: None, bind="unix:%s" % path, unix_socket_mode="rw-rw----")
    with pytest.raises(listeners.ListenerError, match="unknown group"):
        greenserve.run(lambda listener: None, bind="unix:%s" % path, unix_socket_group="no-such-group-zz")
    assert not path.exists()


def test_an_adopted_listener_stays_non_blocking_whatever_the_default_timeout():
    # A worker's servers, greenserve.run's factories and the master's /metrics loop take the
    # listener as socket.socket; a new one would take socket.getdefaulttimeout(), and accept()
    # on a listener that blocks stalls the loop polling it.
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(3)
    try:
        sock = listeners.adopt(listeners.make_listener(("tcp", "127.0.0.1", 0), 16))
    finally:
        socket.setdefaulttimeout(previous)
    try:
        assert isinstance(sock, socket.socket)
        assert sock.gettimeout() == 0.0
        with pytest.raises(BlockingIOError):
            sock.accept()  # nothing waiting: at once, not after 3 s
    finally:
        sock.close()

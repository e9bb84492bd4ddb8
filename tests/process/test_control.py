"""The control socket (process/control.py) driven by gunicorn 27's own client, ``gunicornc``, unchanged.

Each test starts the real ``greenserve`` command (--workers 2, a socket in the test's directory)
and runs the real ``gunicornc`` binary against it; the answers' shape is judged against a real
gunicorn 27 master running the same commands (same keys and types in ``-j``'s JSON; greenserve
may add keys). Raw clients send what gunicornc never would: garbage, an over-long message,
nothing at all. The permission tests run gunicorn's client as ``nobody``.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

from tests.conftest import free_port, greenserve_command, subprocess_env, wait_for_port, wait_until

GUNICORNC = shutil.which("gunicornc")
GUNICORN = shutil.which("gunicorn")
pytestmark = pytest.mark.skipif(GUNICORNC is None, reason="gunicornc is not installed (pip install 'gunicorn>=27')")

APP = """
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]
"""

SHOWS = ("show all", "show workers", "show config", "show stats", "show listeners", "show dirty", "help", "dirty add")


class Master:
    """A master (greenserve's or gunicorn's) started by the test, stopped by its pid."""

    def __init__(self, directory, command, ctl, port, env=None, has_socket=True):
        self.ctl, self.port = ctl, port
        self.log = open(os.path.join(directory, "master.log"), "w+")
        self.process = subprocess.Popen(command, cwd=directory, env=env or subprocess_env(), stdout=self.log,
                                        stderr=subprocess.STDOUT)
        wait_for_port(port, timeout=30, process=self.process)
        if has_socket:
            wait_until(lambda: listening(ctl), 15, "the control socket at %s" % ctl)
        else:
            wait_until(lambda: "listening on" in self.output(), 15, "the master's startup lines")

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGQUIT if "gunicorn" not in str(self.process.args) else signal.SIGINT)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self.log.close()


def listening(path):
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
        return True
    except OSError:
        return False
    finally:
        probe.close()


def write_app(directory):
    with open(os.path.join(directory, "ctlapp.py"), "w") as out:
        out.write(APP)


def start_greenserve(directory, *args, ctl=None):
    write_app(directory)
    ctl = ctl or os.path.join(directory, "greenserve.ctl")
    port = free_port()
    command = greenserve_command("--bind", "127.0.0.1:%d" % port, "--workers", "2", "--control-socket", ctl,
                                 *args, "ctlapp:app")
    return Master(directory, command, ctl, port)


@pytest.fixture
def master(tmp_path):
    started = start_greenserve(str(tmp_path))
    yield started
    started.stop()


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """gunicorn 27 itself, the judge of the answers' shape."""
    if GUNICORN is None:
        pytest.skip("gunicorn is not installed")
    directory = str(tmp_path_factory.mktemp("gunicorn"))
    write_app(directory)
    ctl, port = os.path.join(directory, "gunicorn.ctl"), free_port()
    started = Master(directory, [GUNICORN, "--bind", "127.0.0.1:%d" % port, "--workers", "2", "--control-socket",
                                 ctl, "ctlapp:app"], ctl, port)
    yield started
    started.stop()


def ctl(path, command, as_json=False, user=None, env=None):
    """gunicornc -s PATH -c COMMAND [-j]: (exit code, stdout, stderr)."""
    argv = [GUNICORNC, "-s", path, "-c", command] + (["-j"] if as_json else [])
    if user is not None:
        argv = user + argv[1:]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    return done.returncode, done.stdout, done.stderr


def answer(path, command):
    code, out, err = ctl(path, command, as_json=True)
    assert code == 0, (command, out, err)
    return json.loads(out)


def same_shape(gunicorn, ours, where="data"):
    """Every key of gunicorn's answer is in ours, with a value of the same JSON type (None aside: the
    key has no value there), recursively; greenserve may add keys."""
    if isinstance(gunicorn, dict):
        assert isinstance(ours, dict), where
        missing = sorted(set(gunicorn) - set(ours))
        assert not missing, "%s: greenserve's answer lacks %s" % (where, missing)
        for key, value in gunicorn.items():
            same_shape(value, ours[key], "%s.%s" % (where, key))
    elif isinstance(gunicorn, list):
        assert isinstance(ours, list), where
        if gunicorn and ours:
            same_shape(gunicorn[0], ours[0], where + "[0]")
    elif gunicorn is not None and ours is not None:
        kind = float if isinstance(gunicorn, (int, float)) and not isinstance(gunicorn, bool) else type(gunicorn)
        if kind is float:
            assert isinstance(ours, (int, float)) and not isinstance(ours, bool), (where, gunicorn, ours)
        else:
            assert isinstance(ours, kind), (where, gunicorn, ours)


def worker_pids(path):
    return [worker["pid"] for worker in answer(path, "show workers")["workers"]]


def served(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=10) as response:
        return response.read() == b"ok"


# --- the commands, against gunicorn's answers ---


def test_every_show_command_answers_as_gunicorn_does_in_json_and_text(master, oracle):
    for command in SHOWS:
        same_shape(answer(oracle.ctl, command), answer(master.ctl, command), command)
        code, out, err = ctl(master.ctl, command)
        assert code == 0 and not err, (command, err)
    workers = answer(master.ctl, "show workers")
    assert workers["count"] == 2 and all(worker["booted"] for worker in workers["workers"])
    config = answer(master.ctl, "show config")
    assert config["workers"] == 2 and config["control_socket"] == master.ctl
    assert answer(master.ctl, "show stats")["pid"] == master.process.pid
    listeners = answer(master.ctl, "show listeners")["listeners"]
    assert listeners == [{"address": "http://127.0.0.1:%d" % master.port, "fd": listeners[0]["fd"], "type": "tcp"}]
    code, out, _ = ctl(master.ctl, "show all")
    assert "ARBITER (master)\n  PID: %d" % master.process.pid in out and "WEB WORKERS (2)" in out
    code, out, _ = ctl(master.ctl, "show workers")
    assert "Total: 2 workers" in out


def test_worker_add_remove_and_kill_change_the_workers_as_ttin_ttou_and_term(master, oracle):
    added = answer(master.ctl, "worker add 2")
    assert added == {"added": 2, "previous": 2, "total": 4}
    same_shape(answer(oracle.ctl, "worker add 1"), added, "worker add")
    wait_until(lambda: len(worker_pids(master.ctl)) == 4, 30, "4 workers")
    removed = answer(master.ctl, "worker remove 3")
    assert removed == {"removed": 3, "previous": 4, "total": 1}
    same_shape(answer(oracle.ctl, "worker remove 1"), removed, "worker remove")
    wait_until(lambda: len(worker_pids(master.ctl)) == 1, 30, "1 worker")
    (pid,) = worker_pids(master.ctl)
    killed = answer(master.ctl, "worker kill %d" % pid)
    assert killed == {"success": True, "killed": pid}
    wait_until(lambda: worker_pids(master.ctl) not in ([], [pid]), 30, "the killed worker's replacement")
    assert served(master.port)
    missing = answer(master.ctl, "worker kill 1")
    assert missing == {"success": False, "error": "Worker 1 not found"}
    same_shape(answer(oracle.ctl, "worker kill 1"), missing, "worker kill")
    stats = answer(master.ctl, "show stats")
    assert stats["workers_spawned"] == 5 and stats["workers_killed"] == 4 and stats["workers_target"] == 1
    log = master.output()
    assert "control socket: worker add 2: 4 worker(s)" in log and "control socket: worker remove 3: 1 worker(s)" in log
    assert "stopped: one worker fewer (control socket)" in log
    assert "stopped by the control socket (worker kill)" in log


def test_reload_reopen_and_graceful_shutdown(master):
    before = set(worker_pids(master.ctl))
    assert answer(master.ctl, "reload") == {"status": "reloading"}
    wait_until(lambda: len(worker_pids(master.ctl)) == 2 and not before & set(worker_pids(master.ctl)), 30,
               "a new generation of workers")
    assert answer(master.ctl, "show stats")["reloads"] == 1
    assert answer(master.ctl, "reopen") == {"status": "reopening"}
    wait_until(lambda: "SIGUSR1: log files reopened" in master.output(), 10, "the reopen")
    code, out, err = ctl(master.ctl, "shutdown")
    assert code == 0 and json.loads(out) == {"status": "shutting_down", "mode": "graceful"}, err
    assert master.process.wait(timeout=30) == 0
    assert "SIGTERM: stopping gracefully" in master.output()
    assert not os.path.exists(master.ctl), "the master left its control socket file"


def test_quick_shutdown_is_quit(master):
    assert answer(master.ctl, "shutdown quick") == {"status": "shutting_down", "mode": "quick"}
    assert master.process.wait(timeout=30) == 0
    assert "SIGQUIT: closing every connection now" in master.output()
    assert not os.path.exists(master.ctl)


def test_mistakes_get_gunicorns_error_lines(master, oracle):
    for command in ("frobnicate", "show nothing", "worker add many", "worker dance", "shutdown maybe"):
        code, out, err = ctl(master.ctl, command)
        assert code == 1 and err.startswith("Error: Invalid argument: ") and not out, (command, err)
    code, _, err = ctl(oracle.ctl, "frobnicate")
    assert (code, err) == ctl(master.ctl, "frobnicate")[::2]


# --- who may connect ---


def nobodys_gunicornc(directory):
    """gunicorn's client, as the user nobody: its package copied where nobody can read it, run by the
    system's Python (this one's lives under /root)."""
    if shutil.which("setpriv") is None or not os.path.exists("/usr/bin/python3") or os.geteuid() != 0:
        pytest.skip("needs root, setpriv and /usr/bin/python3 to run a client as another user")
    import gunicorn

    shutil.copytree(os.path.dirname(gunicorn.__file__), os.path.join(directory, "lib", "gunicorn"))
    subprocess.run(["chmod", "-R", "a+rX", directory], check=True, timeout=30)
    return ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", "env",
            "PYTHONPATH=" + os.path.join(directory, "lib"), "/usr/bin/python3", "-c",
            "import sys; from gunicorn.ctl.cli import main; sys.argv[0] = 'gunicornc'; sys.exit(main())"]


@pytest.fixture
def open_directory():
    """A directory every user may enter (pytest's tmp_path is under a 0700 one)."""
    directory = tempfile.mkdtemp(prefix="greenserve-ctl-")
    os.chmod(directory, 0o755)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


def test_another_user_is_refused_by_the_mode_and_by_the_peer_check(open_directory):
    user = nobodys_gunicornc(open_directory)
    started = start_greenserve(open_directory)
    try:
        assert os.stat(started.ctl).st_mode & 0o777 == 0o600
        code, out, err = ctl(started.ctl, "show stats", user=user)
        assert code == 1 and "Permission denied" in err and not out, (out, err)
        # The file widened behind the master's back: the master reads the client's uid.
        os.chmod(started.ctl, 0o666)
        code, out, err = ctl(started.ctl, "show stats", user=user)
        assert code == 1 and "permission denied: uid 65534 is not the control socket's owner (uid 0)" in err, err
        assert "control socket: refused pid" in started.output()
        assert answer(started.ctl, "show stats")["workers_current"] == 2  # its owner still drives it
    finally:
        started.stop()


def test_a_group_mode_lets_the_group_in(open_directory):
    user = nobodys_gunicornc(open_directory)
    user[user.index("nogroup")] = "0"  # nobody, in root's group
    started = start_greenserve(open_directory, "--control-socket-mode", "0660")
    try:
        assert os.stat(started.ctl).st_mode & 0o777 == 0o660
        code, out, err = ctl(started.ctl, "show stats", user=user)
        assert code == 0 and "Workers current:  2" in out, err
    finally:
        started.stop()


# --- clients that are not gunicornc ---


def raw_client(path):
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(15)
    client.connect(path)
    return client


def read_answer(client):
    """One framed answer, then whether the master closed the connection after it."""
    data = b""
    while True:
        chunk = client.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) >= 4 and len(data) >= 4 + int.from_bytes(data[:4], "big"):
            break
    assert len(data) >= 4, "no answer: %r" % data
    length = int.from_bytes(data[:4], "big")
    message = json.loads(data[4:4 + length])
    try:
        closed = client.recv(1) == b""
    except socket.timeout:
        closed = False
    return message, closed


@pytest.mark.parametrize("sent, error", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "a message of 1195725856 bytes: the limit is 65536"),
    ((1 << 20).to_bytes(4, "big") + b"{" * 100, "a message of 1048576 bytes: the limit is 65536"),
    (b"\x00\x00\x00\x05{{{{{", "not a JSON request"),
    (b"\x00\x00\x00\x02[]", "not a request"),
    (b"\x00\x00\x00\x04\xff\xfe\xfd\xfc", "not a JSON request"),
])
def test_garbage_gets_one_error_answer_and_a_close(master, sent, error):
    client = raw_client(master.ctl)
    try:
        client.sendall(sent)
        message, closed = read_answer(client)
    finally:
        client.close()
    assert message["status"] == "error" and message["error"].startswith(error), message
    assert closed
    assert answer(master.ctl, "show stats")["workers_current"] == 2


def test_a_silent_client_holds_nothing_and_a_half_message_is_closed(master):
    silent, half = raw_client(master.ctl), raw_client(master.ctl)
    try:
        half.sendall(b"\x00\x00\x00\x40{\"id\": 1")  # 64 bytes announced, 8 sent
        started = time.monotonic()
        for _ in range(3):
            assert answer(master.ctl, "show stats")["workers_current"] == 2
            assert served(master.port)
        message, closed = read_answer(half)
        assert message == {"id": 0, "status": "error", "error": "incomplete message after 5 s"} and closed
        assert time.monotonic() - started > 4.0  # (not before its 5 s: the clients above took some of them)
        # The silent one is still open (gunicornc's interactive mode waits on a person), and answered.
        request = json.dumps({"id": 7, "command": "show", "args": ["stats"]}).encode()
        silent.sendall(len(request).to_bytes(4, "big") + request)
        message, closed = read_answer(silent)
        assert message["id"] == 7 and message["status"] == "ok" and not closed
    finally:
        silent.close()
        half.close()


# --- the file ---


def socket_inode(path):
    with open("/proc/net/unix") as table:
        for line in table:
            fields = line.split()
            if len(fields) >= 8 and fields[7] == path and fields[3] == "00010000":  # __SO_ACCEPTCON: listening
                return fields[6]
    raise AssertionError("%s is not in /proc/net/unix" % path)


def holders(inode):
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir("/proc/%s/fd" % pid):
                if os.readlink("/proc/%s/fd/%s" % (pid, fd)) == "socket:[%s]" % inode:
                    found.add(int(pid))
        except OSError:
            continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_only_the_master_holds_the_socket(master):
    assert holders(socket_inode(master.ctl)) == {master.process.pid}


def test_no_control_socket_makes_no_file(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    write_app(str(tmp_path))
    port = free_port()
    env = subprocess_env(XDG_RUNTIME_DIR=str(runtime))
    process = subprocess.Popen(greenserve_command("--bind", "127.0.0.1:%d" % port, "--no-control-socket", "ctlapp:app"),
                               cwd=str(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_port(port, timeout=30, process=process)
        assert served(port)
        assert os.listdir(str(runtime)) == []
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
    assert process.returncode == 0 and "control socket" not in output, output


def test_the_default_path_is_gunicorns_and_gunicornc_finds_it(tmp_path):
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    path = str(runtime / "gunicorn.ctl")
    env = subprocess_env(XDG_RUNTIME_DIR=str(runtime))
    first = second = None
    try:
        (tmp_path / "a").mkdir()
        first = start_default(str(tmp_path / "a"), env, path)
        done = subprocess.run([GUNICORNC, "-c", "show stats", "-j"], env=env, capture_output=True, text=True, timeout=60)
        assert json.loads(done.stdout)["pid"] == first.process.pid, done.stderr
        # A second master finds the default path taken: it says so once, and serves without one.
        (tmp_path / "b").mkdir()
        second = start_default(str(tmp_path / "b"), env, path)
        assert served(second.port)
        assert "control socket: unix:%s is in use by another server" % path in second.output()
        assert answer(path, "show stats")["pid"] == first.process.pid
    finally:
        for started in (second, first):
            if started is not None:
                started.stop()
    assert not os.path.exists(path)


def start_default(directory, env, path):
    """A master with the default control socket (``path``, by ``env``'s XDG_RUNTIME_DIR)."""
    write_app(directory)
    port = free_port()
    return Master(directory, greenserve_command("--bind", "127.0.0.1:%d" % port, "ctlapp:app"), path, port, env=env,
                  has_socket=False)


def test_a_relative_path_is_where_the_command_was_typed_not_chdirs(tmp_path):
    (tmp_path / "app").mkdir()
    write_app(str(tmp_path / "app"))
    port = free_port()
    command = greenserve_command("--bind", "127.0.0.1:%d" % port, "--chdir", "app", "--control-socket", "here.ctl",
                                 "ctlapp:app")
    started = Master(str(tmp_path), command, str(tmp_path / "here.ctl"), port)
    try:
        assert answer(str(tmp_path / "here.ctl"), "show config")["control_socket"] == str(tmp_path / "here.ctl")
        assert not os.path.exists(str(tmp_path / "app" / "here.ctl"))
    finally:
        started.stop()


def test_a_stale_file_is_replaced_and_a_listening_master_refused(tmp_path, master):
    stale = str(tmp_path / "stale.ctl")
    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(stale)  # a master killed with SIGKILL leaves this: a file nobody listens on
    left.close()
    (tmp_path / "x").mkdir()
    replaced = start_greenserve(str(tmp_path / "x"), ctl=stale)
    try:
        assert answer(stale, "show stats")["pid"] == replaced.process.pid
    finally:
        replaced.stop()
    write_app(str(tmp_path))
    refused = subprocess.run(
        greenserve_command("--bind", "127.0.0.1:%d" % free_port(), "--control-socket", master.ctl, "ctlapp:app"),
        cwd=str(tmp_path), env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if "error" in line]
    assert lines == ["greenserve: error: --control-socket %s: unix:%s is in use by another server: is another master "
                     "running? Stop it, or give this one another path (or --no-control-socket)" % (master.ctl, master.ctl)]
    assert answer(master.ctl, "show stats")["workers_current"] == 2


def test_with_metrics_the_answers_count_requests_and_interactive_mode_works(tmp_path):
    started = start_greenserve(str(tmp_path), "--metrics-bind", "127.0.0.1:%d" % free_port())
    try:
        for _ in range(5):
            assert served(started.port)

        def counted():
            stats = answer(started.ctl, "show stats")
            return stats["requests"] == 5 and stats["in_flight"] == 0 and stats["shed"] == 0

        wait_until(counted, 15, "5 requests in show stats")
        workers = answer(started.ctl, "show workers")["workers"]
        assert sum(worker["requests"] for worker in workers) == 5
        # gunicornc's interactive mode: several commands on one connection.
        done = subprocess.run([GUNICORNC, "-s", started.ctl], input="show stats\nworker add 1\nquit\n",
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        assert "Workers current:  2" in done.stdout and '"total": 3' in done.stdout, done.stdout
    finally:
        started.stop()


def test_a_removed_file_is_made_again(master):
    os.unlink(master.ctl)
    wait_until(lambda: listening(master.ctl), 10, "the control socket made again")
    assert answer(master.ctl, "show stats")["pid"] == master.process.pid
    assert "control socket: %s was removed: listening there again" % master.ctl in master.output()
    assert holders(socket_inode(master.ctl)) == {master.process.pid}


def master_on(path):
    """The pid of the master that answers at ``path`` now, or None."""
    code, out, _ = ctl(path, "show stats", as_json=True)
    return json.loads(out)["pid"] if code == 0 else None


def test_a_binary_upgrade_hands_the_path_to_the_new_master_and_a_rollback_takes_it_back(tmp_path):
    pid_file = str(tmp_path / "app.pid")
    started = start_greenserve(str(tmp_path), "--pid", pid_file)
    try:
        old = started.process.pid
        os.kill(old, signal.SIGUSR2)
        wait_until(lambda: master_on(started.ctl) not in (None, old), 30, "the new master on the control socket")
        new = answer(started.ctl, "show stats")["pid"]
        assert answer(started.ctl, "show workers")["count"] == 2
        # Rolled back: the old master's workers serve again, the new master stops (docs/production.md).
        os.kill(old, signal.SIGHUP)
        os.kill(new, signal.SIGQUIT)
        wait_until(lambda: master_on(started.ctl) == old, 30, "the old master on the control socket again")
        assert served(started.port)
    finally:
        started.stop()
    assert not os.path.exists(started.ctl)


def test_a_daemon_takes_the_path_as_typed_and_its_launcher_says_a_refusal(tmp_path, master):
    write_app(str(tmp_path))
    pid_file = str(tmp_path / "daemon.pid")
    command = greenserve_command("--daemon", "--pid", pid_file, "--bind", "127.0.0.1:%d" % free_port(), "--chdir", "/",
                                 "--control-socket", "daemon.ctl", "ctlapp:app")
    env = subprocess_env(PYTHONPATH=subprocess_env()["PYTHONPATH"] + os.pathsep + str(tmp_path))
    done = subprocess.run(command, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    path = str(tmp_path / "daemon.ctl")
    try:
        assert master_on(path) == int(open(pid_file).read())
    finally:
        assert answer(path, "shutdown quick")["mode"] == "quick"
    wait_until(lambda: not os.path.exists(path), 30, "the daemon's exit")
    # Another master's path: the launcher says the daemon's one line, and exits 2.
    command[command.index("daemon.ctl")] = master.ctl
    done = subprocess.run(command, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith(
        "greenserve: error: --control-socket %s: unix:%s is in use by another server" % (master.ctl, master.ctl)), done.stderr
    assert master_on(master.ctl) == master.process.pid


def test_reopen_while_new_workers_boot_reaches_them_once_they_serve(tmp_path):
    # An application that takes 2 s to import: the reload's new workers boot that long.
    started = start_greenserve(str(tmp_path))
    try:
        with open(str(tmp_path / "ctlapp.py"), "a") as out:
            out.write("\nimport time\ntime.sleep(2)\n")
        assert answer(started.ctl, "reload") == {"status": "reloading"}
        wait_until(lambda: answer(started.ctl, "show stats")["workers_current"] == 4, 10, "the new workers forked")
        assert answer(started.ctl, "reopen") == {"status": "reopening"}
        wait_until(lambda: started.output().count("log files reopened") >= 5, 20,
                   "the master's reopen, the old workers' and then the new ones'")
        wait_until(lambda: answer(started.ctl, "show stats")["workers_current"] == 2, 20, "the old workers gone")
        assert "killed by SIGUSR1" not in started.output()
        assert served(started.port)
    finally:
        started.stop()

"""greenserve.process.daemon with real processes: the double fork, gevent after it, pid files, dropping root.

Anything that daemonizes runs in a subprocess (daemonizing pytest itself would end the test run).
Every wait is bounded by a few seconds, and every process a test starts is ended by its pid.
"""

import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest

from greenserve.process.daemon import PidFile, PidFileError, drop_privileges, read_pid
from tests.conftest import ROOT

TIMEOUT = 5

ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing user needs root")


def run_python(code, *args, cwd=None, timeout=TIMEOUT):
    """Run ``code`` in a fresh interpreter that can import greenserve; bounded in time."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        cwd=cwd,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_for_file(path, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AssertionError("%s did not appear within %ss" % (path, timeout))
        time.sleep(0.01)
    with open(path) as f:
        return f.read()


def is_alive(pid):
    """True while ``pid`` runs; an unreaped zombie counts as gone (the daemon's parent is init)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def end_daemon(pid, timeout=TIMEOUT):
    """Wait for a daemon we started to exit by itself; kill it by pid if it does not. Say which."""
    deadline = time.monotonic() + timeout
    while is_alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            return "killed"
        time.sleep(0.01)
    return "exited"


# A daemon reports by writing a file whole: written beside, then renamed into place.
WRITE_JSON = """
def write_json(path, value):
    with open(path + ".tmp", "w") as f:
        json.dump(value, f)
    os.replace(path + ".tmp", path)
"""


@pytest.mark.parametrize("preamble", ["", "import gevent"], ids=["without-gevent", "gevent-imported-no-hub"])
def test_daemonize_detaches(tmp_path, preamble):
    code = (
        "import json, os, stat, sys\n"
        + preamble
        + WRITE_JSON
        + """
from greenserve.process.daemon import daemonize

result_path = sys.argv[1]
launcher = {"launcher_pid": os.getpid(), "launcher_sid": os.getsid(0)}
# Left in the buffer (stdout is a pipe): daemonize must flush it once, in the launcher.
print("before daemonize", end="")
daemonize(stdout="daemon.log", stderr="daemon.log")  # relative to the launcher's directory
write_json(result_path + ".pid", os.getpid())
# Hold on until the test says go: the launcher must have returned without waiting for us.
import time
deadline = time.monotonic() + 10
while not os.path.exists(result_path + ".go") and time.monotonic() < deadline:
    time.sleep(0.01)
if "gevent" in sys.modules:
    gevent.sleep(0.01)  # the loop runs in the daemon
print("stdout after daemonize", flush=True)
print("stderr after daemonize", file=sys.stderr, flush=True)
stdin, devnull = os.fstat(0), os.stat(os.devnull)
umask = os.umask(0)
write_json(result_path, dict(
    launcher,
    pid=os.getpid(), sid=os.getsid(0), pgid=os.getpgid(0), ppid=os.getppid(), cwd=os.getcwd(),
    umask=umask,
    stdin_is_devnull=stat.S_ISCHR(stdin.st_mode) and stdin.st_rdev == devnull.st_rdev,
))
"""
    )
    result_path = str(tmp_path / "result.json")
    launcher = run_python(code, result_path, cwd=tmp_path)
    daemon_pid = int(wait_for_file(result_path + ".pid"))
    try:
        # The launcher has returned while the daemon still waits for our go: it did not wait.
        assert is_alive(daemon_pid)
        assert not os.path.exists(result_path)
        open(result_path + ".go", "w").close()
        result = json.loads(wait_for_file(result_path))
    finally:
        assert end_daemon(daemon_pid) == "exited"

    assert launcher.returncode == 0, launcher.stderr
    assert launcher.stdout == "before daemonize"
    assert launcher.stderr == ""

    assert result["pid"] == daemon_pid != result["launcher_pid"]
    assert result["ppid"] != result["launcher_pid"]
    # The first child made the session and left: the daemon is in that session (and that
    # process group) but leads neither, so it can never get a controlling terminal again.
    assert result["sid"] == result["pgid"]
    assert result["sid"] != result["pid"]
    assert result["sid"] not in (result["launcher_pid"], result["launcher_sid"], os.getsid(0))
    assert result["cwd"] == "/"
    assert result["umask"] == 0o022
    assert result["stdin_is_devnull"]

    log = tmp_path / "daemon.log"
    assert log.read_text() == "stdout after daemonize\nstderr after daemonize\n"
    assert stat.S_IMODE(log.stat().st_mode) == 0o640


@pytest.mark.parametrize("setup", ["hub", "monkey-patched"])
def test_gevent_works_in_the_daemon_after_the_hub_existed(tmp_path, setup):
    if setup == "hub":
        preamble = "from gevent import socket\n"
    else:
        preamble = "from gevent import monkey; monkey.patch_all()\nimport socket\n"
    code = (
        preamble
        + """
import os, sys
import gevent
from greenserve.process.daemon import daemonize

port, pid_path, log_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
# Before the fork: the hub, its loop, a threadpool thread and the resolver all exist.
gevent.sleep(0)
hub = gevent.get_hub()
hub.threadpool.apply(os.getpid)
socket.getaddrinfo("localhost", port)

daemonize(stdout=log_path, stderr=log_path)
with open(pid_path + ".tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(pid_path + ".tmp", pid_path)

with gevent.Timeout(4):
    gevent.sleep(0.01)
    connection = socket.create_connection(("127.0.0.1", port), timeout=4)
    threadpool_pid = hub.threadpool.apply(os.getpid)
    resolved = socket.getaddrinfo("localhost", port, socket.AF_INET)[0][4][0]
    same_hub = gevent.get_hub() is hub
    connection.sendall(("%d %d %s %s\\n" % (os.getpid(), threadpool_pid, resolved, same_hub)).encode())
    connection.close()
"""
    )
    pid_path = str(tmp_path / "daemon.pid")
    log_path = tmp_path / "daemon.log"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(TIMEOUT)
        launcher = run_python(code, listener.getsockname()[1], pid_path, log_path)
        assert launcher.returncode == 0, launcher.stderr
        daemon_pid = int(wait_for_file(pid_path))
        try:
            try:
                peer, _ = listener.accept()
            except socket.timeout:
                raise AssertionError("the daemon never connected; its log:\n" + log_path.read_text())
            with peer:
                peer.settimeout(TIMEOUT)
                received = b""
                while not received.endswith(b"\n"):
                    chunk = peer.recv(100)
                    if not chunk:
                        break
                    received += chunk
        finally:
            assert end_daemon(daemon_pid) == "exited", log_path.read_text()

    assert log_path.read_text() == ""
    assert received.decode().split() == [str(daemon_pid), str(daemon_pid), "127.0.0.1", "True"]


@pytest.mark.parametrize(
    "action, code, stderr",
    [
        ("readiness.ready()", 0, ""),
        ("readiness.failed(7, 'myapp: error: the database is down')", 7, "myapp: error: the database is down\n"),
        ("readiness.close()", 1, "greenserve: error: the daemon exited before it was ready (its error log says why)\n"),
        ("os._exit(0)", 1, "greenserve: error: the daemon exited before it was ready (its error log says why)\n"),
    ],
    ids=["ready", "failed", "closed", "died"],
)
def test_launcher_waits_for_the_daemon_to_say_how_it_went(tmp_path, action, code, stderr):
    script = """
import os, sys, time
from greenserve.process.daemon import daemonize

release = sys.argv[1]
readiness = daemonize(chdir=None, wait=True)
if os.fork() == 0:
    # A child of the daemon, alive until the test lets it go. One that kept the pipe open
    # must not hold the launcher back once the daemon has spoken; a silent daemon's launcher
    # sees the end of the pipe once every holder closed it, so this one closes it, as the
    # docs ask of children.
    if {silent}:
        os.close(readiness.fileno())
    deadline = time.monotonic() + 60  # far beyond TIMEOUT: a launcher waiting for it times out
    while not os.path.exists(release) and time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(0)
with open(release + ".pid.tmp", "w") as f:
    f.write(str(os.getpid()))
os.replace(release + ".pid.tmp", release + ".pid")
{action}
readiness.failed(9, "said twice")  # only the first word counts
""".format(action=action, silent="failed" not in action and "ready" not in action)
    release = str(tmp_path / "release")
    try:
        # Bounded by TIMEOUT: a launcher waiting for the child would still wait when it ends.
        launcher = run_python(script, release)
        assert (launcher.returncode, launcher.stderr) == (code, stderr)
    finally:
        open(release, "w").close()
    end_daemon(int(wait_for_file(release + ".pid")))


def test_mistakes_raise_in_the_caller_before_forking(tmp_path):
    code = """
import os, sys
from greenserve.process.daemon import DaemonError, daemonize

caller = os.getpid()
for kwargs in ({"chdir": sys.argv[1]}, {"stdout": sys.argv[2]}, {"stderr": sys.argv[2]}):
    try:
        daemonize(**kwargs)
    except DaemonError as exc:
        print(exc)
    else:
        print("daemonized")
        sys.exit()
print("still the caller" if os.getpid() == caller else "forked")
"""
    missing = tmp_path / "missing"
    launcher = run_python(code, missing, missing / "x.log")
    assert launcher.returncode == 0, launcher.stderr
    assert launcher.stdout.splitlines() == [
        "cannot change directory to %s: not a directory we can enter" % missing,
        "cannot open stdout file %s/x.log: No such file or directory" % missing,
        "cannot open stderr file %s/x.log: No such file or directory" % missing,
        "still the caller",
    ]


def test_importing_the_module_imports_nothing_of_gevent():
    launcher = run_python(
        "import sys, greenserve.process.daemon; print(sorted(m for m in sys.modules if m.startswith('gevent')))"
    )
    assert launcher.returncode == 0, launcher.stderr
    assert launcher.stdout == "[]\n"


# --- pid files -------------------------------------------------------------------------------


def test_create_and_remove(tmp_path):
    path = tmp_path / "greenserve.pid"
    pid_file = PidFile(path)
    pid_file.create()
    assert path.read_bytes() == b"%d\n" % os.getpid()
    assert read_pid(path) == os.getpid()
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["greenserve.pid"]  # no temporary file left behind
    assert pid_file.remove() is True
    assert not path.exists()
    assert pid_file.remove() is False


def test_context_manager(tmp_path):
    path = tmp_path / "greenserve.pid"
    with PidFile(path) as pid_file:
        assert read_pid(path) == os.getpid() == pid_file.pid
    assert not path.exists()


def test_relative_path_is_resolved_when_made(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    pid_file = PidFile("greenserve.pid")
    monkeypatch.chdir("/")
    assert pid_file.path == str(tmp_path / "greenserve.pid")


def test_refuses_a_running_process(tmp_path):
    path = tmp_path / "greenserve.pid"
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        path.write_text("%d\n" % sleeper.pid)
        with pytest.raises(PidFileError) as caught:
            PidFile(path).create()
        assert str(caught.value) == (
            "pid file %s names a running process (pid %d): is greenserve already running?" % (path, sleeper.pid)
        )
        assert read_pid(path) == sleeper.pid
    finally:
        sleeper.kill()
        sleeper.wait(TIMEOUT)


def test_replaces_a_dead_process(tmp_path):
    path = tmp_path / "greenserve.pid"
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait(TIMEOUT)
    path.write_text("%d\n" % finished.pid)
    PidFile(path).create()
    assert read_pid(path) == os.getpid()


@pytest.mark.parametrize(
    "content", [b"", b"\n", b"garbage\n", b"12abc\n", b"-5\n", b"0\n", b"+7\n", b"1_000\n", b"\xff\xfe"]
)
def test_replaces_garbage(tmp_path, content):
    path = tmp_path / "greenserve.pid"
    path.write_bytes(content)
    assert read_pid(path) is None
    PidFile(path).create()
    assert read_pid(path) == os.getpid()


def test_replaces_a_pid_no_process_can_have(tmp_path):
    path = tmp_path / "greenserve.pid"
    path.write_bytes(b"9" * 30 + b"\n")
    PidFile(path).create()
    assert read_pid(path) == os.getpid()


def test_read_pid_of_a_missing_file(tmp_path):
    assert read_pid(tmp_path / "none.pid") is None


def test_remove_leaves_a_file_holding_another_pid(tmp_path):
    path = tmp_path / "greenserve.pid"
    pid_file = PidFile(path)
    pid_file.create()
    path.write_text("1\n")  # a new master replaced it
    assert pid_file.remove() is False
    assert read_pid(path) == 1


def test_a_forked_child_does_not_remove_it(tmp_path):
    path = tmp_path / "greenserve.pid"
    pid_file = PidFile(path)
    pid_file.create()
    child = os.fork()
    if child == 0:  # a worker, say, exiting
        os._exit(3 if pid_file.remove() else 0)
    deadline = time.monotonic() + TIMEOUT
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            raise AssertionError("the forked child did not exit")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    assert read_pid(path) == os.getpid()
    assert pid_file.remove() is True


@pytest.mark.parametrize("parent", ["missing", "a-file"])
def test_unwritable_directory(tmp_path, parent):
    if parent == "a-file":
        (tmp_path / parent).write_text("")
        reason = "Not a directory"
    else:
        reason = "No such file or directory"
    path = tmp_path / parent / "x.pid"
    with pytest.raises(PidFileError) as caught:
        PidFile(path).create()
    assert str(caught.value) == "cannot write pid file %s: %s" % (path, reason)
    assert isinstance(caught.value, RuntimeError)


@needs_root
def test_directory_not_writable_by_the_user():
    # Not under tmp_path, whose parents only root may enter: nobody may look in here, not write.
    directory = tempfile.mkdtemp(prefix="greenserve-test-")
    os.chmod(directory, 0o755)
    code = """
        import sys
        from greenserve.process.daemon import PidFile, PidFileError, drop_privileges
        drop_privileges("nobody")
        try:
            PidFile(sys.argv[1]).create()
        except PidFileError as exc:
            print(exc)
    """
    try:
        launcher = run_python(code, os.path.join(directory, "x.pid"))
        assert launcher.returncode == 0, launcher.stderr
        assert launcher.stdout == "cannot write pid file %s/x.pid: Permission denied\n" % directory
        assert os.listdir(directory) == []
    finally:
        shutil.rmtree(directory)


# --- dropping privileges ---------------------------------------------------------------------


@needs_root
@pytest.mark.parametrize("user, group", [("nobody", None), ("nobody", "nogroup"), (65534, "65534")])
def test_drop_privileges_as_root(user, group):
    import grp
    import pwd

    nobody = pwd.getpwnam("nobody")
    expected_gid = nobody.pw_gid if group is None else grp.getgrnam("nogroup").gr_gid
    launcher = run_python(
        """
import json, os, sys
from greenserve.process.daemon import drop_privileges
user, group = json.loads(sys.argv[1])
os.setgroups([0, 1])  # root's supplementary groups must not survive
dropped = drop_privileges(user, group)
ids = [os.getuid(), os.geteuid(), os.getgid(), os.getegid(), os.getgroups()]
again = drop_privileges(user, group)  # not root any more, same ids: nothing to do
try:
    os.setuid(0)
    back = "became root again"
except PermissionError:
    back = "cannot"
try:
    drop_privileges("root")
    escalated = "became root"
except PermissionError as exc:
    escalated = str(exc)
print(json.dumps([dropped, ids, again, back, escalated]))
""",
        json.dumps([user, group]),
    )
    assert launcher.returncode == 0, launcher.stderr
    dropped, ids, again, back, escalated = json.loads(launcher.stdout)
    uid = nobody.pw_uid
    assert dropped == again == [uid, expected_gid]
    assert ids == [uid, uid, expected_gid, expected_gid, []]
    assert back == "cannot"
    assert escalated == "cannot switch to uid 0, gid 0: only root can (running as uid %d)" % uid


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"user": "nobodyx"}, "unknown user 'nobodyx'"),
        ({"group": "nogroupx"}, "unknown group 'nogroupx'"),
        ({"user": "nobody", "group": "nogroupx"}, "unknown group 'nogroupx'"),
        ({"user": -1}, "user id must be 0 or more, not -1"),
    ],
)
def test_unknown_names_raise_before_changing_anything(kwargs, message):
    ids = (os.getuid(), os.getgid())
    with pytest.raises(ValueError) as caught:
        drop_privileges(**kwargs)
    assert str(caught.value) == message
    assert (os.getuid(), os.getgid()) == ids


def test_a_bare_uid_needs_a_group():
    import pwd

    uid = 54321
    with pytest.raises(KeyError):
        pwd.getpwuid(uid)
    with pytest.raises(ValueError) as caught:
        drop_privileges(uid)
    assert str(caught.value) == "user 54321 has no entry in the password database: give a group too"


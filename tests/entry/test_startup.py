"""The one pre-flight (greenserve.entry.startup), taken by every front door that starts a server.

The command, ``greenserve.run()`` and the PasteDeploy runner (one process, or a master with
``workers``) each run here in a real process, under the open-file limit or with the account a
deployment gives them, so what is shown is what the process did: the same settings get the same
steps and the same refusals. Loopback only, every wait bounded.
"""

import grp
import json
import os
import pwd
import re
import signal
import subprocess
import sys
import textwrap
import urllib.request

import pytest

from tests.conftest import ROOT, children_of, free_port, greenserve_command, subprocess_env, wait_for_port, wait_until
from tests.entry.test_cli import _open_file_limits
from tests.entry.test_paste import INI, LOAD, _finish

pytestmark = pytest.mark.timeout(90)

APP = '''
import os


def app(environ, start_response):
    body = ("%d %d %d" % (os.getpid(), os.getuid(), os.getgid())).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def make_app(global_conf, **local_conf):
    return app
'''

# greenserve.run() with the keywords of argv[2] (JSON); a refusal is printed as the script's one line.
RUN = '''
import json
import sys

import greenserve
from greenserve import WSGIServer
from greenserve.settings import SettingError
from pasteapp import app

try:
    code = greenserve.run(lambda listener: WSGIServer(listener, app, log=None), bind=sys.argv[1],
                          **json.loads(sys.argv[2]))
except SettingError as exc:
    print("refused: %s" % exc, file=sys.stderr)
    code = 2
sys.exit(code)
'''

DOORS = ["command", "run", "paste-1-process", "paste-2-workers"]


def _door(tmp_path, door, port, extra=(), limits=None):
    """Start ``door`` serving pasteapp on ``port``: the command line, run()'s keywords or the
    .ini's lines in ``extra``; ``limits``: the open-file limit (soft, hard) it starts under."""
    (tmp_path / "pasteapp.py").write_text(textwrap.dedent(APP))
    if door == "command":
        args = greenserve_command("--bind", "127.0.0.1:%d" % port, *extra, "pasteapp:app")
    elif door == "run":
        args = [sys.executable, "-c", RUN, "127.0.0.1:%d" % port, json.dumps(dict(extra))]
    else:
        pytest.importorskip("paste.deploy", reason="PasteDeploy is not installed")
        workers = 1 if door == "paste-1-process" else 2
        ini = tmp_path / "site.ini"
        ini.write_text(INI.format(entry="", port=port, extra="\n".join(["workers = %d" % workers, *extra])))
        args = [sys.executable, "-c", LOAD, str(ini)]
    if limits is not None:
        import resource

        def preexec():
            resource.setrlimit(resource.RLIMIT_NOFILE, limits)
    return subprocess.Popen(
        args, cwd=str(tmp_path), env=subprocess_env(PYTHONPATH=str(tmp_path) + os.pathsep + ROOT),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=preexec if limits is not None else None,
    )


def _serving(process, door, port):
    """The pids of the processes that serve (the workers, or the one process), once they all do."""
    wait_for_port(port, 20, process)
    if door == "paste-1-process":
        return [process.pid]
    wanted = 2 if door == "paste-2-workers" else 1
    wait_until(lambda: len(children_of(process.pid)) == wanted, 20, "%d worker(s)" % wanted)
    return children_of(process.pid)


def _get(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=10) as response:
        return [int(word) for word in response.read().split()]  # (pid, uid, gid) of who answered


_CONNECTIONS = {
    "command": ("--worker-connections", "1000"),
    "run": (("worker_connections", 1000),),
    "paste-1-process": (),  # the .ini's 20 threads: the 1,000 connections greenserve never goes below
    "paste-2-workers": (),
}


@pytest.mark.parametrize("door", DOORS)
def test_every_front_door_raises_the_open_file_limit_for_its_connections(tmp_path, door):
    # A soft limit of 512 cannot hold 1,000 connections: each front door raises it, below the
    # hard limit, in the master and so in every worker (run() and the paste runner did not).
    _, hard = _open_file_limits(os.getpid())
    if hard < 1300:
        pytest.skip("the hard open-file limit here is %d" % hard)
    port = free_port()
    process = _door(tmp_path, door, port, _CONNECTIONS[door], limits=(512, hard))
    try:
        serving = _serving(process, door, port)
        assert _get(port)[0] in serving
        limits = [_open_file_limits(pid) for pid in {process.pid, *serving}]
    finally:
        code, out, err = _finish(process, signal.SIGTERM)
    assert code == 0, err
    assert limits == [(1000 + 256, hard)] * len(limits), limits
    assert "open-file limit" not in err, err


def _refusal(door, tmp_path, setting, value):
    """What ``door`` says when the pre-flight refuses ``setting``: (its exit code, its one line)."""
    port = free_port()
    flag = {"command": ("--" + setting, value), "run": ((setting, value),)}.get(door, ("%s = %s" % (setting, value),))
    process = _door(tmp_path, door, port, flag)
    out, err = process.communicate(timeout=30)
    assert "serving on" not in out and "listening on" not in err, (out, err)
    return process.returncode, err


_SAID = {
    "command": "greenserve: error: --{setting}: {reason}\n",
    "run": "refused: {setting}: {reason}\n",
    "paste-1-process": "greenserve: error: {ini}: [server] {setting}: {reason}\n",
    "paste-2-workers": "greenserve: error: {ini}: [server] {setting}: {reason}\n",
}


@pytest.mark.parametrize("setting, value", [("user", "no-such-user-zz"), ("group", "no-such-group-zz")])
@pytest.mark.parametrize("door", DOORS)
def test_every_front_door_refuses_an_unknown_account_before_it_binds(tmp_path, door, setting, value):
    # One line naming the setting as that door spells it, and the same reason, before anything
    # is bound or forked: not a worker boot loop (the paste runner did not take user or group,
    # and run() said "keyword: --user").
    code, err = _refusal(door, tmp_path, setting, value)
    reason = "unknown %s %r" % (setting, value)
    assert (code, err) == (2, _SAID[door].format(setting=setting, reason=reason, ini=tmp_path / "site.ini")), err


def test_the_paste_runner_takes_user_and_group_and_no_other_key_of_the_master():
    # Keys of the master besides user and group are still not keys of a [server] section.
    from greenserve.entry import paste

    with pytest.raises(ValueError, match="^timeout: not a key greenserve knows"):
        paste._server_keys({"timeout": "30"})
    assert paste._server_keys({"user": "nobody", "group": "65534"})[3] == {"user": "nobody", "group": "65534"}


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can switch to another account")
@pytest.mark.parametrize(
    "door, key, expected",
    [
        ("paste-1-process", "user = nobody", lambda answer: answer[1] == pwd.getpwnam("nobody").pw_uid),
        # Workers that import as nobody need Python where nobody may read it; root with nogroup
        # reads everything and still shows the switch.
        ("paste-2-workers", "group = nogroup", lambda answer: answer[1:] == [0, grp.getgrnam("nogroup").gr_gid]),
    ],
    ids=["paste-1-process-user", "paste-2-workers-group"],
)
def test_the_paste_runner_serves_as_its_account_once_bound(tmp_path, door, key, expected):
    port = free_port()
    process = _door(tmp_path, door, port, (key,))
    try:
        serving = _serving(process, door, port)
        answer = _get(port)
    finally:
        code, out, err = _finish(process, signal.SIGTERM)
    assert code == 0, err
    assert answer[0] in serving and expected(answer), answer
    if door == "paste-2-workers":
        assert answer[0] != process.pid  # the master stays who it was


def test_run_writes_its_pid_file_in_its_directory_and_removes_it(tmp_path):
    # --chdir and --pid reach run() as they reach the command (run() ignored both).
    directory = tmp_path / "srv"
    directory.mkdir()
    port = free_port()
    process = _door(tmp_path, "run", port, (("chdir", str(directory)), ("pid", "app.pid"), ("workers", 1)))
    try:
        _serving(process, "run", port)
        written = (directory / "app.pid").read_text()
    finally:
        code, out, err = _finish(process, signal.SIGTERM)
    assert code == 0, err
    assert written == "%d\n" % process.pid
    assert not (directory / "app.pid").exists()


def test_run_refuses_a_pid_file_naming_a_running_process(tmp_path):
    import greenserve
    from greenserve.settings import SettingError

    pid_path = tmp_path / "app.pid"
    pid_path.write_text("%d\n" % os.getppid())  # running, and not this process
    socket_path = tmp_path / "gs.sock"
    with pytest.raises(SettingError, match=r"^--pid .*app\.pid names a running process \(pid %d\)" % os.getppid()):
        greenserve.run(lambda listener: None, bind="unix:%s" % socket_path, pid=str(pid_path))
    assert not socket_path.exists()


def test_the_architecture_page_names_the_steps_in_order():
    from greenserve.entry import startup

    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        page = f.read()
    paragraph = page[page.index("## Start-up"):].split("\n## ", 1)[0]
    named = [name for name in re.findall(r"`([a-z_]+)`", paragraph) if name in startup.STEP_NAMES]
    assert list(dict.fromkeys(named)) == list(startup.STEP_NAMES)  # in order, where first named

"""``./gunicorn.conf.py`` read without ``-c``, as gunicorn reads it (its config.py's
get_default_config_file): the command in a real subprocess on 127.0.0.1, bounded in time,
stopped by its PID."""

import http.client
import signal
import subprocess
import sys

import pytest

from tests.conftest import free_port, greenserve_command, subprocess_env, wait_for_port
from tests.entry.test_config_file import APP, printed, run_cli, write

pytestmark = pytest.mark.timeout(60)


def test_a_gunicorn_conf_py_in_the_current_directory_is_read_and_the_start_says_so(tmp_path):
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", "limit_request_line = 40\n")
    port = free_port()
    server = subprocess.Popen(
        greenserve_command("--bind", "127.0.0.1:%d" % port, "app:app"),
        cwd=str(tmp_path), env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_port(port, process=server)
        assert answer(port, "/") == 200
        assert answer(port, "/" + "a" * 40) == 414  # the file's limit_request_line, not the default 4094
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0, stderr
    said = [line for line in stderr.splitlines() if "gunicorn.conf.py" in line]
    assert len(said) == 1 and "[INFO] read ./gunicorn.conf.py (gunicorn's default config file" in said[0], stderr


def test_c_names_another_file_and_chdir_does_not_move_where_the_default_is_looked_for(tmp_path):
    write(tmp_path, "gunicorn.conf.py", "keepalive = 7\n")
    write(tmp_path, "other.py", "keepalive = 9\n")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "gunicorn.conf.py", "keepalive = 11\n")
    for directory in (tmp_path, tmp_path / "sub"):
        write(directory, "app.py", APP)  # gunicorn's --print-config imports the application too
    assert printed(run_cli("--print-config", cwd=tmp_path))["keepalive"] == (7, "file gunicorn.conf.py:1")
    assert printed(run_cli("-c", "other.py", "--print-config", cwd=tmp_path))["keepalive"] == (9, "file other.py:1")
    # gunicorn looks in the directory the command was typed in, before its chdir setting applies.
    assert printed(run_cli("--chdir", "sub", "--print-config", cwd=tmp_path))["keepalive"] == (
        7, "file gunicorn.conf.py:1"
    )
    assert printed(run_cli("--print-config", cwd=tmp_path / "sub"))["keepalive"] == (11, "file gunicorn.conf.py:1")
    checked = run_cli("check", "app:app", cwd=tmp_path)
    assert checked.returncode == 0 and "\nconfig file: gunicorn.conf.py\n" in checked.stdout, checked
    (tmp_path / "bare").mkdir()
    write(tmp_path / "bare", "app.py", APP)
    bare = run_cli("check", "app:app", cwd=tmp_path / "bare")
    assert bare.returncode == 0 and "config file:" not in bare.stdout, bare
    # The installed gunicorn, the oracle: the same file read in each case.
    for cwd, args, keepalive in ((tmp_path, [], 7), (tmp_path, ["-c", "other.py"], 9),
                                 (tmp_path, ["--chdir", "sub"], 7), (tmp_path / "sub", [], 11)):
        assert gunicorn_keepalive(cwd, args) == keepalive, (cwd, args)


def answer(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def gunicorn_keepalive(cwd, args):
    pytest.importorskip("gunicorn")
    result = subprocess.run([sys.executable, "-m", "gunicorn", *args, "--print-config", "app:app"], cwd=str(cwd),
                            env=subprocess_env(), capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.split(" ", 1)[0] == "keepalive")
    return int(line.split("=", 1)[1])

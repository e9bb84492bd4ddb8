"""The logs through `logging` (greenserve/observe/logconfig.py): --log-config, syslog, --capture-output.

Real processes: the command in a subprocess, python-json-logger as the formatter, a real rsyslogd
as the syslog receiver, each on 127.0.0.1.
"""

import json
import os
import shutil
import signal
import subprocess
import textwrap
import time

import pytest

from tests.conftest import Client, free_port, greenserve_command, subprocess_env, wait_until

APP = '''
import logging
import sys


def app(environ, start_response):
    if environ["PATH_INFO"] == "/fail":
        raise RuntimeError("the view failed")
    if environ["PATH_INFO"] == "/print":
        print("printed by the view")
        sys.stderr.write("written to stderr by the view\\n")
    # What the worker's logging handlers' sockets are: made by gevent's socket module, or not.
    sockets = sorted({type(handler.socket).__module__ for logger in (logging.getLogger(), logging.getLogger("greenserve.error"))
                      for handler in logger.handlers if hasattr(handler, "socket")})
    body = ",".join(sockets).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


def write(directory, name, text):
    path = os.path.join(str(directory), name)
    with open(path, "w", encoding="utf-8") as file:
        file.write(textwrap.dedent(text))
    return path


def run_cli(*args, cwd):
    return subprocess.run(greenserve_command(*args), cwd=str(cwd), env=subprocess_env(), capture_output=True, text=True,
                          timeout=60)


class Server:
    """The command serving app.py from ``directory``, stopped by PID (SIGTERM) at the end."""

    def __init__(self, directory, *args):
        self.port = free_port()
        write(directory, "app.py", APP)
        self.process = subprocess.Popen(
            greenserve_command("--bind", "127.0.0.1:%d" % self.port, *args, "app:app"),
            cwd=str(directory), env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait_until(lambda: self._serving(), 20, "the server to serve")
        except BaseException:
            self.stop()
            raise

    def _serving(self):
        if self.process.poll() is not None:
            raise AssertionError("the server exited: %s" % (self.process.communicate(),))
        try:
            self.get("/")
            return True
        except OSError:
            return False

    def get(self, target, **headers):
        with Client(("127.0.0.1", self.port), timeout=10) as client:
            client.request("GET", target, headers=list(headers.items()))
            return client.read_response()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.communicate()


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(*args):
        server = Server(tmp_path, *args)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def read_lines(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as file:
        return file.read().splitlines()


# --- --log-config ---------------------------------------------------------------------------------------


def test_log_config_json_with_python_json_logger_writes_one_json_object_per_request(tmp_path, serve):
    pytest.importorskip("pythonjsonlogger", reason="python-json-logger is not installed (pip install python-json-logger)")
    access, error = tmp_path / "access.jsonl", tmp_path / "error.log"
    write(tmp_path, "logging.json", json.dumps({
        "version": 1,
        # No field listed: the access record's own attributes are the JSON object's keys.
        "formatters": {"json": {"()": "pythonjsonlogger.json.JsonFormatter", "format": "%(message)s"}},
        "handlers": {
            "access": {"class": "logging.FileHandler", "filename": str(access), "formatter": "json"},
            "error": {"class": "logging.FileHandler", "filename": str(error), "formatter": "json"},
        },
        "loggers": {
            "greenserve.access": {"handlers": ["access"], "propagate": False},
            "greenserve.error": {"handlers": ["error"], "propagate": False},
        },
    }))
    server = serve("--log-config", "logging.json")
    assert server.get("/some/where?a=1", **{"User-Agent": "tester/1", "Referer": "http://x/"}).status == 200
    assert server.get("/fail").status == 500
    server.stop()
    records = [json.loads(line) for line in read_lines(access)]
    mine = [record for record in records if record["path"] == "/some/where"]
    assert len(mine) == 1, records
    record = mine[0]
    assert record["method"] == "GET" and record["query"] == "a=1" and record["protocol"] == "HTTP/1.1"
    assert record["status"] == 200 and record["bytes"] == 0 and record["remote_addr"] == "127.0.0.1"
    assert record["user_agent"] == "tester/1" and record["referer"] == "http://x/"
    assert isinstance(record["duration"], float) and 0 <= record["duration"] < 10
    assert '"GET /some/where?a=1 HTTP/1.1" 200' in record["message"]  # the access_log_format line
    assert [r["status"] for r in records if r["path"] == "/fail"] == [500]
    errors = [json.loads(line) for line in read_lines(error)]
    assert any("listening on" in r["message"] for r in errors), errors  # the master's
    failed = [r for r in errors if "Error handling request GET /fail" in r["message"]]  # a worker's
    assert failed and "RuntimeError: the view failed" in failed[0]["exc_info"], errors


def test_log_config_ini_is_a_file_config_and_the_fields_are_record_attributes(tmp_path, serve):
    access = tmp_path / "access.log"
    write(tmp_path, "logging.ini", """
        [loggers]
        keys=root,access

        [handlers]
        keys=access

        [formatters]
        keys=fields

        [logger_root]
        handlers=

        [logger_access]
        qualname=greenserve.access
        handlers=access
        propagate=0

        [handler_access]
        class=FileHandler
        args=(%r,)
        formatter=fields

        [formatter_fields]
        format=%%(levelname)s %%(method)s %%(path)s %%(status)d %%(bytes)d %%(remote_addr)s
    """ % str(access))
    server = serve("--log-config", "logging.ini")
    server.get("/ini")
    server.stop()
    assert "INFO GET /ini 200 0 127.0.0.1" in read_lines(access)


def test_gunicorn_logconfig_dict_in_a_config_file_is_applied(tmp_path, serve):
    error = tmp_path / "error.log"
    write(tmp_path, "gunicorn.conf.py", """
        logconfig_dict = {
            "version": 1,
            "formatters": {"plain": {"format": "gunicorn-style %%(levelname)s %%(message)s"}},
            "handlers": {"file": {"class": "logging.FileHandler", "filename": %r, "formatter": "plain"}},
            "loggers": {"greenserve.error": {"handlers": ["file"], "level": "DEBUG"}},
        }
    """ % str(error))
    server = serve("-c", "gunicorn.conf.py")
    with Client(("127.0.0.1", server.port)) as client:
        client.send(b"NOT HTTP\r\n\r\n")  # a 400, which the error log says at DEBUG
        assert client.read_response().status == 400
    server.stop()
    lines = read_lines(error)
    assert any(line.startswith("gunicorn-style INFO") and "listening on" in line for line in lines), lines
    # The file's level wins over --log-level's default (info), as in gunicorn.
    assert any(line.startswith("gunicorn-style DEBUG 400 from") for line in lines), lines


def test_without_a_handler_for_greenserve_access_no_access_log_is_made(tmp_path, serve):
    # A config that routes only the error log: the access log costs the requests nothing.
    error = tmp_path / "error.log"
    write(tmp_path, "logging.json", json.dumps({
        "handlers": {"error": {"class": "logging.FileHandler", "filename": str(error)}},
        "loggers": {"greenserve.error": {"handlers": ["error"], "propagate": False}},
    }))
    server = serve("--log-config", "logging.json", "--log-level", "debug")
    server.get("/")
    server.stop()
    text = "\n".join(read_lines(error))
    assert "listening on" in text and '"GET / HTTP/1.1"' not in text


def test_sigusr1_reopens_the_log_configs_files_and_unused_flags_are_named(tmp_path, serve):
    access = tmp_path / "access.log"
    write(tmp_path, "logging.json", json.dumps({
        "formatters": {"fields": {"format": "%(method)s %(path)s %(status)s"}},
        "handlers": {
            "access": {"class": "logging.FileHandler", "filename": str(access), "formatter": "fields"},
            "error": {"class": "logging.FileHandler", "filename": str(tmp_path / "error.log")},
        },
        "loggers": {
            "greenserve.access": {"handlers": ["access"], "propagate": False},
            "greenserve.error": {"handlers": ["error"], "propagate": False},
        },
    }))
    server = serve("--log-config", "logging.json", "--access-log", "ignored.log")
    server.get("/before")
    os.rename(access, tmp_path / "access.log.1")  # what logrotate does
    server.process.send_signal(signal.SIGUSR1)
    wait_until(lambda: any("log files reopened" in line and "worker pid" in line for line in read_lines(tmp_path / "error.log")),
               10, "the worker to reopen its files")
    server.get("/after")
    out, err = server.stop()
    assert read_lines(tmp_path / "access.log.1")[-1] == "GET /before 200"
    assert read_lines(access) == ["GET /after 200"]
    assert any("--access-log ignored.log not used with --log-config" in line for line in read_lines(tmp_path / "error.log"))
    assert not (tmp_path / "ignored.log").exists()


@pytest.mark.parametrize("name, text, problem", [
    ("broken.json", '{"version": 1,,}', "not valid JSON: Expecting property name"),
    ("handler.json", '{"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}}', "handler 'h'"),
    ("sections.ini", "[loggers]\nkeys=root\n", "missing"),
    ("missing.json", None, "No such file or directory"),
])
def test_a_log_config_that_does_not_work_is_one_line_naming_the_file_and_exit_2(tmp_path, name, text, problem):
    if text is not None:
        write(tmp_path, name, text)
    write(tmp_path, "app.py", APP)
    result = run_cli("--bind", "127.0.0.1:%d" % free_port(), "--log-config", name, "app:app", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("greenserve: error: --log-config %s: " % os.path.join(str(tmp_path), name)), lines
    assert problem in lines[0], lines


def test_a_workers_syslog_handler_socket_is_made_again_after_patching(tmp_path, serve):
    # Made in the master, before patching, it would be a blocking socket in the worker.
    write(tmp_path, "logging.json", json.dumps({
        "handlers": {"syslog": {"class": "logging.handlers.SysLogHandler", "address": ["127.0.0.1", free_port()]}},
        "root": {"handlers": ["syslog"]},
    }))
    server = serve("--log-config", "logging.json")
    assert server.get("/").body == b"gevent._socket3"


# --- syslog -----------------------------------------------------------------------------------------------


@pytest.fixture
def rsyslog(tmp_path):
    """A real rsyslogd receiving on a free UDP port of 127.0.0.1, writing every message to a file."""
    rsyslogd = shutil.which("rsyslogd") or ("/usr/sbin/rsyslogd" if os.path.exists("/usr/sbin/rsyslogd") else None)
    if rsyslogd is None:
        pytest.skip("rsyslogd is not installed (Debian: apt-get install rsyslog)")
    port = free_port()
    out = tmp_path / "syslog.out"
    work = tmp_path / "rsyslog-work"
    work.mkdir()
    conf = write(tmp_path, "rsyslog.conf", """
        global(workDirectory="%s")
        module(load="imudp")
        input(type="imudp" address="127.0.0.1" port="%d")
        template(name="facility_tag_msg" type="string" string="%%syslogfacility-text%% %%syslogtag%%%%msg%%\\n")
        *.* action(type="omfile" file="%s" template="facility_tag_msg")
    """ % (work, port, out))
    pid_file = tmp_path / "rsyslogd.pid"
    process = subprocess.Popen([rsyslogd, "-n", "-f", conf, "-i", str(pid_file)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_until(lambda: pid_file.exists() or process.poll() is not None, 10, "rsyslogd to start")
        if process.poll() is not None:
            pytest.fail("rsyslogd did not start: %s" % process.communicate()[0])
        time.sleep(0.3)  # the pid file is written before the UDP input binds
        yield port, out
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_the_error_log_reaches_a_real_rsyslog_with_facility_and_prefix(tmp_path, serve, rsyslog):
    port, out = rsyslog
    server = serve("--syslog-addr", "udp://127.0.0.1:%d" % port, "--syslog-facility", "local3",
                   "--syslog-prefix", "shop", "--error-log", "error.log")
    assert server.get("/fail").status == 500

    def received():
        return [line for line in read_lines(out) if "shop[" in line]

    wait_until(lambda: any("Error handling request GET /fail" in line for line in received()), 10, "the worker's ERROR in syslog")
    lines = received()
    assert any(line.startswith("local3 shop[") and "[INFO] greenserve" in line and "listening on" in line
               for line in lines), lines
    failed = [line for line in lines if "Error handling request GET /fail" in line][0]
    assert failed.startswith("local3 shop[") and "[ERROR]" in failed and "RuntimeError: the view failed" in failed
    server.stop()
    # --error-log's file still has every line, as without syslog.
    text = "\n".join(read_lines(tmp_path / "error.log"))
    assert "listening on" in text and "RuntimeError: the view failed" in text


def test_gunicorn_syslog_true_is_syslog_at_the_default_address(tmp_path):
    write(tmp_path, "gunicorn.conf.py", "syslog = True\nsyslog_prefix = 'shop'\n")
    result = run_cli("-c", "gunicorn.conf.py", "--print-config", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "syslog_prefix" in result.stdout and "'shop'" in result.stdout
    assert any(line.startswith("syslog ") and "True" in line for line in result.stdout.splitlines()), result.stdout


@pytest.mark.parametrize("flag, value, problem", [
    ("--syslog-addr", "udp://127.0.0.1", "expected udp://HOST:PORT"),
    ("--syslog-addr", "http://x:1", "expected udp://HOST:PORT, tcp://HOST:PORT or unix:///dev/log"),
    ("--syslog-facility", "local9", "must be one of"),
])
def test_a_bad_syslog_setting_is_one_line_and_exit_2(tmp_path, flag, value, problem):
    write(tmp_path, "app.py", APP)
    result = run_cli(flag, value, "app:app", cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("greenserve: error: %s" % flag) and problem in lines[0], lines


# --- --capture-output -------------------------------------------------------------------------------------


def test_capture_output_sends_a_views_print_to_the_error_log_file(tmp_path, serve):
    server = serve("--capture-output", "--error-log", "error.log")
    server.get("/print")
    # The master says "listening on" once its workers report ready, which may come after the
    # first request was served: wait for both lines.
    wait_until(lambda: all(line in "\n".join(read_lines(tmp_path / "error.log"))
                           for line in ("printed by the view", "listening on")), 10,
               "the view's print() and the master's startup line in the error log")
    text = "\n".join(read_lines(tmp_path / "error.log"))
    assert "written to stderr by the view" in text and "listening on" in text
    out, err = server.stop()
    assert "printed by the view" not in out


def test_capture_output_with_the_error_log_on_stderr_sends_stdout_there(tmp_path, serve):
    server = serve("--capture-output")
    server.get("/print")
    out, err = server.stop()
    assert out == "" and "printed by the view" in err and "written to stderr by the view" in err

"""The docs' commands are this test's inputs: every ```sh block of README.md's first block and
tour, docs/quickstart.md, docs/http2.md's first section ("Serving HTTP/2") and docs/static.md's
opening is run as written,
so that a doc cannot drift from what the command does.

Each block is one test case, named by its file and line. Its lines run in order, in a temporary
copy of examples/ (a command may write files, as openssl writes cert.pem): a server command is
started, checked to answer and stopped by its PID when the next server starts or the block
ends; a client (curl, gunicornc) runs against the server started before it, and a comment such
as ``# HTTP/2 200`` after a curl is the status its output must begin with. A line that cannot run
as written fails the case with the doc's line number.

Only what would collide on a shared machine is changed, in the command's words: a doc's port
(8000, 8080) becomes a free port, the same free port for the same doc port within a block;
0.0.0.0 becomes 127.0.0.1 (tests listen on loopback only); a path under /tmp/ goes under the
case's temporary directory. A server whose command binds nothing gets its free port from
GREENSERVE_CMD_ARGS (gunicorn's GUNICORN_CMD_ARGS; the command's own --bind would win), not from
its words. `pip install` lines are not run: each name or extra they install is checked against
pyproject.toml. `python -m pytest` is this suite itself and is not run.
"""

import http.client
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time

import pytest

from tests.conftest import ROOT, free_port, subprocess_env
from tests.test_uwsgi_packet import packet
from tests.test_uwsgi_server import exchange

pytestmark = pytest.mark.timeout(120)

# (doc, the "## " sections read: "" is the text before the first "## " heading; None: all of it)
DOCS = [
    ("README.md", ("", "A 30-second tour")),
    ("docs/quickstart.md", None),
    ("docs/http2.md", ("Serving HTTP/2",)),
    ("docs/static.md", ("",)),
]

STEP_TIMEOUT = 30  # a one-shot command, and a server's start
DOC_PORT = re.compile(r"\b(127\.0\.0\.1|0\.0\.0\.0|localhost):(\d{4,5})\b")
SERVER_ONE_SHOTS = ("--print-config", "--check-config", "--version", "check", "--help")


# --- the docs' blocks -----------------------------------------------------------------------------


def sh_blocks(doc, sections):
    """``[(line of the block's first command, [(line, text), ...])]``: the doc's ```sh blocks in
    ``sections``, a command per line (a trailing backslash joins the next), blank lines left out."""
    blocks, block, section, continued = [], None, "", None
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if block is None:
                if line.startswith("## "):
                    section = line[3:].strip()
                elif line.strip() == "```sh" and (sections is None or section in sections):
                    block = []
                continue
            if line.strip() == "```":
                blocks.append(block)
                block = None
            elif continued is not None:
                continued = (continued[0], continued[1] + " " + line.strip().rstrip("\\"))
                block[-1] = continued
                continued = continued if line.endswith("\\") else None
            elif line.strip():
                block.append((number, line.strip().rstrip("\\")))
                continued = block[-1] if line.endswith("\\") else None
    return [(block[0][0], block) for block in blocks if block]


CASES = [
    pytest.param(doc, number, lines, id="%s:%d" % (doc, number))
    for doc, sections in DOCS
    for number, lines in sh_blocks(doc, sections)
]


def test_the_docs_have_the_blocks_this_test_reads():
    # A renamed heading would leave a doc's commands untested without a word.
    for doc, sections in DOCS:
        assert sh_blocks(doc, sections), "%s: no ```sh block in %s" % (doc, sections)


# --- running them ---------------------------------------------------------------------------------


@pytest.mark.parametrize("doc, number, lines", CASES)
def test_the_docs_commands_run_as_written(doc, number, lines, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copytree(os.path.join(ROOT, "examples"), work / "examples",
                    ignore=shutil.ignore_patterns("__pycache__"))
    run = Block(doc, work, tmp_path)
    try:
        for line, text in lines:
            run.line(line, text)
        run.stop()
    finally:
        run.kill()


class Block:
    """One block's commands run in order, and the server among them that is running."""

    def __init__(self, doc, work, tmp_path):
        self.doc, self.work, self.tmp = doc, work, tmp_path
        self.ports = {}
        self.server = None  # (Popen, its log file, the doc's line, the command)
        self.address = None  # where the running server listens, as --bind says it
        self.checked = False  # whether a client line has asked the running server
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        # `greenserve` as the docs type it, this checkout's: exec keeps the PID the master's.
        shim = bin_dir / "greenserve"
        shim.write_text('#!/bin/sh\nexec %s -m greenserve "$@"\n' % shlex.quote(sys.executable))
        shim.chmod(0o755)
        self.env = subprocess_env(PATH=str(bin_dir) + os.pathsep + os.environ.get("PATH", ""))
        for name in ("PORT", "WEB_CONCURRENCY", "GREENSERVE_CMD_ARGS", "FORWARDED_ALLOW_IPS"):
            self.env.pop(name, None)

    def where(self, line):
        return "%s:%d" % (self.doc, line)

    def line(self, line, text):
        words = [self.substitute(word) for word in shlex.split(text, comments=True)]
        expected = re.search(r"#\s*(HTTP/[\d.]+ \d{3})", text)
        cwd = self.work
        for command in split_on(words, "&&"):
            environ = dict(self.env)
            while re.match(r"[A-Z_][A-Z0-9_]*=", command[0]):  # VAR=value before a command
                name, _, value = command.pop(0).partition("=")
                environ[name] = value
            if command[0] == "cd":
                cwd = cwd / command[1]
                assert cwd.is_dir(), "%s: cd %s: no such directory" % (self.where(line), command[1])
            elif command[:2] == ["pip", "install"]:
                check_pip_install(self.where(line), command[2:])
            elif "pytest" in command:
                continue  # the suite itself (README's test command)
            elif command[0] == "greenserve" and not set(command) & set(SERVER_ONE_SHOTS):
                self.start(line, command, cwd, environ)
            else:
                self.one_shot(line, command, cwd, environ, expected and expected.group(1))

    def substitute(self, word):
        """The word with a doc's port, 0.0.0.0 and /tmp/ made safe to run beside other tests."""
        def port(match):
            if match.group(2) not in self.ports:
                self.ports[match.group(2)] = free_port()
            host = "127.0.0.1" if match.group(1) == "0.0.0.0" else match.group(1)
            return "%s:%d" % (host, self.ports[match.group(2)])

        word = DOC_PORT.sub(port, word)
        return word.replace("/tmp/", str(self.tmp) + "/")

    def one_shot(self, line, command, cwd, environ, expected):
        if shutil.which(command[0], path=self.env["PATH"]) is None:
            pytest.skip("%s: %s is not installed" % (self.where(line), command[0]))
        if command[0] in ("curl", "gunicornc"):
            assert self.server is not None, "%s: %s with no server started before it" % (self.where(line), command[0])
            self.checked = True
        result = subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True,
                                timeout=STEP_TIMEOUT)
        assert result.returncode == 0, "%s: %s exited %d:\n%s%s%s" % (
            self.where(line), shlex.join(command), result.returncode, result.stdout[-2000:],
            result.stderr[-2000:], self.server_log())
        if expected:
            assert result.stdout.startswith(expected), "%s: %s: expected %r first, got:\n%s" % (
                self.where(line), shlex.join(command), expected, result.stdout[:500])

    def start(self, line, command, cwd, env):
        self.stop()
        binds = [command[i + 1] for i, word in enumerate(command[:-1]) if word in ("-b", "--bind")]
        if not binds:
            if "8000" not in self.ports:
                self.ports["8000"] = free_port()
            binds = ["127.0.0.1:%d" % self.ports["8000"]]
            env["GREENSERVE_CMD_ARGS"] = "--bind " + binds[0]
        log = open(self.tmp / ("server-%d.log" % line), "w+")
        process = subprocess.Popen(command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.server = (process, log, line, command)
        self.checked = False
        address = next((bind for bind in binds if not bind.startswith("unix:")), binds[0])
        self.wait_listening(address)

    def wait_listening(self, address):
        process, _, line, command = self.server
        deadline = time.monotonic() + STEP_TIMEOUT
        while True:
            assert process.poll() is None, "%s: %s exited %s before it listened:\n%s" % (
                self.where(line), shlex.join(command), process.returncode, self.server_log())
            try:
                connect(address).close()
                self.address = address
                return
            except OSError:
                assert time.monotonic() < deadline, "%s: nothing listens on %s after %d s:\n%s" % (
                    self.where(line), address, STEP_TIMEOUT, self.server_log())
                time.sleep(0.1)

    def stop(self):
        """The running server checked (unless a client line of the doc asked it) and stopped by its PID."""
        if self.server is None:
            return
        process, log, line, command = self.server
        try:
            if not self.checked:
                answered(self.where(line), command, self.address, self.work, self.server_log)
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=STEP_TIMEOUT)
            assert process.returncode == 0, "%s: %s exited %d on SIGTERM:\n%s" % (
                self.where(line), shlex.join(command), process.returncode, self.server_log())
        finally:
            self.kill()

    def kill(self):
        if self.server is None:
            return
        process, log, _, _ = self.server
        if process.poll() is None:
            process.kill()
            process.wait(timeout=STEP_TIMEOUT)
        log.close()
        self.server = None

    def server_log(self):
        if self.server is None:
            return ""
        log = self.server[1]
        log.flush()
        log.seek(0)
        return "--- the server's log:\n" + log.read()[-3000:]


def split_on(words, separator):
    commands, command = [], []
    for word in words:
        if word == separator:
            commands.append(command)
            command = []
        else:
            command.append(word)
    return commands + [command] if command else commands


def connect(address):
    if address.startswith("unix:"):
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(5)
        sock.connect(address[5:])
        return sock
    host, _, port = address.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=5)


def answered(where, command, address, work, server_log):
    """The server of ``command`` answers a request as the doc means it to be asked."""
    host, _, port = address.rpartition(":")
    if "--proxy-protocol" in command:
        # Behind a proxy at another address: from 127.0.0.1 the documented answer is a closed
        # connection and one line naming forwarded_allow_ips.
        assert exchange(int(port), b"PROXY TCP4 192.0.2.1 127.0.0.1 5000 80\r\nGET / HTTP/1.1\r\n\r\n") == b""
        deadline = time.monotonic() + 10
        while "forwarded_allow_ips" not in server_log():
            assert time.monotonic() < deadline, "%s: no line for the untrusted PROXY header:\n%s" % (where, server_log())
            time.sleep(0.1)
        return
    if "uwsgi" in command:
        variables = [(b"REQUEST_METHOD", b"GET"), (b"PATH_INFO", b"/"), (b"SERVER_PROTOCOL", b"HTTP/1.1"),
                     (b"SERVER_NAME", b"127.0.0.1"), (b"SERVER_PORT", port.encode()), (b"REMOTE_ADDR", b"127.0.0.1")]
        status = exchange(int(port), packet(variables)).split(b"\r\n", 1)[0]
        assert status.endswith(b" 200 OK"), "%s: uwsgi answered %r:\n%s" % (where, status, server_log())
        return
    if "--certfile" in command:
        context = ssl.create_default_context(cafile=str(work / command[command.index("--certfile") + 1]))
        conn = http.client.HTTPSConnection(host, int(port), timeout=10, context=context)
    else:
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/", headers={"Host": "127.0.0.1"})
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as exc:
        raise AssertionError("%s: GET / failed: %r:\n%s" % (where, exc, server_log())) from None
    finally:
        conn.close()
    assert response.status == 200 and body, "%s: GET / answered %d %r:\n%s" % (
        where, response.status, body[:200], server_log())


def check_pip_install(where, arguments):
    """What a `pip install` line installs is what pyproject.toml offers: this project with its
    extras, or a package its optional dependencies name (so CI installs and tests it)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    extras = project["optional-dependencies"]
    named = {re.split(r"[<>=\[; ]", requirement)[0].lower() for group in extras.values() for requirement in group}
    for argument in arguments:
        if argument.startswith("-"):
            continue
        name, _, wanted = argument.partition("[")
        if name in (".", project["name"]):
            unknown = set(filter(None, wanted.rstrip("]").split(","))) - set(extras)
            assert not unknown, "%s: pip install %s: no extra %s in pyproject.toml" % (where, argument, sorted(unknown))
        else:
            assert name.lower() in named, "%s: pip install %s: not among pyproject.toml's optional dependencies" % (
                where, argument)


def python_blocks(doc, sections):
    """The doc's ```python blocks in ``sections`` that run a server (they call serve_forever):
    ``[(line of the block's first line, code)]``."""
    found, code, section = [], None, ""
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if code is None:
                if line.startswith("## "):
                    section = line[3:].strip()
                elif line.strip() == "```python" and section in sections:
                    code, first = [], number + 1
            elif line.strip() == "```":
                if any("serve_forever()" in text for text in code):
                    found.append((first, "".join(code)))
                code = None
            else:
                code.append(line)
    return found


@pytest.mark.parametrize("number, code", [
    pytest.param(number, code, id="README.md:%d" % number) for number, code in python_blocks("README.md", DOCS[0][1])
])
def test_the_readmes_python_snippet_serves_as_written(number, code, tmp_path):
    port = free_port()
    # The doc's port, in gevent.pywsgi's (host, port) form, made a free one.
    code, count = re.subn(r'(\("127\.0\.0\.1", )8000\)', r"\g<1>%d)" % port, code)
    assert count == 1, "README.md:%d: no (\"127.0.0.1\", 8000) address in the snippet" % number
    with open(tmp_path / "snippet.log", "w+") as log:
        process = subprocess.Popen([sys.executable, "-c", code], cwd=str(tmp_path), env=subprocess_env(),
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + STEP_TIMEOUT
            while True:
                log.seek(0)
                assert process.poll() is None, "README.md:%d: the snippet exited %s:\n%s" % (
                    number, process.returncode, log.read())
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=5).close()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "README.md:%d: the snippet does not listen" % number
                    time.sleep(0.1)
            answered("README.md:%d" % number, [], "127.0.0.1:%d" % port, tmp_path, lambda: "")
        finally:
            process.kill()  # WSGIServer.serve_forever sets no signal handler: SIGTERM would end it as abruptly
            process.wait(timeout=STEP_TIMEOUT)

"""What the master imports: nothing of gevent, HTTP, TLS or the application (its RSS, issue 22).

The master only parses settings, binds, forks and watches; every module it imports stays in its
RSS for as long as it serves, and in every worker's RSS too (a forked worker starts with the
master's pages). These tests read the master's ``sys.modules`` through a ``when_ready`` hook
(docs/hooks.md), which runs in the master once a worker serves: after the startup lines, which
used to import the whole hot path to name its build. The sizes are measured by
bench/process_memory.py, not here.
"""

import json
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request

from tests.conftest import free_port, greenserve_command, subprocess_env

# What only a worker (or a feature that is off) needs: if one of these is in a plain master,
# something on the command's path imports it again.
NOT_IN_THE_MASTER = (
    "gevent", "greenlet", "zope.interface",  # the workers' event loop (~5 MB with monkey.patch_all's)
    "ssl", "_ssl", "hashlib",  # TLS: only with --certfile
    "greenserve.http", "greenserve.wsgi", "greenserve.connection", "greenserve.http11", "greenserve.server", "greenserve.tls",
    "greenserve.proxy_protocol", "greenserve.websocket", "greenserve.observe.stats", "greenserve.observe.metrics",
    "greenserve.observe.accesslog",  # the access log: off by default
    # (not inspect: the when_ready hook below brings it, to check the hook's arguments)
    "email", "http.client", "urllib.request", "logging", "typing", "dataclasses", "shutil", "tempfile",
    "random", "difflib", "encodings.idna",
    # The socket module (its enums, selectors, array, math: ~0.4 MB): the master binds with
    # _socket's type (listeners.py), and each worker adopts its listeners as socket.socket.
    "socket", "selectors", "array",
    "masterapp",  # the application: imported by each worker (or by the master with --preload)
    "greenserve.process.systemd",  # sd_notify: only under NOTIFY_SOCKET
)
# Of the above, what the master does import: http/grammar.py's constants, where the request limits'
# defaults are stated and the settings table reads them (a module of constants, ~8 kB of RSS; the
# parser, the head rules and the compiled modules stay out).
IN_THE_MASTER = ("greenserve.http", "greenserve.http.grammar")

HOOKS = """
import json, sys

def when_ready(server):
    with open(%r, "w") as out:
        json.dump(sorted(sys.modules), out)
"""

APP = """
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]
"""


def startup_modules():
    """What the interpreter imports before any code of greenserve's (site, .pth files):
    not the master's doing, so not held against it."""
    out = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
                         env=subprocess_env(), capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(out.stdout))


def master_modules(tmp_path, *args, env=None):
    """sys.modules of a master started with ``args`` (and ``env``), once its worker serves."""
    dump = tmp_path / "modules.json"
    (tmp_path / "hooks.py").write_text(textwrap.dedent(HOOKS % str(dump)))
    (tmp_path / "masterapp.py").write_text(textwrap.dedent(APP))
    port = free_port()
    process = subprocess.Popen(
        greenserve_command("-c", str(tmp_path / "hooks.py"), "--bind", "127.0.0.1:%d" % port, "--chdir",
                           str(tmp_path), "--workers", "1", *args, "masterapp:app"),
        env=subprocess_env(**(env or {})), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not dump.exists() or not dump.read_text().endswith("]"):
            assert process.poll() is None, process.communicate()[0]
            assert time.monotonic() < deadline, "when_ready did not run within 30 s"
            time.sleep(0.05)
        with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=10) as response:
            assert response.read() == b"ok"  # the worker, importing all of it, serves
        return set(json.loads(dump.read_text()))
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
        assert process.returncode == 0, output


def test_a_plain_master_imports_nothing_of_gevent_http_tls_or_the_application(tmp_path):
    before = startup_modules()
    modules = master_modules(tmp_path)
    held = sorted(
        name for name in modules - before - set(IN_THE_MASTER)
        if any(name == banned or name.startswith(banned + ".") for banned in NOT_IN_THE_MASTER)
    )
    assert held == [], "the master imported %s" % ", ".join(held)


def test_preload_still_imports_the_application_and_gevent_in_the_master(tmp_path):
    # The other side of the same line: --preload is asked to load (and patch) in the master.
    modules = master_modules(tmp_path, "--preload")
    assert {"masterapp", "gevent"} <= modules


def test_under_notify_socket_the_master_tells_systemd_without_the_socket_module(tmp_path):
    # sd_notify's datagrams go through _socket, as the listeners are bound (~0.4 MB saved).
    before = startup_modules()
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(tmp_path / "notify.sock"))
    receiver.settimeout(10)
    try:
        modules = master_modules(tmp_path, env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock")})
        assert receiver.recv(4096).startswith(b"READY=1\n")
    finally:
        receiver.close()
    assert "greenserve.process.systemd" in modules
    assert not {"socket", "selectors", "array"} & (modules - before)

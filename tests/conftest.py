"""Shared test helpers: a greenserve server in a background thread, and a strict HTTP/1.1 client.

The server runs on its own gevent hub in a thread, on a real socket on 127.0.0.1; tests talk to
it with plain (unpatched) stdlib sockets from the main thread, so every byte crosses the kernel.
"""

import grp
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import wsgiref.validate

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _LockedStream(io.StringIO):
    """A StringIO safe to write from the server thread and read from the test."""

    def __init__(self):
        super().__init__()
        self._lock = threading.Lock()

    def write(self, text):
        with self._lock:
            return super().write(text)

    def getvalue(self):
        with self._lock:
            return super().getvalue()


class ServerThread:
    def __init__(self, app, listener=None, log="capture", **kwargs):
        self.app = app
        self.listener = listener or ("127.0.0.1", 0)
        self.kwargs = kwargs
        self.errors = _LockedStream()
        self.access = _LockedStream() if log == "capture" else log
        self.server = None
        self.hub = None
        self._ready = threading.Event()
        self._failure = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            import gevent
            from greenserve import WSGIServer

            self.hub = gevent.get_hub()
            self.kwargs.setdefault("error_log", self.errors)
            self.server = WSGIServer(self.listener, self.app, log=self.access, **self.kwargs)
            self.server.start()
        except BaseException as exc:  # surfaced in start()
            self._failure = exc
            self._ready.set()
            return
        self._ready.set()
        self.server.serve_forever(stop_timeout=self.kwargs.get("graceful_timeout", 2))

    def start(self):
        self._thread.start()
        self._ready.wait(10)
        if self._failure is not None:
            raise self._failure
        return self

    @property
    def port(self):
        return self.server.server_port

    @property
    def address(self):
        return ("127.0.0.1", self.port)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def call(self, function, *args):
        """Run function(*args) in the server's hub, from the test thread; return nothing."""
        self.hub.loop.run_callback_threadsafe(function, *args)

    def stop(self, timeout=2):
        if self.server is None or self._failure is not None:
            return
        import gevent

        self.call(gevent.spawn, self.server.stop, timeout)
        self._thread.join(timeout + 5)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


class _PEP3333InputWrapper(wsgiref.validate.InputWrapper):
    """wsgiref.validate predates PEP 3333, which lets an app call read() with no argument."""

    def read(self, *args):
        assert len(args) <= 1
        data = self.input.read(*args)
        assert type(data) is bytes
        return data


wsgiref.validate.InputWrapper = _PEP3333InputWrapper


@pytest.fixture(params=["validated", "plain"])
def serve(request):
    """serve(app, **settings) -> a started ServerThread, stopped at the end of the test.

    Each test runs twice: once with the app wrapped in wsgiref.validate.validator, which checks
    the server's side of PEP 3333 (environ types, start_response, close() being called, ...),
    and once unwrapped, so that the server's fast path for list bodies runs too. Pass
    validate=False for the few apps that step outside what the validator accepts on purpose.
    """
    servers = []

    def start(app, validate=True, **kwargs):
        if validate and request.param == "validated":
            app = wsgiref.validate.validator(app)
        server = ServerThread(app, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


# --- a strict HTTP/1.1 client -------------------------------------------------------------------


class Response:
    def __init__(self, version, status, reason, headers, body, raw_head):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers  # list of (name, value) as received
        self.body = body
        self.raw_head = raw_head

    def header(self, name, default=None):
        name = name.lower()
        for key, value in self.headers:
            if key.lower() == name:
                return value
        return default

    def header_list(self, name):
        name = name.lower()
        return [value for key, value in self.headers if key.lower() == name]

    def __repr__(self):
        return "<Response %d %r %d bytes>" % (self.status, self.reason, len(self.body))


class Client:
    """A raw HTTP/1.1 client over one socket, reading responses strictly and in order."""

    def __init__(self, address, timeout=10, source=None):
        if isinstance(address, str):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(address)
        else:
            # ``source``: the local address to connect from (any of 127.0.0.0/8 on Linux).
            self.sock = socket.create_connection(address, timeout=timeout,
                                                 source_address=(source, 0) if source else None)
        self.buffer = bytearray()

    def send(self, data):
        self.sock.sendall(data)

    def request(self, method="GET", target="/", headers=None, body=b"", version="HTTP/1.1"):
        lines = ["%s %s %s" % (method, target, version)]
        headers = list(headers or [])
        names = {name.lower() for name, _ in headers}
        if "host" not in names and version == "HTTP/1.1":
            headers.insert(0, ("Host", "test"))
        if body and "content-length" not in names and "transfer-encoding" not in names:
            headers.append(("Content-Length", str(len(body))))
        lines += ["%s: %s" % item for item in headers]
        self.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body)

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed by the server")
        self.buffer += data

    def _read_until(self, marker):
        while marker not in self.buffer:
            self._fill()
        index = self.buffer.index(marker)
        data = bytes(self.buffer[:index])
        del self.buffer[: index + len(marker)]
        return data

    def _read_exact(self, n):
        while len(self.buffer) < n:
            self._fill()
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def read_response(self, method="GET"):
        head = self._read_until(b"\r\n\r\n")
        text = head.decode("latin-1")
        lines = text.split("\r\n")
        version, status, reason = (lines[0].split(" ", 2) + [""])[:3]
        assert version == "HTTP/1.1", lines[0]
        headers = []
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            assert sep and name and name == name.strip(), "malformed header line %r" % line
            headers.append((name, value.strip()))
        response = Response(version, int(status), reason, headers, b"", head)
        status = response.status
        if status < 200 and status != 101:
            return response  # an interim response; the caller reads the final one next
        lengths = response.header_list("Content-Length")
        chunked = response.header("Transfer-Encoding")
        assert not (lengths and chunked), "both Content-Length and Transfer-Encoding"
        assert len(lengths) <= 1, "repeated Content-Length"
        if method == "HEAD" or status in (204, 304) or status == 101:
            return response
        if chunked:
            assert chunked.lower() == "chunked"
            body = []
            while True:
                size = int(self._read_until(b"\r\n"), 16)
                if size == 0:
                    assert self._read_exact(2) == b"\r\n"
                    break
                body.append(self._read_exact(size))
                assert self._read_exact(2) == b"\r\n"
            response.body = b"".join(body)
        elif lengths:
            response.body = self._read_exact(int(lengths[0]))
        else:
            assert response.header("Connection", "").lower() == "close", "no framing and not close"
            while True:
                try:
                    self._fill()
                except EOFError:
                    break
            response.body = bytes(self.buffer)
            self.buffer.clear()
        return response

    def get(self, target="/", **kwargs):
        method = kwargs.get("method", "GET")
        self.request(target=target, **kwargs)
        return self.read_response(method)

    def read_until_close(self, timeout=5):
        """All the raw bytes the server sends until it closes the connection."""
        self.sock.settimeout(timeout)
        while True:
            try:
                self._fill()
            except (EOFError, ConnectionResetError):
                break
        data = bytes(self.buffer)
        self.buffer.clear()
        return data

    def assert_closed(self, timeout=5):
        """The server closed the connection (EOF) with nothing more sent."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        rest = bytes(self.buffer) + data
        assert rest == b"", "unexpected bytes after the response: %r" % rest[:200]

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@pytest.fixture
def client_for():
    clients = []

    def make(server_or_address, **kwargs):
        address = server_or_address.address if isinstance(server_or_address, ServerThread) else server_or_address
        client = Client(address, **kwargs)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


# --- apps used by many tests ---------------------------------------------------------------------


def hello_app(environ, start_response):
    body = b"Hello, World!"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def echo_app(environ, start_response):
    """Echoes method, path and the request body."""
    body = environ["wsgi.input"].read()
    reply = ("%s %s %s\n" % (environ["REQUEST_METHOD"], environ["PATH_INFO"], environ["QUERY_STRING"])).encode(
        "latin-1"
    ) + body
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(reply)))])
    return [reply]


# --- subprocesses ---------------------------------------------------------------------------------


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port, timeout=15, process=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise AssertionError("server exited early with %s" % process.returncode)
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise AssertionError("nothing listens on port %d after %s s" % (port, timeout))


def greenserve_command(*args):
    """The CLI as a user runs it, from this checkout."""
    return [sys.executable, "-m", "greenserve", *args]


@pytest.fixture(autouse=True)
def _own_control_socket_directory(tmp_path_factory, monkeypatch):
    """Each test's masters put their default control socket (gunicorn's $XDG_RUNTIME_DIR/gunicorn.ctl,
    process/control.py) in a directory of the test's: masters of tests run at once would find
    one another's there, and all but the first say so in a warning."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("xdg_runtime")))


def subprocess_env(**extra):
    env = dict(os.environ)
    existing = env.get("PYTHONPATH")
    # No empty entry: it would put the current directory on sys.path and hide whether
    # greenserve itself makes it importable.
    env["PYTHONPATH"] = ROOT + (os.pathsep + existing if existing else "")
    env.update(extra)
    return env


# Where this machine keeps gevent-websocket when it is not installed (pip install --target):
# it must not be importable by default here, or Flask-SocketIO's tests would take its path.
GEVENT_WEBSOCKET_ASIDE = "/opt/gevent-websocket"


def gevent_websocket_path():
    """PYTHONPATH entries that make the real gevent-websocket importable in a subprocess: none
    where it is installed (CI: the test extras), its directory aside on a machine that keeps it
    there; the test is skipped where there is neither."""
    import importlib.util

    if importlib.util.find_spec("geventwebsocket") is not None:
        return []
    if os.path.isdir(os.path.join(GEVENT_WEBSOCKET_ASIDE, "geventwebsocket")):
        return [GEVENT_WEBSOCKET_ASIDE]
    pytest.skip("gevent-websocket is not installed (pip install gevent-websocket)")


def in_both_builds(script, cases):
    """Run ``script``'s ``main(cases)`` in this process and in a GREENSERVE_PURE_PYTHON=1 one.

    For tests that hold the compiled build to the pure one: ``script`` defines ``main``, which
    returns something JSON can carry. Returns ``(here, pure)``, both through the same JSON round
    trip (tuples become lists).
    """
    namespace = {}
    exec(script, namespace)
    here = json.loads(json.dumps(namespace["main"](cases)))
    result = subprocess.run(
        [sys.executable, "-c", script + "\nimport json, sys\nprint(json.dumps(main(json.load(sys.stdin))))\n"],
        input=json.dumps(cases),
        env=subprocess_env(GREENSERVE_PURE_PYTHON="1"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return here, json.loads(result.stdout)


class CLIServer:
    """`python -m greenserve ...` in a subprocess; stopped with SIGTERM by PID at the end."""

    def __init__(self, *args, cwd=None, port=None, env=None):
        self.port = port or free_port()
        self.args = list(args)
        if not any(a.startswith("--bind") or a == "-b" for a in self.args):
            self.args += ["--bind", "127.0.0.1:%d" % self.port]
        self.process = subprocess.Popen(
            greenserve_command(*self.args),
            cwd=cwd or ROOT,
            env=subprocess_env(**(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def wait_ready(self, timeout=20):
        wait_for_port(self.port, timeout, self.process)
        return self

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def stop(self, timeout=15):
        import signal

        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            out, err = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate()
        return self.process.returncode, out, err


@pytest.fixture
def cli_server():
    servers = []

    def start(*args, **kwargs):
        server = CLIServer(*args, **kwargs)
        servers.append(server)
        return server.wait_ready()

    yield start
    for server in servers:
        if server.process.poll() is None:
            server.stop()


def stop_process(process, signum):
    """Stop a process the test started, by its PID: ``signum``, then SIGKILL to its session
    (started with ``start_new_session=True``) if it has not ended in 20 s."""
    if process.poll() is None:
        process.send_signal(signum)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=5)


def children_of(pid):
    """The live (not zombie) child processes of ``pid``, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return found


class Load:
    """Threads calling ``fetch()`` over and over while the ``with`` block runs.

    ``served`` collects what the calls returned, ``failures`` the repr of what they raised:
    a test of a reload or a crash asserts on both once the block has ended.
    """

    def __init__(self, fetch, threads=4):
        self.fetch = fetch
        self.served = []
        self.failures = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run) for _ in range(threads)]

    def _run(self):
        while not self._stop.is_set():
            try:
                self.served.append(self.fetch())
            except Exception as exc:  # any failed request is a failure of the test
                self.failures.append(repr(exc))

    def __enter__(self):
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=15)


class KeepAliveFetch:
    """A ``fetch`` for Load that keeps one HTTP/1.1 connection per thread, as browsers, nginx and
    connection pools do, and alternates GET with a small POST (a POST is never retried by a
    client, so a request lost on a reused connection shows). Anything but a 200 is a failure,
    and so is a connection closed under a request (http.client does not retry)."""

    def __init__(self, host, port, path="/", timeout=15):
        self.host, self.port, self.path, self.timeout = host, port, path, timeout
        self.local = threading.local()

    def __call__(self):
        import http.client

        local = self.local
        if getattr(local, "connection", None) is None:
            local.connection = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            local.count = 0
        local.count += 1
        connection = local.connection
        try:
            if local.count % 2:
                connection.request("GET", self.path)
            else:
                body = b"x" * 1000
                connection.request("POST", self.path, body=body, headers={"Content-Type": "text/plain"})
            response = connection.getresponse()
            body = response.read()
        except Exception:
            connection.close()
            local.connection = None
            raise
        if response.status != 200:
            raise AssertionError("%d %s" % (response.status, body[:200]))
        return body.decode()


def documented_config(language, section=None):
    """The one ```language block of docs/deployment.md, or of its "## section": the tests run
    the configurations that page shows, so the two cannot drift."""
    with open(os.path.join(ROOT, "docs", "deployment.md")) as f:
        page = f.read()
    where = "docs/deployment.md"
    if section is not None:
        heading = "\n## %s\n" % section
        assert heading in page, "docs/deployment.md has no section %r" % section
        page = page.split(heading, 1)[1].split("\n## ", 1)[0]
        where += ", section %r," % section
    blocks = re.findall(r"```%s\n(.*?)```" % re.escape(language), page, re.S)
    assert len(blocks) == 1, "%s should hold one ```%s block" % (where, language)
    return blocks[0]


def substitute(text, old, new):
    """``text`` with ``old`` replaced by ``new``: ``old`` must appear in it exactly once."""
    assert text.count(old) == 1, "%r should appear once in the documented configuration" % old
    return text.replace(old, new)


def read_to_close(sock):
    """Everything a socket receives until the peer closes it."""
    received = b""
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return received
        received += chunk


def wait_until(condition, timeout, what):
    """Poll ``condition`` until it is true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for " + what
        time.sleep(0.05)


def most_at_once(intervals):
    """The largest number of (began, ended) intervals in progress at the same moment."""
    events = sorted([(began, 1) for began, _ in intervals] + [(ended, -1) for _, ended in intervals])
    running = most = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


def another_group():
    """(name, gid) of a group we may give a file to, other than our own; skip when there is none."""
    ours = os.getegid()
    entries = grp.getgrall() if os.geteuid() == 0 else [grp.getgrgid(gid) for gid in os.getgroups()]
    for entry in entries:
        if entry.gr_gid != ours:
            return entry.gr_name, entry.gr_gid
    pytest.skip("no group other than ours to give a socket to")


# --- Running beside other tests (``pytest -n N``, pytest-xdist: README's test command) ---
#
# Most tests wait on sockets and child processes and share two cores well. The tests below
# measure time, hold a deadline under load, or load the CPU themselves (storms of clients, a
# load that must fail nothing while workers restart): next to another test they would measure
# the other test. They run alone: every test holds the run's lock shared, these hold it
# exclusively. A node id here names a module or one test (a prefix of the id), with the reason.
ALONE = {
    "tests/overload/test_served.py": "overload control measures the loop's own delay",
    "tests/test_sticky_socketio.py": "200 Socket.IO clients on four workers, each with a deadline",
    "tests/test_ws_scaleout.py": "a broadcast through every worker of two instances, timed",
    "tests/test_bench.py": "runs the benchmarks",
    "tests/test_slow_clients.py": "2,000 slow connections beside a client with a deadline",
    "tests/test_sse.py::test_a_thousand_clients": "a thousand streaming clients",
    "tests/test_websocket.py::test_five_hundred": "500 WebSockets at once",
    "tests/websocket/test_builtin.py::test_over_tls": "a TLS close handshake within a deadline",
    "tests/process/test_recycling.py": "recycling times, jitter and memory limits under load",
    "tests/process/test_hooks.py": "stop hooks' deadlines and their order at exit",
    "tests/process/test_master.py": "restarts under load that must fail no request, signal timings",
    "tests/process/test_upgrade.py": "a binary upgrade under load that must fail no request",
    "tests/process/test_provisioning_warnings.py": "a full pool's timing decides the warning",
    "tests/test_haproxy.py::test_rolling_restart": "a rolling restart under load",
    "tests/test_nginx.py::test_three_hup": "reloads under load through nginx",
    "tests/entry/test_gunicorn.py::test_hup_under": "reloads under load",
    # 200 requests at once to one Django or Flask worker: beside three other tests' processes the
    # worker's loop lags and overload control rightly answers some 503 (seen with -n 4).
    "tests/test_frameworks.py::test_sleeping_requests_are_concurrent": "200 requests at once to one worker",
    "tests/test_frameworks.py::test_outbound_calls_with_requests": "200 requests at once to one worker",
}


# Hypothesis's deadline (200 ms an example) measures the machine, not the code: beside other
# tests one example of a split-anywhere property took 520 ms once and 0.06 ms when replayed
# (a FlakyFailure). The properties' own limits stay (max_examples); their speed is bench/'s.
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # (a test extra; the property tests skip without it)
    pass
else:
    _hypothesis_settings.register_profile("greenserve", deadline=None)
    _hypothesis_settings.load_profile("greenserve")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.nodeid.startswith(prefix) for prefix in ALONE):
            item.add_marker(pytest.mark.alone)


@pytest.fixture(autouse=True)
def _share_the_machine(request, tmp_path_factory):
    """Under pytest-xdist, a test marked ``alone`` runs while no other does (see ALONE).

    flock(2) on two files of the run's: the lock, held shared by every test and exclusively by
    an ``alone`` one; and a turnstile, which an ``alone`` test holds while it waits, so that the
    other workers' next tests queue behind it rather than keep the shared lock held for ever."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:  # one process: every test runs alone anyway
        yield
        return
    import fcntl

    alone = request.node.get_closest_marker("alone") is not None
    # The workers' temporary directories (popen-gwN) share the run's.
    base = os.path.join(str(tmp_path_factory.getbasetemp().parent), "machine")
    with open(base + ".turnstile", "a") as turnstile, open(base + ".lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        if alone:
            fcntl.flock(lock, fcntl.LOCK_EX)
        else:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)

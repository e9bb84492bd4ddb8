"""greenserve as a gunicorn worker class, with the real gunicorn in a subprocess, on loopback.

`gunicorn -k greenserve.workers.GreenserveWorker`: serving, pipelining and chunked uploads through
the worker, gunicorn's access log format, its settings (limits, max_requests, forwarded scheme,
a warning for one it cannot honour), HUP reload, TERM with requests in flight, a killed worker
replaced, and a worker whose event loop is blocked killed by gunicorn's timeout.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import KeepAliveFetch, Load, children_of, free_port, read_to_close, subprocess_env, wait_until
from tests.entry.test_cli import _https_get, certificate  # noqa: F401  (a fixture, used by name)

pytest.importorskip("gunicorn", reason="gunicorn is not installed")

APP = '''
import os
import time

VERSION = open(os.path.join(os.path.dirname(__file__), "version.txt")).read().strip()


def app(environ, start_response):
    path = environ["PATH_INFO"]
    body = None
    if path == "/sleep":
        time.sleep(float(environ["QUERY_STRING"] or "0.5"))
    elif path == "/spin":
        end = time.monotonic() + float(environ["QUERY_STRING"] or "3")
        while time.monotonic() < end:  # CPU-bound: blocks the event loop
            pass
    elif path == "/echo":
        data = environ["wsgi.input"].read()
        body = ("%d %s" % (len(data), environ.get("HTTP_TRANSFER_ENCODING", "-"))).encode()
    elif path == "/scheme":
        body = environ["wsgi.url_scheme"].encode()
    if body is None:
        body = ("%s %d %s" % (VERSION, os.getpid(), path)).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


class Gunicorn:
    def __init__(self, tmp_path, *args, version="v1", app="gapp:app"):
        (tmp_path / "version.txt").write_text(version)
        (tmp_path / "gapp.py").write_text(textwrap.dedent(APP))
        self.dir = tmp_path
        self.port = free_port()
        self.log = tmp_path / "error.log"
        self.access = tmp_path / "access.log"
        command = [
            sys.executable, "-m", "gunicorn", "-k", "greenserve.workers.GreenserveWorker",
            "--bind", "127.0.0.1:%d" % self.port, "--chdir", str(tmp_path), "--no-control-socket",
            "--error-logfile", str(self.log), "--access-logfile", str(self.access), "--graceful-timeout", "10",
            *args, app,
        ]
        self.process = subprocess.Popen(
            command, cwd=str(tmp_path), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def log_text(self):
        return self.log.read_text() if self.log.exists() else ""

    def wait_ready(self, workers=1, timeout=30):
        wait_until(lambda: self.log_text().count("greenserve 0.") >= workers or self.process.poll() is not None,
                    timeout, "the workers")
        assert self.process.poll() is None, self.log_text()
        return self

    def get(self, path="/", headers=None, timeout=10):
        request = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), headers=headers or {})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.read().decode()

    def worker_pids(self):
        return sorted(children_of(self.process.pid))

    def stop(self, timeout=30):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=5)
            raise


@pytest.fixture
def gunicorn(tmp_path):
    started = []

    def start(*args, workers=1, **kwargs):
        g = Gunicorn(tmp_path, "--workers", str(workers), *args, **kwargs)
        started.append(g)
        return g.wait_ready(workers)

    yield start
    for g in started:
        if g.process.poll() is None:
            os.killpg(g.process.pid, signal.SIGKILL)
            g.process.wait(timeout=5)


def _send_and_read_all(port, data):
    """Send ``data`` (its last request says Connection: close) and read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        return read_to_close(sock)


def test_serves_pipelines_and_takes_chunked_uploads(gunicorn):
    g = gunicorn()
    assert g.get().startswith("v1 ")
    # Three requests in one write: three answers, in order (pipelining through the worker).
    batch = b"GET /p0 HTTP/1.1\r\nHost: x\r\n\r\nGET /p1 HTTP/1.1\r\nHost: x\r\n\r\n"
    batch += b"GET /p2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    received = _send_and_read_all(g.port, batch)
    assert [m.decode() for m in re.findall(rb"v1 \d+ (/p\d)", received)] == ["/p0", "/p1", "/p2"]
    # A chunked upload of 1 MiB in 64 KiB chunks.
    chunk = b"x" * 65536
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(16)) + b"0\r\n\r\n"
    head = b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    received = _send_and_read_all(g.port, head + body)
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert received.endswith(b"\r\n\r\n1048576 chunked")
    assert "error" not in g.log_text().lower()
    assert not _patching_warnings(g.log_text())  # gunicorn imported ssl itself: no finding
    assert g.stop() == 0


def test_access_log_uses_gunicorns_format_and_atoms(gunicorn):
    fmt = '%(h)s "%(r)s" %(s)s %(b)s {%({x-trace}i)s} <%({content-type}o)s> %(p)s'
    g = gunicorn("--access-logformat", fmt)
    g.get("/hello?x=1", headers={"X-Trace": "abc123"})
    wait_until(lambda: g.access.exists() and "/hello" in g.access.read_text(), 10, "the access line")
    line = [l for l in g.access.read_text().splitlines() if "/hello" in l][0]
    pid = g.worker_pids()[0]
    assert re.fullmatch(
        r'127\.0\.0\.1 "GET /hello\?x=1 HTTP/1\.1" 200 \d+ \{abc123\} <text/plain> <%d>' % pid, line
    ), line
    assert g.stop() == 0


def test_gunicorn_settings_are_honoured_or_named(gunicorn):
    g = gunicorn("--limit-request-line", "64", "--strip-header-spaces", "--max-requests", "5")
    # limit_request_line: a request line over 64 bytes gets 414.
    with pytest.raises(urllib.error.HTTPError) as info:
        g.get("/" + "a" * 100)
    assert info.value.code == 414
    # forwarded_allow_ips (default 127.0.0.1) + secure_scheme_headers: the scheme from the proxy.
    assert g.get("/scheme", headers={"X-Forwarded-Proto": "https"}) == "https"
    assert g.get("/scheme") == "http"
    # strip_header_spaces cannot be honoured (RFC 9112 refuses that space): named at boot.
    assert "gunicorn settings not honoured: strip_header_spaces" in g.log_text()
    # max_requests: the worker restarts after 5 (plus the jitter of 0).
    first = g.worker_pids()
    for _ in range(8):
        g.get()
    wait_until(lambda: g.worker_pids() and g.worker_pids() != first, 15, "a recycled worker")
    assert "Autorestarting worker after current request." in g.log_text()
    assert g.stop() == 0


def test_untrusted_peer_cannot_set_the_scheme(gunicorn):
    g = gunicorn("--forwarded-allow-ips", "10.1.2.3")
    assert g.get("/scheme", headers={"X-Forwarded-Proto": "https"}) == "http"
    assert g.stop() == 0


def test_hup_reloads_new_code_with_zero_failed_requests(gunicorn):
    g = gunicorn(workers=2)
    old = set(g.worker_pids())
    with Load(g.get) as load:
        time.sleep(0.3)
        (g.dir / "version.txt").write_text("v2")
        g.process.send_signal(signal.SIGHUP)
        wait_until(lambda: not old & set(g.worker_pids()) and len(g.worker_pids()) == 2, 30, "new workers")
        wait_until(lambda: any(body.startswith("v2 ") for body in load.served), 15, "new code served")
    assert load.failures == [], load.failures[:5]
    assert g.stop() == 0


def test_hup_under_keep_alive_get_and_post_load_fails_no_request(gunicorn):
    # gunicorn's reload TERMs the old workers at once: the worker drains like greenserve's own,
    # answering what reaches a kept connection within the drain window.
    g = gunicorn(workers=2)
    with Load(KeepAliveFetch("127.0.0.1", g.port), threads=6) as load:
        for version in ("v2", "v3"):
            old = set(g.worker_pids())
            time.sleep(0.3)
            (g.dir / "version.txt").write_text(version)
            g.process.send_signal(signal.SIGHUP)
            wait_until(lambda: not old & set(g.worker_pids()) and len(g.worker_pids()) == 2, 30, "new workers")
        wait_until(lambda: any(body.startswith("v3 ") for body in load.served[-20:]), 15, "new code served")
    assert load.failures == [], load.failures[:5]
    assert g.stop() == 0


def test_term_finishes_in_flight_requests(gunicorn):
    g = gunicorn(workers=2)
    results = []
    threads = [threading.Thread(target=lambda: results.append(g.get("/sleep?1", timeout=20))) for _ in range(6)]
    for t in threads:
        t.start()
    time.sleep(0.4)  # all six are in the app
    g.process.send_signal(signal.SIGTERM)
    for t in threads:
        t.join(timeout=20)
    assert len(results) == 6, results
    assert g.process.wait(timeout=20) == 0


@pytest.mark.parametrize("where", ["post_fork", "import"])
def test_term_while_a_worker_boots_stops_it_at_once(tmp_path, where):
    # Before the worker serves nothing is in flight: the stop must not wait for the boot to end
    # nor for graceful_timeout (30 s here). Two windows: a post_fork hook, while the arbiter's
    # handlers are still installed in the worker (the TERM was lost), and a slow import (the
    # TERM waited for it to end, then for the loop of run()).
    booting = tmp_path / "booting"
    (tmp_path / "slowboot.py").write_text(textwrap.dedent("""
        import time

        open(%r, "w").close()
        time.sleep(30 if %r == "import" else 0)  # gevent.sleep: patched by now
        from gapp import app
    """ % (str(booting), where)))
    (tmp_path / "slowfork.conf.py").write_text(textwrap.dedent("""
        import time

        def post_fork(server, worker):
            if %r == "post_fork":
                open(%r, "w").close()
                time.sleep(3)
    """ % (where, str(booting))))
    g = Gunicorn(tmp_path, "-c", str(tmp_path / "slowfork.conf.py"), "--graceful-timeout", "30", "--workers", "1",
                 app="slowboot:app")
    try:
        wait_until(booting.exists, 20, "the worker to be booting")
        time.sleep(0.3)  # well inside the window
        g.process.send_signal(signal.SIGTERM)
        assert g.process.wait(timeout=15) == 0, g.log_text()
    finally:
        if g.process.poll() is None:
            os.killpg(g.process.pid, signal.SIGKILL)
            g.process.wait(timeout=5)
    assert "greenserve 0." not in g.log_text()  # it never started serving


WS_APP = '''
def app(environ, start_response):
    ws = environ["wsgi.websocket"]
    while (message := ws.receive()) is not None:
        ws.send(message)
    return []
'''


def test_builtin_websocket_and_gunicorns_max_message_size(gunicorn, tmp_path):
    # The worker class serves environ["wsgi.websocket"] as the command does, and takes gunicorn's
    # own websocket_max_message_size.
    websockets_sync = pytest.importorskip("websockets.sync.client", reason="websockets is not installed")
    from websockets.exceptions import ConnectionClosed

    (tmp_path / "wsapp.py").write_text(WS_APP)
    g = gunicorn("--websocket-max-message-size", "100", app="wsapp:app")
    with websockets_sync.connect("ws://127.0.0.1:%d/" % g.port) as client:
        client.send("x" * 100)
        assert client.recv(timeout=10) == "x" * 100
        client.send("x" * 101)
        with pytest.raises(ConnectionClosed):
            client.recv(timeout=10)
    assert client.close_code == 1009
    assert g.stop() == 0


def test_killed_worker_is_replaced(gunicorn):
    g = gunicorn(workers=2)
    wait_until(lambda: len(g.worker_pids()) == 2, 10, "two workers")
    victim = g.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: len(g.worker_pids()) == 2 and victim not in g.worker_pids(), 20, "a replacement")
    for _ in range(10):
        assert g.get().startswith("v1 ")
    assert g.stop() == 0


def test_blocked_event_loop_is_killed_by_gunicorns_timeout(gunicorn):
    # The heartbeat comes from a greenlet on the event loop: CPU-bound code stops it.
    g = gunicorn("--timeout", "2")
    victim = g.worker_pids()[0]
    with pytest.raises(Exception):
        g.get("/spin?30", timeout=20)
    wait_until(lambda: "WORKER TIMEOUT" in g.log_text(), 20, "gunicorn's timeout")
    wait_until(lambda: g.worker_pids() and victim not in g.worker_pids(), 20, "a replacement")
    assert g.get().startswith("v1 ")
    assert g.stop() == 0


def _patching_warnings(log):
    return [line for line in log.splitlines() if "[WARNING]" in line and "patching" in line]


def test_preload_names_what_the_app_imported_before_patching_once(tmp_path):
    pytest.importorskip("requests", reason="requests is not installed")
    (tmp_path / "preloaded.py").write_text("import requests\nfrom gapp import app\n")
    g = Gunicorn(tmp_path, "--preload", "--workers", "2", app="preloaded:app")
    try:
        g.wait_ready(workers=2)
        assert g.get().startswith("v1 ")
    finally:
        assert g.stop() == 0
    warnings = _patching_warnings(g.log_text())
    assert len(warnings) == 1, warnings  # the first worker says it; the second patches after the same imports
    assert ("greenserve worker: gevent's monkey-patching came too late: ssl, requests and urllib3 were imported"
            " before it by the application, which gunicorn's preload_app imports before the worker patches") \
        in warnings[0]
    assert "fix: put 'from gevent import monkey; monkey.patch_all()' at the top of gunicorn.conf.py" in warnings[0]


def test_the_preload_setup_the_docs_recommend_warns_of_nothing(tmp_path):
    # docs/gunicorn.md: patch_all() at the top of gunicorn.conf.py, then preload_app. The
    # application's requests then sees the cooperative modules: nothing to warn about.
    pytest.importorskip("requests", reason="requests is not installed")
    (tmp_path / "preloaded.py").write_text("import requests\nfrom gapp import app\n")
    (tmp_path / "gunicorn.conf.py").write_text(textwrap.dedent("""
        from gevent import monkey
        monkey.patch_all()

        worker_class = "greenserve.workers.GreenserveWorker"
        preload_app = True
    """))
    g = Gunicorn(tmp_path, "-c", str(tmp_path / "gunicorn.conf.py"), "--workers", "1", app="preloaded:app")
    try:
        g.wait_ready()
        assert g.get().startswith("v1 ")
    finally:
        assert g.stop() == 0
    assert "[WARNING]" not in g.log_text(), g.log_text()


def test_tls_from_gunicorns_certfile_and_keyfile(gunicorn, certificate):  # noqa: F811
    cert, key = certificate
    g = gunicorn("--certfile", cert, "--keyfile", key)
    status, body = _https_get(g.port, cert, "/tls")
    assert status == 200 and body.startswith(b"v1 ") and body.endswith(b" /tls")
    assert g.stop() == 0


def test_gunicorns_http2_settings_are_honoured(gunicorn, certificate, tmp_path):
    # gunicorn's http_protocols and http2_cleartext (prior-knowledge) through this worker; its
    # h2c by Upgrade is named as not honoured (refused by the greenserve command, see settings).
    import shutil

    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    cert, key = certificate
    tls = gunicorn("--http-protocols", "h2,h1", "--certfile", cert, "--keyfile", key)
    result = subprocess.run([curl, "-sS", "--http2", "--cacert", cert, "-w", " %{http_version}",
                             "https://127.0.0.1:%d/x" % tls.port], capture_output=True, text=True, timeout=10)
    assert result.stdout.endswith(" /x 2"), result.stdout + result.stderr
    assert tls.stop() == 0
    (tmp_path / "clear").mkdir()  # (logs of their own: wait_ready reads the error log)
    clear = Gunicorn(tmp_path / "clear", "--workers", "1", "--http-protocols", "h2,h1", "--http2-cleartext", "both")
    try:
        clear.wait_ready()
        result = subprocess.run([curl, "-sS", "--http2-prior-knowledge", "-w", " %{http_version}",
                                 "http://127.0.0.1:%d/y" % clear.port], capture_output=True, text=True, timeout=10)
        assert result.stdout.endswith(" /y 2"), result.stdout + result.stderr
        assert "http2_cleartext = both (h2c by Upgrade is not offered" in clear.log_text()
        assert clear.stop() == 0
        assert '"GET /y HTTP/2.0" 200' in clear.access.read_text()
    finally:
        if clear.process.poll() is None:
            os.killpg(clear.process.pid, signal.SIGKILL)
            clear.process.wait(timeout=5)


def _stamped_status(port, seconds):
    """The status of GET / stamped by a proxy that received it ``seconds`` ago (X-Request-Start)."""
    request = urllib.request.Request("http://127.0.0.1:%d/" % port,
                                     headers={"X-Request-Start": "t=%.3f" % (time.time() - seconds)})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers.get("Retry-After")
    except urllib.error.HTTPError as error:
        return error.code, error.headers.get("Retry-After")


@pytest.mark.parametrize("env, shed", [([], True), (["--env", "GREENSERVE_OVERLOAD_CONTROL=off"], False)],
                         ids=["on", "off"])
def test_overload_control_in_the_worker_class(gunicorn, env, shed):
    # On as with the command: a request that waited 5 s before the worker, by a trusted proxy's
    # stamp (gunicorn's forwarded_allow_ips: 127.0.0.1), is answered 503 without the
    # application; the environment turns it off (gunicorn has no setting for it).
    g = gunicorn(*env)
    assert _stamped_status(g.port, 0.01) == (200, None)
    assert _stamped_status(g.port, 5.0) == ((503, "1") if shed else (200, None))
    assert g.stop() == 0


def test_gunicorns_uwsgi_protocol_is_honoured(gunicorn):
    # gunicorn 24's --protocol uwsgi and --uwsgi-allow-from through this worker: a packet as
    # nginx's uwsgi_pass sends it is answered in HTTP/1.x, then the connection closes.
    from tests.test_uwsgi_packet import packet

    g = gunicorn("--protocol", "uwsgi", "--uwsgi-allow-from", "127.0.0.0/8")
    answer = _send_and_read_all(g.port, packet([(b"PATH_INFO", b"/scheme"), (b"HTTPS", b"on")]))
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nhttps"), answer
    assert "not honoured" not in g.log_text()
    assert g.stop() == 0

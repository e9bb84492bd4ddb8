"""A request alone on its HTTP/2 connection runs in the connection's greenlet
(Http2Protocol._run_inline) until its application blocks; from then another greenlet reads the
connection (_promote), so streams still run side by side. Each test fails if one half is gone:
the first if streams always get a greenlet of their own, the others if a blocked application
held the connection, leaked its greenlet or the pool's count, or took the connection with it."""

import socket
import time

import gevent
import pytest

from greenserve.http2.frames import PREFACE
from tests.conftest import ServerThread, wait_until
from tests.http2.helpers import settings
from tests.http2.serving import WAIT, FrameReader, H2Client, app, client_context, hpack_fields, make_certificate, raw_headers


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return make_certificate(tmp_path_factory.mktemp("h2inline"))


@pytest.fixture
def start(certificate):
    servers = []

    def start(tls, application=app, **settings):
        settings.setdefault("http_protocols", "h2,h1")
        if tls:
            settings.update(certfile=certificate[0], keyfile=certificate[1])
        else:
            settings["http2_cleartext"] = "prior-knowledge"
        server = ServerThread(application, **settings).start()
        servers.append(server)
        client = H2Client(server.address, client_context(certificate[0]) if tls else None)
        return server, client

    yield start
    for server in servers:
        server.stop()
        errors = server.errors.getvalue()
        assert "Traceback" not in errors and "internal error" not in errors, errors


def _pool_empty(server):
    # The pool counts each connection and each stream: nothing once every connection is closed.
    wait_until(lambda: server.server.pool.busy == 0, WAIT, "the pool's count back to 0")


TRANSPORTS = pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])


@TRANSPORTS
def test_a_lone_request_runs_in_its_connections_greenlet(start, tls):
    seen = []

    def recording(environ, start_response):
        seen.append(gevent.getcurrent())
        return app(environ, start_response)

    server, client = start(tls, recording)
    for _ in range(3):
        assert client.get("/").status == 200
    (connection,) = server.server.connections
    assert seen == [connection.greenlet] * 3
    client.close()
    _pool_empty(server)


def test_each_lone_request_starts_in_an_empty_context(start):
    # As in a greenlet of its own: what one request set in a contextvars.ContextVar is not
    # seen by the next lone request, run in the same (the connection's) greenlet.
    import contextvars

    var = contextvars.ContextVar("request_var", default=None)
    seen = []

    def setting(environ, start_response):
        seen.append(var.get())
        var.set(environ["PATH_INFO"])
        return app(environ, start_response)

    server, client = start(False, setting)
    for _ in range(3):
        assert client.get("/").status == 200
    assert seen == [None, None, None]
    client.close()


@TRANSPORTS
def test_a_request_sent_while_a_lone_one_blocks_is_served_beside_it(start, tls):
    server, client = start(tls)
    slow = client.request("/slow?2")
    time.sleep(0.3)  # its application sleeps in the connection's greenlet: another reads now
    began = time.monotonic()
    assert client.get("/").status == 200
    assert time.monotonic() - began < 1.0
    response = client.response(slow)
    assert response.status == 200 and response.ended
    # The reader goes on serving the connection; later requests get greenlets of their own.
    assert client.get("/").status == 200
    assert client.get("/slow?0.1").status == 200
    client.close()
    _pool_empty(server)


@TRANSPORTS
def test_a_connection_closed_under_a_blocked_lone_stream_ends_the_stream(start, tls):
    ended = []

    def waiting(environ, start_response):
        try:
            gevent.sleep(30)
        finally:
            ended.append(time.monotonic())
        start_response("200 OK", [])
        return [b""]

    server, client = start(tls, waiting)
    client.request("/")
    time.sleep(0.3)
    closed = time.monotonic()
    client.sock.shutdown(socket.SHUT_RDWR)
    client.sock.close()
    wait_until(lambda: ended, 5, "the application ended by the close")
    assert ended[0] - closed < 5
    wait_until(lambda: not server.server.connections, WAIT, "the connection closed")
    _pool_empty(server)


def test_request_timeout_ends_a_lone_stream_not_its_connection(start):
    server, client = start(False, request_timeout=0.5)
    response = client.get("/slow?3")
    assert response.status == 504 and response.ended
    assert client.get("/").status == 200
    assert "request timeout: GET /slow" in server.errors.getvalue()
    client.close()
    _pool_empty(server)
    server.errors.truncate(0)


def test_a_graceful_stop_answers_a_blocked_lone_stream(start):
    # Raw frames: python-hyper's h2 drops what follows a GOAWAY.
    import threading

    server, client = start(False)
    client.close()
    with socket.create_connection(server.address, timeout=WAIT) as sock:
        sock.sendall(PREFACE + settings() + raw_headers(1, b"/slow?1"))
        time.sleep(0.3)  # blocked: another greenlet reads; the stop's GOAWAY goes through it
        stopper = threading.Thread(target=server.stop, kwargs={"timeout": 5})
        stopper.start()
        frames = FrameReader(sock).until(lambda f: f.stream_id == 1 and "END_STREAM" in f.flags)
        stopper.join(10)
    assert dict(hpack_fields(frames))[b":status"] == b"200"
    assert any(type(f).__name__ == "GoAwayFrame" for f in frames)
    assert "graceful timeout" not in server.errors.getvalue()


# --- a stop's kills and the application's own, while the stream runs in the connection's greenlet ---
# (From the review of the change: each failed before _run_inline told a kill of the connection
# from one of its stream, and before the pool's count followed the reader both ways.)


def _stop(server, timeout):
    server.call(gevent.spawn, server.server.stop, timeout)
    server._thread.join(timeout + 8)
    assert not server._thread.is_alive()


@TRANSPORTS
def test_a_kill_that_outlives_the_first_one_keeps_the_pool_count(start, tls):
    """stop(timeout) past its graceful timeout: the first kill reaches the reader R (the
    connection's greenlet while promoted), whose end throws _StreamKilled into the stream run
    in G. An application whose clean-up blocks (a rollback, a log call) past the second kill
    stop() makes gets a plain GreenletExit in G (Connection.killed): the connection ends, and
    the pool's count ends whole (never -1)."""
    cleaned = []

    def slow_cleanup(environ, start_response):
        try:
            gevent.sleep(30)
        finally:
            began = time.monotonic()
            try:
                gevent.sleep(1.6)  # clean-up that blocks past the second kill
            finally:
                cleaned.append(time.monotonic() - began)
        start_response("200 OK", [])
        return [b""]

    server, client = start(tls, slow_cleanup)
    client.request("/")
    time.sleep(0.3)  # blocked in G: R reads the connection now
    assert server.server.pool.busy == 2, server.server.pool.busy  # the connection (R) and the stream
    _stop(server, 0.2)
    time.sleep(2)  # the clean-up's end
    busy = server.server.pool.busy
    assert busy >= 0 and (busy == 0 or not cleaned), "pool.busy after the stop: %d (clean-up %s)" % (
        busy, "cut after %.2f s" % cleaned[0] if cleaned else "still running")


@TRANSPORTS
def test_a_kill_queued_while_the_inline_stream_runs_keeps_the_pool_count(start, tls):
    """A stop's kill (Connection.kill, a hub callback) queued after _run_inline armed
    _promote and before the reader R took the connection over (stop()'s greenlet runs in the
    same turn as G's): the GreenletExit lands in G, which ends the connection; R, started
    after, must see it closed and end without reading, and the pool's count end whole. The
    application queues the kill itself here, at the one moment stop() could."""
    holder = {}

    def queue_a_kill(environ, start_response):
        (connection,) = holder["server"].server.connections  # (its greenlet runs this application)
        gevent.get_hub().loop.run_callback(connection.kill)  # as server._kill does
        gevent.sleep(5)
        start_response("200 OK", [])
        return [b""]

    server, client = start(tls, queue_a_kill)
    holder["server"] = server
    client.request("/")
    wait_until(lambda: not server.server.connections, WAIT, "the connection closed")
    time.sleep(0.5)  # R ran (and ended) meanwhile
    busy = server.server.pool.busy
    errors = server.errors.getvalue()
    assert busy == 0 and "Traceback" not in errors, "pool.busy %d; error log:\n%s" % (busy, errors)


@TRANSPORTS
def test_a_hard_stop_ends_a_blocked_lone_stream_and_keeps_the_pool_count(start, tls):
    """The ordinary hard stop (an application that lets the kill through): fine."""
    ended = []

    def waiting(environ, start_response):
        try:
            gevent.sleep(30)
        finally:
            ended.append(True)
        start_response("200 OK", [])
        return [b""]

    server, client = start(tls, waiting)
    client.request("/")
    time.sleep(0.3)
    _stop(server, 0.2)
    assert ended
    assert server.server.pool.busy == 0
    errors = server.errors.getvalue()
    assert "Traceback" not in errors and "internal error" not in errors, errors


@TRANSPORTS
def test_request_timeout_ends_a_promoted_lone_stream_beside_another(start, tls):
    """request_timeout on a lone stream whose application blocked (promoted), over TLS too,
    with a second stream served by the reader meanwhile: fine."""
    server, client = start(tls, request_timeout=0.5)
    slow = client.request("/slow?3")
    time.sleep(0.2)
    assert client.get("/").status == 200
    response = client.response(slow)
    assert response.status == 504 and response.ended
    assert client.get("/").status == 200
    client.close()
    wait_until(lambda: server.server.pool.busy == 0, WAIT, "the pool's count back to 0")
    assert "request timeout: GET /slow" in server.errors.getvalue()


@TRANSPORTS
def test_an_application_that_kills_its_own_greenlet_ends_its_stream_not_the_connection(start, tls):
    """A watchdog of the application's kills the greenlet its request runs in
    (``gevent.spawn_later(t, gevent.kill, gevent.getcurrent())``, a cancellation pattern): as
    when each stream had its own greenlet, the stream is reset and the connection's other
    streams go on, though a lone request runs in the connection's greenlet G (a plain
    GreenletExit there, not the connection's kill: Connection.killed is not set)."""
    def watched(environ, start_response):
        if environ["PATH_INFO"] == "/watched":
            gevent.spawn_later(0.5, gevent.kill, gevent.getcurrent())
            gevent.sleep(5)
        return app(environ, start_response)

    server, client = start(tls, watched)
    first = client.request("/watched")
    time.sleep(0.2)  # blocked: promoted
    beside = client.request("/slow?1")
    response = client.response(first)
    assert response.reset is not None or response.ended
    other = client.response(beside)
    assert other.status == 200 and other.ended, "the stream beside it: status %r reset %r" % (other.status, other.reset)
    assert client.get("/").status == 200
    client.close()
    time.sleep(0.5)
    assert server.server.pool.busy == 0, "pool.busy %d" % server.server.pool.busy

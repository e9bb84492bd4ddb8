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

"""WebSockets through the upgrade hand-off: Flask-Sock (simple-websocket) unchanged, via the real CLI.

A request carrying ``Upgrade`` gets the connection's socket in the environ (``greenserve.socket``
and ``gunicorn.socket``); an app that answers the handshake on it owns the connection until it
returns. Loopback only, every wait bounded.
"""

import os
import signal
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import CLIServer, Client

simple_websocket = pytest.importorskip("simple_websocket", reason="simple-websocket is not installed")
pytest.importorskip("flask_sock", reason="flask-sock is not installed")


@pytest.fixture
def echo_server(cli_server):
    """examples/websocket_echo.py through the CLI, with extra flags; stopped at the end."""
    return lambda *args: cli_server("--chdir", "examples", *args, "websocket_echo:app")


def _ws(server):
    return simple_websocket.Client.connect("ws://127.0.0.1:%d/echo" % server.port)


def test_echo_text_binary_and_a_mebibyte(echo_server):
    server = echo_server()
    ws = _ws(server)
    try:
        ws.send("hello")
        assert ws.receive(timeout=10) == "hello"
        ws.send(b"\x00\xff" * 8)
        assert ws.receive(timeout=10) == b"\x00\xff" * 8
        big = os.urandom(1024 * 1024)
        ws.send(big)
        assert ws.receive(timeout=20) == big
    finally:
        ws.close()
    # The worker is fine afterwards: plain HTTP still served.
    import urllib.request

    with urllib.request.urlopen(server.url + "/", timeout=10) as response:
        assert response.read().startswith(b"WebSocket echo")
    code, out, err = server.stop()
    assert code == 0 and "Traceback" not in err, err


def test_many_concurrent_websockets_exchange_messages(echo_server):
    server = echo_server()

    def session(n):
        ws = _ws(server)
        try:
            got = []
            for i in range(5):
                ws.send("%d-%d" % (n, i))
                got.append(ws.receive(timeout=20))
            return got
        finally:
            ws.close()

    with ThreadPoolExecutor(max_workers=100) as pool:
        results = list(pool.map(session, range(100)))
    assert results == [["%d-%d" % (n, i) for i in range(5)] for n in range(100)]


def test_upgrade_request_to_an_app_that_does_not_take_it_is_plain_http():
    # A plain WSGI app answers as usual: the Upgrade is ignored, the answer is HTTP/1.1, and
    # the connection stays in sync for the next request. (Flask would answer 400 here: werkzeug
    # refuses a WebSocket handshake to a route that is not a WebSocket route.)
    server = CLIServer("--chdir", "examples", "hello:app").wait_ready()
    client = Client(("127.0.0.1", server.port))
    try:
        response = client.get("/", headers=[("Host", "x"), ("Connection", "Upgrade"), ("Upgrade", "websocket")])
        assert response.status == 200
        again = client.get("/", headers=[("Host", "x")])
        assert again.status == 200 and again.body == response.body
    finally:
        client.close()
        code, out, err = server.stop()
    assert code == 0, err


def test_an_invalid_upgrade_request_never_reaches_the_app(echo_server):
    server = echo_server()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        # Two Host fields: a 400 from the parser, whatever the request asks for.
        sock.sendall(b"GET /echo HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                     b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        assert sock.recv(65536).startswith(b"HTTP/1.1 400 ")


def test_term_with_open_websockets_ends_within_the_grace_period(echo_server):
    server = echo_server("--graceful-timeout", "1")
    sockets = [_ws(server) for _ in range(3)]
    try:
        sockets[0].send("still here")
        assert sockets[0].receive(timeout=10) == "still here"
        server.process.send_signal(signal.SIGTERM)
        # Bounded: the open WebSockets are closed once the grace period is over.
        server.process.wait(timeout=20)
        assert server.process.returncode == 0
    finally:
        for ws in sockets:
            try:
                ws.close()
            except Exception:  # the server closed it first
                pass

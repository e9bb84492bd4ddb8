"""WebSockets through the upgrade hand-off: Flask-Sock (simple-websocket) unchanged, via the real CLI.

A request carrying ``Upgrade`` gets the connection's socket in the environ (``greenserve.socket``
and ``gunicorn.socket``); an app that answers the handshake on it owns the connection until it
returns. Loopback only, every wait bounded.
"""

import os
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import (
    ROOT,
    CLIServer,
    Client,
    children_of,
    free_port,
    subprocess_env,
    wait_for_port,
    wait_until,
)

simple_websocket = pytest.importorskip("simple_websocket", reason="simple-websocket is not installed")
pytest.importorskip("flask_sock", reason="flask-sock is not installed")


@pytest.fixture
def echo_server(cli_server):
    """examples/websocket_echo.py through the CLI, with extra flags; stopped at the end."""
    return lambda *args: cli_server("--chdir", "examples", *args, "websocket_echo:app")


def _ws(server):
    return simple_websocket.Client.connect("ws://127.0.0.1:%d/echo" % server.port)


def _close_all(sockets):
    for ws in sockets:
        try:
            ws.close()
        except Exception:  # the server closed it first
            pass


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


def test_five_hundred_concurrent_websockets_exchange_messages(echo_server):
    # 500 handshakes at once saturate the worker's CPU past overload control's interval: it would
    # answer part of the storm 503 (tests/overload). Here every session must open.
    server = echo_server("--no-overload-control")
    count = 500
    # Every session connects, then waits for all the others: 500 WebSockets are open at once
    # before any message is sent, and each then exchanges five.
    all_open = threading.Barrier(count, timeout=60)

    def session(n):
        ws = _ws(server)
        try:
            all_open.wait()
            got = []
            for i in range(5):
                ws.send("%d-%d" % (n, i))
                got.append(ws.receive(timeout=30))
            return got
        finally:
            ws.close()

    with ThreadPoolExecutor(max_workers=count) as pool:
        results = list(pool.map(session, range(count)))
    assert results == [["%d-%d" % (n, i) for i in range(5)] for n in range(count)]
    code, out, err = server.stop()
    assert code == 0 and "Traceback" not in err, err


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


def test_term_closes_open_websockets_through_the_stop_hook(echo_server):
    # The example watches environ["greenserve.stopping"] and closes each WebSocket with 1001
    # "going away": the stop does not wait for the graceful timeout (60 s, beyond the test's).
    server = echo_server("--graceful-timeout", "60")
    sockets = [_ws(server) for _ in range(3)]
    try:
        sockets[0].send("still here")
        assert sockets[0].receive(timeout=10) == "still here"
        server.process.send_signal(signal.SIGTERM)
        for ws in sockets:
            with pytest.raises(simple_websocket.ConnectionClosed):
                ws.receive(timeout=20)
            assert (ws.close_reason, ws.close_message) == (1001, "server restarting")
        out, err = server.process.communicate(timeout=20)
        assert server.process.returncode == 0, err
        assert "graceful timeout" not in err and "Traceback" not in err, err
    finally:
        _close_all(sockets)


IGNORES_THE_STOP = """
from flask import Flask
from flask_sock import Sock

app = Flask(__name__)
sock = Sock(app)


@sock.route("/echo")
def echo(ws):
    while (data := ws.receive()) is not None:
        ws.send(data)
"""


def test_term_closes_websockets_that_ignore_the_hook_after_the_grace_period(tmp_path, cli_server):
    (tmp_path / "deaf_echo.py").write_text(IGNORES_THE_STOP)
    server = cli_server("--chdir", str(tmp_path), "--graceful-timeout", "1", "deaf_echo:app")
    sockets = [_ws(server) for _ in range(3)]
    try:
        sockets[0].send("still here")
        assert sockets[0].receive(timeout=10) == "still here"
        server.process.send_signal(signal.SIGTERM)
        # Bounded: the open WebSockets are closed once the grace period is over.
        out, err = server.process.communicate(timeout=20)
        assert server.process.returncode == 0, err
        assert "graceful timeout (1.0 s): closing 3 connection(s) still busy" in err, err
        for ws in sockets:
            with pytest.raises(simple_websocket.ConnectionClosed):
                ws.receive(timeout=20)
    finally:
        _close_all(sockets)


def test_hup_reload_never_waits_forever_on_an_open_websocket(tmp_path, cli_server):
    # The app ignores the stop hook: the old worker closes its WebSocket when the graceful
    # timeout ends, and the new worker serves new WebSockets meanwhile.
    (tmp_path / "deaf_echo.py").write_text(IGNORES_THE_STOP)
    server = cli_server("--chdir", str(tmp_path), "--graceful-timeout", "1", "deaf_echo:app")
    old = _ws(server)  # served: the worker is up (the master binds the port before it forks)
    (old_worker,) = children_of(server.process.pid)
    try:
        old.send("before")
        assert old.receive(timeout=10) == "before"
        server.process.send_signal(signal.SIGHUP)
        with pytest.raises(simple_websocket.ConnectionClosed):
            old.receive(timeout=20)
        wait_until(lambda: old_worker not in children_of(server.process.pid), 20, "the old worker to exit")
        new = _ws(server)
        try:
            new.send("after")
            assert new.receive(timeout=10) == "after"
        finally:
            new.close()
    finally:
        _close_all([old])
    code, out, err = server.stop()
    assert code == 0 and "Traceback" not in err, err
    assert "graceful timeout (1.0 s): closing 1 connection(s) still busy" in err, err


def test_echo_with_two_workers(echo_server):
    server = echo_server("--workers", "2")

    def session(n):
        ws = _ws(server)
        try:
            ws.send("w%d" % n)
            return ws.receive(timeout=10)
        finally:
            ws.close()

    with ThreadPoolExecutor(max_workers=20) as pool:
        assert list(pool.map(session, range(40))) == ["w%d" % n for n in range(40)]


def test_ping_is_answered_with_pong(echo_server):
    websocket = pytest.importorskip("websocket", reason="websocket-client is not installed")
    server = echo_server()
    ws = websocket.create_connection("ws://127.0.0.1:%d/echo" % server.port, timeout=10)
    try:
        ws.ping("are you there")
        opcode, frame = ws.recv_data_frame(control_frame=True)
        assert opcode == websocket.ABNF.OPCODE_PONG
        assert frame.data == b"are you there"
        ws.send("after the ping")
        assert ws.recv() == "after the ping"
    finally:
        ws.close()


def test_the_gunicorn_worker_class_hands_the_socket_over_too(tmp_path):
    # gunicorn -k greenserve.workers.GreenserveWorker: the same hand-off, under gunicorn's own
    # gunicorn.socket key and with gunicorn's master.
    pytest.importorskip("gunicorn", reason="gunicorn is not installed")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-k", "greenserve.workers.GreenserveWorker", "--chdir", "examples",
         "-b", "127.0.0.1:%d" % port, "--graceful-timeout", "5", "websocket_echo:app"],
        cwd=ROOT, env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for_port(port, 30, process)
        ws = simple_websocket.Client.connect("ws://127.0.0.1:%d/echo" % port)
        try:
            ws.send("through gunicorn")
            assert ws.receive(timeout=10) == "through gunicorn"
            big = os.urandom(256 * 1024)
            ws.send(big)
            assert ws.receive(timeout=20) == big
        finally:
            ws.close()
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err, err


# --- the hand-off itself, in process (any protocol, not only WebSocket) ---------------------------------


def raw_echo_app(environ, start_response):
    """Takes the connection over with start_response("101 ..."): the server sends the 101 head
    before start_response returns; the app then speaks its own protocol on the socket, and what
    it yields afterwards goes out unframed."""
    sock = environ.get("greenserve.socket")
    if sock is None or environ.get("HTTP_UPGRADE") != "echo":
        body = b"plain: upgrade=%s socket=%s\n" % (
            environ.get("HTTP_UPGRADE", "-").encode(), b"yes" if sock is not None else b"no")
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    start_response("101 Switching Protocols", [("Upgrade", "echo")])
    data = b""
    while not data.endswith(b"bye\n"):
        chunk = sock.recv(1024)
        if not chunk:
            break
        data += chunk
    sock.sendall(b"echo:" + data)
    return [b"and what it yielded"]


UPGRADE_ECHO = [("Host", "x"), ("Connection", "Upgrade"), ("Upgrade", "echo")]


def test_start_response_101_takes_the_connection_over(serve):
    server = serve(raw_echo_app, validate=False)
    with Client(server.address) as client:
        client.request(target="/raw", headers=UPGRADE_ECHO)
        response = client.read_response()  # sent before the app read anything
        assert response.status == 101
        assert response.header("Upgrade") == "echo"
        assert response.header("Connection") == "Upgrade"
        assert response.header("Content-Length") is None and response.header("Transfer-Encoding") is None
        client.send(b"hi, bye\n")
        # The app's own bytes, then what it yielded, unframed; then the connection closes.
        assert client.read_until_close(timeout=10) == b"echo:hi, bye\nand what it yielded"


def test_a_101_to_a_request_without_upgrade_is_a_500_and_the_connection_stays_in_sync(serve):
    def app(environ, start_response):
        if environ["PATH_INFO"] == "/switch":
            start_response("101 Switching Protocols", [("Upgrade", "echo")])
            return []
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    server = serve(app, validate=False)
    with Client(server.address) as client:
        assert client.get("/switch", headers=[("Host", "x")]).status == 500
        assert client.get("/", headers=[("Host", "x")]).body == b"ok"
    assert "101 Switching Protocols to a request that did not ask for an upgrade" in server.errors.getvalue()


@pytest.mark.parametrize(
    "version, headers",
    [
        # RFC 9110 §7.8: "A server MUST ignore an Upgrade header field that is received in an
        # HTTP/1.0 request."
        ("HTTP/1.0", [("Host", "x"), ("Connection", "Upgrade, keep-alive"), ("Upgrade", "echo")]),
        # Upgrade without the "upgrade" connection option: perhaps passed on by a proxy that did
        # not know the field; the request is an ordinary one.
        ("HTTP/1.1", [("Host", "x"), ("Upgrade", "echo")]),
    ],
    ids=["http-1.0", "no-connection-option"],
)
def test_upgrade_is_not_offered_where_rfc_9110_says_to_ignore_it(serve, version, headers):
    server = serve(raw_echo_app, validate=False)
    with Client(server.address) as client:
        response = client.get("/raw", headers=headers, version=version)
        assert response.status == 200
        assert response.body == b"plain: upgrade=echo socket=no\n"
        # Still in sync: the same connection carries an ordinary request.
        assert client.get("/", headers=[("Host", "x"), ("Connection", "keep-alive")], version=version).status == 200


def test_every_environ_carries_the_stop_event(serve):
    seen = []

    def app(environ, start_response):
        seen.append(environ["greenserve.stopping"])
        start_response("200 OK", [("Content-Length", "0")])
        return []

    server = serve(app)
    with Client(server.address) as client:
        client.get("/", headers=[("Host", "x")])
    (event,) = seen
    assert not event.is_set()
    assert server.server.stop_event is event

"""The built-in WebSocket (environ["wsgi.websocket"]) against real clients on 127.0.0.1.

The `websockets` library's sync client (strict about the handshake and framing), websocket-client,
and a raw socket for what clients never do on purpose (bytes before the 101, broken frames,
unanswered pings). Every wait is bounded.
"""

import contextlib
import socket
import ssl
import struct
import threading
import time
import zlib

import gevent
import pytest

from tests.conftest import Client, ServerThread, wait_until
from tests.entry.test_cli import certificate  # noqa: F401  (a fixture, used by name)
from tests.websocket.helpers import client_frame
from tests.websocket.rawclient import ACCEPT, BINARY, CLOSE, PING, PONG, TEXT, RawWebSocket, close_body

websockets_sync = pytest.importorskip("websockets.sync.client", reason="websockets is not installed")
websocket_client = pytest.importorskip("websocket", reason="websocket-client is not installed")
from websockets.exceptions import ConnectionClosed  # noqa: E402

WAIT = 10


def echo(environ, start_response):
    ws = environ.get("wsgi.websocket")
    if ws is None:
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        return [b"hello"]
    while True:
        message = ws.receive()
        if message is None:
            return []
        if message == "raise":
            raise RuntimeError("the application failed")
        if message == "return":
            return []
        ws.send(message)


@pytest.fixture
def server():
    servers = []

    def start(app=echo, **settings):
        thread = ServerThread(app, **settings).start()
        servers.append(thread)
        return thread

    yield start
    for thread in servers:
        thread.stop()


def ws_url(server, path="/"):
    return "ws://127.0.0.1:%d%s" % (server.port, path)


# --- real clients ---


def test_websockets_client_echoes_text_binary_large_and_fragmented(server):
    thread = server()
    with websockets_sync.connect(ws_url(thread), max_size=None) as client:
        client.send("héllo")
        assert client.recv(timeout=WAIT) == "héllo"
        client.send(b"\x00\xff" * 10)
        assert client.recv(timeout=WAIT) == b"\x00\xff" * 10
        big = bytes(range(256)) * 4096  # 1 MiB
        client.send(big)
        assert client.recv(timeout=WAIT) == big
        client.send(["frag", "mented ", "text"])  # one message in three frames
        assert client.recv(timeout=WAIT) == "fragmented text"
        client.ping(b"are you there").wait(WAIT)
    assert client.close_code == 1000
    log = thread.access.getvalue()
    assert '"GET / HTTP/1.1" 101 ' in log, log
    assert thread.errors.getvalue() == ""


def test_websocket_client_library_echoes(server):
    thread = server()
    client = websocket_client.create_connection(ws_url(thread), timeout=WAIT)
    try:
        client.send("text message")
        assert client.recv() == "text message"
        client.send_binary(b"\x01\x02\x03")
        opcode, data = client.recv_data()
        assert (opcode, data) == (websocket_client.ABNF.OPCODE_BINARY, b"\x01\x02\x03")
    finally:
        client.close()
    assert client.getstatus() == 101


class _SteadyTimeoutSSLSocket(ssl.SSLSocket):
    """The client's TLS socket, its timeout WAIT whatever the client sets.

    websockets' sync client before 17 (what pip installs on Python 3.10) reads in one thread
    with no timeout while the thread that sends the Close sets close_timeout on the socket. An
    SSL read begun blocking that then finds the descriptor non-blocking gets "The read
    operation timed out" at once (CPython's _ssl.c, PySSL_select: a blocking read on a socket
    in timeout mode counts as timed out), so the server's Close, already sent, is never read:
    close code 1006, in 5 of 30 runs on 3.10 (the read failed 0.2 ms after it began). One
    timeout from the start leaves no switch to race with."""

    def settimeout(self, timeout):
        super().settimeout(WAIT)


def test_over_tls(server, certificate):  # noqa: F811
    cert, key = certificate
    thread = server(certfile=cert, keyfile=key)
    context = ssl.create_default_context(cafile=cert)
    context.sslsocket_class = _SteadyTimeoutSSLSocket
    with websockets_sync.connect("wss://127.0.0.1:%d/" % thread.port, ssl=context) as client:
        client.send("over TLS")
        assert client.recv(timeout=WAIT) == "over TLS"
        big = b"\x01" * 500_000
        client.send(big)
        assert client.recv(timeout=WAIT) == big
    assert client.close_code == 1000
    assert thread.errors.getvalue() == ""


# --- the read path: the socket read directly, or through gevent's recv_into ---


def _count_calls(monkeypatch, cls, names):
    """Count the calls of ``cls``'s methods ``names`` (which still run) as (name, socket) pairs."""
    calls = []
    for name in names:
        original = getattr(cls, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            calls.append((_name, self))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, counted)
    return calls


def _echo_noting_the_socket(seen):
    """``echo``, keeping the connection's socket in ``seen``; ``?timeout``: the application
    gives the socket a timeout first (gevent's recv_into keeps it)."""

    def app(environ, start_response):
        sock = seen["socket"] = environ["greenserve.socket"]
        if environ.get("QUERY_STRING") == "timeout":
            sock.settimeout(30)
        return echo(environ, start_response)

    return app


def _echo_twenty(url, calls, **options):
    """One echo (the handshake and the HTTP side are then behind), the calls forgotten, 20 more."""
    with websockets_sync.connect(url, **options) as client:
        client.send("first")
        assert client.recv(timeout=WAIT) == "first"
        del calls[:]
        for i in range(20):
            client.send("message %d" % i)
            assert client.recv(timeout=WAIT) == "message %d" % i
        counted = list(calls)
    assert client.close_code == 1000
    return counted


def test_receive_reads_a_plain_socket_directly(server, monkeypatch):
    # Issue 31: on a plain connection the WebSocket reads the non-blocking socket under gevent's
    # and parks on its read watcher (Connection.receive_for_application, the connection's own
    # read), and sends through the connection's own direct send. From 9ba1ba4 on, every read went
    # through gevent's recv_into instead (the WebSocket's type test against gevent's socket class
    # no longer matched an AcceptedSocket) and every other test passed. gevent's socket methods
    # are counted here: none may run.
    from greenserve.connection import AcceptedSocket

    calls = _count_calls(monkeypatch, AcceptedSocket, ("recv", "recv_into", "send", "sendall"))
    seen = {}
    thread = server(_echo_noting_the_socket(seen))
    counted = _echo_twenty(ws_url(thread), calls)
    assert type(seen["socket"]) is AcceptedSocket  # (the accepted socket, or this test means nothing)
    assert [name for name, sock in counted if sock is seen["socket"]] == []
    assert thread.errors.getvalue() == ""


@pytest.mark.parametrize("case", ["tls", "timeout"])
def test_receive_reads_tls_and_a_socket_with_a_timeout_through_gevents_recv_into(server, monkeypatch, request, case):
    # TLS records are decrypted in gevent's SSLSocket.recv_into, and a timeout the application
    # set on the socket is kept by gevent's recv_into: neither may be read directly.
    from gevent.ssl import SSLSocket

    from greenserve.connection import AcceptedSocket

    seen = {}
    if case == "tls":
        cert, key = request.getfixturevalue("certificate")
        thread = server(_echo_noting_the_socket(seen), certfile=cert, keyfile=key)
        calls = _count_calls(monkeypatch, SSLSocket, ("recv_into",))
        counted = _echo_twenty("wss://127.0.0.1:%d/" % thread.port, calls, ssl=ssl.create_default_context(cafile=cert))
        assert type(seen["socket"]) is SSLSocket
    else:
        thread = server(_echo_noting_the_socket(seen))
        calls = _count_calls(monkeypatch, AcceptedSocket, ("recv_into",))
        counted = _echo_twenty(ws_url(thread, "/?timeout"), calls)
        assert type(seen["socket"]) is AcceptedSocket
    # One recv_into per message; the first one's may have begun before the count was cleared.
    assert len([name for name, sock in counted if sock is seen["socket"]]) >= 19
    assert thread.errors.getvalue() == ""


def test_environ_keys_and_request_properties(server):
    seen = {}

    def app(environ, start_response):
        ws = environ["wsgi.websocket"]
        seen.update(
            version=environ["wsgi.websocket_version"], path=ws.path, origin=ws.origin,
            protocol=ws.protocol, ws_version=ws.version,
            # The hand-off keys stay (simple-websocket and Flask-Sock use them).
            handoff="greenserve.socket" in environ and "gunicorn.socket" in environ,
        )
        ws.send("ready")
        ws.receive()
        return []

    thread = server(app)
    with websockets_sync.connect(
        ws_url(thread, "/room/1"), origin="http://example.test", subprotocols=["chat", "other"]
    ) as client:
        assert client.recv(timeout=WAIT) == "ready"
        assert client.subprotocol is None  # the app names none (no app_protocol)
    assert seen == {
        "version": "13", "path": "/room/1", "origin": "http://example.test",
        "protocol": "chat, other", "ws_version": "13", "handoff": True,
    }


def test_subprotocol_chosen_by_app_protocol(server):
    class App:
        def __call__(self, environ, start_response):
            return echo(environ, start_response)

        def app_protocol(self, path):
            return "chat"

    thread = server(App())
    with websockets_sync.connect(ws_url(thread), subprotocols=["other", "chat"]) as client:
        assert client.subprotocol == "chat"
        client.send("x")
        assert client.recv(timeout=WAIT) == "x"


def test_app_returning_closes_with_1000_and_raising_with_1011(server):
    thread = server()
    with websockets_sync.connect(ws_url(thread)) as client:
        client.send("return")
        with pytest.raises(ConnectionClosed):
            client.recv(timeout=WAIT)
    assert client.close_code == 1000
    with websockets_sync.connect(ws_url(thread)) as client:
        client.send("raise")
        with pytest.raises(ConnectionClosed):
            client.recv(timeout=WAIT)
    assert client.close_code == 1011
    errors = thread.errors.getvalue()
    assert "Error handling WebSocket /" in errors and "RuntimeError: the application failed" in errors


def test_client_close_code_is_echoed_and_receive_returns_none(server):
    ended = []

    def app(environ, start_response):
        ws = environ["wsgi.websocket"]
        ended.append(ws.receive())
        ended.append(ws.closed)
        return []

    thread = server(app)
    with RawWebSocket(thread.address) as raw:
        assert raw.status == 101 and raw.header("Sec-WebSocket-Accept") == ACCEPT
        raw.send_frame(CLOSE, close_body(4001, b"bye"))
        assert raw.read_close() == (4001, b"")
        assert raw.at_eof()
    wait_until(lambda: len(ended) == 2, WAIT, "the application to return")
    assert ended == [None, True]


# --- bytes on the wire ---


def test_frames_sent_right_behind_the_head_are_not_lost(server):
    # RFC 6455 §4.1 asks a client to wait for the 101; a fast one that does not must lose nothing
    # (they arrive in the same read as the head, in the HTTP parser's buffer).
    thread = server()
    early = client_frame(TEXT, b"first") + client_frame(BINARY, b"second")
    with RawWebSocket(thread.address, early=early) as raw:
        assert raw.status == 101
        assert raw.read_message() == (TEXT, b"first")
        assert raw.read_message() == (BINARY, b"second")


def test_sends_from_several_greenlets_never_interleave(server):
    # Flask-SocketIO emits from other greenlets while the handler waits in receive(): frames
    # must go out whole, one after the other, even when the socket's buffer fills mid-frame.
    size = 300_000

    def app(environ, start_response):
        ws = environ["wsgi.websocket"]

        def sender(byte):
            for _ in range(8):
                ws.send(bytes([byte]) * size)

        greenlets = [gevent.spawn(sender, byte) for byte in (0x41, 0x42, 0x43)]
        ws.receive()  # until the client closes
        gevent.joinall(greenlets, timeout=WAIT)
        return []

    thread = server(app)
    with RawWebSocket(thread.address) as raw:
        counts = {}
        for _ in range(24):
            time.sleep(0.001)
            opcode, payload = raw.read_message()
            assert opcode == BINARY and len(payload) == size
            assert payload == payload[:1] * size, "frames of two messages interleaved"
            counts[payload[:1]] = counts.get(payload[:1], 0) + 1
        assert counts == {b"A": 8, b"B": 8, b"C": 8}
        raw.send_frame(CLOSE, close_body(1000))
        assert raw.read_close()[0] == 1000


def test_ping_is_answered_with_its_payload(server):
    thread = server()
    with RawWebSocket(thread.address) as raw:
        raw.send_frame(PING, b"payload-123")
        assert raw.read_frame() == (True, PONG, b"payload-123")
        raw.send_frame(TEXT, b"after")
        assert raw.read_message() == (TEXT, b"after")


@pytest.mark.parametrize(
    "frame, code",
    [
        (client_frame(TEXT, b"unmasked", masked=False), 1002),
        (client_frame(TEXT, b"x", rsv=4), 1002),  # RSV1 without permessage-deflate
        (client_frame(0x3, b"x"), 1002),  # a reserved opcode
        (client_frame(TEXT, b"\xff\xfe"), 1007),  # not UTF-8
        (client_frame(CLOSE, close_body(1005)), 1002),  # a code that must never be sent
        (client_frame(CLOSE, b"\x03"), 1002),  # a one-byte close body
        (client_frame(PING, b"x" * 126), 1002),  # control frames carry at most 125 bytes
    ],
)
def test_protocol_errors_close_with_their_code(server, frame, code):
    received = []

    def app(environ, start_response):
        received.append(environ["wsgi.websocket"].receive())
        return []

    thread = server(app)
    with RawWebSocket(thread.address) as raw:
        raw.send(frame)
        assert raw.read_close()[0] == code
        assert raw.at_eof()
    wait_until(lambda: received, WAIT, "receive() to return")
    assert received == [None]


def test_message_over_the_limit_is_closed_with_1009_before_it_arrives(server):
    thread = server(websocket_max_message_size=1000)
    with RawWebSocket(thread.address) as raw:
        raw.send_frame(BINARY, b"x" * 1000)
        assert raw.read_message() == (BINARY, b"x" * 1000)
        # Only the header of a 10 MB frame: refused on what it announces.
        raw.send(client_frame(BINARY, b"", length_form=struct.pack("!Q", 10_000_000)))
        assert raw.read_close()[0] == 1009
        assert raw.at_eof()


def test_keepalive_pings_and_an_unanswering_peer_is_closed_with_1011(server):
    thread = server(websocket_ping_interval=0.2)
    with RawWebSocket(thread.address) as raw:
        assert raw.read_frame() == (True, PING, b"")
        raw.send_frame(PONG, b"")
        assert raw.read_frame() == (True, PING, b"")
        # No answer now: after a whole interval of silence, 1011 and the connection closes.
        assert raw.read_close()[0] == 1011
        assert raw.at_eof()


def test_no_keepalive_pings_by_default(server):
    thread = server()
    with RawWebSocket(thread.address) as raw:
        raw.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):
            raw.read_frame()


def test_close_waits_for_the_peers_close_but_not_forever(server):
    returned = []

    def app(environ, start_response):
        ws = environ["wsgi.websocket"]
        ws.close(4000, "done")
        returned.append(ws.closed)
        return []

    thread = server(app)
    with RawWebSocket(thread.address) as raw:
        assert raw.read_close() == (4000, b"done")
        # This client never answers: close() gives up after a bounded wait, then the server
        # closes the connection.
        wait_until(lambda: returned, WAIT, "close() to return")
        assert raw.at_eof()
    assert returned == [True]


def test_read_message_raises_gevent_websockets_errors(server):
    from greenserve.websocket import FrameTooLargeException, ProtocolError

    raised = []

    def app(environ, start_response):
        try:
            environ["wsgi.websocket"].read_message()
        except ProtocolError as exc:
            raised.append(exc)
        return []

    thread = server(app, websocket_max_message_size=10)
    for frame, code, kind in [
        (client_frame(TEXT, b"x" * 11), 1009, FrameTooLargeException),
        (client_frame(0x3, b""), 1002, ProtocolError),
    ]:
        with RawWebSocket(thread.address) as raw:
            raw.send(frame)
            assert raw.read_close()[0] == code
        wait_until(lambda: raised, WAIT, "read_message() to raise")
        assert type(raised.pop()) is kind


# --- permessage-deflate ---


def test_permessage_deflate_with_the_websockets_client_when_on(server):
    # The websockets client offers permessage-deflate, as browsers do.
    big = "compressible " * 1000
    for on in (True, False):
        thread = server(websocket_per_message_deflate=on)
        with websockets_sync.connect(ws_url(thread)) as client:
            assert [type(extension).__name__ for extension in client.protocol.extensions] == (
                ["PerMessageDeflate"] if on else []
            )
            for message in (big, "short", big.encode()):
                client.send(message)
                assert client.recv(timeout=WAIT) == message


def test_permessage_deflate_on_the_wire(server):
    thread = server(websocket_per_message_deflate=True)
    offer = ("Sec-WebSocket-Extensions", "permessage-deflate; client_max_window_bits")
    with RawWebSocket(thread.address, extra=[offer]) as raw:
        assert raw.header("Sec-WebSocket-Extensions").startswith("permessage-deflate")
        text = b"a message that compresses well " * 20
        compressor = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION, zlib.DEFLATED, -15)
        # RFC 7692 §7.2.1: compress, sync-flush, drop the 0x00 0x00 0xff 0xff tail; RSV1 set.
        payload = (compressor.compress(text) + compressor.flush(zlib.Z_SYNC_FLUSH))[:-4]
        raw.send_frame(TEXT, payload, rsv=4)
        fin, opcode, echoed = raw.read_frame()
        assert (fin, opcode, raw.rsv1) == (True, TEXT, True) and len(echoed) < len(text)
        assert zlib.decompressobj(-15).decompress(echoed + b"\x00\x00\xff\xff") == text
        # Short messages go out as they are (RSV1 clear).
        raw.send_frame(TEXT, b"short")
        assert raw.read_frame() == (True, TEXT, b"short") and not raw.rsv1


# --- the lazy handshake ---


def test_a_bad_version_is_426_naming_13_and_the_app_gets_a_websocket_error(server):
    raised = []

    def app(environ, start_response):
        from greenserve.websocket import WebSocketError

        try:
            environ["wsgi.websocket"].receive()
        except WebSocketError as exc:
            raised.append(exc)
        return []

    thread = server(app)
    with RawWebSocket(thread.address, version="8") as raw:
        assert raw.status == 426
        assert raw.header("Sec-WebSocket-Version") == "13"
        assert raw.at_eof()
    with RawWebSocket(thread.address, key="short") as raw:
        assert raw.status == 400 and "Sec-WebSocket-Key" in raw.buffer.decode()
        assert raw.at_eof()
    wait_until(lambda: len(raised) == 2, WAIT, "the application to return")
    assert [exc.status for exc in raised] == [426, 400]
    log = thread.access.getvalue()
    assert '" 426 ' in log and '" 400 ' in log, log
    assert thread.errors.getvalue() == ""


def test_an_app_that_does_not_use_the_websocket_answers_http_and_keeps_the_connection(server):
    # The 101 goes out only on first use: a router's 404 to the upgrade request is plain HTTP.
    def app(environ, start_response):
        assert "wsgi.websocket" in environ or environ.get("HTTP_UPGRADE") is None
        start_response("404 Not Found", [("Content-Length", "0")])
        return []

    thread = server(app)
    with Client(thread.address) as client:
        client.send(b"GET /nowhere HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
        assert client.read_response().status == 404
        assert client.get("/next").status == 404  # the same connection carries the next request


def test_what_the_app_says_after_the_websocket_is_dropped(server):
    # Flask-Sockets and others call start_response and return a body after the WebSocket ends;
    # gevent-websocket's handler drops both, and so does greenserve: nothing after the Close.
    def app(environ, start_response):
        ws = environ["wsgi.websocket"]
        ws.send("only")
        ws.close()
        start_response("200 OK", [("Content-Length", "4")])
        return [b"body"]

    thread = server(app)
    with RawWebSocket(thread.address) as raw:
        assert raw.read_message() == (TEXT, b"only")
        assert raw.read_close() == (1000, b"")
        raw.send_frame(CLOSE, close_body(1000))
        assert raw.at_eof()
        assert raw.buffer == b""
    assert thread.errors.getvalue() == ""


def test_graceful_stop_closes_open_websockets_with_1001(server):
    thread = server(graceful_timeout=10)
    with websockets_sync.connect(ws_url(thread)) as client:
        client.send("x")
        assert client.recv(timeout=WAIT) == "x"
        started = time.monotonic()
        stopper = threading.Thread(target=thread.stop, args=(10,))
        stopper.start()
        with pytest.raises(ConnectionClosed):
            client.recv(timeout=WAIT)
    assert client.close_code == 1001 and client.close_reason == "going away"
    stopper.join(WAIT)
    assert not stopper.is_alive()
    assert time.monotonic() - started < 8  # not the graceful timeout


WS_APP = """
def app(environ, start_response):
    ws = environ["wsgi.websocket"]
    while (message := ws.receive()) is not None:
        ws.send(message)
    return []
"""


def test_term_through_the_command_closes_websockets_with_1001(cli_server, tmp_path):
    # The process model's graceful stop (TERM to the master, then to its workers) reaches each
    # open WebSocket at once: no wait for --graceful-timeout.
    (tmp_path / "wsapp.py").write_text(WS_APP)
    command = cli_server("--chdir", str(tmp_path), "--workers", "2", "--graceful-timeout", "20", "wsapp:app")
    with contextlib.ExitStack() as stack:
        clients = [stack.enter_context(websockets_sync.connect("ws://127.0.0.1:%d/" % command.port)) for _ in range(4)]
        for client in clients:
            client.send("hi")
            assert client.recv(timeout=WAIT) == "hi"
        started = time.monotonic()
        code, out, err = command.stop(timeout=30)
        assert code == 0, err
        assert time.monotonic() - started < 10, err
        assert "graceful timeout" not in err, err
        for client in clients:
            with pytest.raises(ConnectionClosed):
                client.recv(timeout=WAIT)
            assert client.close_code == 1001


def test_the_access_log_line_of_a_websocket_session(server):
    # Once the 101 is out the connection lets go of what only HTTP needed (the head's fields,
    # the 101's headers): the session's line still has the request, its fields (from the
    # environ), the status and the bytes of the session's frames; a response field is "-".
    fmt = '"%(r)s" %(s)s %(b)s "%(a)s" "%({user-agent}i)s" %({sec-websocket-accept}o)s'
    thread = server(access_log_format=fmt)
    with RawWebSocket(thread.address, path="/chat", extra=[("User-Agent", "probe/1")]) as raw:
        assert raw.status == 101 and raw.header("Sec-WebSocket-Accept") == ACCEPT
        raw.send_frame(TEXT, b"hello")
        assert raw.read_message() == (TEXT, b"hello")
        raw.send_frame(CLOSE, close_body(1000))
        assert raw.read_close() == (1000, b"")
        assert raw.at_eof()
    wait_until(lambda: "101" in thread.access.getvalue(), WAIT, "the access log line")
    # The frames sent: the echo (2 + 5 bytes) and the Close (2 + 2).
    assert thread.access.getvalue() == '"GET /chat HTTP/1.1" 101 11 "probe/1" "probe/1" -\n'
    assert thread.errors.getvalue() == ""

"""103 Early Hints (RFC 8297): ``environ["wsgi.early_hints"](headers)``, gunicorn's API, over real
sockets and through curl; and what the responder hands its ``ConnectionIO`` (the seam an HTTP/2
stream implements too)."""

import gc
import shutil
import socket
import subprocess
import threading
import time

import gevent
import pytest

from greenserve import WSGIServer
from greenserve.http.framing import ResponseError, build_head
from greenserve.http.parser import RequestParser
from greenserve.wsgi import ConnectionIO, Responder, connection_environ
from tests.conftest import Client, ServerThread, hello_app, wait_until

LINK = ("Link", "</style.css>; rel=preload; as=style")
HINTS_103 = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload; as=style\r\n\r\n"


def ok(start_response, body=b"ok"):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def hints_app(environ, start_response):
    """One 103 with LINK, then the answer."""
    environ["wsgi.early_hints"]([LINK])
    return ok(start_response)


def read_head(client):
    """The raw bytes of the next head, its blank line included."""
    return client._read_until(b"\r\n\r\n") + b"\r\n\r\n"


# --- on the wire ------------------------------------------------------------------------------------


def test_the_103_is_sent_at_once_while_the_application_works(serve, client_for):
    go_on = threading.Event()

    def app(environ, start_response):
        environ["wsgi.early_hints"]([LINK])
        while not go_on.is_set():  # the client must see the hints before the answer exists
            gevent.sleep(0.01)
        return ok(start_response)

    client = client_for(serve(app))
    client.request("GET", "/")
    try:
        assert read_head(client) == HINTS_103
    finally:
        go_on.set()
    response = client.read_response()
    assert response.status == 200 and response.body == b"ok"
    client.request("GET", "/")  # the connection is kept
    assert read_head(client) == HINTS_103
    assert client.read_response().status == 200


def test_each_call_is_its_own_103_in_order(serve, client_for):
    def app(environ, start_response):
        environ["wsgi.early_hints"]([LINK])
        environ["wsgi.early_hints"]([("Link", "</app.js>; rel=preload; as=script"), ("Link", "</font.woff2>; rel=preload")])
        environ["wsgi.early_hints"]([])
        return ok(start_response)

    client = client_for(serve(app))
    client.request("GET", "/")
    assert read_head(client) == HINTS_103
    assert read_head(client) == (
        b"HTTP/1.1 103 Early Hints\r\n"
        b"Link: </app.js>; rel=preload; as=script\r\n"
        b"Link: </font.woff2>; rel=preload\r\n\r\n"
    )
    assert read_head(client) == b"HTTP/1.1 103 Early Hints\r\n\r\n"
    assert client.read_response().status == 200


def test_values_are_trimmed_and_the_servers_fields_left_out(serve, client_for):
    def app(environ, start_response):
        environ["wsgi.early_hints"]([("Link", "  </a.css>\t"), ("Content-Length", "2"), ("Connection", "close")])
        return ok(start_response)

    client = client_for(serve(app))
    client.request("GET", "/")
    assert read_head(client) == b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
    response = client.read_response()
    assert response.status == 200 and response.header("Connection") is None
    client.request("GET", "/")  # the hint's "Connection: close" decided nothing
    assert read_head(client) == b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"


def test_an_http_1_0_request_gets_no_103_and_the_call_does_nothing(serve, client_for):
    results = []

    def app(environ, start_response):
        results.append(environ["wsgi.early_hints"]([LINK]))
        return ok(start_response)

    client = client_for(serve(app))
    client.send(b"GET / HTTP/1.0\r\n\r\n")
    data = client.read_until_close()
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\nok"), data
    assert b"103" not in data and b"Link" not in data
    assert results == [None]


def test_hints_after_start_response_still_go_before_the_head(serve, client_for):
    # PEP 3333: the head goes out with the first non-empty chunk; until then a 103 may precede it.
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        environ["wsgi.early_hints"]([LINK])
        return [b"ok"]

    client = client_for(serve(app))
    client.request("GET", "/")
    assert read_head(client) == HINTS_103
    assert client.read_response().body == b"ok"


def test_after_the_head_a_call_does_nothing_but_its_fields_are_still_checked(serve, client_for):
    results = []

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        yield b"first "
        results.append(environ["wsgi.early_hints"]([LINK]))
        try:
            environ["wsgi.early_hints"]([("X-Evil", "a\r\nb: c")])
        except ResponseError as exc:
            results.append(str(exc))
        yield b"second"

    client = client_for(serve(app))
    client.request("GET", "/")
    response = client.read_response()
    assert response.status == 200 and response.body == b"first second"
    assert results == [None, "control character (CR, LF, NUL, ...) in header 'X-Evil'"]
    response = client.get("/")  # nothing stray on the connection after the first response
    assert response.status == 200 and response.body == b"first second"


@pytest.mark.parametrize(
    "headers",
    [
        [("X-Evil", "a\r\nSet-Cookie: evil=1")],
        [("Bad Name", "v")],
        [("Link", b"</a.css>")],
        [("Transfer-Encoding", "chunked")],
        [("Upgrade", "h2c")],
        ["Link: </a.css>"],
    ],
)
def test_a_bad_hint_is_refused_as_start_response_refuses_it(serve, client_for, headers):
    # The same error (ResponseError, the same message): unhandled, the same 500 and log line.
    def hinting(environ, start_response):
        environ["wsgi.early_hints"](headers)
        return ok(start_response)

    def final(environ, start_response):
        start_response("200 OK", headers)
        return [b"ok"]

    lines = []
    for app in (hinting, final):
        server = serve(app, validate=False)
        client = client_for(server)
        client.request("GET", "/")
        response = client.read_response()
        assert response.status == 500, response  # no 103 before it
        assert client.get("/").status == 500  # the connection is usable
        wait_until(lambda: "invalid response" in server.errors.getvalue(), 5, "the error-log line")
        lines.append(server.errors.getvalue().splitlines()[0].split("invalid response from the application: ")[1])
    assert lines[0] == lines[1]


@pytest.mark.parametrize("headers", [(LINK,), {"Link": "</a.css>"}, None])
def test_hints_not_in_a_list_are_refused_as_start_response_refuses_them(serve, client_for, headers):
    refusals = []

    def app(environ, start_response):
        for call in (environ["wsgi.early_hints"], lambda h: start_response("200 OK", h)):
            try:
                call(headers)
            except TypeError as exc:
                refusals.append(str(exc))
        return ok(start_response)

    client = client_for(serve(app, validate=False))
    assert client.get("/").status == 200  # no 103 before it
    assert len(refusals) == 2 and refusals[0] == refusals[1], refusals


def test_a_103_may_precede_the_100_continue(serve, client_for):
    # RFC 9110 §15.2: any number of interim responses before the final one; the client waiting
    # for its 100 (RFC 9110 §10.1.1) sees the 103 first, then the 100 at the application's read.
    def app(environ, start_response):
        environ["wsgi.early_hints"]([LINK])
        body = environ["wsgi.input"].read()
        environ["wsgi.early_hints"]([("Link", "</after.css>; rel=preload")])
        return ok(start_response, body)

    client = client_for(serve(app))
    client.request("POST", "/", headers=[("Expect", "100-continue"), ("Content-Length", "5")])
    assert read_head(client) == HINTS_103
    assert read_head(client) == b"HTTP/1.1 100 Continue\r\n\r\n"
    client.send(b"hello")
    assert read_head(client) == b"HTTP/1.1 103 Early Hints\r\nLink: </after.css>; rel=preload\r\n\r\n"
    response = client.read_response()
    assert response.status == 200 and response.body == b"hello"
    assert response.header("Connection") is None  # the body was read: the connection is kept


def test_a_pipelined_response_queued_before_the_hints_goes_out_first(serve, client_for):
    def app(environ, start_response):
        if environ["PATH_INFO"] == "/hints":
            return hints_app(environ, start_response)
        return hello_app(environ, start_response)

    client = client_for(serve(app))
    client.send(b"GET /first HTTP/1.1\r\nHost: t\r\n\r\nGET /hints HTTP/1.1\r\nHost: t\r\n\r\n")
    assert client.read_response().body == b"Hello, World!"
    assert read_head(client) == HINTS_103
    assert client.read_response().body == b"ok"


def test_the_access_log_shows_the_final_status(serve, client_for):
    server = serve(hints_app)
    client = client_for(server)
    client.request("GET", "/page")
    assert read_head(client) == HINTS_103
    assert client.read_response().status == 200
    wait_until(lambda: server.access.getvalue(), 5, "the access-log line")
    lines = server.access.getvalue().splitlines()
    assert len(lines) == 1 and '"GET /page HTTP/1.1" 200 2 ' in lines[0], lines


def test_a_call_after_its_request_ended_does_nothing(serve, client_for):
    kept = []

    def app(environ, start_response):
        kept.append(environ["wsgi.early_hints"])
        return ok(start_response)

    server = serve(app)
    client = client_for(server)
    assert client.get("/").status == 200
    server.call(kept[0], [LINK])  # in the server's hub, between requests
    client.sock.settimeout(0.3)
    with pytest.raises(socket.timeout):
        client.sock.recv(100)
    client.sock.settimeout(10)
    assert client.get("/").status == 200


def test_the_key_is_the_servers_whatever_the_configured_environ_says(serve, client_for):
    # Like every per-request key: WSGIServer(environ=...) cannot replace it.
    client = client_for(serve(hints_app, environ={"wsgi.early_hints": None}))
    client.request("GET", "/")
    assert read_head(client) == HINTS_103
    assert client.read_response().status == 200


def test_a_closed_connection_leaves_no_reference_cycle(serve):
    # The responder's callable sits in its connection's environ keys: Responder.close() takes it
    # out, so a connection is freed by reference counting, not left to the GC.
    server = serve(hints_app)

    def connect():
        with Client(server.address) as client:
            client.request("GET", "/")
            assert read_head(client) == HINTS_103
            assert client.read_response().status == 200

    connect()
    wait_until(lambda: not server.server.connections, 5, "the first connection to close")
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            connect()
        wait_until(lambda: not server.server.connections, 5, "the connections to close")
        time.sleep(0.1)
        assert gc.collect() == 0
    finally:
        gc.enable()


def test_a_websocket_connection_closes_without_an_error(serve, capfd):
    # The built-in WebSocket lets go of the connection's keys (the callable among them) when it
    # opens; the responder's close() then has none to take it out of. (A WebSocket connection
    # is left to the GC as it was before wsgi.early_hints: its objects hold one another.)
    client = pytest.importorskip("websockets.sync.client", reason="websockets is not installed")

    def app(environ, start_response):
        ws = environ["wsgi.websocket"]
        ws.send(ws.receive())
        return []

    server = serve(app, validate=False)
    for _ in range(2):
        with client.connect("ws://127.0.0.1:%d/" % server.port) as ws:
            ws.send("hi")
            assert ws.recv(timeout=10) == "hi"
        wait_until(lambda: not server.server.connections, 5, "the connection to close")
    time.sleep(0.1)
    assert "Traceback" not in capfd.readouterr().err
    assert "Traceback" not in server.errors.getvalue()


# --- a real client ----------------------------------------------------------------------------------

CURL = shutil.which("curl")


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl_shows_the_103_and_its_link_before_the_200():
    with ServerThread(hints_app).start() as server:
        url = "http://127.0.0.1:%d/" % server.port
        result = subprocess.run([CURL, "-sv", "--http1.1", url], capture_output=True, timeout=30)
        assert result.returncode == 0 and result.stdout == b"ok", result
        received = [line for line in result.stderr.decode("latin-1").splitlines() if line.startswith("< ")]
        # (curl shows no blank line after an interim head.)
        assert received[:3] == ["< HTTP/1.1 103 Early Hints", "< Link: </style.css>; rel=preload; as=style",
                                "< HTTP/1.1 200 OK"]
        # HTTP/1.0: no 1xx at all (RFC 9110 §15.2).
        result = subprocess.run([CURL, "-sv", "--http1.0", url], capture_output=True, timeout=30)
        assert result.returncode == 0 and result.stdout == b"ok", result
        received = [line for line in result.stderr.decode("latin-1").splitlines() if line.startswith("< ")]
        assert received[0] == "< HTTP/1.1 200 OK" and not any("103" in line for line in received)


# --- the seam: what an HTTP/2 stream's ConnectionIO is given ------------------------------------------


class RecordingStream(ConnectionIO):
    """A ConnectionIO that records ``informational`` calls and keeps whatever else is queued."""

    def __init__(self):
        self.out = []
        self.closing = False
        self.can_sendfile = False
        self.sock = None
        self.request_deadline = 0.0
        self.interim = []

    def informational(self, status, headers):
        self.interim.append((status, headers, list(self.out)))

    def response_head(self, status, headers, request, keep_alive, body_length, server_line):
        # HTTP/1.1's head, as http11.Http11Protocol builds it.
        return build_head(status, headers, request.minor, request.method == "HEAD", keep_alive, body_length,
                          server_line)

    def flush(self):
        pass

    def flush_soon(self):
        pass

    def flush_if_blocked(self):
        pass


def _request(server, head=b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"):
    parser = RequestParser(server.limits)
    parser.feed(head)
    return parser.next_event()


def test_the_responder_hands_its_connection_io_checked_pairs_and_only_before_the_head():
    def app(environ, start_response):
        environ["wsgi.early_hints"]([LINK, ["link", " </b.js>; rel=preload "], ("Content-Length", "9")])
        start_response("200 OK", [("Content-Length", "2")])
        environ["wsgi.early_hints"]([("Link", "</c.css>")])
        yield b"ok"
        environ["wsgi.early_hints"]([("Link", "</too-late.css>")])

    server = WSGIServer(("127.0.0.1", 0), app)
    server.update_environ()
    stream = RecordingStream()
    responder = Responder(stream, server, connection_environ(server.base_environ, ("192.0.2.1", 1234)))
    assert responder.respond(_request(server)) is True
    assert stream.interim == [
        (103, [LINK, ("link", "</b.js>; rel=preload")], []),
        (103, [("Link", "</c.css>")], []),  # nothing of the final response queued yet
    ]
    assert stream.out[0].startswith(b"HTTP/1.1 200 OK\r\n")
    # HTTP/1.0 is HTTP/1.1's rule, not the responder's: the stream decides.
    stream.interim.clear()
    assert responder.respond(_request(server, b"GET / HTTP/1.0\r\n\r\n")) is False
    assert [status for status, _, _ in stream.interim] == [103, 103]
    responder.close()


def test_responders_sharing_a_connections_keys_each_get_their_own_callable():
    # HTTP/2: a connection's streams, each with its responder, start from the same keys.
    server = WSGIServer(("127.0.0.1", 0), hello_app)
    server.update_environ()
    shared = connection_environ(server.base_environ, ("192.0.2.1", 1234))
    first = Responder(RecordingStream(), server, shared)
    second = Responder(RecordingStream(), server, shared)
    assert first.conn_environ["wsgi.early_hints"] == first.early_hints
    assert second.conn_environ["wsgi.early_hints"] == second.early_hints
    assert second.conn_environ is not first.conn_environ
    first.close()
    second.close()
    assert "wsgi.early_hints" not in first.conn_environ and "wsgi.early_hints" not in second.conn_environ

"""Request bodies over real sockets: Content-Length, chunked, wsgi.input, 100-continue, draining."""

import hashlib
import select
import socket
import time

import pytest

from tests.conftest import Client, echo_app, hello_app, wait_until


def input_app(environ, start_response):
    """Reads the body the way the query string says, and reports what it saw."""
    stream = environ["wsgi.input"]
    how = environ["QUERY_STRING"] or "read"
    pieces = []
    if how == "read":
        pieces.append(stream.read())
    elif how.startswith("read-"):
        size = int(how[5:])
        while True:
            piece = stream.read(size)
            assert len(piece) <= size
            if not piece:
                break
            pieces.append(piece)
    elif how == "readline":
        while True:
            line = stream.readline()
            if not line:
                break
            pieces.append(b"[" + line + b"]")
    elif how.startswith("readline-"):
        size = int(how[9:])
        while True:
            line = stream.readline(size)
            assert len(line) <= size
            if not line:
                break
            pieces.append(b"[" + line + b"]")
    elif how == "readlines":
        pieces.extend(b"[" + line + b"]" for line in stream.readlines())
    elif how == "iterate":
        pieces.extend(b"[" + line + b"]" for line in stream)
    # Reading past the end gives b"" whatever the method.
    assert stream.read(10) == b""
    assert stream.read() == b""
    assert stream.readline() == b""
    body = b"".join(pieces)
    extra = (
        "terminated=%s length=%s\n" % (environ["wsgi.input_terminated"], environ.get("CONTENT_LENGTH", "-"))
    ).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(extra) + len(body)))])
    return [extra, body]


BODY = b"line one\nline two\n\nlast line without newline"


def chunked(data, size=7, extension=b""):
    out = []
    for i in range(0, len(data), size):
        piece = data[i : i + size]
        out.append(b"%x%s\r\n%s\r\n" % (len(piece), extension, piece))
    return b"".join(out)


@pytest.mark.parametrize("how", ["read", "read-1", "read-5", "read-100", "readline", "readline-3", "readlines", "iterate"])
@pytest.mark.parametrize("framing", ["length", "chunked"])
def test_wsgi_input_methods(serve, client_for, how, framing):
    client = client_for(serve(input_app))
    if framing == "length":
        client.request("POST", "/?" + how, body=BODY)
    else:
        client.request("POST", "/?" + how, headers=[("Transfer-Encoding", "chunked")])
        client.send(chunked(BODY) + b"0\r\n\r\n")
    response = client.read_response()
    assert response.status == 200
    first, _, body = response.body.partition(b"\n")
    expected_length = str(len(BODY)) if framing == "length" else "-"
    assert first == b"terminated=True length=%s" % expected_length.encode()
    if how.startswith("read"):
        if how.startswith("readline") or how == "readlines":
            lines = body[1:-1].split(b"][")
            assert b"".join(lines) == BODY
            if how in ("readline", "readlines"):
                assert lines == [b"line one\n", b"line two\n", b"\n", b"last line without newline"]
        else:
            assert body == BODY
    else:
        assert body[1:-1].split(b"][") == [b"line one\n", b"line two\n", b"\n", b"last line without newline"]
    # The connection carries on.
    assert client.get("/").status == 200


def test_chunk_extensions_and_trailers_are_accepted_and_ignored(serve, client_for):
    client = client_for(serve(echo_app, validate=False))
    client.request("POST", "/", headers=[("Transfer-Encoding", "chunked")])
    client.send(chunked(b"hello world", 4, b';name=value;flag;q="a \\"quoted\\" ;x"') + b"0;last\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n")
    response = client.read_response()
    assert response.body == b"POST / \nhello world"
    assert client.get("/").status == 200


def test_ten_megabyte_upload_and_download(serve, client_for):
    payload = bytes(range(256)) * (10 * 1024 * 1024 // 256)

    def app(environ, start_response):
        if environ["REQUEST_METHOD"] == "POST":
            digest = hashlib.sha256()
            size = 0
            while True:
                piece = environ["wsgi.input"].read(65536)
                if not piece:
                    break
                size += len(piece)
                digest.update(piece)
            body = ("%d %s" % (size, digest.hexdigest())).encode()
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(payload)))])
        return [payload]

    client = client_for(serve(app), timeout=30)
    client.request("POST", "/", body=payload)
    assert client.read_response().body == ("%d %s" % (len(payload), hashlib.sha256(payload).hexdigest())).encode()
    client.request("POST", "/", headers=[("Transfer-Encoding", "chunked")])
    client.send(chunked(payload, 100000) + b"0\r\n\r\n")
    assert client.read_response().body == ("%d %s" % (len(payload), hashlib.sha256(payload).hexdigest())).encode()
    response = client.get("/")
    assert response.body == payload


# --- Expect: 100-continue (RFC 9110 §10.1.1) ---------------------------------------------------------


def test_100_continue_is_sent_once_when_the_app_reads(serve, client_for):
    client = client_for(serve(input_app))
    client.request("POST", "/?read-3", headers=[("Expect", "100-continue"), ("Content-Length", str(len(BODY)))])
    interim = client.read_response()
    assert interim.status == 100
    assert interim.raw_head == b"HTTP/1.1 100 Continue"
    client.send(BODY)
    response = client.read_response()
    assert response.status == 200
    assert response.body.endswith(BODY)
    assert client.get("/").status == 200  # no second 100 anywhere in between


def test_no_100_continue_when_the_app_answers_without_reading(serve, client_for):
    def app(environ, start_response):
        start_response("401 Unauthorized", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return [b"nope"]

    client = client_for(serve(app))
    client.request("POST", "/", headers=[("Expect", "100-continue"), ("Content-Length", "1000")])
    response = client.read_response()
    assert response.status == 401
    # The body may or may not follow; the server cannot know, so it must not read it as a request.
    assert response.header("Connection") == "close"
    client.assert_closed()


def test_expect_100_continue_with_chunked_body(serve, client_for):
    client = client_for(serve(input_app))
    client.request("POST", "/?read", headers=[("Expect", "100-continue"), ("Transfer-Encoding", "chunked")])
    assert client.read_response().status == 100
    client.send(chunked(BODY) + b"0\r\n\r\n")
    assert client.read_response().body.endswith(BODY)


# --- bodies the application does not read ------------------------------------------------------


def test_a_small_unread_body_is_drained_and_the_connection_kept(serve, client_for):
    client = client_for(serve(hello_app))
    client.request("POST", "/", body=b"x" * 5000)
    response = client.read_response()
    assert response.status == 200 and response.header("Connection") is None
    client.request("POST", "/", headers=[("Transfer-Encoding", "chunked")])
    client.send(chunked(b"y" * 5000, 1000) + b"0\r\n\r\n")
    assert client.read_response().status == 200
    assert client.get("/").status == 200


def test_the_answer_to_a_small_unread_body_waits_for_the_body(serve, client_for):
    # nginx with proxy_request_buffering off sends the head first and the body as it arrives;
    # an answer that overtakes the body makes nginx close its client's connection, unannounced
    # after a keep-alive response, and the client's next request on it fails.
    client = client_for(serve(hello_app))
    client.request("POST", "/", headers=[("Content-Length", "1000")])
    readable, _, _ = select.select([client.sock], [], [], 0.3)
    assert not readable  # no answer before the body
    client.send(b"x" * 1000)
    response = client.read_response()
    assert response.status == 200 and response.header("Connection") is None
    assert client.get("/").status == 200


def test_a_large_unread_body_closes_the_connection(serve, client_for):
    client = client_for(serve(hello_app, drain_limit=1000))
    client.request("POST", "/", headers=[("Content-Length", "100000")])
    client.send(b"z" * 2000)
    response = client.read_response()
    assert response.status == 200
    assert response.header("Connection") == "close"
    # Whatever else arrives is not parsed as a request.
    try:
        client.send(b"z" * 1000)
    except OSError:
        pass
    client.assert_closed()


def test_a_large_unread_chunked_body_closes_the_connection(serve, client_for):
    client = client_for(serve(hello_app, drain_limit=1000))
    client.request("POST", "/", headers=[("Transfer-Encoding", "chunked")])
    client.send(chunked(b"w" * 5000, 500) + b"0\r\n\r\n")
    assert client.read_response().status == 200
    client.assert_closed()


def test_body_larger_than_limit_is_refused_with_413(serve, client_for):
    client = client_for(serve(echo_app, validate=False, limit_request_body=100))
    client.request("POST", "/", headers=[("Content-Length", "101")])
    response = client.read_response()
    assert response.status == 413
    client.assert_closed()

    client = client_for(serve(echo_app, validate=False, limit_request_body=100))
    client.request("POST", "/", headers=[("Transfer-Encoding", "chunked")])
    client.send(chunked(b"a" * 150, 50) + b"0\r\n\r\n")
    response = client.read_response()
    assert response.status == 413
    client.assert_closed()


def test_a_malformed_chunked_body_read_by_the_app_gets_400_without_traceback(serve, client_for):
    server = serve(echo_app, validate=False)
    client = client_for(server)
    client.request("POST", "/", headers=[("Transfer-Encoding", "chunked")])
    client.send(b"5\r\nhello\r\nzz\r\n")
    response = client.read_response()
    assert response.status == 400
    assert b"chunk" in response.body
    client.assert_closed()
    assert "Traceback" not in server.errors.getvalue()


def test_client_closing_during_the_body_ends_the_request_quietly(serve):
    server = serve(echo_app, validate=False)
    sock = socket.create_connection(server.address)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 50\r\n\r\nabc")
    time.sleep(0.05)
    sock.close()
    time.sleep(0.1)
    with Client(server.address) as client:
        assert client.get("/").status == 200
    assert "Traceback" not in server.errors.getvalue()


def test_read_n_returns_n_bytes_across_socket_reads(serve, client_for):
    # Django's request.body is a single read(CONTENT_LENGTH): a short read would truncate it.
    def app(environ, start_response):
        length = int(environ["CONTENT_LENGTH"])
        body = environ["wsgi.input"].read(length)
        reply = b"%d" % len(body)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(reply)))])
        return [reply]

    client = client_for(serve(app))
    payload = b"p" * 300000
    client.request("POST", "/", headers=[("Content-Length", str(len(payload)))])
    client.send(payload[:1000])
    time.sleep(0.1)  # the server has a first piece only when the app calls read()
    client.send(payload[1000:])
    assert client.read_response().body == b"300000"


def test_a_client_still_uploading_after_the_answer_is_not_reset(serve, client_for):
    # RFC 9112 §9.6: the server refuses the body (413) while the client is still sending it.
    # Closing at once with its bytes unread makes the kernel reset the connection: the client's
    # next send fails, and on some systems the reset destroys the 413 before it is read. A
    # lingering close (FIN, then read and drop for a while) lets the client finish and read it.
    server = serve(echo_app, validate=False, limit_request_body=100)
    client = client_for(server)
    client.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 300000\r\n\r\n" + b"b" * 100000)
    time.sleep(0.3)  # the 413 is out and the server has begun to close
    client.send(b"b" * 100000)
    time.sleep(0.1)
    client.send(b"b" * 100000)
    response = client.read_response()
    assert response.status == 413


@pytest.mark.parametrize(
    "head",
    [b"GET / HTTP/1.0\r\n\r\n", b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"],
    ids=["http1.0", "close"],
)
def test_a_client_that_said_close_is_closed_at_once_without_lingering(serve, head):
    # RFC 9112 §9.6: a client that sends "close" (or HTTP/1.0 without keep-alive) sends nothing
    # after that request, so nothing can arrive to be reset: the server closes at once. A
    # lingering close here would cost a shutdown(2), a recv(2) and a wait for the client's FIN
    # on every such connection (the accept path: ab, health checks, HTTP/1.0 proxies).
    server = serve(echo_app)
    with Client(server.address) as client:
        client.send(head)
        assert client.read_until_close().startswith(b"HTTP/1.1 200 ")
        # The client keeps its end open: a lingering server would hold the connection until
        # the client closes or 2 s pass.
        deadline = time.monotonic() + 1.0
        while server.server.connections and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not server.server.connections


def test_a_close_request_with_more_bytes_behind_it_still_lingers(serve):
    # The rule above holds only when nothing follows: bytes after a "close" request (a client
    # that pipelined anyway) are read and dropped before the close, so they cause no reset.
    server = serve(echo_app)
    sock = socket.create_connection(server.address)
    try:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\n")
        data = b""
        while b"\r\n\r\n" not in data:
            data += sock.recv(65536)
        time.sleep(0.3)
        assert len(server.server.connections) == 1  # lingering: waiting for the client's FIN
    finally:
        sock.close()


def test_body_errors_are_access_logged_once_with_the_request(serve, client_for):
    server = serve(echo_app, validate=False, body_timeout=0.3)
    client = client_for(server)
    client.send(b"POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\npart")
    assert client.read_response().status == 408
    client.assert_closed()
    time.sleep(0.05)
    lines = server.access.getvalue().splitlines()
    assert len(lines) == 1 and '"POST /upload HTTP/1.1" 408 ' in lines[0], lines


def test_a_client_gone_mid_upload_is_an_oserror_to_the_app(serve):
    seen = []

    def app(environ, start_response):
        try:
            environ["wsgi.input"].read()
        except OSError as exc:  # what Django turns into UnreadablePostError
            seen.append(type(exc).__name__)
            raise
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "0")])
        return []

    server = serve(app, validate=False)
    sock = socket.create_connection(server.address)
    sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1000\r\n\r\nabc")
    time.sleep(0.1)
    sock.close()
    wait_until(lambda: seen, 5, "the application's read to fail")
    assert seen == ["ClientDisconnected"]
    assert "Traceback" not in server.errors.getvalue()
    time.sleep(0.05)
    assert '"POST / HTTP/1.1" 499 ' in server.access.getvalue()

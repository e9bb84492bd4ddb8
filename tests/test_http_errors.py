"""Protocol errors over real sockets: each gets its status, a short text body, and a closed connection.

The parser's own tests (tests/http/) check every rule with byte strings; these check that the
server turns each class of error into the right response on the wire, logs no traceback, and
keeps serving others.
"""

import pytest

from tests.conftest import echo_app, hello_app


@pytest.mark.parametrize(
    "raw, status",
    [
        # request smuggling: ambiguous framing is refused, never guessed (RFC 9112 §6.1, §6.3)
        (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: +3\r\n\r\nabc", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked, identity\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
        (b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1ffffffffffffffff\r\n", 400),
        # the head
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: t\r\nX: a\r\n folded\r\n\r\n", 400),  # obs-fold
        (b"GET / HTTP/1.1\r\nHost: t\r\nX : a\r\n\r\n", 400),  # space before colon
        (b"GET / HTTP/1.1\r\nHost: t\r\nX: a\x00b\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: t\r\nX: a\rb\r\n\r\n", 400),  # bare CR
        (b"GET / HTTP/1.1\nHost: t\n\n", 400),  # bare LF
        (b"GET  / HTTP/1.1\r\nHost: t\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505),
        (b"GET / FTP/1.1\r\nHost: t\r\n\r\n", 400),
        (b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: t\r\nExpect: teapot\r\n\r\n", 417),
    ],
)
def test_protocol_errors(serve, client_for, raw, status):
    server = serve(echo_app, log_level="debug")  # reads the body, so body errors surface too
    client = client_for(server)
    client.send(raw)
    response = client.read_response()
    assert response.status == status
    assert response.header("Connection") == "close"
    assert response.header("Content-Type") == "text/plain; charset=utf-8"
    assert response.body.startswith(b"%d " % status) and len(response.body) < 300
    client.assert_closed()
    assert client_for(server).get("/").status == 200
    log = server.errors.getvalue()
    assert "Traceback" not in log
    assert "%d from 127.0.0.1" % status in log  # one debug line


def test_limits_give_414_and_431(serve, client_for):
    server = serve(hello_app, limit_request_line=100, limit_request_fields=5, limit_request_field_size=50)
    client = client_for(server)
    client.send(b"GET /" + b"a" * 200 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert client.read_response().status == 414

    client = client_for(server)
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(10)) + b"\r\n")
    assert client.read_response().status == 431

    client = client_for(server)
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"v" * 100 + b"\r\n\r\n")
    assert client.read_response().status == 431

    # Refused as soon as the limit is certain, before the head is complete.
    client = client_for(server)
    client.send(b"GET /" + b"a" * 200)
    assert client.read_response().status == 414


def test_default_limits_are_gunicorn_s(serve, client_for):
    server = serve(hello_app)
    client = client_for(server)
    client.send(b"GET /" + b"a" * 4080 + b" HTTP/1.1\r\nHost: t\r\n\r\n")  # line of 4094 bytes
    assert client.read_response().status == 200
    client = client_for(server)
    client.send(b"GET /" + b"a" * 4081 + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert client.read_response().status == 414
    client = client_for(server)
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(99)) + b"\r\n")
    assert client.read_response().status == 200
    client = client_for(server)
    client.send(b"GET / HTTP/1.1\r\nHost: t\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(100)) + b"\r\n")
    assert client.read_response().status == 431


def test_garbage_gets_400(serve, client_for):
    server = serve(hello_app)
    client = client_for(server)
    client.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 100 + b"\r\n\r\n")  # a TLS hello
    assert client.read_response().status == 400
    client.assert_closed()


def test_rejected_requests_are_access_logged(serve, client_for):
    server = serve(hello_app)
    client = client_for(server)
    client.send(b"GET / HTTP/1.1\r\n\r\n")
    client.read_response()
    client.assert_closed()
    assert '"-" 400 ' in server.access.getvalue()

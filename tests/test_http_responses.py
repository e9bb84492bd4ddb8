"""Responses over real sockets: framing, HEAD/204/304, write(), file_wrapper, streaming, app errors."""

import io
import os
import threading
import time

import gevent
import pytest

from tests.conftest import Client, hello_app, wait_until


def test_date_and_server_headers(serve, client_for):
    response = client_for(serve(hello_app)).get("/")
    assert response.header("Server") == "greenserve"
    date = response.header("Date")
    assert date.endswith(" GMT") and len(date) == 29


def test_server_header_is_configurable_and_can_be_turned_off(serve, client_for):
    assert client_for(serve(hello_app, server_header="acme/1")).get("/").header("Server") == "acme/1"
    assert client_for(serve(hello_app, server_header="")).get("/").header("Server") is None


def test_the_app_s_own_server_and_date_headers_win(serve, client_for):
    def app(environ, start_response):
        start_response(
            "200 OK",
            [("Content-Type", "text/plain"), ("Content-Length", "0"), ("Server", "mine"), ("Date", "Thu, 01 Jan 2015 00:00:00 GMT")],
        )
        return []

    response = client_for(serve(app)).get("/")
    assert response.header_list("Server") == ["mine"]
    assert response.header_list("Date") == ["Thu, 01 Jan 2015 00:00:00 GMT"]


def body_app(environ, start_response):
    """Answers with the status from the path and a body even where none is allowed."""
    status = environ["PATH_INFO"][1:] or "200"
    reasons = {"200": "OK", "204": "No Content", "304": "Not Modified"}
    headers = [] if status in ("204", "304") else [("Content-Type", "text/plain")]
    start_response("%s %s" % (status, reasons[status]), headers)
    return [b"this body must not be sent for HEAD, 204 or 304"]


@pytest.mark.parametrize("status", ["204", "304"])
def test_no_body_for_204_and_304_even_if_the_app_gives_one(serve, client_for, status):
    client = client_for(serve(body_app, validate=False))
    response = client.get("/" + status)
    assert response.status == int(status)
    assert response.header("Transfer-Encoding") is None
    if status == "204":
        assert response.header("Content-Length") is None  # RFC 9110 §8.6
    # The connection is still in sync: the next response starts right after the head.
    response = client.get("/200")
    assert response.status == 200 and response.body.startswith(b"this body")


def test_head_gets_the_headers_of_get_and_no_body(serve, client_for):
    def app(environ, start_response):
        body = b"the body GET gets"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]  # also for HEAD: the server must drop it

    client = client_for(serve(app))
    get = client.get("/")
    head = client.get("/", method="HEAD")
    assert head.status == 200
    assert head.header("Content-Length") == get.header("Content-Length") == str(len(get.body))
    assert client.get("/").body == get.body  # in sync


def test_head_of_a_streamed_response_sends_no_false_length(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        if environ["REQUEST_METHOD"] == "HEAD":
            return []  # what werkzeug does for every HEAD
        return (b"line %d\n" % i for i in range(5))

    client = client_for(serve(app))
    assert client.get("/", method="HEAD").header("Content-Length") is None
    assert client.get("/").body == b"".join(b"line %d\n" % i for i in range(5))


def generator_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return (b"part %d;" % i for i in range(5))


def test_no_content_length_gets_chunked_on_http11(serve, client_for):
    client = client_for(serve(generator_app))
    response = client.get("/")
    assert response.header("Transfer-Encoding") == "chunked"
    assert response.body == b"part 0;part 1;part 2;part 3;part 4;"
    assert client.get("/").status == 200


def test_no_content_length_is_close_delimited_on_http10(serve, client_for):
    client = client_for(serve(generator_app))
    response = client.get("/", version="HTTP/1.0", headers=[("Connection", "keep-alive")])
    assert response.header("Transfer-Encoding") is None
    assert response.header("Connection") == "close"
    assert response.body == b"part 0;part 1;part 2;part 3;part 4;"


def test_a_list_body_without_content_length_gets_one(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ab", b"", b"cde"]

    response = client_for(serve(app, validate=False)).get("/")
    assert response.header("Content-Length") == "5"
    assert response.body == b"abcde"


def test_the_write_callable(serve, client_for):
    def app(environ, start_response):
        write = start_response("200 OK", [("Content-Type", "text/plain")])
        write(b"written ")
        write(b"")
        write(b"twice ")
        return [b"and returned"]

    client = client_for(serve(app))
    response = client.get("/")
    assert response.body == b"written twice and returned"
    assert response.header("Transfer-Encoding") == "chunked"


def test_more_than_content_length_is_cut_and_less_closes_the_connection(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "5")])
        if environ["PATH_INFO"] == "/long":
            return iter([b"123", b"4567", b"89"])
        return iter([b"12"])

    server = serve(app)
    client = client_for(server)
    assert client.get("/long").body == b"12345"
    assert client.get("/long").body == b"12345"  # still in sync
    client.request(target="/short")
    data = client.read_until_close()
    assert data.endswith(b"\r\n\r\n12")  # the client sees a truncated body and a close
    assert "sent 2 bytes of a 5-byte Content-Length" in server.errors.getvalue()


def test_streamed_chunks_reach_the_client_as_they_are_produced(serve):
    release = threading.Event()

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/event-stream")])

        def events():
            yield b"data: first\n\n"
            while not release.is_set():  # the server's hub must go on while we wait
                gevent.sleep(0.01)
            yield b"data: second\n\n"

        return events()

    server = serve(app)
    with Client(server.address) as client:
        client.request(target="/")
        client.sock.settimeout(5)
        received = b""
        while b"data: first" not in received:
            received += client.sock.recv(65536)
        assert b"data: second" not in received
        release.set()
        while not received.endswith(b"0\r\n\r\n"):
            received += client.sock.recv(65536)
        assert b"data: second" in received


def test_file_wrapper_with_a_real_file_uses_sendfile(serve, client_for, tmp_path, monkeypatch):
    content = os.urandom(3 * 1024 * 1024 + 7)
    path = tmp_path / "blob.bin"
    path.write_bytes(content)
    calls = []
    original = os.sendfile

    def spy(out_fd, in_fd, offset, count):
        sent = original(out_fd, in_fd, offset, count)  # raises BlockingIOError when full
        calls.append(sent)
        return sent

    # Looked up at each call, as os.sendfile, in the pure-Python and the compiled build alike.
    monkeypatch.setattr(os, "sendfile", spy)

    def app(environ, start_response):
        handle = open(str(path), "rb")
        handle.seek(7)
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return environ["wsgi.file_wrapper"](handle, 8192)

    client = client_for(serve(app, validate=False))
    response = client.get("/")
    assert response.header("Content-Length") == str(len(content) - 7)
    assert response.body == content[7:]
    # All of it went out by sendfile. The spy records a call after sendfile returns, in the
    # server's thread: the client can hold the whole body before that thread runs again.
    wait_until(lambda: sum(calls) == len(content) - 7, 10, "sendfile to account for the whole body")
    head = client.get("/", method="HEAD")
    assert head.header("Content-Length") == str(len(content) - 7)
    assert client.get("/").body == content[7:]


def test_file_wrapper_with_a_file_like_object_falls_back_to_reading(serve, client_for):
    content = b"in memory " * 1000

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(content)))])
        return environ["wsgi.file_wrapper"](io.BytesIO(content), 1000)

    response = client_for(serve(app)).get("/")
    assert response.body == content


def test_file_wrapper_respects_the_app_s_content_length(serve, client_for, tmp_path):
    path = tmp_path / "part.txt"
    path.write_bytes(b"0123456789")

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "4")])
        return environ["wsgi.file_wrapper"](open(str(path), "rb"))

    client = client_for(serve(app, validate=False))
    assert client.get("/").body == b"0123"
    assert client.get("/").body == b"0123"


# --- application errors ------------------------------------------------------------------------------


def test_an_exception_before_the_response_gives_500_and_keeps_the_connection(serve, client_for):
    def app(environ, start_response):
        if environ["PATH_INFO"] == "/boom":
            raise ValueError("kaboom")
        return hello_app(environ, start_response)

    server = serve(app)
    client = client_for(server)
    response = client.get("/boom")
    assert response.status == 500
    assert response.body == b"Internal Server Error\n"
    assert response.header("Connection") is None
    assert client.get("/").status == 200
    log = server.errors.getvalue()
    assert log.count("Traceback") == 1 and "ValueError: kaboom" in log and "GET /boom" in log


def test_an_exception_after_the_response_started_closes_the_connection(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])

        def body():
            yield b"partial"
            raise RuntimeError("midway")

        return body()

    server = serve(app)
    client = client_for(server)
    client.request(target="/")
    data = client.read_until_close()
    assert b"partial" in data
    assert not data.endswith(b"0\r\n\r\n")  # no last chunk: the client must see truncation
    assert server.errors.getvalue().count("RuntimeError: midway") == 1


def test_close_is_called_on_the_iterable_in_every_case(serve, client_for):
    closed = []

    class Body:
        def __init__(self, name, fail=False):
            self.name = name
            self.fail = fail

        def __iter__(self):
            yield b"x"
            if self.fail:
                raise RuntimeError("fail")

        def close(self):
            closed.append(self.name)

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "1")])
        return Body(environ["PATH_INFO"], fail=environ["PATH_INFO"] == "/fail")

    server = serve(app)
    client = client_for(server)
    client.get("/ok")
    client.get("/ok-head", method="HEAD")
    client = client_for(server)
    client.request(target="/fail")
    client.read_response()
    wait_until(lambda: len(closed) >= 3, 5, "three close() calls")
    assert sorted(closed) == ["/fail", "/ok", "/ok-head"]


@pytest.mark.parametrize(
    "headers",
    [
        [("X-Injected", "a\r\nSet-Cookie: evil=1")],
        [("X-Nul", "a\x00b")],
        [("X-Bell", "a\x07b")],
        [("Bad Name", "x")],
        [("X-Colon:", "x")],
        [("X-Unicode", "snow \u2603")],
        [("Transfer-Encoding", "chunked")],
        [("Keep-Alive", "timeout=5")],
        [("Content-Length", "five")],
    ],
)
def test_invalid_response_headers_never_reach_the_wire(serve, client_for, headers):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")] + headers)
        return [b"body"]

    server = serve(app, validate=False)
    client = client_for(server)
    response = client.get("/")
    assert response.status == 500
    assert b"evil" not in response.raw_head and b"X-" not in response.raw_head
    assert client.get("/").status == 500  # the connection is usable
    assert "invalid response from the application" in server.errors.getvalue()
    assert "Traceback" not in server.errors.getvalue()


@pytest.mark.parametrize("status", ["200", "OK 200", "2000 Big", "200 OK\r\nX-Evil: 1", 200])
def test_invalid_status_lines_give_500(serve, client_for, status):
    def app(environ, start_response):
        start_response(status, [("Content-Type", "text/plain")])
        return [b"x"]

    server = serve(app, validate=False)
    response = client_for(server).get("/")
    assert response.status == 500
    assert b"Evil" not in response.raw_head


def test_returning_str_instead_of_bytes_gives_500(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return ["text, not bytes"]

    server = serve(app, validate=False)
    assert client_for(server).get("/").status == 500
    assert "must return bytes" in server.errors.getvalue()


def test_start_response_with_exc_info_replaces_the_response_before_it_started(serve, client_for):
    import sys

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        try:
            raise KeyError("x")
        except KeyError:
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")], sys.exc_info())
        return [b"sorry"]

    response = client_for(serve(app)).get("/")
    assert response.status == 503 and response.body == b"sorry"


def test_start_response_called_twice_is_an_error(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"x"]

    server = serve(app, validate=False)
    assert client_for(server).get("/").status == 500
    assert "start_response() called a second time" in server.errors.getvalue()


@pytest.mark.parametrize("body", [iter([]), iter([b""])])
def test_an_invalid_status_with_an_empty_streamed_body_gives_500(serve, client_for, body):
    def app(environ, start_response):
        start_response("200", [("Content-Type", "text/plain")])
        return body

    server = serve(app, validate=False)
    client = client_for(server)
    assert client.get("/").status == 500
    assert "invalid response from the application" in server.errors.getvalue()
    assert "internal error" not in server.errors.getvalue()


def test_bytes_like_items_in_a_list_body(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [bytearray(b"byte"), memoryview(b"array")]

    assert client_for(serve(app, validate=False)).get("/").body == b"bytearray"

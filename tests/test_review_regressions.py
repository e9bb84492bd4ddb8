"""Regressions for a review of the core: each test is a bug a user would have hit, now fixed."""

import array
import gc
import socket
import threading
import time
import weakref

import gevent
import pytest

from tests.conftest import Client


def ok_app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


# --- deadlines reach the greenlet that waits ----------------------------------------------------


def test_a_body_read_from_another_greenlet_times_out_there(serve, client_for):
    # Upload pumps and proxies read wsgi.input from a helper greenlet while the handler joins
    # it: the body timeout must interrupt the reader, never the handler's own code.
    seen = {}

    def app(environ, start_response):
        def pump():
            try:
                return environ["wsgi.input"].read()
            except OSError as exc:
                seen["pump"] = type(exc).__name__
                return b""

        gevent.spawn(pump).join()
        return ok_app(environ, start_response)

    server = serve(app, validate=False, body_timeout=0.5)
    client = client_for(server)
    client.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc")
    response = client.read_response()
    assert seen == {"pump": "RequestBodyError"}
    assert response.status == 200  # the app chose to answer anyway
    assert "Traceback" not in server.errors.getvalue()


# --- responses are not held back by the app's remaining work ------------------------------------


def test_the_response_is_sent_before_the_iterable_s_close_runs(serve, client_for):
    closing = threading.Event()

    class Body:
        def __iter__(self):
            yield b"ok"

        def close(self):
            closing.set()
            gevent.sleep(1.5)  # Flask teardown, Django's request_finished, ...

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return Body()

    client = client_for(serve(app))
    started = time.monotonic()
    response = client.get("/")
    assert response.body == b"ok"
    assert time.monotonic() - started < 1.0


def test_the_response_is_sent_before_work_after_the_last_chunk(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        yield b"ok"
        gevent.sleep(1.5)  # work after the body is complete

    client = client_for(serve(app, validate=False))
    started = time.monotonic()
    assert client.get("/").body == b"ok"
    assert time.monotonic() - started < 1.0


def test_a_slow_pipelined_request_does_not_hold_back_earlier_responses(serve, client_for):
    def app(environ, start_response):
        if environ["PATH_INFO"] == "/slow":
            gevent.sleep(1.5)  # a long poll behind the first request
        return ok_app(environ, start_response)

    client = client_for(serve(app, validate=False))
    client.send(b"GET /fast HTTP/1.1\r\nHost: t\r\n\r\nGET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
    started = time.monotonic()
    assert client.read_response().body == b"ok"
    assert time.monotonic() - started < 1.0
    assert client.read_response().body == b"ok"


# --- framing -------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/list", "/iter"])
def test_a_memoryview_of_wide_items_is_framed_by_its_bytes(serve, client_for, path):
    data = array.array("i", [1, 2, 3])

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        chunks = [memoryview(data)]
        return chunks if environ["PATH_INFO"] == "/list" else iter(chunks)

    client = client_for(serve(app, validate=False))
    assert client.get(path).body == data.tobytes()
    assert client.get(path).body == data.tobytes()  # still in sync


def test_a_file_that_reports_size_0_is_read_not_skipped(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return environ["wsgi.file_wrapper"](open("/proc/self/status", "rb"))

    body = client_for(serve(app, validate=False)).get("/").body
    assert b"Name:" in body and len(body) > 100


def test_an_app_s_gevent_timeout_gets_500(serve, client_for):
    def app(environ, start_response):
        with gevent.Timeout(0.05):
            gevent.sleep(1)
        return ok_app(environ, start_response)

    server = serve(app, validate=False)
    assert client_for(server).get("/").status == 500
    assert "Timeout" in server.errors.getvalue()


# --- memory ------------------------------------------------------------------------------------------


def test_an_idle_connection_keeps_nothing_of_its_last_request(serve, client_for):
    holder = {}

    class Big:
        pass

    def app(environ, start_response):
        thing = Big()
        environ["app.thing"] = thing
        holder["ref"] = weakref.ref(thing)
        return ok_app(environ, start_response)

    client = client_for(serve(app))
    assert client.get("/").status == 200
    time.sleep(0.1)
    gc.disable()
    try:
        assert holder["ref"]() is None  # freed by reference counting, while the connection idles
    finally:
        gc.enable()


# --- stop and restart ----------------------------------------------------------------------------


def test_a_stray_crlf_does_not_make_an_idle_connection_busy(serve):
    server = serve(ok_app, header_timeout=8)
    client = Client(server.address)
    assert client.get("/").status == 200
    client.send(b"\r\n")  # RFC 9112 §2.2 lets clients send it between requests
    time.sleep(0.1)
    started = time.monotonic()
    server.call(gevent.spawn, server.server.stop, 10)
    client.assert_closed(timeout=5)
    assert time.monotonic() - started < 2
    client.close()


def run_gevent_script(body):
    """Run ``body`` (Python source) in a fresh interpreter with gevent's hub in its main thread."""
    import subprocess
    import sys
    import textwrap

    from tests.conftest import subprocess_env

    prelude = textwrap.dedent(
        """
        import gevent, socket as stdlib_socket
        from gevent import socket
        from greenserve import WSGIServer

        def ok_app(environ, start_response):
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
            return [b"ok"]

        def get(address):
            client = socket.create_connection(address)
            client.sendall(b"GET / HTTP/1.1\\r\\nHost: t\\r\\n\\r\\n")
            data = client.recv(65536)
            client.close()
            return data
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(body)],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_keep_alive_comes_back_after_stop_and_start():
    out = run_gevent_script(
        """
        server = WSGIServer(("127.0.0.1", 0), ok_app, log=None, error_log=None)
        server.start()
        server.stop(1)
        server.start()
        print(b"Connection: close" in get(server.address))
        server.stop(1)
        """
    )
    assert out.strip() == "False"


def test_stop_waits_for_a_connection_accepted_in_the_same_loop_iteration():
    out = run_gevent_script(
        """
        import time
        server = WSGIServer(("127.0.0.1", 0), ok_app, header_timeout=0.5, log=None, error_log=None)
        server.start()
        client = stdlib_socket.socket()
        client.setblocking(False)
        client.connect_ex(server.address)
        time.sleep(0.05)  # the connection waits in the kernel's accept queue
        stopper = gevent.spawn(server.stop, 3)  # a stop handled in the same loop iteration ...
        server._do_read()  # ... as the listener's readiness (the ordering forced here)
        stopper.join()
        gevent.sleep(1.5)  # header_timeout is long past: the connection must be gone
        print(len(server.connections))
        client.close()
        """
    )
    assert out.strip() == "0"


def test_environ_keys_set_before_start_are_kept():
    out = run_gevent_script(
        """
        def app(environ, start_response):
            body = environ.get("X_TEST", "missing").encode()
            start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
            return [body]

        server = WSGIServer(("127.0.0.1", 0), app, log=None, error_log=None)
        server.environ["X_TEST"] = "kept"
        server.start()
        print(get(server.address).endswith(b"kept"))
        server.stop(1)
        """
    )
    assert out.strip() == "True"

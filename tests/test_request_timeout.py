"""request_timeout: an application that has not started its response in time is interrupted where it waits.

Real sockets against a ServerThread: the client gets 504 and a closed connection, the error log
one entry with where the application waited, and everyone else is served meanwhile. A response
whose head went out (a stream) and an upgrade are not cut. (With redis-py blocked in BLPOP and
behind nginx: tests/test_request_timeout_redis.py.)
"""

import threading
import time

import gevent
import pytest

import greenserve
from greenserve.settings import Config
from tests.conftest import Client

TIMEOUT = 0.3


def slow_app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/slow":
        wait_for_the_database()
    elif path == "/swallowing":
        try:
            gevent.sleep(10)
        except Exception:  # the habit that swallows a gevent.Timeout-based deadline... not this one
            pass
        # Never reached: a 200 here would mean the timeout was swallowed.
    elif path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return stream()
    elif path == "/started-but-no-body-yet":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return late_first_chunk()
    body = ("done %s" % path).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def wait_for_the_database():
    gevent.sleep(10)  # the wait point the error log must name


def stream():
    yield b"first "
    gevent.sleep(3 * TIMEOUT)  # past the timeout, after the head went out
    yield b"second"


def late_first_chunk():
    # PEP 3333: the head goes out with the first non-empty chunk; until then the client has
    # nothing, so the timeout still applies.
    yield b""
    gevent.sleep(10)
    yield b"never"


def timed_get(server, target):
    with Client(server.address) as client:
        began = time.monotonic()
        response = client.get(target)
        elapsed = time.monotonic() - began
        client.assert_closed()
    return response, elapsed


def timeout_entries(server):
    return [line for line in server.errors.getvalue().splitlines() if "request timeout:" in line]


def test_off_by_default_and_a_setting_of_the_table():
    assert Config().request_timeout == 0.0
    assert Config(request_timeout="2.5").request_timeout == 2.5
    with pytest.raises(ValueError):
        Config(request_timeout=-1)
    assert issubclass(greenserve.RequestTimeout, BaseException)
    assert not issubclass(greenserve.RequestTimeout, Exception)


def test_a_request_waiting_past_the_timeout_gets_504_and_a_closed_connection(serve):
    server = serve(slow_app, request_timeout=TIMEOUT)
    response, elapsed = timed_get(server, "/slow")
    assert response.status == 504
    assert response.header("Connection") == "close"
    assert response.body == b"Gateway Timeout\n"
    assert TIMEOUT <= elapsed < TIMEOUT + 3  # the sweeper's granularity, on a loaded machine


def test_except_exception_cannot_swallow_it(serve):
    server = serve(slow_app, request_timeout=TIMEOUT)
    response, _ = timed_get(server, "/swallowing")
    assert response.status == 504


def test_everyone_else_is_served_meanwhile(serve):
    server = serve(slow_app, request_timeout=1.0)
    slow = Client(server.address)
    slow.request(target="/slow")
    time.sleep(0.1)  # its application is waiting now
    began = time.monotonic()
    with Client(server.address) as other:
        for n in range(5):
            assert other.get("/fast%d" % n).body == b"done /fast%d" % n
    assert time.monotonic() - began < 0.9  # served while the slow one waited, not after it
    assert slow.read_response().status == 504
    slow.close()
    with Client(server.address) as after:
        assert after.get("/fast").status == 200  # the server serves on


def test_a_stream_whose_head_went_out_is_not_cut(serve):
    server = serve(slow_app, request_timeout=TIMEOUT)
    with Client(server.address) as client:
        response = client.get("/stream")
    assert (response.status, response.body) == (200, b"first second")
    assert timeout_entries(server) == []


def test_start_response_alone_is_not_the_head(serve):
    server = serve(slow_app, request_timeout=TIMEOUT)
    response, _ = timed_get(server, "/started-but-no-body-yet")
    assert response.status == 504


def test_an_upgrade_is_not_cut(serve):
    # A WebSocket's whole session runs inside the application call.
    server = serve(lambda environ, start_response: (gevent.sleep(3 * TIMEOUT), slow_app(environ, start_response))[1],
                   request_timeout=TIMEOUT)
    with Client(server.address) as client:
        response = client.get("/upgraded", headers=[("Connection", "Upgrade"), ("Upgrade", "websocket")])
    assert response.status == 200


def test_the_error_log_has_one_entry_with_where_it_waited(serve):
    server = serve(slow_app, request_timeout=TIMEOUT)
    with Client(server.address) as client:
        port = client.sock.getsockname()[1]
        assert client.get("/slow?id=7").status == 504
    log = server.errors.getvalue()
    entries = timeout_entries(server)
    assert len(entries) == 1 and log.count("[ERROR]") == 1, log
    entry = entries[0]
    assert "GET /slow?id=7 from 127.0.0.1:%d" % port in entry, entry
    elapsed = float(entry.split("no response after ")[1].split(" s")[0])
    assert TIMEOUT <= elapsed < TIMEOUT + 3
    assert "answered 504" in entry
    stack = log.split(entry, 1)[1]
    # From the application's first frame down to the wait, innermost call last.
    assert 'test_request_timeout.py", line' in stack and "in slow_app" in stack
    assert stack.index("in slow_app") < stack.index("in wait_for_the_database")
    assert "gevent.sleep(10)  # the wait point the error log must name" in stack
    # greenserve's frames above the application are not its business.
    assert "_respond" not in stack and "greenserve/wsgi" not in stack


def test_other_requests_on_a_keep_alive_connection_before_the_slow_one_are_answered(serve):
    server = serve(slow_app, request_timeout=TIMEOUT)
    with Client(server.address) as client:
        assert client.get("/fast").status == 200
        time.sleep(2 * TIMEOUT)  # idle time on the connection is keepalive's, not counted
        assert client.get("/fast").status == 200
        assert client.get("/slow").status == 504
        client.assert_closed()


def test_many_timeouts_at_once_each_get_504_and_the_server_serves_on(serve):
    server = serve(slow_app, request_timeout=TIMEOUT)
    results = []

    def one():
        results.append(timed_get(server, "/slow")[0].status)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert results == [504] * 8
    assert len(timeout_entries(server)) == 8
    with Client(server.address) as client:
        assert client.get("/fast").status == 200


BIG = 32 * 1024 * 1024  # more than loopback's send and receive buffers hold together


def big_then_slow_app(environ, start_response):
    if environ["PATH_INFO"] == "/big":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(BIG))])
        return [b"x" * BIG]
    environ["wsgi.input"].read()  # before it waits for the body, sends what is queued: /big's rest
    return slow_app(environ, start_response)


def test_a_response_queued_before_is_not_cut_short_by_the_next_requests_timeout(serve):
    # Pipelined: /big's answer fills the socket's buffers; the next request's application,
    # waiting for its body (which never comes), first sends the rest of /big, and waits to while
    # the client does not read. Its timeout must not cut /big's body short (the 504 would
    # follow as if it were /big's): it is answered once /big is out.
    server = serve(big_then_slow_app, request_timeout=TIMEOUT)
    with Client(server.address, timeout=20) as client:
        client.send(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n"
                    b"POST /slow HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        time.sleep(4 * TIMEOUT)  # not reading: the server is blocked sending when time is up
        big = client.read_response()
        assert big.status == 200 and big.body == b"x" * BIG
        assert client.read_response().status == 504
        client.assert_closed()

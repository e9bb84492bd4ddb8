"""Connections over real sockets: persistence, pipelining, timeouts, disconnects, concurrency, stop."""

import os
import select
import socket
import threading
import time

import gevent
import pytest

from greenserve import _accel
from tests.conftest import Client, ServerThread, echo_app, hello_app, most_at_once, wait_until


def path_app(environ, start_response):
    body = environ["PATH_INFO"].encode("latin-1")
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


# --- persistent connections (RFC 9112 §9.3) -------------------------------------------------------


def test_http11_keeps_the_connection_open_by_default(serve, client_for):
    client = client_for(serve(path_app))
    for i in range(5):
        response = client.get("/%d" % i)
        assert response.body == b"/%d" % i
        assert response.header("Connection") is None


def test_connection_close_from_the_client_is_honoured(serve, client_for):
    client = client_for(serve(hello_app))
    response = client.get("/", headers=[("Connection", "close")])
    assert response.status == 200
    assert response.header("Connection") == "close"
    client.assert_closed()


def test_http10_closes_unless_keep_alive_was_asked(serve, client_for):
    server = serve(hello_app)
    client = client_for(server)
    response = client.get("/", version="HTTP/1.0")
    assert response.header("Connection") == "close"
    client.assert_closed()

    client = client_for(server)
    for _ in range(3):
        response = client.get("/", version="HTTP/1.0", headers=[("Connection", "keep-alive")])
        assert response.status == 200
        assert response.header("Connection") == "keep-alive"


def test_connection_close_from_the_app_is_honoured(serve, client_for):
    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2"), ("Connection", "close")])
        return [b"ok"]

    client = client_for(serve(app))
    response = client.get("/")
    assert response.header_list("Connection") == ["close"]
    client.assert_closed()


# --- pipelining -----------------------------------------------------------------------------------


def test_100_pipelined_requests_in_one_write_are_answered_in_order_in_few_sends(serve, tmp_path):
    # Counted from outside, on a unix SOCK_SEQPACKET socket: there each send(2) of the server is
    # one record, and each recv here returns exactly one record, whichever build makes the call.
    path = str(tmp_path / "seqpacket.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(8)
    serve(path_app, listener=listener)
    with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as client:
        client.settimeout(10)
        client.connect(path)
        client.sendall(b"".join(b"GET /%d HTTP/1.1\r\nHost: t\r\n\r\n" % i for i in range(100)))
        records = []
        while sum(record.count(b"HTTP/1.1 200 OK") for record in records) < 100:
            record = client.recv(1 << 20)
            assert record, "closed after %d records" % len(records)
            records.append(record)
    received = b"".join(records)
    bodies = [part.partition(b"\r\n\r\n")[2] for part in received.split(b"HTTP/1.1 200 OK\r\n")[1:]]
    assert bodies == [b"/%d" % i for i in range(100)]  # in order
    # Every request was in the buffer after one read: the responses go out in a handful of
    # sends, not one per response.
    assert 1 <= len(records) <= 5, len(records)


def test_a_bad_request_after_good_ones_is_answered_after_them_then_closed(serve, client_for):
    client = client_for(serve(path_app))
    client.send(
        b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\n"
        b"GET /2 HTTP/1.1\r\nHost: t\r\n\r\n"
        b"GET /3 HTTP/1.1\r\nHost: t\r\nBad Header: x\r\n\r\n"
        b"GET /4 HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    assert client.read_response().body == b"/1"
    assert client.read_response().body == b"/2"
    error = client.read_response()
    assert error.status == 400
    assert error.header("Connection") == "close"
    client.assert_closed()


def test_pipelined_requests_with_bodies(serve, client_for):
    client = client_for(serve(echo_app))
    client.send(
        b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
        b"POST /b HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
        b"GET /c HTTP/1.1\r\nHost: t\r\n\r\n"
    )
    assert client.read_response().body == b"POST /a \nhello"
    assert client.read_response().body == b"POST /b \nabc"
    assert client.read_response().body == b"GET /c \n"


def test_requests_after_connection_close_are_not_answered(serve, client_for):
    client = client_for(serve(path_app))
    client.send(b"GET /1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\nGET /2 HTTP/1.1\r\nHost: t\r\n\r\n")
    assert client.read_response().body == b"/1"
    client.assert_closed()


def test_a_request_split_into_single_bytes_is_served(serve, client_for):
    client = client_for(serve(echo_app))
    for byte in b"POST /x?y=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc":
        client.send(bytes([byte]))
    assert client.read_response().body == b"POST /x y=1\nabc"


# --- timeouts -------------------------------------------------------------------------------------


def test_idle_keep_alive_connections_are_closed_after_keepalive(serve, client_for):
    client = client_for(serve(hello_app, keepalive=0.3))
    assert client.get("/").status == 200
    started = time.monotonic()
    client.assert_closed(timeout=5)
    assert time.monotonic() - started < 3


def test_slowloris_gets_408_and_does_not_block_others(serve, client_for):
    server = serve(hello_app, header_timeout=0.6)
    slow = client_for(server)
    slow.send(b"GET / HTTP/1.1\r\n")
    started = time.monotonic()
    # Trickle a byte every 0.1 s: a per-read timeout would never fire; the head deadline does.
    fast_results = []
    for byte in b"Host: x\r\nX-Slow: yes-yes-yes-yes-yes":
        if select.select([slow.sock], [], [], 0)[0]:
            break  # the 408 is here
        try:
            slow.send(bytes([byte]))
        except OSError:
            break
        with Client(server.address) as other:
            fast_results.append(other.get("/").status)
        time.sleep(0.1)
        if time.monotonic() - started > 3:
            break
    response = slow.read_response()
    assert response.status == 408
    assert time.monotonic() - started < 2.5
    assert fast_results and set(fast_results) == {200}


def test_a_connection_that_never_sends_is_closed_quietly_after_header_timeout(serve, client_for):
    server = serve(hello_app, header_timeout=0.3)
    client = client_for(server)
    client.assert_closed(timeout=5)  # no 408 for a client that sent nothing at all
    assert "Traceback" not in server.errors.getvalue()


def test_body_timeout_closes_a_stalled_upload(serve, client_for):
    server = serve(echo_app, validate=False, body_timeout=0.3)
    client = client_for(server)
    client.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nonly part")
    response = client.read_response()
    assert response.status == 408
    client.assert_closed()
    assert "Traceback" not in server.errors.getvalue()


def test_a_client_that_does_not_read_is_dropped_after_send_timeout(serve):
    big = b"x" * (64 * 1024 * 1024)

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/small":
            return hello_app(environ, start_response)
        start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(big)))])
        return [big]

    server = serve(app, send_timeout=0.3)
    sock = socket.create_connection(server.address)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    # Read nothing: 64 MB overflows the kernel's buffers, so the server's send must wait, and
    # give up after send_timeout. (A tiny SO_RCVBUF would make the kernel trickle the rest
    # through zero-window probes afterwards, slowing this test for no reason.)
    time.sleep(1.5)
    sock.settimeout(5)
    received = 0
    try:
        while True:
            data = sock.recv(1 << 20)
            if not data:
                break
            received += len(data)
    except ConnectionResetError:
        pass
    sock.close()
    assert received < len(big)
    # and the server still serves
    with Client(server.address) as client:
        assert client.get("/small").status == 200
    assert "Traceback" not in server.errors.getvalue()


# --- disconnects -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "partial",
    [
        b"GET / HT",  # mid request line
        b"GET / HTTP/1.1\r\nHost: t\r\nX-A: b",  # mid head
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc",  # mid body
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",  # mid chunk
    ],
)
def test_client_disconnects_mid_request_leave_the_server_serving(serve, client_for, partial):
    server = serve(echo_app, validate=False)
    for how in ("close", "reset"):
        sock = socket.create_connection(server.address)
        sock.sendall(partial)
        time.sleep(0.05)
        if how == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        sock.close()
    time.sleep(0.1)
    assert client_for(server).get("/").status == 200
    assert "Traceback" not in server.errors.getvalue()


def test_client_disconnect_mid_response_closes_the_iterable(serve, client_for):
    closed = threading.Event()

    class Endless:
        def __iter__(self):
            while True:
                yield b"x" * 65536

        def close(self):
            closed.set()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/small":
            return hello_app(environ, start_response)
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return Endless()

    server = serve(app)
    sock = socket.create_connection(server.address)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n")
    sock.recv(65536)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
    assert closed.wait(5)
    assert client_for(server).get("/small").status == 200
    assert "Traceback" not in server.errors.getvalue()


# --- concurrency ----------------------------------------------------------------------------------


def test_200_concurrent_slow_requests_are_served_concurrently(serve):
    def app(environ, start_response):
        began = time.monotonic()
        gevent.sleep(0.5)
        body = ("%f %f" % (began, time.monotonic())).encode()  # when it slept, on the server's clock
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    server = serve(app, validate=False)
    results = []
    lock = threading.Lock()

    def one():
        with Client(server.address, timeout=20) as client:
            response = client.get("/")
        with lock:
            results.append(response)

    threads = [threading.Thread(target=one) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert [response.status for response in results] == [200] * 200
    # Served one after the other, no two sleeps would overlap; concurrently, most of them do.
    intervals = [tuple(float(x) for x in response.body.split()) for response in results]
    assert most_at_once(intervals) >= 100


def test_spawn_bounds_concurrent_connections(serve):
    active = []
    peak = []

    def app(environ, start_response):
        active.append(1)
        peak.append(len(active))
        gevent.sleep(0.2)
        active.pop()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2"), ("Connection", "close")])
        return [b"ok"]

    from gevent.pool import Pool

    server = serve(app, validate=False, spawn=Pool(3))
    clients = [Client(server.address, timeout=20) for _ in range(9)]
    for client in clients:
        client.request(target="/")
    statuses = [client.read_response().status for client in clients]
    for client in clients:
        client.close()
    assert statuses == [200] * 9
    assert max(peak) <= 3


# --- graceful stop ------------------------------------------------------------------------------------


def test_stop_finishes_in_flight_requests_and_closes_idle_connections(serve):
    started_request = threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/slow":
            started_request.set()
            gevent.sleep(0.5)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    server = serve(app, validate=False)
    idle = Client(server.address)
    assert idle.get("/").status == 200  # now idle in keep-alive
    busy = Client(server.address)
    busy.request(target="/slow")
    assert started_request.wait(5)
    stopped_at = time.monotonic()
    server.call(gevent.spawn, server.server.stop, 5)
    idle.assert_closed(timeout=2)  # the idle one at once
    response = busy.read_response()  # the busy one finishes ...
    assert response.status == 200 and response.body == b"ok"
    assert response.header("Connection") == "close"  # ... and is told the connection ends
    busy.assert_closed()
    assert time.monotonic() - stopped_at < 3
    with pytest.raises(OSError):
        socket.create_connection(server.address, timeout=1)
    idle.close()
    busy.close()


def test_stop_answers_a_request_that_reaches_an_idle_keep_alive_connection_within_the_drain_window(serve):
    # A keep-alive client sends its next request whenever it likes; a stop that closed "idle"
    # connections at once reset requests already on their way (wrk read errors, nginx 502 for
    # POSTs on a reload). Within the drain window the request is answered, with close.
    from greenserve.connection import DRAIN_WINDOW

    server = serve(hello_app)
    client = Client(server.address)
    assert client.get("/").status == 200
    server.call(gevent.spawn, server.server.stop, 5)
    time.sleep(DRAIN_WINDOW / 3)  # the stop has begun; the connection is still quiet
    response = client.get("/", headers=[("Content-Length", "2")], body=b"hi", method="POST")
    assert response.status == 200
    assert response.header("Connection") == "close"
    client.assert_closed()
    client.close()


def test_stop_closes_an_idle_connection_at_once_when_it_was_already_quiet_for_the_drain_window(serve):
    from greenserve.connection import DRAIN_WINDOW

    server = serve(hello_app, keepalive=30)
    client = Client(server.address)
    assert client.get("/").status == 200
    time.sleep(DRAIN_WINDOW + 0.2)
    server.call(gevent.spawn, server.server.stop, 5)
    client.assert_closed(timeout=DRAIN_WINDOW / 2)
    client.close()


def test_stop_answers_a_connection_whose_first_request_is_still_on_its_way(serve):
    # Its client connected to send a request; closing it unanswered would fail that request
    # (a fresh connection is not retried the way a reused one is).
    server = serve(hello_app)
    fresh = Client(server.address)
    wait_until(lambda: len(server.server.connections) == 1, 5, "the accept")  # a set read from here: fine
    server.call(gevent.spawn, server.server.stop, 5)

    def refusing():
        try:
            socket.create_connection(server.address, timeout=1).close()
        except OSError:
            return True
        return False

    wait_until(refusing, 5, "the stop to begin")  # the listener is closed: stopping now
    fresh.request(target="/")
    response = fresh.read_response()
    assert response.status == 200
    assert response.header("Connection") == "close"
    fresh.assert_closed()
    fresh.close()


def test_stop_closes_requests_that_outlive_the_graceful_timeout(serve):
    def app(environ, start_response):
        gevent.sleep(30)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    server = serve(app, validate=False)
    client = Client(server.address)
    client.request(target="/")
    time.sleep(0.2)
    started = time.monotonic()
    server.call(gevent.spawn, server.server.stop, 0.5)
    with pytest.raises((EOFError, ConnectionResetError)):
        client.read_response()
    assert time.monotonic() - started < 4
    assert "graceful timeout" in server.errors.getvalue()
    client.close()


# --- a full pool makes room (slowloris, idle keep-alive) -------------------------------------------


def _pool(size):
    from gevent.pool import Pool

    return Pool(size)


def test_a_full_pool_closes_idle_keep_alive_connections_to_let_a_new_client_in(serve):
    server = serve(hello_app, validate=False, spawn=_pool(3), keepalive=30)
    idle = [Client(server.address) for _ in range(3)]
    for client in idle:
        assert client.get("/").status == 200
    newcomer = Client(server.address, timeout=3)  # keepalive is 30 s: only making room lets it in
    assert newcomer.get("/").status == 200
    closed = 0
    for client in idle:
        try:
            client.assert_closed(timeout=0.5)
            closed += 1
        except AssertionError:
            pass
    assert closed >= 1
    assert "connection pool full: 3/3 connections in use" in server.errors.getvalue()
    for client in idle + [newcomer]:
        client.close()


def test_a_full_pool_tells_heads_trickling_past_the_grace_408_and_lets_new_clients_in(serve):
    from greenserve.server import PRESSURE_GRACE

    server = serve(hello_app, validate=False, spawn=_pool(3), header_timeout=60)
    slow = [Client(server.address, timeout=10) for _ in range(3)]
    for client in slow:
        client.send(b"GET / HTTP/1.1\r\nHo")
    wait_until(lambda: len(server.server.connections) == 3, 5, "three connections")
    newcomer = Client(server.address, timeout=PRESSURE_GRACE + 4)  # header_timeout is 60 s
    assert newcomer.get("/").status == 200
    refused = 0
    for client in slow:
        try:
            response = client.read_response()
        except (OSError, EOFError):
            continue
        assert response.status == 408
        refused += 1
    assert refused >= 1
    for client in slow + [newcomer]:
        client.close()


def test_a_full_pool_never_interrupts_a_request_in_progress(serve):
    started = threading.Event()

    def app(environ, start_response):
        started.set()
        gevent.sleep(2)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    server = serve(app, validate=False, spawn=_pool(1))
    busy = Client(server.address)
    busy.request(target="/")
    assert started.wait(5)
    waiting = Client(server.address)
    waiting.request(target="/")  # queued in the backlog until the busy request ends
    response = busy.read_response()
    assert response.status == 200 and response.body == b"ok"
    assert waiting.read_response().status == 200
    busy.close()
    waiting.close()


def test_a_greenlet_still_waiting_on_the_socket_when_the_connection_ends_is_woken():
    # The connection closes its socket directly only when nothing waits on it
    # (Connection.close_plain); otherwise gevent's close, which wakes the waiters. An
    # application greenlet still reading wsgi.input must not be left waiting forever.
    results = []

    def app(environ, start_response):
        def reader():
            try:
                environ["wsgi.input"].read()
                results.append("read")
            except BaseException as exc:
                results.append(type(exc).__name__)

        gevent.spawn(reader)
        gevent.sleep(0.1)  # the reader waits for the rest of the body
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with ServerThread(app).start() as server:
        sock = socket.create_connection(server.address)
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc")
        time.sleep(0.3)
        sock.close()
        wait_until(lambda: results, 5, "the waiting reader to be woken")
    assert results == ["ClientDisconnected"]


def _two_accepted_descriptors():
    """Two connected clients, the descriptors accepted for them (as the C socket's accept gives
    them, before any socket object), and the listener's family, type and protocol."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        clients = [socket.create_connection(listener.getsockname()) for _ in range(2)]
        accept = getattr(listener, "_sock", listener)._accept
        (fd1, _), (fd2, _) = accept(), accept()
        return clients, (fd1, fd2), (int(listener.family), int(listener.type), listener.proto)


def test_an_accepted_socket_is_what_gevents_constructor_makes():
    # connection.accepted_socket makes gevent's socket without running its constructor (a
    # cost per connection): every slot of the class must hold what the constructor puts there,
    # and the socket must work as gevent's. A gevent that adds a slot fails here.
    from gevent.socket import socket as GeventSocket

    from greenserve.connection import accepted_socket, made_watchers

    hub = gevent.get_hub()
    clients, (fd1, fd2), (family, kind, proto) = _two_accepted_descriptors()
    ours = accepted_socket(family, kind, proto, fd1, hub)
    theirs = GeventSocket(family, kind, proto, fd2)
    assert isinstance(ours, GeventSocket)
    # Its watchers are made when something first asks for them (below, the slot comparison).
    assert made_watchers(ours) == (None, None)
    slots = set()
    for klass in GeventSocket.__mro__:
        found = klass.__dict__.get("__slots__", ())
        slots.update((found,) if isinstance(found, str) else found)
    slots.discard("__weakref__")
    assert slots, "gevent's socket has no slots: accepted_socket must use the constructor"
    for name in sorted(slots):
        mine, gevents = getattr(ours, name), getattr(theirs, name)
        if name == "_sock":
            assert type(mine) is type(gevents)
            assert (mine.fileno(), mine.gettimeout()) == (fd1, gevents.gettimeout())
            assert (mine.family, mine.type, mine.proto) == (gevents.family, gevents.type, gevents.proto)
        elif name in ("_read_event", "_write_event"):
            assert type(mine) is type(gevents)
            assert (mine.fd, mine.events, mine.active) == (fd1, gevents.events, gevents.active)
        else:
            assert mine == gevents, name
    assert made_watchers(ours) == (ours._read_event, ours._write_event)
    try:
        ours.sendall(b"ping")
        assert clients[0].recv(4) == b"ping"
        clients[0].sendall(b"pong")
        assert ours.recv(4) == b"pong"
        ours.close()
        assert clients[0].recv(4) == b""
    finally:
        theirs.close()
        for client in clients:
            client.close()


def test_an_accepted_socket_closed_with_a_file_still_open_keeps_waiting_on_it():
    # The standard library's idiom: f = sock.makefile(); sock.close(); f.read(). gevent keeps
    # the descriptor (and its watchers) while a file is open; the accepted socket, whose
    # watchers are made when first needed, must make them then too. A plain close makes none.
    from greenserve.connection import accepted_socket, made_watchers

    hub = gevent.get_hub()
    clients, (fd1, fd2), (family, kind, proto) = _two_accepted_descriptors()
    try:
        kept = accepted_socket(family, kind, proto, fd1, hub)
        reader = kept.makefile("rb")
        kept.close()
        gevent.spawn_later(0.05, clients[0].sendall, b"hello")
        assert reader.read(5) == b"hello"
        reader.close()
        closed = accepted_socket(family, kind, proto, fd2, hub)
        closed.close()
        assert made_watchers(closed) == (None, None)
    finally:
        for client in clients:
            client.close()


def test_a_connection_makes_a_watcher_only_to_wait_on_it(serve, client_for):
    # gevent makes both watchers of every socket (two libev watchers, two fcntl calls); an
    # accepted socket makes each when something first waits on it. A keep-alive connection
    # waits to read its next request; a response that fits the kernel's buffer never waits.
    from greenserve.connection import made_watchers

    seen = []

    def app(environ, start_response):
        sock = environ["greenserve.socket"]  # offered with an upgrade request
        seen.append(tuple(watcher is not None for watcher in made_watchers(sock)))
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    client = client_for(serve(app))
    upgrade = [("Connection", "Upgrade"), ("Upgrade", "example/1")]
    for _ in range(2):
        assert client.get("/", headers=upgrade).status == 200
        time.sleep(0.05)  # the connection waits for the next request
    assert seen[0][1] is False
    assert seen[1] == (True, False)


def test_tcp_nodelay_is_set_on_every_connection(serve, client_for):
    # Without it a response that fits in one packet waits for the client's delayed ACK of the
    # previous one (~40 ms a keep-alive request). The compiled build sets it on the descriptor.
    def app(environ, start_response):
        sock = environ["greenserve.socket"]  # offered with an upgrade request
        body = b"%d" % sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    response = client_for(serve(app)).get("/", headers=[("Connection", "Upgrade"), ("Upgrade", "example/1")])
    assert (response.status, response.body) == (200, b"1")


def test_a_server_made_in_one_thread_and_started_in_another_serves():
    # gevent's server takes its loop (this thread's hub) when it is made; its accept loop runs
    # there, and each accepted socket must belong to that hub, not to the thread calling start().
    from greenserve import WSGIServer

    server = WSGIServer(("127.0.0.1", 0), hello_app, log=None)
    started = threading.Thread(target=server.start)
    started.start()
    started.join(10)
    try:
        def fetch():
            client = Client(("127.0.0.1", server.server_port), timeout=5)
            try:
                client.send(b"GET / HTTP/1.1\r\nHost: t\r\n")
                time.sleep(0.05)  # the head arrives in two parts: the connection waits on its socket
                client.send(b"Connection: close\r\n\r\n")
                return client.read_until_close()
            finally:
                client.sock.close()

        # This thread's hub runs the server's accept loop while the client (a thread) waits.
        result = []
        client = threading.Thread(target=lambda: result.append(fetch()))
        client.start()
        while client.is_alive():
            gevent.sleep(0.01)
        assert result and result[0].startswith(b"HTTP/1.1 200 OK"), result
    finally:
        server.stop(timeout=1)


@pytest.mark.skipif(not _accel.compiled(), reason="the compiled build's accept4 (greenserve._csys); the pure build uses the listener's own")
@pytest.mark.parametrize("family, source", [
    (socket.AF_INET, "127.0.0.1"), (socket.AF_INET, "127.10.99.100"), (socket.AF_INET, "127.255.0.250"),
    (socket.AF_INET6, "::1"),
])
def test_the_compiled_accept_gives_what_the_listeners_own_accept_gives(family, source):
    # _csys.Acceptor formats the peer's address itself (IPv4's dotted quad without inet_ntop):
    # it must be what CPython's socket module says, as getpeername() gives it, for numbers of
    # one, two and three digits; and the descriptor non-blocking and close-on-exec.
    import fcntl

    from greenserve._csys import acceptor_for

    host = "::1" if family == socket.AF_INET6 else "127.0.0.1"
    with socket.socket(family) as listener:
        try:
            listener.bind((host, 0))
        except OSError as exc:
            pytest.skip("no %s on loopback: %s" % (host, exc))
        listener.listen(4)
        listener.setblocking(False)
        accept = acceptor_for(listener)
        assert accept() is None  # nothing waiting
        with socket.socket(family) as client:
            client.bind((source, 0))
            client.connect(listener.getsockname()[:2])
            wait_until(lambda: select.select([listener], [], [], 0)[0], 5, "the connection to arrive")
            fd, address = accept()
            with socket.socket(family, socket.SOCK_STREAM | socket.SOCK_NONBLOCK, 0, fd) as accepted:
                assert address == accepted.getpeername() == client.getsockname()[: len(address)]
                assert accepted.gettimeout() == 0.0 and accepted.type == socket.SOCK_STREAM
                assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK
                assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    with pytest.raises(OSError):
        accept()  # the listener is closed: EBADF, as the listener's own accept raises
    with socket.socket(socket.AF_UNIX) as unix:
        assert acceptor_for(unix) is None  # not TCP: the listener's own accept


# --- keep-alive responses sent at the end of the loop's turn (issue 31) -----------------------


BIG = b"z" * (8 << 20)


def big_app(environ, start_response):
    body = BIG if environ["PATH_INFO"] == "/big" else b"small"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def test_a_keep_alive_response_the_kernel_cannot_take_at_once_is_sent_whole(serve, client_for):
    # The hub's send at the end of the turn takes what the socket buffer holds; the rest is
    # sent by the connection's greenlet, woken for it: the client, which reads slowly here and
    # sends its next request only once it has the whole response, is never left waiting.
    client = client_for(serve(big_app))
    client.request("GET", "/big")
    time.sleep(0.3)  # the server meets a full socket buffer
    response = client.read_response()
    assert response.status == 200 and response.body == BIG and response.header("Connection") is None
    assert client.get("/").body == b"small"


def test_a_response_to_a_client_that_closed_its_side_is_still_sent(serve):
    # The request and the client's FIN arrive together: the connection meets the end of input
    # before the hub's send at the end of the turn, and sends the response itself first.
    server = serve(big_app)
    for _ in range(20):
        with socket.create_connection(server.address, timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.shutdown(socket.SHUT_WR)
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        assert data.startswith(b"HTTP/1.1 200 OK\r\n") and data.endswith(b"\r\n\r\nsmall"), data


def test_the_responses_of_many_connections_in_one_turn_all_arrive(serve, client_for):
    server = serve(hello_app)
    clients = [client_for(server) for _ in range(50)]
    for round_ in range(3):
        for client in clients:
            client.request("GET", "/")
        for client in clients:
            assert client.read_response().status == 200

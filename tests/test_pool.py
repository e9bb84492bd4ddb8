"""The connections' greenlets (greenserve/pool.py): bounded, reused, and each connection on its own."""

import contextvars
import threading
import time

import pytest

from greenserve import pool as pool_module
from greenserve.pool import ConnectionPool
from tests.conftest import Client, ServerThread

REQUEST = b"GET / HTTP/1.0\r\n\r\n"  # one request, then the server closes: a connection each


def fetch(address, head=REQUEST):
    with Client(address) as client:
        client.send(head)
        return client.read_until_close()


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_connection_after_another_is_served_by_the_same_greenlet():
    import gevent

    seen = []

    def app(environ, start_response):
        seen.append(id(gevent.getcurrent()))
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with ServerThread(app).start() as server:
        for _ in range(3):
            assert fetch(server.address).startswith(b"HTTP/1.1 200 ")
            # The greenlet parks after the close: wait until the pool has it back.
            assert wait_for(lambda: server.server.pool.busy == 0)
    assert len(seen) == 3 and len(set(seen)) == 1, seen


def test_each_connection_starts_in_an_empty_context():
    # Flask and Werkzeug keep the request in context variables: one connection's values must
    # not be there for the next one served by the same greenlet.
    user = contextvars.ContextVar("user")
    seen = []

    def app(environ, start_response):
        seen.append(user.get(None))
        user.set(environ["QUERY_STRING"])
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with ServerThread(app).start() as server:
        for name in ("alice", "bob"):
            fetch(server.address, b"GET /?%s HTTP/1.0\r\n\r\n" % name.encode())
            assert wait_for(lambda: server.server.pool.busy == 0)
    assert seen == [None, None]


def test_at_most_idle_greenlets_stay_parked(monkeypatch):
    monkeypatch.setattr(pool_module, "IDLE", 3)
    release = threading.Event()

    def app(environ, start_response):
        import gevent

        while not release.is_set():
            gevent.sleep(0.01)
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with ServerThread(app).start() as server:
        clients = [Client(server.address) for _ in range(8)]
        for client in clients:
            client.request(target="/", headers=[("Connection", "close")])
        assert wait_for(lambda: server.server.pool.busy == 8)
        release.set()
        for client in clients:
            assert client.read_response().status == 200
            client.close()
        assert wait_for(lambda: server.server.pool.busy == 0)
        assert len(server.server.pool._idle) == 3
        assert fetch(server.address).startswith(b"HTTP/1.1 200 ")  # a parked one serves it


def test_an_exception_thrown_into_a_parked_greenlet_ends_it_and_the_next_connection_is_served():
    # A gevent.Timeout an application started and never cancelled fires later, into the
    # greenlet that started it: parked by then, it must not carry the exception into the next
    # connection it would serve.
    import gevent

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/leak":
            gevent.Timeout(0.2).start()  # never cancelled
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with ServerThread(app).start() as server:
        assert fetch(server.address, b"GET /leak HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200 ")
        assert wait_for(lambda: server.server.pool.busy == 0)
        time.sleep(0.5)  # the timeout has fired into the parked greenlet
        assert server.server.pool._idle == []  # that greenlet ended
        for _ in range(3):
            assert fetch(server.address).startswith(b"HTTP/1.1 200 ")


def test_the_bound_pauses_accepting_and_a_freed_slot_resumes_it():
    release = threading.Event()

    def app(environ, start_response):
        import gevent

        if environ["PATH_INFO"] == "/hold":
            while not release.is_set():
                gevent.sleep(0.01)
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with ServerThread(app, spawn=2).start() as server:
        holders = [Client(server.address) for _ in range(2)]
        for client in holders:
            client.request(target="/hold", headers=[("Connection", "close")])
        assert wait_for(lambda: server.server.pool.busy == 2)
        assert server.server.pool.full()
        waiting = Client(server.address)  # queued by the kernel: the pool is full
        waiting.request(target="/", headers=[("Connection", "close")])
        time.sleep(0.3)
        assert server.server.pool.busy == 2
        release.set()
        assert waiting.read_response().status == 200
        for client in holders + [waiting]:
            client.close()


def test_stop_ends_a_busy_connection_past_the_graceful_timeout_and_not_the_next_one():
    import gevent

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/forever":
            gevent.sleep(60)
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    server = ServerThread(app).start()
    stuck = Client(server.address)
    stuck.request(target="/forever")
    assert wait_for(lambda: server.server.pool.busy == 1)
    started = time.monotonic()
    server.stop(timeout=0.5)
    assert time.monotonic() - started < 4
    assert server.server.pool.busy == 0
    assert "closing 1 connection(s) still busy" in server.errors.getvalue()
    stuck.close()


def test_a_pool_needs_room_for_one_connection():
    with pytest.raises(ValueError, match="at least one connection"):
        ConnectionPool(0)


def test_no_reuse_gives_every_connection_a_new_greenlet():
    import gevent

    seen = []

    def app(environ, start_response):
        seen.append(gevent.getcurrent())  # held: a dead greenlet's id could be reused
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with ServerThread(app, reuse_greenlets=False).start() as server:
        for _ in range(3):
            assert fetch(server.address).startswith(b"HTTP/1.1 200 ")
            assert wait_for(lambda: server.server.pool.busy == 0)
        assert server.server.pool._idle == []
    assert len(set(map(id, seen))) == 3
    assert all(greenlet.dead for greenlet in seen)


def test_the_command_reuses_greenlets_unless_told_not_to(tmp_path, cli_server):
    # Each greenlet counts the connections it served.
    (tmp_path / "which.py").write_text(
        "import gevent\n"
        "def app(environ, start_response):\n"
        "    me = gevent.getcurrent()\n"
        "    me.served = getattr(me, 'served', 0) + 1\n"
        "    body = str(me.served).encode()\n"
        "    start_response('200 OK', [('Content-Length', str(len(body)))])\n"
        "    return [body]\n"
    )
    for flags, expected in (((), [b"1", b"2", b"3"]), (("--no-reuse-greenlets",), [b"1", b"1", b"1"])):
        server = cli_server("--chdir", str(tmp_path), *flags, "which:app")
        counts = []
        for _ in range(3):
            counts.append(fetch(("127.0.0.1", server.port)).rpartition(b"\r\n\r\n")[2])
            time.sleep(0.1)  # the greenlet has parked (or ended)
        server.stop()
        assert counts == expected, flags

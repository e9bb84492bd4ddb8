"""Server-sent events through the real CLI: examples/sse_clock.py, streamed as produced, no leak.

A streaming body is written chunk by chunk as the application yields it; a client that goes away
is noticed at the next write, the response's ``close()`` runs, and its greenlet and socket are
freed. ``environ["greenserve.stopping"]`` lets a stream end itself when the server stops.
Loopback only, every wait bounded.
"""

import os
import resource
import selectors
import signal
import socket
import struct
import time

import pytest

from tests.conftest import children_of, wait_until

requests = pytest.importorskip("requests", reason="requests is not installed")
pytest.importorskip("flask", reason="flask is not installed")

WAIT = 10


@pytest.fixture
def clock_server(cli_server):
    return lambda *args: cli_server("--chdir", "examples", *args, "sse_clock:app")


def _events(lines):
    """Parse text/event-stream lines into dicts, one per event (a blank line ends an event)."""
    event = {}
    for line in lines:
        if not line:
            if event:
                yield event
            event = {}
            continue
        field, _, value = line.partition(": ")
        event[field] = value


def _stats(server):
    return requests.get(server.url + "/stats", timeout=WAIT).json()


def test_events_arrive_as_they_are_produced(clock_server):
    server = clock_server()
    with requests.get(server.url + "/clock?interval=0.05", stream=True, timeout=WAIT) as response:
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["Transfer-Encoding"] == "chunked"
        assert response.headers["Cache-Control"] == "no-cache"
        events = _events(response.iter_lines(decode_unicode=True))
        assert next(events) == {"retry": "2000"}
        # The stream never ends: each event read here was sent before the next one was made.
        ticks = [next(events) for _ in range(3)]
    assert [tick["id"] for tick in ticks] == ["1", "2", "3"]
    assert all(tick["event"] == "tick" for tick in ticks)
    wait_until(lambda: _stats(server)["open"] == 0, WAIT, "the stream's close() to run")
    assert _stats(server)["closed"] == 1


def test_last_event_id_resumes_the_count(clock_server):
    server = clock_server()
    headers = {"Last-Event-ID": "41"}
    with requests.get(server.url + "/clock?interval=0.05", headers=headers, stream=True, timeout=WAIT) as response:
        events = _events(response.iter_lines(decode_unicode=True))
        next(events)  # retry
        assert next(events)["id"] == "42"


def test_invalid_interval_is_a_400(clock_server):
    server = clock_server()
    response = requests.get(server.url + "/clock?interval=0", timeout=WAIT)
    assert response.status_code == 400
    assert "interval" in response.text


def test_term_ends_open_streams_through_the_stopping_event(clock_server):
    # Streams that wait on environ["greenserve.stopping"] end themselves with a last event; the
    # stop does not wait for the graceful timeout (60 s here, beyond the test's own limit).
    server = clock_server("--graceful-timeout", "60")
    responses = [
        requests.get(server.url + "/clock?interval=30", stream=True, timeout=WAIT) for _ in range(3)
    ]
    streams = [_events(response.iter_lines(decode_unicode=True)) for response in responses]
    for events in streams:
        assert next(events) == {"retry": "2000"}
        assert next(events)["event"] == "tick"
    server.process.send_signal(signal.SIGTERM)
    for events, response in zip(streams, responses):
        assert next(events) == {"event": "bye", "data": "server stopping"}
        assert list(events) == []  # and the stream ended
        response.close()
    out, err = server.process.communicate(timeout=30)
    assert server.process.returncode == 0, err
    assert "graceful timeout" not in err and "Traceback" not in err, err


# --- 1,000 clients that vanish mid-stream -----------------------------------------------------------


def _fds(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def _rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for pid %d" % pid)


def _vanishing_clients(port, count, ticks=2, timeout=60):
    """``count`` clients each read ``ticks`` events, then go away, half with a FIN, half with a
    reset (SO_LINGER 0), without reading further. Returns when all are gone."""
    selector = selectors.DefaultSelector()
    request = b"GET /clock?interval=0.2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    received = {}
    try:
        for n in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
            sock.sendall(request)
            sock.setblocking(False)
            received[sock] = b""
            selector.register(sock, selectors.EVENT_READ, n)
        deadline = time.monotonic() + timeout
        pending = len(received)
        while pending:
            assert time.monotonic() < deadline, "%d of %d clients still waiting for events" % (pending, count)
            for key, _ in selector.select(timeout=1):
                sock = key.fileobj
                data = sock.recv(65536)
                assert data, "the server closed a stream"
                received[sock] += data
                if received[sock].count(b"event: tick") >= ticks:
                    selector.unregister(sock)
                    pending -= 1
    finally:
        for n, sock in enumerate(received):
            if n % 2:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
        selector.close()
    for data in received.values():
        assert data.startswith(b"HTTP/1.1 200 OK\r\n"), data[:200]


def test_a_thousand_clients_vanish_mid_stream_and_leave_nothing_behind(clock_server):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        if hard != resource.RLIM_INFINITY and hard < 1200:
            pytest.skip("the open-file limit (hard %d) cannot hold 1,000 client sockets" % hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (1200, hard))
    # A thousand connections at once keep one worker's CPU saturated for far longer than
    # overload control's interval: it would rightly answer part of the storm 503 (clients that
    # retry, as EventSource does, come back; tests/overload). This test is about what vanishing
    # streams leave behind, so every client must be served.
    server = clock_server("--worker-connections", "1100", "--no-overload-control")
    # The application's first request: lazily built things are built, and the worker is up
    # (the master binds the port before it forks).
    _stats(server)
    (worker,) = children_of(server.process.pid)
    fds_before = _fds(worker)

    def round_of(count):
        _vanishing_clients(server.port, count)
        wait_until(lambda: _stats(server)["open"] == 0, 30, "every stream's close() to run")
        # The stats request's own connection is closed (requests.get does not keep it).
        wait_until(lambda: _fds(worker) == fds_before, 30, "the worker's descriptors to return to their number")

    round_of(1000)
    rss_after_first = _rss_kib(worker)
    round_of(1000)
    rss_after_second = _rss_kib(worker)
    stats = _stats(server)
    assert stats == {"open": 0, "closed": 2000, "events": stats["events"]}
    assert stats["events"] >= 2000 * 2
    # Memory the first thousand made the process grow by is reused by the second: no leak.
    assert rss_after_second <= rss_after_first * 1.10, (rss_after_first, rss_after_second)
    code, out, err = server.stop()
    assert code == 0 and "Traceback" not in err, err

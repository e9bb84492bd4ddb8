"""--statsd-host end to end: real workers and a real master send to a statsd-protocol receiver.

The receiver is a datagram socket in the test (UDP on 127.0.0.1, or a unix datagram socket)
that keeps every datagram; the lines are parsed as a statsd server parses them
(``name:value|type``, then ``|@rate`` and ``|#tags`` sections). Each test starts
`python -m greenserve` in a subprocess (tests/process/test_master.py's Master) and stops it by PID.
"""

import os
import signal
import socket
import time

import pytest

from tests.conftest import free_port, wait_until
from tests.process import test_master

master = test_master.master  # the fixture: a master started in its own session, killed at the end


@pytest.fixture
def receiver():
    """A UDP Receiver on 127.0.0.1, closed at the end."""
    made = Receiver()
    yield made
    made.close()

PAYLOAD = 1432  # greenserve.observe.statsd.PAYLOAD: no datagram may be larger


class Receiver:
    """A statsd server's receiving end: every datagram that arrives, kept."""

    def __init__(self, family=socket.AF_INET, path=None):
        self.sock = socket.socket(family, socket.SOCK_DGRAM)
        self.sock.bind(path or ("127.0.0.1", 0))
        self.sock.setblocking(False)
        self.datagrams = []

    @property
    def address(self):
        return "127.0.0.1:%d" % self.sock.getsockname()[1]

    def drain(self):
        while True:
            try:
                self.datagrams.append(self.sock.recv(65536))
            except BlockingIOError:
                return self

    def lines(self):
        self.drain()
        return [parse(line) for datagram in self.datagrams for line in datagram.decode("ascii").split("\n")]

    def total(self, name, kind="c"):
        return sum(value for line_name, value, line_kind, _tags in self.lines() if line_name == name and line_kind == kind)

    def close(self):
        self.sock.close()


def parse(line):
    """A statsd line -> (name, value, type, tags or None)."""
    name, _, rest = line.partition(":")
    sections = rest.split("|")
    value, kind = float(sections[0]), sections[1]
    tags = None
    for section in sections[2:]:
        if section.startswith("#"):
            tags = section[1:]
        else:
            assert section.startswith("@"), line  # a sample rate: the only other section
    return name, value, kind, tags


def send_bad_request(port):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"NOT HTTP\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400 ")


def test_requests_of_two_workers_arrive_under_gunicorns_names(master, receiver):
    m = master("--workers", "2", "--statsd-host", receiver.address)
    wait_until(lambda: len(m.worker_pids()) == 2, 10, "two workers")
    for _ in range(40):
        m.get("/")  # a new connection each: the kernel spreads them over the workers
    send_bad_request(m.port)  # refused before the application: counted too
    wait_until(lambda: receiver.total("gunicorn.requests") == 41, 10, "41 requests counted")
    lines = receiver.lines()
    assert receiver.total("gunicorn.request.status.200") == 40
    assert receiver.total("gunicorn.request.status.400") == 1
    durations = [value for name, value, kind, _ in lines if name == "gunicorn.request.duration"]
    assert len(durations) == 41 and all(kind == "ms" for name, _, kind, _ in lines if name == "gunicorn.request.duration")
    assert all(0 <= value < 10000 for value in durations)
    # gunicorn's names, and overload control's (on by default): each request that reached its
    # application's door has its queue time; the 400 was refused before it.
    assert {name for name, _, _, _ in lines} <= {
        "gunicorn.requests", "gunicorn.request.status.200", "gunicorn.request.status.400",
        "gunicorn.request.duration", "gunicorn.workers", "greenserve.request.queue_time", "greenserve.loop.delay",
    }
    queue_times = [value for name, value, kind, _ in lines if name == "greenserve.request.queue_time"]
    assert len(queue_times) == 40 and all(0 <= value < 10000 for value in queue_times)
    wait_until(lambda: ("gunicorn.workers", 2.0, "g", None) in receiver.lines(), 10, "the worker gauge at 2")
    assert all(tags is None for _, _, _, tags in receiver.lines())
    assert m.stop() == 0


def test_prefix_and_dogstatsd_tags_are_on_every_line(master, receiver):
    # gunicorn's prefix rule: one dot between the prefix and the name, however it was given.
    m = master("--statsd-host", receiver.address, "--statsd-prefix", "web.", "--dogstatsd-tags", "env:test,svc:a")
    for _ in range(5):
        m.get("/")
    wait_until(lambda: receiver.total("web.gunicorn.requests") == 5, 10, "5 requests counted")
    wait_until(lambda: receiver.total("web.gunicorn.workers", "g") >= 1, 10, "the worker gauge")
    lines = receiver.lines()
    assert all(name.startswith(("web.gunicorn.", "web.greenserve.")) for name, _, _, _ in lines), lines
    assert any(name == "web.greenserve.request.queue_time" for name, _, _, _ in lines)
    assert all(tags == "env:test,svc:a" for _, _, _, tags in lines), lines
    assert receiver.total("web.gunicorn.request.status.200") == 5
    assert m.stop() == 0


def test_requests_of_one_loop_turn_share_a_datagram(master, receiver):
    m = master("--statsd-host", receiver.address)
    wait_until(lambda: receiver.total("gunicorn.workers", "g") >= 1, 10, "the worker gauge")
    # 30 pipelined requests, in one write: the worker answers them in one turn of its loop.
    with socket.create_connection(("127.0.0.1", m.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 29 + b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = b""
        while True:
            data = sock.recv(65536)
            if not data:
                break
            received += data
    assert received.count(b"HTTP/1.1 200 OK") == 30
    wait_until(lambda: receiver.total("gunicorn.requests") == 30, 10, "30 requests counted")
    receiver.drain()
    assert all(len(datagram) <= PAYLOAD for datagram in receiver.datagrams)
    timers = [datagram.count(b"|ms") for datagram in receiver.datagrams]
    assert max(timers) >= 2, receiver.datagrams  # several requests' lines in one datagram
    # Fewer datagrams than requests: the counters of a turn were summed, its lines packed.
    requests = [datagram for datagram in receiver.datagrams if b"gunicorn.requests:" in datagram]
    assert len(requests) < 30, requests
    assert m.stop() == 0


def test_an_unreachable_statsd_host_fails_no_request(master):
    closed = free_port()  # nothing listens there: each send is refused (ICMP port unreachable)
    m = master("--workers", "2", "--statsd-host", "127.0.0.1:%d" % closed)
    for _ in range(30):
        assert m.get("/").startswith("v1 ")
    wait_until(lambda: "statsd: cannot send to 127.0.0.1:%d" % closed in m.log_text(), 10, "the send error said")
    time.sleep(1.5)  # more refused sends: the master's gauge each second
    for _ in range(10):
        assert m.get("/").startswith("v1 ")
    said = [line for line in m.log_text().splitlines() if "statsd: cannot send" in line]
    assert 1 <= len(said) <= 3, said  # at most once a minute from each of the master and two workers
    assert "Traceback" not in m.log_text()
    assert m.stop() == 0


def test_a_unix_datagram_socket_receives(master, tmp_path):
    path = str(tmp_path / "statsd.sock")
    receiver = Receiver(socket.AF_UNIX, path)
    try:
        m = master("--statsd-host", "unix:" + path)
        for _ in range(10):
            m.get("/")
        wait_until(lambda: receiver.total("gunicorn.requests") == 10, 10, "10 requests counted")
        assert receiver.total("gunicorn.request.status.200") == 10
        assert m.stop() == 0
    finally:
        receiver.close()


def test_with_metrics_bind_both_sinks_count_every_request(master, receiver):
    from tests.process.test_metrics_master import requests_total, samples, scrape_text

    mport = free_port()
    m = master("--workers", "2", "--statsd-host", receiver.address, "--metrics-bind", "127.0.0.1:%d" % mport)
    wait_until(lambda: len(m.worker_pids()) == 2, 10, "two workers")
    for _ in range(20):
        m.get("/")
    wait_until(lambda: receiver.total("gunicorn.requests") == 20, 10, "20 requests in statsd")
    wait_until(lambda: requests_total(samples(scrape_text(mport))) == 20, 10, "20 requests in /metrics")
    assert m.stop() == 0


def backlogs(receiver, name="gunicorn.backlog"):
    """The gunicorn.backlog values received so far, in order (each a histogram line, as gunicorn's)."""
    found = [(value, kind) for line_name, value, kind, _ in receiver.lines() if line_name == name]
    assert all(kind == "h" for _, kind in found), found
    return [value for value, _ in found]


def test_the_backlog_rises_while_the_workers_are_stopped_and_falls_after(master, receiver, tmp_path):
    # gunicorn 24.1's --enable-backlog-metric: the connections in the kernel's accept queue, read by
    # the master once a second. The workers are stopped (SIGSTOP) so that none accepts; the kernel
    # completes the handshakes of WAITING connections and queues them; SIGCONT drains the queue.
    from tests.process.test_metrics_master import samples, scrape_text

    # A TCP listener and a unix one (Linux gives its queue through sock_diag, as `ss -xl` reads
    # it): statsd gets the sum, as gunicorn's arbiter sums; /metrics has each listener's.
    tcp_waiting, unix_waiting = 20, 7
    mport = free_port()
    unix_path = str(tmp_path / "app.sock")
    m = master("--workers", "2", "--bind", "unix:" + unix_path, "--statsd-host", receiver.address,
               "--enable-backlog-metric", "--metrics-bind", "127.0.0.1:%d" % mport)
    wait_until(lambda: len(m.worker_pids()) == 2, 10, "two workers")
    wait_until(lambda: backlogs(receiver)[-1:] == [0.0], 10, "an empty backlog")
    gauges = {'greenserve_listen_queue{listener="127.0.0.1:%d"}' % m.port: tcp_waiting,
              'greenserve_listen_queue{listener="unix:%s"}' % unix_path: unix_waiting}
    workers = m.worker_pids()
    clients = []
    try:
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        for _ in range(tcp_waiting):
            clients.append(socket.create_connection(("127.0.0.1", m.port), timeout=10))
        for _ in range(unix_waiting):
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.settimeout(10)
            client.connect(unix_path)
            clients.append(client)
        total = float(tcp_waiting + unix_waiting)
        wait_until(lambda: backlogs(receiver)[-1:] == [total], 10, "the backlog at %d" % total)
        found = samples(scrape_text(mport))
        assert {name: found[name] for name in gauges} == gauges
    finally:
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
    wait_until(lambda: backlogs(receiver)[-1:] == [0.0], 10, "the backlog back at 0")
    found = samples(scrape_text(mport))
    assert {name: found[name] for name in gauges} == dict.fromkeys(gauges, 0)
    for sock in clients:  # each was accepted: a request on it is answered
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert all(sock.recv(4096).startswith(b"HTTP/1.1 200 ") for sock in clients)
    for sock in clients:
        sock.close()
    assert m.stop() == 0


def test_without_enable_backlog_metric_no_backlog_is_sent(master, receiver):
    # Off by default, as in gunicorn: statsd gets the worker gauge and no gunicorn.backlog.
    m = master("--statsd-host", receiver.address, "--statsd-prefix", "web")
    wait_until(lambda: receiver.total("web.gunicorn.workers", "g") >= 2, 10, "two worker gauges (two seconds)")
    assert backlogs(receiver, "web.gunicorn.backlog") == []
    assert m.stop() == 0


def test_the_backlog_goes_with_the_prefix_and_tags(master, receiver):
    m = master("--statsd-host", receiver.address, "--statsd-prefix", "web", "--dogstatsd-tags", "env:test",
               "--enable-backlog-metric")
    wait_until(lambda: backlogs(receiver, "web.gunicorn.backlog"), 10, "a backlog line")
    line = [line for line in receiver.lines() if line[0] == "web.gunicorn.backlog"][0]
    assert line == ("web.gunicorn.backlog", 0.0, "h", "env:test")
    # In the datagram of the worker gauge: no datagram more a second.
    receiver.drain()
    assert all(b"web.gunicorn.workers:" in datagram for datagram in receiver.datagrams if b"backlog" in datagram)
    assert m.stop() == 0


def test_enable_backlog_metric_where_it_does_nothing_is_one_warning():
    from greenserve.settings import Config

    assert Config(enable_backlog_metric=True, statsd_host="127.0.0.1:8125").warnings() == []
    (alone,) = Config(enable_backlog_metric=True).warnings()
    assert alone.startswith("--enable-backlog-metric without --statsd-host does nothing")
    (per_worker,) = Config(enable_backlog_metric=True, statsd_host="127.0.0.1:8125", reuse_port=True, workers=2).warnings()
    assert per_worker.startswith("--enable-backlog-metric with --reuse-port sends no gunicorn.backlog")

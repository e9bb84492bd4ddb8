"""Metrics (greenserve.observe.metrics): the worker's seam and report, the master's totals, the exposition text and its endpoint.

The process model end to end (workers reporting to a real master, kill -9, a real Prometheus)
is in tests/process/test_metrics_master.py.
"""

import select
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from greenserve import listeners
from greenserve.observe import metrics
from greenserve.observe.metrics import MasterMetrics, last_report
from greenserve.observe import stats as stats_module
from greenserve.observe.stats import WorkerStats
from tests.conftest import Client, ServerThread, read_to_close


def families(text):
    """The exposition parsed by prometheus_client's own parser: {sample name and labels: value}."""
    parser = pytest.importorskip("prometheus_client.parser", reason="prometheus_client parses the exposition")
    samples = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


class _Worker:
    def __init__(self, pid, number, last_beat):
        self.pid, self.number, self.last_beat = pid, number, last_beat


def _master_with(reports, now=100.0):
    sock = socket.socket()
    master = MasterMetrics(sock)
    workers = {}
    for number, (pid, stats) in enumerate(reports, 1):
        workers[pid] = _Worker(pid, number, now - 0.5)
        master.worker_heard(pid, b"." + stats.report([]))

    class Arbiter:
        pass

    master.arbiter = Arbiter()
    master.arbiter.workers = workers
    return master


def test_requests_are_counted_by_method_and_status_class_with_a_histogram_and_bytes():
    stats = WorkerStats()
    stats.request(200, "GET", 0.003, 0, 10)
    stats.request(204, "GET", 0.02, 0, 0)
    stats.request(404, "POST", 0.2, 5, 9)
    stats.request(499, "GET", 20.0, 0, 0)  # the client left first: a 4xx, beyond the last bucket
    master = _master_with([(11, stats)])
    text = master.exposition(now=100.0).decode()
    samples = families(text)
    assert samples[("greenserve_requests_total", (("method", "GET"), ("status", "2xx")))] == 2
    assert samples[("greenserve_requests_total", (("method", "POST"), ("status", "4xx")))] == 1
    assert samples[("greenserve_requests_total", (("method", "GET"), ("status", "4xx")))] == 1
    assert samples[("greenserve_request_duration_seconds_bucket", (("le", "0.005"),))] == 1
    assert samples[("greenserve_request_duration_seconds_bucket", (("le", "0.025"),))] == 2
    assert samples[("greenserve_request_duration_seconds_bucket", (("le", "10.0"),))] == 3
    assert samples[("greenserve_request_duration_seconds_bucket", (("le", "+Inf"),))] == 4
    assert samples[("greenserve_request_duration_seconds_count", ())] == 4
    assert samples[("greenserve_request_duration_seconds_sum", ())] == pytest.approx(20.223)
    assert samples[("greenserve_request_body_bytes_total", ())] == 5
    assert samples[("greenserve_response_body_bytes_total", ())] == 19
    assert samples[("greenserve_workers", ())] == 1
    assert samples[("greenserve_heartbeat_age_seconds", (("worker", "1"),))] == pytest.approx(0.5)
    assert "# TYPE greenserve_requests_total counter\n" in text
    assert "# TYPE greenserve_request_duration_seconds histogram\n" in text
    assert text.endswith("\n")


def test_a_method_outside_the_list_is_counted_as_other_so_clients_cannot_add_series():
    stats = WorkerStats()
    for method in ("BREW", "PROPFIND", "X" * 100, None):
        stats.request(200, method, 0.0, 0, 0)
    samples = families(_master_with([(11, stats)]).exposition(now=100.0).decode())
    requests = {labels: value for (name, labels), value in samples.items() if name == "greenserve_requests_total"}
    assert requests == {(("method", "other"), ("status", "2xx")): 4}


def test_a_report_is_one_line_below_pipe_buf_with_none_of_the_arbiters_codes():
    from greenserve.process import arbiter

    stats = WorkerStats()
    for method in stats_module.METHODS:
        for status in (101, 200, 302, 404, 503):
            for _ in range(3):
                stats.request(status, method, 123456.789, 10 ** 15, 10 ** 15)
    stats.requests = [10 ** 15 + 1] * len(stats.requests)  # a worker that has run for years
    stats.duration_sum = 1.2345678901234567e300
    line = stats.report([])
    assert len(line) < 4096  # PIPE_BUF on Linux: one write arrives whole
    assert line.startswith(stats_module.STATS) and line.endswith(b"\n") and line.count(b"\n") == 1
    for code in (arbiter.READY, arbiter.RECYCLING, arbiter.FAILED):
        assert code not in line


def test_the_master_takes_the_last_complete_report_among_beats():
    first, second = WorkerStats(), WorkerStats()
    first.request(200, "GET", 0.0, 0, 0)
    for _ in range(3):
        second.request(200, "GET", 0.0, 0, 0)
    data = b"R." + first.report([]) + b"." + second.report([]) + b".."
    assert last_report(data)[1] == 3  # GET 2xx
    assert last_report(b"....") is None
    assert last_report(b"." + b"S1 2 3\n") is None  # not a whole snapshot


def test_an_exited_workers_counters_stay_in_the_totals_and_its_exit_is_counted():
    stats = WorkerStats()
    for _ in range(5):
        stats.request(200, "GET", 0.01, 3, 7)
    master = _master_with([(11, stats), (12, WorkerStats())])
    before = families(master.exposition(now=100.0).decode())
    master.worker_exited(11, "crash")
    del master.arbiter.workers[11]
    after = families(master.exposition(now=100.0).decode())
    key = ("greenserve_requests_total", (("method", "GET"), ("status", "2xx")))
    assert before[key] == after[key] == 5
    assert after[("greenserve_response_body_bytes_total", ())] == 35
    assert after[("greenserve_worker_exits_total", (("reason", "crash"),))] == 1
    assert after[("greenserve_workers", ())] == 1
    # Its replacement starts from zero: the sum goes on from 5.
    replacement = WorkerStats()
    replacement.request(200, "GET", 0.01, 0, 0)
    master.worker_heard(13, replacement.report([]))
    assert families(master.exposition(now=100.0).decode())[key] == 6


def test_promtool_accepts_the_exposition(tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    stats = WorkerStats()
    stats.request(200, "GET", 0.01, 3, 7)
    stats.request(500, "other", 0.5, 0, 7)
    text = _master_with([(11, stats), (12, WorkerStats())]).exposition(now=100.0)
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr


def _hello(environ, start_response):
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body) + 5))])
    return [b"hello" + body]


def _in_hub(server, function):
    """Call function() in the server's hub; return what it returned."""
    done = threading.Event()
    result = []

    def run():
        result.append(function())
        done.set()

    server.call(run)
    assert done.wait(10)
    return result[0]


def test_the_seam_counts_each_request_of_a_real_server_and_reads_the_connection_states():
    server = ServerThread(_hello).start()
    try:
        stats = server.server.stats = WorkerStats()
        with Client(server.address) as keep_alive, Client(server.address) as quiet:
            for _ in range(3):
                assert keep_alive.get("/").status == 200
            keep_alive.request("POST", "/", body=b"12345")
            assert keep_alive.read_response().body == b"hello12345"
            with Client(server.address) as bad:
                bad.send(b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n")  # refused with 400
                assert bad.read_response().status == 400
            quiet.send(b"GET / HTTP/1.1\r\n")  # a head begun, not finished
            time.sleep(0.2)
            values = last_report(_in_hub(server, lambda: stats.report([server.server])))
        samples = families(metrics.render(values, {}, [], {}, 0.0))
        assert samples[("greenserve_requests_total", (("method", "GET"), ("status", "2xx")))] == 3
        assert samples[("greenserve_requests_total", (("method", "POST"), ("status", "2xx")))] == 1
        assert samples[("greenserve_requests_total", (("method", "other"), ("status", "4xx")))] == 1
        assert samples[("greenserve_request_body_bytes_total", ())] == 5
        # 3 x "hello", "hello12345", and the 400's short text.
        assert samples[("greenserve_response_body_bytes_total", ())] == stats.sent > 25
        assert samples[("greenserve_connections", (("state", "idle"),))] == 1
        assert samples[("greenserve_connections", (("state", "header"),))] == 1
        assert samples[("greenserve_connections", (("state", "active"),))] == 0
    finally:
        server.stop()


def test_without_metrics_the_server_has_no_stats():
    server = ServerThread(_hello).start()
    try:
        assert server.server.stats is None
    finally:
        server.stop()


class _Endpoint:
    """A MasterMetrics on a real socket, its serve() driven by a select loop in a thread as the
    arbiter's loop drives it."""

    def __init__(self):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        stats = WorkerStats()
        stats.request(200, "GET", 0.01, 0, 5)
        self.metrics = _master_with([(11, stats)])
        self.metrics.sock = sock
        self.port = sock.getsockname()[1]
        self.running = True
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self):
        while self.running:
            readable, writable, _ = select.select(self.metrics.readers(), self.metrics.writers(), [], 0.05)
            self.metrics.turn(time.monotonic(), 0, readable, writable)

    def ask(self, request):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(request)
            return read_to_close(sock)

    def close(self):
        self.running = False
        self.thread.join(5)
        self.metrics.close()


def test_the_endpoint_answers_get_and_head_and_refuses_the_rest_while_a_silent_client_waits():
    endpoint = _Endpoint()
    try:
        with socket.create_connection(("127.0.0.1", endpoint.port), timeout=5):  # says nothing
            answer = endpoint.ask(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.0 200 OK\r\n")
            assert b"Content-Type: text/plain; version=0.0.4; charset=utf-8" in head
            assert b"Content-Length: %d" % len(body) in head
            assert b'greenserve_requests_total{method="GET",status="2xx"} 1\n' in body
            head_only = endpoint.ask(b"HEAD /metrics?x=1 HTTP/1.0\r\n\r\n")
            assert head_only.startswith(b"HTTP/1.0 200 OK\r\n") and head_only.endswith(b"\r\n\r\n")
            assert endpoint.ask(b"GET / HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 404 ")
            assert endpoint.ask(b"POST /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 405 ")
    finally:
        endpoint.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the accept queue is read with Linux's TCP_INFO")
def test_the_listen_queue_counts_connections_not_yet_accepted():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(77)
        waiting = [socket.create_connection(listener.getsockname(), timeout=5) for _ in range(3)]
        try:
            text = metrics.render_listen_queues([listener])
            name = "127.0.0.1:%d" % listener.getsockname()[1]
            assert 'greenserve_listen_queue{listener="%s"} 3\n' % name in text
            assert 'greenserve_listen_queue_limit{listener="%s"} 77\n' % name in text
            listener.accept()[0].close()
            assert 'greenserve_listen_queue{listener="%s"} 2\n' % name in metrics.render_listen_queues([listener])
        finally:
            for sock in waiting:
                sock.close()
    assert metrics.render_listen_queues([listener]) == ""  # closed: nothing to say


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a unix socket's queue is read with Linux's sock_diag")
def test_a_unix_listen_queue_counts_connections_not_yet_accepted(tmp_path):
    path = str(tmp_path / "app.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen(33)
        if listeners.listen_queue(listener) is None:
            pytest.skip("no sock_diag here (netlink refused, or no unix_diag module): `ss -xl` cannot read it either")
        waiting = []
        try:
            for _ in range(4):
                client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                waiting.append(client)
                client.connect(path)
            assert listeners.listen_queue(listener) == (4, 33)
            name = "unix:%s" % path
            assert 'greenserve_listen_queue{listener="%s"} 4\n' % name in metrics.render_listen_queues([listener])
            listener.accept()[0].close()
            assert listeners.listen_queue(listener) == (3, 33)
        finally:
            for sock in waiting:
                sock.close()
    assert listeners.listen_queue(listener) is None  # closed


def test_a_scrape_that_fails_to_render_is_a_500_and_the_endpoint_serves_on(monkeypatch):
    endpoint = _Endpoint()
    try:
        def broken(now=None):
            raise ValueError("a corrupt file")

        monkeypatch.setattr(endpoint.metrics, "exposition", broken)
        answer = endpoint.ask(b"GET /metrics HTTP/1.0\r\n\r\n")
        assert answer.startswith(b"HTTP/1.0 500 ")
        assert answer.endswith(b"the metrics could not be rendered: ValueError: a corrupt file\n")
        monkeypatch.undo()
        assert endpoint.ask(b"GET /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 200 OK")
        assert endpoint.thread.is_alive()
    finally:
        endpoint.close()


NETSTAT = (
    "TcpExt: SyncookiesSent ListenOverflows ListenDrops\n"
    "TcpExt: 0 %d 7\n"
    "IpExt: InNoRoutes\n"
    "IpExt: 0\n"
)


def test_listen_overflows_is_read_from_the_tcpext_lines(tmp_path):
    netstat = tmp_path / "netstat"
    netstat.write_text(NETSTAT % 42)
    assert listeners.listen_overflows(str(netstat)) == 42
    assert listeners.listen_overflows(str(tmp_path / "absent")) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a listen queue is read with TCP_INFO (Linux)")
def test_the_listen_check_blames_drops_on_its_queue_only_when_it_had_some_waiting(tmp_path):
    netstat = tmp_path / "netstat"
    netstat.write_text(NETSTAT % 100)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(2)
    clients = []
    try:
        check = listeners.ListenQueueCheck([listener], str(netstat))
        netstat.write_text(NETSTAT % 105)  # another program's queue overflowed; ours is empty
        assert check.check(10.0) is None
        assert check.overflows == 0
        assert check.check(10.5) is None  # (not a second since the last look)
        for _ in range(2):  # two queued: the queue is at its limit
            clients.append(socket.create_connection(listener.getsockname(), timeout=5))
        netstat.write_text(NETSTAT % 109)
        message = check.check(11.0)
        port = listener.getsockname()[1]
        assert "127.0.0.1:%d has 2 connection(s) waiting to be accepted, its limit 2" % port in message
        assert "the kernel dropped 4 connection attempt(s)" in message
        assert "--backlog" in message and "net.core.somaxconn" in message and "--workers" in message
        assert check.overflows == 4
        netstat.write_text(NETSTAT % 110)
        assert check.check(12.0) is None  # said once a minute at most, still counted
        assert check.overflows == 5
        assert check.check(11.0 + check.WARNING_INTERVAL) is not None
    finally:
        for client in clients:
            client.close()
        listener.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a unix socket's queue is read with sock_diag (Linux)")
def test_the_listen_check_says_a_full_unix_queue_and_blames_it_for_no_tcp_drop(tmp_path):
    netstat = tmp_path / "netstat"
    netstat.write_text(NETSTAT % 100)
    path = str(tmp_path / "app.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    clients = []
    try:
        if listeners.listen_queue(listener) is None:
            pytest.skip("no sock_diag here (netlink refused, or no unix_diag module)")
        check = listeners.ListenQueueCheck([listener], str(netstat))
        assert check.listeners == [listener]
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        clients.append(client)
        client.connect(path)
        netstat.write_text(NETSTAT % 107)  # a TCP queue overflowed somewhere: not this unix socket's
        message = check.check(10.0)
        assert "unix:%s has 1 connection(s) waiting to be accepted, its limit 1" % path in message
        assert "dropped" not in message
        assert check.overflows == 0
    finally:
        for client in clients:
            client.close()
        listener.close()


def test_server_stats_takes_a_sink_or_none_and_says_so_otherwise():
    from greenserve import WSGIServer

    server = WSGIServer(("127.0.0.1", 0), lambda environ, start_response: [])
    server.stats = WorkerStats()
    server.stats = None
    with pytest.raises(TypeError, match="server.stats must be a greenserve.observe.stats.Sink or None"):
        server.stats = object()  # the compiled connection would call it as a Sink: refused here, in both builds


def test_the_observer_interface_does_nothing_by_default_and_sinks_tell_each_observer():
    # stats.Sink is the one interface the connection (request) and the arbiter (the worker
    # events) call: an observer overrides what it observes, and Sinks passes each call to all.
    calls = []

    class Recorder(stats_module.Sink):
        def request(self, status, method, duration, received, sent):
            calls.append(("request", status, method, received, sent))

        def worker_heard(self, pid, data):
            calls.append(("heard", pid, data))

        def worker_exited(self, pid, reason):
            calls.append(("exited", pid, reason))

        def turn(self, now, workers, readable, writable):
            calls.append(("turn", now, workers, readable, writable))

        def readers(self):
            return [7]

        def writers(self):
            return [8]

        def forked(self):
            calls.append(("forked",))

        def close(self):
            calls.append(("close",))

    quiet = stats_module.Sink()
    assert quiet.request(200, "GET", 0.1, 0, 2) is None
    assert (quiet.readers(), quiet.writers()) == ([], [])
    for call in (lambda: quiet.worker_heard(1, b"."), lambda: quiet.worker_exited(1, "crash"),
                 lambda: quiet.turn(1.0, 2, [], []), quiet.forked, quiet.close):
        assert call() is None

    assert stats_module.combine(None, quiet) is quiet
    observer = stats_module.combine(Recorder(), quiet, Recorder())
    observer.request(201, "POST", 0.5, 3, 4)
    observer.worker_heard(11, b"\x01")
    observer.worker_exited(11, "crash")
    observer.turn(5.0, 2, [7], [])
    observer.forked()
    observer.close()
    assert (observer.readers(), observer.writers()) == ([7, 7], [8, 8])
    each = [("request", 201, "POST", 3, 4), ("heard", 11, b"\x01"), ("exited", 11, "crash"),
            ("turn", 5.0, 2, [7], []), ("forked",), ("close",)]
    assert calls == [call for call in each for _ in range(2)]

"""greenserve.observe.statsd's parts: the address and prefix rules, packing lines into datagrams, and a sink
sending to a real UDP receiver on 127.0.0.1 (errors counted and said once, never raised).

The whole path (workers, master, CLI) is tests/process/test_statsd.py.
"""

import socket

import pytest

from greenserve.observe import statsd
from greenserve.observe import stats as stats_module
from tests.entry.test_cli import assert_usage_error, run_cli


@pytest.mark.parametrize(
    "text, expected",
    [
        ("127.0.0.1:9125", (socket.AF_INET, ("127.0.0.1", 9125))),
        ("statsd.internal", (socket.AF_INET, ("statsd.internal", 8125))),  # gunicorn's default port
        ("[::1]:8125", (socket.AF_INET6, ("::1", 8125))),
        ("unix:/run/statsd.sock", (socket.AF_UNIX, "/run/statsd.sock")),
    ],
)
def test_addresses(text, expected):
    assert statsd.parse_address(text) == expected


@pytest.mark.parametrize("text", ["127.0.0.1:x", ":8125", "::1:8125", "unix:", "host:70000"])
def test_bad_addresses_are_refused(text):
    with pytest.raises(ValueError):
        statsd.parse_address(text)


def test_a_bad_address_is_one_usage_error_line():
    assert_usage_error(run_cli("--statsd-host", "127.0.0.1:x", "tests.conftest:hello_app"), "--statsd-host", "port")


def test_prefix_ends_with_one_dot_as_gunicorns():
    assert statsd.normalize_prefix("") == ""
    assert statsd.normalize_prefix("web") == "web."
    assert statsd.normalize_prefix("web..") == "web."
    assert statsd.normalize_prefix("a.b") == "a.b."


def test_tags_that_would_break_a_line_are_refused():
    assert statsd.check_tags("env:prod,svc:web") == "env:prod,svc:web"
    for bad in ("a|b", "a\nb", " a", "é"):
        with pytest.raises(ValueError):
            statsd.check_tags(bad)


def test_lines_are_packed_below_the_payload_and_split_when_larger():
    lines = ["gunicorn.request.duration:%d.000|ms" % n for n in range(200)]
    datagrams = statsd.pack(lines)
    assert len(datagrams) > 1
    assert all(len(datagram) <= statsd.PAYLOAD for datagram in datagrams)
    assert b"\n".join(datagrams).decode().split("\n") == lines  # every line, in order, whole
    assert statsd.pack(["a:1|c", "b:2|c"]) == [b"a:1|c\nb:2|c"]
    assert statsd.pack(["x" * 2000]) == [b"x" * 2000]  # too long for any datagram: sent alone


class Log:
    def __init__(self):
        self.warnings = []

    def warning(self, message):
        self.warnings.append(message)


@pytest.fixture
def receiver():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    yield sock
    sock.close()


def test_a_turns_requests_go_in_one_datagram_from_one_callback(receiver):
    scheduled = []
    sink = statsd.StatsdSink(statsd.resolve("127.0.0.1:%d" % receiver.getsockname()[1]), "app", "env:t",
                             schedule=scheduled.append)
    sink.request(200, "GET", 0.0125, 0, 2)
    sink.request(200, "GET", 0.002, 0, 2)
    sink.request(404, None, 0.0, 0, 9)
    assert scheduled == [sink.flush]  # scheduled by the turn's first request only
    scheduled.pop()()
    lines = receiver.recv(65536).decode().split("\n")
    assert sorted(lines) == sorted([
        "app.gunicorn.requests:3|c|#env:t",
        "app.gunicorn.request.status.200:2|c|#env:t",
        "app.gunicorn.request.status.404:1|c|#env:t",
        "app.gunicorn.request.duration:12.500|ms|#env:t",
        "app.gunicorn.request.duration:2.000|ms|#env:t",
        "app.gunicorn.request.duration:0.000|ms|#env:t",
    ])
    sink.request(200, "GET", 0.001, 0, 2)
    assert scheduled == [sink.flush]  # the next turn schedules again, counting from zero
    scheduled.pop()()
    assert receiver.recv(65536).decode().split("\n")[0] == "app.gunicorn.requests:1|c|#env:t"
    sink.close()


def test_send_errors_are_counted_and_said_once_never_raised():
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed.bind(("127.0.0.1", 0))
    address = statsd.resolve("127.0.0.1:%d" % closed.getsockname()[1])
    closed.close()  # nothing receives there: the kernel refuses the sends
    log = Log()
    scheduled = []
    sink = statsd.StatsdSink(address, schedule=scheduled.append, log=log)
    for _ in range(5):
        sink.request(200, "GET", 0.001, 0, 2)
        scheduled.pop()()  # the first send is refused by ICMP; the next ones see ECONNREFUSED
    assert len(log.warnings) == 1, log.warnings
    assert "statsd: cannot send to 127.0.0.1:" in log.warnings[0]
    assert sink.lost >= 1  # counted for the next line, a minute later
    sink.close()


def test_the_off_path_and_a_single_sink_add_no_wrapper():
    stats = stats_module.WorkerStats()
    assert stats_module.combine(None, None) is None
    assert stats_module.combine(stats, None) is stats
    assert stats_module.worker_stats(stats) is stats
    sink = statsd.StatsdSink(statsd.resolve("127.0.0.1:9"), schedule=lambda callback: None)
    assert stats_module.combine(None, sink) is sink
    assert stats_module.worker_stats(sink) is None
    both = stats_module.combine(stats, sink)
    assert stats_module.worker_stats(both) is stats
    both.request(200, "GET", 0.01, 0, 2)
    assert sum(stats.requests) == 1 and sink.requests == 1
    sink.close()


def test_a_host_that_does_not_resolve_is_one_usage_error_line():
    # .invalid never resolves (RFC 6761): the master says so at start, before any worker.
    result = run_cli("--bind", "127.0.0.1:0", "--statsd-host", "no-such-host.invalid:8125", "tests.conftest:hello_app")
    assert_usage_error(result, "--statsd-host no-such-host.invalid:8125: cannot resolve")


def test_http2_requests_are_a_line_of_their_own(receiver):
    scheduled = []
    sink = statsd.StatsdSink(statsd.resolve("127.0.0.1:%d" % receiver.getsockname()[1]), schedule=scheduled.append)
    sink.request(200, "GET", 0.001, 0, 2)
    sink.http2_request()
    sink.request(200, "GET", 0.001, 0, 2)
    scheduled.pop()()
    lines = receiver.recv(65536).decode().split("\n")
    assert "gunicorn.requests:2|c" in lines and "greenserve.http2.requests:1|c" in lines
    sink.request(200, "GET", 0.001, 0, 2)  # an HTTP/1.1 turn: no HTTP/2 line
    scheduled.pop()()
    assert not [line for line in receiver.recv(65536).decode().split("\n") if "http2" in line]

"""--metrics-bind end to end: real workers report to a real master, scraped over HTTP (and by a real Prometheus).

Each test starts `python -m greenserve` in a subprocess (tests/process/test_master.py's Master)
and stops it by PID.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

from tests.conftest import free_port, greenserve_command, subprocess_env, wait_until
from tests.process import test_master
from tests.process.test_master import Master

master = test_master.master  # the fixture: a master started in its own session, killed at the end


def scrape_text(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as response:
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        return response.read().decode()


def samples(text):
    """{'name{labels}': value} of every sample line."""
    found = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def requests_total(found):
    return sum(value for name, value in found.items() if name.startswith("greenserve_requests_total{"))


def counters(found):
    return {name: value for name, value in found.items()
            if name.split("{")[0].endswith(("_total", "_count", "_sum", "_bucket"))}


def send(m, count):
    for _ in range(count):
        m.get("/")  # a new connection each: the kernel spreads them over the workers


def test_requests_served_by_every_worker_sum_in_the_masters_metrics(master):
    mport = free_port()
    m = master("--workers", "2", "--metrics-bind", "127.0.0.1:%d" % mport)
    wait_until(lambda: len(m.worker_pids()) == 2, 10, "two workers")
    send(m, 40)
    wait_until(lambda: requests_total(samples(scrape_text(mport))) == 40, 10, "40 requests in the metrics")
    found = samples(scrape_text(mport))
    assert found['greenserve_requests_total{method="GET",status="2xx"}'] == 40
    assert found['greenserve_request_duration_seconds_count'] == 40
    assert found["greenserve_workers"] == 2
    assert found['greenserve_worker_connections{worker="1"}'] == 10000
    assert found['greenserve_worker_connections{worker="2"}'] == 10000
    assert 0 <= found['greenserve_heartbeat_age_seconds{worker="1"}'] < 5
    assert found['greenserve_listen_queue{listener="127.0.0.1:%d"}' % m.port] >= 0
    assert m.stop() == 0


def test_kill_9_of_a_worker_makes_no_counter_go_down(master):
    mport = free_port()
    m = master("--workers", "2", "--metrics-bind", "127.0.0.1:%d" % mport)
    wait_until(lambda: len(m.worker_pids()) == 2, 10, "two workers")
    send(m, 30)
    wait_until(lambda: requests_total(samples(scrape_text(mport))) == 30, 10, "30 requests in the metrics")
    last = counters(samples(scrape_text(mport)))
    os.kill(m.worker_pids()[0], signal.SIGKILL)
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        now = counters(samples(scrape_text(mport)))
        for name, value in last.items():
            assert now.get(name, 0) >= value, "%s went from %s to %s" % (name, value, now.get(name))
        last = now
        time.sleep(0.1)
    assert last['greenserve_worker_exits_total{reason="crash"}'] == 1
    wait_until(lambda: len(m.worker_pids()) == 2, 10, "the replacement")
    send(m, 10)
    wait_until(lambda: requests_total(samples(scrape_text(mport))) == 40, 10, "40 requests in the metrics")
    assert m.stop() == 0


def test_a_worker_stopped_between_reports_sends_its_last_counts(master):
    mport = free_port()
    # --timeout 0: one report a second, so the requests below are not reported before the TTOU.
    m = master("--workers", "2", "--timeout", "0", "--metrics-bind", "127.0.0.1:%d" % mport)
    wait_until(lambda: len(m.worker_pids()) == 2, 10, "two workers")
    send(m, 20)
    m.process.send_signal(signal.SIGTTOU)
    wait_until(lambda: len(m.worker_pids()) == 1, 10, "one worker fewer")
    found = samples(scrape_text(mport))
    assert found['greenserve_worker_exits_total{reason="scale_down"}'] == 1
    wait_until(lambda: requests_total(samples(scrape_text(mport))) == 20, 5, "20 requests in the metrics")
    assert m.stop() == 0


def test_a_recycled_worker_is_counted_by_its_reason_and_its_requests_stay(master):
    mport = free_port()
    m = master("--max-requests", "5", "--metrics-bind", "127.0.0.1:%d" % mport)
    send(m, 12)

    def recycled():
        found = samples(scrape_text(mport))
        return found['greenserve_worker_exits_total{reason="max_requests"}'] >= 1 and requests_total(found) == 12

    wait_until(recycled, 15, "a worker recycled after --max-requests, and 12 requests in the metrics")
    assert m.stop() == 0


def test_metrics_over_a_unix_socket(master, tmp_path):
    path = str(tmp_path / "metrics.sock")
    m = master("--metrics-bind", "unix:" + path)
    send(m, 3)

    def scrape():
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            sock.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return data.decode()
                data += chunk

    wait_until(lambda: 'greenserve_requests_total{method="GET",status="2xx"} 3\n' in scrape(), 10, "3 requests")
    assert m.stop() == 0
    assert not os.path.exists(path)  # removed when the master stops


def tls_client_hello():
    """The first flight of a real TLS client: its ClientHello record."""
    import ssl

    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        client.do_handshake()
    return outgoing.read()


@pytest.mark.parametrize("first_bytes", [tls_client_hello(), b"GET /\r\n", b"GET /metrics\r\n"],
                         ids=["tls-client-hello", "http-0.9", "http-0.9-metrics"])
def test_what_cannot_be_an_http_1_request_is_answered_400_at_once(master, first_bytes):
    # A scraper pointed at https://, or an HTTP/0.9 line, sends nothing more: waiting for the end
    # of a head held each such connection for 5 s (a found fault).
    mport = free_port()
    m = master("--metrics-bind", "127.0.0.1:%d" % mport)
    with socket.create_connection(("127.0.0.1", mport), timeout=5) as sock:
        sock.sendall(first_bytes)
        began = time.monotonic()
        sock.settimeout(1)
        answer = b""
        while True:
            chunk = sock.recv(65536)  # socket.timeout after 1 s: the fault
            if not chunk:
                break
            answer += chunk
        assert time.monotonic() - began < 1
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 400 Bad Request\r\n") and b"Connection: close" in head
    assert body.startswith(b"400 Bad Request: not an HTTP")
    assert samples(scrape_text(mport))["greenserve_workers"] == 1
    assert m.stop() == 0


def test_a_metrics_address_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        m = Master(tmp_path, "--metrics-bind", "127.0.0.1:%d" % port)
        assert m.process.wait(timeout=20) == 2
    lines = m.log_text().strip().splitlines()
    assert lines[-1].startswith("greenserve: error: --metrics-bind 127.0.0.1:%d: " % port), lines
    assert "Traceback" not in m.log_text()


def test_promtool_accepts_what_the_master_serves(master):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    mport = free_port()
    m = master("--workers", "2", "--metrics-bind", "127.0.0.1:%d" % mport)
    send(m, 5)
    wait_until(lambda: requests_total(samples(scrape_text(mport))) == 5, 10, "5 requests in the metrics")
    text = scrape_text(mport).encode()
    result = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert m.stop() == 0


def _query(port, expression):
    url = "http://127.0.0.1:%d/api/v1/query?%s" % (port, urllib.parse.urlencode({"query": expression}))
    with urllib.request.urlopen(url, timeout=10) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    result = answer["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_a_real_prometheus_sees_every_request_and_no_reset_after_kill_9(master, tmp_path):
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus is not installed (Debian: apt-get install prometheus)")
    mport, pport = free_port(), free_port()
    m = master("--workers", "4", "--metrics-bind", "127.0.0.1:%d" % mport)
    wait_until(lambda: len(m.worker_pids()) == 4, 15, "four workers")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: greenserve\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % mport
    )
    log = open(tmp_path / "prometheus.log", "w")
    server = subprocess.Popen(
        [prometheus, "--config.file=%s" % config, "--storage.tsdb.path=%s" % (tmp_path / "data"),
         "--web.listen-address=127.0.0.1:%d" % pport],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        send(m, 50)

        def sums_to(expected):
            try:
                return _query(pport, "sum(greenserve_requests_total)") == expected
            except OSError:
                return False  # Prometheus not listening yet

        wait_until(lambda: sums_to(50), 60, "Prometheus to see 50 requests")
        os.kill(m.worker_pids()[0], signal.SIGKILL)
        wait_until(lambda: len(m.worker_pids()) == 4, 15, "the replacement")
        send(m, 30)
        wait_until(lambda: sums_to(80), 30, "Prometheus to see 80 requests")
        time.sleep(1.5)  # another scrape or so, after the kill
        assert _query(pport, "sum(resets(greenserve_requests_total[5m]))") == 0
        assert _query(pport, 'greenserve_worker_exits_total{reason="crash"}') == 1
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)
        log.close()
    assert m.stop() == 0


MULTIPROCESS_APP = '''
import os

from prometheus_client import Counter, Gauge

HITS = Counter("app_hits", "Requests the application saw.")
SERVED = Gauge("app_served_by_live_workers", "Requests served by the workers alive now.", multiprocess_mode="livesum")


def app(environ, start_response):
    HITS.inc()
    SERVED.inc()
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


def test_application_metrics_of_every_worker_merge_and_a_killed_workers_live_gauge_leaves(tmp_path):
    pytest.importorskip("prometheus_client", reason="--prometheus-multiproc-dir needs prometheus_client")
    (tmp_path / "promapp.py").write_text(MULTIPROCESS_APP)
    directory = tmp_path / "prom"
    directory.mkdir()
    (directory / "counter_999999.db").write_bytes(b"a previous run's")
    mport = free_port()
    m = Master(tmp_path, "--workers", "2", "--metrics-bind", "127.0.0.1:%d" % mport,
               "--prometheus-multiproc-dir", str(directory), app="promapp:app")
    try:
        m.wait_ready()
        assert not (directory / "counter_999999.db").exists()
        wait_until(lambda: len(m.worker_pids()) == 2, 10, "two workers")
        served = {}
        for _ in range(30):
            pid = int(m.get("/"))
            served[pid] = served.get(pid, 0) + 1
        found = samples(scrape_text(mport))
        assert found["app_hits_total"] == 30
        assert found["app_served_by_live_workers"] == 30
        victim = max(served, key=served.get)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: victim not in m.worker_pids() and len(m.worker_pids()) == 2, 10, "the replacement")
        wait_until(lambda: samples(scrape_text(mport))["app_served_by_live_workers"] == 30 - served[victim], 10,
                   "the killed worker's share to leave the live gauge")
        assert samples(scrape_text(mport))["app_hits_total"] == 30  # a counter keeps it
        assert m.stop() == 0
    finally:
        if m.process.poll() is None:
            os.killpg(m.process.pid, signal.SIGKILL)
            m.process.wait(timeout=5)


def test_prometheus_multiproc_dir_without_metrics_bind_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run(
        greenserve_command("--prometheus-multiproc-dir", str(tmp_path), "app:app"),
        capture_output=True, text=True, timeout=30, env=subprocess_env(),
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "greenserve: error: --prometheus-multiproc-dir merges the application's metrics into the master's "
        "/metrics: it needs --metrics-bind ADDRESS"
    ]


RUN_WSGI = '''
import sys
import greenserve
from greenserve import WSGIServer


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"ok"]


sys.exit(greenserve.run(lambda listener: WSGIServer(listener, app, log=None), bind="127.0.0.1:%d", workers=2,
                        metrics_bind="127.0.0.1:%d"))
'''


def test_greenserve_run_serves_the_metrics_of_its_wsgi_servers(tmp_path):
    port, mport = free_port(), free_port()
    script = tmp_path / "run_wsgi.py"
    script.write_text(RUN_WSGI % (port, mport))
    log = tmp_path / "error.log"
    process = subprocess.Popen(
        [sys.executable, str(script)], env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=open(log, "w"),
        start_new_session=True,
    )
    try:
        wait_until(lambda: "listening on" in log.read_text() or process.poll() is not None, 20, "the master to serve")
        for _ in range(7):
            with urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=10) as response:
                assert response.read() == b"ok"
        wait_until(lambda: requests_total(samples(scrape_text(mport))) == 7, 10, "7 requests in the metrics")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)

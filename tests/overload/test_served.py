"""Overload control served: the greenserve command under more load than its one worker can serve.

Real processes on 127.0.0.1, not timed: a CPU-bound view under a burst of clients that never
stops (each asks again as soon as it is answered) gets some requests answered 503 with
Retry-After and a closed connection, keeps answering its health check, says so once in the
error log, marks the access log and counts it in /metrics; the same with --no-overload-control
sheds nothing; an I/O-bound view with 5,000 requests waiting on I/O at once sheds nothing; a
trusted proxy's old X-Request-Start is shed, an untrusted peer's is not. (The law itself, turn by
turn: test_law.py; the rates: bench/overload.py and docs/performance.md.)
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

from tests.conftest import Client, ROOT, free_port, subprocess_env, wait_until

APPS = "tests.overload.apps"
BURST_SECONDS = 3.0
CLIENTS = 32


def burst(port, seconds=BURST_SECONDS, clients=CLIENTS):
    """CLIENTS threads asking GET / again as soon as answered, for ``seconds``, while another asks
    GET /health every 50 ms. Returns (responses of /, responses of /health, failures)."""
    answers, health, failures = [], [], []
    stop = threading.Event()

    def client():
        while not stop.is_set():
            try:
                with Client(("127.0.0.1", port), timeout=30) as connection:
                    while not stop.is_set():
                        response = connection.get("/")
                        answers.append(response)
                        if response.header("Connection") == "close":
                            break
            except Exception as exc:  # any failure is the test's failure
                failures.append(repr(exc))

    def checker():
        while not stop.is_set():
            try:
                with Client(("127.0.0.1", port), timeout=30) as connection:
                    health.append(connection.get("/health"))
            except Exception as exc:
                failures.append("health: %r" % exc)
            time.sleep(0.05)

    threads = [threading.Thread(target=client) for _ in range(clients)] + [threading.Thread(target=checker)]
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join(60)
    return answers, health, failures


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as response:
        return response.read().decode()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError("%s is not in /metrics:\n%s" % (name, text))


def test_a_cpu_bound_view_under_a_burst_sheds_and_keeps_its_health_check(cli_server, tmp_path):
    metrics_port = free_port()
    # (The access log to a file: a pipe nobody reads until the end would fill and block the worker.)
    access = tmp_path / "access.log"
    server = cli_server("%s:cpu_app" % APPS, "--health-path", "/health", "--access-log", str(access),
                     "--metrics-bind", "127.0.0.1:%d" % metrics_port)
    answers, health, failures = burst(server.port)
    assert failures == []
    statuses = {response.status for response in answers}
    assert statuses <= {200, 503}, statuses
    shed = [response for response in answers if response.status == 503]
    served = [response for response in answers if response.status == 200]
    assert shed and served, (len(shed), len(served))
    for response in shed:
        assert response.header("Retry-After") == "1"
        assert response.header("Connection") == "close"
        assert response.body == b"Service Unavailable\n"
    # The health check was answered every time, in the middle of the overload.
    assert health and {response.status for response in health} == {200}
    # Once the burst is over, a request is served at once.
    time.sleep(0.5)
    with Client(("127.0.0.1", server.port)) as client:
        assert client.get("/").status == 200
    # (The worker reports its counters to the master once a heartbeat.)
    wait_until(lambda: metric(metrics(metrics_port), "greenserve_queue_time_seconds_count") > len(answers), 10,
               "every request counted in /metrics")
    text = metrics(metrics_port)
    assert metric(text, 'greenserve_requests_shed_total{reason="overload"}') == len(shed)
    assert metric(text, "greenserve_loop_delay_seconds_count") > 0
    code, out, err = server.stop()
    assert code == 0
    warnings = [line for line in err.splitlines() if "overload:" in line]
    # One line per 10 s while shedding: a 3 s burst says it once.
    assert len(warnings) == 1 and "[WARNING]" in warnings[0], err
    assert "answered 503" in warnings[0] and "--workers" in warnings[0]
    log = access.read_text().splitlines()
    shed_lines = [line for line in log if '" 503 ' in line]
    assert len(shed_lines) == len(shed)
    assert all('shed="overload: queued' in line for line in shed_lines)
    assert not any("shed=" in line for line in log if '" 200 ' in line)


def test_no_overload_control_admits_everything(cli_server):
    server = cli_server("%s:cpu_app" % APPS, "--no-overload-control")
    answers, health, failures = burst(server.port, seconds=2.0)
    assert failures == []
    assert answers and {response.status for response in answers} == {200}
    assert {response.status for response in health} == {200}
    code, out, err = server.stop()
    assert "overload:" not in err


def test_five_thousand_requests_waiting_on_io_are_no_load(cli_server, tmp_path):
    # 5,000 at once in the application, each waiting 4 s on I/O: the worker's CPU is idle, and
    # nothing is shed. The clients connect at 1,000 a second (a real arrival, not one poll).
    access = tmp_path / "access.log"
    server = cli_server("%s:io_app" % APPS, "--worker-connections", "6000", "--access-log", str(access),
                     env={"OVERLOAD_IO_SECONDS": "6"})
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "tests", "overload", "many_waiting.py"), str(server.port), "5000", "1000",
         "60"],
        capture_output=True, text=True, timeout=120, env=subprocess_env(),
    )
    assert result.returncode == 0, result.stderr
    statuses = json.loads(result.stdout)
    assert statuses == {"200": 5000}, statuses
    code, out, err = server.stop()
    assert "overload:" not in err
    assert access.read_text().count('" 200 ') == 5000


def old_request(port, path="/", seconds=5.0):
    with Client(("127.0.0.1", port)) as client:
        started = time.time() - seconds
        return client.get(path, headers=[("X-Request-Start", "t=%.3f" % started)])


def test_x_request_start_from_a_trusted_proxy_is_shed_from_an_untrusted_peer_not(cli_server, tmp_path):
    # 127.0.0.1 is in forwarded_allow_ips by default: its X-Request-Start says the request waited
    # 5 s before greenserve, past max_queue_time (1 s).
    access = tmp_path / "access.log"
    trusted = cli_server("%s:cpu_app" % APPS, "--health-path", "/health", "--access-log", str(access))
    response = old_request(trusted.port)
    assert response.status == 503 and response.header("Retry-After") == "1"
    assert old_request(trusted.port, seconds=0.05).status == 200
    assert old_request(trusted.port, "/health").status == 200  # the health check whatever it waited
    code, out, err = trusted.stop()
    log = access.read_text()
    assert 'shed="queued 5' in log and "max_queue_time 1000 ms" in log
    assert "X-Request-Start" in err  # the warning says why
    # A peer outside forwarded_allow_ips: its header is the client's own word, not counted.
    untrusted = cli_server("%s:cpu_app" % APPS, "--forwarded-allow-ips", "192.0.2.1")
    assert old_request(untrusted.port).status == 200
    untrusted.stop()


def test_the_settings_from_a_config_file(cli_server, tmp_path):
    config = tmp_path / "greenserve.conf.py"
    config.write_text("overload_control = False\nqueue_target = 0.05\nmax_queue_time = 2\nhealth_path = ['/up']\n")
    result = subprocess.run(
        [sys.executable, "-m", "greenserve", "-c", str(config), "--print-config", "%s:cpu_app" % APPS],
        capture_output=True, text=True, timeout=60, env=subprocess_env(), cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert "False" in lines["overload_control"] and "0.05" in lines["queue_target"]
    assert "2" in lines["max_queue_time"] and "/up" in lines["health_path"]
    bad = subprocess.run(
        [sys.executable, "-m", "greenserve", "--health-path", "healthz", "%s:cpu_app" % APPS],
        capture_output=True, text=True, timeout=60, env=subprocess_env(), cwd=ROOT,
    )
    assert bad.returncode == 2
    assert "health" in bad.stderr and "/healthz" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1

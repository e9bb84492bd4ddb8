"""bench/ keeps working as the server changes: its in-process loop and its readers of wrk and ab.

The benchmarks themselves are not timed here (bench/README.md); these tests only make sure the
harness still measures what it says, so a refactoring of the connection cannot silently break it.
"""

import json
import os
import subprocess
import sys

import pytest

from bench import accept, apps, instructions
from bench.lib import load, machine
from tests.conftest import ROOT, free_port, subprocess_env, wait_for_port

WRK_OUTPUT = """Running 5s test @ http://127.0.0.1:40001/
  1 threads and 100 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     4.51ms    1.20ms  19.85ms   88.21%
    Req/Sec    22.10k     1.31k   24.44k    74.00%
  Latency Distribution
     50%    4.33ms
     75%    4.79ms
     90%    5.62ms
     99%    8.74ms
  110063 requests in 5.00s, 15.85MB read
  Socket errors: connect 0, read 12, write 0, timeout 7
  Non-2xx or 3xx responses: 3
Requests/sec:  22010.46
Transfer/sec:      3.17MB
"""


def test_wrk_report_is_read_whole():
    # Parsing a fixed wrk report (the figures are text to read back, not a speed to reach).
    figures = load.parse_wrk(WRK_OUTPUT)
    assert figures["requests"] == 110063
    assert figures["seconds"] == 5.0
    assert figures["rps"] == 22010.46
    assert figures["p99_ms"] == 8.74
    assert figures["errors"] == {"connect": 0, "read": 12, "write": 0, "timeout": 7}
    assert figures["non2xx"] == 3


def bench_script(name, *args):
    """Run bench/<name> with ``args``; its standard output, once it exited 0."""
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", name), *args],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_in_process_loop_benchmark_runs_both_builds_and_serves_every_request():
    lines = bench_script("loop.py", "--requests", "3000").splitlines()
    assert lines[0].split()[:2] == ["run", "build"]
    assert lines[1].startswith("compiled ")
    assert lines[2].startswith("pure ") and "pure Python" in lines[2]


def start_launcher(launcher, **env):
    """bench/servers/LAUNCHER on a free port (`env` added to its environment), once it listens: (process, port)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, os.path.join(ROOT, "bench", "servers", launcher), str(port)],
        cwd=ROOT,
        env=subprocess_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, process=proc)
    except AssertionError:
        proc.kill()
        proc.wait()
        raise
    return proc, port


@pytest.mark.parametrize("launcher", ["bare_server.py", "bare_raw_server.py"])
def test_the_canned_loops_answer_every_pipelined_request_however_it_is_split(launcher):
    # The reference loops are what greenserve's ratios are taken against: one that dropped or
    # doubled answers would make every ratio in the report wrong.
    import socket
    import time

    proc, port = start_launcher(launcher)
    try:
        stream = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n" * 5
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            # Cut inside a request line, inside a head and between the CRLFs of a blank line.
            pieces = [stream[:7], stream[7:25], stream[25:52], stream[52:100], stream[100:]]
            for piece in pieces:
                sock.sendall(piece)
                time.sleep(0.02)
            received = b""
            while received.count(b"HTTP/1.1 200 OK") < 5:
                chunk = sock.recv(65536)
                assert chunk, "connection closed after %d responses" % received.count(b"HTTP/1.1 200 OK")
                received += chunk
            assert received.endswith(b"Hello, World!")
            sock.settimeout(0.3)
            try:
                extra = sock.recv(65536)
            except socket.timeout:
                extra = b""
            assert extra == b"", "more responses than requests"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("server", ["greenserve", "greenserve-simple"])
def test_the_websocket_benchmark_opens_every_connection_and_echoes(tmp_path, server):
    # That the tool works end to end against greenserve, its built-in WebSocket and
    # simple-websocket's hand-off (the client's own handshake and framing, the server's RSS
    # read), not how fast: 20 WebSockets for one second.
    out = tmp_path / "websocket.json"
    result = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "wsbench.py"), "--servers", server, "--connections", "20",
         "--duration", "1", "--repeats", "1", "--settle", "0.2", "--no-pin", "--json", str(out)],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = json.loads(out.read_text())["runs"]["20"][server]
    assert run["opened"] == 20 and run["open_failures"] == {}, run
    assert run["messages"] > 0 and run["errors"] == {}, run
    assert run["rss_idle_kib"] > 0


def test_the_websocket_frame_benchmark_runs_both_builds_and_checks_every_message():
    output = bench_script("wsframes.py", "--sizes", "125,70000", "--seconds", "0.05", "--repeats", "1", "--warmup", "0")
    rows = [line.split() for line in output.splitlines()[1:]]
    assert [row[:3] for row in rows] == [
        [kind, size, build] for kind in ("binary", "text") for size in ("125", "70000") for build in ("compiled", "pure")
    ]
    assert all(float(row[3]) > 0 for row in rows)


@pytest.mark.skipif(machine.program("nginx") is None, reason="nginx is not installed (apt-get install nginx)")
def test_the_nginx_reference_answers_with_the_bytes_of_bench_apps():
    # nginx is the reference every ratio of issue 22 is taken against: it must send what the
    # WSGI servers send, the same bodies with the same Content-Type, or it measures less work.
    import http.client

    proc, port = start_launcher("nginx_server.py")
    try:
        for path, body, content_type in (("/", apps.HELLO, "text/plain"), ("/page", apps.PAGE, "text/html")):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            conn.request("GET", path)
            response = conn.getresponse()
            assert (response.status, response.getheader("Content-Type"), response.read()) == (200, content_type, body)
            conn.close()
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0, proc.stderr.read()


def test_the_framework_scenarios_name_their_app_and_how_each_server_waits():
    # Which app each launcher is told to serve, and how the 10 ms view waits under it: a gevent
    # server given time.sleep would serve one request at a time, and measure nothing of the issue.
    from bench import run
    from bench.lib import servers

    scenarios = {s.name: s for s in run.SCENARIOS}
    for name, app, path in (
        ("flask", "bench.frameworks:flask_app", "/json"),
        ("django", "bench.frameworks:django_app", "/json"),
        ("flask-wait", "bench.frameworks:flask_app", "/wait"),
    ):
        scen = scenarios[name]
        assert (scen.app, scen.path, scen.default) == (app, path, False)
        assert set(scen.servers) <= set(servers.BY_NAME) - set(servers.CANNED) - {"nginx"}
        assert {"greenserve", "greenserve-cli", "bjoern", "granian", "gunicorn"} <= set(scen.servers)
        assert scen.environment(servers.BY_NAME["greenserve"])["BENCH_APP"] == app
    wait = scenarios["flask-wait"]
    assert wait.zero_errors and set(wait.targets) == {"granian", "gunicorn"}
    for name in ("greenserve", "greenserve-pure", "greenserve-cli", "pywsgi", "gunicorn"):
        assert wait.environment(servers.BY_NAME[name])["BENCH_WAIT"] == "gevent", name
    for name in ("bjoern", "granian", "waitress"):
        assert wait.environment(servers.BY_NAME[name]) == {
            "BENCH_APP": "bench.frameworks:flask_app", "BENCH_APP_WAITS": "1", "BENCH_WAIT": "time"}, name
    assert "BENCH_WAIT" not in scenarios["flask"].environment(servers.BY_NAME["bjoern"])
    assert scenarios["hello"].environment(servers.BY_NAME["greenserve"]) == {}


@pytest.mark.parametrize(
    "app, path, headers",
    [
        ("flask_app", "/json", {}),
        ("flask_app", "/wait", {}),
        # The security and clickjacking middleware each add theirs.
        ("django_app", "/json", {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY"}),
    ],
)
def test_a_launcher_serves_the_framework_app_bench_app_names(app, path, headers):
    import http.client
    import time

    pytest.importorskip("flask" if app == "flask_app" else "django")
    proc, port = start_launcher("greenserve_server.py", BENCH_APP="bench.frameworks:" + app, BENCH_WAIT="gevent")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        started = time.monotonic()
        conn.request("GET", path)
        response = conn.getresponse()
        assert (response.status, response.getheader("Content-Type")) == (200, "application/json")
        assert json.loads(response.read()) == {"message": "Hello, World!"}
        assert {name: response.getheader(name) for name in headers} == headers
        if path == "/wait":
            assert time.monotonic() - started >= 0.01
        conn.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


STRACE_TABLE = """\
% time     seconds  usecs/call     calls    errors syscall
------ ----------- ----------- --------- --------- ----------------
 31.02    0.012338           3      4068       536 recvfrom
 17.51    0.006964           1      4000           sendto
  9.80    0.003898           0      4112       112 accept4
  0.00    0.000000           0         2           getpid
------ ----------- ----------- --------- --------- ----------------
100.00    0.039777           2     12182       648 total
"""


def test_accept_reads_strace_tables_calls_and_errors_per_syscall():
    # Captured from strace 6.1's -c -f: the errors column is blank where no call failed.
    assert accept.parse_strace_table(STRACE_TABLE) == {
        "recvfrom": {"calls": 4068, "errors": 536},
        "sendto": {"calls": 4000, "errors": 0},
        "accept4": {"calls": 4112, "errors": 112},
        "getpid": {"calls": 2, "errors": 0},
        "total": {"calls": 12182, "errors": 648},
    }


CALLGRIND_DUMP = """\
# callgrind format
version: 1
positions: line
events: Ir
summary: 1000

ob=(1) /usr/lib/libpython3.11.so.1.0
fl=(1) ceval.c
fn=(1) _PyEval_EvalFrameDefault
10 300
+2 50
cob=(2) /x/_greenlet.so
cfl=(2) greenlet.cpp
cfn=(2) g_switch
calls=0 5
12 900000
fn=(3) _PyEval_EvalFrameDefault'2
20 150
ob=(2)
fl=(2)
fn=(2)
5 500
totals: 1000
"""


def test_accept_counts_each_functions_own_instructions_not_calls_on_the_stack(tmp_path):
    # The line after calls= is the callee's inclusive cost (here a greenlet switch still on the
    # stack at the dump, counted zero times): callgrind_annotate adds it to the caller's own.
    dump = tmp_path / "callgrind.out.1.1"
    dump.write_text(CALLGRIND_DUMP)
    assert accept.callgrind_self_costs(str(dump)) == {
        ("_PyEval_EvalFrameDefault", "libpython3.11.so.1.0"): 500,
        ("g_switch", "_greenlet.so"): 500,
    }


SEND_DUMP = """\
# callgrind format
version: 1
positions: line
events: Ir
summary: 90000

ob=(1) /usr/lib/libc.so.6
fl=(1) ???
fn=(1) sock_send
cob=(1)
cfi=(1)
cfn=(2) send
calls=2 0
5 400
fn=(3) sock_sendmsg
cfn=(4) sendmsg
calls=7 0
5 100
fn=(1)
cfn=(2)
calls=1 0
5 200
fn=(2)
5 300
totals: 90000
"""


def test_instructions_counts_the_requests_as_calls_of_send_under_every_caller(tmp_path):
    # The name is given once (cfn=(2) send) and referred to by number after; sendmsg counts too
    # (a body sent beside its head: connection._send_two), a name that only starts alike does not.
    dump = tmp_path / "callgrind.out.1.1"
    dump.write_text(SEND_DUMP)
    assert instructions.dump_counts(str(dump)) == (90000, 10)
    dump.write_text(SEND_DUMP.replace("cfn=(4) sendmsg", "cfn=(4) sendmmsg"))
    assert instructions.dump_counts(str(dump)) == (90000, 3)


def test_cpu_split_counts_a_process_started_since_in_whole():
    # A worker that a reload replaced between the two readings: its PID may be reused, and only
    # its start time tells the new process from the old one.
    before = {10: (100, 50, 20), 11: (100, 7, 3)}
    after = {10: (100, 80, 45), 11: (300, 4, 1), 12: (310, 2, 2)}
    assert machine.cpu_split_delta(before, after) == {10: (30, 25), 11: (4, 1), 12: (2, 2)}
    assert machine.cpu_delta(before, after) == {10: 55, 11: 5, 12: 4}


@pytest.mark.skipif(not machine.program("wrk"), reason="wrk is not installed (apt-get install wrk)")
def test_run_reports_the_servers_cpu_per_request_in_user_space_and_in_the_kernel(tmp_path):
    out = tmp_path / "run.json"
    report = tmp_path / "run.md"
    result = subprocess.run(
        [sys.executable, "bench/run.py", "--servers", "greenserve", "--scenarios", "hello", "--repeats", "1",
         "--duration", "2", "--warmup", "0", "--no-pin", "--json", str(out), "--markdown", str(report)],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    (run,) = json.loads(out.read_text())["scenarios"]["hello"]["runs"]["greenserve"]
    assert run["requests"] > 1000
    # The server did work in both places, and not more of it than two seconds on two cores allow.
    assert run["user_us"] > 0 and run["kernel_us"] > 0
    assert (run["user_us"] + run["kernel_us"]) * run["requests"] <= 2 * 2.5e6
    assert 0 < run["busy"] <= 1.2  # one process: at most its one core (the ticks round)
    assert "%.2f + %.2f" % (run["user_us"], run["kernel_us"]) in report.read_text()


H2LOAD_OUTPUT = """starting benchmark...
spawning thread #0: 10 total client(s). Timing-based test with 1s of warm-up time and 2s of main duration for measurements.
Warm-up started for thread #0.
TLS Protocol: TLSv1.3
Cipher: TLS_AES_256_GCM_SHA384
Server Temp Key: X25519 253 bits
Application protocol: h2
Warm-up phase is over for thread #0.
Main benchmark duration is started for thread #0.
Main benchmark duration is over for thread #0. Stopping all clients.
Stopped all clients for thread #0

finished in 3.00s, 58885.00 req/s, 2.25MB/s
requests: 117770 total, 117770 started, 117770 done, 117760 succeeded, 10 failed, 4 errored, 1 timeout
status codes: 117760 2xx, 0 3xx, 5 4xx, 0 5xx
traffic: 4.49MB (4711260) total, 1.53MB (1605060) headers (space savings 90.72%), 2.21MB (2316860) data
                     min         max         mean         sd        +/- sd
time for request:      141us     13.20ms      1.63ms      1.25ms    88.39%
time for connect:        0us         0us         0us         0us     0.00%
time to 1st byte:        0us         0us         0us         0us     0.00%
req/s           :    5844.58     5929.72     5883.11       24.82    70.00%
"""


def test_h2load_report_is_read_whole_and_the_warm_up_is_not_counted():
    # Captured from h2load (nghttp2 1.52) in duration mode: "finished in" holds the warm-up, the
    # requests and req/s only the measured 2 s.
    from bench import h2peers as h2

    figures = h2.parse_h2load(H2LOAD_OUTPUT)
    assert (figures["requests"], figures["rps"], figures["finished_s"]) == (117770, 58885.0, 3.0)
    assert figures["seconds"] == 2.0
    assert figures["errors"] == {"failed": 10, "errored": 4, "timeout": 1}
    assert figures["non2xx"] == 5
    assert (figures["protocol"], figures["tls"]) == ("h2", "TLSv1.3 TLS_AES_256_GCM_SHA384")
    assert (figures["mean_ms"], figures["max_ms"]) == (1.63, 13.2)
    assert h2.parse_h2load("")["rps"] is None


def test_h2_bench_gives_every_server_http2_in_its_own_words_and_bounds_every_load():
    # What each launcher is told (a server without HTTP/2 on would be measured on HTTP/1.1, or
    # not at all), and that h2load is bounded and asks for h2 alone over TLS.
    from bench import h2peers as h2

    tls = {"certfile": "/c.pem", "keyfile": "/k.pem"}
    rows = h2.ROWS_BY_NAME
    assert rows["greenserve"].arguments("h2c", tls) == ["http_protocols=h2,h1", "http2_cleartext=prior-knowledge"]
    assert rows["greenserve"].arguments("tls", tls) == ["http_protocols=h2,h1", "certfile=/c.pem", "keyfile=/k.pem"]
    for name in ("greenserve-cli", "gunicorn"):
        assert rows[name].arguments("h2c", tls) == ["--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge"]
    assert rows["granian"].arguments("tls", tls) == ["--http", "2", "--ssl-certificate", "/c.pem", "--ssl-keyfile", "/k.pem"]
    assert rows["greenserve-default"].arguments("h2c", tls) == []
    assert h2.h2load_argv("h2load", "tls", 8443, 10, 10, duration=5, warmup=1) == [
        "h2load", "-t1", "-c10", "-m10", "-D", "5", "--warm-up-time", "1", "--npn-list", "h2", "https://127.0.0.1:8443/"]
    assert h2.h2load_argv("h2load", "h2c", 8080, 1, 1, requests=1) == ["h2load", "-t1", "-c1", "-m1", "-n1", "http://127.0.0.1:8080/"]

    args = h2.parse_args(["--quick"])
    assert (args.repeats, args.duration) == (1, 2)
    assert [s.name for s in args.scenario_list] == ["h2c-c10-m10", "h2c-c100-m1", "tls-c10-m10", "tls-c100-m1", "h1-hello"]
    assert [r.name for r in args.row_list if h2.takes(args.scenario_list[0], r)] == list(h2.H2_ROWS)
    assert [r.name for r in args.row_list if h2.takes(args.scenario_list[-1], r)] == ["greenserve", "greenserve-default"]
    with pytest.raises(SystemExit):
        h2.parse_args(["--servers", "nginx"])
    assert "h2c-c100-m1" in bench_script("h2peers.py", "--help")


def test_overload_report_shows_the_probes_speed_and_judges_on_the_capacity_searched():
    # bench/overload.py: a run whose speed probe took 1.25x the capacity search's time reads as a
    # CPU at 0.8 of its speed; the column says so, and the goodput is still judged against the
    # capacity searched (the probe shares the CPU with the server: no correction).
    from bench import overload

    def run(goodput, probe_ms):
        return {"probe_ms": probe_ms, "summary": {
            "goodput": goodput, "goodput_frac": goodput / 400.0, "sent": 12000, "ok": goodput * 20, "ok_p99": 40.0,
            "s503": 100, "s503_p99": 5.0, "other": {}, "other_total": 0, "timeouts": 0, "errors": 0, "error_kinds": {},
            "send_lag_p99": 1.0, "warmup_ok": True, "server_cpu_busy": 0.9, "other_cpu_busy": 0.0, "steal": 0.0}}

    results = {
        "meta": {}, "capacity": 400,
        "capacity_runs": [{"rate": 430, "passed": False, "probe_ms": 2.0}, {"rate": 400, "passed": True, "probe_ms": 1.0}],
        "scenarios": {"0.8x": {"greenserve": run(320, 1.25)}, "1.5x": {"greenserve": run(300, 1.25)},
                      "3x": {"greenserve": run(370, 1.0)}},
    }
    overload.add_speed(results)
    assert results["meta"]["capacity_probe_ms"] == 1.0
    assert results["scenarios"]["1.5x"]["greenserve"]["summary"]["speed"] == 0.8
    verdicts = {text.split(" ≥")[0]: verdict for text, verdict, _ in overload.check_targets(results["scenarios"], 400)
                if "goodput" in text}
    assert verdicts == {"1.5x: goodput": "MISSED", "3x: goodput": "met"}  # 75 % and 92.5 % of 400
    header, rows = overload.scenario_rows(overload.SCENARIOS[0], ["greenserve"], results["scenarios"]["0.8x"], {}, 400)
    assert rows[0][header.index("probe: CPU speed")] == "0.80" and rows[0][1:3] == ["320", "80%"]

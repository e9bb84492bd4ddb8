"""Benchmark harness: greenserve side by side with its peers, on one WSGI app, on loopback.

    python bench/run.py                       # every scenario and server, 3 repeats of 5 s
    python bench/run.py --quick               # 1 repeat of 2 s: a smoke test of the harness
    python bench/run.py --scenarios hello,pipeline --servers greenserve,bare --repeats 5
    python bench/run.py --markdown bench/results/latest.md

Rules (see bench/README.md):
  * every server is one process (gunicorn: its master and one worker) pinned with ``taskset``
    to CPU 0; the load generator (wrk, ab) is pinned to CPU 1;
  * each server is started fresh for every measurement by its launcher in bench/servers/,
    on a fresh port, and stopped by PID afterwards (its children too);
  * peers are interleaved: for each repeat every server runs once, in an order that rotates
    from one repeat to the next; tables give medians over the repeats, and the ratios are
    medians of per-repeat ratios (each pairs two runs of the same repeat, close in time);
  * every load is bounded in time (wrk -d, ab -t) or requests (ab -n) and targets 127.0.0.1.

Raw results (every run's command line and the load generator's full output) go to
bench/results/latest.json; the report is printed as Markdown (and written to --markdown FILE).
Only ratios within one run mean anything: absolute numbers drift 20-30% between runs.
"""

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")
LOGS = os.path.join(RESULTS, "logs")
HOST = "127.0.0.1"  # the only address any load is sent to

# A server's rate below this fraction of greenserve's, in the same scenario, is flagged.
LOW_RATE = 0.10


# --------------------------------------------------------------------------------------------
# Servers


class Server:
    def __init__(self, name, launcher, requires, packages, description, env=None):
        self.name = name
        self.env = env  # extra environment variables for the launcher
        self.launcher = os.path.join(BENCH, "servers", launcher)
        self.requires = requires  # modules that must import for the server to run
        self.packages = packages  # distributions whose versions the report gives
        self.description = description

    def missing(self):
        """The reason this server cannot run here, or None."""
        for module in self.requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError) as e:  # a parent package failed to import
                return "module %r cannot be imported: %s: %s" % (module, type(e).__name__, e)
            if not found:
                return "module %r cannot be imported (not installed?)" % module
        return None


SERVERS = [
    Server(
        "greenserve",
        "greenserve_server.py",
        ["gevent", "greenserve"],
        ["greenserve"],
        "greenserve.WSGIServer(..., log=None, backlog=2048, spawn=10000), the build installed "
        "in the working tree (compiled when `pip install -e .` could compile it)",
    ),
    Server(
        "greenserve-pure",
        "greenserve_server.py",
        ["gevent", "greenserve"],
        ["greenserve"],
        "the same, with GREENSERVE_PURE_PYTHON=1: the hot path as plain Python",
        env={"GREENSERVE_PURE_PYTHON": "1"},
    ),
    Server(
        "pywsgi",
        "pywsgi_server.py",
        ["gevent", "gevent.pywsgi"],
        ["gevent"],
        "gevent.pywsgi.WSGIServer(..., log=None, backlog=2048), as shipped",
    ),
    Server(
        "bare",
        "bare_server.py",
        ["gevent"],
        ["gevent"],
        "bare gevent StreamServer loop answering canned bytes with the gevent socket's recv and "
        "sendall (bench/bare_gevent.py)",
    ),
    Server(
        "bare-raw",
        "bare_raw_server.py",
        ["gevent"],
        ["gevent"],
        "the same canned loop over the non-blocking socket and its read watcher, as greenserve reads "
        "and writes (bench/bare_gevent.py handle_raw): gevent's own cost per request, the floor",
    ),
    Server(
        "gunicorn",
        "gunicorn_server.py",
        ["gunicorn", "gevent"],
        ["gunicorn"],
        "gunicorn -k gevent -w 1 --worker-connections 10000 --backlog 2048 (master + 1 worker)",
    ),
    Server(
        "waitress",
        "waitress_server.py",
        ["waitress"],
        ["waitress"],
        "waitress.serve(..., threads=4), otherwise its defaults (connection_limit=100)",
    ),
    Server(
        "paste",
        "paste_server.py",
        ["paste.httpserver"],
        ["Paste"],
        "paste.httpserver.serve(..., use_threadpool=True, threadpool_workers=10), otherwise its "
        "defaults (HTTP/1.0: a connection per request; request_queue_size=5)",
    ),
    Server(
        "bjoern",
        "bjoern_server.py",
        ["bjoern", "_bjoern"],
        ["bjoern"],
        "bjoern.run(app, host, port, listen_backlog=2048): C on libev, one thread",
    ),
    Server(
        "meinheld",
        "meinheld_server.py",
        ["meinheld.server"],
        ["meinheld"],
        "meinheld.server.listen(...); run(app), with set_keepalive(10) (its default 0 closes every "
        "connection), no access logger, set_backlog(2048): C on picoev",
    ),
    Server(
        "granian",
        "granian_server.py",
        ["granian", "granian._granian"],
        ["granian"],
        "granian --interface wsgi --workers 1 --runtime-mode st --runtime-threads 1 "
        "--blocking-threads 1 --runtime-blocking-threads 1 --backlog 2048 --http 1 "
        "(Rust; a main process + 1 worker)",
    ),
]
SERVERS_BY_NAME = {s.name: s for s in SERVERS}
# The canned-bytes loops: they answer only the scenarios that name a canned response (hello, page).
CANNED = ("bare", "bare-raw")


# --------------------------------------------------------------------------------------------
# Scenarios: each is a function (ctx, port) -> result dict, registered with @scenario.


class Scenario:
    def __init__(self, name, function, description, bare, latency_valid, latency_note, default, tool, zero_errors):
        self.name = name
        self.zero_errors = zero_errors  # greenserve is expected to have no socket errors here
        self.tool = tool  # the load generator it needs: "wrk" or "ab"
        self.function = function
        self.description = description
        self.bare = bare  # the bare loop's canned response ("hello", "page") if it takes part, else False
        self.latency_valid = latency_valid
        self.latency_note = latency_note
        self.default = default


SCENARIOS = []


def scenario(
    name, description, bare=False, latency_valid=True, latency_note=None, default=True, tool="wrk", zero_errors=False
):
    """Registers a scenario: `bare` names the bare loop's canned response if it takes part,
    `default` if it runs
    without --scenarios, `tool` the load generator it needs, `zero_errors` if any socket error
    of greenserve's is reported as a missed target."""

    def register(function):
        SCENARIOS.append(
            Scenario(name, function, description, bare, latency_valid, latency_note, default, tool, zero_errors)
        )
        return function

    return register


@scenario("hello", "keep-alive hello: wrk -t1 -c100 --latency GET / (13-byte body)", bare="hello")
def hello(ctx, port):
    return ctx.wrk(port, "/", connections=100)


@scenario("page", "keep-alive page: wrk -t1 -c100 --latency GET /page (~4.5 KB HTML body)", bare="page")
def page(ctx, port):
    return ctx.wrk(port, "/page", connections=100)


@scenario(
    "pipeline",
    "16-deep pipelining: wrk -t1 -c100 -s bench/pipeline.lua -- 16, GET / (req/s counts responses)",
    bare="hello",
    latency_valid=False,
    latency_note="p99 is not given for pipelining: wrk times whole batches of 16, and its "
    "coordinated-omission correction assumes one request per round trip, which corrupts its "
    "percentiles (they often print as 0); the raw figure is kept in latest.json",
)
def pipeline(ctx, port):
    return ctx.wrk(port, "/", connections=100, script=os.path.join(BENCH, "pipeline.lua"), script_args=["16"])


@scenario(
    "c1000", "1,000 connections: wrk -t1 -c1000 --latency GET / (keep-alive hello)", bare="hello", zero_errors=True
)
def c1000(ctx, port):
    return ctx.wrk(port, "/", connections=1000)


# Not run by default: pass them with --scenarios.


@scenario("big", "1 MiB responses: wrk -t1 -c10 --latency GET /big", default=False)
def big(ctx, port):
    return ctx.wrk(port, "/big", connections=10)


@scenario("upload", "64 KiB POST bodies: wrk -t1 -c50 -s bench/upload.lua POST /upload", default=False)
def upload(ctx, port):
    return ctx.wrk(port, "/upload", connections=50, script=os.path.join(BENCH, "upload.lua"))


@scenario(
    "close",
    "a connection per request: ab -c50 GET / (HTTP/1.0, no keep-alive)",
    default=False,
    tool="ab",
)
def close(ctx, port):
    return ctx.ab(port, "/", concurrency=50)


# --------------------------------------------------------------------------------------------
# Load generators and the parsing of their output

_TIME_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}


def parse_wrk(text):
    """Figures from wrk 4's report (run with --latency); a key is None when it is missing."""
    out = {"requests": None, "seconds": None, "rps": None, "p99_ms": None, "non2xx": 0}
    out["errors"] = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    m = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h),", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
        out["seconds"] = float(m.group(2)) * _TIME_UNITS_MS[m.group(3)] / 1000.0
    m = re.search(r"^Requests/sec:\s*([\d.]+)\s*$", text, re.M)
    if m:
        out["rps"] = float(m.group(1))
    m = re.search(r"Latency Distribution\s*\n(?:.*\n)*?\s*99%\s+([\d.]+)(us|ms|s|m|h)\s*$", text, re.M)
    if m:
        out["p99_ms"] = float(m.group(1)) * _TIME_UNITS_MS[m.group(2)]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["errors"] = dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups())))
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    if m:
        out["non2xx"] = int(m.group(1))
    return out


def parse_ab(text):
    """Figures from ApacheBench 2.3's report; a key is None when it is missing."""
    out = {"requests": None, "seconds": None, "rps": None, "p99_ms": None, "non2xx": 0}
    out["errors"] = {"connect": 0, "receive": 0, "length": 0, "exceptions": 0, "write": 0}
    m = re.search(r"^Complete requests:\s*(\d+)", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
    m = re.search(r"^Time taken for tests:\s*([\d.]+) seconds", text, re.M)
    if m:
        out["seconds"] = float(m.group(1))
    m = re.search(r"^Requests per second:\s*([\d.]+)", text, re.M)
    if m:
        out["rps"] = float(m.group(1))
    m = re.search(r"^\s*99%\s+(\d+)", text, re.M)
    if m:
        out["p99_ms"] = float(m.group(1))
    m = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)", text)
    if m:
        out["errors"].update(zip(("connect", "receive", "length", "exceptions"), map(int, m.groups())))
    m = re.search(r"^Write errors:\s*(\d+)", text, re.M)
    if m:
        out["errors"]["write"] = int(m.group(1))
    m = re.search(r"^Non-2xx responses:\s*(\d+)", text, re.M)
    if m:
        out["non2xx"] = int(m.group(1))
    return out


# --------------------------------------------------------------------------------------------
# Processes: started here, stopped here, by PID


_LIVE = {}  # pid -> Popen, for the cleanup on the way out


def _start_time(pid):
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), or None if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


def _descendants(pid):
    """(pid, start time) of every live descendant of pid, from /proc/PID/task/*/children."""
    found = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        try:
            tasks = os.listdir("/proc/%d/task" % parent)
        except OSError:
            continue
        for tid in tasks:
            try:
                with open("/proc/%d/task/%s/children" % (parent, tid)) as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            for child in children:
                started = _start_time(child)
                if started is not None:
                    found.append((child, started))
                    stack.append(child)
    return found


def stop_process(proc, grace=5.0):
    """SIGTERM proc (and, after it, whatever descendants it left), SIGKILL after `grace` s."""
    children = _descendants(proc.pid)
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + grace
    for pid, started in children:
        # Only a process that is still the one we saw (same PID, same start time).
        while _start_time(pid) == started and time.monotonic() < deadline:
            time.sleep(0.05)
        if _start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    _LIVE.pop(proc.pid, None)


def stop_all(logs=None):
    """Stop every server still running (by PID), then close their log files if given."""
    for proc in list(_LIVE.values()):
        stop_process(proc, grace=2.0)
    for log in (logs or {}).values():
        log.close()


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def accept_queue(port):
    """Connections waiting in the accept queue of the socket listening on HOST:port, or None.

    For a listening socket, the rx_queue field of /proc/net/tcp is its accept-queue length.
    """
    local = "%08X:%04X" % (int.from_bytes(socket.inet_aton(HOST), "little"), port)
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[1] == local and fields[3] == "0A":  # 0A: LISTEN
                    return int(fields[4].split(":")[1], 16)
    except (OSError, IndexError, ValueError):
        return None
    return None


def wait_ready(proc, port, timeout=20.0):
    """True once the server answers GET / with 200; False if it exits or times out."""
    deadline = time.monotonic() + timeout
    request = b"GET / HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (HOST.encode(), port)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((HOST, port), timeout=2.0) as s:
                s.sendall(request)
                head = s.recv(64)
            if head.startswith(b"HTTP/1.") and head[9:12] == b"200":
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


class Context:
    """What the scenarios run their load with: pinning, duration, and the load generators."""

    def __init__(self, args):
        self.duration = args.duration
        self.server_cpu = args.server_cpu
        self.client_cpu = args.client_cpu
        self.pin = shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2 and not args.no_pin
        self.wrk_path = shutil.which("wrk")
        self.ab_path = shutil.which("ab")

    def pinned(self, cpu, argv):
        return (["taskset", "-c", str(cpu)] + argv) if self.pin else argv

    def run_load(self, argv, parse, tool, port, duration):
        argv = self.pinned(self.client_cpu, argv)
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True)
        _LIVE[proc.pid] = proc
        started = time.monotonic()
        # While the load runs, the accept queue of the server's listening socket is sampled at
        # 40%, 60% and 80% of the run: connections a server leaves there are never served, and
        # wrk reports nothing about them (it counts a timeout only for a late response).
        sample_at = [started + duration * f for f in (0.4, 0.6, 0.8)]
        samples = []
        deadline = started + duration + 60
        timed_out = False
        while True:
            now = time.monotonic()
            if sample_at and now >= sample_at[0]:
                sample_at.pop(0)
                samples.append(accept_queue(port))
                continue
            wait = (sample_at[0] if sample_at else deadline) - now
            try:
                stdout, stderr = proc.communicate(timeout=max(0.01, wait))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    stop_process(proc, grace=2.0)
                    stdout, stderr = proc.communicate()
                    timed_out = True
                    break
        _LIVE.pop(proc.pid, None)
        result = {"tool": tool, "command": shlex.join(argv), "rc": proc.returncode, "stdout": stdout, "stderr": stderr}
        result.update(parse(stdout))
        samples = [n for n in samples if n is not None]
        result["accept_queue_samples"] = samples
        # The smallest sample: connections that waited unaccepted all through the run.
        result["unaccepted"] = min(samples) if samples else None
        if timed_out:
            result["failure"] = "%s did not finish in %d s" % (tool, self.duration + 60)
        elif result["rps"] is None:
            last = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1]
            result["failure"] = "%s failed (rc %s): %s" % (tool, proc.returncode, last)
        return result

    def wrk(self, port, path, connections, script=None, script_args=(), duration=None):
        if not self.wrk_path:
            return {"tool": "wrk", "failure": "wrk is not installed", "rps": None}
        argv = [self.wrk_path, "-t1", "-c%d" % connections, "-d%ds" % (duration or self.duration), "--latency"]
        if script:
            argv += ["-s", os.path.relpath(script, ROOT)]
        argv.append("http://%s:%d%s" % (HOST, port, path))
        if script_args:
            argv += ["--"] + list(script_args)
        result = self.run_load(argv, parse_wrk, "wrk", port, duration or self.duration)
        result["connections"] = connections
        return result

    def ab(self, port, path, concurrency, keepalive=False):
        if not self.ab_path:
            return {"tool": "ab", "failure": "ab is not installed", "rps": None}
        # -t bounds the time; the -n after it (ab takes the last) lifts ab's 50,000 cap.
        argv = [self.ab_path, "-q", "-r", "-c", str(concurrency), "-t", str(self.duration), "-n", "100000000"]
        if keepalive:
            argv.append("-k")
        argv.append("http://%s:%d%s" % (HOST, port, path))
        return self.run_load(argv, parse_ab, "ab", port, self.duration)


def run_one(ctx, args, server, scen, log):
    """Start server, warm it up, run the scenario's load, stop it; the result dict."""
    port = free_port()
    extra = [scen.bare] if server.name in CANNED else []
    argv = ctx.pinned(ctx.server_cpu, [sys.executable, server.launcher, str(port)] + extra)
    log.write("\n=== %s %s: %s\n" % (datetime.datetime.now().isoformat(timespec="seconds"), scen.name, shlex.join(argv)))
    log.flush()
    env = dict(os.environ, **server.env) if server.env else None
    proc = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT, start_new_session=True, env=env
    )
    _LIVE[proc.pid] = proc
    try:
        if not wait_ready(proc, port):
            rc = proc.poll()
            why = "exited with status %s" % rc if rc is not None else "did not answer GET / within 20 s"
            return {"server_command": shlex.join(argv), "rps": None, "failure": "server %s (see %s)" % (why, os.path.relpath(log.name, ROOT))}
        if args.warmup > 0:
            ctx.wrk(port, "/", connections=10, duration=args.warmup)
        result = scen.function(ctx, port)
        result["server_command"] = shlex.join(argv)
        if proc.poll() is not None:
            result["server_exited"] = proc.returncode
            result["failure"] = "server exited with status %s during the load" % proc.returncode
        return result
    finally:
        stop_process(proc)
        time.sleep(args.pause)


# --------------------------------------------------------------------------------------------
# Summaries


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(scen, server_names, runs):
    """runs[server] = [result per repeat]; per-server medians, totals, ratios and notes."""
    summary = {}
    ok = {s: [r if r.get("rps") is not None and not r.get("failure") else None for r in runs[s]] for s in server_names}
    for s in server_names:
        good = [r for r in ok[s] if r is not None]
        errors = {}
        for r in runs[s]:
            for key, n in (r.get("errors") or {}).items():
                errors[key] = errors.get(key, 0) + n
        entry = {
            "runs": len(runs[s]),
            "ok_runs": len(good),
            "rps": median([r["rps"] for r in good]),
            "p99_ms": median([r.get("p99_ms") or None for r in good]) if scen.latency_valid else None,
            "errors": errors,
            "non2xx": sum(r.get("non2xx") or 0 for r in runs[s]),
            "failures": sorted({r["failure"] for r in runs[s] if r.get("failure")}),
            "unaccepted": median([r.get("unaccepted") for r in good]),
        }
        for ref in ("greenserve", "bare"):
            if ref in server_names:
                ratios = [
                    a["rps"] / b["rps"]
                    for a, b in zip(ok[s], ok[ref])
                    if a is not None and b is not None and b["rps"] > 0
                ]
                entry["ratio_" + ref] = median(ratios)
            else:
                entry["ratio_" + ref] = None
        summary[s] = entry
    reference = summary.get("greenserve", {}).get("rps")
    for s, entry in summary.items():
        notes = list(entry["failures"])
        if entry["ok_runs"] and entry["ok_runs"] < entry["runs"]:
            notes.append("%d of %d runs failed" % (entry["runs"] - entry["ok_runs"], entry["runs"]))
        if entry["errors"].get("timeout"):
            notes.append("timeouts")
        if sum(n for k, n in entry["errors"].items() if k != "timeout"):
            notes.append("socket errors")
        if entry["non2xx"]:
            notes.append("non-2xx responses")
        # wrk counts no error for a connection whose server stops answering it: a run with no
        # more responses than connections means the connections stalled (bjoern, pipelined).
        stalled = [
            r
            for r in runs[s]
            if r.get("connections") and r.get("requests") is not None and r["requests"] <= r["connections"]
        ]
        if stalled:
            notes.append(
                "stalled: no more responses than connections in %d of %d runs (wrk reports no error for that)"
                % (len(stalled), len(runs[s]))
            )
        if entry["unaccepted"]:
            notes.append("~%d connections waiting unaccepted at every sample" % entry["unaccepted"])
        if reference and entry["rps"] is not None and entry["rps"] < LOW_RATE * reference:
            notes.append("very low rate (< %d%% of greenserve)" % (LOW_RATE * 100))
        if scen.latency_valid and entry["ok_runs"] and entry["p99_ms"] is None:
            notes.append("no p99 from the load generator")
        if scen.zero_errors and s == "greenserve" and entry["ok_runs"]:
            missed = sum(entry["errors"].values())
            notes.append("MISSES the zero-socket-error target" if missed else "zero-socket-error target met")
        entry["notes"] = notes
    return summary


def fmt_rps(v):
    return "—" if v is None else "{:,.0f}".format(v)


def fmt_ms(v):
    if v is None:
        return "—"
    return "%.2f ms" % v if v < 100 else "%.0f ms" % v


def fmt_ratio(v):
    return "—" if v is None else "%.2f" % v


def fmt_errors(errors):
    nonzero = ["%s %d" % (k, n) for k, n in errors.items() if n]
    return ", ".join(nonzero) if nonzero else "0"


def table_rows(scen, summary, all_servers):
    header = ["server", "req/s (median)", "p99 (median)", "socket errors", "non-2xx", "÷ greenserve", "÷ bare", "notes"]
    rows = []
    for name in all_servers:
        if name not in summary:
            reason = "n/a: the bare loops only answer canned hello or page bytes" if name in CANNED else "n/a"
            rows.append([name, "n/a", "n/a", "", "", "", "", reason])
            continue
        e = summary[name]
        p99 = fmt_ms(e["p99_ms"]) if scen.latency_valid else "n/a*"
        measured = any(r for r in e["errors"].values()) or e["ok_runs"]
        rows.append(
            [
                name,
                fmt_rps(e["rps"]),
                p99,
                fmt_errors(e["errors"]) if measured else "—",
                str(e["non2xx"]) if measured else "—",
                fmt_ratio(e["ratio_greenserve"]),
                fmt_ratio(e["ratio_bare"]),
                "; ".join(e["notes"]),
            ]
        )
    return header, rows


def text_table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def markdown_table(header, rows):
    def cell(x):
        return str(x).replace("|", "\\|")

    # The first and last columns are text (server, notes); those between are figures.
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 2) + ["---"]) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(cell(x) for x in row) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The machine and the software


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def _first_line(argv):
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout + out.stderr).strip()
    return text.splitlines()[0] if text else None


def cpu_model():
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def environment(ctx):
    cpu = cpu_model()
    versions = {}
    for dist in ("greenserve", "gevent", "greenlet", "gunicorn", "waitress", "Paste", "bjoern", "meinheld", "granian"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    wrk = _first_line([ctx.wrk_path, "-v"]) if ctx.wrk_path else None
    if wrk:  # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer"
        wrk = wrk.split(" Copyright")[0]
    ab = _first_line([ctx.ab_path, "-V"]) if ctx.ab_path else None
    if ab:  # "This is ApacheBench, Version 2.3 <$Revision: 1903618 $>"
        ab = ab.replace("This is ", "")
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu_model": cpu,
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "versions": versions,
        "wrk": wrk,
        "ab": ab,
        "greenserve_commit": _first_line(["git", "--no-optional-locks", "describe", "--always", "--dirty"]),
        # What the "greenserve" server runs ("greenserve-pure" always runs pure Python).
        "greenserve_build": _first_line(
            [sys.executable, "-c", "import greenserve._accel as a; print(a.build())"]
        ),
        "somaxconn": _read("/proc/sys/net/core/somaxconn"),
        "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "loadavg_at_start": " ".join((_read("/proc/loadavg") or "").split()[:3]),
        "pinning": (
            "servers on CPU %d, load generator on CPU %d (taskset)" % (ctx.server_cpu, ctx.client_cpu)
            if ctx.pin
            else "none (taskset missing, fewer than 2 CPUs, or --no-pin)"
        ),
    }


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    target = min(target, 65536)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def report_head(meta, title):
    """A report's first lines: the title with the date, the command, the machine and greenserve."""
    v = meta["versions"]
    return [
        "# %s, %s" % (title, meta["date"]),
        "",
        "- Command: `%s`" % meta["command"],
        "- Machine: %s, %s CPUs; Linux %s; Python %s (%s)"
        % (meta["cpu_model"], meta["cpu_count"], meta["kernel"], meta["python"], meta["python_implementation"]),
        "- greenserve %s (%s), hot path %s; gevent %s; greenlet %s"
        % (v.get("greenserve"), meta["greenserve_commit"], meta.get("greenserve_build"), v.get("gevent"), v.get("greenlet")),
    ]


def markdown_report(meta, scenario_tables):
    v = meta["versions"]
    lines = report_head(meta, "greenserve benchmark") + [
        "- Peers: gunicorn %s; waitress %s; Paste %s; bjoern %s; meinheld %s; granian %s"
        % (v.get("gunicorn"), v.get("waitress"), v.get("Paste"), v.get("bjoern"), v.get("meinheld"), v.get("granian")),
        "- Load generators: %s; %s" % (meta["wrk"], meta["ab"]),
        "- Pinning: %s; %d repeat(s) of %d s per server and scenario, interleaved in rotating order; "
        "warm-up %d s; load average at start %s"
        % (meta["pinning"], meta["repeats"], meta["duration"], meta["warmup"], meta["loadavg_at_start"]),
        "",
        "req/s and p99 are medians over the repeats; ÷ columns are medians of per-repeat ratios of req/s "
        "(this server ÷ greenserve, this server ÷ the bare gevent loop); socket errors and non-2xx are "
        "totals over the repeats. Only ratios within one run are meaningful.",
    ]
    for skipped, reason in meta["skipped_servers"].items():
        lines.append("")
        lines.append("- Skipped %s: %s" % (skipped, reason))
    for scen, header, rows in scenario_tables:
        lines += ["", "## %s" % scen.name, "", scen.description, "", markdown_table(header, rows)]
        if not scen.latency_valid and scen.latency_note:
            lines += ["", "\\* " + scen.latency_note]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------


def parse_args(argv):
    names = [s.name for s in SCENARIOS]
    p = argparse.ArgumentParser(
        description="Benchmark greenserve against its peers on loopback (see bench/README.md).",
        epilog="scenarios: %s (default: %s); servers: %s"
        % (", ".join(names), ",".join(s.name for s in SCENARIOS if s.default), ", ".join(SERVERS_BY_NAME)),
    )
    p.add_argument("--repeats", type=int, default=None, help="runs of each server per scenario (default 3)")
    p.add_argument("--duration", type=int, default=None, help="seconds of load per run (default 5)")
    p.add_argument("--scenarios", default=None, help="comma-separated scenario names")
    p.add_argument("--servers", default=None, help="comma-separated server names")
    p.add_argument("--quick", action="store_true", help="1 repeat of 2 s: a smoke test")
    p.add_argument("--warmup", type=int, default=1, help="seconds of light load (10 connections) before each run (0: none)")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    p.add_argument("--markdown", metavar="FILE", help="also write the Markdown report to FILE")
    p.add_argument("--json", metavar="FILE", default=os.path.join(RESULTS, "latest.json"), help="raw results (default bench/results/latest.json)")
    p.add_argument("--server-cpu", type=int, default=0)
    p.add_argument("--client-cpu", type=int, default=1)
    p.add_argument("--no-pin", action="store_true", help="do not pin with taskset")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.duration is None:
        args.duration = 2 if args.quick else 5
    if args.repeats < 1 or args.duration < 1:
        p.error("--repeats and --duration must be at least 1")
    if args.scenarios:
        wanted = [n.strip() for n in args.scenarios.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            p.error("unknown scenario(s) %s; known: %s" % (", ".join(unknown), ", ".join(names)))
        args.scenario_list = [s for n in wanted for s in SCENARIOS if s.name == n]
    else:
        args.scenario_list = [s for s in SCENARIOS if s.default]
    if args.servers:
        wanted = [n.strip() for n in args.servers.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in SERVERS_BY_NAME]
        if unknown:
            p.error("unknown server(s) %s; known: %s" % (", ".join(unknown), ", ".join(SERVERS_BY_NAME)))
        args.server_list = [SERVERS_BY_NAME[n] for n in wanted]
    else:
        args.server_list = list(SERVERS)
    return args


def progress(message):
    print(message, file=sys.stderr, flush=True)


def available_servers(server_list):
    """({name: why it is skipped}, [the servers that can run]); exits when none can."""
    skipped, servers = {}, []
    for server in server_list:
        reason = server.missing()
        if reason:
            skipped[server.name] = reason
            print("skipping %s: %s" % (server.name, reason), flush=True)
        else:
            servers.append(server)
    if not servers:
        sys.exit("no server can run")
    return skipped, servers


def print_report(report, markdown_path, json_path):
    """Print the Markdown report, write it to markdown_path if given, say where the rest went."""
    print()
    print(report, end="")
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(report)
    print("\nraw results: %s; server logs: %s" % (os.path.relpath(json_path), os.path.relpath(LOGS)), file=sys.stderr)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python"] + sys.argv) if argv is None else shlex.join(["python", "bench/run.py"] + argv)
    nofile = raise_nofile()  # inherited by the servers and by wrk (-c1000 needs > 1000)
    ctx = Context(args)

    skipped, servers = available_servers(args.server_list)
    if not ctx.pin:
        print("warning: not pinning (taskset missing, fewer than 2 CPUs, or --no-pin)", flush=True)
    if nofile < 2100:
        print("warning: the open-file limit is %d; the 1,000-connection scenario needs more" % nofile, flush=True)

    meta = environment(ctx)
    meta.update(
        command=command,
        argv=sys.argv if argv is None else ["bench/run.py"] + argv,
        repeats=args.repeats,
        duration=args.duration,
        warmup=args.warmup,
        servers={s.name: s.description for s in servers},
        skipped_servers=skipped,
    )
    os.makedirs(LOGS, exist_ok=True)
    logs = {}
    for server in servers:
        logs[server.name] = open(os.path.join(LOGS, server.name + ".log"), "w")

    all_names = [s.name for s in servers]
    results = {"meta": meta, "scenarios": {}}
    tables = []
    started = time.monotonic()
    try:
        for scen in args.scenario_list:
            if not shutil.which(scen.tool):
                print("skipping scenario %s: %s is not installed" % (scen.name, scen.tool), flush=True)
                continue
            members = [s for s in servers if scen.bare or s.name not in CANNED]
            runs = {s.name: [] for s in members}
            for repeat in range(args.repeats):
                shift = repeat % len(members)
                order = members[shift:] + members[:shift]
                for server in order:
                    result = run_one(ctx, args, server, scen, logs[server.name])
                    result["repeat"] = repeat
                    runs[server.name].append(result)
                    progress(
                        "[%5.0fs] %-8s repeat %d/%d %-10s %12s req/s  p99 %-9s errors %s%s"
                        % (
                            time.monotonic() - started,
                            scen.name,
                            repeat + 1,
                            args.repeats,
                            server.name,
                            fmt_rps(result.get("rps")),
                            fmt_ms(result.get("p99_ms")),
                            fmt_errors(result.get("errors") or {}),
                            ("  FAILED: " + result["failure"]) if result.get("failure") else "",
                        )
                    )
            summary = summarize(scen, [s.name for s in members], runs)
            header, rows = table_rows(scen, summary, all_names)
            tables.append((scen, header, rows))
            results["scenarios"][scen.name] = {
                "description": scen.description,
                "latency_valid": scen.latency_valid,
                "summary": summary,
                "runs": runs,
            }
            print("\n== %s: %s ==" % (scen.name, scen.description))
            print(text_table(header, rows), flush=True)
            if not scen.latency_valid and scen.latency_note:
                print("* " + scen.latency_note, flush=True)
    except KeyboardInterrupt:
        print("\ninterrupted; reporting what was measured", file=sys.stderr)
    finally:
        stop_all(logs)

    meta["elapsed_s"] = round(time.monotonic() - started, 1)
    write_json(args.json, results)
    print_report(markdown_report(meta, tables), args.markdown, args.json)


def _terminate(signum, frame):
    raise KeyboardInterrupt


def write_json(path, data):
    """The raw results, whole, at ``path`` (its directory made if missing)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def main_until_terminated(main):
    """Run ``main``; SIGTERM ends it as Ctrl-C does: it reports what it measured, stops what it started."""
    signal.signal(signal.SIGTERM, _terminate)
    main()


if __name__ == "__main__":
    main_until_terminated(main)

"""Static files (issue 43): greenserve --static beside nginx, whitenoise and granian, one core each.

    python bench/static.py                        # 3 repeats: 1 KiB and 10 KiB for 4 s, 100 MiB for 5 s (~6 min)
    python bench/static.py --quick                # 1 repeat of 2 s: checks the harness; the figures mean little
    python bench/static.py --scenarios 1k --servers greenserve,nginx --repeats 5
    python bench/static.py --markdown docs/bench/2026-12-02-issue43-static.md

The peers, each serving the same files from one directory under /static/ (written here, in a
temporary directory, and read once before the first run so that every server reads the page cache):

    greenserve              greenserve --static /static=DIR --workers 1 bench.apps:app (bench/servers/
                            greenserve_cli_server.py: a master and one worker); skipped, with the
                            reason, while greenserve --help has no --static
    nginx                   nginx, worker_processes 1, ``sendfile on; tcp_nopush on`` (Debian's
                            default nginx.conf), ``location /static/ { alias DIR/; expires 60s; }``,
                            no access log; as www-data when run as root. The reference, not a peer
    whitenoise-greenserve   WhiteNoise(bench.apps:app, root=DIR, prefix="/static/") (max_age 60, its
                            default) under greenserve --workers 1
    whitenoise-gunicorn     the same app under gunicorn -k gevent -w 1 (bench/servers/gunicorn_server.py)
    granian                 granian --interface wsgi ... --static-path-route /static --static-path-mount DIR
                            --static-path-expires 60 bench.apps:app (bench/servers/granian_server.py:
                            one worker, one runtime thread): Rust serves the files, Python never runs

Every Cache-Control is max-age=60 (greenserve's and whitenoise's default; nginx's ``expires`` and
granian's option set the same), so the response heads weigh about the same.

The scenarios (keep-alive, 100 connections; every load bounded in time):

    1k      wrk -t1 -c100: GET /static/file-1k.txt (1,024 bytes): req/s, p99, CPU per request, peak RSS
    10k     the same on /static/file-10k.txt (10,240 bytes)
    100m    GET /static/file-100m.bin (104,857,600 bytes) by 100 connections at once, through
            bench/lib/discard.py: MiB/s received (unfinished downloads count), the server's CPU
            seconds per GiB sent, its peak RSS (sampled every 0.1 s), how busy the client kept its
            own core. Not wrk: its one thread copies every byte and parses it, and was the limit at
            ~900 MiB/s, 97 % of its core, with nginx and greenserve far from theirs; discard.py
            drops each body in the kernel (recv with MSG_TRUNC) and received 2.5 to 3 times as much

The rules are bench/run.py's (bench/README.md): the server's processes pinned to CPU 0 with taskset
and the load generator to CPU 1; a fresh server on a fresh port for every (scenario, repeat,
server), ready once GET /static/file-1k.txt answers 200, checked to answer the scenario's URL with
the file's bytes, warmed up by 1 s of load on 10 connections, stopped by PID with its children; the
servers interleaved, their order rotating from one repeat to the next; figures are medians over the
repeats, ratios medians of per-repeat ratios (two runs of the same repeat). Other programs' CPU
during each run is measured (/proc/stat), and a run they used more than 10 % of a core in is
flagged NOISE: on a shared 2-core machine, run it when nothing else runs.

Issue 43's targets, checked on the greenserve row: 1k and 10k at least 0.8x nginx and 3x
whitenoise-gunicorn; 100m within 10 % of nginx's throughput at no more CPU per GiB than nginx's;
no peer but nginx ahead of greenserve in any scenario. Raw results: bench/results/static-latest.json.
"""

import argparse
import http.client
import importlib.util
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import BENCH, HOST, RESULTS, ROOT, cli, load, machine, report, servers  # noqa: E402

PREFIX = "/static/"
MAX_AGE = 60  # greenserve's and whitenoise's default max-age; nginx and granian are given it
FILES = {"1k": ("file-1k.txt", 1024), "10k": ("file-10k.txt", 10 * 1024), "100m": ("file-100m.bin", 100 << 20)}
READY = PREFIX + FILES["1k"][0]
CONNECTIONS = 100
DISTRIBUTIONS = ("greenserve", "gevent", "greenlet", "gunicorn", "granian", "whitenoise")
DEFAULT_JSON = os.path.join(RESULTS, "static-latest.json")
DISCARD = os.path.join(BENCH, "lib", "discard.py")


# --------------------------------------------------------------------------------------------
# The whitenoise peers' app: BENCH_APP=bench.static:whitenoise_app, built on first access (a module
# __getattr__, as bench/frameworks.py builds its apps), so that importing this module costs nothing.


def __getattr__(name):
    if name != "whitenoise_app":
        raise AttributeError(name)
    from whitenoise import WhiteNoise

    from bench.apps import app

    built = WhiteNoise(app, root=os.environ["BENCH_STATIC_DIR"], prefix=PREFIX, max_age=MAX_AGE)
    globals()[name] = built
    return built


# --------------------------------------------------------------------------------------------
# The servers


def help_has_static():
    """Whether ``greenserve --help`` offers ``--static`` (issue 43 may not have landed yet)."""
    out = subprocess.run([sys.executable, "-m", "greenserve", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    return re.search(r"--static(?![-\w])", out.stdout) is not None


class Peer:
    """A server of this benchmark: a row of bench/lib/servers.py started with its own arguments and
    environment, or (nginx) a command of its own."""

    def __init__(self, name, description, row=None, extra=None, env=None, requires=(), needs_static=False):
        self.name = name
        self.description = description
        self.row = servers.BY_NAME[row] if row else None
        self.extra = extra or (lambda directory: [])  # directory -> arguments after the port
        self.env = env or (lambda directory: {})  # directory -> environment for the launcher
        self.requires = requires  # modules beyond the row's own
        self.needs_static = needs_static

    def missing(self):
        if self.row is None:
            return None if machine.program("nginx") else "nginx is not installed (apt-get install nginx)"
        for module in self.requires:
            if importlib.util.find_spec(module) is None:
                return "module %r is not installed (pip install %s)" % (module, module)
        reason = self.row.missing()
        if reason is None and self.needs_static and not help_has_static():
            reason = "greenserve --help has no --static yet (issue 43's static files have not landed)"
        return reason

    def start(self, ctx, log, directory, label):
        """(proc, port, argv, failure), as servers.Server.start."""
        if self.row is None:
            return start_nginx(ctx, log, directory, label)
        return self.row.start(ctx, log, extra=self.extra(directory), label=label, env=self.env(directory),
                              ready_path=READY)


def whitenoise_env(directory):
    return {"BENCH_APP": "bench.static:whitenoise_app", "BENCH_STATIC_DIR": directory}


PEERS = [
    Peer("greenserve", "greenserve --static /static=DIR --workers 1 bench.apps:app (a master and one worker)",
         row="greenserve-cli", extra=lambda d: ["--static", "%s=%s" % (PREFIX.rstrip("/"), d)], needs_static=True),
    Peer("nginx", "nginx, worker_processes 1, sendfile on, tcp_nopush on, alias DIR/, expires 60s, no access log "
         "(C; a master and one worker, as www-data when run as root): the reference for one core"),
    Peer("whitenoise-greenserve", "WhiteNoise(bench.apps:app, root=DIR, prefix='/static/') under greenserve "
         "--workers 1", row="greenserve-cli", env=whitenoise_env, requires=("whitenoise",)),
    Peer("whitenoise-gunicorn", "the same WhiteNoise app under gunicorn -k gevent -w 1 (a master and one worker)",
         row="gunicorn", env=whitenoise_env, requires=("whitenoise",)),
    Peer("granian", "granian --interface wsgi (one worker, one runtime thread) --static-path-route /static "
         "--static-path-mount DIR --static-path-expires 60: files served by Rust", row="granian",
         extra=lambda d: ["--static-path-route", PREFIX.rstrip("/"), "--static-path-mount", d,
                          "--static-path-expires", str(MAX_AGE)]),
]
BY_NAME = {p.name: p for p in PEERS}

NGINX_HTTP = """\
    types { text/plain txt; application/octet-stream bin; }
    sendfile on;
    tcp_nopush on;
"""
NGINX_LOCATIONS = """\
        location {prefix} {{ alias {files}/; expires {max_age}s; }}
        location / {{ return 404; }}
"""


def start_nginx(ctx, log, directory, label):
    """nginx's master in the foreground (daemon off), pinned: (proc, port, argv, failure). Its
    configuration goes in a directory of its own beside the files, removed with them."""
    conf_dir = tempfile.mkdtemp(prefix="nginx-", dir=os.path.dirname(directory))
    os.chmod(conf_dir, 0o755)
    port = servers.free_port()
    conf = os.path.join(conf_dir, "nginx.conf")
    with open(conf, "w") as f:
        f.write(servers.nginx_conf(conf_dir, HOST, port, NGINX_LOCATIONS.format(prefix=PREFIX, files=directory,
                                                                                   max_age=MAX_AGE),
                                   http=NGINX_HTTP))
    argv = ctx.pinned(ctx.server_cpu, [machine.program("nginx"), "-c", conf, "-p", conf_dir + "/",
                                       "-e", os.path.join(conf_dir, "error.log")])
    log.write("\n=== %s: %s\n" % (label, shlex.join(argv)))
    log.flush()
    proc = servers.spawn(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    if servers.wait_ready(proc, port, path=READY):
        return proc, port, argv, None
    rc = proc.poll()
    servers.stop_process(proc)
    return None, port, argv, "nginx %s (see its log)" % ("exited with status %s" % rc if rc is not None
                                                        else "did not answer GET %s within 20 s" % READY)


def write_files(parent):
    """The served directory under `parent`, world-readable (nginx's worker runs as www-data), its
    files read once so that every server reads them from the page cache."""
    directory = os.path.join(parent, "files")
    os.mkdir(directory)
    for folder in (parent, directory):
        os.chmod(folder, 0o755)
    for name, size in FILES.values():
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            chunk = (b"greenserve static benchmark " * 40000)[: 1 << 20]
            for offset in range(0, size, len(chunk)):
                f.write(chunk[: size - offset])
        os.chmod(path, 0o644)
        with open(path, "rb") as f:
            while f.read(1 << 20):
                pass
    return directory


# --------------------------------------------------------------------------------------------
# One run


class RssSampler:
    """The peak of the summed RSS of a process and its descendants, sampled every 0.1 s in a thread."""

    def __init__(self, pid):
        self.pid = pid
        self.peak_kib = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.done.is_set():
            pids = [self.pid] + [child for child, _ in machine.descendants(self.pid)]
            self.peak_kib = max(self.peak_kib, sum(machine.rss_kib(p) or 0 for p in pids))
            self.done.wait(0.1)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(5)


_BINARY_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def parse_wrk_bytes(text):
    """wrk's report, with the bytes it read ("N requests in 5.00s, 10.00GB read": 1024-based units,
    two decimals) as ``bytes``."""
    out = load.parse_wrk(text)
    m = re.search(r"requests in [\d.]+\w+, ([\d.]+)(B|KB|MB|GB|TB) read", text)
    out["bytes"] = int(float(m.group(1)) * _BINARY_UNITS[m.group(2)]) if m else None
    return out


def load_argv(ctx, scenario, port, path, connections, seconds):
    """The load generator's command (run pinned by ctx.run_load) and the parser of its output."""
    if scenario == "100m":
        return [sys.executable, DISCARD, str(port), path, str(connections), str(seconds)], parse_discard
    return wrk_argv(ctx, port, path, connections, seconds), parse_wrk_bytes


def parse_discard(text):
    """bench/lib/discard.py's JSON line, in wrk's terms: requests are whole responses."""
    try:
        data = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"rps": None, "requests": None, "seconds": None, "bytes": None, "errors": {}, "non2xx": 0}
    seconds = data["seconds"] or None
    return {"requests": data["responses"], "seconds": seconds, "bytes": data["bytes"], "p99_ms": None,
            "rps": data["responses"] / seconds if seconds else None, "errors": data["errors"],
            "non2xx": data["non200"]}


def wrk_argv(ctx, port, path, connections, seconds):
    # --timeout 60s: a 100 MiB download shared by 100 connections takes seconds, and wrk 4 counts a
    # response later than its default of 2 s as a timeout (not as a failed one: the bytes still count).
    return [ctx.wrk_path, "-t1", "-c%d" % connections, "-d%ds" % seconds, "--latency", "--timeout", "60s",
            "http://%s:%d%s" % (HOST, port, path)]


def measure(ctx, scenario, proc, port, path, seconds):
    """The load on a started, warmed-up server: the load's figures, the server's CPU and peak RSS,
    and the load generator's own CPU (near 100 % busy, it is the limit, not the server)."""
    cpu_before = machine.tree_cpu(proc.pid)
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    machine_before = machine.cpu_time_split()
    with RssSampler(proc.pid) as rss:
        argv, parse = load_argv(ctx, scenario, port, path, CONNECTIONS, seconds)
        result = ctx.run_load(argv, parse, os.path.basename(argv[0]), port, seconds)
    machine_after = machine.cpu_time_split()
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    delta = machine.cpu_split_delta(cpu_before, machine.tree_cpu(proc.pid)).values()
    server_s = sum(u + k for u, k in delta) / machine.CLOCK_TICK
    client_s = (children_after.ru_utime + children_after.ru_stime) - (children_before.ru_utime + children_before.ru_stime)
    result["peak_rss_mib"] = round(rss.peak_kib / 1024, 1)
    result["server_cpu_s"] = round(server_s, 3)
    if result.get("seconds"):
        result["server_busy"] = round(server_s / result["seconds"], 2)
        result["client_busy"] = round(client_s / result["seconds"], 2)
        if machine_before and machine_after:
            # /proc/stat's user, nice and system time less this server's and the load's: other programs'
            # load in cores (the machine is shared: a busy neighbour moves every figure).
            delta = [b - a for a, b in zip(machine_before, machine_after)]
            others = (delta[0] + delta[1] + delta[2]) / machine.CLOCK_TICK - server_s - client_s
            result["other_busy"] = round(max(0.0, others) / result["seconds"], 2)
        if result.get("requests"):
            result["cpu_us_per_request"] = round(server_s * 1e6 / result["requests"], 2)
        if result.get("bytes"):
            result["mib_s"] = round(result["bytes"] / (1 << 20) / result["seconds"], 1)
            result["cpu_s_per_gib"] = round(server_s / (result["bytes"] / (1 << 30)), 3)
            # On loopback the receiving side's TCP work runs on whichever side is in the kernel
            # when a segment arrives: the split follows timing, the sum is what a byte costs
            # (docs/performance.md, "Static files", has perf's figures).
            result["cpu_s_per_gib_both"] = round((server_s + client_s) / (result["bytes"] / (1 << 30)), 3)
            if machine_before and machine_after:
                # Every CPU's busy time (user, nice, system, irq, softirq): the receive path's work
                # wherever it ran, ksoftirqd's and the interrupts' included, which neither process
                # is charged for.
                busy = sum(delta[i] for i in (0, 1, 2, 5, 6)) / machine.CLOCK_TICK
                result["machine_s_per_gib"] = round(busy / (result["bytes"] / (1 << 30)), 3)
    return servers.note_exit(proc, result)


def served_size(port, path):
    """How many body bytes a GET of `path` answers with (a 200), or why there are none: a server that
    answered the file's URL from elsewhere (the app's hello behind a mount that did not match) would
    be measured serving other bytes. (GET, not HEAD: granian's HEAD has no Content-Length.)"""
    conn = http.client.HTTPConnection(HOST, port, timeout=30)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        size = 0
        while True:
            chunk = response.read(1 << 20)
            if not chunk:
                break
            size += len(chunk)
        return size if response.status == 200 else "GET %s: %s" % (path, response.status)
    except (OSError, http.client.HTTPException) as exc:
        return "GET %s: %s" % (path, exc)
    finally:
        conn.close()


def one_run(ctx, args, peer, scenario, directory, log, label):
    """A fresh server, a warm-up, one measured load, the server stopped: a result dict."""
    name, size = FILES[scenario]
    seconds = args.large_duration if scenario == "100m" else args.duration
    proc, port, argv, failure = peer.start(ctx, log, directory, label)
    result = {"server": peer.name, "scenario": scenario, "label": label, "server_command": shlex.join(argv)}
    try:
        size_served = failure or served_size(port, PREFIX + name)
        if size_served != size:
            result["failure"] = failure or (size_served if isinstance(size_served, str) else
                                            "%d bytes served for a file of %d" % (size_served, size))
            return result
        if args.warmup > 0:
            argv, parse = load_argv(ctx, scenario, port, PREFIX + name, 10, args.warmup)
            warm = ctx.run_load(argv, parse, "warm-up", port, args.warmup, sample=False)
            result["warmup"] = {k: warm.get(k) for k in ("requests", "bytes", "failure")}
        result.update(measure(ctx, scenario, proc, port, PREFIX + name, seconds))
        # A server answering the small files with errors (a wrong mount: 404s) would be counted
        # fast; in 100m a few 503s (greenserve's overload control, before an app's WhiteNoise) weigh
        # nothing beside 100 MiB bodies, and are noted.
        if scenario != "100m" and (result.get("non2xx") or 0) > 0.01 * (result.get("requests") or 0):
            result["failure"] = result.get("failure") or "%d responses were not 2xx" % result["non2xx"]
        return result
    finally:
        servers.stop_and_rest(proc, args.pause)


# --------------------------------------------------------------------------------------------
# Results


def value_of(scenario):
    """The figure a scenario ranks servers by: req/s for the small files, MiB/s for the large one."""
    return "mib_s" if scenario == "100m" else "rps"


MEDIANS = ("rps", "p99_ms", "mib_s", "cpu_us_per_request", "cpu_s_per_gib", "cpu_s_per_gib_both", "machine_s_per_gib",
           "server_busy", "client_busy", "other_busy", "peak_rss_mib")
NOISE = 0.10  # other programs using more than this share of a core during a run: the run is flagged


def summarize(scenario, runs_by_peer):
    """{peer: summary}: medians over the good runs, the paired ratios to nginx and greenserve's over it."""
    value = value_of(scenario)
    good = {name: report.good_runs(runs, value) for name, runs in runs_by_peer.items()}
    out = {}
    for name, runs in runs_by_peer.items():
        entry = report.summary_entry(runs, good[name], MEDIANS)
        if "nginx" in good:
            entry["vs_nginx"] = report.paired_ratio(good[name], good["nginx"], value)
            entry["cpu_vs_nginx"] = report.paired_ratio(good[name], good["nginx"], "cpu_s_per_gib") \
                if scenario == "100m" else None
            entry["both_vs_nginx"] = report.paired_ratio(good[name], good["nginx"], "cpu_s_per_gib_both") \
                if scenario == "100m" else None
            entry["machine_vs_nginx"] = report.paired_ratio(good[name], good["nginx"], "machine_s_per_gib") \
                if scenario == "100m" else None
        if "greenserve" in good:
            entry["greenserve_over"] = report.paired_ratio(good["greenserve"], good[name], value)
        out[name] = entry
    return out


def check_targets(summaries):
    """Issue 43's targets on the greenserve row: [(target, "met"/"MISSED"/"n/a", measured)]."""
    out = []

    def add(text, ratio, floor, below=False):
        if ratio is None:
            out.append((text, "n/a", "not measured"))
        else:
            out.append((text, "met" if (ratio <= floor if below else ratio >= floor) else "MISSED", "%.2f" % ratio))

    def entry(scenario, name):
        return (summaries.get(scenario) or {}).get(name) or {}

    for scenario in ("1k", "10k"):
        add("%s: greenserve ≥ 0.8× nginx (req/s)" % scenario, entry(scenario, "greenserve").get("vs_nginx"), 0.8)
        add("%s: greenserve ≥ 3× whitenoise under gunicorn -k gevent" % scenario,
            entry(scenario, "whitenoise-gunicorn").get("greenserve_over"), 3.0)
    add("100m: throughput ≥ 0.9× nginx's", entry("100m", "greenserve").get("vs_nginx"), 0.9)
    add("100m: CPU per GiB ≤ nginx's (greenserve ÷ nginx)", entry("100m", "greenserve").get("cpu_vs_nginx"), 1.0,
        below=True)
    add("100m: CPU per GiB, server and client together, ≤ nginx's (greenserve ÷ nginx)",
        entry("100m", "greenserve").get("both_vs_nginx"), 1.0, below=True)
    add("100m: the machine's CPU per GiB (every CPU's busy time) ≤ nginx's (greenserve ÷ nginx)",
        entry("100m", "greenserve").get("machine_vs_nginx"), 1.0, below=True)
    for scenario, by_peer in summaries.items():
        for name, e in by_peer.items():
            if name not in ("greenserve", "nginx"):
                add("%s: greenserve ahead of %s" % (scenario, name), e.get("greenserve_over"), 1.0)
    return out


def fmt_mib(v):
    return "—" if v is None else "{:,.0f}".format(v)


def notes_for(entry, skipped_reason=None):
    if skipped_reason:
        return "skipped: " + skipped_reason
    notes = report.failure_notes(entry)
    if any(entry["errors"].values()):
        notes.append("socket errors: " + report.fmt_errors(entry["errors"]))
    if entry["non2xx"]:
        notes.append("%d non-2xx" % entry["non2xx"])
    if (entry.get("other_busy") or 0) > NOISE:
        notes.append("NOISE: other programs used %s of a core" % report.fmt_pct(entry["other_busy"]))
    if (entry.get("client_busy") or 0) >= 0.9:
        notes.append("client %s busy: the load generator may be the limit" % report.fmt_pct(entry["client_busy"]))
    return "; ".join(notes)


def scenario_table(scenario, names, summaries, skipped):
    large = scenario == "100m"
    header = (["server", "MiB/s", "÷ nginx", "greenserve ÷", "CPU s per GiB", "CPU ÷ nginx",
               "server + client CPU s per GiB", "÷ nginx", "machine CPU s per GiB", "÷ nginx"] if large else
              ["server", "req/s", "÷ nginx", "greenserve ÷", "p99", "CPU µs per request"]) + \
        ["server busy", "client busy", "peak RSS MiB", "notes"]
    rows = []
    for name in names:
        if name in skipped:
            rows.append([name] + ["—"] * (len(header) - 2) + [notes_for(None, skipped[name])])
            continue
        e = summaries[name]
        if large:
            figures = [fmt_mib(e["mib_s"]), report.fmt_ratio(e.get("vs_nginx")),
                       report.fmt_ratio(e.get("greenserve_over")),
                       "—" if e["cpu_s_per_gib"] is None else "%.3f" % e["cpu_s_per_gib"],
                       report.fmt_ratio(e.get("cpu_vs_nginx")),
                       "—" if e.get("cpu_s_per_gib_both") is None else "%.3f" % e["cpu_s_per_gib_both"],
                       report.fmt_ratio(e.get("both_vs_nginx")),
                       "—" if e.get("machine_s_per_gib") is None else "%.3f" % e["machine_s_per_gib"],
                       report.fmt_ratio(e.get("machine_vs_nginx"))]
        else:
            figures = [report.fmt_rps(e["rps"]), report.fmt_ratio(e.get("vs_nginx")),
                       report.fmt_ratio(e.get("greenserve_over")), report.fmt_ms(e["p99_ms"]),
                       "—" if e["cpu_us_per_request"] is None else "%.1f" % e["cpu_us_per_request"]]
        rows.append([name] + figures + [report.fmt_pct(e["server_busy"]), report.fmt_pct(e["client_busy"]),
                                        "—" if e["peak_rss_mib"] is None else "%.1f" % e["peak_rss_mib"],
                                        notes_for(e)])
    return header, rows


SCENARIO_TITLES = {
    "1k": "1 KiB file, 100 keep-alive connections",
    "10k": "10 KiB file, 100 keep-alive connections",
    "100m": "100 MiB file, 100 connections downloading at once",
}


def markdown_report(meta, args, names, summaries, skipped, targets):
    lines = report.report_head(meta, "Static files (issue 43)")
    v = meta["versions"]
    lines += [
        "- Peers: nginx %s; whitenoise %s; gunicorn %s; granian %s; %s" % (
            v.get("nginx"), v.get("whitenoise"), v.get("gunicorn"), v.get("granian"), meta["wrk"]),
        "- Pinning: %s; load average at the start: %s" % (meta["pinning"], meta["loadavg_at_start"]),
        "- %d repeat(s); %s s of load a run for 1k and 10k (wrk), %s s for 100m (bench/lib/discard.py), "
        "after %s s of warm-up on 10 connections"
        % (args.repeats, args.duration, args.large_duration, args.warmup),
        "",
        "Each server serves the same files under /static/ from one directory, with Cache-Control max-age=60.",
        "Figures are medians over the repeats; ratios are medians of per-repeat ratios. `÷ nginx` is this "
        "server's figure over nginx's, `greenserve ÷` greenserve's over this server's. CPU is the server's "
        "processes' user + kernel time (/proc/PID/stat) over the load; \"server + client\" adds the load "
        "generator's (its rusage); peak RSS the largest sum of the server's RSS, sampled every 0.1 s. Only "
        "ratios within this report mean anything.",
        "",
    ]
    lines += ["| server | what runs |", "|---|---|"]
    lines += ["| %s | %s |" % (p.name, p.description) for p in PEERS if p.name in names]
    for scenario in args.scenario_list:
        header, rows = scenario_table(scenario, names, summaries.get(scenario, {}), skipped)
        lines += ["", "## %s" % SCENARIO_TITLES[scenario], "", report.markdown_table(header, rows)]
    lines += ["", "## Issue 43's targets (the greenserve row)", ""]
    lines.append(report.markdown_table(["target", "measured", "verdict"],
                                       [[t, measured, verdict] for t, verdict, measured in targets], align="lrl"))
    lines += ["", "A 100m figure is bytes received (unfinished downloads count) over the run's time. On loopback "
              "the receiving side's TCP work runs on whichever side is in the kernel when a segment arrives, so "
              "the server's own CPU per GiB depends on timing as well as on the server; server + client is what "
              "a byte costs (docs/performance.md, \"Static files\").", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# The command


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_repeats(parser, 3, 4, quick=(1, 2))
    parser.add_argument("--large-duration", type=int, default=None,
                        help="seconds of load per 100m run (default 5; --quick 2)")
    parser.add_argument("--scenarios", default=",".join(FILES), help="of %s (default all)" % ", ".join(FILES))
    parser.add_argument("--servers", default=",".join(p.name for p in PEERS),
                        help="of %s (default all)" % ", ".join(p.name for p in PEERS))
    parser.add_argument("--warmup", type=int, default=1, help="seconds of load on 10 connections before each run "
                        "(0: none)")
    parser.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    cli.add_output(parser, os.path.basename(DEFAULT_JSON))
    args = parser.parse_args(argv)
    cli.repeats_chosen(parser, args)
    if args.large_duration is None:
        args.large_duration = 2 if args.quick else 5
    args.scenario_list = [name for name in args.scenarios.split(",") if name.strip()]
    unknown = [name for name in args.scenario_list if name not in FILES]
    if unknown or not args.scenario_list:
        parser.error("unknown scenario %s; known: %s" % (", ".join(unknown) or "(none)", ", ".join(FILES)))
    args.peers = cli.choose(parser, args.servers, BY_NAME, "server")
    args.argv = argv
    return args


def run_all(ctx, args, peers, directory, log, session, results):
    """Fills `results`, {scenario: {peer: [a result per repeat]}} (what was measured stays there if
    the run is interrupted), the servers interleaved within each repeat."""
    for scenario in args.scenario_list:
        by_peer = results.setdefault(scenario, {p.name: [] for p in peers})
        for repeat, order in cli.rotations(peers, args.repeats):
            for peer in order:
                label = "%s, repeat %d, %s" % (scenario, repeat + 1, peer.name)
                result = one_run(ctx, args, peer, scenario, directory, log, label)
                by_peer[peer.name].append(result)
                figure = result.get(value_of(scenario))
                session.progress("%-32s %s %s%s" % (
                    label, "—" if figure is None else "{:,.0f}".format(figure),
                    "MiB/s" if scenario == "100m" else "req/s",
                    "  FAILED: " + result["failure"] if result.get("failure") else ""))


def main(argv=None):
    args = parse_args(argv)
    machine.raise_nofile()  # 100 connections need no more, but the servers inherit it as bench/run.py's do
    ctx = load.Context.from_args(args, duration=args.duration)
    if ctx.wrk_path is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    skipped, peers = servers.available(args.peers)
    meta = machine.environment(ctx, DISTRIBUTIONS)
    meta["versions"]["nginx"] = machine.nginx_version()
    meta["command"] = cli.command("static.py", args.argv)
    parent = tempfile.mkdtemp(prefix="greenserve-bench-static-")
    log = servers.open_log("static", "w")
    results = {}
    try:
        directory = write_files(parent)
        with cli.Session({"static": log}) as session:
            run_all(ctx, args, peers, directory, log, session, results)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    summaries = {scenario: summarize(scenario, by_peer) for scenario, by_peer in results.items()}
    targets = check_targets(summaries)
    names = [p.name for p in args.peers]
    text = markdown_report(meta, args, names, summaries, skipped, targets)
    report.publish(text, args.markdown, args.json,
                   {"meta": meta, "skipped": skipped, "results": results, "summaries": summaries, "targets": targets})
    return 0


if __name__ == "__main__":
    cli.main(main)

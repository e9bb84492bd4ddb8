"""Benchmark harness: greenserve side by side with its peers, on one WSGI app, on loopback.

    python bench/run.py                       # every scenario and server, 3 repeats of 5 s
    python bench/run.py --quick               # 1 repeat of 2 s: a smoke test of the harness
    python bench/run.py --scenarios hello,pipeline --servers greenserve,bare --repeats 5
    python bench/run.py --markdown bench/results/latest.md
    python bench/run.py --scenarios flask,django,flask-wait   # Flask and Django (bench/frameworks.py)

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
import os
import shlex
import shutil
import sys

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import cli, load, machine, report, servers  # noqa: E402

# A server's rate below this fraction of greenserve's, in the same scenario, is flagged.
LOW_RATE = 0.10
# The rows a scenario's targets (zero socket errors, ratios to peers) are checked for: greenserve's
# WSGIServer in one process, and its command as a user runs it (monkey-patched, master and worker).
TARGET_ROWS = ("greenserve", "greenserve-cli")
# The servers of the framework scenarios: every one that serves a WSGI app and that the issue
# names or that greenserve is built from (pywsgi), with greenserve's command beside its WSGIServer.
FRAMEWORK_SERVERS = (
    "greenserve", "greenserve-pure", "greenserve-cli", "pywsgi", "gunicorn", "waitress", "bjoern", "granian"
)


# --------------------------------------------------------------------------------------------
# Scenarios: each is a function (ctx, port) -> result dict, registered with @scenario.


class Scenario:
    def __init__(self, name, function, description, bare, latency_valid, latency_note, default, tool, zero_errors,
                 app=None, path="/", servers=None, waits=False, targets=None):
        self.name = name
        self.app = app  # BENCH_APP for the launchers ("module:name"), None: bench.apps:app
        self.path = path  # what the readiness check and the warm-up request
        self.servers = servers  # the only servers that take part, None: all (the bare loops as `bare` says)
        self.waits = waits  # the app waits on I/O: BENCH_WAIT per server, BENCH_APP_WAITS=1
        self.targets = targets or {}  # {peer: x}: greenserve's req/s is to be at least x times the peer's
        self.zero_errors = zero_errors  # greenserve is expected to have no socket errors here
        self.tool = tool  # the load generator it needs: "wrk" or "ab"
        self.function = function
        self.description = description
        self.bare = bare  # the bare loop's canned response ("hello", "page") if it takes part, else False
        self.latency_valid = latency_valid
        self.latency_note = latency_note
        self.default = default

    def takes(self, server):
        """Whether `server` (a servers.Server) takes part."""
        if self.servers is not None:
            return server.name in self.servers
        return bool(self.bare) or server.name not in servers.CANNED

    def environment(self, server):
        """The variables its launcher gets: which app, and how the app waits under this server."""
        env = {}
        if self.app:
            env["BENCH_APP"] = self.app
        if self.waits:
            env["BENCH_APP_WAITS"] = "1"
            env["BENCH_WAIT"] = "gevent" if server.greenlets else "time"
        return env


SCENARIOS = []


def scenario(
    name, description, bare=False, latency_valid=True, latency_note=None, default=True, tool="wrk", zero_errors=False,
    **options
):
    """Registers a scenario: `bare` names the bare loop's canned response if it takes part,
    `default` if it runs
    without --scenarios, `tool` the load generator it needs, `zero_errors` if any socket error
    of greenserve's rows (TARGET_ROWS) is reported as a missed target. `options`: Scenario's app, path, servers,
    waits and targets."""

    def register(function):
        SCENARIOS.append(
            Scenario(name, function, description, bare, latency_valid, latency_note, default, tool, zero_errors,
                     **options)
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
    return ctx.wrk(port, "/", connections=100, script="pipeline.lua", script_args=["16"])


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
    return ctx.wrk(port, "/upload", connections=50, script="upload.lua")


@scenario(
    "close",
    "a connection per request: ab -c50 GET / (HTTP/1.0, no keep-alive)",
    default=False,
    tool="ab",
)
def close(ctx, port):
    return ctx.ab(port, "/", concurrency=50)


# The real frameworks (bench/frameworks.py), on the servers of FRAMEWORK_SERVERS: the targets of
# the issue are greenserve's req/s over the peer's, in the same run.
FRAMEWORK_TARGETS = {"bjoern": 1.0, "granian": 1.3, "gunicorn": 2.5}
FLASK_APP = "bench.frameworks:flask_app"
DJANGO_APP = "bench.frameworks:django_app"


def json_view_scenario(name, app, view):
    """The keep-alive scenario `name`: wrk -t1 -c100 on `app`'s GET /json, `view` its description."""

    @scenario(
        name,
        "%s, keep-alive: wrk -t1 -c100 --latency GET /json" % view,
        default=False,
        app=app,
        path="/json",
        servers=FRAMEWORK_SERVERS,
        targets=FRAMEWORK_TARGETS,
    )
    def json_view(ctx, port):
        return ctx.wrk(port, "/json", connections=100)

    return json_view


flask_json = json_view_scenario("flask", FLASK_APP, "Flask 3 JSON view (jsonify, TechEmpower's /json)")
django_json = json_view_scenario(
    "django", DJANGO_APP, "Django 5 JSON view (JsonResponse; security, common and clickjacking middleware)"
)


@scenario(
    "flask-wait",
    "Flask view waiting 10 ms (gevent.sleep on gevent servers, time.sleep on the others), 1,000 "
    "connections: wrk -t1 -c1000 --latency GET /wait",
    default=False,
    zero_errors=True,
    app=FLASK_APP,
    path="/wait",
    servers=FRAMEWORK_SERVERS,
    waits=True,
    targets={"granian": 1.3, "gunicorn": 2.5},
)
def flask_wait(ctx, port):
    return ctx.wrk(port, "/wait", connections=1000)


def run_one(ctx, args, server, scen, log):
    """Start server, warm it up, run the scenario's load, stop it; the result dict."""
    extra = [scen.bare] if server.name in servers.CANNED else []
    env = scen.environment(server)
    proc, port, argv, failure = server.start(ctx, log, extra, label=scen.name, env=env, ready_path=scen.path)
    try:
        if failure:
            return {"server_command": shlex.join(argv), "server_env": env, "rps": None, "failure": failure}
        if args.warmup > 0:
            ctx.wrk(port, scen.path, connections=10, duration=args.warmup)
        cpu_before = machine.tree_cpu(proc.pid)
        result = scen.function(ctx, port)
        result.update(machine.cpu_per_request(cpu_before, machine.tree_cpu(proc.pid), result))
        result["server_command"] = shlex.join(argv)
        result["server_env"] = env
        return servers.note_exit(proc, result)
    finally:
        servers.stop_and_rest(proc, args.pause)


# --------------------------------------------------------------------------------------------
# Summaries and the report


def summarize(scen, server_names, runs):
    """runs[server] = [result per repeat]; per-server medians, totals, ratios and notes."""
    summary = {}
    ok = {s: report.good_runs(runs[s]) for s in server_names}
    for s in server_names:
        entry = report.summary_entry(runs[s], ok[s], ("rps", "unaccepted", "user_us", "kernel_us", "busy"))
        good = [r for r in ok[s] if r is not None]
        entry["p99_ms"] = report.median([r.get("p99_ms") or None for r in good]) if scen.latency_valid else None
        for ref in ("greenserve", "bare"):
            if ref in server_names:
                entry["ratio_" + ref] = report.paired_ratio(ok[s], ok[ref])
            else:
                entry["ratio_" + ref] = None
        summary[s] = entry
    reference = summary.get("greenserve", {}).get("rps")
    for s, entry in summary.items():
        notes = report.failure_notes(entry)
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
        if scen.zero_errors and s in TARGET_ROWS and entry["ok_runs"]:
            missed = sum(entry["errors"].values())
            notes.append("MISSES the zero-socket-error target" if missed else "zero-socket-error target met")
        if s in scen.targets:
            notes += target_notes(s, scen.targets[s], ok, entry)
        entry["notes"] = notes
    return summary


def target_notes(peer, target, ok, entry):
    """greenserve's rows ÷ this peer (medians of per-repeat ratios) against the target; entry["targets"]."""
    entry["targets"] = {}
    parts = []
    for ref in TARGET_ROWS:
        ratio = report.paired_ratio(ok[ref], ok[peer]) if ref in ok else None
        if ratio is None:
            continue
        entry["targets"][ref] = ratio
        parts.append("%s %s× (%s)" % (ref, report.fmt_ratio(ratio), "met" if ratio >= target else "MISSED"))
    if not parts:
        return []
    return ["target: greenserve ≥ %s× this: %s" % (report.fmt_ratio(target), ", ".join(parts))]


def table_rows(scen, summary, all_servers):
    header = [
        "server",
        "req/s (median)",
        "p99 (median)",
        "server CPU µs/request: user + kernel",
        "socket errors",
        "non-2xx",
        "÷ greenserve",
        "÷ bare",
        "notes",
    ]
    rows = []
    for name in all_servers:
        if scen.servers is not None and name not in scen.servers:
            continue  # a scenario with servers of its own: its table lists only them
        if name not in summary:
            reason = "n/a: the bare loops only answer canned hello or page bytes" if name in servers.CANNED else "n/a"
            rows.append([name, "n/a", "n/a", "", "", "", "", "", reason])
            continue
        e = summary[name]
        p99 = report.fmt_ms(e["p99_ms"]) if scen.latency_valid else "n/a*"
        measured = any(r for r in e["errors"].values()) or e["ok_runs"]
        rows.append(
            [
                name,
                report.fmt_rps(e["rps"]),
                p99,
                report.fmt_cpu(e["user_us"], e["kernel_us"], e["busy"]),
                report.fmt_errors(e["errors"]) if measured else "—",
                str(e["non2xx"]) if measured else "—",
                report.fmt_ratio(e["ratio_greenserve"]),
                report.fmt_ratio(e["ratio_bare"]),
                "; ".join(e["notes"]),
            ]
        )
    return header, rows


def markdown_report(meta, scenario_tables):
    v = meta["versions"]
    lines = report.report_head(meta, "greenserve benchmark") + [
        "- Peers: gunicorn %s; waitress %s; Paste %s; bjoern %s; meinheld %s; granian %s"
        % (v.get("gunicorn"), v.get("waitress"), v.get("Paste"), v.get("bjoern"), v.get("meinheld"), v.get("granian")),
        "- Frameworks: Flask %s (Werkzeug %s); Django %s" % (v.get("Flask"), v.get("Werkzeug"), v.get("Django")),
        "- Load generators: %s; %s" % (meta["wrk"], meta["ab"]),
        "- Pinning: %s; %d repeat(s) of %d s per server and scenario, interleaved in rotating order; "
        "warm-up %d s; load average at start %s"
        % (meta["pinning"], meta["repeats"], meta["duration"], meta["warmup"], meta["loadavg_at_start"]),
        "",
        "req/s and p99 are medians over the repeats; ÷ columns are medians of per-repeat ratios of req/s "
        "(this server ÷ greenserve, this server ÷ the bare gevent loop); socket errors and non-2xx are "
        "totals over the repeats. Only ratios within one run are meaningful. Server CPU per request: "
        "medians of the server processes' user and kernel time over the load (/proc/PID/stat, in "
        "%d ms ticks) divided by the requests served; busy: that time over the load's wall time "
        "(100 %%: the server's core was the limit, well under: the client was)." % (1000 // machine.CLOCK_TICK),
    ]
    for skipped, reason in meta["skipped_servers"].items():
        lines.append("")
        lines.append("- Skipped %s: %s" % (skipped, reason))
    for scen, header, rows in scenario_tables:
        lines += ["", "## %s" % scen.name, "", scen.description, "", report.markdown_table(header, rows)]
        if not scen.latency_valid and scen.latency_note:
            lines += ["", "\\* " + scen.latency_note]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------


def parse_args(argv):
    names = [s.name for s in SCENARIOS]
    p = argparse.ArgumentParser(
        description="Benchmark greenserve against its peers on loopback (see bench/README.md).",
        epilog="scenarios: %s (default: %s); servers: %s"
        % (", ".join(names), ",".join(s.name for s in SCENARIOS if s.default), ", ".join(servers.BY_NAME)),
    )
    cli.add_repeats(p, 3, 5, quick=(1, 2), what="server per scenario")
    p.add_argument("--scenarios", default=None, help="comma-separated scenario names")
    p.add_argument("--servers", default=None, help="comma-separated server names")
    p.add_argument("--warmup", type=int, default=1, help="seconds of light load (10 connections) before each run (0: none)")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    cli.add_output(p, "latest.json")
    args = p.parse_args(argv)
    cli.repeats_chosen(p, args)
    by_name = {s.name: s for s in SCENARIOS}
    if args.scenarios:
        args.scenario_list = cli.choose(p, args.scenarios, by_name, "scenario(s)")
    else:
        args.scenario_list = [s for s in SCENARIOS if s.default]
    args.server_list = cli.choose(p, args.servers, servers.BY_NAME, "server(s)") if args.servers else list(servers.SERVERS)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    nofile = machine.raise_nofile()  # inherited by the servers and by wrk (-c1000 needs > 1000)
    ctx = load.Context.from_args(args, args.duration)

    skipped, members = servers.available(args.server_list)
    if not ctx.pin:
        print("warning: not pinning (taskset missing, fewer than 2 CPUs, or --no-pin)", flush=True)
    if nofile < 2100:
        print("warning: the open-file limit is %d; the 1,000-connection scenario needs more" % nofile, flush=True)

    meta = machine.environment(ctx)
    meta.update(
        command=cli.command("run.py", argv),
        argv=["bench/run.py"] + (sys.argv[1:] if argv is None else argv),
        repeats=args.repeats,
        duration=args.duration,
        warmup=args.warmup,
        servers={s.name: s.description for s in members},
        skipped_servers=skipped,
    )
    logs = {s.name: servers.open_log(s.name, "w") for s in members}
    all_names = [s.name for s in members]
    results = {"meta": meta, "scenarios": {}}
    tables = []
    with cli.Session(logs) as session:
        for scen in args.scenario_list:
            if not shutil.which(scen.tool):
                print("skipping scenario %s: %s is not installed" % (scen.name, scen.tool), flush=True)
                continue
            taking = [s for s in members if scen.takes(s)]
            if not taking:
                print("skipping scenario %s: none of the servers chosen takes part" % scen.name, flush=True)
                continue
            runs = {s.name: [] for s in taking}
            for repeat, order in cli.rotations(taking, args.repeats):
                for server in order:
                    result = run_one(ctx, args, server, scen, logs[server.name])
                    result["repeat"] = repeat
                    runs[server.name].append(result)
                    session.progress(
                        "%-8s repeat %d/%d %-10s %12s req/s  p99 %-9s errors %s%s"
                        % (
                            scen.name,
                            repeat + 1,
                            args.repeats,
                            server.name,
                            report.fmt_rps(result.get("rps")),
                            report.fmt_ms(result.get("p99_ms")),
                            report.fmt_errors(result.get("errors") or {}),
                            ("  FAILED: " + result["failure"]) if result.get("failure") else "",
                        )
                    )
            summary = summarize(scen, [s.name for s in taking], runs)
            header, rows = table_rows(scen, summary, all_names)
            tables.append((scen, header, rows))
            results["scenarios"][scen.name] = {
                "description": scen.description,
                "latency_valid": scen.latency_valid,
                "summary": summary,
                "runs": runs,
            }
            print("\n== %s: %s ==" % (scen.name, scen.description))
            print(report.text_table(header, rows), flush=True)
            if not scen.latency_valid and scen.latency_note:
                print("* " + scen.latency_note, flush=True)

    meta["elapsed_s"] = session.elapsed()
    report.publish(markdown_report(meta, tables), args.markdown, args.json, results)


if __name__ == "__main__":
    cli.main(main)

"""How keep-alive hello throughput scales from one worker process to two, with the real CLI.

    python bench/workers.py                   # w1, w2 (and w2-reuse-port if the CLI has it): 3 repeats of 10 s
    python bench/workers.py --quick           # 1 repeat of 3 s: checks that it works
    python bench/workers.py --servers w1,w2 --repeats 5 --markdown bench/results/workers.md

Each variant is ``python -m greenserve --workers N --bind 127.0.0.1:PORT ... bench.apps:app``: a
pre-fork master and N worker processes, started fresh on a new port for every run and stopped by
PID afterwards (the master, then whatever workers it left). The load is run.py's ``hello``:
``wrk -t1 -c100 -d10s --latency http://127.0.0.1:PORT/``. The variants are interleaved (w1, w2,
w1, w2, ... in an order that rotates with the repeat) and the tables give medians.

Nothing is pinned: two workers need both cores, so the server processes and wrk share the two
CPUs. For every run the script therefore measures what share of the machine each side took:
wrk's CPU time (user + sys, from os.wait4's rusage) and the server's (utime + stime of the
master and its workers, from /proc/PID/stat just before wrk starts and just after it exits),
each divided by wall time x CPUs. Halfway through the load it also counts the connections each
worker holds (its ESTABLISHED sockets on the port, from /proc/net/tcp and /proc/PID/fd), and
each worker's CPU time gives its share of the work.

The target: w2 ÷ w1 ≥ 1.3 (a median of per-repeat ratios, each pairing two runs of one repeat).
Raw results go to bench/results/workers.json (--json).
"""

import argparse
import os
import select
import shlex
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import HOST, ROOT, cli, load, machine, report, servers  # noqa: E402

TARGET = 1.3  # w2 ÷ w1
CONNECTIONS = 100
PATH = "/"  # run.py's hello scenario: the 13-byte hello of bench.apps


class Variant(servers.Server):
    """The real CLI's pre-fork master with N workers, started as a server is, but not pinned."""

    def __init__(self, name, workers, extra=(), needs=None):
        self.name = name
        self.workers = workers
        self.extra = list(extra)
        self.needs = needs  # a CLI flag that `python -m greenserve --help` must list
        self.env = None

    def argv(self, ctx, port, extra=()):
        # The access log is off unless --access-log is given; --log-level warning keeps the error
        # log to problems; --graceful-timeout 2 bounds the stop (wrk has exited by then anyway).
        return (
            [sys.executable, "-m", "greenserve", "--workers", str(self.workers)]
            + self.extra
            + ["--bind", "%s:%s" % (HOST, port), "--log-level", "warning", "--graceful-timeout", "2",
               "--chdir", ROOT, "bench.apps:app"]
        )


VARIANTS = [
    Variant("w1", 1),
    Variant("w2", 2),
    Variant("w2-reuse-port", 2, ["--reuse-port"], needs="--reuse-port"),
]
VARIANTS_BY_NAME = {v.name: v for v in VARIANTS}


def cli_help():
    """`python -m greenserve --help`, or "" when it cannot be run."""
    try:
        out = subprocess.run(
            [sys.executable, "-m", "greenserve", "--help"], capture_output=True, text=True, timeout=30, cwd=ROOT
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout


# --------------------------------------------------------------------------------------------
# /proc: the workers, and which sockets they hold


def machine_ticks():
    """(busy, total) jiffies of all CPUs: busy leaves out idle and iowait."""
    fields = machine.cpu_time_split() or [0] * 8
    total = sum(fields)
    return total - fields[3] - fields[4], total


def serving_workers(master, port):
    """The workers whose event loop watches a listening socket on the port: those that serve."""
    listening = {inode for inode, (state, _) in machine.tcp_sockets(port).items() if state == "0A"}
    return [w for w in machine.children(master) if listening & machine.epoll_watches(w)]


def wait_workers(proc, port, count, timeout=20.0):
    """The serving workers once `count` of them serve (or whatever serves after `timeout` s)."""
    deadline = time.monotonic() + timeout
    while True:
        serving = serving_workers(proc.pid, port)
        if len(serving) >= count or proc.poll() is not None or time.monotonic() >= deadline:
            return serving
        time.sleep(0.05)


def connections_per_worker(master, port):
    """{worker pid: ESTABLISHED connections on the port it holds}."""
    established = {inode for inode, (state, _) in machine.tcp_sockets(port).items() if state == "01"}
    return {w: len(established & machine.socket_inodes(w)) for w in machine.children(master)}


# --------------------------------------------------------------------------------------------
# One measured wrk run, with its rusage


def _wait_exit(pid, timeout):
    """Block until child pid can be reaped or `timeout` s pass; True if it can be reaped."""
    if timeout <= 0:
        return False
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None:  # no pidfd: poll
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            time.sleep(0.01)
        return False
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(timeout * 1000))
    finally:
        os.close(fd)


def measured_wrk(ctx, proc, port, duration):
    """wrk -t1 -c100 on the server `proc`, with the CPU both sides used and the workers' share."""
    argv = [ctx.wrk_path, "-t1", "-c%d" % CONNECTIONS, "-d%ds" % duration, "--latency", "http://%s:%d%s" % (HOST, port, PATH)]
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    server_before = machine.tree_cpu(proc.pid)
    machine_before = machine_ticks()
    started = time.monotonic()
    wrk = servers.spawn(argv, stdout=out, stderr=err)
    result = {"command": shlex.join(argv), "connections": CONNECTIONS}
    rusage = None
    try:
        # Halfway through the load: the connections each worker holds.
        if not _wait_exit(wrk.pid, started + duration * 0.5 - time.monotonic()):
            result["connections_per_worker"] = {str(w): n for w, n in connections_per_worker(proc.pid, port).items()}
        if _wait_exit(wrk.pid, started + duration + 30 - time.monotonic()):
            _, status, rusage = os.wait4(wrk.pid, 0)
            wrk.returncode = os.waitstatus_to_exitcode(status)
        else:
            servers.stop_process(wrk, grace=2.0)
            result["failure"] = "wrk did not finish in %d s" % (duration + 30)
        wall = time.monotonic() - started
        server_after = machine.tree_cpu(proc.pid)
        machine_after = machine_ticks()
    finally:
        servers.LIVE.pop(wrk.pid, None)
    out.seek(0)
    err.seek(0)
    result.update(rc=wrk.returncode, stdout=out.read(), stderr=err.read(), wall_s=round(wall, 3))
    out.close()
    err.close()
    result.update(load.parse_wrk(result["stdout"]))
    if result["rps"] is None and not result.get("failure"):
        last = (result["stderr"].strip() or result["stdout"].strip() or "no output").splitlines()[-1]
        result["failure"] = "wrk failed (rc %s): %s" % (wrk.returncode, last)

    ncpu = len(os.sched_getaffinity(0))
    capacity = wall * ncpu  # CPU-seconds the machine had during the run
    if rusage is not None:
        result["wrk_cpu_s"] = round(rusage.ru_utime + rusage.ru_stime, 3)
        result["wrk_share"] = result["wrk_cpu_s"] / capacity
    delta = machine.cpu_delta(server_before, server_after)
    result["server_cpu_s"] = round(sum(delta.values()) / machine.CLK_TCK, 3)
    result["server_share"] = result["server_cpu_s"] / capacity
    result["master_cpu_s"] = round(delta.get(proc.pid, 0) / machine.CLK_TCK, 3)
    result["worker_cpu_s"] = {str(p): round(t / machine.CLK_TCK, 3) for p, t in delta.items() if p != proc.pid}
    gone = sorted(set(server_before) - set(server_after))
    if gone:  # a worker that exited took its CPU time with it
        result["processes_gone"] = gone
    busy = machine_after[0] - machine_before[0]
    total = machine_after[1] - machine_before[1]
    result["machine_busy_share"] = busy / total if total > 0 else None
    return result


def run_one(ctx, args, variant, log):
    """Start the variant, wait for every worker, warm it up, measure, stop it; the result dict."""
    proc, port, argv, failure = variant.start(ctx, log)
    base = {"variant": variant.name, "workers": variant.workers, "server_command": shlex.join(argv), "rps": None}
    try:
        if failure:
            return dict(base, failure=failure)
        ready_at = time.monotonic()
        serving = wait_workers(proc, port, variant.workers)
        base["workers_serving"] = len(serving)
        base["workers_wait_s"] = round(time.monotonic() - ready_at, 2)
        if args.warmup > 0:
            ctx.wrk(port, PATH, connections=CONNECTIONS, duration=args.warmup)
        time.sleep(args.settle)
        result = dict(base, **measured_wrk(ctx, proc, port, args.duration))
        if len(serving) < variant.workers:
            result.setdefault("notes", []).append(
                "only %d of %d workers served before the load" % (len(serving), variant.workers)
            )
        return servers.note_exit(proc, result)
    finally:
        servers.stop_and_rest(proc, args.pause)


# --------------------------------------------------------------------------------------------
# Summaries and tables


def ok(r):
    return r is not None and r.get("rps") is not None and not r.get("failure")


def split(r):
    """The workers' share of the connections (mid-run) and of the server's CPU, as "a/b" text."""
    conns = r.get("connections_per_worker") or {}
    cpu = r.get("worker_cpu_s") or {}
    pids = sorted(set(conns) | set(cpu), key=int)
    c = "/".join(str(conns.get(p, "?")) for p in pids) if conns else "—"
    total = sum(cpu.values())
    w = "/".join("%.0f" % (100.0 * cpu.get(p, 0) / total) for p in pids) if total > 0 else "—"
    return c, w


def summarize(names, runs):
    summary = {}
    for name in names:
        good = [r for r in runs[name] if ok(r)]
        entry = report.summary_entry(
            runs[name], good, ("rps", "p99_ms", "wrk_share", "server_share", "machine_busy_share")
        )
        # Requests per CPU-second of the server: does a second worker cost more per request?
        entry["rps_per_server_cpu"] = report.median(
            [r["requests"] / r["server_cpu_s"] for r in good if r.get("requests") and r.get("server_cpu_s")]
        )
        if "w1" in runs:
            good_only = lambda rs: [r if ok(r) else None for r in rs]  # noqa: E731
            entry["ratio_w1"] = report.paired_ratio(good_only(runs[name]), good_only(runs["w1"]))
        else:
            entry["ratio_w1"] = None
        summary[name] = entry
    return summary


def tables(names, runs, summary):
    header = ["variant", "req/s (median)", "÷ w1", "p99 (median)", "socket errors", "non-2xx", "wrk CPU", "server CPU",
              "machine busy", "req per server CPU-s", "connections per worker", "worker CPU split %", "notes"]
    rows = []
    for name in names:
        e = summary[name]
        notes = list(e["failures"])
        if e["ok_runs"] < e["runs"]:
            notes.append("%d of %d runs failed" % (e["runs"] - e["ok_runs"], e["runs"]))
        for r in runs[name]:
            notes += r.get("notes", [])
            if r.get("processes_gone"):
                notes.append("a server process exited during the load")
        good = [r for r in runs[name] if ok(r)]
        splits = [split(r) for r in good]
        rows.append([
            name,
            report.fmt_rps(e["rps"]),
            "—" if name == "w1" else report.fmt_ratio(e["ratio_w1"]),
            report.fmt_ms(e["p99_ms"]),
            report.fmt_errors(e["errors"]),
            str(e["non2xx"]),
            report.fmt_pct(e["wrk_share"]),
            report.fmt_pct(e["server_share"]),
            report.fmt_pct(e["machine_busy_share"]),
            report.fmt_rps(e["rps_per_server_cpu"]),
            ", ".join(c for c, _ in splits) or "—",
            ", ".join(w for _, w in splits) or "—",
            "; ".join(sorted(set(notes))),
        ])
    detail_header = ["repeat", "variant", "req/s", "p99", "socket errors", "wrk CPU", "server CPU", "machine busy",
                     "connections per worker", "worker CPU split %"]
    detail = []
    repeats = max(len(v) for v in runs.values()) if runs else 0
    for i in range(repeats):
        for name in names:
            if i >= len(runs[name]):
                continue
            r = runs[name][i]
            c, w = split(r)
            detail.append([
                str(i + 1),
                name,
                report.fmt_rps(r.get("rps")) if ok(r) else "failed: " + str(r.get("failure")),
                report.fmt_ms(r.get("p99_ms")),
                report.fmt_errors(r.get("errors") or {}),
                report.fmt_pct(r.get("wrk_share")),
                report.fmt_pct(r.get("server_share")),
                report.fmt_pct(r.get("machine_busy_share")),
                c,
                w,
            ])
    return (header, rows), (detail_header, detail)


def verdicts(summary):
    lines = []
    for name in ("w2", "w2-reuse-port"):
        ratio = summary.get(name, {}).get("ratio_w1")
        if ratio is not None:
            lines.append("%s ÷ w1 = %.2f: the target of ≥ %.1f is %s" % (name, ratio, TARGET, "met" if ratio >= TARGET else "MISSED"))
        elif name in summary:
            lines.append("%s ÷ w1: not measured (no pair of good runs)" % name)
    return lines


def markdown_report(meta, summary_table, detail_table, summary):
    v = meta["versions"]
    lines = report.short_head(meta, "greenserve worker scaling", "greenlet %s; %s" % (v.get("greenlet"), meta["wrk"])) + [
        "- Servers: `python -m greenserve --workers N [--reuse-port] --bind 127.0.0.1:PORT --log-level warning "
        "--graceful-timeout 2 --chdir ROOT bench.apps:app` (access log off, gevent monkey-patching as the CLI's "
        "default), started fresh for every run; ready once `GET /` answers and every worker's event loop "
        "watches the listening socket; warm-up %s s of the same load, then %s s of rest"
        % (meta["warmup"], meta["settle"]),
        "- Load: `wrk -t1 -c%d -d%ds --latency http://127.0.0.1:PORT%s` (keep-alive hello); %d repeat(s), "
        "variants interleaved in rotating order" % (CONNECTIONS, meta["duration"], PATH, meta["repeats"]),
        "- Pinning: %s; load average at start %s" % (meta["pinning"], meta["loadavg_at_start"]),
        "- Variants: %s" % ", ".join(meta["variants"]),
    ]
    for name, reason in meta["skipped_variants"].items():
        lines.append("- Skipped %s: %s" % (name, reason))
    lines += [""] + ["**%s**" % line for line in verdicts(summary)]
    lines += [
        "",
        "req/s, p99 and the CPU shares are medians over the repeats; ÷ w1 is the median of per-repeat "
        "ratios; socket errors and non-2xx are totals. wrk CPU and server CPU are each side's CPU time "
        "(user + sys) ÷ (wall time × %d CPUs): wrk's from its rusage, the server's summed over the "
        "master and its workers from /proc/PID/stat. Machine busy is the whole machine's non-idle time "
        "(/proc/stat) over the same interval, other processes included. Connections per worker are "
        "counted halfway through each run; the worker CPU split is each worker's share of the "
        "workers' CPU time (one figure per run)." % meta["cpus"],
        "",
        report.markdown_table(*summary_table, align="l" + "r" * 9 + "lll"),
        "",
        report.markdown_table(*detail_table, align="llrrrrrrll"),
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------


def parse_args(argv, available):
    p = argparse.ArgumentParser(description="Keep-alive hello with --workers 1 and --workers 2 (see bench/README.md).")
    p.add_argument("--servers", default=None,
                   help="comma-separated variants (default: every one available here: %s)" % ",".join(available))
    cli.add_repeats(p, 3, 10, quick=(1, 3), what="variant")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of the same load before each run (0: none; default 1)")
    p.add_argument("--settle", type=float, default=0.5, help="seconds of rest between the warm-up and the run (default 0.5)")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs (default 0.5)")
    cli.add_output(p, "workers.json", pin=False)
    args = p.parse_args(argv)
    cli.repeats_chosen(p, args)
    if args.servers:
        args.variant_list = cli.choose(p, args.servers, VARIANTS_BY_NAME, "variant(s)")
        missing = [v for v in args.variant_list if v.name not in available]
        if missing:
            p.error("%s: `python -m greenserve --help` lists no %s" % (", ".join(v.name for v in missing), missing[0].needs))
    else:
        args.variant_list = [VARIANTS_BY_NAME[n] for n in available]
    return args


def main(argv=None):
    help_text = cli_help()
    if not help_text:
        sys.exit("`python -m greenserve --help` failed: is greenserve installed (pip install -e .)?")
    skipped = {v.name: "`python -m greenserve --help` lists no %s" % v.needs
               for v in VARIANTS if v.needs and v.needs not in help_text}
    available = [v.name for v in VARIANTS if v.name not in skipped]
    args = parse_args(sys.argv[1:] if argv is None else argv, available)
    machine.raise_nofile()
    ctx = load.Context(args.duration, pin=False)
    if not ctx.wrk_path:
        sys.exit("wrk is not installed (apt-get install wrk)")
    for name, reason in skipped.items():
        print("skipping %s: %s" % (name, reason), flush=True)

    cpus = len(os.sched_getaffinity(0))
    meta = machine.environment(ctx)
    meta.update(
        command=cli.command("workers.py", argv), repeats=args.repeats, duration=args.duration, warmup=args.warmup,
        settle=args.settle, cpus=cpus,
        pinning="none, on purpose: two workers need both cores, so the server processes and wrk share the %d CPUs" % cpus,
        variants=[v.name for v in args.variant_list], skipped_variants=skipped,
        server_commands={v.name: shlex.join(v.argv(ctx, "PORT")) for v in args.variant_list},
    )
    print("not pinned: the server processes and wrk share the %d CPUs" % cpus, flush=True)
    logs = {v.name: servers.open_log("workers-" + v.name) for v in args.variant_list}
    names = [v.name for v in args.variant_list]
    runs = {n: [] for n in names}
    with cli.Session(logs) as session:
        for repeat, order in cli.rotations(args.variant_list, args.repeats):
            for variant in order:
                r = run_one(ctx, args, variant, logs[variant.name])
                r["repeat"] = repeat
                runs[variant.name].append(r)
                c, w = split(r)
                session.progress(
                    "repeat %d/%d %-13s %10s req/s  p99 %-9s errors %-6s wrk CPU %4s  server CPU %4s  "
                    "machine %4s  conns %s  worker CPU %s%s"
                    % (repeat + 1, args.repeats, variant.name, report.fmt_rps(r.get("rps")),
                       report.fmt_ms(r.get("p99_ms")), report.fmt_errors(r.get("errors") or {}),
                       report.fmt_pct(r.get("wrk_share")), report.fmt_pct(r.get("server_share")),
                       report.fmt_pct(r.get("machine_busy_share")), c, w,
                       ("  FAILED: " + r["failure"]) if r.get("failure") else ""),
                )

    meta["elapsed_s"] = session.elapsed()
    names = [n for n in names if runs[n]]
    summary = summarize(names, {n: runs[n] for n in names})
    summary_table, detail_table = tables(names, runs, summary)
    print()
    print(report.text_table(*summary_table))
    print()
    print(report.text_table(*detail_table))
    for line in verdicts(summary):
        print(line)
    report.publish(markdown_report(meta, summary_table, detail_table, summary), args.markdown, args.json,
                   {"meta": meta, "summary": summary, "runs": runs})


if __name__ == "__main__":
    cli.main(main)

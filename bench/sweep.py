"""The classic concurrency sweep: ab -r -n 100000 -c N, a new connection per request.

    python bench/sweep.py                     # N = 100, 1000, 5000, 10000; greenserve, pywsgi, paste
    python bench/sweep.py --quick             # -n 10000, N = 100, 1000: checks that it works
    python bench/sweep.py --concurrency 100,1000 --servers greenserve,pywsgi --markdown sweep.md

This is the sweep of the gevent-vs-paste write-up: ApacheBench (Debian's apache2-utils) sends
plain HTTP/1.0 requests, one connection each, ``-c N`` at a time, ``-n`` in all, with ``-r`` so
that socket receive errors are counted instead of ending the run. For every N and every server
(in an order that rotates with N), the server is started fresh (pinned to CPU 0, ab to CPU 1),
loaded once, and stopped by PID. Recorded: requests/s, ab's "Failed requests" and its breakdown
(connect, receive, length, exceptions), write errors, non-2xx responses, and whether ab
aborted (it still gives up after 10 connect errors, or when a socket waits more than its 30 s
timeout). Every ab run is also bounded by --timeout seconds of wall clock.

At -c 10000, ab holds 10,000 sockets (so does the server): the script raises its own
RLIMIT_NOFILE to the hard limit, and ab and the servers inherit it. It prints the kernel settings
that bound such a run and warns when they do. Every connection ends in TIME_WAIT on loopback
(100,000 of them per run with -n 100000), on the server's side, since the server closes first.
Raw results go to bench/results/sweep.json (--json), which bench/charts.py draws.
"""

import argparse
import os
import re
import shlex
import sys
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import HOST, cli, load, machine, report, servers  # noqa: E402

DEFAULT_SERVERS = "greenserve,pywsgi,paste"
ALLOWED = [s.name for s in servers.SERVERS]  # any launcher run.py knows (the bare loop answers hello only)


def run_ab(ctx, port, args, concurrency):
    """ab -q -r -n REQUESTS -c N [-s S], pinned, within --timeout s of wall clock; whether and why it aborted."""
    argv = [ctx.ab_path, "-q", "-r", "-n", str(args.requests), "-c", str(concurrency)]
    if args.ab_timeout:
        argv += ["-s", str(args.ab_timeout)]
    argv.append("http://%s:%d%s" % (HOST, port, args.path))
    # No accept-queue samples: reading /proc/net/tcp among 100,000 TIME_WAIT sockets is load.
    result = ctx.run_load(argv, load.parse_ab, "ab", port, duration=args.timeout, limit=args.timeout, sample=False)
    # ab prints this (on stdout, after "Benchmarking ... (be patient)...") when it gives up.
    m = re.search(r"Total of (\d+) requests completed", result["stdout"] + "\n" + result["stderr"])
    result["completed_before_abort"] = int(m.group(1)) if m else None
    result["aborted"] = bool(result.get("timed_out") or result["rc"] != 0 or result["rps"] is None)
    if result.get("timed_out"):
        result["abort_reason"] = "ab did not finish in %d s (stopped)" % args.timeout
    elif result["aborted"]:
        lines = [line for line in (result["stderr"].strip() or result["stdout"].strip() or "no output").splitlines() if line.strip()]
        result["abort_reason"] = "ab rc %s: %s" % (result["rc"], " / ".join(lines[-2:]))
    result.pop("failure", None)  # said as abort_reason
    return result


def sweep_one(ctx, args, server, concurrency, log):
    before_tw = machine.time_wait_count()
    proc, port, server_argv, failure = server.start(ctx, log)
    if failure:
        return {"server": server.name, "concurrency": concurrency, "server_command": shlex.join(server_argv), "rps": None,
                "failed": None, "aborted": True, "abort_reason": failure}
    try:
        cpu_before = machine.tree_cpu(proc.pid)
        result = run_ab(ctx, port, args, concurrency)
        result.update(machine.cpu_per_request(cpu_before, machine.tree_cpu(proc.pid), result))
        if proc.poll() is not None:
            result["aborted"] = True
            result["abort_reason"] = "server exited with status %s during the load" % proc.returncode
        result.update(server=server.name, concurrency=concurrency, server_command=shlex.join(server_argv))
        result["time_wait_before"] = before_tw
        result["time_wait_after"] = machine.time_wait_count()
        return result
    finally:
        servers.stop_process(proc)
        time.sleep(args.pause)


def cell(r):
    if r is None:
        return "—"
    if r.get("rps") is None:
        done = r.get("completed_before_abort")
        return "aborted" + (" after %s" % report.fmt_int(done) if done is not None else "")
    text = "%s / %s" % (report.fmt_rps(r["rps"]), report.fmt_int(r.get("failed")))
    if r.get("aborted"):
        text += " (aborted)"
    return text


def breakdown(r):
    e = r.get("errors") or {}
    parts = ["%s %d" % (k, e.get(k, 0)) for k in ("connect", "receive", "length", "exceptions") if e.get(k)]
    if e.get("write"):
        parts.append("write errors %d" % e["write"])
    return ", ".join(parts) or "0"


def tables(results, servers, levels):
    by = {(r["server"], r["concurrency"]): r for r in results}
    summary_header = ["server"] + ["-c %s" % report.fmt_int(n) for n in levels]
    summary_rows = [[s] + [cell(by.get((s, n))) for n in levels] for s in servers]
    detail_header = ["server", "N", "req/s", "complete", "failed", "failed breakdown", "non-2xx", "p99", "longest", "time",
                     "server CPU µs/request: user + kernel", "aborted"]
    detail_rows = []
    for n in levels:
        for s in servers:
            r = by.get((s, n))
            if r is None:
                continue
            detail_rows.append(
                [
                    s,
                    report.fmt_int(n),
                    report.fmt_rps(r.get("rps")),
                    report.fmt_int(r.get("requests") if r.get("requests") is not None else r.get("completed_before_abort")),
                    report.fmt_int(r.get("failed")),
                    breakdown(r),
                    report.fmt_int(r.get("non2xx")),
                    report.fmt_ms(r.get("p99_ms")),
                    report.fmt_ms(r.get("longest_ms")),
                    "—" if r.get("seconds") is None else "%.1f s" % r["seconds"],
                    report.fmt_cpu(r.get("user_us"), r.get("kernel_us"), r.get("busy")),
                    r.get("abort_reason", "no") if r.get("aborted") else "no",
                ]
            )
    return (summary_header, summary_rows), (detail_header, detail_rows)


def markdown_report(meta, summary, detail):
    v = meta["versions"]
    k = meta["kernel_settings"]
    lines = report.short_head(meta, "greenserve concurrency sweep", "Paste %s; %s" % (v.get("Paste"), meta["ab"])) + [
        "- Load: `ab -r -n %d -c N http://127.0.0.1:PORT%s` (HTTP/1.0, a new connection per request), "
        "each server started fresh for each N" % (meta["requests"], meta["path"])
        + ("; ab -s %d" % meta["ab_timeout"] if meta.get("ab_timeout") else "; ab's socket timeout 30 s"),
        "- Pinning: %s; load average at start %s" % (meta["pinning"], meta["loadavg_at_start"]),
        "- Kernel: somaxconn %s, tcp_max_syn_backlog %s (syncookies %s), ephemeral ports %s, tcp_tw_reuse %s, "
        "tcp_max_tw_buckets %s, fs.file-max %s, RLIMIT_NOFILE %s"
        % (k["somaxconn"], k["tcp_max_syn_backlog"], k["tcp_syncookies"], k["ephemeral_ports"], k["tcp_tw_reuse"],
           k["tcp_max_tw_buckets"], k["file_max"], k["nofile_soft"]),
    ]
    for w in meta["warnings"]:
        lines.append("- Warning: %s" % w)
    for name, reason in meta["skipped_servers"].items():
        lines.append("- Skipped %s: %s" % (name, reason))
    lines += [
        "",
        "Each cell: requests/s / failed requests (ab's \"Failed requests\").",
        "",
        report.markdown_table(*summary, align="l" + "r" * (len(summary[0]) - 1)),
        "",
        "Server CPU per request: the server processes' user and kernel time over the load "
        "(/proc/PID/stat) divided by the requests; busy: that time over ab's wall time. Servers "
        "that are all well short of 100 % busy at the same rate share a ceiling that is not theirs.",
        "",
        report.markdown_table(*detail, align="lrrrrlrrrrrl"),
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description="ab -r -n REQUESTS -c N sweep over N (see bench/README.md).")
    p.add_argument("--concurrency", default=None, help="comma-separated N (default 100,1000,5000,10000; --quick 100,1000)")
    p.add_argument("--requests", type=int, default=None, help="ab -n (default 100000; --quick 10000)")
    p.add_argument("--servers", default=DEFAULT_SERVERS, help="comma-separated (default %s; also %s)"
                   % (DEFAULT_SERVERS, ", ".join(n for n in ALLOWED if n not in DEFAULT_SERVERS.split(","))))
    p.add_argument("--path", default="/", help="request path: / (13-byte hello, default) or /page (~4.5 KB)")
    p.add_argument("--quick", action="store_true", help="-n 10000 and N = 100, 1000 unless given")
    p.add_argument("--timeout", type=int, default=300, help="seconds one ab run may take before it is stopped (default 300)")
    p.add_argument("--ab-timeout", type=int, default=None, metavar="S",
                   help="ab -s: seconds ab waits on one socket before it aborts the run (ab's default: 30)")
    p.add_argument("--pause", type=float, default=1.0, help="seconds between runs (default 1)")
    cli.add_output(p, "sweep.json")
    args = p.parse_args(argv)
    if args.requests is None:
        args.requests = 10000 if args.quick else 100000
    if args.concurrency is None:
        args.concurrency = "100,1000" if args.quick else "100,1000,5000,10000"
    args.levels = cli.integers(p, args.concurrency, "--concurrency", "100,1000")
    if not args.levels or min(args.levels) < 1:
        p.error("--concurrency needs positive integers")
    if max(args.levels) > 20000:
        p.error("ab allows at most -c 20000")
    if max(args.levels) > args.requests:
        p.error("ab needs -n (%d) >= -c (%d)" % (args.requests, max(args.levels)))
    args.server_list = cli.choose(p, args.servers, servers.BY_NAME, "or unsupported server(s)", ALLOWED)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    machine.raise_nofile()  # ab (a child) inherits it: -c N needs more than N descriptors
    ctx = load.Context.from_args(args)
    if not ctx.ab_path:
        sys.exit("ab is not installed (apt-get install apache2-utils)")
    if not ctx.pin:
        print("warning: not pinning (taskset missing, fewer than 2 CPUs, or --no-pin)", flush=True)

    skipped, members = servers.available(args.server_list)

    k = machine.kernel_settings()
    machine.print_kernel_settings(k)
    warnings = machine.connection_warnings(
        k, max(args.levels), total=args.requests, backlogs={s.name: s.backlog for s in members}
    )
    for w in warnings:
        print("warning: " + w, flush=True)

    meta = machine.environment(ctx)
    meta.update(
        command=cli.command("sweep.py", argv), requests=args.requests, ab_timeout=args.ab_timeout,
        concurrency=args.levels, path=args.path, kernel_settings=k,
        warnings=warnings, servers={s.name: s.description for s in members}, skipped_servers=skipped,
    )
    logs = {s.name: servers.open_log("sweep-" + s.name) for s in members}
    results = []
    with cli.Session(logs) as session:
        for i, order in cli.rotations(members, len(args.levels)):
            n = args.levels[i]
            for server in order:
                r = sweep_one(ctx, args, server, n, logs[server.name])
                results.append(r)
                session.progress(
                    "-c %-6d %-16s %12s req/s  failed %-8s %s%s"
                    % (n, server.name, report.fmt_rps(r.get("rps")), report.fmt_int(r.get("failed")),
                       breakdown(r), ("  ABORTED: " + r["abort_reason"]) if r.get("aborted") else ""),
                )

    meta["elapsed_s"] = session.elapsed()
    names = [s.name for s in members]
    summary, detail = tables(results, names, args.levels)
    print()
    print("req/s / failed requests")
    print(report.text_table(*summary))
    print()
    print(report.text_table(*detail))
    report.publish(markdown_report(meta, summary, detail), args.markdown, args.json, {"meta": meta, "results": results})


if __name__ == "__main__":
    cli.main(main)

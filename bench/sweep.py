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
import subprocess
import sys
import time

import harness
import run

DEFAULT_SERVERS = "greenserve,pywsgi,paste"
ALLOWED = [s.name for s in run.SERVERS]  # any launcher run.py knows (the bare loop answers hello only)


def parse_ab_sweep(stdout, stderr):
    """run.parse_ab's figures plus what the sweep reports: failed total, longest, abort."""
    out = run.parse_ab(stdout)
    m = re.search(r"^Failed requests:\s*(\d+)", stdout, re.M)
    out["failed"] = int(m.group(1)) if m else None
    m = re.search(r"^\s*100%\s+(\d+)", stdout, re.M)
    out["longest_ms"] = float(m.group(1)) if m else None
    # ab prints this (on stdout, after "Benchmarking ... (be patient)...") when it gives up.
    m = re.search(r"Total of (\d+) requests completed", stdout + "\n" + stderr)
    out["completed_before_abort"] = int(m.group(1)) if m else None
    return out


def run_ab(ctx, port, path, requests, concurrency, timeout, socket_timeout=None):
    argv = [ctx.ab_path, "-q", "-r", "-n", str(requests), "-c", str(concurrency)]
    if socket_timeout:
        argv += ["-s", str(socket_timeout)]
    argv = ctx.pinned(ctx.client_cpu, argv + ["http://%s:%d%s" % (run.HOST, port, path)])
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, cwd=run.ROOT, text=True)
    run._LIVE[proc.pid] = proc
    timed_out = False
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        run.stop_process(proc, grace=2.0)
        stdout, stderr = proc.communicate()
        timed_out = True
    run._LIVE.pop(proc.pid, None)
    result = {
        "command": shlex.join(argv),
        "rc": proc.returncode,
        "wall_s": round(time.monotonic() - started, 2),
        "stdout": stdout,
        "stderr": stderr,
    }
    result.update(parse_ab_sweep(stdout, stderr))
    result["aborted"] = bool(timed_out or proc.returncode != 0 or result["rps"] is None)
    if timed_out:
        result["abort_reason"] = "ab did not finish in %d s (stopped)" % timeout
    elif result["aborted"]:
        lines = [l for l in (stderr.strip() or stdout.strip() or "no output").splitlines() if l.strip()]
        result["abort_reason"] = "ab rc %s: %s" % (proc.returncode, " / ".join(lines[-2:]))
    return result


def sweep_one(ctx, args, server, concurrency, log):
    before_tw = harness.time_wait_count()
    proc, port, server_argv, failure = harness.start_server(ctx, server, log)
    if failure:
        return {"server": server.name, "concurrency": concurrency, "server_command": shlex.join(server_argv), "rps": None,
                "failed": None, "aborted": True, "abort_reason": failure}
    try:
        result = run_ab(ctx, port, args.path, args.requests, concurrency, args.timeout, args.ab_timeout)
        if proc.poll() is not None:
            result["aborted"] = True
            result["abort_reason"] = "server exited with status %s during the load" % proc.returncode
        result.update(server=server.name, concurrency=concurrency, server_command=shlex.join(server_argv))
        result["time_wait_before"] = before_tw
        result["time_wait_after"] = harness.time_wait_count()
        return result
    finally:
        run.stop_process(proc)
        time.sleep(args.pause)


def fmt_int(v):
    return "—" if v is None else "{:,}".format(v)


def cell(r):
    if r is None:
        return "—"
    if r.get("rps") is None:
        done = r.get("completed_before_abort")
        return "aborted" + (" after %s" % fmt_int(done) if done is not None else "")
    text = "%s / %s" % (run.fmt_rps(r["rps"]), fmt_int(r.get("failed")))
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
    summary_header = ["server"] + ["-c %s" % fmt_int(n) for n in levels]
    summary_rows = [[s] + [cell(by.get((s, n))) for n in levels] for s in servers]
    detail_header = ["server", "N", "req/s", "complete", "failed", "failed breakdown", "non-2xx", "p99", "longest", "time", "aborted"]
    detail_rows = []
    for n in levels:
        for s in servers:
            r = by.get((s, n))
            if r is None:
                continue
            detail_rows.append(
                [
                    s,
                    fmt_int(n),
                    run.fmt_rps(r.get("rps")),
                    fmt_int(r.get("requests") if r.get("requests") is not None else r.get("completed_before_abort")),
                    fmt_int(r.get("failed")),
                    breakdown(r),
                    fmt_int(r.get("non2xx")),
                    run.fmt_ms(r.get("p99_ms")),
                    run.fmt_ms(r.get("longest_ms")),
                    "—" if r.get("seconds") is None else "%.1f s" % r["seconds"],
                    r.get("abort_reason", "no") if r.get("aborted") else "no",
                ]
            )
    return (summary_header, summary_rows), (detail_header, detail_rows)


def md_table(header, rows, align=None):
    """align: one of "l" / "r" per column (default: the first left, the rest right)."""
    esc = lambda x: str(x).replace("|", "\\|")  # noqa: E731
    align = align or "l" + "r" * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(esc(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def markdown_report(meta, summary, detail):
    v = meta["versions"]
    k = meta["kernel_settings"]
    lines = [
        "# greenserve concurrency sweep, %s" % meta["date"],
        "",
        "- Command: `%s`" % meta["command"],
        "- Load: `ab -r -n %d -c N http://127.0.0.1:PORT%s` (HTTP/1.0, a new connection per request), "
        "each server started fresh for each N" % (meta["requests"], meta["path"])
        + ("; ab -s %d" % meta["ab_timeout"] if meta.get("ab_timeout") else "; ab's socket timeout 30 s"),
        "- Machine: %s, %s CPUs; Linux %s; Python %s" % (meta["cpu_model"], meta["cpu_count"], meta["kernel"], meta["python"]),
        "- greenserve %s (%s, hot path %s); gevent %s; Paste %s; %s"
        % (v.get("greenserve"), meta["greenserve_commit"], meta.get("greenserve_build"), v.get("gevent"), v.get("Paste"), meta["ab"]),
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
        md_table(*summary),
        "",
        md_table(*detail, align="lrrrrlrrrrl"),
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
    harness.add_output_args(p, "sweep.json")
    args = p.parse_args(argv)
    if args.requests is None:
        args.requests = 10000 if args.quick else 100000
    if args.concurrency is None:
        args.concurrency = "100,1000" if args.quick else "100,1000,5000,10000"
    try:
        args.levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    except ValueError:
        p.error("--concurrency takes integers, e.g. 100,1000")
    if not args.levels or min(args.levels) < 1:
        p.error("--concurrency needs positive integers")
    if max(args.levels) > 20000:
        p.error("ab allows at most -c 20000")
    if max(args.levels) > args.requests:
        p.error("ab needs -n (%d) >= -c (%d)" % (args.requests, max(args.levels)))
    args.server_list = harness.servers_from(args.servers, ALLOWED, p)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "bench/sweep.py"] + (sys.argv[1:] if argv is None else argv))
    run.raise_nofile()  # ab (a child) inherits it: -c N needs more than N descriptors
    ctx = harness.make_context(args)
    if not ctx.ab_path:
        sys.exit("ab is not installed (apt-get install apache2-utils)")
    if not ctx.pin:
        print("warning: not pinning (taskset missing, fewer than 2 CPUs, or --no-pin)", flush=True)

    skipped, servers = run.available_servers(args.server_list)

    k = harness.kernel_settings()
    harness.print_kernel_settings(k)
    warnings = harness.connection_warnings(
        k, max(args.levels), total=args.requests, backlogs={s.name: harness.BACKLOGS.get(s.name, 2048) for s in servers}
    )
    for w in warnings:
        print("warning: " + w, flush=True)

    meta = run.environment(ctx)
    meta.update(
        command=command, requests=args.requests, ab_timeout=args.ab_timeout, concurrency=args.levels, path=args.path, kernel_settings=k,
        warnings=warnings, servers={s.name: s.description for s in servers}, skipped_servers=skipped,
    )
    logs = {s.name: harness.open_log("sweep-" + s.name) for s in servers}
    results = []
    started = time.monotonic()
    try:
        for i, n in enumerate(args.levels):
            shift = i % len(servers)
            for server in servers[shift:] + servers[:shift]:
                r = sweep_one(ctx, args, server, n, logs[server.name])
                results.append(r)
                print(
                    "[%5.0fs] -c %-6d %-16s %12s req/s  failed %-8s %s%s"
                    % (time.monotonic() - started, n, server.name, run.fmt_rps(r.get("rps")), fmt_int(r.get("failed")),
                       breakdown(r), ("  ABORTED: " + r["abort_reason"]) if r.get("aborted") else ""),
                    file=sys.stderr, flush=True,
                )
    except KeyboardInterrupt:
        print("\ninterrupted; reporting what was measured", file=sys.stderr)
    finally:
        run.stop_all(logs)

    meta["elapsed_s"] = round(time.monotonic() - started, 1)
    names = [s.name for s in servers]
    summary, detail = tables(results, names, args.levels)
    run.write_json(args.json, {"meta": meta, "results": results})
    print()
    print("req/s / failed requests")
    print(run.text_table(*summary))
    print()
    print(run.text_table(*detail))
    run.print_report(markdown_report(meta, summary, detail), args.markdown, args.json)


if __name__ == "__main__":
    run.main_until_terminated(main)

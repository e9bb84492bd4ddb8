"""Server memory: RSS per idle keep-alive connection, and RSS growth over requests.

    python bench/memory.py                  # greenserve and gevent.pywsgi: 10,000 idle connections; 100k and 1M requests
    python bench/memory.py --quick          # 1,000 idle connections; 10k and 100k requests
    python bench/memory.py --servers greenserve --connections 10000 --requests 0    # only the idle test

(a) Idle connections. A fresh server (pinned to CPU 0) answers a short wrk warm-up; its RSS
(VmRSS in /proc/PID/status) is read; this script then opens --connections keep-alive
connections to it (non-blocking sockets and epoll, at most --batch connecting at once), sends one
``GET /`` on each and reads the whole response, so that every connection is established, has
served a request and sits idle in keep-alive. After --settle seconds RSS is read again, the
connections still open are counted, and (after - before) / connections is the cost of one idle
connection in KiB. greenserve's target is at most 12 KiB. greenserve closes idle connections
after its keepalive setting (5 s by default), so its launcher is passed ``keepalive=600``
(--keepalive); gevent.pywsgi keeps them open by default.

(b) Growth over requests. A fresh server answers a 1 s wrk warm-up, then keep-alive hello load
(wrk -t1 -c --wrk-connections, pinned to CPU 1) in runs of at most --chunk seconds, each sized
from the rate so far; RSS is read between runs. The first reading at or past each --requests
milestone (100,000 and 1,000,000 by default) is reported, with the ratio last / first; the
target is flat within +-10 %. gevent.pywsgi's keep-alive rate is low (~2,000 req/s: its responses
wait on Nagle's algorithm), so its 1,000,000 takes about 8 minutes; every server's load stops
after --time-limit seconds, and the milestones not reached are reported as such.

Raw results go to bench/results/memory.json (--json).
"""

import argparse
import math
import os
import shlex
import sys
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import cli, load, machine, report, servers  # noqa: E402

DEFAULT_SERVERS = "greenserve,pywsgi"
ALLOWED = ["greenserve", "greenserve-pure", "pywsgi"]
TARGET_KIB_PER_CONNECTION = 12  # issue 22
TARGET_GROWTH = 0.10


# --------------------------------------------------------------------------------------------
# (a) idle keep-alive connections


def idle_test(ctx, args, server, log):
    extra = ["keepalive=%s" % args.keepalive] if server.name.startswith("greenserve") else []
    if server.name.startswith("greenserve") and args.connections > 10000:
        extra.append("spawn=%d" % (args.connections + 100))
    result = {"server": server.name, "connections": args.connections}
    proc, port, argv, failure = server.start(ctx, log, extra)
    result["server_command"] = shlex.join(argv)
    if failure:
        result["failure"] = failure
        return result
    socks = []
    try:
        ctx.wrk(port, "/", connections=10, duration=1)  # the code paths warm, as in run.py
        time.sleep(0.5)
        result["rss_before_kib"] = machine.rss_kib(proc.pid)
        t0 = time.monotonic()
        socks, failures = load.open_idle_connections(
            port, args.connections, batch=args.batch, timeout=args.open_timeout, agent="bench/memory.py"
        )
        result["open_seconds"] = round(time.monotonic() - t0, 2)
        result["opened"] = len(socks)
        result["open_failures"] = failures
        time.sleep(args.settle)
        result["rss_after_kib"] = machine.rss_kib(proc.pid)
        result["still_open"] = load.still_open(socks)
        if proc.poll() is not None:
            result["failure"] = "server exited with status %s" % proc.returncode
            return result
        grown = result["rss_after_kib"] - result["rss_before_kib"]
        result["rss_growth_kib"] = grown
        if result["still_open"]:
            result["kib_per_connection"] = grown / result["still_open"]
            result["meets_target"] = result["kib_per_connection"] <= TARGET_KIB_PER_CONNECTION
        for sock in socks:
            sock.close()
        socks = []
        time.sleep(args.settle)
        result["rss_after_close_kib"] = machine.rss_kib(proc.pid)
        return result
    finally:
        for sock in socks:
            sock.close()
        servers.stop_process(proc)


# --------------------------------------------------------------------------------------------
# (b) RSS over requests


def growth_test(ctx, args, server, log):
    result = {"server": server.name, "milestones": args.milestones, "wrk_connections": args.wrk_connections, "samples": []}
    proc, port, argv, failure = server.start(ctx, log)
    result["server_command"] = shlex.join(argv)
    if failure:
        result["failure"] = failure
        return result
    try:
        warm = ctx.wrk(port, "/", connections=args.wrk_connections, duration=1)
        rate = warm.get("rps") or 1000.0
        result["rss_baseline_kib"] = machine.rss_kib(proc.pid)
        total, errors, non2xx = 0, {}, 0
        started = time.monotonic()
        pending = list(args.milestones)
        reached = {}
        while pending:
            elapsed = time.monotonic() - started
            if elapsed >= args.time_limit:
                result["stopped"] = "time limit of %d s reached at %d requests" % (args.time_limit, total)
                break
            left = pending[0] - total
            seconds = max(1, min(args.chunk, math.ceil(left / max(rate, 1.0) * 1.02), math.ceil(args.time_limit - elapsed)))
            r = ctx.wrk(port, "/", connections=args.wrk_connections, duration=seconds)
            if r.get("requests") is None or r.get("failure"):
                result["failure"] = r.get("failure") or "wrk gave no request count"
                break
            total += r["requests"]
            rate = r.get("rps") or rate
            for k, n in r["errors"].items():
                errors[k] = errors.get(k, 0) + n
            non2xx += r.get("non2xx") or 0
            rss = machine.rss_kib(proc.pid)
            result["samples"].append({"requests": total, "rss_kib": rss, "seconds": round(time.monotonic() - started, 1)})
            while pending and total >= pending[0]:
                reached[pending.pop(0)] = {"requests": total, "rss_kib": rss}
            if proc.poll() is not None:
                result["failure"] = "server exited with status %s" % proc.returncode
                break
        result.update(requests=total, socket_errors=errors, non2xx=non2xx, reached={str(k): v for k, v in reached.items()})
        result["not_reached"] = pending
        if len(reached) >= 2:
            first, last = reached[args.milestones[0]], reached[max(reached)]
            result["ratio"] = last["rss_kib"] / first["rss_kib"]
            result["meets_target"] = abs(result["ratio"] - 1) <= TARGET_GROWTH
        return result
    finally:
        servers.stop_process(proc)


# --------------------------------------------------------------------------------------------
# Report


def fmt_kib(v):
    return "—" if v is None else "{:,.0f} KiB".format(v)


def fmt_count(n):
    if n >= 1000000 and n % 1000000 == 0:
        return "%dM" % (n // 1000000)
    if n >= 1000 and n % 1000 == 0:
        return "%dk" % (n // 1000)
    return "{:,}".format(n)


def idle_table(results, args):
    header = ["server", "connections", "RSS before", "RSS with them open", "per idle connection", "after closing", "notes"]
    rows = []
    for r in results:
        notes = []
        if r.get("failure"):
            notes.append(r["failure"])
        if r.get("open_failures"):
            notes.append("failed to open: " + ", ".join("%s %d" % kv for kv in r["open_failures"].items()))
        if r.get("still_open") is not None and r["still_open"] < r.get("opened", 0):
            notes.append("%d closed by the server before the measurement" % (r["opened"] - r["still_open"]))
        if r["server"].startswith("greenserve") and r.get("kib_per_connection") is not None:
            notes.append("target <= %d KiB %s" % (TARGET_KIB_PER_CONNECTION, "met" if r["meets_target"] else "MISSED"))
        per = r.get("kib_per_connection")
        rows.append(
            [
                r["server"],
                "{:,}".format(r.get("still_open", 0)) if "still_open" in r else "—",
                fmt_kib(r.get("rss_before_kib")),
                fmt_kib(r.get("rss_after_kib")),
                "—" if per is None else "%.1f KiB" % per,
                fmt_kib(r.get("rss_after_close_kib")),
                "; ".join(notes),
            ]
        )
    return header, rows


def growth_table(results, args):
    header = ["server", "RSS after warm-up"] + ["RSS at %s" % fmt_count(m) for m in args.milestones]
    header += ["ratio", "req/s", "notes"]
    rows = []
    for r in results:
        reached = r.get("reached") or {}
        cells = []
        for m in args.milestones:
            got = reached.get(str(m))
            cells.append("—" if got is None else "%s (at %s)" % (fmt_kib(got["rss_kib"]), "{:,}".format(got["requests"])))
        notes = []
        if r.get("failure"):
            notes.append(r["failure"])
        if r.get("stopped"):
            notes.append(r["stopped"])
        errs = {k: n for k, n in (r.get("socket_errors") or {}).items() if n}
        if errs:
            notes.append("socket errors " + report.fmt_errors(errs))
        if r.get("non2xx"):
            notes.append("non-2xx %d" % r["non2xx"])
        if r.get("meets_target") is not None:
            notes.append("flat within +-%d%%: %s" % (TARGET_GROWTH * 100, "yes" if r["meets_target"] else "NO"))
        samples = r.get("samples") or []
        rate = samples[-1]["requests"] / samples[-1]["seconds"] if samples and samples[-1]["seconds"] else None
        rows.append(
            [r["server"], fmt_kib(r.get("rss_baseline_kib"))]
            + cells
            + ["—" if r.get("ratio") is None else "%.3f" % r["ratio"], report.fmt_rps(rate), "; ".join(notes)]
        )
    return header, rows


def markdown_report(meta, idle, growth, args):
    v = meta["versions"]
    lines = report.short_head(meta, "greenserve memory", "greenlet %s; %s" % (v.get("greenlet"), meta["wrk"])) + [
        "- Pinning: %s; load average at start %s" % (meta["pinning"], meta["loadavg_at_start"]),
        "- RSS is VmRSS of the server process (/proc/PID/status); greenserve runs with keepalive=%s" % args.keepalive,
    ]
    for w in meta["warnings"]:
        lines.append("- Warning: %s" % w)
    for name, reason in meta["skipped_servers"].items():
        lines.append("- Skipped %s: %s" % (name, reason))
    if idle:
        lines += [
            "",
            "## RSS per idle keep-alive connection",
            "",
            "%s connections opened by the script, one GET / answered on each, then left idle for %s s. "
            "Per connection: (RSS with them open - RSS before) / connections still open. greenserve's target: "
            "<= %d KiB." % ("{:,}".format(args.connections), args.settle, TARGET_KIB_PER_CONNECTION),
            "",
            report.markdown_table(*idle_table(idle, args)),
        ]
    if growth:
        lines += [
            "",
            "## RSS over requests",
            "",
            "Keep-alive hello, wrk -t1 -c%d, in runs of at most %d s; RSS read between runs, at the first "
            "reading past each milestone. Ratio: RSS at the last milestone reached / RSS at the first. "
            "Target: within +-%d%%." % (args.wrk_connections, args.chunk, TARGET_GROWTH * 100),
            "",
            report.markdown_table(*growth_table(growth, args)),
        ]
    return "\n".join(lines) + "\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description="Server RSS per idle connection and over requests (see bench/README.md).")
    p.add_argument("--connections", type=int, default=None, help="idle keep-alive connections (default 10000; --quick 1000; 0 skips the test)")
    p.add_argument("--requests", default=None, help="comma-separated milestones for RSS over requests (default 100000,1000000; --quick 10000,100000; 0 skips the test)")
    p.add_argument("--servers", default=DEFAULT_SERVERS, help="comma-separated, from %s (default %s)" % (", ".join(ALLOWED), DEFAULT_SERVERS))
    p.add_argument("--quick", action="store_true", help="1,000 idle connections, milestones 10k and 100k")
    p.add_argument("--keepalive", type=float, default=600, help="greenserve's keepalive setting for the idle test, s (default 600)")
    p.add_argument("--settle", type=float, default=2.0, help="seconds the connections sit idle before RSS is read (default 2)")
    p.add_argument("--batch", type=int, default=500, help="connections opening at once (default 500)")
    p.add_argument("--open-timeout", type=float, default=60.0, help="seconds to open all the idle connections (default 60)")
    p.add_argument("--wrk-connections", type=int, default=100, help="wrk -c for the growth test (default 100)")
    p.add_argument("--chunk", type=int, default=10, help="longest wrk run between two RSS readings, s (default 10)")
    p.add_argument("--time-limit", type=int, default=600, help="seconds of load per server in the growth test (default 600)")
    cli.add_output(p, "memory.json")
    args = p.parse_args(argv)
    if args.connections is None:
        args.connections = 1000 if args.quick else 10000
    if args.requests is None:
        args.requests = "10000,100000" if args.quick else "100000,1000000"
    try:
        args.milestones = sorted({int(x) for x in args.requests.split(",") if x.strip() and int(x) > 0})
    except ValueError:
        p.error("--requests takes integers, e.g. 100000,1000000")
    if args.connections < 0 or args.batch < 1 or args.chunk < 1 or args.time_limit < 1:
        p.error("--connections must be >= 0; --batch, --chunk and --time-limit >= 1")
    args.server_list = cli.choose(p, args.servers, servers.BY_NAME, "or unsupported server(s)", ALLOWED)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    nofile = machine.raise_nofile()  # this script holds --connections sockets; the server, as many
    ctx = load.Context.from_args(args)
    if not ctx.pin:
        print("warning: not pinning (taskset missing, fewer than 2 CPUs, or --no-pin)", flush=True)
    else:
        os.sched_setaffinity(0, {ctx.client_cpu})  # this script is the idle test's client
    if args.milestones and not ctx.wrk_path:
        sys.exit("wrk is not installed (apt-get install wrk); pass --requests 0 to run only the idle test")

    skipped, members = servers.available(args.server_list)
    k = machine.kernel_settings()
    warnings = machine.connection_warnings(k, args.connections) if args.connections else []
    if args.connections:
        machine.print_kernel_settings(k)
    for w in warnings:
        print("warning: " + w, flush=True)
    if args.connections + 64 > nofile:
        sys.exit("the open-file limit (%d) is too low for %d connections" % (nofile, args.connections))

    meta = machine.environment(ctx)
    meta.update(command=cli.command("memory.py", argv), kernel_settings=k, warnings=warnings, keepalive=args.keepalive,
                servers={s.name: s.description for s in members}, skipped_servers=skipped)
    logs = {s.name: servers.open_log("memory-" + s.name) for s in members}
    idle, growth = [], []
    with cli.Session(logs) as session:
        if args.connections:
            for server in members:
                r = idle_test(ctx, args, server, logs[server.name])
                idle.append(r)
                per = r.get("kib_per_connection")
                session.progress(
                    "idle    %-16s %s connections open in %s s: RSS %s -> %s, %s per connection%s"
                    % (server.name, r.get("still_open"), r.get("open_seconds"),
                       fmt_kib(r.get("rss_before_kib")), fmt_kib(r.get("rss_after_kib")),
                       "—" if per is None else "%.1f KiB" % per, ("  FAILED: " + r["failure"]) if r.get("failure") else ""),
                )
        if args.milestones:
            for server in members:
                r = growth_test(ctx, args, server, logs[server.name])
                growth.append(r)
                session.progress(
                    "growth  %-16s %s requests: %s%s"
                    % (server.name, "{:,}".format(r.get("requests") or 0),
                       ", ".join("%s at %s" % (fmt_kib(s["rss_kib"]), "{:,}".format(s["requests"])) for s in r["samples"][-3:]),
                       ("  FAILED: " + r["failure"]) if r.get("failure") else ""),
                )

    meta["elapsed_s"] = session.elapsed()
    if idle:
        print("\n== RSS per idle keep-alive connection ==")
        print(report.text_table(*idle_table(idle, args)))
    if growth:
        print("\n== RSS over requests ==")
        print(report.text_table(*growth_table(growth, args)))
    report.publish(markdown_report(meta, idle, growth, args), args.markdown, args.json,
                   {"meta": meta, "idle": idle, "growth": growth})


if __name__ == "__main__":
    cli.main(main)

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
import socket
import subprocess
import sys
import tempfile
import time

import harness
import run

TARGET = 1.3  # w2 ÷ w1
CONNECTIONS = 100
PATH = "/"  # run.py's hello scenario: the 13-byte hello of bench.apps
CLK_TCK = os.sysconf("SC_CLK_TCK")


class Variant:
    def __init__(self, name, workers, extra=(), needs=None):
        self.name = name
        self.workers = workers
        self.extra = list(extra)
        self.needs = needs  # a CLI flag that `python -m greenserve --help` must list


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
            [sys.executable, "-m", "greenserve", "--help"], capture_output=True, text=True, timeout=30, cwd=run.ROOT
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout


def server_argv(variant, port):
    # The access log is off unless --access-log is given; --log-level warning keeps the error
    # log to problems; --graceful-timeout 2 bounds the stop (wrk has exited by then anyway).
    return (
        [sys.executable, "-m", "greenserve", "--workers", str(variant.workers)]
        + variant.extra
        + ["--bind", "%s:%s" % (run.HOST, port), "--log-level", "warning", "--graceful-timeout", "2",
           "--chdir", run.ROOT, "bench.apps:app"]
    )


# --------------------------------------------------------------------------------------------
# /proc: CPU time, the workers, and which sockets they hold


def _stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (field 3 first), or None if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def tree_cpu(pid):
    """{pid: (start time, utime + stime in ticks)} for pid and every live descendant."""
    out = {}
    for p in [pid] + [child for child, _ in run._descendants(pid)]:
        fields = _stat_fields(p)
        if fields is not None:
            out[p] = (int(fields[19]), int(fields[11]) + int(fields[12]))
    return out


def cpu_delta(before, after):
    """Ticks each process of `after` used since `before` (all of them for a process new since)."""
    delta = {}
    for p, (started, ticks) in after.items():
        prev = before.get(p)
        delta[p] = ticks - prev[1] if prev and prev[0] == started else ticks
    return delta


def machine_ticks():
    """(busy, total) jiffies of all CPUs from /proc/stat: busy leaves out idle and iowait."""
    fields = [int(x) for x in (run._read("/proc/stat") or "cpu 0 0 0 0").splitlines()[0].split()[1:9]]
    total = sum(fields)
    return total - fields[3] - fields[4], total


def workers_of(master):
    """The PIDs of the master's direct children: its workers."""
    children = []
    try:
        tasks = os.listdir("/proc/%d/task" % master)
    except OSError:
        return children
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (master, tid)) as f:
                children += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return sorted(set(children))


def tcp_sockets(port):
    """{inode: state} of the sockets whose local end is HOST:port ("0A" listen, "01" established)."""
    local = "%08X:%04X" % (int.from_bytes(socket.inet_aton(run.HOST), "little"), port)
    out = {}
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if len(fields) > 9 and fields[1] == local:
                    out[int(fields[9])] = fields[3]
    except OSError:
        pass
    return out


def socket_inodes(pid):
    """The inodes of the sockets pid has open (from /proc/PID/fd)."""
    inodes = set()
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[8:-1]))
    return inodes


def epoll_watches(pid):
    """The inodes every epoll instance of pid watches (the "tfd: ... ino:HEX" lines of fdinfo)."""
    inodes = set()
    try:
        fds = os.listdir("/proc/%d/fdinfo" % pid)
    except OSError:
        return inodes
    for fd in fds:
        try:
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                for line in f:
                    if line.startswith("tfd:") and " ino:" in line:
                        inodes.add(int(line.split(" ino:")[1].split()[0], 16))
        except (OSError, ValueError):
            continue
    return inodes


def serving_workers(master, port):
    """The workers whose event loop watches a listening socket on the port: those that serve."""
    listening = {inode for inode, state in tcp_sockets(port).items() if state == "0A"}
    return [w for w in workers_of(master) if listening & epoll_watches(w)]


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
    established = {inode for inode, state in tcp_sockets(port).items() if state == "01"}
    return {w: len(established & socket_inodes(w)) for w in workers_of(master)}


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
    argv = [ctx.wrk_path, "-t1", "-c%d" % CONNECTIONS, "-d%ds" % duration, "--latency", "http://%s:%d%s" % (run.HOST, port, PATH)]
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    server_before = tree_cpu(proc.pid)
    machine_before = machine_ticks()
    started = time.monotonic()
    wrk = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=run.ROOT)
    run._LIVE[wrk.pid] = wrk
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
            run.stop_process(wrk, grace=2.0)
            result["failure"] = "wrk did not finish in %d s" % (duration + 30)
        wall = time.monotonic() - started
        server_after = tree_cpu(proc.pid)
        machine_after = machine_ticks()
    finally:
        run._LIVE.pop(wrk.pid, None)
    out.seek(0)
    err.seek(0)
    result.update(rc=wrk.returncode, stdout=out.read(), stderr=err.read(), wall_s=round(wall, 3))
    out.close()
    err.close()
    result.update(run.parse_wrk(result["stdout"]))
    if result["rps"] is None and not result.get("failure"):
        last = (result["stderr"].strip() or result["stdout"].strip() or "no output").splitlines()[-1]
        result["failure"] = "wrk failed (rc %s): %s" % (wrk.returncode, last)

    ncpu = len(os.sched_getaffinity(0))
    capacity = wall * ncpu  # CPU-seconds the machine had during the run
    if rusage is not None:
        result["wrk_cpu_s"] = round(rusage.ru_utime + rusage.ru_stime, 3)
        result["wrk_share"] = result["wrk_cpu_s"] / capacity
    delta = cpu_delta(server_before, server_after)
    result["server_cpu_s"] = round(sum(delta.values()) / CLK_TCK, 3)
    result["server_share"] = result["server_cpu_s"] / capacity
    result["master_cpu_s"] = round(delta.get(proc.pid, 0) / CLK_TCK, 3)
    result["worker_cpu_s"] = {str(p): round(t / CLK_TCK, 3) for p, t in delta.items() if p != proc.pid}
    gone = sorted(set(server_before) - set(server_after))
    if gone:  # a worker that exited took its CPU time with it
        result["processes_gone"] = gone
    busy = machine_after[0] - machine_before[0]
    total = machine_after[1] - machine_before[1]
    result["machine_busy_share"] = busy / total if total > 0 else None
    return result


def run_one(ctx, args, variant, log):
    """Start the variant, wait for every worker, warm it up, measure, stop it; the result dict."""
    port = run.free_port()
    argv = server_argv(variant, port)
    log.write("\n=== %s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S"), shlex.join(argv)))
    log.flush()
    proc = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=run.ROOT, start_new_session=True
    )
    run._LIVE[proc.pid] = proc
    base = {"variant": variant.name, "workers": variant.workers, "server_command": shlex.join(argv), "rps": None}
    try:
        if not run.wait_ready(proc, port):
            rc = proc.poll()
            why = "exited with status %s" % rc if rc is not None else "did not answer GET / within 20 s"
            return dict(base, failure="server %s (see %s)" % (why, os.path.relpath(log.name, run.ROOT)))
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
        if proc.poll() is not None:
            result["failure"] = "server exited with status %s during the load" % proc.returncode
        return result
    finally:
        run.stop_process(proc)
        time.sleep(args.pause)


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


def pct(v):
    return "—" if v is None else "%.0f%%" % (100.0 * v)


def summarize(names, runs):
    summary = {}
    for name in names:
        good = [r for r in runs[name] if ok(r)]
        errors = {}
        for r in runs[name]:
            for key, n in (r.get("errors") or {}).items():
                errors[key] = errors.get(key, 0) + n
        entry = {
            "runs": len(runs[name]),
            "ok_runs": len(good),
            "rps": run.median([r["rps"] for r in good]),
            "p99_ms": run.median([r.get("p99_ms") for r in good]),
            "errors": errors,
            "non2xx": sum(r.get("non2xx") or 0 for r in runs[name]),
            "wrk_share": run.median([r.get("wrk_share") for r in good]),
            "server_share": run.median([r.get("server_share") for r in good]),
            "machine_busy_share": run.median([r.get("machine_busy_share") for r in good]),
            "failures": sorted({r["failure"] for r in runs[name] if r.get("failure")}),
        }
        # Requests per CPU-second of the server: does a second worker cost more per request?
        entry["rps_per_server_cpu"] = run.median(
            [r["requests"] / r["server_cpu_s"] for r in good if r.get("requests") and r.get("server_cpu_s")]
        )
        if "w1" in runs:
            ratios = [
                a["rps"] / b["rps"] for a, b in zip(runs[name], runs["w1"]) if ok(a) and ok(b) and b["rps"] > 0
            ]
            entry["ratio_w1"] = run.median(ratios)
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
            run.fmt_rps(e["rps"]),
            "—" if name == "w1" else run.fmt_ratio(e["ratio_w1"]),
            run.fmt_ms(e["p99_ms"]),
            run.fmt_errors(e["errors"]),
            str(e["non2xx"]),
            pct(e["wrk_share"]),
            pct(e["server_share"]),
            pct(e["machine_busy_share"]),
            run.fmt_rps(e["rps_per_server_cpu"]),
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
                run.fmt_rps(r.get("rps")) if ok(r) else "failed: " + str(r.get("failure")),
                run.fmt_ms(r.get("p99_ms")),
                run.fmt_errors(r.get("errors") or {}),
                pct(r.get("wrk_share")),
                pct(r.get("server_share")),
                pct(r.get("machine_busy_share")),
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
    lines = [
        "# greenserve worker scaling, %s" % meta["date"],
        "",
        "- Command: `%s`" % meta["command"],
        "- Servers: `python -m greenserve --workers N [--reuse-port] --bind 127.0.0.1:PORT --log-level warning "
        "--graceful-timeout 2 --chdir ROOT bench.apps:app` (access log off, gevent monkey-patching as the CLI's "
        "default), started fresh for every run; ready once `GET /` answers and every worker's event loop "
        "watches the listening socket; warm-up %s s of the same load, then %s s of rest"
        % (meta["warmup"], meta["settle"]),
        "- Load: `wrk -t1 -c%d -d%ds --latency http://127.0.0.1:PORT%s` (keep-alive hello); %d repeat(s), "
        "variants interleaved in rotating order" % (CONNECTIONS, meta["duration"], PATH, meta["repeats"]),
        "- Machine: %s, %s CPUs; Linux %s; Python %s" % (meta["cpu_model"], meta["cpu_count"], meta["kernel"], meta["python"]),
        "- greenserve %s (%s, hot path %s); gevent %s; greenlet %s; %s"
        % (v.get("greenserve"), meta["greenserve_commit"], meta.get("greenserve_build"), v.get("gevent"),
           v.get("greenlet"), meta["wrk"]),
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
        md_table(*summary_table),
        "",
        md_table(*detail_table, align="llrrrrrrll"),
    ]
    return "\n".join(lines) + "\n"


def md_table(header, rows, align=None):
    esc = lambda x: str(x).replace("|", "\\|")  # noqa: E731
    align = align or "l" + "r" * (len(header) - 4) + "lll"
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(esc(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------


def parse_args(argv, available):
    p = argparse.ArgumentParser(description="Keep-alive hello with --workers 1 and --workers 2 (see bench/README.md).")
    p.add_argument("--servers", default=None,
                   help="comma-separated variants (default: every one available here: %s)" % ",".join(available))
    p.add_argument("--repeats", type=int, default=None, help="runs of each variant (default 3; --quick 1)")
    p.add_argument("--duration", type=int, default=None, help="seconds of load per run (default 10; --quick 3)")
    p.add_argument("--quick", action="store_true", help="1 repeat of 3 s unless --repeats/--duration are given")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of the same load before each run (0: none; default 1)")
    p.add_argument("--settle", type=float, default=0.5, help="seconds of rest between the warm-up and the run (default 0.5)")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs (default 0.5)")
    p.add_argument("--markdown", metavar="FILE", help="also write the Markdown report to FILE")
    p.add_argument("--json", metavar="FILE", default=os.path.join(run.RESULTS, "workers.json"),
                   help="raw results (default bench/results/workers.json)")
    args = p.parse_args(argv)
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3
    if args.duration is None:
        args.duration = 3 if args.quick else 10
    if args.repeats < 1 or args.duration < 1:
        p.error("--repeats and --duration must be at least 1")
    if args.servers:
        wanted = [n.strip() for n in args.servers.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in VARIANTS_BY_NAME]
        if unknown or not wanted:
            p.error("unknown variant(s) %s; known: %s" % (", ".join(unknown) or "(none)", ", ".join(VARIANTS_BY_NAME)))
        missing = [n for n in wanted if n not in available]
        if missing:
            p.error("%s: `python -m greenserve --help` lists no %s" % (", ".join(missing), VARIANTS_BY_NAME[missing[0]].needs))
        args.variant_list = [VARIANTS_BY_NAME[n] for n in wanted]
    else:
        args.variant_list = [VARIANTS_BY_NAME[n] for n in available]
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    help_text = cli_help()
    if not help_text:
        sys.exit("`python -m greenserve --help` failed: is greenserve installed (pip install -e .)?")
    skipped = {v.name: "`python -m greenserve --help` lists no %s" % v.needs
               for v in VARIANTS if v.needs and v.needs not in help_text}
    available = [v.name for v in VARIANTS if v.name not in skipped]
    args = parse_args(argv, available)
    command = shlex.join(["python", "bench/workers.py"] + argv)
    run.raise_nofile()
    ctx = run.Context(argparse.Namespace(duration=args.duration, server_cpu=0, client_cpu=1, no_pin=True))
    if not ctx.wrk_path:
        sys.exit("wrk is not installed (apt-get install wrk)")
    for name, reason in skipped.items():
        print("skipping %s: %s" % (name, reason), flush=True)

    cpus = len(os.sched_getaffinity(0))
    meta = run.environment(ctx)
    meta.update(
        command=command, repeats=args.repeats, duration=args.duration, warmup=args.warmup, settle=args.settle, cpus=cpus,
        pinning="none, on purpose: two workers need both cores, so the server processes and wrk share the %d CPUs" % cpus,
        variants=[v.name for v in args.variant_list], skipped_variants=skipped,
        server_commands={v.name: shlex.join(server_argv(v, "PORT")) for v in args.variant_list},
    )
    print("not pinned: the server processes and wrk share the %d CPUs" % cpus, flush=True)
    logs = {v.name: harness.open_log("workers-" + v.name) for v in args.variant_list}
    names = [v.name for v in args.variant_list]
    runs = {n: [] for n in names}
    started = time.monotonic()
    try:
        variants = args.variant_list
        for repeat in range(args.repeats):
            shift = repeat % len(variants)
            for variant in variants[shift:] + variants[:shift]:
                r = run_one(ctx, args, variant, logs[variant.name])
                r["repeat"] = repeat
                runs[variant.name].append(r)
                c, w = split(r)
                print(
                    "[%5.0fs] repeat %d/%d %-13s %10s req/s  p99 %-9s errors %-6s wrk CPU %4s  server CPU %4s  "
                    "machine %4s  conns %s  worker CPU %s%s"
                    % (time.monotonic() - started, repeat + 1, args.repeats, variant.name, run.fmt_rps(r.get("rps")),
                       run.fmt_ms(r.get("p99_ms")), run.fmt_errors(r.get("errors") or {}), pct(r.get("wrk_share")),
                       pct(r.get("server_share")), pct(r.get("machine_busy_share")), c, w,
                       ("  FAILED: " + r["failure"]) if r.get("failure") else ""),
                    file=sys.stderr, flush=True,
                )
    except KeyboardInterrupt:
        print("\ninterrupted; reporting what was measured", file=sys.stderr)
    finally:
        run.stop_all(logs)

    meta["elapsed_s"] = round(time.monotonic() - started, 1)
    names = [n for n in names if runs[n]]
    summary = summarize(names, {n: runs[n] for n in names})
    summary_table, detail_table = tables(names, runs, summary)
    run.write_json(args.json, {"meta": meta, "summary": summary, "runs": runs})
    print()
    print(run.text_table(*summary_table))
    print()
    print(run.text_table(*detail_table))
    for line in verdicts(summary):
        print(line)
    run.print_report(markdown_report(meta, summary_table, detail_table, summary), args.markdown, args.json)


if __name__ == "__main__":
    run.main_until_terminated(main)

"""The accept path, counted: system calls and user-space instructions per connection.

    python bench/accept.py                  # strace -c over 4,000 connections: greenserve, bjoern, nginx (about 15 s)
    python bench/accept.py --callgrind      # and callgrind's instructions per connection: greenserve, bjoern (about 30 s more)
    python bench/accept.py --servers greenserve,greenserve-cli,nginx --requests 500 --markdown accept.md

Issue 22 asks where a connection's cost goes on the accept path (``ab -r -n N -c C /page``, a new
connection per request), beside bjoern and nginx. Each server is started pinned (as bench/run.py
does) and warmed with ``--warmup`` requests, then either

- ``strace -c -f`` is attached to the launcher's process and its descendants (nginx's and
  greenserve-cli's master and worker), ``ab -r -s 30 -n N -c C`` runs, strace is stopped with
  SIGINT, and its table ÷ N gives each system call per connection; or
- (``--callgrind``, a server that is one Python process) the launcher runs under
  ``valgrind --tool=callgrind``: ``callgrind_control -z`` after the warm-up, ab, ``-d``; then
  callgrind_annotate's PROGRAM TOTALS ÷ N, and the functions' exclusive counts ÷ N, read from the
  dump itself: callgrind writes each call still on the stack at the dump (the hub's loop, every
  switched-out greenlet) as a call made zero times at its inclusive cost, which callgrind_annotate
  adds to the caller's own (a function at 200%). Inclusive counts mean nothing here: greenlet
  switches confuse callgrind's call graph.

Counts, not rates: a traced server runs several times slower, so what depends on timing (events
per ``epoll_wait``, ``accept4`` answered EAGAIN) is the slowed server's. Raw results go to
bench/results/accept.json (--json).
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import HOST, cli, load, machine, report, servers  # noqa: E402

DEFAULT_SERVERS = "greenserve,bjoern,nginx"
ALLOWED = [s.name for s in servers.SERVERS if s.name not in servers.CANNED]  # the bare loops answer no /page
ONE_PYTHON_PROCESS = ("greenserve", "greenserve-pure", "greenserve-metrics", "pywsgi", "bjoern", "meinheld")
SYSCALL_SHOWN = 0.01  # per connection, in some server: a row of its own; the rest is "other"
PART_TOOLS = {"strace": ("strace",), "callgrind": ("valgrind", "callgrind_control", "callgrind_annotate")}
CALLGRIND_KINDS = {"fl": "fl", "fi": "fl", "fe": "fl", "cfi": "fl", "cfl": "fl", "fn": "fn", "cfn": "fn", "ob": "ob", "cob": "ob"}


def parse_strace_table(text):
    """{syscall: {"calls", "errors"}} from strace -c's table, its "total" row included."""
    found = {}
    for line in text.splitlines():
        fields = line.split()  # % time, seconds, usecs/call, calls, [errors], syscall
        if len(fields) not in (5, 6) or not re.fullmatch(r"[\d.]+", fields[0]):
            continue
        found[fields[-1]] = {"calls": int(fields[3]), "errors": int(fields[4]) if len(fields) == 6 else 0}
    return found


def callgrind_self_costs(path):
    """{(function, object file): exclusive Ir} from a callgrind dump.

    The cost line after a ``calls=`` line is the call's inclusive cost, so it is left out; names
    are compressed (``fn=(7) name`` defines 7, ``fn=(7)`` refers to it), one table each for files,
    functions and objects; a recursion level (``name'2``) counts with its function.
    """
    names, costs = {}, {}
    current, ob, positions, after_call = None, None, 1, False
    with open(path) as f:
        for line in f:
            first = line[:1]
            if first.isdigit() or first in "+-*":
                if after_call:
                    after_call = False
                elif len(line.split()) > positions:
                    costs[current] = costs.get(current, 0) + int(line.split()[positions])
                continue
            key, sep, value = line.partition("=")
            kind = CALLGRIND_KINDS.get(key) if sep else None
            if kind:
                ident, _, name = value.strip().partition(" ")
                if name or not ident.startswith("("):
                    names[kind, ident] = name or ident
                name = names.get((kind, ident), ident)
                if key == "ob":
                    ob = name
                elif key == "fn":
                    current = (re.sub(r"'\d+$", "", name), os.path.basename(ob or "???"))
            elif sep and key == "calls":
                after_call = True
            elif line.startswith("positions:"):
                positions = len(line.split()) - 1
    return costs


def run_ab(ctx, args, port, requests):
    argv = [ctx.ab_path, "-q", "-r", "-s", "30", "-n", str(requests), "-c", str(min(args.concurrency, requests)),
            "http://%s:%d/page" % (HOST, port)]
    return ctx.run_load(argv, load.parse_ab, "ab", port, duration=args.timeout, limit=args.timeout, sample=False)


def loaded(result, args):
    """Returns the figures of a measured ab run, or raises RuntimeError saying why it is not one."""
    if result.get("failure") or result.get("requests") is None:
        raise RuntimeError(result.get("failure") or "ab gave no report")
    return {"requests": args.requests, "completed": result["requests"], "failed": result["failed"],
            "non2xx": result["non2xx"], "ab_seconds": result["seconds"], "ab_command": result["command"]}


def traced(pids, tracer, timeout=10.0):
    """True once strace (PID tracer) traces every PID (TracerPid in /proc/PID/status)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and tracer.poll() is None:
        status = [machine.read("/proc/%d/status" % pid) or "" for pid in pids]
        if all("\nTracerPid:\t%d\n" % tracer.pid in s for s in status):
            return True
        time.sleep(0.05)
    return False


def measure_syscalls(ctx, args, server, log, directory):
    proc, port, _, failure = server.start(ctx, log, label="strace")
    if failure:
        return {"failure": failure}
    try:
        run_ab(ctx, args, port, args.warmup)
        pids = [proc.pid] + [pid for pid, _ in machine.descendants(proc.pid)]
        table = os.path.join(directory, "strace-%s.txt" % server.name)
        argv = [machine.program("strace"), "-c", "-f", "-o", table] + [a for pid in pids for a in ("-p", str(pid))]
        tracer = servers.spawn(ctx.pinned(ctx.server_cpu, argv), stdout=log, stderr=log)
        try:
            if not traced(pids, tracer):
                return {"failure": "strace did not attach to %s (see the log)" % pids}
            result = loaded(run_ab(ctx, args, port, args.requests), args)
        finally:
            tracer.send_signal(signal.SIGINT)  # strace detaches and writes its table
            try:
                tracer.wait(30)
            except subprocess.TimeoutExpired:
                pass
            servers.stop_process(tracer)
        result["syscalls"] = parse_strace_table(machine.read(table) or "")
        if "total" not in result["syscalls"]:
            return {"failure": "no table from strace (see the log)"}
        result["processes"] = len(pids)
        return result
    except RuntimeError as e:
        return {"failure": str(e)}
    finally:
        servers.stop_process(proc)


def measure_instructions(ctx, args, server, log, directory):
    if server.name not in ONE_PYTHON_PROCESS:
        return {"failure": "not one Python process (callgrind follows one)"}
    port = servers.free_port()
    out = os.path.join(directory, "callgrind.out.%p")
    argv = ctx.pinned(ctx.server_cpu, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                       sys.executable, server.launcher, str(port)])
    log.write("\n=== callgrind: %s\n" % " ".join(argv))
    log.flush()
    env = dict(os.environ, **server.env) if server.env else None
    proc = servers.spawn(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        if not servers.wait_ready(proc, port, timeout=180):
            return {"failure": "did not answer GET / under valgrind within 180 s (see %s)" % os.path.relpath(log.name)}
        run_ab(ctx, args, port, args.warmup)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], stdout=subprocess.DEVNULL, check=True, timeout=60)
        result = loaded(run_ab(ctx, args, port, args.requests), args)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], stdout=subprocess.DEVNULL, check=True, timeout=120)
        dump = os.path.join(directory, "callgrind.out.%d.1" % proc.pid)
        deadline = time.monotonic() + 60
        while "\ntotals:" not in (machine.read(dump) or "")[-200:] and time.monotonic() < deadline:
            time.sleep(0.2)  # the dump's last line is its totals
        annotated = subprocess.run(["callgrind_annotate", dump], capture_output=True, text=True, timeout=300).stdout
        m = re.search(r"^\s*([\d,]+)\s.*PROGRAM TOTALS", annotated, re.M)
        if not m:
            return {"failure": "no PROGRAM TOTALS in callgrind_annotate's output for %s" % dump}
        result["instructions"] = int(m.group(1).replace(",", ""))
        costs = callgrind_self_costs(dump)
        top = sorted(costs.items(), key=lambda kv: -kv[1])[: args.top]
        result["functions"] = [{"function": fn, "object": ob, "instructions": n} for (fn, ob), n in top]
        result["self_total"] = sum(costs.values())
        return result
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return {"failure": "%s: %s" % (type(e).__name__, e)}
    finally:
        servers.stop_process(proc)


def per(count, n):
    return "0" if count == 0 else "%.2f" % (count / n)


def figure_rows(label, totals, fmt, results, names):
    """A total per connection and its ratio to greenserve's, ab's failed requests, why a server has no figures."""
    base = totals.get("greenserve")
    rows = [[label] + [("**%s**" % fmt.format(totals[s])) if s in totals else "—" for s in names],
            ["÷ greenserve's"] + ["%.2f" % (totals[s] / base) if base and s in totals else "—" for s in names],
            ["failed requests (ab)"] + [report.fmt_int(results[s].get("failed")) for s in names]]
    if any(results[s].get("failure") for s in names):
        rows.append(["not measured"] + [results[s].get("failure", "") for s in names])
    return rows


def syscall_table(results, names):
    ok = {s: r["syscalls"] for s, r in results.items() if "syscalls" in r}
    n = {s: results[s]["requests"] for s in ok}
    peak = {}
    for s, table in ok.items():
        for call, counts in table.items():
            peak[call] = max(peak.get(call, 0), counts["calls"] / n[s])
    first = ok.get("greenserve") or next(iter(ok.values()), {})
    shown = sorted((c for c in peak if c != "total" and peak[c] >= SYSCALL_SHOWN),
                   key=lambda c: (-first.get(c, {}).get("calls", 0), -peak[c]))

    def cell(s, call):
        counts = ok[s].get(call, {"calls": 0, "errors": 0})
        return per(counts["calls"], n[s]) + (" (%s failed)" % per(counts["errors"], n[s]) if counts["errors"] else "")

    rows = [[c] + [cell(s, c) if s in ok else "—" for s in names] for c in shown]
    rows.append(["other"] + [per(sum(v["calls"] for c, v in ok[s].items() if c not in shown and c != "total"), n[s])
                             if s in ok else "—" for s in names])
    totals = {s: ok[s]["total"]["calls"] / n[s] for s in ok}
    return ["system call, per connection"] + names, rows + figure_rows("total", totals, "{:,.2f}", results, names)


def instruction_tables(results, names, top):
    ok = {s: r for s, r in results.items() if "instructions" in r}
    totals = {s: r["instructions"] / r["requests"] for s, r in ok.items()}
    functions = [[s, "{:,.0f}".format(f["instructions"] / ok[s]["requests"]),
                  "%.1f%%" % (100.0 * f["instructions"] / ok[s]["self_total"]), "`%s` (%s)" % (f["function"], f["object"])]
                 for s in names if s in ok for f in ok[s]["functions"][:top]]
    return ((["user-space instructions"] + names, figure_rows("per connection", totals, "{:,.0f}", results, names)),
            (["server", "per connection", "share", "function (object file)"], functions))


def markdown_report(meta, results, names, args):
    v = meta["versions"]
    lines = report.short_head(meta, "greenserve accept path: system calls and instructions per connection",
                              "bjoern %s; nginx %s; %s" % (v.get("bjoern"), v.get("nginx"), meta["ab"])) + [
        "- Load: `ab -r -s 30 -n %d -c %d http://127.0.0.1:PORT/page` (HTTP/1.0, a new connection per request), "
        "after %d requests of warm-up; every figure is a count ÷ %d connections" % (args.requests, args.concurrency, args.warmup, args.requests),
        "- Pinning: %s; load average at start %s" % (meta["pinning"], meta["loadavg_at_start"]),
    ]
    lines += ["- Skipped %s: %s" % kv for kv in meta["skipped_servers"].items()]
    lines += ["- Skipped the %s part: %s" % kv for kv in meta["skipped_parts"].items()]
    if "strace" in results:
        lines += ["", "## System calls per connection (strace -c)", "",
                  "`strace -c -f` attached to every process of the server. Traced, a server runs several times slower: "
                  "what depends on timing (events per `epoll_wait`, `accept4` answered EAGAIN) is the slowed server's. "
                  "nginx reads `/page` from its file (`openat`, `newfstatat`, `pread64`, `close`), the others answer "
                  "from memory.", "",
                  report.markdown_table(*syscall_table(results["strace"], names), align="l" + "r" * len(names))]
    if "callgrind" in results:
        summary, functions = instruction_tables(results["callgrind"], names, args.top)
        lines += ["", "## User-space instructions per connection (callgrind)", "",
                  "PROGRAM TOTALS of `callgrind_annotate` ÷ connections, counted between `callgrind_control -z` and "
                  "`-d`, then the top %d functions by exclusive instructions (read from the dump: callgrind_annotate "
                  "counts the calls still on the stack at the dump as the caller's own). Inclusive counts are left out: "
                  "greenlet switches confuse callgrind's call graph. The interpreter's `_PyEval_EvalFrameDefault` is "
                  "all Python code." % args.top, "",
                  report.markdown_table(*summary, align="l" + "r" * len(names)), "",
                  report.markdown_table(*functions, align="lrrl")]
    return "\n".join(lines) + "\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description="System calls and instructions per connection on the accept path (see bench/README.md).")
    p.add_argument("--servers", default=DEFAULT_SERVERS, help="comma-separated (default %s; also %s)"
                   % (DEFAULT_SERVERS, ", ".join(n for n in ALLOWED if n not in DEFAULT_SERVERS.split(","))))
    p.add_argument("--requests", type=int, default=4000, help="ab -n: the connections counted (default 4000)")
    p.add_argument("--concurrency", type=int, default=50, help="ab -c (default 50)")
    p.add_argument("--warmup", type=int, default=1000, help="requests before the counting (default 1000)")
    p.add_argument("--callgrind", action="store_true", help="also count instructions under callgrind (one-process Python servers)")
    p.add_argument("--no-strace", action="store_true", help="skip the system calls")
    p.add_argument("--top", type=int, default=15, help="functions listed per server (default 15)")
    p.add_argument("--timeout", type=int, default=600, help="seconds one ab run may take before it is stopped (default 600)")
    cli.add_output(p, "accept.json")
    args = p.parse_args(argv)
    if min(args.requests, args.concurrency, args.warmup) < 1 or max(args.requests, args.warmup) > 50000:
        p.error("--requests, --concurrency and --warmup take 1 to 50,000 (ab's limit for -n)")
    args.server_list = cli.choose(p, args.servers, servers.BY_NAME, "or unsupported server(s)", ALLOWED)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    machine.raise_nofile()
    ctx = load.Context.from_args(args)
    if not ctx.ab_path:
        sys.exit("ab is not installed (apt-get install apache2-utils)")
    parts, skipped_parts = [], {}
    for part, package, wanted in (("strace", "strace", not args.no_strace), ("callgrind", "valgrind", args.callgrind)):
        missing = [t for t in PART_TOOLS[part] if machine.program(t) is None]
        if wanted and missing:
            skipped_parts[part] = "%s not installed (apt-get install %s)" % (", ".join(missing), package)
            print("skipping the %s part: %s" % (part, skipped_parts[part]), flush=True)
        elif wanted:
            parts.append(part)
    if not parts:
        sys.exit("nothing to measure")
    skipped, members = servers.available(args.server_list)
    meta = machine.environment(ctx)
    meta.update(command=cli.command("accept.py", argv), requests=args.requests, concurrency=args.concurrency,
                warmup=args.warmup, servers={s.name: s.description for s in members}, skipped_servers=skipped,
                skipped_parts=skipped_parts)
    logs = {s.name: servers.open_log("accept-" + s.name) for s in members}
    names = [s.name for s in members]
    # A server the run did not reach (Ctrl-C) shows as not measured.
    results = {part: {name: {"failure": "not run"} for name in names} for part in parts}
    with tempfile.TemporaryDirectory(prefix="greenserve-bench-accept-") as directory, cli.Session(logs) as session:
        for part in parts:
            for server in members:
                r = results[part][server.name] = MEASURE[part](ctx, args, server, logs[server.name], directory)
                figure = ("%.2f system calls" % (r["syscalls"]["total"]["calls"] / args.requests) if "syscalls" in r
                          else "{:,.0f} instructions".format(r.get("instructions", 0) / args.requests))
                session.progress("%-9s %-16s %s" % (part, server.name, r.get("failure")
                                                    or "%s per connection, %s failed" % (figure, r["failed"])))
    meta["elapsed_s"] = session.elapsed()
    report.publish(markdown_report(meta, results, names, args), args.markdown, args.json, {"meta": meta, "results": results})


MEASURE = {"strace": measure_syscalls, "callgrind": measure_instructions}

if __name__ == "__main__":
    cli.main(main)

"""User-space instructions per keep-alive request, counted with callgrind, in both builds.

    python bench/instructions.py                        # greenserve and greenserve-pure, 2 runs each (about 2 min)
    python bench/instructions.py --servers greenserve-pure --repeats 1
    python bench/instructions.py --connections 1000 --markdown instructions.md

A rate on this shared two-core machine moves by ±30 % from one run to the next; the instructions
a request takes move by a few tens in 22,000 (compiled) or 86,000 (pure Python). A change to the
hot path is measured here first, in both builds (docs/performance.md, issue 31: the pure build
lost 12 % to changes measured in the compiled build only).

Each run (docs/performance.md, "How these counts are taken"): the server's launcher under
``valgrind --tool=callgrind`` with ``PYTHONHASHSEED=0``, ``wrk -t1 -cN`` on ``/`` (keep-alive hello)
for WARMUP + WINDOW + 4 s; ``callgrind_control -z`` WARMUP s into the load and ``-d`` WINDOW s later,
while wrk still runs, so the window holds no connection's setup. Per request: the dump's
``summary:`` line ÷ the calls of libc's ``send`` and ``sendmsg`` in the dump, one per response in this scenario in
both builds (the compiled build's send(2) is libc's too). Raw results go to
bench/results/instructions.json (--json).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import HOST, cli, load, machine, report, servers  # noqa: E402

DEFAULT_SERVERS = "greenserve,greenserve-pure"
# greenserve's one-process launchers: one send(2) per keep-alive response, so sends count requests.
ALLOWED = ["greenserve", "greenserve-pure", "greenserve-metrics"]
TOOLS = ("valgrind", "callgrind_control", "wrk")
# What counts a request in the dump: libc's send, or its sendmsg for a body sent beside its head
# (connection._send_two), once per response (see the module docstring).
REQUEST_MARK = ("send", "sendmsg")


def dump_counts(path, function=REQUEST_MARK):
    """(the dump's summary: total, the calls of ``function`` in it) from a callgrind dump.

    Calls are read from ``calls=`` lines, each under the ``cfn=`` naming the callee (names are
    compressed: ``cfn=(7) name`` defines 7, ``cfn=(7)`` refers to it).
    """
    summary, calls, names, callee = None, 0, {}, None
    with open(path) as f:
        for line in f:
            if line.startswith("summary:"):
                summary = int(line.split()[1])
            elif line.startswith(("fn=", "cfn=")):
                ident, _, name = line.strip().partition("=")[2].partition(" ")
                if name:
                    names[ident] = name
                if line.startswith("cfn="):
                    callee = names.get(ident, ident)
            elif line.startswith("calls=") and callee in function:
                calls += int(line[6:].split()[0])
    return summary, calls


def measure(ctx, args, server, log, directory):
    """One run of `server` under callgrind: its instructions per request, or its failure."""
    port = servers.free_port()
    out = os.path.join(directory, "callgrind.out.%p")
    argv = ctx.pinned(ctx.server_cpu, ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                       sys.executable, server.launcher, str(port)])
    log.write("\n=== callgrind: %s\n" % " ".join(argv))
    log.flush()
    env = dict(os.environ, PYTHONHASHSEED="0", **(server.env or {}))
    if "GREENSERVE_PURE_PYTHON" not in (server.env or {}):
        env.pop("GREENSERVE_PURE_PYTHON", None)  # the row says which build it runs
    proc = servers.spawn(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    wrk = None
    try:
        if not servers.wait_ready(proc, port, timeout=180):
            return {"failure": "did not answer GET / under valgrind within 180 s (see %s)" % os.path.relpath(log.name)}
        seconds = int(args.warmup + args.window + 4)
        wrk = servers.spawn(ctx.pinned(ctx.client_cpu, [ctx.wrk_path, "-t1", "-c%d" % args.connections,
                                                        "-d%ds" % seconds, "http://%s:%d%s" % (HOST, port, args.path)]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(args.warmup)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], capture_output=True, check=True, timeout=120)
        time.sleep(args.window)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], capture_output=True, check=True, timeout=300)
        output = wrk.communicate(timeout=seconds + 60)[0]
        dump = os.path.join(directory, "callgrind.out.%d.1" % proc.pid)
        deadline = time.monotonic() + 60
        while "\ntotals:" not in (machine.read(dump) or "")[-200:] and time.monotonic() < deadline:
            time.sleep(0.2)  # the dump's last line is its totals
        summary, requests = dump_counts(dump)
        errors = re.findall(r"^\s*(Socket errors:.*|Non-2xx.*)$", output, re.M)
        if not summary or not requests:
            return {"failure": "no requests counted in %s" % dump}
        return {"instructions": summary, "requests": requests, "per_request": round(summary / requests),
                "wrk_errors": errors}
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        return {"failure": "%s: %s" % (type(e).__name__, e)}
    finally:
        if wrk is not None:
            servers.stop_process(wrk)
        servers.stop_process(proc)


def markdown_report(meta, results, names, args):
    lines = report.report_head(meta, "greenserve: instructions per keep-alive request") + [
        "- Load: `wrk -t1 -c%d` on `%s` (keep-alive); counters zeroed %g s into it, dumped %g s later"
        % (args.connections, args.path, args.warmup, args.window),
        "",
        "User-space instructions per request (callgrind's `summary:` ÷ the responses sent in the window), "
        "each run and their median.",
        "",
    ]
    rows = []
    for name in names:
        runs = results[name]
        good = [r["per_request"] for r in runs if "per_request" in r]
        failures = sorted({r["failure"] for r in runs if "failure" in r})
        rows.append([name, ", ".join("{:,}".format(n) for n in good) or "—",
                     "**{:,.0f}**".format(report.median(good)) if good else "—",
                     "{:,}".format(sum(r.get("requests", 0) for r in runs)),
                     "; ".join(failures + sorted({e for r in runs for e in r.get("wrk_errors", ())}))])
    lines.append(report.markdown_table(["server", "each run", "median", "requests counted", "notes"], rows))
    return "\n".join(lines) + "\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description="Instructions per keep-alive request under callgrind (see bench/README.md).")
    p.add_argument("--servers", default=DEFAULT_SERVERS, help="comma-separated (default %s; also %s)"
                   % (DEFAULT_SERVERS, ", ".join(n for n in ALLOWED if n not in DEFAULT_SERVERS.split(","))))
    p.add_argument("--repeats", type=int, default=2, help="runs of each server (default 2)")
    p.add_argument("--connections", type=int, default=100, help="wrk -c (default 100)")
    p.add_argument("--path", default="/", help="the path wrk asks for (default /, the hello; /page: the ~4.5 KB page)")
    p.add_argument("--warmup", type=float, default=6.0, help="seconds of load before the counters are zeroed (default 6)")
    p.add_argument("--window", type=float, default=8.0, help="seconds of load counted (default 8)")
    cli.add_output(p, "instructions.json")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.connections < 1 or args.warmup < 1 or args.window < 1:
        p.error("--repeats and --connections take 1 or more, --warmup and --window 1 s or more")
    args.server_list = cli.choose(p, args.servers, servers.BY_NAME, "or unsupported server(s)", ALLOWED)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    missing = [t for t in TOOLS if machine.program(t) is None]
    if missing:
        sys.exit("%s not installed (apt-get install valgrind wrk)" % ", ".join(missing))
    machine.raise_nofile()
    ctx = load.Context.from_args(args)
    skipped, members = servers.available(args.server_list)
    meta = machine.environment(ctx)
    meta.update(command=cli.command("instructions.py", argv), connections=args.connections, warmup=args.warmup,
                window=args.window, servers={s.name: s.description for s in members}, skipped_servers=skipped)
    logs = {s.name: servers.open_log("instructions-" + s.name) for s in members}
    names = [s.name for s in members]
    results = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="greenserve-bench-instructions-") as directory, cli.Session(logs) as session:
        for repeat, order in cli.rotations(members, args.repeats):
            for server in order:
                r = measure(ctx, args, server, logs[server.name], directory)
                results[server.name].append(r)
                session.progress("%-18s run %d: %s" % (server.name, repeat + 1, r.get("failure") or
                                                      "{:,} instructions a request ({:,} requests)".format(
                                                          r["per_request"], r["requests"])))
    meta["elapsed_s"] = session.elapsed()
    report.publish(markdown_report(meta, results, names, args), args.markdown, args.json,
                   {"meta": meta, "results": results})


if __name__ == "__main__":
    cli.main(main)

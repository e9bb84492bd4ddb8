"""WebSocket echo benchmark: greenserve's WebSocket beside gevent.pywsgi + gevent-websocket and gunicorn -k gevent.

    python bench/wsbench.py                                   # N = 1,000 and 10,000; 3 repeats of 10 s (about 8 min)
    python bench/wsbench.py --connections 200 --duration 2 --repeats 1        # a smoke test (about 25 s)
    python bench/wsbench.py --markdown docs/bench/websocket.md                # also the report, and docs/bench/websocket.png

Servers (launched by bench/servers/ws_server.py, pinned to CPU 0, one at a time):

- ``greenserve``: ``python -m greenserve --workers 1 --worker-connections 20000 ...
  bench.ws_apps:gevent_websocket_echo``, the gevent-websocket app unchanged on greenserve's own
  ``environ['wsgi.websocket']`` (a master and one worker; the hot path is whatever build the
  working tree has, and the report says which);
- ``greenserve-simple``: the same server running ``bench.ws_apps:simple_echo``, a plain WSGI
  echo app on simple-websocket, which takes the socket over (Flask-Sock's way);
- ``pywsgi``: ``gevent.pywsgi.WSGIServer(..., handler_class=geventwebsocket.handler.WebSocketHandler)``
  running ``bench.ws_apps:gevent_websocket_echo`` on ``environ['wsgi.websocket']``;
- ``gunicorn``: ``gunicorn -k gevent -w 1 --worker-connections 20000 ... bench.ws_apps:simple_echo``,
  the same simple-websocket app as greenserve's (a master and one gevent worker).

Each server raises its own RLIMIT_NOFILE soft limit to its hard limit (the launcher does it, and
then execs greenserve's and gunicorn's masters, whose workers inherit it).

For every N of ``--connections`` (1,000 and 10,000) and every repeat, each server is started
fresh on a new port, and the order of the servers rotates from one repeat to the next. The load
is bench/ws_client.py, one gevent process pinned to CPU 1, with one greenlet per connection. It
does the RFC 6455 handshake itself and sends masked frames with a fixed mask key. One run goes:

1. the client's warm-up: 20 WebSockets echo for 1 s, then close (--warmup);
2. the serving process's RSS is read: the worker's for greenserve and gunicorn, the process's
   own for pywsgi ("RSS before");
3. the client opens N WebSockets, at most --batch (500) handshaking at once, each within 10 s,
   all within --open-timeout; failures are counted by reason;
4. after --settle seconds (2) with the N WebSockets open and idle, RSS is read again. The client
   counts those the server still holds open, and (RSS idle - RSS before) / still open gives the
   KiB per open WebSocket;
5. every connection sends a 32-byte text message, waits for its echo and sends the next, for
   --duration seconds (10). The client reports echoed messages per second (only echoes that
   arrive before the end count), the p50 and p99 round trip, connections that errored, and
   messages still unanswered --grace s (2) after the end. The server's CPU use (its master and
   worker, from /proc/PID/stat) is read over the same --duration s, and the client's from
   os.times;
6. RSS is read once more, with the connections open after the load. The client closes every
   connection (a close frame, then the socket), and the server is stopped by PID, its worker too.

Tables give medians over the repeats. "greenserve ÷ server" is the median of per-repeat ratios of
messages/s, greenserve's ÷ this server's: above 1, greenserve echoed more. Each ratio pairs two
runs of the same repeat, close in time. Failures and errors are totals over the repeats. Raw
results go to bench/results/websocket.json. ``--markdown FILE`` writes the Markdown report and,
next to it, a PNG chart (FILE with ``.png``: messages/s and KiB per WebSocket, by server and N).
``--chart FILE`` names the chart, and ``--no-chart`` draws none. A server whose packages cannot
be imported is skipped with the reason; nothing is installed. Every phase is bounded in time,
the load only targets 127.0.0.1, and only the processes started here are stopped, by PID.
"""

import argparse
import datetime
import importlib.util
import os
import shlex
import sys
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import cli, load, machine, report, servers  # noqa: E402

LAUNCHER = "ws_server.py"
# Above this share of its CPU the client may be what limits the rate.
CLIENT_BOUND = 0.90
# Other processes (or the hypervisor's steal) taking this share of the server's CPU are noted.
OTHERS_NOTE = 0.10

SERVERS = [
    servers.Server(
        "greenserve",
        LAUNCHER,
        ["gevent", "greenserve", "greenserve.websocket"],
        ["greenserve"],
        "python -m greenserve --workers 1 --worker-connections 20000 --backlog 2048 "
        "bench.ws_apps:gevent_websocket_echo (the gevent-websocket app on greenserve's built-in "
        "environ['wsgi.websocket']; master + 1 worker)",
    ),
    servers.Server(
        "greenserve-simple",
        LAUNCHER,
        ["gevent", "greenserve", "simple_websocket"],
        ["greenserve", "simple-websocket", "wsproto"],
        "python -m greenserve --workers 1 --worker-connections 20000 --backlog 2048 bench.ws_apps:simple_echo "
        "(simple-websocket, a plain WSGI app; master + 1 worker)",
    ),
    servers.Server(
        "pywsgi",
        LAUNCHER,
        ["gevent", "gevent.pywsgi", "geventwebsocket.handler"],
        ["gevent", "gevent-websocket"],
        "gevent.pywsgi.WSGIServer(..., handler_class=geventwebsocket.handler.WebSocketHandler, log=None, "
        "backlog=2048), bench.ws_apps:gevent_websocket_echo on environ['wsgi.websocket'] (one process)",
    ),
    servers.Server(
        "gunicorn",
        LAUNCHER,
        ["gunicorn", "gevent", "simple_websocket"],
        ["gunicorn", "simple-websocket", "wsproto"],
        "gunicorn -k gevent -w 1 --worker-connections 20000 --backlog 2048 bench.ws_apps:simple_echo "
        "(the same simple-websocket app; master + 1 gevent worker)",
    ),
]
SERVERS_BY_NAME = {s.name: s for s in SERVERS}
LABELS = {
    "greenserve": "greenserve (built-in WebSocket)",
    "greenserve-simple": "greenserve + simple-websocket",
    "pywsgi": "gevent.pywsgi + gevent-websocket",
    "gunicorn": "gunicorn -k gevent + simple-websocket",
}
VERSIONED = ("greenserve", "gevent", "greenlet", "gunicorn", "simple-websocket", "wsproto", "gevent-websocket", "matplotlib")


# --------------------------------------------------------------------------------------------
# Processes


def serving_pid(proc):
    """The process that holds the connections: the single worker of a master, else proc itself."""
    children = [pid for pid, _ in machine.descendants(proc.pid)]
    if len(children) == 1:
        return children[0], None
    if not children:
        return proc.pid, None
    biggest = max(children, key=lambda pid: machine.rss_kib(pid) or 0)
    return biggest, "%d child processes; RSS is the largest one's (PID %d)" % (len(children), biggest)


def cpu_seconds(pids):
    """user + sys CPU seconds of these processes (from /proc/PID/stat); the ones gone count 0."""
    return sum(machine.cpu_ticks(pid) or 0 for pid in pids) / machine.CLK_TCK


def core_shares(before, after, own_seconds):
    """How a CPU's time went besides our process(es), as shares of the interval.

    ``others``: user and system time of other processes (and of the kernel threads); ``irq``:
    hard and soft interrupts, where the kernel does loopback TCP, which the load itself causes
    and /proc/PID/stat does not charge to the process; ``steal``: time the hypervisor gave
    to other guests.
    """
    if not before or not after:
        return None
    d = [a - b for a, b in zip(after, before)]
    total = sum(d)
    if total <= 0:
        return None
    task = (d[0] + d[1] + d[2]) / total
    elapsed = total / machine.CLK_TCK
    return {
        "others": max(0.0, task - own_seconds / elapsed),
        "irq": (d[5] + d[6]) / total,
        "steal": d[7] / total,
    }


def run_one(ctx, args, server, connections, log, client_log):
    """One server, one N: start, warm, measure memory and echo load, stop. The result dict."""
    result = {"server": server.name, "connections": connections}
    proc, port, argv, failure = server.start(ctx, log, [server.name], label="N = %d" % connections)
    result["server_command"] = shlex.join(argv)
    if failure:
        result["failure"] = failure
        return result
    client = None
    try:
        pid, note = serving_pid(proc)
        if note:
            result["note"] = note
        pids = [proc.pid] + [p for p, _ in machine.descendants(proc.pid)]
        client_log.write("\n=== %s %s N = %d\n" % (datetime.datetime.now().isoformat(timespec="seconds"), server.name, connections))
        client_log.flush()
        client = load.WebSocketClient(ctx, {
            "port": port, "connections": connections, "duration": args.duration, "batch": args.batch,
            "open_timeout": args.open_timeout, "grace": args.grace, "warmup": args.warmup,
        }, client_log)
        result["client_command"] = shlex.join(client.argv)

        def step(event, timeout, what):
            data = client.expect(event, timeout)
            if data is None:
                rc = client.proc.poll()
                result["failure"] = "client %s (%s)" % (
                    "exited with status %s" % rc if rc is not None else "gave no %r within %d s" % (event, timeout),
                    what,
                )
            return data

        if step("warm", 60 + args.warmup, "warm-up") is None:
            return result
        time.sleep(0.5)
        result["rss_before_kib"] = machine.rss_kib(pid)
        client.go()
        opened = step("opened", args.open_timeout + 30, "opening")
        if opened is None:
            return result
        time.sleep(args.settle)
        result["rss_idle_kib"] = machine.rss_kib(pid)
        client.go()
        # The client counts the connections still open, says "idle" and starts the echo at once:
        # the server's CPU is read over the echo's `duration` from there.
        if step("idle", 60, "counting the open connections") is None:
            return result
        core0 = machine.cpu_time_split(ctx.server_cpu) if ctx.pin else None
        cpu0, t0 = cpu_seconds(pids), time.monotonic()
        time.sleep(args.duration)
        cpu1, t1 = cpu_seconds(pids), time.monotonic()
        core1 = machine.cpu_time_split(ctx.server_cpu) if ctx.pin else None
        result["server_cpu"] = (cpu1 - cpu0) / (t1 - t0)
        # What else ran on the server's CPU meanwhile: other processes, interrupts, steal.
        shares = core_shares(core0, core1, cpu1 - cpu0)
        if shares:
            result["server_core"] = shares
            result["others_on_server_cpu"] = shares["others"] + shares["steal"]
        if step("loaded", args.grace + 60, "echo load") is None:
            return result
        result["rss_loaded_kib"] = machine.rss_kib(pid)
        client.go()
        final = step("result", 60, "closing")
        if final is None:
            return result
        final.pop("event", None)
        result.update(final)
        if proc.poll() is not None:
            result["failure"] = "server exited with status %s during the run" % proc.returncode
        elif None in (result.get("rss_before_kib"), result.get("rss_idle_kib"), result.get("rss_loaded_kib")):
            result["failure"] = "the serving process (PID %d) exited during the run" % pid
        elif result.get("idle_still_open"):
            result["kib_per_ws"] = (result["rss_idle_kib"] - result["rss_before_kib"]) / result["idle_still_open"]
        return result
    finally:
        if client is not None:
            client.stop()
            for data in client.events:  # what a client that gave up early still reported
                if data.get("event") == "result" and "messages" not in result:
                    for key in ("opened", "open_failures", "open_seconds", "idle_still_open", "aborted"):
                        if key in data:
                            result[key] = data[key]
        servers.stop_process(proc)
        time.sleep(args.pause)


# --------------------------------------------------------------------------------------------
# Summaries and tables


def summarize(server_names, runs, grace):
    """runs[server] = [result per repeat] for one N: medians, totals, ratios and notes."""
    summary = {}
    ok = {s: report.good_runs(runs[s], "rate") for s in server_names}
    for s in server_names:
        good = [r for r in ok[s] if r is not None]
        entry = report.summary_entry(runs[s], good, (
            "rate", "p50_ms", "p99_ms", "max_ms", "kib_per_ws", "rss_before_kib", "rss_idle_kib", "rss_loaded_kib",
            "open_seconds", "client_cpu", "server_cpu",
        ))
        entry.update(
            others_on_server_cpu=max(
                [r["others_on_server_cpu"] for r in good if r.get("others_on_server_cpu") is not None] or [None]
            ),
            open_failures={},
            no_echo_at_end=sum(r.get("no_echo_at_end") or 0 for r in runs[s]),
            closed_while_idle=sum(
                (r["opened"] - r["idle_still_open"]) for r in runs[s]
                if r.get("opened") is not None and r.get("idle_still_open") is not None
            ),
            without_echo=sum(r.get("connections_without_echo") or 0 for r in runs[s]),
        )
        for r in runs[s]:
            report.add_counts(entry["open_failures"], r.get("open_failures"))
        if "greenserve" in server_names:
            entry["greenserve_over"] = report.paired_ratio(ok["greenserve"], ok[s], "rate")
        else:
            entry["greenserve_over"] = None
        notes = list(entry["failures"])
        if entry["ok_runs"] and entry["ok_runs"] < entry["runs"]:
            notes.append("%d of %d runs failed" % (entry["runs"] - entry["ok_runs"], entry["runs"]))
        if entry["closed_while_idle"]:
            notes.append("%d closed by the server while idle" % entry["closed_while_idle"])
        if entry["no_echo_at_end"]:
            notes.append("%d messages unanswered %g s after the end" % (entry["no_echo_at_end"], grace))
        if entry["without_echo"]:
            notes.append("%d connections got no echo in the run" % entry["without_echo"])
        if entry["others_on_server_cpu"] is not None and entry["others_on_server_cpu"] >= OTHERS_NOTE:
            notes.append("other processes or steal took up to %.0f%% of the server's CPU in a run" % (entry["others_on_server_cpu"] * 100))
        if entry["client_cpu"] is not None and entry["client_cpu"] >= CLIENT_BOUND:
            notes.append("client CPU %.0f%%: the load generator may be the limit" % (entry["client_cpu"] * 100))
        entry["notes"] = notes
        summary[s] = entry
    return summary


def fmt_counts(counts):
    nonzero = ["%s %d" % (k, n) for k, n in sorted(counts.items()) if n]
    return ", ".join(nonzero) if nonzero else "0"


def fmt_kib(v):
    return "—" if v is None else "%.1f" % v


def fmt_mib(v):
    return "—" if v is None else "%.1f" % (v / 1024.0)


def table_rows(summary, all_servers):
    header = [
        "server", "msgs/s (median)", "p50", "p99", "failed to open", "errors", "KiB per open WS",
        "RSS before → idle → after load (MiB)", "client CPU", "server CPU", "greenserve ÷ server", "notes",
    ]
    rows = []
    for name in all_servers:
        e = summary.get(name)
        if e is None:
            rows.append([name] + ["n/a"] * 10 + ["not run"])
            continue
        rss = "%s → %s → %s" % (fmt_mib(e["rss_before_kib"]), fmt_mib(e["rss_idle_kib"]), fmt_mib(e["rss_loaded_kib"]))
        rows.append(
            [
                name,
                report.fmt_rps(e["rate"]),
                report.fmt_ms(e["p50_ms"]),
                report.fmt_ms(e["p99_ms"]),
                fmt_counts(e["open_failures"]),
                fmt_counts(e["errors"]),
                fmt_kib(e["kib_per_ws"]),
                rss,
                report.fmt_pct(e["client_cpu"]),
                report.fmt_pct(e["server_cpu"]),
                report.fmt_ratio(e["greenserve_over"]),
                "; ".join(e["notes"]),
            ]
        )
    return header, rows


def markdown_report(meta, tables, chart):
    v = meta["versions"]
    lines = report.report_head(meta, "greenserve WebSocket benchmark") + [
        "- WebSocket libraries: simple-websocket %s (wsproto %s); gevent-websocket %s; gunicorn %s"
        % (v.get("simple-websocket"), v.get("wsproto"), v.get("gevent-websocket"), v.get("gunicorn")),
        "- Pinning: %s; %d repeat(s) of %g s of echo per server and N, servers interleaved in rotating order; "
        "load average at start %s" % (meta["pinning"], meta["repeats"], meta["duration"], meta["loadavg_at_start"]),
        "- Load: bench/ws_client.py, one gevent process, a greenlet per connection; each connection sends a "
        "32-byte text message (masked, fixed mask key) and waits for its echo, in a loop; handshakes %d at a time"
        % meta["batch"],
    ]
    for w in meta["warnings"]:
        lines.append("- Warning: %s" % w)
    for name, reason in meta["skipped_servers"].items():
        lines.append("- Skipped %s: %s" % (name, reason))
    lines += ["", "Servers:", ""]
    for name, description in meta["servers"].items():
        lines.append("- `%s`: %s" % (name, description))
    lines += [
        "",
        "msgs/s: echoes received within the %g s, ÷ %g s; p50/p99: round trip, send to whole echo. "
        "KiB per open WS: (RSS with N idle WebSockets open − RSS before opening them) ÷ the WebSockets the "
        "server still held open, RSS being the serving process's VmRSS (the worker's for greenserve and "
        "gunicorn); kernel socket buffers are not in it. CPU: share of one core over the echo phase (the "
        "server's master and worker together). Medians over the repeats; greenserve ÷ server is the median of "
        "per-repeat ratios of msgs/s (above 1: greenserve echoed more); failures and errors are totals over "
        "the repeats. Only ratios within one run mean much: absolute numbers on this machine drift 20-30%%."
        % (meta["duration"], meta["duration"]),
    ]
    if chart:
        lines += ["", "![messages/s and KiB per WebSocket](%s)" % chart]
    for n, header, rows in tables:
        lines += ["", "## %s concurrent WebSockets" % "{:,}".format(n), "", report.markdown_table(header, rows)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# The chart


def draw_chart(data, out):
    """Two panels, grouped bars by N, one bar per server: messages/s, and KiB per open WebSocket."""
    from bench import charts  # exits when matplotlib is missing: checked by the caller first

    plt = charts.plt
    meta = data["meta"]
    levels = [int(n) for n in data["summaries"]]
    names = charts.ordered({s for summary in data["summaries"].values() for s in summary})
    colour = charts.colours(names)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8), dpi=110)
    panels = [("rate", "messages echoed per second (median)", charts.compact), ("kib_per_ws", "KiB per open WebSocket (median)", lambda v: "%.1f" % v)]
    width = 0.8 / max(1, len(names))
    for ax, (key, title, fmt) in zip(axes, panels):
        top = 0
        for i, name in enumerate(names):
            for j, n in enumerate(levels):
                entry = data["summaries"][str(n)].get(name) or {}
                y = entry.get(key)
                x = j - 0.4 + width * (i + 0.5)
                if y:
                    ax.bar(x, y, width, color=colour[name])
                    ax.annotate(fmt(y), (x, y), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7)
                    top = max(top, y)
                else:
                    ax.annotate("n/a", (x, 0), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize=7, color="0.5")
        ax.set_ylim(0, (top or 1) * 1.15)
        ax.set_xlim(-0.5, len(levels) - 0.5)
        ax.set_xticks(range(len(levels)))
        ax.set_xticklabels(["%s connections" % "{:,}".format(n) for n in levels], fontsize=8)
        ax.yaxis.set_major_formatter(charts.FuncFormatter(charts.thousands if key == "rate" else lambda v, _p=None: "%g" % v))
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.set_title(title, fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[n]) for n in names]
    fig.legend(handles, [LABELS.get(n, n) for n in names], loc="lower center", ncol=len(names), fontsize=8, frameon=False)
    v = meta.get("versions", {})
    fig.suptitle(
        "WebSocket echo, 32-byte messages, one message in flight per connection (messages/s: higher is better)\n"
        "%s, greenserve %s (%s, hot path %s), %s repeat(s) of %g s; server on CPU %s, client on CPU %s"
        % ((meta.get("date") or "")[:10], v.get("greenserve"), meta.get("greenserve_commit"), meta.get("greenserve_build"),
           meta.get("repeats"), meta.get("duration"), meta.get("server_cpu"), meta.get("client_cpu")),
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(out)
    plt.close(fig)
    return out


# --------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(description="WebSocket echo benchmark (see bench/README.md and this module's docstring).")
    p.add_argument("--connections", default="1000,10000", help="comma-separated N: concurrent WebSockets (default 1000,10000)")
    cli.add_repeats(p, 3, 10.0, duration_type=float, what="server per N")
    p.add_argument("--servers", default=",".join(SERVERS_BY_NAME), help="comma-separated, from %s" % ", ".join(SERVERS_BY_NAME))
    p.add_argument("--batch", type=int, default=500, help="handshakes under way at once (default 500)")
    p.add_argument("--open-timeout", type=float, default=120.0, help="seconds to open all N WebSockets (default 120)")
    p.add_argument("--settle", type=float, default=2.0, help="seconds the N WebSockets sit idle before RSS is read (default 2)")
    p.add_argument("--grace", type=float, default=2.0, help="seconds for the last echoes after the end (default 2)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up echo on 20 WebSockets before RSS is read (default 1)")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs (default 0.5)")
    p.add_argument("--chart", metavar="FILE", help="the PNG chart (default: next to --markdown, with .png)")
    p.add_argument("--no-chart", action="store_true", help="draw no chart")
    cli.add_output(p, "websocket.json")
    args = p.parse_args(argv)
    cli.repeats_chosen(p, args)
    args.levels = cli.integers(p, args.connections, "--connections", "1000,10000")
    if not args.levels or min(args.levels) < 1:
        p.error("--connections needs at least one N >= 1")
    if args.batch < 1:
        p.error("--batch must be positive")
    args.server_list = cli.choose(p, args.servers, SERVERS_BY_NAME, "server(s)")
    return args


def chart_path(args):
    if args.no_chart:
        return None
    if args.chart:
        return args.chart
    if args.markdown:
        return os.path.splitext(args.markdown)[0] + ".png"
    return None


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    nofile = machine.raise_nofile()  # the client inherits it: N sockets
    ctx = load.Context.from_args(args, args.duration)
    if not ctx.pin:
        print("warning: not pinning (taskset missing, fewer than 2 CPUs, or --no-pin)", flush=True)
    else:
        os.sched_setaffinity(0, {ctx.client_cpu})  # this script mostly sleeps; keep it off the server's CPU

    skipped, members = servers.available(args.server_list)
    most = max(args.levels)
    k = machine.kernel_settings()
    warnings = machine.connection_warnings(k, most)  # descriptors and ports for N at once
    queue_len = min(2048, k["somaxconn"] or 2048)  # every launcher asks for a backlog of 2048
    if args.batch > queue_len:
        warnings.append(
            "--batch %d is above the servers' accept queue (%d): connects beyond it wait for SYN retransmits "
            "(1 s, 3 s, ...)" % (args.batch, queue_len)
        )
    machine.print_kernel_settings(k)
    if most + 64 > nofile:
        warnings.append("the open-file limit (%d) is too low for %d connections in the client" % (nofile, most))
    meta = machine.environment(ctx, VERSIONED)
    if "greenserve" in [s.name for s in members] and meta.get("greenserve_build") != "compiled":
        warnings.append(
            "greenserve's hot path runs as %r, not compiled (a build older than its sources, or none): "
            "rebuild with `pip install -e .` for the compiled figures (the frame codec is part of the "
            "hot path; with simple-websocket only the upgrade request is)" % meta.get("greenserve_build")
        )
    for w in warnings:
        print("warning: " + w, flush=True)
    chart = chart_path(args)
    if chart and importlib.util.find_spec("matplotlib") is None:
        print("no chart: matplotlib is not installed (pip install matplotlib)", flush=True)
        chart = None
    meta.update(
        command=cli.command("wsbench.py", argv),
        kernel_settings=k,
        warnings=warnings,
        repeats=args.repeats,
        duration=args.duration,
        batch=args.batch,
        settle=args.settle,
        levels=args.levels,
        server_cpu=args.server_cpu,
        client_cpu=args.client_cpu,
        servers={s.name: s.description for s in members},
        skipped_servers=skipped,
    )
    logs = {s.name: servers.open_log("websocket-" + s.name) for s in members}
    client_log = logs[None] = servers.open_log("websocket-client")
    names = [s.name for s in members]
    results = {"meta": meta, "runs": {}, "summaries": {}}
    tables = []
    with cli.Session(logs) as session:
        for n in args.levels:
            runs = {s.name: [] for s in members}
            results["runs"][str(n)] = runs
            for repeat, order in cli.rotations(members, args.repeats):
                for server in order:
                    r = run_one(ctx, args, server, n, logs[server.name], client_log)
                    r["repeat"] = repeat
                    runs[server.name].append(r)
                    session.progress(
                        "N=%-6d repeat %d/%d %-10s %9s msgs/s  p50 %-9s p99 %-9s opened %s in %ss  KiB/WS %s  "
                        "client CPU %s  server CPU %s (on its core: others %s, irq %s)%s"
                        % (n, repeat + 1, args.repeats, server.name, report.fmt_rps(r.get("rate")),
                           report.fmt_ms(r.get("p50_ms")), report.fmt_ms(r.get("p99_ms")), r.get("opened"),
                           r.get("open_seconds"), fmt_kib(r.get("kib_per_ws")), report.fmt_pct(r.get("client_cpu")),
                           report.fmt_pct(r.get("server_cpu")), report.fmt_pct(r.get("others_on_server_cpu")),
                           report.fmt_pct((r.get("server_core") or {}).get("irq")),
                           ("  FAILED: " + r["failure"]) if r.get("failure") else ""),
                    )
            summary = summarize(names, runs, args.grace)
            results["summaries"][str(n)] = summary
            header, rows = table_rows(summary, names)
            tables.append((n, header, rows))
            print("\n== %s concurrent WebSockets, %g s of echo, %d repeat(s) ==" % ("{:,}".format(n), args.duration, args.repeats))
            print(report.text_table(header, rows), flush=True)

    meta["elapsed_s"] = session.elapsed()
    report.write_json(args.json, results)  # before the chart, which needs matplotlib to go well
    drawn = None
    if chart and results["summaries"]:
        os.makedirs(os.path.dirname(os.path.abspath(chart)), exist_ok=True)
        drawn = draw_chart(results, chart)
        print("chart: %s" % os.path.relpath(drawn), file=sys.stderr)
    link = None
    if drawn and args.markdown:
        link = os.path.relpath(drawn, os.path.dirname(os.path.abspath(args.markdown)))
    report.publish(markdown_report(meta, tables, link), args.markdown, args.json)


if __name__ == "__main__":
    cli.main(main)

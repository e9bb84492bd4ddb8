"""What bench/sweep.py and bench/memory.py share, on top of bench/run.py's helpers.

run.py stays the one place for the pinning (``run.Context``), starting ports (``free_port``),
readiness (``wait_ready``), stopping by PID (``stop_process``, ``stop_all``), the open-file limit
(``raise_nofile``), the report's metadata (``environment``) and the parsing of wrk and ab. This
module adds only: a context built without run.py's argument parser, starting one launcher with
extra arguments, and the kernel settings that bound a run with thousands of connections.
"""

import argparse
import datetime
import os
import resource
import shlex
import subprocess
import sys

import run

HOST = run.HOST


def add_pinning_args(parser):
    parser.add_argument("--server-cpu", type=int, default=0, help="CPU the server is pinned to (default 0)")
    parser.add_argument("--client-cpu", type=int, default=1, help="CPU the load is pinned to (default 1)")
    parser.add_argument("--no-pin", action="store_true", help="do not pin with taskset")


def add_output_args(parser, json_name):
    """--markdown, --json (default bench/results/JSON_NAME) and the pinning options."""
    parser.add_argument("--markdown", metavar="FILE", help="also write the Markdown report to FILE")
    parser.add_argument(
        "--json",
        metavar="FILE",
        default=os.path.join(run.RESULTS, json_name),
        help="raw results (default bench/results/%s)" % json_name,
    )
    add_pinning_args(parser)


def make_context(args, duration=5):
    """run.Context (pinning, wrk and ab paths) from the --server-cpu/--client-cpu/--no-pin options."""
    return run.Context(
        argparse.Namespace(
            duration=duration, server_cpu=args.server_cpu, client_cpu=args.client_cpu, no_pin=args.no_pin
        )
    )


def servers_from(text, allowed, parser):
    """run.Server objects for a comma-separated list of names, each one of `allowed`."""
    wanted = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in allowed or n not in run.SERVERS_BY_NAME]
    if unknown or not wanted:
        parser.error("unknown or unsupported server(s) %s; choose from %s" % (", ".join(unknown) or "(none)", ", ".join(allowed)))
    return [run.SERVERS_BY_NAME[n] for n in wanted]


def open_log(name):
    os.makedirs(run.LOGS, exist_ok=True)
    return open(os.path.join(run.LOGS, name + ".log"), "a")


def start_server(ctx, server, log, extra_argv=()):
    """Start `server`'s launcher pinned to the server CPU on a fresh port and wait for GET / = 200.

    Returns (proc, port, argv, failure): failure is None when the server is up; otherwise the
    process has already been stopped. The process is registered for run.stop_all().
    """
    port = run.free_port()
    argv = ctx.pinned(ctx.server_cpu, [sys.executable, server.launcher, str(port)] + list(extra_argv))
    log.write("\n=== %s %s\n" % (datetime.datetime.now().isoformat(timespec="seconds"), shlex.join(argv)))
    log.flush()
    env = dict(os.environ, **server.env) if server.env else None
    proc = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=run.ROOT, start_new_session=True, env=env
    )
    run._LIVE[proc.pid] = proc
    if run.wait_ready(proc, port):
        return proc, port, argv, None
    rc = proc.poll()
    run.stop_process(proc)
    why = "exited with status %s" % rc if rc is not None else "did not answer GET / within 20 s"
    return None, port, argv, "server %s (see %s)" % (why, os.path.relpath(log.name, run.ROOT))


def rss_kib(pid):
    """VmRSS of a process, in KiB (from /proc/PID/status), or None if it is gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


# --------------------------------------------------------------------------------------------
# Kernel settings that bound a run with thousands of connections


def _read_int_list(path):
    text = run._read(path)
    if text is None:
        return None
    try:
        return [int(x) for x in text.split()]
    except ValueError:
        return None


def time_wait_count():
    """Sockets in TIME_WAIT machine-wide (the "tw" of /proc/net/sockstat), or None."""
    for line in (run._read("/proc/net/sockstat") or "").splitlines():
        if line.startswith("TCP:"):
            fields = line.split()
            if "tw" in fields:
                return int(fields[fields.index("tw") + 1])
    return None


def kernel_settings():
    """The settings that matter for many short or many idle loopback connections."""
    value = lambda path: (_read_int_list(path) or [None])[0]  # noqa: E731
    ports = _read_int_list("/proc/sys/net/ipv4/ip_local_port_range")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {
        "somaxconn": value("/proc/sys/net/core/somaxconn"),
        "tcp_max_syn_backlog": value("/proc/sys/net/ipv4/tcp_max_syn_backlog"),
        "tcp_syncookies": value("/proc/sys/net/ipv4/tcp_syncookies"),
        "ip_local_port_range": ports,
        "ephemeral_ports": (ports[1] - ports[0] + 1) if ports and len(ports) == 2 else None,
        "tcp_tw_reuse": value("/proc/sys/net/ipv4/tcp_tw_reuse"),
        "tcp_max_tw_buckets": value("/proc/sys/net/ipv4/tcp_max_tw_buckets"),
        "tcp_timestamps": value("/proc/sys/net/ipv4/tcp_timestamps"),
        "tcp_fin_timeout": value("/proc/sys/net/ipv4/tcp_fin_timeout"),
        "file_max": value("/proc/sys/fs/file-max"),
        "nofile_soft": soft,
        "nofile_hard": hard,
        "time_wait_now": time_wait_count(),
    }


def print_kernel_settings(k):
    ports = k["ip_local_port_range"]
    lines = [
        "kernel settings found:",
        "  net.core.somaxconn             %s  (caps every listen backlog)" % k["somaxconn"],
        "  net.ipv4.tcp_max_syn_backlog   %s  (half-open connections per listener; tcp_syncookies=%s)"
        % (k["tcp_max_syn_backlog"], k["tcp_syncookies"]),
        "  net.ipv4.ip_local_port_range   %s  (%s ephemeral ports)"
        % (" ".join(map(str, ports)) if ports else None, k["ephemeral_ports"]),
        "  net.ipv4.tcp_tw_reuse          %s  (0 off, 1 on, 2 loopback only)" % k["tcp_tw_reuse"],
        "  net.ipv4.tcp_timestamps        %s" % k["tcp_timestamps"],
        "  net.ipv4.tcp_max_tw_buckets    %s  (TIME_WAIT sockets now: %s)" % (k["tcp_max_tw_buckets"], k["time_wait_now"]),
        "  fs.file-max                    %s" % k["file_max"],
        "  RLIMIT_NOFILE (this process)   soft %s, hard %s  (the servers and load generators inherit it)"
        % (k["nofile_soft"], k["nofile_hard"]),
    ]
    print("\n".join(lines), flush=True)


def connection_warnings(k, concurrent, total=None, backlogs=None):
    """Warnings for `concurrent` simultaneous loopback connections (`total` over the run).

    Both ends of every connection are on this machine: the client's `concurrent` sockets and
    the server's, each process within its own RLIMIT_NOFILE, all within fs.file-max.
    `backlogs` maps a server name to the listen backlog its launcher asks for.
    """
    out = []
    if k["nofile_soft"] is not None and k["nofile_soft"] < concurrent + 64:
        out.append(
            "RLIMIT_NOFILE is %d (hard %s): %d connections need more than %d descriptors in the client and "
            "in the server" % (k["nofile_soft"], k["nofile_hard"], concurrent, concurrent)
        )
    if k["file_max"] is not None and k["file_max"] < 2 * concurrent + 1024:
        out.append("fs.file-max is %d: both ends of %d loopback connections need %d descriptors" % (k["file_max"], concurrent, 2 * concurrent))
    if k["ephemeral_ports"] is not None and k["ephemeral_ports"] < concurrent:
        out.append(
            "only %d ephemeral ports (net.ipv4.ip_local_port_range) for %d simultaneous connections to one "
            "address: connects will fail with EADDRNOTAVAIL" % (k["ephemeral_ports"], concurrent)
        )
    if total and k["ephemeral_ports"] is not None and total > k["ephemeral_ports"]:
        # The server closes first (HTTP/1.0), so the TIME_WAIT is the server's and does not hold
        # the client's port; a reused port meets the server's TIME_WAIT, which takes the new SYN
        # when TCP timestamps show it is newer.
        if not k["tcp_timestamps"]:
            out.append(
                "%d connections through %d ephemeral ports reuse each port while the server still holds its "
                "TIME_WAIT, and net.ipv4.tcp_timestamps is 0: some new SYNs may be refused"
                % (total, k["ephemeral_ports"])
            )
        if not k["tcp_tw_reuse"]:
            out.append(
                "%d connections pass through %d ephemeral ports and net.ipv4.tcp_tw_reuse is 0: a client that "
                "closes first keeps each port in TIME_WAIT for 60 s and can run out of ports (ab's HTTP/1.0 "
                "requests are closed by the server, which keeps the TIME_WAIT)" % (total, k["ephemeral_ports"])
            )
    if total and k["tcp_max_tw_buckets"] is not None and total > k["tcp_max_tw_buckets"]:
        out.append(
            "%d connections in one run can leave more TIME_WAIT sockets than net.ipv4.tcp_max_tw_buckets=%d: "
            "past it the kernel drops TIME_WAIT state at once (it logs 'time wait bucket table "
            "overflow'), harmless on loopback" % (total, k["tcp_max_tw_buckets"])
        )
    if k["tcp_max_syn_backlog"] is not None and k["tcp_max_syn_backlog"] < concurrent and not k["tcp_syncookies"]:
        out.append(
            "net.ipv4.tcp_max_syn_backlog=%d < %d and syncookies are off: SYNs beyond it are dropped and "
            "retransmitted by the client after 1 s, 3 s, 7 s..." % (k["tcp_max_syn_backlog"], concurrent)
        )
    for name, backlog in (backlogs or {}).items():
        queue = min(backlog, k["somaxconn"] or backlog)
        if queue < concurrent:
            out.append(
                "%s's accept queue holds %d (backlog %d, somaxconn %s) < %d clients connecting at once: the rest "
                "wait for SYN retransmits (1 s, 3 s, 7 s...), which shows as latency (and past ab's 30 s timeout as an abort)"
                % (name, queue, backlog, k["somaxconn"], concurrent)
            )
    return out


# The listen backlog each launcher asks for (bench/servers/*.py).
BACKLOGS = {"greenserve": 2048, "greenserve-pure": 2048, "pywsgi": 2048, "bare": 2048, "bare-raw": 2048, "gunicorn": 2048, "waitress": 1024, "paste": 5}

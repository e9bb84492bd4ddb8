"""What the machine says: /proc readers (processes, CPU time, RSS, sockets, kernel settings) and
the facts every report opens with (CPU, kernel, Python, the versions of greenserve and its peers).

Linux only: everything here reads /proc. A reader returns None (or an empty result) when what it
reads is gone, because the process it looks at may exit at any moment.
"""

import datetime
import importlib.metadata
import os
import platform
import resource
import shutil
import socket
import subprocess
import sys

from bench.lib import HOST, ROOT

CLK_TCK = os.sysconf("SC_CLK_TCK")

# The distributions whose versions a report gives unless a script names others.
VERSIONED = ("greenserve", "gevent", "greenlet", "gunicorn", "waitress", "Paste", "bjoern", "meinheld", "granian",
             "Flask", "Werkzeug", "Django")


def read(path):
    """A small file's text, stripped; None if it cannot be read."""
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def first_line(argv):
    """The first line a command prints (stdout, then stderr), run in the working tree; None if it cannot run."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=10, cwd=ROOT)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = (out.stdout + out.stderr).strip()
    return text.splitlines()[0] if text else None


# --------------------------------------------------------------------------------------------
# Processes


def stat_fields(pid):
    """The fields of /proc/PID/stat after the command name (field 3 first), or None if gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def start_time(pid):
    """The process's start time in clock ticks (field 22 of /proc/PID/stat), or None if gone."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])


def cpu_ticks(pid):
    """utime + stime of a process in clock ticks (fields 14 and 15 of /proc/PID/stat), or None."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[11]) + int(fields[12])


def children(pid):
    """The PIDs of a process's direct children, from /proc/PID/task/*/children."""
    found = []
    try:
        tasks = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return found
    for tid in tasks:
        try:
            with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                found += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return sorted(set(found))


def descendants(pid):
    """(pid, start time) of every live descendant of pid."""
    found = []
    stack = [pid]
    while stack:
        for child in children(stack.pop()):
            started = start_time(child)
            if started is not None:
                found.append((child, started))
                stack.append(child)
    return found


def tree_cpu(pid):
    """{pid: (start time, utime, stime in ticks)} for pid and every live descendant."""
    out = {}
    for p in [pid] + [child for child, _ in descendants(pid)]:
        fields = stat_fields(p)
        if fields is not None:
            out[p] = (int(fields[19]), int(fields[11]), int(fields[12]))
    return out


def cpu_split_delta(before, after):
    """{pid: (user ticks, system ticks)} each process of `after` used since `before` (all of
    them for a process new since)."""
    delta = {}
    for p, (started, user, system) in after.items():
        prev = before.get(p)
        if prev and prev[0] == started:
            delta[p] = (user - prev[1], system - prev[2])
        else:
            delta[p] = (user, system)
    return delta


def cpu_delta(before, after):
    """Ticks (user + system) each process of `after` used since `before`."""
    return {p: user + system for p, (user, system) in cpu_split_delta(before, after).items()}


CLOCK_TICK = os.sysconf("SC_CLK_TCK")  # /proc/PID/stat's unit: ticks a second


def cpu_per_request(before, after, result):
    """The server's CPU time per request between two ``tree_cpu`` readings around a load whose
    ``result`` has ``requests`` (and ``seconds``): ``user_us`` and ``kernel_us``, and ``busy``,
    the share of one core the server used over the load's wall time.

    The kernel's share (TCP on loopback, waking the client) is much the same for every server;
    the user share is what a server's own code costs, the part a ratio between servers can
    still move. A server well short of busy = 1.0 is waiting on its client, not on itself."""
    requests = result.get("requests")
    if not requests:
        return {}
    delta = cpu_split_delta(before, after).values()
    user = sum(u for u, _ in delta) / CLOCK_TICK
    system = sum(k for _, k in delta) / CLOCK_TICK
    out = {"user_us": round(user * 1e6 / requests, 2), "kernel_us": round(system * 1e6 / requests, 2)}
    if result.get("seconds"):
        out["busy"] = round((user + system) / result["seconds"], 2)
    return out


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


def cpu_time_split(cpu=None):
    """Jiffies of one CPU (or of all, for None) from /proc/stat: user nice system idle iowait irq
    softirq steal; None if the line is missing."""
    name = "cpu" if cpu is None else "cpu%d" % cpu
    for line in (read("/proc/stat") or "").splitlines():
        fields = line.split()
        if fields and fields[0] == name:
            return [int(x) for x in fields[1:9]]
    return None


# --------------------------------------------------------------------------------------------
# Sockets


def tcp_sockets(port):
    """{inode: (state, rx_queue)} of the TCP sockets whose local end is HOST:port, from
    /proc/net/tcp (state "0A" listen, "01" established; for a listening socket rx_queue is the
    length of its accept queue)."""
    local = "%08X:%04X" % (int.from_bytes(socket.inet_aton(HOST), "little"), port)
    out = {}
    try:
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if len(fields) > 9 and fields[1] == local:
                    out[int(fields[9])] = (fields[3], int(fields[4].split(":")[1], 16))
    except (OSError, IndexError, ValueError):
        pass
    return out


def accept_queue(port):
    """Connections waiting in the accept queue of the socket listening on HOST:port, or None."""
    for state, queued in tcp_sockets(port).values():
        if state == "0A":
            return queued
    return None


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


def time_wait_count():
    """Sockets in TIME_WAIT machine-wide (the "tw" of /proc/net/sockstat), or None."""
    for line in (read("/proc/net/sockstat") or "").splitlines():
        if line.startswith("TCP:"):
            fields = line.split()
            if "tw" in fields:
                return int(fields[fields.index("tw") + 1])
    return None


# --------------------------------------------------------------------------------------------
# Limits and kernel settings that bound a run with thousands of connections


def raise_nofile():
    """Raise this process's RLIMIT_NOFILE soft limit (the servers and load generators inherit it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    target = min(target, 65536)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _read_ints(path):
    try:
        return [int(x) for x in (read(path) or "").split()] or None
    except ValueError:
        return None


def kernel_settings():
    """The settings that matter for many short or many idle loopback connections."""
    value = lambda path: (_read_ints(path) or [None])[0]  # noqa: E731
    ports = _read_ints("/proc/sys/net/ipv4/ip_local_port_range")
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


# --------------------------------------------------------------------------------------------
# The machine and the software, for the report's head


def cpu_model():
    for line in (read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def program(name):
    """The path of an installed program (on PATH, or in /usr/sbin where Debian puts daemons), or None."""
    return shutil.which(name) or next((p for p in ("/usr/sbin/" + name,) if os.path.exists(p)), None)


def nginx_version():
    """nginx's version ("1.22.1"), or None: ``nginx -v`` says it on stderr."""
    nginx = program("nginx")
    if nginx is None:
        return None
    try:
        out = subprocess.run([nginx, "-v"], capture_output=True, text=True, timeout=10).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip().rpartition("/")[2] or None


def versions(dists=VERSIONED):
    """{distribution: installed version or None}; nginx's too, a program, not a distribution."""
    found = {}
    for dist in dists:
        try:
            found[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            found[dist] = None
    if dists is VERSIONED:
        found["nginx"] = nginx_version()
    return found


def greenserve_commit():
    return first_line(["git", "--no-optional-locks", "describe", "--always", "--dirty"])


def environment(ctx, dists=VERSIONED):
    """The report's metadata: date, machine, versions, the load generators, the pinning."""
    wrk = first_line([ctx.wrk_path, "-v"]) if ctx.wrk_path else None
    if wrk:  # "wrk debian/4.1.0-3+b2 [epoll] Copyright (C) 2012 Will Glozer"
        wrk = wrk.split(" Copyright")[0]
    ab = first_line([ctx.ab_path, "-V"]) if ctx.ab_path else None
    if ab:  # "This is ApacheBench, Version 2.3 <$Revision: 1903618 $>"
        ab = ab.replace("This is ", "")
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "versions": versions(dists),
        "wrk": wrk,
        "ab": ab,
        "greenserve_commit": greenserve_commit(),
        # What the "greenserve" server runs ("greenserve-pure" always runs pure Python).
        "greenserve_build": first_line([sys.executable, "-c", "import greenserve._accel as a; print(a.build())"]),
        "somaxconn": read("/proc/sys/net/core/somaxconn"),
        "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "loadavg_at_start": loadavg(),
        "pinning": (
            "servers on CPU %d, load generator on CPU %d (taskset)" % (ctx.server_cpu, ctx.client_cpu)
            if ctx.pin
            else "none (taskset missing, fewer than 2 CPUs, or --no-pin)"
        ),
    }


def loadavg():
    return " ".join((read("/proc/loadavg") or "").split()[:3])

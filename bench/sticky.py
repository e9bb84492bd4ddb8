"""What --sticky costs per connection and per request: instructions (callgrind) and system calls (strace).

    python bench/sticky.py                   # callgrind, compiled build (about 1 min)
    GREENSERVE_PURE_PYTHON=1 python bench/sticky.py
    python bench/sticky.py --strace          # system calls, by name, per connection or request
    python bench/sticky.py --count 2000 --scenarios handed-connection,kept-connection

No load generator: one client process sends its connections or requests one after another, so
what is counted is the server's own work, on one core. The server process (``--serve``) holds
three WSGIServers on loopback: ``off`` (no --sticky), and ``A`` and ``B``, the first listener of
the workers in slots 0 and 1 of one ``process.slots.SlotTable`` of two slots, as two workers of
``greenserve --workers 2 --sticky`` hold them; a hand-over from A reaches B through the same
socket pair and is served by B's Handoff, as in another worker, so one process counts both
sides of it. The scenarios, each ``--count`` times after 200 of warm-up:

    off-connection     a connection per request (Connection: close) to off
    kept-connection    the same to A, from an address A owns (placed at the start, kept)
    handed-connection  the same to A, from an address B owns (handed to B at its start)
    off-request        keep-alive requests with X-Forwarded-For, to off
    kept-request       the same to A, each naming a client A owns
    handed-request     the same to A, each naming a client of the other worker than the last
                       (the connection moves at every request: A, B, A, ...)

The plain-HTTP rate under load is bench/run.py's (``--servers greenserve,greenserve-sticky``;
docs/performance.md, "--sticky"): not run here.
"""

import argparse
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCENARIOS = ["off-connection", "kept-connection", "handed-connection", "off-request", "kept-request", "handed-request"]
WARMUP = 200
BODY = b"Hello, World!"


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))])
    return [BODY]


def addresses(slot, prefix, count=2):
    """``count`` addresses under ``prefix`` (127.0.0. or 198.51.100.) that slot ``slot`` of two owns."""
    try:
        from greenserve.sticky import owner
    except ImportError:  # a greenserve before --sticky: only the off-* scenarios mean anything
        return [prefix + str(n) for n in range(2, 2 + count)]
    return [prefix + str(n) for n in range(2, 250) if owner(prefix + str(n), 2) == slot][:count]


# --- the server process ---


def serve(ports):
    from greenserve.pool import ConnectionPool
    from greenserve.server import WSGIServer

    try:
        from greenserve.process.slots import SlotTable, WorkerSlot
    except ImportError:  # a greenserve before --sticky: its off-* scenarios, for a comparison
        table = None
    else:
        table = SlotTable(2)
    servers = []
    for index, port in enumerate(ports):
        server = WSGIServer(("127.0.0.1", port), app, spawn=ConnectionPool(1000), log=None,
                            forwarded_allow_ips="127.0.0.0/8")
        if index and table is not None:  # A and B: slots 0 and 1, each its own Handoff, as in two workers
            server.enable_sticky(WorkerSlot(index - 1, 2, table.send, table.receive[index - 1]), 0)
        server.start()
        servers.append(server)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    import gevent

    gevent.wait([gevent.spawn(gevent.sleep, 1e9)])


# --- the client ---


def run_scenario(name, ports, count):
    off, a = ports[0], ports[1]
    mine, theirs = addresses(0, "127.0.0."), addresses(1, "127.0.0.")
    if name.endswith("connection"):
        port = off if name.startswith("off") else a
        source = theirs[0] if name.startswith("handed") else mine[0]
        request = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        for _ in range(count):
            with socket.create_connection(("127.0.0.1", port), source_address=(source, 0)) as sock:
                sock.sendall(request)
                while sock.recv(65536):
                    pass
        return
    # Keep-alive requests from an address A owns (and trusts: forwarded_allow_ips 127.0.0.0/8).
    port = off if name.startswith("off") else a
    clients = [addresses(0, "198.51.100.")[0], addresses(1, "198.51.100.")[0]]
    with socket.create_connection(("127.0.0.1", port), source_address=(mine[0], 0)) as sock:
        for n in range(count):
            client = clients[(n + 1) % 2] if name.startswith("handed") else clients[0]
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n\r\n" % client.encode())
            received = b""
            while not received.endswith(BODY):
                received += sock.recv(65536)


def measure(args, scenarios):
    ports = [_free_port() for _ in range(3)]
    out_dir = tempfile.mkdtemp(prefix="gs-sticky-")
    command = [sys.executable, os.path.abspath(__file__), "--serve"] + [str(p) for p in ports]
    if not args.strace:
        command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=%s/callgrind.out.%%p" % out_dir] + command
    env = dict(os.environ, PYTHONHASHSEED="0")
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
    results = {}
    try:
        assert server.stdout.readline().strip() == "ready", "the server did not start"
        for name in scenarios:
            run_scenario(name, ports, WARMUP)
            results[name] = (_strace_phase if args.strace else _callgrind_phase)(server.pid, out_dir, name, ports, args.count)
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait()
    return results


def _callgrind_phase(pid, out_dir, name, ports, count):
    from bench.instructions import dump_counts

    subprocess.run(["callgrind_control", "-z", str(pid)], check=True, capture_output=True)
    run_scenario(name, ports, count)
    before = set(glob.glob(os.path.join(out_dir, "callgrind.out.*")))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    dump = max(set(glob.glob(os.path.join(out_dir, "callgrind.out.*"))) - before, key=os.path.getmtime)
    return round(dump_counts(dump)[0] / count)


def _strace_phase(pid, out_dir, name, ports, count):
    path = os.path.join(out_dir, "strace-%s.txt" % name)
    tracer = subprocess.Popen(["strace", "-f", "-c", "-o", path, "-p", str(pid)], stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached to every thread
    run_scenario(name, ports, count)
    time.sleep(0.3)
    tracer.send_signal(signal.SIGINT)
    tracer.wait(10)
    calls = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if len(fields) >= 5 and fields[0][0].isdigit() and fields[-1] != "total":
                calls[fields[-1]] = int(fields[3])
    # The sweeper's and the hub's own calls in the seconds around the phase are not a request's.
    return {call: round(n / count, 2) for call, n in sorted(calls.items()) if n >= count / 2}


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--serve", nargs=3, type=int, metavar="PORT", help=argparse.SUPPRESS)
    p.add_argument("--strace", action="store_true", help="system calls per connection or request, not instructions")
    p.add_argument("--count", type=int, default=1000, help="connections or requests per scenario (default 1000)")
    p.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated (default: all)")
    args = p.parse_args(argv)
    if args.serve:
        return serve(args.serve)
    results = measure(args, args.scenarios.split(","))
    build = "pure" if os.environ.get("GREENSERVE_PURE_PYTHON") == "1" else "compiled"
    what = "system calls" if args.strace else "instructions"
    print(json.dumps({"build": build, "per connection or request": what, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

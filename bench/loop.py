"""greenserve's per-request CPU cost without the network stack's waits: the connection loop on a
socketpair, with no event loop.

    python bench/loop.py                 # both builds side by side, µs per request
    python bench/loop.py --profile       # plus a cProfile of the pure-Python build's loop

The connection gets a real non-blocking socket (one end of an AF_UNIX socketpair), so it reads
and writes the way it does in a server, with recv(2) and send(2) (the compiled build calls them
on the descriptor itself). What it waits on is a stand-in: when the connection would block, the
stand-in hub, instead of running gevent's loop, plays the client in the same thread. It reads
the responses waiting at the other end and writes the next keep-alive request (``GET /`` of
bench/apps.py's hello app), and the connection goes on at once. The time spent playing the
client is measured and taken out, so what is left is what greenserve itself does per request:
its recv and send, parsing, the environ, calling the app, framing the response, and the loop.
No event loop, no greenlet switch. Comparing this figure with a real run's µs per request (1e6
/ req/s on one core) tells how much of the time goes to the event loop, the switches and the
kernel's TCP instead.

Each build runs in its own subprocess (the build is chosen once per process: see
greenserve/_accel.py). Also measured: the parser alone (feed + three events per request).
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import ROOT  # noqa: E402

REQUEST = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n"


class _Stop(BaseException):
    """Ends the loop once N requests were served (a BaseException: nothing in the loop catches it)."""


class _Watcher:
    """A gevent io watcher that the stand-in hub fires at once: starting it marks what is awaited."""

    callback = None

    def __init__(self, hub, readable):
        self.hub = hub
        self.readable = readable

    def start(self, callback, *args):
        self.hub.awaited = self

    def stop(self):
        pass


class _Hub:
    """Where the connection blocks: instead of the event loop, the client, in the same thread.

    On each switch it reads every response waiting at its end of the socketpair and, when the
    connection waits for a request, writes the next one (`pipeline` requests at once), or ends
    the loop with _Stop once `requests` were written. The time it takes is added to `client_s`.
    """

    def __init__(self, peer, requests, pipeline):
        self.peer = peer
        self.left = requests
        self.pipeline = pipeline
        self.batch = REQUEST * pipeline
        self.awaited = None
        self.client_s = 0.0
        self.scratch = bytearray(1 << 20)

    def switch(self):
        started = time.perf_counter()
        peer, scratch = self.peer, self.scratch
        try:
            while True:
                peer.recv_into(scratch)
        except BlockingIOError:
            pass
        if self.awaited.readable:
            if self.left <= 0:
                raise _Stop()
            self.left -= self.pipeline
            peer.sendall(self.batch)
        self.client_s += time.perf_counter() - started


class _Socket:
    """A gevent socket as greenserve's connection sees one: the real non-blocking socket under it
    (``_sock``), its two watchers and its hub, here the stand-ins above."""

    family = socket.AF_UNIX  # no TCP_NODELAY to set

    def __init__(self, requests, pipeline):
        self._sock, peer = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.setblocking(False)
        peer.setblocking(False)
        self.hub = _Hub(peer, requests, pipeline)
        self._read_event = _Watcher(self.hub, True)
        self._write_event = _Watcher(self.hub, False)

    def setsockopt(self, *args):
        pass

    def fileno(self):
        return self._sock.fileno()

    def close(self):
        self._sock.close()
        self.hub.peer.close()


def measure(requests, pipeline, profile):
    from greenserve import _accel
    from greenserve.connection import Connection
    from greenserve.http.parser import RequestParser
    from greenserve.server import WSGIServer

    from bench.apps import app

    # (Overload control off: this loop answers thousands of pipelined requests without ever
    # polling, which the control would rightly take for a standing queue.)
    server = WSGIServer(("127.0.0.1", 0), app, log=None, overload_control=False)
    server.update_environ()
    # The same with an access log (gunicorn's default format) written to /dev/null.
    devnull = open(os.devnull, "w")
    logged = WSGIServer(("127.0.0.1", 0), app, log=devnull, overload_control=False)
    logged.update_environ()

    def loop(n, pipeline=1, server=server):
        sock = _Socket(n, pipeline)
        connection = Connection(server, sock, ("127.0.0.1", 5555))
        started = time.perf_counter()
        try:
            connection.run()
        except _Stop:
            pass
        elapsed = time.perf_counter() - started - sock.hub.client_s
        sock.close()
        assert connection.requests >= n - pipeline, connection.requests
        return elapsed / connection.requests * 1e6

    loop(2000)  # warm the caches (status lines, header fields, environ keys)
    results = {"build": _accel.build()}
    results["loop_us"] = min(loop(requests) for _ in range(3))
    results["pipelined_us"] = min(loop(requests, 16) for _ in range(3))
    results["logged_us"] = min(loop(requests, 1, logged) for _ in range(3))

    parser = RequestParser()
    started = time.perf_counter()
    for _ in range(requests):
        parser.feed(REQUEST)
        parser.next_event()
        parser.next_event()
        parser.next_event()
    results["parser_us"] = (time.perf_counter() - started) / requests * 1e6

    if profile:
        import cProfile
        import io
        import pstats

        profiler = cProfile.Profile()
        sock = _Socket(requests, 1)
        connection = Connection(server, sock, ("127.0.0.1", 5555))
        profiler.enable()
        try:
            connection.run()
        except _Stop:
            pass
        profiler.disable()
        sock.close()
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(20)
        results["profile"] = out.getvalue()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200000)
    parser.add_argument("--profile", action="store_true", help="cProfile the pure-Python build's loop")
    parser.add_argument("--child", choices=["compiled", "pure"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.requests, 16, args.profile and args.child == "pure")))
        return
    rows = []
    for build in ("compiled", "pure"):
        env = dict(os.environ)
        env.pop("GREENSERVE_PURE_PYTHON", None)
        if build == "pure":
            env["GREENSERVE_PURE_PYTHON"] = "1"
        argv = [sys.executable, os.path.abspath(__file__), "--child", build, "--requests", str(args.requests)]
        if args.profile:
            argv.append("--profile")
        out = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit("the %s run failed:\n%s" % (build, out.stderr))
        result = json.loads(out.stdout)
        rows.append((build, result))
    print("%-10s %-12s %12s %18s %16s %14s" % ("run", "build", "µs/request", "with access log", "16 pipelined", "parser alone"))
    for name, r in rows:
        print("%-10s %-12s %12.2f %18.2f %16.2f %14.2f"
              % (name, r["build"], r["loop_us"], r["logged_us"], r["pipelined_us"], r["parser_us"]))
    if len(rows) == 2 and rows[0][1]["build"] == "compiled":
        c, p = rows[0][1], rows[1][1]
        print("compiled speed-up: loop %.2fx, pipelined %.2fx, parser %.2fx"
              % (p["loop_us"] / c["loop_us"], p["pipelined_us"] / c["pipelined_us"], p["parser_us"] / c["parser_us"]))
    for name, r in rows:
        if "profile" in r:
            print("\ncProfile of the %s build's loop:\n%s" % (r["build"], r["profile"]))


if __name__ == "__main__":
    main()

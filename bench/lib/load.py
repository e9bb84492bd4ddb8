"""The load: wrk and ab pinned to the client CPU, the parsing of their reports, and bench's own
clients for what they cannot do (many idle keep-alive connections, WebSockets).

Every load is bounded in time (wrk -d, ab -t, or a wall-clock limit) and targets 127.0.0.1 only.
"""

import errno
import json
import os
import queue
import re
import selectors
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time

from bench.lib import BENCH, HOST, ROOT, machine, servers


class Context:
    """What a scenario runs its load with: the pinning, the run's duration, wrk and ab."""

    def __init__(self, duration=5, server_cpu=0, client_cpu=1, pin=True):
        self.duration = duration
        self.server_cpu = server_cpu
        self.client_cpu = client_cpu
        self.pin = pin and shutil.which("taskset") is not None and (os.cpu_count() or 1) >= 2
        self.wrk_path = shutil.which("wrk")
        self.ab_path = shutil.which("ab")

    @classmethod
    def from_args(cls, args, duration=5):
        """From the --server-cpu/--client-cpu/--no-pin options (cli.add_output)."""
        return cls(duration, args.server_cpu, args.client_cpu, pin=not args.no_pin)

    def pinned(self, cpu, argv):
        return (["taskset", "-c", str(cpu)] + argv) if self.pin else argv

    def run_load(self, argv, parse, tool, port, duration, limit=None, sample=True):
        """Run a load generator pinned to the client CPU; its output, parsed, in a result dict.

        It may run `limit` seconds (default: duration + 60) before it is stopped. With `sample`,
        the accept queue of the server's listening socket is read at 40%, 60% and 80% of the run:
        connections a server leaves there are never served, and wrk reports nothing about them
        (it counts a timeout only for a late response).
        """
        argv = self.pinned(self.client_cpu, argv)
        limit = duration + 60 if limit is None else limit
        proc = servers.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        started = time.monotonic()
        sample_at = [started + duration * f for f in (0.4, 0.6, 0.8)] if sample else []
        samples = []
        deadline = started + limit
        timed_out = False
        while True:
            now = time.monotonic()
            if sample_at and now >= sample_at[0]:
                sample_at.pop(0)
                samples.append(machine.accept_queue(port))
                continue
            wait = (sample_at[0] if sample_at else deadline) - now
            try:
                stdout, stderr = proc.communicate(timeout=max(0.01, wait))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() >= deadline:
                    servers.stop_process(proc, grace=2.0)
                    stdout, stderr = proc.communicate()
                    timed_out = True
                    break
        servers.LIVE.pop(proc.pid, None)
        result = {"tool": tool, "command": shlex.join(argv), "rc": proc.returncode, "stdout": stdout, "stderr": stderr,
                  "wall_s": round(time.monotonic() - started, 2)}
        result.update(parse(stdout))
        if sample:
            samples = [n for n in samples if n is not None]
            result["accept_queue_samples"] = samples
            # The smallest sample: connections that waited unaccepted all through the run.
            result["unaccepted"] = min(samples) if samples else None
        if timed_out:
            result["timed_out"] = True
            result["failure"] = "%s did not finish in %d s" % (tool, limit)
        elif result["rps"] is None:
            last = (stderr.strip() or stdout.strip() or "no output").splitlines()[-1]
            result["failure"] = "%s failed (rc %s): %s" % (tool, proc.returncode, last)
        return result

    def wrk(self, port, path, connections, script=None, script_args=(), duration=None):
        """wrk -t1 -cN -dS --latency [-s SCRIPT] http://127.0.0.1:PORT/PATH [-- ARGS]."""
        if not self.wrk_path:
            return {"tool": "wrk", "failure": "wrk is not installed", "rps": None}
        duration = duration or self.duration
        argv = [self.wrk_path, "-t1", "-c%d" % connections, "-d%ds" % duration, "--latency"]
        if script:
            argv += ["-s", os.path.relpath(os.path.join(BENCH, script), ROOT)]
        argv.append("http://%s:%d%s" % (HOST, port, path))
        if script_args:
            argv += ["--"] + list(script_args)
        result = self.run_load(argv, parse_wrk, "wrk", port, duration)
        result["connections"] = connections
        return result

    def ab(self, port, path, concurrency, keepalive=False):
        """ab for the run's duration: -t bounds the time; the -n after it (ab takes the last) lifts ab's 50,000 cap."""
        if not self.ab_path:
            return {"tool": "ab", "failure": "ab is not installed", "rps": None}
        argv = [self.ab_path, "-q", "-r", "-c", str(concurrency), "-t", str(self.duration), "-n", "100000000"]
        if keepalive:
            argv.append("-k")
        argv.append("http://%s:%d%s" % (HOST, port, path))
        return self.run_load(argv, parse_ab, "ab", port, self.duration)


# --------------------------------------------------------------------------------------------
# The reports of wrk and ab

_TIME_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0, "h": 3600000.0}


def _search(pattern, text, convert=float, flags=re.M):
    m = re.search(pattern, text, flags)
    return convert(m.group(1)) if m else None


def parse_wrk(text):
    """Figures from wrk 4's report (run with --latency); a key is None when it is missing."""
    out = {"requests": None, "seconds": None, "rps": None, "p99_ms": None, "non2xx": 0}
    out["errors"] = {"connect": 0, "read": 0, "write": 0, "timeout": 0}
    m = re.search(r"^\s*(\d+) requests in ([\d.]+)(us|ms|s|m|h),", text, re.M)
    if m:
        out["requests"] = int(m.group(1))
        out["seconds"] = float(m.group(2)) * _TIME_UNITS_MS[m.group(3)] / 1000.0
    out["rps"] = _search(r"^Requests/sec:\s*([\d.]+)\s*$", text)
    m = re.search(r"Latency Distribution\s*\n(?:.*\n)*?\s*99%\s+([\d.]+)(us|ms|s|m|h)\s*$", text, re.M)
    if m:
        out["p99_ms"] = float(m.group(1)) * _TIME_UNITS_MS[m.group(2)]
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    if m:
        out["errors"] = dict(zip(("connect", "read", "write", "timeout"), map(int, m.groups())))
    out["non2xx"] = _search(r"Non-2xx or 3xx responses: (\d+)", text, int) or 0
    return out


def parse_ab(text):
    """Figures from ApacheBench 2.3's report; a key is None when it is missing."""
    out = {
        "requests": _search(r"^Complete requests:\s*(\d+)", text, int),
        "seconds": _search(r"^Time taken for tests:\s*([\d.]+) seconds", text),
        "rps": _search(r"^Requests per second:\s*([\d.]+)", text),
        "p99_ms": _search(r"^\s*99%\s+(\d+)", text),
        "longest_ms": _search(r"^\s*100%\s+(\d+)", text),
        "failed": _search(r"^Failed requests:\s*(\d+)", text, int),
        "non2xx": _search(r"^Non-2xx responses:\s*(\d+)", text, int) or 0,
    }
    out["errors"] = {"connect": 0, "receive": 0, "length": 0, "exceptions": 0, "write": 0}
    m = re.search(r"\(Connect: (\d+), Receive: (\d+), Length: (\d+), Exceptions: (\d+)\)", text)
    if m:
        out["errors"].update(zip(("connect", "receive", "length", "exceptions"), map(int, m.groups())))
    out["errors"]["write"] = _search(r"^Write errors:\s*(\d+)", text, int) or 0
    return out


# --------------------------------------------------------------------------------------------
# bench's own clients


def _response_complete(buf):
    """True when buf holds a whole response head and its Content-Length body."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return False
    length = 0
    for line in buf[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return len(buf) >= end + 4 + length


def open_idle_connections(port, count, batch=500, timeout=60.0, agent="bench"):
    """Open `count` keep-alive connections, one GET / answered on each; (sockets, failures).

    Non-blocking sockets on one epoll: at most `batch` are connecting or waiting for their
    response at once, so the server's accept queue (backlog 2048) never overflows.
    """
    request = b"GET / HTTP/1.1\r\nHost: %s:%d\r\nUser-Agent: %s\r\n\r\n" % (HOST.encode(), port, agent.encode())
    sel = selectors.DefaultSelector()
    done, failures = [], {}
    started = inflight = 0
    deadline = time.monotonic() + timeout

    def fail(sock, why):
        nonlocal inflight
        failures[why] = failures.get(why, 0) + 1
        sel.unregister(sock)
        sock.close()
        inflight -= 1

    try:
        while len(done) + sum(failures.values()) < count:
            if time.monotonic() > deadline:
                failures["not done in %d s" % timeout] = count - len(done) - sum(failures.values())
                break
            while started < count and inflight < batch:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sock.setblocking(False)
                err = sock.connect_ex((HOST, port))
                if err not in (0, errno.EINPROGRESS):
                    sock.close()
                    failures[os.strerror(err)] = failures.get(os.strerror(err), 0) + 1
                    started += 1
                    continue
                sel.register(sock, selectors.EVENT_WRITE, [b"", False])
                started += 1
                inflight += 1
            for key, _ in sel.select(timeout=1.0):
                sock, state = key.fileobj, key.data
                if not state[1]:  # connected (or failed): send the request
                    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        fail(sock, "connect: " + os.strerror(err))
                        continue
                    try:
                        sock.send(request)  # a few dozen bytes into an empty buffer: sent whole
                    except OSError as exc:
                        fail(sock, "send: %s" % exc.strerror)
                        continue
                    state[1] = True
                    sel.modify(sock, selectors.EVENT_READ, state)
                    continue
                try:
                    data = sock.recv(65536)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    fail(sock, "recv: %s" % exc.strerror)
                    continue
                if not data:
                    fail(sock, "closed by the server before the response")
                    continue
                state[0] += data
                if _response_complete(state[0]):
                    if not state[0].startswith(b"HTTP/1.1 200"):
                        fail(sock, "status %r" % state[0][:12])
                        continue
                    sel.unregister(sock)
                    inflight -= 1
                    done.append(sock)
    finally:
        for key in list(sel.get_map().values()):
            key.fileobj.close()
        sel.close()
    return done, failures


def still_open(socks):
    """How many of these idle connections the server has not closed (no EOF, no reset, no data)."""
    alive = 0
    for sock in socks:
        try:
            if sock.recv(1, socket.MSG_PEEK):
                continue  # unexpected bytes: not idle
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    return alive


class WebSocketClient:
    """bench/ws_client.py, pinned to the client CPU, driven step by step: it prints one JSON event
    line per phase and waits for "go" on its stdin before the next one."""

    def __init__(self, ctx, options, log):
        argv = [sys.executable, os.path.join(BENCH, "ws_client.py")]
        for name, value in options.items():
            argv += ["--" + name.replace("_", "-"), str(value)]
        self.argv = ctx.pinned(ctx.client_cpu, argv)
        self.proc = servers.spawn(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True)
        self.lines = queue.Queue()
        self.events = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def expect(self, event, timeout):
        """The next event line named `event` (a dict); None if the client exits or times out first."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return None
            if line is None:
                return None
            try:
                data = json.loads(line)
            except ValueError:
                continue
            self.events.append(data)
            if data.get("event") == event:
                return data
            if data.get("event") == "result":  # it gave up early
                return None

    def go(self):
        try:
            self.proc.stdin.write("go\n")
            self.proc.stdin.flush()
        except OSError:
            pass

    def stop(self):
        try:
            self.proc.stdin.close()  # EOF: a client still waiting reports and exits
        except OSError:
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass
        servers.stop_process(self.proc, grace=2.0)
        self.reader.join(2)
        while True:  # keep what it printed after the last expect()
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                break
            if line is None:
                break
            try:
                self.events.append(json.loads(line))
            except ValueError:
                pass

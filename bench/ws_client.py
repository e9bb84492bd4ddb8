"""The load generator of bench/wsbench.py: many WebSocket clients in one gevent process.

    python bench/ws_client.py --port PORT --connections 1000 --duration 10 --no-wait

One greenlet per connection, on gevent's sockets (no monkey-patching). The client does the
RFC 6455 handshake itself: ``GET /`` with ``Upgrade: websocket``, ``Connection: Upgrade``,
``Sec-WebSocket-Version: 13`` and a random 16-byte ``Sec-WebSocket-Key``. It checks the ``101``
and ``Sec-WebSocket-Accept``, and offers no extension (so no permessage-deflate). It sends its
first frame only once the 101 is in, as RFC 6455 section 4.1 requires.

Phases, in order:

1. **Warm-up** (``--warmup-connections``, 20, for ``--warmup`` s, 1): a few connections echo
   for a moment and close, so that the server has run its WebSocket code paths before its RSS is
   read.
2. **Open** ``--connections`` WebSockets, at most ``--batch`` (500) handshaking at once, so the
   server's accept queue (backlog 2048) never overflows. Each handshake has
   ``--handshake-timeout`` s (10) and the whole phase ``--open-timeout`` s (120). A connection
   that fails or is late is counted by reason, and the run goes on with the rest.
3. **Idle.** Nothing is sent. Then the connections the server still holds open are counted:
   no EOF, no reset, no unexpected bytes (``recv(1, MSG_PEEK)`` on a non-blocking socket).
4. **Echo** for ``--duration`` s (10). Every connection sends a 32-byte text message, waits for
   its echo, checks it byte for byte, and sends the next. The round trip is timed from just
   before the send to the whole echo frame. Only echoes that arrive before the end count
   toward the rate. At the end, each connection has ``--grace`` s (2) to receive the echo of its
   last message, for the latency figures. A connection still waiting after that is counted as
   "no echo at the end".
5. **Close:** each connection sends a close frame (code 1000) and closes its socket, without
   waiting for the server's close frame.

Between phases, unless ``--no-wait`` is given, the client prints an event line (JSON) on stdout
and waits for a line on stdin: ``{"event": "warm"}`` after 1 (even when it is skipped), ``{"event": "opened"}`` after 2,
and ``{"event": "loaded"}`` after 4. Meanwhile bench/wsbench.py reads the server's RSS. After
phase 3 it prints ``{"event": "idle"}`` without waiting. The last line is the result,
``{"event": "result", ...}``. Every wait on stdin is bounded (``--wait-timeout``, 120 s).
Without a line by then, or at EOF, the client closes its connections and reports what it has.

**Masking.** A client must mask every frame it sends. For speed this client uses one fixed
4-byte mask key for every frame, and its message never changes. The masked frame is therefore
built once, and a send is a single ``sendall`` of constant bytes. Servers still unmask every
frame: the key they read is an ordinary non-zero key. RFC 6455 wants a fresh, unpredictable key
per frame, to protect intermediaries against cache poisoning by browser scripts. That does not
matter for a benchmark on loopback.
"""

import argparse
import base64
import errno
import hashlib
import json
import os
import resource
import select
import socket
import sys
import time

import gevent
from gevent import socket as gsocket
from gevent.event import Event
from gevent.pool import Pool

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
MESSAGE = b"greenserve websocket bench 32 B!"  # 32 bytes of text
assert len(MESSAGE) == 32
MASK = b"\x9b\x1d\x52\xe4"  # the fixed mask key (see "Masking" above)


def masked_frame(opcode, payload):
    """One final client frame (payload < 126 bytes), masked with MASK."""
    assert len(payload) < 126
    masked = bytes(b ^ MASK[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | opcode, 0x80 | len(payload)]) + MASK + masked


FRAME = masked_frame(0x1, MESSAGE)  # what every send writes
FRAME_LEN = len(FRAME)
ECHO = bytes([0x81, len(MESSAGE)]) + MESSAGE  # the server's unmasked echo, as every server frames it
CLOSE = masked_frame(0x8, (1000).to_bytes(2, "big"))


class ProtocolError(Exception):
    pass


def _reason(exc):
    """A short, countable reason for a failure."""
    if isinstance(exc, gevent.Timeout):
        return "timeout"
    if isinstance(exc, ProtocolError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return type(exc).__name__


def handshake(port, timeout):
    """A connected WebSocket: (socket, bytes the server sent after the 101 head)."""
    key = base64.b64encode(os.urandom(16))
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())
    request = (
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\nUser-Agent: bench/ws_client.py\r\n\r\n"
    ) % (port, key)
    sock = gsocket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with gevent.Timeout(timeout):
            sock.connect(("127.0.0.1", port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(request)
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = sock.recv(4096)
                if not data:
                    raise ProtocolError("closed during the handshake")
                buf += data
                if len(buf) > 16384:
                    raise ProtocolError("handshake response head too long")
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        if not lines[0].startswith(b"HTTP/1.1 101"):
            raise ProtocolError("handshake answered %r" % lines[0][:40].decode("latin-1"))
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        if fields.get(b"sec-websocket-accept") != accept:
            raise ProtocolError("bad Sec-WebSocket-Accept")
        return sock, rest
    except BaseException:
        sock.close()
        raise


class Connection:
    __slots__ = ("sock", "buf", "echoes", "error", "waiting")

    def __init__(self, sock, buf):
        self.sock = sock
        self.buf = buf  # bytes received and not yet parsed
        self.echoes = 0
        self.error = None
        self.waiting = False  # a message is out and its echo not yet in

    def read_frame(self):
        """(opcode, payload) of the next whole frame; answers pings on the way."""
        sock = self.sock
        while True:
            buf = self.buf
            if len(buf) >= 2:
                length = buf[1] & 0x7F
                start = 2
                if length == 126:
                    start = 4
                    length = int.from_bytes(buf[2:4], "big") if len(buf) >= 4 else None
                elif length == 127:
                    start = 10
                    length = int.from_bytes(buf[2:10], "big") if len(buf) >= 10 else None
                if buf[1] & 0x80:
                    raise ProtocolError("masked frame from the server")
                if length is not None and len(buf) >= start + length:
                    opcode = buf[0] & 0x0F
                    payload = buf[start : start + length]
                    self.buf = buf[start + length :]
                    if opcode == 0x9:  # ping: answer it, wait on
                        sock.sendall(masked_frame(0xA, payload))
                        continue
                    if opcode == 0xA:
                        continue
                    if not buf[0] & 0x80:
                        raise ProtocolError("fragmented message from the server")
                    return opcode, payload
            data = sock.recv(65536)
            if not data:
                raise ProtocolError("closed by the server")
            self.buf += data

    def round_trip(self, sent=0):
        """Send MESSAGE (the rest of it after `sent` bytes; None: all sent and a first read is in
        self.buf, maybe empty), wait for its echo; raises on anything else."""
        sock = self.sock
        self.waiting = True
        if sent is None:
            if not self.buf:
                raise ProtocolError("closed by the server")
        else:
            sock.sendall(FRAME[sent:] if sent else FRAME)
        if not self.buf:
            data = sock.recv(65536)
            if data == ECHO:  # the usual case: the whole echo, alone, in one read
                self.waiting = False
                return
            if not data:
                raise ProtocolError("closed by the server")
            self.buf = data
        opcode, payload = self.read_frame()
        if opcode == 0x8:
            raise ProtocolError("close frame from the server")
        if opcode != 0x1 or payload != MESSAGE:
            raise ProtocolError("wrong echo")
        self.waiting = False

    def still_open(self):
        """True if the server has not closed this idle connection (and sent nothing on it)."""
        if self.buf:
            return False
        self.sock.settimeout(0.0)
        try:
            self.sock.recv(1, socket.MSG_PEEK)  # b"" (EOF) or unexpected bytes: not idle and open
            return False
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            self.sock.settimeout(None)

    def close(self):
        try:
            self.sock.settimeout(0.0)
            self.sock.send(CLOSE)
        except OSError:
            pass
        self.sock.close()


def open_connections(port, count, batch, handshake_timeout, open_timeout):
    """(connections, {reason: count}, seconds): `count` handshakes, `batch` at a time."""
    pool = Pool(batch)
    conns, failures = [], {}

    def one(_):
        try:
            sock, rest = handshake(port, handshake_timeout)
        except gevent.GreenletExit:
            raise
        except BaseException as exc:  # noqa: B902 - counted by reason
            reason = _reason(exc)
            failures[reason] = failures.get(reason, 0) + 1
            return
        conns.append(Connection(sock, rest))

    started = time.monotonic()
    done = Event()

    def feed():
        for i in range(count):
            pool.spawn(one, i)  # blocks while `batch` handshakes are under way
        pool.join()
        done.set()

    feeder = gevent.spawn(feed)
    if not done.wait(open_timeout):
        feeder.kill()
        pool.kill()
        late = count - len(conns) - sum(failures.values())
        if late > 0:
            failures["not open within %g s" % open_timeout] = late
    return conns, failures, time.monotonic() - started


def echo_phase(conns, duration, grace):
    """Every connection: send, wait for the echo, again, for `duration` s. The figures."""
    latencies = []
    errors = {}
    state = {"end": None}
    go = Event()

    def loop(conn):
        go.wait()
        end = state["end"]
        clock = time.perf_counter
        record = latencies.append
        send = conn.sock.send
        recv = conn.sock.recv
        try:
            while True:
                t0 = clock()
                if t0 >= end:
                    return
                # The round trip, with the usual case inline (the client's CPU bounds the rate
                # it can measure): the frame goes out in one send, and the whole echo, alone,
                # comes back in one read. Anything else takes Connection.round_trip's way.
                conn.waiting = True
                if conn.buf:
                    conn.round_trip()
                else:
                    n = send(FRAME)
                    if n != FRAME_LEN:
                        conn.round_trip(sent=n)
                    else:
                        data = recv(65536)
                        if data == ECHO:
                            conn.waiting = False
                        else:  # part of a frame, more than one, or b"" (EOF)
                            conn.buf = data
                            conn.round_trip(sent=None)
                t1 = clock()
                record(t1 - t0)
                if t1 <= end:
                    conn.echoes += 1
        except gevent.GreenletExit:
            raise
        except BaseException as exc:  # noqa: B902 - counted by reason
            conn.error = _reason(exc)
            errors[conn.error] = errors.get(conn.error, 0) + 1

    greenlets = [gevent.spawn(loop, c) for c in conns]
    gevent.sleep(0)  # every greenlet waits on `go`
    cpu0 = os.times()
    state["end"] = time.perf_counter() + duration
    started = time.monotonic()
    go.set()
    gevent.sleep(duration)
    cpu1 = os.times()
    gevent.joinall(greenlets, timeout=grace)
    stuck = [c for c, g in zip(conns, greenlets) if not g.dead]
    gevent.killall(greenlets, block=True, timeout=5)
    # Counted before any late echo of the kill can arrive: connections still waiting.
    no_echo_at_end = sum(1 for c in stuck if c.waiting)
    messages = sum(c.echoes for c in conns)
    latencies.sort()

    def pct(p):
        if not latencies:
            return None
        return latencies[min(len(latencies) - 1, int(p / 100.0 * len(latencies)))] * 1000.0

    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "messages": messages,
        "seconds": duration,
        "rate": messages / duration,
        "round_trips_timed": len(latencies),
        "p50_ms": pct(50),
        "p90_ms": pct(90),
        "p99_ms": pct(99),
        "max_ms": latencies[-1] * 1000.0 if latencies else None,
        "errors": errors,
        "errored_connections": sum(errors.values()),
        "no_echo_at_end": no_echo_at_end,
        "connections_without_echo": sum(1 for c in conns if c.echoes == 0),
        "client_cpu": cpu / duration,
        "echo_wall_s": round(time.monotonic() - started, 3),
    }


def emit(event, **fields):
    fields["event"] = event
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def wait_for_go(args):
    """Block (the whole process: nothing needs to run) until a line on stdin; False at EOF or timeout."""
    if args.no_wait:
        return True
    ready, _, _ = select.select([sys.stdin], [], [], args.wait_timeout)
    if not ready:
        return False
    return bool(sys.stdin.readline())


def main(argv=None):
    p = argparse.ArgumentParser(description="WebSocket echo load (see the module docstring).")
    p.add_argument("--port", type=int, required=True, help="the server's port on 127.0.0.1")
    p.add_argument("--connections", type=int, default=1000)
    p.add_argument("--duration", type=float, default=10.0, help="seconds of echo load")
    p.add_argument("--batch", type=int, default=500, help="handshakes under way at once")
    p.add_argument("--handshake-timeout", type=float, default=10.0)
    p.add_argument("--open-timeout", type=float, default=120.0)
    p.add_argument("--grace", type=float, default=2.0, help="seconds for the last echoes after the end")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of warm-up echo (0: none)")
    p.add_argument("--warmup-connections", type=int, default=20)
    p.add_argument("--wait-timeout", type=float, default=120.0, help="longest wait for a line on stdin")
    p.add_argument("--no-wait", action="store_true", help="run the phases straight through (no stdin)")
    args = p.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # a socket per connection
    if soft < hard and hard != resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    result = {"connections": args.connections, "duration": args.duration, "batch": args.batch}
    conns = []
    try:
        result["warmup"] = {"opened": 0}
        if args.warmup > 0 and args.warmup_connections > 0:
            warm, failures, _ = open_connections(args.port, args.warmup_connections, args.batch, args.handshake_timeout, 30)
            stats = echo_phase(warm, args.warmup, args.grace)
            for c in warm:
                c.close()
            result["warmup"] = {"opened": len(warm), "open_failures": failures, "messages": stats["messages"], "errors": stats["errors"]}
            gevent.sleep(0.2)
        emit("warm", **result["warmup"])  # even with no warm-up: the harness reads RSS here
        if not wait_for_go(args):
            result["aborted"] = "no go after the warm-up"
            return result
        conns, failures, seconds = open_connections(
            args.port, args.connections, args.batch, args.handshake_timeout, args.open_timeout
        )
        result.update(opened=len(conns), open_failures=failures, open_seconds=round(seconds, 3))
        emit("opened", opened=len(conns), open_failures=failures, open_seconds=round(seconds, 3))
        if not wait_for_go(args):
            result["aborted"] = "no go after opening"
            return result
        result["idle_still_open"] = sum(1 for c in conns if c.still_open())
        emit("idle", idle_still_open=result["idle_still_open"])
        result.update(echo_phase(conns, args.duration, args.grace))
        emit("loaded", messages=result["messages"])
        if not wait_for_go(args):
            result["aborted"] = "no go after the load"
        return result
    finally:
        for c in conns:
            c.close()
        emit("result", **result)


if __name__ == "__main__":
    main()

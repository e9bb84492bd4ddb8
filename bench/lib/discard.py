"""A download client that throws the bytes away in the kernel: ``python bench/lib/discard.py PORT PATH CONNECTIONS SECONDS``.

For large responses wrk is the limit, not the server: its one thread copies every byte out of the
kernel and through its HTTP parser (bench/static.py's 100 MiB file: wrk at 90 % and more of its core,
the servers far from theirs). Here each keep-alive connection reads a response's head, then discards
its body with ``recv(MSG_TRUNC)``, which on a TCP socket drops the bytes in the kernel without
copying them to the process (tcp(7)), so one core of client keeps up with a server sending far more.

The connections run on one epoll loop; each asks for PATH again as soon as a body is whole, and
one the server closes is opened again. At the
end (SECONDS, bounded) it prints one JSON line: responses whole, bytes received (heads and bodies,
whole or not), seconds, statuses other than 200, and errors by kind. Loopback only (127.0.0.1).
"""

import json
import select
import socket
import sys
import time

HOST = "127.0.0.1"
CHUNK = 1 << 22  # bytes discarded per call at most: 4 MiB, more than a loopback receive buffer holds


def head_of(buffer):
    """(status, content length, bytes of the head, Connection: close) of a whole response head in
    buffer, or None."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buffer[:end].split(b"\r\n")
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection":
            close = value.strip().lower() == b"close"
    return int(lines[0].split()[1]), length, end + 4, close


class Connection:
    def __init__(self, port, request):
        self.sock = socket.create_connection((HOST, port))
        self.sock.setblocking(False)
        self.request = request
        self.head = b""
        self.left = None  # body bytes still to discard; None while the head is read
        self.closing = False  # the response said Connection: close

    def ask(self):
        self.sock.send(self.request)  # a few dozen bytes into an empty send buffer: sent whole
        self.head, self.left, self.closing = b"", None, False


def count(out, kind):
    out["errors"][kind] = out["errors"].get(kind, 0) + 1


def reconnect(epoll, conns, fd, port, request, out):
    """Close the connection on fd (if any) and open another in its place, as wrk does: the load keeps
    its connections whatever a server closes (a 503 with Connection: close, a reset)."""
    if fd is not None:
        epoll.unregister(fd)
        conns.pop(fd).sock.close()
    try:
        conn = Connection(port, request)
    except OSError:
        count(out, "connect")
        return
    conns[conn.sock.fileno()] = conn
    epoll.register(conn.sock.fileno(), select.EPOLLIN)
    conn.ask()


def run(port, path, connections, seconds):
    request = b"GET %s HTTP/1.1\r\nHost: %s:%d\r\n\r\n" % (path.encode(), HOST.encode(), port)
    epoll = select.epoll()
    conns = {}
    out = {"responses": 0, "bytes": 0, "non200": 0, "errors": {}}
    scratch = bytearray(CHUNK)
    for _ in range(connections):
        reconnect(epoll, conns, None, port, request, out)
    started = time.monotonic()
    deadline = started + seconds
    while conns and time.monotonic() < deadline:
        for fd, _ in epoll.poll(max(0.0, min(0.5, deadline - time.monotonic()))):
            conn = conns[fd]
            try:
                done = step(conn, scratch, out)
            except BlockingIOError:  # woken with nothing to read after all
                continue
            except (OSError, ValueError, IndexError) as exc:
                count(out, "read" if isinstance(exc, OSError) else "parse")
                reconnect(epoll, conns, fd, port, request, out)
                continue
            if done:
                out["responses"] += 1
                if conn.closing:
                    reconnect(epoll, conns, fd, port, request, out)
                else:
                    conn.ask()
    out["seconds"] = round(time.monotonic() - started, 3)
    for conn in conns.values():
        conn.sock.close()
    return out


def step(conn, scratch, out):
    """Read what is there on one connection; True when a response is whole."""
    if conn.left is None:
        data = conn.sock.recv(65536)
        if not data:
            raise OSError("closed by the server")
        out["bytes"] += len(data)
        conn.head += data
        parsed = head_of(conn.head)
        if parsed is None:
            return False
        status, length, size, conn.closing = parsed
        if status != 200:
            out["non200"] += 1
        conn.left = length - (len(conn.head) - size)
        return conn.left <= 0
    n = conn.sock.recv_into(scratch, min(conn.left, CHUNK), socket.MSG_TRUNC)
    if n == 0:
        raise OSError("closed by the server")
    out["bytes"] += n
    conn.left -= n
    return conn.left <= 0


if __name__ == "__main__":
    port, path, connections, seconds = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    print(json.dumps(run(port, path, connections, seconds)))

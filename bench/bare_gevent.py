"""Reference servers: bare gevent StreamServer loops that answer each request with canned bytes.

They parse nothing (they only count request heads by their blank line) and call no application.

``handle`` is the loop as a gevent user writes it, with the gevent socket's ``recv`` and
``sendall``: bench/run.py's "bare" server, the ratio every report gives beside greenserve's.

``handle_raw`` ("bare-raw") does the same over the non-blocking socket under gevent's, the way
greenserve's connection does: it waits on the socket's read watcher, then calls ``recv_into``
and ``send`` itself (no EAGAIN round trip, no ``getsockopt`` per send). It is the cost of
gevent's event loop and greenlet switches alone, the floor under any server built on gevent.

    python bench/bare_gevent.py PORT [hello|page] [raw]

The second argument picks the canned response: the hello body (default) or the ~4.5 KB page of
bench/apps.py, with the same status line and headers a WSGI server would send for them.
"""

import os
import socket
import sys

from gevent import getcurrent
from gevent.server import StreamServer

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.apps import HELLO, PAGE  # noqa: E402


def canned(content_type, body):
    return (
        b"HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
        b"Date: Mon, 01 Jan 2024 00:00:00 GMT\r\nServer: bare\r\n\r\n%s" % (content_type, len(body), body)
    )


RESPONSES = {"hello": canned(b"text/plain", HELLO), "page": canned(b"text/html", PAGE)}
RESPONSE = RESPONSES["hello"]


def handle(sock, address):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pending = b""
    recv = sock.recv
    sendall = sock.sendall
    while True:
        try:
            data = recv(65536)
        except OSError:  # the load generator resets its connections at the end
            return
        if not data:
            return
        pending += data
        count = pending.count(b"\r\n\r\n")
        if count:
            pending = pending[pending.rfind(b"\r\n\r\n") + 4 :]
            sendall(RESPONSE * count)


# One receive buffer for every connection: nothing switches between a recv and the use of it.
_BUFFER = bytearray(65536)


def handle_raw(sock, address):
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    raw = sock._sock  # the non-blocking socket gevent's socket wraps
    read_event = sock._read_event
    write_event = sock._write_event
    hub_switch = sock.hub.switch
    switch = getcurrent().switch
    buffer = _BUFFER
    pending = b""

    def wait(watcher):
        watcher.start(switch)
        try:
            hub_switch()
        finally:
            watcher.stop()

    while True:
        wait(read_event)
        try:
            n = raw.recv_into(buffer)
        except BlockingIOError:
            continue
        except OSError:
            return
        if not n:
            return
        data = pending + buffer[:n]
        count = data.count(b"\r\n\r\n")
        pending = data[data.rfind(b"\r\n\r\n") + 4 :] if count else data
        out = RESPONSE * count
        while out:
            try:
                sent = raw.send(out)
            except BlockingIOError:
                sent = 0
            except OSError:
                return
            out = out[sent:]
            if out:
                wait(write_event)


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8001
    RESPONSE = RESPONSES[sys.argv[2] if len(sys.argv) > 2 else "hello"]
    handler = handle_raw if sys.argv[3:] == ["raw"] else handle
    StreamServer(("127.0.0.1", port), handler, backlog=2048).serve_forever()

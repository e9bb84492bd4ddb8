"""Reference server: a bare gevent StreamServer loop that answers each request with canned bytes.

It parses nothing (it only counts request heads by their blank line) and calls no application,
so it is the ceiling of a pure-Python gevent HTTP server; bench/run.py reports greenserve's
requests per second as a ratio to it.

    python bench/bare_gevent.py PORT [hello|page]

The second argument picks the canned response: the hello body (default) or the ~4.5 KB page of
bench/apps.py, with the same status line and headers a WSGI server would send for them.
"""

import os
import socket
import sys

from gevent.server import StreamServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from apps import HELLO, PAGE  # noqa: E402


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


if __name__ == "__main__":
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 8001
    RESPONSE = RESPONSES[sys.argv[2] if len(sys.argv) > 2 else "hello"]
    StreamServer(("127.0.0.1", port), handle, backlog=2048).serve_forever()

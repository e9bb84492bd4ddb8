"""A client of tests/overload/test_served.py: COUNT connections to 127.0.0.1:PORT opened at RATE a
second, each sending one GET and reading its answer; prints the statuses counted, as JSON.

Run as ``python many_waiting.py PORT COUNT RATE TIMEOUT``. gevent's own sockets (no patching): a
greenlet per connection, so 5,000 wait at once in one process.
"""

import collections
import json
import sys

import gevent
from gevent import socket


def fetch(port, timeout, statuses):
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    except OSError as exc:
        statuses["connect: %s" % type(exc).__name__] += 1
        return
    try:
        sock.settimeout(timeout)
        sock.sendall(b"GET /io HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        statuses[data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/1.1 ") else "garbled"] += 1
    except OSError as exc:
        statuses["error: %s" % type(exc).__name__] += 1
    finally:
        sock.close()


def main():
    port, count, rate, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    statuses = collections.Counter()
    greenlets = []
    for index in range(count):
        greenlets.append(gevent.spawn(fetch, port, timeout, statuses))
        if index % 50 == 49:
            gevent.sleep(50 / rate)
    gevent.joinall(greenlets, timeout=timeout + 30)
    print(json.dumps(dict(statuses)))


if __name__ == "__main__":
    main()

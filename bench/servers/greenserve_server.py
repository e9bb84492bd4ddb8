"""greenserve's WSGIServer, one process: python bench/servers/greenserve_server.py PORT [NAME=VALUE ...]

Each NAME=VALUE after the port is passed to WSGIServer as a keyword argument: a setting of
docs/settings.md marked *API* (``keepalive=600``; greenserve converts the text), or ``spawn`` and
``backlog`` (integers). bench/run.py passes none; bench/memory.py passes ``keepalive=...`` so that
idle connections stay open while it measures them. ``GREENSERVE_BENCH_METRICS=1`` in the
environment turns on the per-request metrics seam (``stats.WorkerStats``), as ``--metrics-bind``
does in a worker: what metrics cost a request, without the master's side (a report a second).
"""

import os

import sys

from _common import app, port

import greenserve


def options(args):
    kwargs = {}
    for arg in args:
        name, sep, value = arg.partition("=")
        if not sep:
            sys.exit("expected NAME=VALUE, got %r" % arg)
        kwargs[name] = int(value) if name in ("spawn", "backlog") else value
    return kwargs


if __name__ == "__main__":
    kwargs = dict(log=None, backlog=2048, spawn=10000)
    kwargs.update(options(sys.argv[2:]))
    server = greenserve.WSGIServer(("127.0.0.1", port()), app(), **kwargs)
    if os.environ.get("GREENSERVE_BENCH_METRICS") == "1":
        from greenserve.observe.stats import WorkerStats

        server.stats = WorkerStats()
    server.serve_forever()

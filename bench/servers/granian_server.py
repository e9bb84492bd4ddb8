"""granian (Rust, tokio and hyper) with its WSGI interface: python bench/servers/granian_server.py PORT [ARGS ...]

The launcher replaces itself (exec) with the granian CLI, as the gunicorn launcher does. On a
Python with the GIL, granian's main process starts its worker as a child process (even with
``--workers 1``), so the PID bench/run.py holds is the main process's. The worker inherits its
CPU affinity (taskset), and run.py stops it by PID after the main process, as it does gunicorn's
worker. The options keep granian to one core like the other servers: one worker process; one
Rust runtime thread on a single-threaded runtime (granian's default for WSGI is its
multi-threaded runtime); one blocking thread that calls the WSGI app (granian's default for WSGI
is half the backpressure: 1,024 threads with this backlog); and one runtime I/O blocking thread.
The listen backlog is the one the greenserve, pywsgi and gunicorn launchers use.

With ``BENCH_APP_WAITS=1`` in its environment (bench/run.py's ``flask-wait``: the view waits
10 ms with ``time.sleep``), ``--blocking-threads`` is left out, so granian runs the app in its
WSGI default of half the backpressure, 1,024 threads with this backlog: the way granian serves
a WSGI app that waits on I/O, where one thread would serve at most 100 requests a second.

ARGS after the port go to granian before the app, and an ``--http`` among them replaces the
launcher's ``--http 1`` (bench/h2peers.py: ``--http 2``, and ``--ssl-certificate``/``--ssl-keyfile``);
bench/run.py passes none.
"""

import os
import sys

from _common import ROOT, app_spec, port

if __name__ == "__main__":
    argv = [
        sys.executable, "-m", "granian",
        "--interface", "wsgi",
        "--host", "127.0.0.1",
        "--port", str(port()),
        "--workers", "1",
        "--runtime-mode", "st",
        "--runtime-threads", "1",
        "--runtime-blocking-threads", "1",
        "--backlog", "2048",
        "--http", "1",
        "--log-level", "warning",
        "--working-dir", ROOT,
    ]
    if os.environ.get("BENCH_APP_WAITS") != "1":
        at = argv.index("--runtime-blocking-threads")
        argv[at:at] = ["--blocking-threads", "1"]
    extra = sys.argv[2:]
    if "--http" in extra:
        at = argv.index("--http")
        del argv[at:at + 2]
    argv += extra + [app_spec()]
    os.execv(sys.executable, argv)

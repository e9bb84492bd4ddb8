"""greenserve through its command, with its defaults: python bench/servers/greenserve_cli_server.py PORT [ARGS ...]

``greenserve --workers 1 --backlog 2048 --worker-connections 10000 bench.apps:app``: the master
and one worker, as a user runs it (the other greenserve rows run ``WSGIServer`` in one process).
The launcher replaces itself (exec) with the master, so the PID bench/run.py holds is the
master's; the worker inherits the master's CPU affinity. ARGS after the port go to the command
before the app (bench/h2peers.py: the HTTP/2 and TLS flags); bench/run.py passes none.
GREENSERVE_BENCH_WORKERS sets --workers (the greenserve-cli-2 row), GREENSERVE_BENCH_STICKY=1
adds --sticky (greenserve-sticky).
"""

import os
import sys

from _common import ROOT, app_spec, port

if __name__ == "__main__":
    argv = [
        sys.executable, "-m", "greenserve",
        "--workers", os.environ.get("GREENSERVE_BENCH_WORKERS", "1"),
        "--worker-connections", "10000",
        "--backlog", "2048",
        "--graceful-timeout", "2",
        "--log-level", "warning",
        "--chdir", ROOT,
        "--bind", "127.0.0.1:%d" % port(),
    ] + sys.argv[2:] + [app_spec()]
    if os.environ.get("GREENSERVE_BENCH_STICKY") == "1":
        argv.insert(-1, "--sticky")
    os.execv(sys.executable, argv)

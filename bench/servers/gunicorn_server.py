"""gunicorn with its gevent worker: python bench/servers/gunicorn_server.py PORT [ARGS ...]

The launcher replaces itself (exec) with the gunicorn master, so the PID bench/run.py holds is
the master's; the master forks one gevent worker, which inherits the master's CPU affinity.
ARGS after the port go to gunicorn before the app (bench/h2peers.py: ``--http-protocols h2,h1`` and
``--http2-cleartext prior-knowledge`` or ``--certfile``/``--keyfile``); bench/run.py passes none.
"""

import os
import sys

from _common import ROOT, app_spec, port

if __name__ == "__main__":
    argv = [
        sys.executable, "-m", "gunicorn",
        "-k", "gevent",
        "-w", "1",
        "--worker-connections", "10000",
        "--backlog", "2048",
        "--graceful-timeout", "2",
        "--log-level", "warning",
        "--chdir", ROOT,
        "-b", "127.0.0.1:%d" % port(),
    ] + sys.argv[2:] + [app_spec()]
    os.execv(sys.executable, argv)

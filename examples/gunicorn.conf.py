"""A gunicorn.conf.py as gunicorn reads it, hooks included; greenserve reads it the same way.

From the repository root:

    greenserve -c examples/gunicorn.conf.py --print-config --chdir examples hello:app
    greenserve -c examples/gunicorn.conf.py --chdir examples hello:app
    gunicorn -c examples/gunicorn.conf.py -k greenserve.workers.GreenserveWorker --chdir examples hello:app

Without -c, a gunicorn.conf.py in the directory the command is typed in is read (as gunicorn
reads it): `cd examples && greenserve hello:app` says so in its first line.
"""

import os

# gunicorn's names and its reading of PORT/WEB_CONCURRENCY-style variables, as real files do.
workers = int(os.environ.get("WEB_CONCURRENCY", 2))
keepalive = 10
timeout = 30
graceful_timeout = 20
accesslog = "-"
loglevel = "info"


def when_ready(server):
    server.log.info("when_ready: the first worker serves (a hook of gunicorn.conf.py)")


def post_fork(server, worker):
    server.log.info("post_fork: worker %s forked", worker.pid)

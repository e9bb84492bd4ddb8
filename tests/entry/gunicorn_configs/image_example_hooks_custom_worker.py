# Written for greenserve's corpus; stands for the gunicorn configuration of paperless-ngx/paperless-ngx (gunicorn.conf.py): the hooks of gunicorn's example (pre_fork, pre_exec, when_ready, worker_int dumping every thread's stack, worker_abort), a worker_class of the project's own, port and workers from the environment in an f-string.
import os

bind = f"0.0.0.0:{os.getenv('DOCS_PORT', 8000)}"
workers = int(os.getenv("DOCS_WEB_WORKERS", 2))
worker_class = "docs.workers.TunedWorker"
timeout = 150


def pre_fork(server, worker):
    pass


def pre_exec(server):
    server.log.info("re-executing the master")


def when_ready(server):
    server.log.info("listening; starting the workers")


def worker_int(worker):
    import sys
    import threading
    import traceback

    worker.log.info("worker interrupted (INT or QUIT)")
    names = {thread.ident: thread.name for thread in threading.enumerate()}
    lines = []
    for ident, frame in sys._current_frames().items():
        lines.append("\n# thread %s (%d)" % (names.get(ident, "?"), ident))
        for entry in traceback.extract_stack(frame):
            lines.append('  "%s", line %d, in %s' % (entry.filename, entry.lineno, entry.name))
            if entry.line:
                lines.append("    " + entry.line.strip())
    worker.log.debug("\n".join(lines))


def worker_abort(worker):
    worker.log.info("worker aborted (SIGABRT)")

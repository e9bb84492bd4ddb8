# Written for greenserve's corpus; stands for the gunicorn configuration of benoitc/gunicorn (examples/example_config.py): gunicorn's own example, a setting from each part of its documentation (backlog, worker_connections, spew = False, umask = 0, user, group, pidfile, proc_name and tmp_upload_dir = None, raw_env) and its hooks (pre_fork, post_fork, pre_exec, when_ready, worker_int with a stack dump, worker_abort).

# Listening
bind = "127.0.0.1:8000"
backlog = 1024  # connections the kernel queues before accept()

# Workers
workers = 2
worker_class = "sync"
worker_connections = 500
timeout = 30
keepalive = 2
spew = False  # True traces every line executed: a last resort for debugging

# The process
daemon = False
pidfile = None
umask = 0
user = None
group = None
tmp_upload_dir = None
proc_name = None
raw_env = ["APP_SECRET=change-me", "FEATURE_FLAGS=search,export"]

# Logs
errorlog = "-"
accesslog = "-"
loglevel = "info"
access_log_format = '%(h)s %(u)s %(t)s "%(r)s" %(s)s %(b)s %(L)s "%(a)s"'


# Hooks
def pre_fork(server, worker):
    pass


def post_fork(server, worker):
    server.log.info("worker %s started", worker.pid)


def pre_exec(server):
    server.log.info("a new master is about to exec")


def when_ready(server):
    server.log.info("ready; starting the workers")


def worker_int(worker):
    import sys
    import traceback

    worker.log.info("the worker got INT or QUIT")
    dump = []
    for ident, frame in sys._current_frames().items():
        dump.append("--- thread %d ---" % ident)
        dump.extend(line.rstrip() for line in traceback.format_stack(frame))
    worker.log.debug("\n".join(dump))


def worker_abort(worker):
    worker.log.info("the worker got SIGABRT")

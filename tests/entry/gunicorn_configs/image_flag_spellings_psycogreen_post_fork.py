# Written for greenserve's corpus; stands for the gunicorn configuration of safe-global/safe-transaction-service (gunicorn.conf.py): settings spelt as the flags are (access_logfile, error_logfile, log_file: no settings; log_level: greenserve's name, not gunicorn's), logger_class, worker_connections, gevent, a post_fork hook that makes psycopg cooperative when psycogreen is installed.
worker_class = "gevent"
worker_connections = 1500
timeout = 60
graceful_timeout = 90
preload_app = False  # import the app in each worker, after gevent has patched
logger_class = "txservice.logs.ServerLogger"
log_level = "info"
log_file = "-"
access_logfile = "-"
error_logfile = "-"
# max_requests = 5000


def post_fork(server, worker):
    try:
        import psycogreen.gevent
    except ImportError:
        worker.log.info("psycogreen is not installed: database calls block the worker")
    else:
        psycogreen.gevent.patch_psycopg()
        worker.log.info("database calls made cooperative")

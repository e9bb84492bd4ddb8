# Written for greenserve's corpus; stands for the gunicorn configuration of inventree/InvenTree (contrib/container/gunicorn.conf.py): workers from the environment, else 2 x CPUs + 1 when unset or not a number; timeout as the environment's string (an int default); loglevel lowered from the environment; a module-level logger; capture_output, worker_tmp_dir, preload_app, max_requests_jitter.
"""Server settings of the container image."""

import logging
import multiprocessing
import os

log = logging.getLogger("stock")

errorlog = "-"
accesslog = "-"
loglevel = os.environ.get("STOCK_LOG_LEVEL", "WARNING").lower()
capture_output = True

threads = 4
worker_tmp_dir = "/dev/shm"  # the workers' heartbeat files in memory
# worker_class = "gevent"  (not yet)

timeout = os.environ.get("STOCK_SERVER_TIMEOUT", 60)

workers = os.environ.get("STOCK_SERVER_WORKERS")
try:
    workers = int(workers)
except (TypeError, ValueError):
    workers = 2 * multiprocessing.cpu_count() + 1

log.info("%d server workers", workers)

max_requests = 1000
max_requests_jitter = 50
preload_app = True  # the apps' ready() run once, in the master

# Written for greenserve's corpus; stands for the gunicorn configuration of arthur-barbosa18/accident-risk-prediction (gunicorn.conf.py): a shebang, pythonpath, the file setting os.environ, workers and threads taken from the environment as strings (int defaults), gthread, preload_app, max_requests_jitter, worker_tmp_dir, statsd left in comments.
#!/usr/bin/env python3
import os

os.environ["CACHE_HOST"] = "cache"

bind = "0.0.0.0:8080"
pythonpath = "/opt/model/src"
worker_class = "gthread"
workers = os.environ.get("MODEL_WORKERS", 2)
threads = os.environ.get("MODEL_THREADS", 3)
timeout = 15
preload_app = True
max_requests = 800
max_requests_jitter = 80
worker_tmp_dir = "/dev/shm"
# statsd_prefix = "model"
# statsd_host = "%s:8125" % os.environ.get("STATSD_HOST", "localhost")

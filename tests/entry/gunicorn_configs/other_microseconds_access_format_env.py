# Written for greenserve's corpus; stands for the gunicorn configuration of swiss-seismological-service/hydws (config/gunicorn.py): a non-ASCII µs in access_log_format under a coding line, workers from WEB_CONCURRENCY, threads and worker recycling from the environment, a long keepalive.
# -*- coding: utf-8 -*-
import os

bind = "0.0.0.0:8000"
accesslog = "-"
access_log_format = '%(h)s "%(r)s" %(s)s %(b)s took %(D)sµs'

workers = int(os.getenv("WEB_CONCURRENCY", 3))
threads = int(os.getenv("SERVICE_THREADS", 2))
timeout = 240
keepalive = 240
max_requests = int(os.getenv("SERVICE_MAX_REQUESTS", 2000))
max_requests_jitter = int(os.getenv("SERVICE_MAX_REQUESTS_JITTER", 100))

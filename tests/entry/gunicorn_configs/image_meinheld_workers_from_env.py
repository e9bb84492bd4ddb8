# Written for greenserve's corpus; stands for the gunicorn configuration of tiangolo/meinheld-gunicorn-docker (python2.7/gunicorn_conf.py): workers computed from WORKERS_PER_CORE or WEB_CONCURRENCY and the CPUs, the address from BIND or HOST and PORT, the image's own module-level names (workers_per_core_str, use_loglevel, log_data, ...), a __future__ import, the settings printed as JSON when the file loads.
from __future__ import print_function

import json
import multiprocessing
import os

# What the image's users may set.
host = os.environ.get("HOST", "0.0.0.0")
port = os.environ.get("PORT", "80")
bind_env = os.environ.get("BIND")
use_loglevel = os.environ.get("LOG_LEVEL", "info")
workers_per_core_str = os.environ.get("WORKERS_PER_CORE", "2")
web_concurrency_str = os.environ.get("WEB_CONCURRENCY")

# What follows from it.
use_bind = bind_env or "%s:%s" % (host, port)
cores = multiprocessing.cpu_count() or 1
workers_per_core = float(workers_per_core_str.strip())
default_web_concurrency = cores * workers_per_core
web_concurrency = int(web_concurrency_str) if web_concurrency_str else int(default_web_concurrency)
assert web_concurrency > 0, "WEB_CONCURRENCY must be a positive number"

bind = use_bind
workers = web_concurrency
loglevel = use_loglevel
keepalive = 120
errorlog = "-"

log_data = dict(
    loglevel=loglevel,
    workers=workers,
    bind=bind,
    workers_per_core=workers_per_core,
    host=host,
    port=port,
)
print(json.dumps(log_data, sort_keys=True))

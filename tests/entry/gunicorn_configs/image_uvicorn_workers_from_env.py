# Written for greenserve's corpus; stands for the gunicorn configuration of tiangolo/uvicorn-gunicorn-docker (docker-images/gunicorn_conf.py): the same computation of workers from WORKERS_PER_CORE or WEB_CONCURRENCY and the CPUs (at least 2), worker_class from WORKER_CLASS (uvicorn's worker), graceful_timeout, timeout and keepalive from strings of the environment, worker_tmp_dir, the settings printed as JSON when the file loads.
import json
import os
from os import environ

host = environ.get("HOST") or "0.0.0.0"
port = environ.get("PORT") or "80"
bind_env = environ.get("BIND")
use_bind = bind_env if bind_env else f"{host}:{port}"
use_loglevel = environ.get("LOG_LEVEL") or "info"

cores = os.cpu_count() or 1
workers_per_core_str = environ.get("WORKERS_PER_CORE") or "1"
workers_per_core = float(workers_per_core_str)
default_web_concurrency = workers_per_core * cores
web_concurrency_str = environ.get("WEB_CONCURRENCY")
if not web_concurrency_str:
    web_concurrency = max(2, int(default_web_concurrency))
else:
    web_concurrency = int(web_concurrency_str)
    assert web_concurrency > 0, "WEB_CONCURRENCY must be a positive number"

worker_class_str = environ.get("WORKER_CLASS") or "uvicorn.workers.UvicornWorker"
graceful_timeout_str = environ.get("GRACEFUL_TIMEOUT") or "120"
timeout_str = environ.get("TIMEOUT") or "120"
keepalive_str = environ.get("KEEPALIVE") or "5"

bind = use_bind
workers = web_concurrency
worker_class = worker_class_str
loglevel = use_loglevel
errorlog = "-"
worker_tmp_dir = "/dev/shm"
graceful_timeout = int(graceful_timeout_str, 10)
timeout = int(timeout_str, 10)
keepalive = int(keepalive_str, 10)

log_data = {
    "bind": bind,
    "workers": workers,
    "worker_class": worker_class,
    "loglevel": loglevel,
    "graceful_timeout": graceful_timeout,
    "timeout": timeout,
    "keepalive": keepalive,
    "workers_per_core": workers_per_core,
    "host": host,
    "port": port,
}
print(json.dumps(log_data), flush=True)

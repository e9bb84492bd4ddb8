# Written for greenserve's corpus; stands for the gunicorn configuration of bunkerity/bunkerweb (src/ui/gunicorn.conf.py): graceful_timeout = 0, proxy_allow_ips and forwarded_allow_ips both, reuse_port, pythonpath, proc_name, wsgi_app, tmp_upload_dir, secure_scheme_headers = {}, a pid file in /var/run, names of the file's own in capitals from the environment (MAX_WORKERS, LISTEN_PORT, ...), sys.path extended by the file, an on_exit hook importing a module of the image's.
# -*- coding: utf-8 -*-
import os
import sys

deps_path = os.path.join(os.sep, "opt", "panel", "deps", "python")
if deps_path not in sys.path:
    sys.path.append(deps_path)

MODE = os.environ.get("MODE")
LOG_LEVEL = os.environ.get("LOG_LEVEL", "info")
LISTEN_ADDR = os.environ.get("LISTEN_ADDR", "0.0.0.0")
LISTEN_PORT = os.environ.get("LISTEN_PORT", "7070")
MAX_WORKERS = int(os.environ.get("MAX_WORKERS", max(1, (os.cpu_count() or 1) - 1)))

wsgi_app = "main:app"
bind = "%s:%s" % (LISTEN_ADDR, LISTEN_PORT)
proc_name = "panel-ui"
pythonpath = deps_path
pidfile = os.path.join(os.sep, "var", "run", "panel", "ui.pid")
worker_tmp_dir = "/dev/shm"
tmp_upload_dir = os.path.join(os.sep, "var", "tmp", "panel", "ui")

worker_class = "gthread"
workers = MAX_WORKERS
threads = int(os.environ.get("MAX_THREADS", 2 * MAX_WORKERS))
max_requests_jitter = min(MAX_WORKERS, 8)
graceful_timeout = 0
preload_app = True
reuse_port = True
reload = MODE == "dev"

loglevel = LOG_LEVEL
capture_output = True
access_log_format = '%({x-forwarded-for}i)s %(t)s "%(r)s" %(s)s %(b)s "%(a)s"'

secure_scheme_headers = dict()
forwarded_allow_ips = "*"
proxy_allow_ips = "*"


def on_exit(server):
    ui_dir = os.path.join(os.sep, "opt", "panel", "ui")
    if ui_dir not in sys.path:
        sys.path.append(ui_dir)
    from panel_events import record_event

    record_event("info", "ui", "the web UI stopped")

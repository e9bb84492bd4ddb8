# Written for greenserve's corpus; stands for the gunicorn configuration of cuspaceflight/tawhiri (deploy/gunicorn_cfg.py): a unix: socket and a pid file under /run, a fixed worker count, a module imported and never used.
import multiprocessing  # once meant for the worker count, which is now fixed below

pidfile = "/run/predictor/api.pid"
bind = "unix:/run/predictor/api.sock"
workers = 8

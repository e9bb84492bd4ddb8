# Written for greenserve's corpus; stands for the gunicorn configuration of myriade-ai/myriade (service/gunicorn_conf.py): acceslogformat (misspelt, so gunicorn ignores it), one sync worker with threads from the environment (an int default), capture_output, log files under /var/log.
import os

bind = "0.0.0.0:8081"
worker_class = "sync"
workers = 1  # the service keeps its state in memory: one process, many threads
threads = int(os.environ.get("APP_THREADS", 8))

capture_output = True
loglevel = "debug"
errorlog = "/var/log/service/errors"
accesslog = "/var/log/service/requests"
acceslogformat = '%(h)s %(t)s "%(r)s" %(s)s %(b)s "%(a)s"'

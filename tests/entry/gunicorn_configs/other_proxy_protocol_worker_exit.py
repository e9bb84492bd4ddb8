# Written for greenserve's corpus; stands for the gunicorn configuration of uyamazak/oceanus (arms/app/gunicorn_conf_debug.py): proxy_protocol = True, x_forwarded_for_header (a setting gunicorn removed), bind = ":8088", reload, a worker_exit hook that prints the server and the worker and leaves with os._exit(4).
import os

bind = ":8088"
worker_class = "gevent"
loglevel = "debug"
timeout = 10
reload = True
proxy_protocol = True
x_forwarded_for_header = "X-Forwarded-For"


def worker_exit(server, worker):
    print("leaving: server=%r worker=%r" % (server, worker))
    print("exit code 4 on the way out")
    os._exit(4)

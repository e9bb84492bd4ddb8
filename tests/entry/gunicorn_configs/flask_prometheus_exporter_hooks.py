# Written for greenserve's corpus; stands for the gunicorn configuration of Sciebo-RDS/Sciebo-RDS (RDS/layer0_ingress/web/server/gunicorn.conf.py): prometheus_flask_exporter's multiprocess hooks (when_ready serves the metrics, child_exit), logfile (gunicorn's name before 19.0), capture_output, the eventlet worker, workers from the CPUs.
import multiprocessing

from prometheus_flask_exporter import multiprocess as exporter

bind = "127.0.0.1:5005"
worker_class = "eventlet"
workers = multiprocessing.cpu_count() * 2 + 1
capture_output = True
loglevel = "debug"
logfile = "/srv/web/logs/server.log"


def when_ready(server):
    exporter.GunicornPrometheusMetrics.start_http_server_when_ready(9200)


def child_exit(server, worker):
    exporter.GunicornPrometheusMetrics.mark_process_dead_on_child_exit(worker.pid)

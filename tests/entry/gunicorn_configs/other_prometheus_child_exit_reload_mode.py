# Written for greenserve's corpus; stands for the gunicorn configuration of WonderCode22/servicenow_component (service_now_service/gunicorn.py): a prometheus_client child_exit hook defined before the settings, reload only when MODE says development, threads.
import os

from prometheus_client import multiprocess as prometheus_multiprocess


def child_exit(server, worker):
    prometheus_multiprocess.mark_process_dead(worker.pid)


if os.environ.get("MODE") == "development":
    reload = True

bind = "0.0.0.0:5001"
workers = 2
threads = 8

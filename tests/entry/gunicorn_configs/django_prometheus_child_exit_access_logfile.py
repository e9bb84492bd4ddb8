# Written for greenserve's corpus; stands for the gunicorn configuration of backend-developers-ltd/ComputeHorde (executor/app/envs/prod/gunicorn.conf.py): workers as 2 x CPUs + 1, wsgi_app, access_logfile (the flag's spelling, no setting), a child_exit hook marking the worker dead for prometheus_client's multiprocess mode.
import multiprocessing

import prometheus_client.multiprocess

bind = "0.0.0.0:8000"
workers = multiprocessing.cpu_count() * 2 + 1
wsgi_app = "executor.wsgi:application"
access_logfile = "-"


def child_exit(server, worker):
    # Otherwise the dead worker's gauge files keep being summed into the metrics.
    prometheus_client.multiprocess.mark_process_dead(worker.pid)

# Written for greenserve's corpus; stands for the gunicorn configuration of project-koku/koku (gunicorn.py): BIND and WORKERS written in capitals, names gunicorn does not read, so the defaults stay.
"""Settings of the API's server processes."""
import multiprocessing

WORKERS = 1 + 2 * multiprocessing.cpu_count()
BIND = "unix:/var/run/costapi/api.sock"

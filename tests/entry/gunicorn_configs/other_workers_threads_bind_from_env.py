# Written for greenserve's corpus; stands for the gunicorn configuration of force1267/exchange-concept (config/gunicorn.py): workers, threads and the address read from the environment, each with a default given as a string.
import os

threads = int(os.environ.get("APP_THREADS", "1"))
workers = int(os.environ.get("APP_PROCESSES", "2"))
bind = os.environ.get("APP_BIND", "0.0.0.0:8080")

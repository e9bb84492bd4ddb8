# Written for greenserve's corpus; stands for the gunicorn configuration of openfoodfacts/robotoff (gunicorn.py): bind = ":5600" (a port on every address), workers from the environment, worker_connections, preload_app = bool(os.environ.get(..., True)), recycling left in comments.
import os

bind = ":5600"
# each worker holds the models in memory: more workers, more RAM
workers = int(os.environ.get("API_WORKERS", 3))
worker_connections = 500
# set API_PRELOAD to an empty string in development, where the code reloads
preload_app = bool(os.environ.get("API_PRELOAD", True))
timeout = 90
# max_requests = 1000
# max_requests_jitter = 100

# Written for greenserve's corpus; stands for the gunicorn configuration of brenopelegrin/pytasks (api/gunicorn.conf.py): int(os.getenv(...)) with no default (the deployment must set both variables), settings left in comments.
import os

# accesslog = "access.log"
workers = int(os.getenv("TASKS_WORKERS"))
threads = int(os.getenv("TASKS_THREADS"))
# errorlog = "error.log"
# bind = "127.0.0.1:8080"

# Written for greenserve's corpus; stands for the gunicorn configuration of alexshchegretsov/URL_shortener (src/gunicorn.py): the port from PORT, one worker per CPU, max_requests, reload, and env = {...}, a dict that is no setting (raw_env is gunicorn's name).
import multiprocessing
import os

bind = "0.0.0.0:{}".format(os.environ.get("PORT", "8002"))
workers = multiprocessing.cpu_count() or 1
max_requests = 500
reload = True

env = {"DJANGO_SETTINGS_MODULE": "shortener.settings"}

# Written for greenserve's corpus; stands for the gunicorn configuration of LoveJustice/tinyhands (application/bin/gunicorn_config.py): workers = "4" (a string), loglevel "INFO", forwarded_allow_ips "*", reload, an import and a name of the file's own halfway down, log paths carrying today's date.
bind = "0.0.0.0:9010"
worker_class = "gevent"
workers = "4"
loglevel = "INFO"
timeout = 120
reload = True
forwarded_allow_ips = "*"

import datetime

today = datetime.date.today().isoformat()
accesslog = "/logs/access-%s.log" % today
errorlog = "/logs/error-%s.log" % today

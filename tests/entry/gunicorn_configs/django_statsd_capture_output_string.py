# Written for greenserve's corpus; stands for the gunicorn configuration of SmartCambridge/tfc_web (gunicorn_config.py): capture_output = "True" (a string), statsd_host and statsd_prefix, gthread with many threads, max_requests_jitter, reload, a pid file and logs under /var/log, access_log_format with %(D)s.
# production site

worker_class = "gthread"
workers = 6
threads = 12
max_requests = 2000
max_requests_jitter = 200
reload = True

pidfile = "/var/log/webapp/server.pid"
errorlog = "/var/log/webapp/error.log"
accesslog = "/var/log/webapp/access.log"
access_log_format = '%(h)s %(t)s "%(r)s" %(s)s %(b)s %(D)s'
capture_output = "True"

statsd_host = "localhost:8125"
statsd_prefix = "webapp"

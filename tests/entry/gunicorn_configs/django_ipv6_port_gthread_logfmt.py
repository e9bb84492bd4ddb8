# Written for greenserve's corpus; stands for the gunicorn configuration of heroku/python-getting-started (gunicorn.conf.py): bind = ["[::]:PORT"] in a list, workers from WEB_CONCURRENCY kept as the environment's string (an int default), gthread threads, preload_app, timeout and graceful_timeout, a logfmt access log to stdout with request headers, reload in development and reuse_port otherwise; a comment on each choice.
import os

# The IPv6 wildcard (IPv4 clients still connect unless IPV6_V6ONLY is on), on the port the
# platform gives in PORT.
bind = [f"[::]:{os.getenv('PORT', 5000)}"]

# Threads suit an application that waits on its database more than it computes.
worker_class = "gthread"
threads = 4

# The platform sets WEB_CONCURRENCY from the machine's size; one process when it is unset.
workers = os.getenv("WEB_CONCURRENCY", 1)

# Import the application once in the master and fork: less memory, quicker starts.
preload_app = True

# A worker silent this long is replaced; on a restart, requests get this long to finish
# (less than the platform's own limit on a shutdown).
timeout = 25
graceful_timeout = 25

# Requests on stdout as key=value pairs, with the router's request id and the client's address.
accesslog = "-"
access_log_format = 'method=%(m)s path="%(U)s" status=%(s)s ms=%(M)s request_id=%({x-request-id}i)s fwd="%({x-forwarded-for}i)s" agent="%(a)s"'

if os.getenv("ENVIRONMENT") == "development":
    reload = True  # restart when the code changes
else:
    reuse_port = True  # SO_REUSEPORT: the kernel spreads connections over the workers

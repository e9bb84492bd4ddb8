# Written for greenserve's corpus; stands for the gunicorn configuration of bbhagat1234/python-docs-hello-world (gunicorn.py): settings written as annotations (workers: 3) instead of assignments, so a bare word in one is looked up and gunicorn refuses the file (NameError); CRLF line ends.
bind = "0.0.0.0:8000"
workers: 3
threads: 2
worker_class: gevent
timeout: 300
loglevel: info
errorlog: errors.log

# Written for greenserve's corpus; stands for the gunicorn configuration of glassesfactory/deploytest (gunicorn.conf.py): a unix: socket and a pid file in a home directory, preload_app, logfile (gunicorn's name before 19.0, no setting now), logconfig = None.
bind = "unix:/home/deploy/run/app.sock"
pidfile = "/home/deploy/run/app.pid"
workers = 2
backlog = 256
preload_app = True

loglevel = "debug"
logconfig = None
logfile = "/var/log/deploy/app.log"

# Written for greenserve's corpus; stands for the gunicorn configuration of LeeHanYeong/let-us-Go (.config/production_master/gunicorn.py): chdir to the deployment's directory, which this machine does not have (gunicorn refuses the file), a unix: socket, gevent, capture_output, raw_env naming the settings module.
chdir = "/srv/letusgo/current"
bind = "unix:/tmp/letusgo.sock"
daemon = False
worker_class = "gevent"
workers = 3
timeout = 45

errorlog = "/var/log/letusgo/error.log"
accesslog = "/var/log/letusgo/access.log"
capture_output = True

raw_env = ["DJANGO_SETTINGS_MODULE=config.settings.production"]

# Written for greenserve's corpus; stands for the gunicorn configuration of mozilla/ActiveData (resources/config/gunicorn.py): a timeout of one day written as arithmetic, a small backlog, log files in a directory this machine does not have.
bind = "0.0.0.0:8000"
workers = 4
backlog = 100

# a query may run for as long as a day
timeout = 60 * 60 * 24

errorlog = "/data/logs/error.log"
accesslog = "/data/logs/access.log"

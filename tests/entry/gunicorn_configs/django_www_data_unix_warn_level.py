# Written for greenserve's corpus; stands for the gunicorn configuration of grimsmath/scavenger (conf/gunicorn.conf.py): user and group www-data, proc_name, a unix: socket named from a name of the file's own, loglevel "warn" (a level gunicorn does not know), DJANGO_SETTINGS_MODULE set by the file.
import multiprocessing
import os

site = "hunt"
os.environ["DJANGO_SETTINGS_MODULE"] = site + ".settings"

bind = "unix:/var/run/django/%s.sock" % site
proc_name = "django-" + site
workers = 1 + 2 * multiprocessing.cpu_count()

user = "www-data"
group = "www-data"
loglevel = "warn"
timeout = 300
keepalive = 3

# Written for greenserve's corpus; stands for the gunicorn configuration of rushanqa210488/service_fasad (fasad/base/gunicorn_config.py): command and python_path (names of old deployment recipes, no settings), raw_env as one string, and user = "www", a user this machine does not have: gunicorn refuses the file.
command = "/srv/shop/venv/bin/gunicorn"
python_path = "/srv/shop/site"
bind = "0.0.0.0:8002"
workers = 3
user = "www"
raw_env = "DJANGO_SETTINGS_MODULE=shop.settings"

# Written for greenserve's corpus; stands for the gunicorn configuration of ammgws/ammcon-frontend (gunicorn_cfg.py): TLS from a certificate and a key named relative to the directory, loglevel in capitals, log files in a relative logs/ directory.
certfile = "site.crt"
keyfile = "site.key"
bind = "0.0.0.0:8443"

loglevel = "DEBUG"
errorlog = "logs/error.log"
accesslog = "logs/access.log"
# workers = 2

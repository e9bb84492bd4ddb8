# Written for greenserve's corpus; stands for the gunicorn configuration of Medioec/ICT3x03-Team-33 (cinema-booking/common/gunicorn_conf.py): TLS with certfile, keyfile and ca_certs, ssl_version = 2 and cert_reqs = 2 as numbers, preload (greenserve's name; gunicorn's is preload_app), graceful_timeout, worker_tmp_dir, ciphers left in comments.
bind = "0.0.0.0:8443"
threads = 4
timeout = 60
graceful_timeout = 60
keepalive = 10
worker_tmp_dir = "/dev/shm"

errorlog = "-"
accesslog = "-"
loglevel = "debug"

certfile = "chain.pem"
keyfile = "key.pem"
ca_certs = "clients-ca.pem"
cert_reqs = 2  # every client shows a certificate signed by ca_certs
ssl_version = 2
preload = True
# ciphers = "ECDHE+AESGCM:!aNULL"

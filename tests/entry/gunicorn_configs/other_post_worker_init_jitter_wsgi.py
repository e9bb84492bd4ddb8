# Written for greenserve's corpus; stands for the gunicorn configuration of mozilla/ichnaea (ichnaea/gunicorn_config.py): a post_worker_init hook that adds a random share of the file's max_requests to worker.max_requests and calls worker.wsgi(None, None) so that the application sets itself up; loglevel "warning".
worker_class = "sync"
timeout = 30
max_requests = 50000
errorlog = "-"
loglevel = "warning"


def post_worker_init(worker):
    import random

    # Up to a tenth more requests for this worker, so that the workers do not restart together.
    worker.max_requests += random.randint(0, max_requests // 10)
    # The application sets itself up on this call instead of on its first request.
    worker.wsgi(None, None)

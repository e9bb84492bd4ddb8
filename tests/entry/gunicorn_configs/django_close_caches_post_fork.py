# Written for greenserve's corpus; stands for the gunicorn configuration of openedx/ecommerce (ecommerce/docker_gunicorn_configuration.py): a post_fork hook closing Django's caches through a function of the file's own, a when_ready hook running Django's check when settings.DEBUG, a pre_request hook logging through worker.log, preload_app, a module imported and never used.
"""Server settings of the shop's container."""
import multiprocessing  # noqa: F401  (left from a worker formula no longer used)

bind = "0.0.0.0:18130"
workers = 2
timeout = 180
preload_app = True


def close_caches():
    """Close every configured cache, so that a worker forked from the master opens its own
    connections instead of sharing the master's sockets with its siblings."""
    from django.conf import settings
    from django.core import cache as django_cache

    for alias in settings.CACHES:
        backend = django_cache.caches[alias]
        if hasattr(backend, "close"):
            backend.close()
    if hasattr(django_cache.cache, "close"):
        django_cache.cache.close()


def post_fork(server, worker):
    close_caches()


def pre_request(worker, req):
    worker.log.info("%s %s", req.method, req.path)


def when_ready(server):
    from django.conf import settings
    from django.core.management import call_command

    if settings.DEBUG:  # what runserver checks, in development
        call_command("check")

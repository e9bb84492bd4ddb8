"""The real-framework apps of bench/run.py's `flask`, `django` and `flask-wait` scenarios.

    BENCH_APP=bench.frameworks:flask_app    Flask 3: GET /json, GET /wait
    BENCH_APP=bench.frameworks:django_app   Django 5: GET /json

Each app is built on first access to its name (a module ``__getattr__``), so a server that
serves the Flask app never imports Django, and the other way round. Every launcher in
bench/servers/ serves the app that ``BENCH_APP`` names (bench/servers/_common.py).

- ``flask_app``: ``/json`` is TechEmpower's JSON test, ``jsonify(message="Hello, World!")``.
  ``/wait`` waits 10 ms, as a view waiting on a database or another service would, then answers
  the same JSON. How it waits is up to the server's model, and bench/run.py says which in
  ``BENCH_WAIT``: ``gevent`` (``gevent.sleep(0.01)``, cooperative: the other connections are
  served meanwhile) for the servers that run the app in gevent greenlets; ``time``
  (``time.sleep(0.01)``) for the others: granian and waitress run the app in threads, so the
  wait releases the GIL and blocks only its thread; bjoern has one thread, so its whole server
  waits. Unset, the view decides by itself: ``gevent.sleep`` in a greenlet that gevent's hub
  runs, else ``time.sleep``. Under monkey-patching the two are the same call.
- ``django_app``: a Django project in one module, with ``settings.configure()``: ``DEBUG=False``,
  ``ALLOWED_HOSTS`` for loopback, the security, common and clickjacking middleware, no
  installed apps and no database, and one URL, ``json``, a ``JsonResponse`` view. Everything
  else is Django's default.
"""

import os
import time

MESSAGE = {"message": "Hello, World!"}
WAIT_SECONDS = 0.01

DJANGO_MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]


def wait_function(how=None):
    """The 10 ms wait of /wait: ``BENCH_WAIT`` (``gevent`` or ``time``), or chosen per call when unset."""
    how = how if how is not None else os.environ.get("BENCH_WAIT", "")
    if how == "gevent":
        import gevent

        return gevent.sleep
    if how == "time":
        return time.sleep
    if how:
        raise ValueError("BENCH_WAIT must be gevent or time, not %r" % how)

    def wait(seconds):
        import gevent
        from gevent.hub import Hub

        # A greenlet that gevent's hub runs (its parent) waits cooperatively; a thread, or bjoern's
        # one loop, has no hub above it.
        (gevent.sleep if isinstance(gevent.getcurrent().parent, Hub) else time.sleep)(seconds)

    return wait


def create_flask_app():
    from flask import Flask, jsonify

    app = Flask("bench.frameworks")
    wait = wait_function()

    @app.route("/json")
    def json_view():
        return jsonify(MESSAGE)

    @app.route("/wait")
    def wait_view():
        wait(WAIT_SECONDS)
        return jsonify(MESSAGE)

    return app


def json_response(request):
    from django.http import JsonResponse

    return JsonResponse(MESSAGE)


def create_django_app():
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DEBUG=False,
            SECRET_KEY="greenserve-bench-not-a-secret",
            ALLOWED_HOSTS=["127.0.0.1", "localhost"],
            ROOT_URLCONF=__name__,  # urlpatterns, below
            MIDDLEWARE=DJANGO_MIDDLEWARE,
            INSTALLED_APPS=[],
            DATABASES={},
        )
    django.setup(set_prefix=False)
    from django.core.wsgi import get_wsgi_application

    return get_wsgi_application()


def create_urlpatterns():
    from django.urls import path

    return [path("json", json_response)]


FACTORIES = {"flask_app": create_flask_app, "django_app": create_django_app, "urlpatterns": create_urlpatterns}


def __getattr__(name):
    """Builds flask_app, django_app or Django's urlpatterns on first access, then keeps it."""
    factory = FACTORIES.get(name)
    if factory is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    value = globals()[name] = factory()
    return value

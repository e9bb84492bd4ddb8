"""greenserve: a fast, strict HTTP/1.1 and HTTP/2 WSGI server on gevent.

Public API: ``WSGIServer`` (the constructor and methods of ``gevent.pywsgi.WSGIServer``),
``serve(app, host, port, **settings)``, ``run(factory, workers=N, ...)`` (any gevent server under
the pre-fork master), ``daemonize()`` (safe before or after gevent is imported), and
``__version__``; ``RequestTimeout``, what ``request_timeout`` interrupts an application with.
Importing greenserve patches
nothing: monkey-patching is the caller's choice (the ``greenserve`` command does it for you).
"""

from greenserve import _accel
from greenserve._version import __version__

# Decide, before any hot-path module is imported, whether it runs compiled or as pure Python.
_accel.install()
del _accel

__all__ = ["WSGIServer", "serve", "run", "daemonize", "RequestTimeout", "__version__"]


def __getattr__(name):
    # Lazy, so that ``import greenserve`` (for __version__, or from the CLI before patching)
    # does not import gevent's server machinery.
    if name == "WSGIServer":
        from greenserve.server import WSGIServer

        return WSGIServer
    if name == "serve":
        from greenserve.entry.api import serve

        return serve
    if name == "run":
        from greenserve.entry.run import run

        return run
    if name == "RequestTimeout":
        from greenserve.wsgi import RequestTimeout

        return RequestTimeout
    if name == "daemonize":
        from greenserve.process.daemon import daemonize

        return daemonize
    raise AttributeError("module 'greenserve' has no attribute %r" % name)

"""``serve()``: the one-line way to run a WSGI application with greenserve from Python."""

import signal
import threading

from greenserve.listeners import listening_line
from greenserve.server import WSGIServer


def serve(application, host="127.0.0.1", port=8000, log=None, **settings):
    """Serve ``application`` on ``host:port`` until SIGTERM or SIGINT, then stop gracefully.

    ``settings`` are those of docs/settings.md marked *API* (``keepalive=10``,
    ``limit_request_line=8190``, ...), plus gevent.pywsgi's ``spawn``, ``backlog``, ``error_log``
    and TLS keywords (``certfile``, ``keyfile``, ``ssl_context``). Access logging is off unless
    ``log`` is given (a stream, a ``logging.Logger`` or ``'default'`` for standard error).
    Like ``gevent.pywsgi``, this does not monkey-patch: call ``gevent.monkey.patch_all()``
    first if the application needs cooperative I/O (the ``greenserve`` command does it for you).
    Says where it listens in one INFO line to ``error_log`` (standard error by default), as the
    command does.
    """
    server = WSGIServer((host, int(port)), application, log=log, **settings)
    server.start()
    server.error_log.info(listening_line(server.socket, server.ssl_enabled))
    return serve_until_signalled(server)


def serve_until_signalled(server):
    """``server.serve_forever()``, stopped gracefully by SIGTERM or SIGINT; returns the server.

    The signals are handled on the event loop (``gevent.signal_handler``), not as Python's
    KeyboardInterrupt, which would land in whichever greenlet happened to run (a connection's,
    the sweeper's) instead of stopping the server. From a thread other than the main one,
    signals cannot be handled, and this is plain ``serve_forever()``.
    """
    import gevent

    if threading.current_thread() is threading.main_thread():
        stopping = []

        def stop():
            if not stopping:
                stopping.append(True)
                gevent.spawn(server.stop)

        handlers = [gevent.signal_handler(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)]
    else:
        handlers = []
    try:
        server.serve_forever()
    finally:
        for handler in handlers:
            handler.cancel()
    return server

"""``greenserve.run()``: any gevent server (not only HTTP) under greenserve's pre-fork master.

    from gevent.server import StreamServer
    import greenserve

    def echo(sock, address):
        for data in iter(lambda: sock.recv(1024), b""):
            sock.sendall(data)

    greenserve.run(lambda listener: StreamServer(listener, echo), bind="127.0.0.1:9000", workers=2)

The master binds, forks ``workers`` processes and watches them exactly as for the ``greenserve``
command: gevent reinitialized and patched in each worker before ``factory`` runs, heartbeats from
the event loop, and the same signals (TERM/INT graceful, QUIT fast, HUP reload, TTIN/TTOU).
``factory(listener)`` is called in each worker once per bound socket and returns a server with
``start()`` and ``stop(timeout)`` (gevent's ``StreamServer``, ``WSGIServer``, ...).
"""

import os
import sys

from greenserve.process import arbiter, worker


def run(factory, bind="127.0.0.1:8000", workers=1, patch="all", graceful_timeout=30.0, timeout=30.0,
        backlog=2048, log=None, unix_socket_mode=None, unix_socket_group=None, **options):
    """Serve until a signal stops the master; return its exit code. See the module docstring.

    ``bind`` is one address or a list (``HOST:PORT``, ``[IPV6]:PORT``, ``unix:PATH``,
    ``fd://N``); ``unix_socket_mode`` (default ``0o660``) and ``unix_socket_group`` (a name or
    gid) are the settings of those names, for ``unix:`` addresses; ``log`` an object with
    info/warning/error (default: greenserve's error log on standard error); ``options`` are those of ``process.worker.WorkerOptions`` (``resolver``,
    ``loop``, ``max_requests``, ``max_blocking_time``, ``user``, ``group``, ...).
    """
    from greenserve._version import __version__
    from greenserve.errorlog import ErrorLog
    from greenserve.listeners import make_listener, unix_socket_warning, url
    from greenserve.process import patching
    from greenserve.settings import Config, parse_bind

    if log is None:
        log = ErrorLog(sys.stderr, "info")
    patch = patching.parse_patch_spec(patch) if isinstance(patch, str) else patch
    specs = [parse_bind(text) for text in ([bind] if isinstance(bind, str) else bind)]
    given = {} if unix_socket_mode is None else {"unix_socket_mode": unix_socket_mode}
    unix_socket_mode = Config(**given).unix_socket_mode  # SettingError naming it when invalid
    listeners = [make_listener(spec, backlog, unix_mode=unix_socket_mode, unix_group=unix_socket_group) for spec in specs]
    for spec in specs:
        warning = unix_socket_warning(spec, unix_socket_mode, unix_socket_group)
        if warning:
            log.warning(warning)
    worker_options = worker.WorkerOptions(
        patch=patch, graceful_timeout=graceful_timeout, timeout=timeout, log=log, **options
    )

    def boot():
        servers = [factory(listener) for listener in listeners]
        if workers > 1:
            for server in servers:
                _say_multiprocess(server)
        return servers

    def on_ready():
        # The greenserve command's lines, so that logs read the same however the master runs.
        for listener in listeners:
            log.info("greenserve %s listening on %s" % (__version__, url(listener)))
        log.info("master pid %d, %d worker(s)" % (os.getpid(), workers))

    master = arbiter.Arbiter(
        lambda heartbeat_fd: worker.serve(heartbeat_fd, boot, worker_options),
        workers=workers, timeout=timeout, graceful_timeout=graceful_timeout, log=log, on_ready=on_ready,
    )
    try:
        code = master.run()
        if code == 0:
            log.info("stopped")
        return code
    finally:
        for listener in listeners:
            listener.close()


def _say_multiprocess(server):
    """Set ``wsgi.multiprocess`` (PEP 3333) in a WSGI server's environ: other workers serve too.

    greenserve's ``WSGIServer.environ`` and gevent.pywsgi's are both the dict every request's
    environ starts from; a server without one (a plain StreamServer) is not WSGI.
    """
    environ = getattr(server, "environ", None)
    if isinstance(environ, dict):
        environ["wsgi.multiprocess"] = True

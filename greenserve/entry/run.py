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

# Hooks of a WSGI application or of TLS, which run() does not make: the factory's server does.
_FACTORYS_OWN = ("pre_request", "post_request", "ssl_context")


def run(factory, log=None, config=None, **settings):
    """Serve until a signal stops the master; return its exit code. See the module docstring.

    ``settings`` are the table's, by name, with its defaults (docs/settings.md): the master and
    its workers read ``bind`` (one address or a list: ``HOST:PORT``, ``[IPV6]:PORT``,
    ``unix:PATH``, ``fd://N``), ``backlog``, ``reuse_port``, ``unix_socket_mode``,
    ``unix_socket_group``, ``workers``, ``worker_connections`` (the open-file limit is raised
    for it), ``timeout``, ``graceful_timeout``, ``max_requests``, ``max_requests_jitter``,
    ``max_worker_memory``, ``max_worker_memory_hard``, ``max_worker_lifetime``,
    ``max_worker_lifetime_jitter``, ``max_blocking_time``, ``user``, ``group``, ``umask``,
    ``chdir``, ``raw_env``, ``pid``, ``patch``, ``monkey_patch``, ``resolver``, ``loop``,
    ``metrics_bind`` and ``prometheus_multiproc_dir`` (the master's /metrics; requests are
    counted in greenserve's ``WSGIServer``, the process gauges for any server) and ``reload``
    (with ``reload_dir`` and ``reload_extra_file``: new workers when a source file changes); the
    HTTP settings are those of the server ``factory`` makes. ``log``: an object with
    info/warning/error (default: the error log of the settings, ``error_log`` and
    ``log_level``: standard error unless they say otherwise). The server hooks (docs/hooks.md)
    are keywords too, callables or 'module:function' strings, except pre_request, post_request
    and ssl_context: what ``factory`` makes is not known to be WSGI or TLS, so they belong to the
    server it makes. ``config``: a config file, as ``greenserve -c`` reads it (a
    gunicorn.conf.py loads too); the keywords override it, and SIGHUP reads it again.

    The start is the command's pre-flight (``entry.startup``; all but the TLS context, which is
    the factory's server's). A bad setting, a config file that does not load, an unknown user or
    group, a pid file naming a running process raise SettingError (the command's line; a hook's
    string that does not resolve: HookError), an address that cannot be had ListenerError, all
    before anything is forked.
    """
    from greenserve.entry.configfile import Loader

    # Keywords are the flags of an embedding: after the file, as the command's flags are.
    loader = Loader(path=config, flags=settings, flag_source="keyword", flag_prefix="")
    loaded = loader.load()
    return run_config(factory, loaded.config, log, loaded=loaded,
                      reread=loader.reload if loader.path is not None else None)


def run_config(factory, config, log=None, loaded=None, reread=None):
    """``run()`` with a ``settings.Config`` made already (the PasteDeploy runner's): the
    pre-flight, then the master until a signal stops it. ``loaded``: the config loader's
    ``Loaded``, when the Config came from one; ``reread``: what SIGHUP loads again (Master)."""
    from greenserve.entry.startup import RUN, Startup
    from greenserve.process.master import Master
    from greenserve.settings import SettingError

    start = Startup(config, loaded, log=log, skip=RUN)
    start.through("check")
    for name in _FACTORYS_OWN:
        if getattr(config, name) is not None:
            raise SettingError(
                "%s: run() serves whatever the factory makes; give it to the server the factory makes "
                "(the greenserve command takes it for its WSGI application)" % name, setting=name)
    start.through()
    try:
        start.write_pid()
        return Master(
            config, start.sockets, lambda listeners: [factory(sock) for sock in listeners], start.error_log,
            reopen_logs=start.reopen_logs if start.opened_logs else None, notes=start.notes, reread=reread,
            default_name=_script_name(), hooks=start.hooks, systemd=start.systemd,
        ).run()
    finally:
        start.close()


def _script_name():
    """The processes' titles' name without --name: the script that called run() (there is no
    MODULE:APP to name, as the command has)."""
    script = sys.argv[0] if sys.argv else ""
    if script in ("", "-c"):
        return "greenserve"
    return os.path.basename(script)

"""A drop-in for ``paste.httpserver``: change the import, keep the call.

    from greenserve import httpserver          # was: from paste import httpserver
    httpserver.serve(app, host="127.0.0.1", port="8080", use_threadpool=True, threadpool_workers=10)

``serve()`` takes every keyword of ``paste.httpserver.serve()``; docs/migrating.md says what each
becomes. paste serves one request per thread; greenserve serves one connection per greenlet, so
the values sized for threads (10 workers, a listen queue of 5) are floors here, not bounds: with
keep-alive, a pool of 10 *connections* would leave the 11th client waiting for an idle one to
time out.

``server_runner`` is the PasteDeploy entry point (``use = egg:greenserve`` in ``[server:main]``):
it takes paste's ``.ini`` keys, greenserve's own settings by name, and ``workers``.

Like paste, nothing is monkey-patched here: patch before importing your application if it does
blocking I/O (docs/patching.md), or use the ``greenserve`` command, which does.
"""

import difflib
import os
import sys
import warnings

__all__ = ["serve", "server_runner"]

# paste's defaults were sized for threads; see the module docstring.
_MIN_CONNECTIONS = 1000
_MIN_BACKLOG = 2048

# threadpool_options that only mean something for paste's thread pool.
_THREADPOOL_ONLY = frozenset((
    "hung_thread_limit", "kill_thread_limit", "dying_limit", "spawn_if_under", "max_zombie_threads_before_die",
    "hung_check_period", "logger", "error_email", "max_requests",
))


def serve(application, host=None, port=None, handler=None, ssl_pem=None, ssl_context=None, server_version=None,
          protocol_version=None, start_loop=True, daemon_threads=None, socket_timeout=None, use_threadpool=None,
          threadpool_workers=10, threadpool_options=None, request_queue_size=5, **settings):
    """Serve ``application`` as ``paste.httpserver.serve()`` would; return the server.

    With ``start_loop=True`` (the default) it serves until Ctrl-C or SIGTERM, then stops
    gracefully and returns the server; with ``start_loop=False`` it returns the server bound and listening,
    for you to call ``serve_forever()``. Extra keywords are greenserve settings
    (``keepalive=10``, ``limit_request_body=...``; docs/settings.md).
    """
    from greenserve.server import WSGIServer

    if handler is not None:
        raise TypeError(
            "httpserver.serve(handler=%r): greenserve does not run BaseHTTPRequestHandler classes; "
            "wrap the application in WSGI middleware instead (docs/migrating.md)" % (handler,)
        )
    if protocol_version not in (None, "HTTP/1.0", "HTTP/1.1"):
        raise ValueError("httpserver.serve(protocol_version=%r): expected 'HTTP/1.0' or 'HTTP/1.1'" % (protocol_version,))
    context = _ssl_context(ssl_pem, ssl_context)
    host, port = _address(host, port, context is not None)
    connections = _connections(threadpool_workers, threadpool_options)
    _apply_paste_options(settings, context, socket_timeout, server_version)
    server = WSGIServer(
        (host, port),
        application,
        backlog=max(_MIN_BACKLOG, int(request_queue_size)),
        spawn=connections,
        **settings,
    )
    server.init_socket()  # bound and listening now, as paste's server is once constructed
    if not start_loop:
        return server
    return _serve_forever(server, host)


def _address(host, port, tls):
    """serve()'s host and port as paste takes them: defaults, "HOST:PORT" in host, a port as text."""
    if host is None:
        host = "127.0.0.1"
    if port is None and ":" in host and not host.startswith("["):
        host, port = host.rsplit(":", 1)  # paste accepts host="127.0.0.1:8080"
    if port is None:
        port = 4443 if tls else 8080
    try:
        port = int(port)  # paste takes it as a string too
    except (TypeError, ValueError):
        raise ValueError("httpserver.serve(port=%r): not a port number" % (port,)) from None
    return host, port


def _serve_forever(server, host):
    """Say where, as paste does, and serve until Ctrl-C (or SIGTERM): graceful, requests in flight finish."""
    scheme = "https" if server.ssl_context is not None else "http"
    shown = "[%s]" % host if ":" in host else host
    print("serving on %s://%s:%d" % (scheme, shown, server.server_port), flush=True)
    from greenserve.entry.api import serve_until_signalled

    return serve_until_signalled(server)


def _connections(threadpool_workers, threadpool_options, warn=True):
    """The connection pool's size: paste's worker count, but never below greenserve's default.
    ``warn``: about the options that only mean something to paste's thread pool."""
    options = dict(threadpool_options or {})
    workers = options.pop("nworkers", None) or threadpool_workers
    try:
        workers = int(workers)
    except (TypeError, ValueError):
        raise ValueError("httpserver.serve(threadpool_workers=%r): not a number" % (workers,)) from None
    ignored = sorted(set(options) & _THREADPOOL_ONLY)
    unknown = sorted(set(options) - _THREADPOOL_ONLY)
    if unknown:
        raise TypeError("httpserver.serve(threadpool_options=...): unknown option(s) %s" % ", ".join(unknown))
    if ignored and warn:
        warnings.warn(
            "greenserve.httpserver: threadpool_options %s only apply to paste's thread pool; ignored"
            % ", ".join(ignored),
            stacklevel=3,
        )
    return max(_MIN_CONNECTIONS, workers)


def _apply_paste_options(settings, context, socket_timeout, server_version):
    """paste's socket_timeout, server_version and TLS context, as greenserve settings."""
    if socket_timeout is not None:
        timeout = float(socket_timeout)
        for name in ("keepalive", "header_timeout", "body_timeout", "send_timeout"):
            settings.setdefault(name, timeout)
    if server_version is not None:
        settings.setdefault("server_header", server_version)
    if context is not None:
        settings["ssl_context"] = context


def _ssl_context(ssl_pem, ssl_context):
    if ssl_context is not None:
        import ssl

        if not isinstance(ssl_context, ssl.SSLContext):
            raise TypeError(
                "httpserver.serve(ssl_context=%r): greenserve takes the standard library's "
                "ssl.SSLContext, not a pyOpenSSL context" % (ssl_context,)
            )
        return ssl_context
    if ssl_pem is None:
        return None
    if ssl_pem == "*":
        raise ValueError(
            "httpserver.serve(ssl_pem='*'): greenserve does not make throwaway certificates; "
            "pass a PEM file holding the certificate and its key"
        )
    from greenserve.server import make_ssl_context

    return make_ssl_context({"certfile": ssl_pem})


def server_runner(wsgi_app, global_conf, **kwargs):
    """PasteDeploy's server entry point: ``[server:main]`` with ``use = egg:greenserve``.

    Keys: paste's (``host``, ``port``, ``use_threadpool``, ``threadpool_workers``,
    ``threadpool_*``, ``socket_timeout``, ``request_queue_size``, ``ssl_pem``, ...), greenserve's
    settings by name (``keepalive``, ``limit_request_body``, ...), ``workers``: more than one
    runs a pre-fork master, as the ``greenserve`` command does (without patching: patch in your
    application's package if it needs it), and ``user`` and ``group``: what the processes that
    serve switch to once the port is bound. The start is the command's pre-flight
    (``entry.startup``): the open-file limit raised for the connections, the accounts checked
    before anything is bound. An unknown key, a bad value or anything the pre-flight refuses ends
    the process with one line on standard error and exit code 2, as the command's usage errors do.
    """
    try:
        workers, options, settings, accounts = _server_keys(kwargs)
    except ValueError as exc:
        _refuse(global_conf, exc)
    if workers == 1:
        return _serve_one(wsgi_app, global_conf, options, settings, accounts)
    return _serve_with_workers(wsgi_app, global_conf, workers, options, settings, accounts)


# The master's settings a [server] section takes besides greenserve's API ones: the accounts the
# processes that serve switch to.
_ACCOUNT_KEYS = ("user", "group")


def _server_keys(kwargs):
    """The ``[server]`` section's keys as (workers, serve()'s options, greenserve settings, accounts)."""
    from greenserve.settings import SETTINGS_BY_NAME

    options = {}
    settings = {}
    accounts = {}
    threadpool_options = {}
    workers = 1
    for name, value in kwargs.items():
        if name == "workers":
            workers = _int_key(name, value)
        elif name in ("port", "threadpool_workers", "request_queue_size"):
            options[name] = _int_key(name, value)
        elif name == "socket_timeout":
            try:
                options[name] = float(value)
            except ValueError:
                raise ValueError("%s = %r: not a number of seconds" % (name, value)) from None
        elif name in ("use_threadpool", "daemon_threads", "start_loop"):
            options[name] = _bool_key(name, value)
        elif name in _PASTE_TEXT_KEYS:
            options[name] = value
        elif name.startswith("threadpool_"):
            threadpool_options[name[len("threadpool_"):]] = value
        elif name in _ACCOUNT_KEYS or (name in SETTINGS_BY_NAME and SETTINGS_BY_NAME[name].api):
            try:
                converted = SETTINGS_BY_NAME[name].convert(value)
            except ValueError as exc:
                raise ValueError("%s = %r: %s" % (name, value, exc)) from None
            (accounts if name in _ACCOUNT_KEYS else settings)[name] = converted
        else:
            known = _PASTE_KEYS + [key for key, setting in SETTINGS_BY_NAME.items() if setting.api]
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.75)
            raise ValueError(
                "%s: not a key greenserve knows%s (docs/migrating.md lists them, docs/settings.md the settings)"
                % (name, "; did you mean %s?" % " or ".join(close) if close else "")
            )
    if threadpool_options:
        options["threadpool_options"] = threadpool_options
    return workers, options, settings, accounts


_PASTE_TEXT_KEYS = ("host", "ssl_pem", "server_version", "protocol_version")
_PASTE_KEYS = [
    "workers", "port", "threadpool_workers", "request_queue_size", "socket_timeout", "use_threadpool",
    "daemon_threads", "start_loop", *_PASTE_TEXT_KEYS, *_ACCOUNT_KEYS,
]


def _refuse(global_conf, exc):
    """One line and exit code 2, the greenserve command's way with a usage mistake.

    Not an exception: pserve catches SystemExit around the server runner, prints "Exiting" and
    exits 0, and anything else becomes a 20-line traceback through paste.deploy for a typo in
    the .ini. Nothing runs yet (no socket bound, no thread started) that exiting would cut short.
    """
    where = global_conf.get("__file__")
    line = "greenserve: error: %s[server] %s\n" % (where + ": " if where else "", exc)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os.write(2, line.encode("utf-8", "replace"))
    os._exit(2)


def _config(options, settings, accounts, **values):
    """The Config the pre-flight checks: the section's settings and accounts, and the connections
    a process holds (``_connections``), which its open-file limit is raised for."""
    from greenserve.settings import Config

    connections = _connections(options.get("threadpool_workers", 10), options.get("threadpool_options"), warn=False)
    return Config(worker_connections=connections, **settings, **accounts, **values)


def _refusal(exc):
    """A pre-flight refusal as the section names it: by its key (``user: unknown user 'x'``), or whole."""
    setting, reason = getattr(exc, "setting", None), getattr(exc, "reason", None)
    return "%s: %s" % (setting, reason) if setting and reason else exc


def _serve_one(wsgi_app, global_conf, options, settings, accounts):
    """``workers = 1``: one server in this process (pserve's), after the pre-flight's checks; it
    switches to ``user`` and ``group`` once the port is bound."""
    from greenserve.entry.startup import ONE_PROCESS, Startup, refusals

    start = Startup(_config(options, settings, accounts), skip=ONE_PROCESS)
    try:
        start.through()
    except refusals() as exc:
        _refuse(global_conf, _refusal(exc))
    for level, note in start.notes:
        sys.stderr.write("greenserve: %s: %s\n" % (level, note))
    server = serve(wsgi_app, **dict(options, start_loop=False), **settings)
    if accounts:
        from greenserve.process.daemon import drop_privileges

        try:
            drop_privileges(accounts.get("user"), accounts.get("group"))
        except OSError as exc:
            server.close()
            _refuse(global_conf, "%s: %s" % ("user" if "user" in accounts else "group", exc))
    if not options.get("start_loop", True):
        return server
    _serve_forever(server, _address(options.get("host"), options.get("port"), server.ssl_context is not None)[0])
    print("stopped", flush=True)  # beside "serving on", where pserve's user reads it
    return server


def _serve_with_workers(wsgi_app, global_conf, workers, options, settings, accounts):
    from greenserve.entry.run import run_config
    from greenserve.entry.startup import refusals

    host = options.get("host") or "127.0.0.1"
    port = options.get("port") or 8080
    bind = "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)

    def factory(listener):
        server_options = dict(options, start_loop=False)
        server_options.pop("host", None)
        server_options.pop("port", None)
        return _server_on(listener, wsgi_app, server_options, settings)

    try:
        return run_config(factory, _config(options, settings, accounts, bind=bind, workers=workers, patch="none"))
    except refusals() as exc:
        _refuse(global_conf, _refusal(exc))


def _server_on(listener, wsgi_app, options, settings):
    from greenserve.server import WSGIServer

    settings = dict(settings)
    context = _ssl_context(options.get("ssl_pem"), None)
    _apply_paste_options(settings, context, options.get("socket_timeout"), options.get("server_version"))
    connections = _connections(options.get("threadpool_workers", 10), options.get("threadpool_options"))
    return WSGIServer(listener, wsgi_app, spawn=connections, **settings)


def _int_key(name, value):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError("%s = %r: not a whole number" % (name, value)) from None


def _bool_key(name, value):
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError("%s = %r: not true or false" % (name, value))


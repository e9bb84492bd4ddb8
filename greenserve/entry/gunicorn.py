"""greenserve as a gunicorn worker class: ``gunicorn -k greenserve.workers.GreenserveWorker app:app``.

gunicorn keeps what it is good at -- its arbiter, its configuration files and flags, its hooks,
its logging (files, syslog, statsd) -- and each worker serves with greenserve's HTTP core instead
of gevent.pywsgi or gunicorn's own parser. The worker is gunicorn's gevent worker with the server
swapped, so patching happens where gunicorn's gevent users expect it (first thing in the worker,
before the application is imported), and the heartbeat is written from a greenlet on the event
loop: a worker whose loop is blocked stops beating and gunicorn's ``timeout`` replaces it.

Settings are read from gunicorn's configuration; the mapping is in ``docs/gunicorn.md``. A
setting greenserve cannot honour is named in a warning when the worker boots, never ignored
silently.
"""

import datetime
import os
import signal
import sys

try:
    from gunicorn.workers.ggevent import GeventWorker
except ImportError as exc:  # gunicorn or gevent missing: say which, in one line
    raise ImportError("greenserve.workers needs gunicorn and gevent (pip install gunicorn gevent): %s" % exc) from None

from greenserve.observe.accesslog import AccessLog

__all__ = ["GreenserveWorker"]

# gunicorn's "0 means unlimited" for the request limits becomes a bound no real request reaches:
# greenserve keeps every limit finite (a head is buffered whole before it is parsed).


# The worker class's switch for overload control: off, false, no or 0 turn it off.
OVERLOAD_ENV = "GREENSERVE_OVERLOAD_CONTROL"


def _overload_control(value):
    if value is None or not value.strip():
        return True
    word = value.strip().lower()
    if word in ("off", "false", "no", "0"):
        return False
    if word in ("on", "true", "yes", "1"):
        return True
    from greenserve.settings import SettingError

    raise SettingError("%s=%r: expected on or off" % (OVERLOAD_ENV, value))


def _changed(cfg, name):
    """Was this gunicorn setting changed from its default? (Defaults are stored unvalidated:
    "h1" for the value ["h1"].)"""
    setting = cfg.settings.get(name)
    if setting is None:
        return False  # an older gunicorn without it
    default = setting.default
    try:
        default = setting.validator(default)
    except Exception:  # noqa: BLE001 - a validator refusing its own default: compare as stored
        pass
    return setting.value != default


# gunicorn settings that change behaviour greenserve does not have, and why each is refused.
_NOT_HONOURED = (
    ("proxy_protocol", "this worker class does not read the PROXY protocol; the greenserve command does (--proxy-protocol)"),
    ("permit_obsolete_folding", "obsolete line folding is always refused (RFC 9112 section 5.2)"),
    ("strip_header_spaces", "a space before the colon is always refused (RFC 9112 section 5.1)"),
    ("permit_unconventional_http_method", "methods are checked against the token grammar (RFC 9110 section 9)"),
    ("permit_unconventional_http_version", "only HTTP/1.0 and HTTP/1.1 are served"),
    ("casefold_http_method", "methods are case-sensitive (RFC 9110 section 9.1)"),
    ("header_map", "header names with underscores are always dropped"),
    ("forwarder_headers", "only the scheme headers (secure_scheme_headers) are read from a proxy"),
    ("pre_request", "gunicorn's request object does not exist in this worker"),
    ("post_request", "gunicorn's request object does not exist in this worker"),
)


# gunicorn 25-27's HTTP/2 settings, the same names and meanings as ours.
_HTTP2_SETTINGS = ("http_protocols", "http2_max_concurrent_streams", "http2_initial_window_size",
                   "http2_max_frame_size", "http2_max_header_list_size")


def _http2_settings(cfg):
    """The HTTP/2 settings of gunicorn's configuration that this worker takes (none from a
    gunicorn without them). http2_cleartext's upgrade is not offered (h2c by Upgrade: see
    settings.py), so it is off here and both is prior-knowledge; _boot_report says so."""
    settings = {name: cfg.settings[name].get() for name in _HTTP2_SETTINGS if name in cfg.settings}
    if "http2_cleartext" in cfg.settings:
        cleartext = cfg.settings["http2_cleartext"].get()
        settings["http2_cleartext"] = {"upgrade": "off", "both": "prior-knowledge"}.get(cleartext, cleartext)
    return settings


# What gunicorn's arbiter sends its workers to stop them: TERM (graceful), QUIT and INT (now).
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGQUIT, signal.SIGINT)


class GreenserveWorker(GeventWorker):
    """gunicorn's gevent worker serving with greenserve's HTTP/1.1 core."""

    def init_process(self):
        # A worker starts with the arbiter's signal handlers, which only queue the signal in
        # the worker's copy of the arbiter, until gunicorn's init_signals() replaces them after
        # patching; its own TERM handler then only ends the loop of run(), after the
        # application's import. A stop in that window (a slow post_fork hook, patching, a slow
        # import) was lost or waited for the import, and the arbiter's stop waited its whole
        # graceful_timeout for this worker. Until the worker serves nothing is in flight, so a
        # stop signal ends it at once, the ones already queued included.
        inherited = signal.getsignal(signal.SIGTERM)
        for signum in _STOP_SIGNALS:
            signal.signal(signum, self._stop_while_booting)
        if _stop_queued(inherited):  # read after ours took over: none can fall in between
            sys.exit(0)
        super().init_process()

    def _stop_while_booting(self, signum, frame):
        self.alive = False
        sys.exit(0)

    def handle_exit(self, signum, frame):
        if not self.booted:
            self._stop_while_booting(signum, frame)
        super().handle_exit(signum, frame)

    def handle_quit(self, signum, frame):
        if not self.booted:
            self._stop_while_booting(signum, frame)
        super().handle_quit(signum, frame)

    def patch(self):
        from greenserve.process import patching

        # patch_all(), as gunicorn's gevent worker does, but recorded: what was imported before
        # (with --preload, the whole application) is reported at boot instead of leaving a
        # MonkeyPatchWarning on stderr.
        self._patch_state = patching.apply("all")
        from gevent import socket

        self.sockets = [socket.socket(s.FAMILY, socket.SOCK_STREAM, fileno=s.sock.detach()) for s in self.sockets]

    def run(self):
        import gevent

        if not self.alive:
            return  # told to stop between booting and serving
        config = self._config()
        servers = [self._make_server(sock, config) for sock in self.sockets]
        for server in servers:
            server.start()
        self._boot_report()
        while self.alive:
            self.notify()
            if self.max_requests and sum(server.requests_served for server in servers) >= self.max_requests:
                self.log.info("Autorestarting worker after current request.")  # gunicorn's words
                self.alive = False
                break
            gevent.sleep(1.0)
        # Graceful: stop accepting, close idle keep-alive connections, let busy ones finish
        # (each with Connection: close) up to graceful_timeout; beat meanwhile, or the arbiter
        # would take a long drain for a hung worker.
        beating = gevent.spawn(self._beat_while_stopping)
        try:
            gevent.joinall([gevent.spawn(server.stop, self.cfg.graceful_timeout) for server in servers])
        finally:
            beating.kill()

    def _beat_while_stopping(self):
        import gevent

        while True:
            self.notify()
            gevent.sleep(1.0)

    def _config(self):
        """greenserve's settings from gunicorn's configuration (docs/gunicorn.md), checked."""
        from greenserve.settings import Config

        cfg = self.cfg
        config = Config(
            # gunicorn's 0s mean what they mean in greenserve's table: keepalive 0 is no
            # keep-alive, a request limit 0 is no limit (settings.UNLIMITED).
            keepalive=cfg.keepalive,
            graceful_timeout=float(cfg.graceful_timeout),
            limit_request_line=cfg.limit_request_line,
            limit_request_fields=cfg.limit_request_fields,
            limit_request_field_size=cfg.limit_request_field_size,
            log_level="debug",  # gunicorn's logger filters by its own --log-level
            # gunicorn's own rules instead (SecureScheme in _make_server): the scheme from
            # trusted proxies, REMOTE_ADDR always the peer's.
            proxy_headers=False,
            worker_connections=self.worker_connections,
            # Overload control (docs/production.md, "Overload"), on as with the command: gunicorn
            # has no setting for it, so the environment turns it off (raw_env works too), and
            # X-Request-Start counts from gunicorn's forwarded_allow_ips.
            overload_control=_overload_control(os.environ.get(OVERLOAD_ENV)),
            forwarded_allow_ips=cfg.forwarded_allow_ips,
        )
        # gunicorn 26.3's setting (for its asgi worker), the same meaning as ours.
        max_message = getattr(cfg, "websocket_max_message_size", None)
        if max_message is not None:
            config.websocket_max_message_size = max_message
        root_path = getattr(cfg, "root_path", None)
        if root_path:
            config.root_path = root_path
        for name, value in _http2_settings(cfg).items():
            setattr(config, name, value)
        # gunicorn 24's uwsgi protocol (nginx's uwsgi_pass), the same names and meanings as ours.
        if getattr(cfg, "protocol", "http") == "uwsgi":
            config.update(protocol="uwsgi", uwsgi_allow_ips=cfg.uwsgi_allow_ips)
        config.check(tls=bool(cfg.is_ssl))
        return config

    def _make_server(self, sock, config):
        from greenserve import proxy
        from greenserve.observe.errorlog import ErrorLog
        from greenserve.server import WSGIServer

        cfg = self.cfg
        sock.setblocking(False)
        application = self.wsgi
        secure_headers = cfg.secure_scheme_headers
        if secure_headers:
            trusted = proxy.TrustedProxies(cfg.forwarded_allow_ips)
            application = proxy.SecureScheme(application, trusted, secure_headers)
        ssl_args = {}
        if cfg.is_ssl:
            from gunicorn.sock import ssl_context

            ssl_args["ssl_context"] = ssl_context(cfg)
        access = _AccessLog(self.log) if getattr(self.log, "access_log_enabled", True) else None
        return WSGIServer(
            sock,
            application,
            spawn=config.worker_connections,
            log=access,
            error_log=ErrorLog(self.log.error_log, config.log_level),
            environ={"wsgi.multiprocess": cfg.workers > 1},
            config=config,
            **ssl_args,
        )

    def _boot_report(self):
        from greenserve._version import __version__
        from greenserve.process import patching

        cfg = self.cfg
        ignored = ["%s (%s)" % (name, why) for name, why in _NOT_HONOURED if _changed(cfg, name)]
        if "http2_cleartext" in cfg.settings and cfg.settings["http2_cleartext"].get() in ("upgrade", "both"):
            ignored.append("http2_cleartext = %s (h2c by Upgrade is not offered: RFC 9113 deprecates it, and "
                           "it is a request-smuggling path through proxies; prior-knowledge is)"
                           % cfg.settings["http2_cleartext"].get())
        if ignored:
            self.log.warning("greenserve worker: gunicorn settings not honoured: %s" % "; ".join(ignored))
        if self.age == 1:
            # Said by the first worker only (gunicorn's age counts the workers its arbiter
            # forked): every worker patches after the same imports, the arbiter's. gunicorn's
            # own (ssl, with nothing holding its original classes) are no finding.
            late = patching.late_patching_warning(self._patch_state, preload="gunicorn" if cfg.preload_app else None)
            if late:
                self.log.warning("greenserve worker: %s" % late)
        self.log.info("greenserve %s worker serving (pid %d)" % (__version__, os.getpid()))


def _stop_queued(handler):
    """Did a stop signal reach this worker while the arbiter's ``handler`` was installed?

    That handler (gunicorn's ``Arbiter.signal``) puts the signal in ``SIG_QUEUE``, the worker's
    own copy of it since the fork. A stop queued in the arbiter just before the fork is read
    here too: then the arbiter is stopping, and this worker would be told to stop anyway.
    """
    arbiter = getattr(handler, "__self__", None)
    queued = getattr(arbiter, "SIG_QUEUE", None)
    if queued is None:
        return False
    if isinstance(queued, list):  # older gunicorn: a list
        signals = list(queued)
    else:  # a queue.SimpleQueue; draining it is harmless, this copy is never read again
        import queue

        signals = []
        try:
            while True:
                signals.append(queued.get_nowait())
        except queue.Empty:
            pass
    return any(signum in _STOP_SIGNALS for signum in signals)


class _Response:
    """What gunicorn's access-log atoms read from a response."""

    __slots__ = ("status", "headers", "sent")

    def __init__(self, status, headers, sent):
        self.status = status
        self.headers = headers
        self.sent = sent


class _AccessLog(AccessLog):
    """greenserve's access-log interface over gunicorn's logger: every atom gunicorn knows, its
    files, syslog and statsd, and its reopening on USR1."""

    def __init__(self, logger):  # not AccessLog's: gunicorn's logger does the formatting
        self.logger = logger

    def log(self, environ, status, length, duration, headers):
        if "REQUEST_METHOD" not in environ:
            # A request refused before its head could be read (a 400 or 431): gunicorn's
            # atoms need these three.
            environ = dict(environ, REQUEST_METHOD="-", RAW_URI="-", SERVER_PROTOCOL="-")
        request_headers = [(key[5:].replace("_", "-"), value) for key, value in environ.items() if key[:5] == "HTTP_"]
        self.logger.access(
            _Response(status, headers or [], length),
            request_headers,
            environ,
            datetime.timedelta(seconds=duration),
        )

"""``WSGIServer``: gevent's ``StreamServer`` accept loop, serving each connection with greenserve's HTTP core.

The constructor and methods are those of ``gevent.pywsgi.WSGIServer``, so a script changes only
its import: ``WSGIServer(listener, application, backlog=None, spawn='default', log='default',
error_log='default', environ=None, **ssl_args)``; greenserve's own settings (docs/settings.md)
are accepted as further keywords, or all at once as ``config=`` (a ``settings.Config``).
``stop()`` drains: it stops accepting, closes idle keep-alive connections at once, lets in-flight
requests finish with ``Connection: close`` for up to ``graceful_timeout`` seconds, then closes
what is left.

This module imports neither ``ssl`` nor the application: TLS is set up only when asked for, so
that importing greenserve before monkey-patching does not leave an unpatched ``ssl`` behind.
"""

from time import monotonic

import _socket  # (the C module: SOCK_NONBLOCK, which only Linux's accept4 path uses)

import gevent
from gevent.event import Event
from gevent.server import StreamServer

from greenserve.connection import Expired, accepted_socket, nonblocking_acceptor, serve_connection, serve_received
from greenserve.http.framing import server_line_for
from greenserve.http11 import Http11Protocol
from greenserve.http.parser import Limits
from greenserve.observe import accesslog
from greenserve.observe.errorlog import ErrorLog
from greenserve.observe.stats import Sink
from greenserve.pool import ConnectionPool
from greenserve.settings import Config, SETTINGS_BY_NAME
from greenserve.wsgi import ConnectionSetup, roomy_copy, server_environ

# The TLS keywords of gevent's StreamServer (and ssl.wrap_socket), accepted as they are.
SSL_ARGUMENTS = frozenset(
    (
        "keyfile",
        "certfile",
        "ca_certs",
        "cert_reqs",
        "ssl_version",
        "ciphers",
        "ssl_context",
        "server_side",
        "do_handshake_on_connect",
        "suppress_ragged_eofs",
    )
)

_RECV_BUFFER_SIZE = 65536
# When the pool is full, a connection whose request head is still incomplete after this many
# seconds gives way to the clients waiting to be accepted (Connection.make_room). A real client
# sends its head in one packet right after connecting; one that has not within a second, while
# others wait, is a slow link or a slowloris, and under pressure both are told 408.
PRESSURE_GRACE = 1.0
# The warning that clients wait for a full pool is repeated at most this often: a pool that
# stays full would otherwise say it at every sweep (up to once a second per worker), burying the
# rest of the error log; once a minute is enough to be seen, and the metrics count every time.
_PRESSURE_WARNING_INTERVAL = 60.0


# handler_class values whose work greenserve does itself: gevent.pywsgi's own handler, and
# gevent-websocket's, whose environ["wsgi.websocket"] greenserve builds in. Named, not imported:
# a script that passes them has imported them, and greenserve must not import gevent.pywsgi.
_BUILTIN_HANDLERS = frozenset(
    (("gevent.pywsgi", "WSGIHandler"), ("geventwebsocket.handler", "WebSocketHandler"))
)


def _is_builtin_handler(handler_class):
    return (getattr(handler_class, "__module__", None), getattr(handler_class, "__qualname__", None)) in _BUILTIN_HANDLERS


def _checked_config(config, kwargs):
    """The server's Config, checked: ``config`` (the command's) or the defaults, with the
    settings among ``kwargs`` (the API's way: a copy is changed); TypeError for a keyword that
    is neither a setting nor one of gevent's TLS arguments (SSL_ARGUMENTS)."""
    settings = {}
    for name, value in kwargs.items():
        if name in SSL_ARGUMENTS:
            continue  # (gevent's keywords first: certfile and keyfile are settings' names too)
        if name in SETTINGS_BY_NAME and SETTINGS_BY_NAME[name].api:
            settings[name] = value
        else:
            raise TypeError("WSGIServer() got an unexpected keyword argument %r" % name)
    if config is None:
        config = Config(**settings)
    elif settings:
        config = config.replace(**settings)
    # TLS from gevent's keywords (certfile, ssl_context) counts as the certfile setting does.
    config.check(tls=True if any(kwargs[name] is not None for name in SSL_ARGUMENTS & set(kwargs)) else None)
    return config


def _sweep_interval(config):
    """How often the sweeper checks I/O deadlines: a few times per shortest timeout, at most once
    a second. Timeouts are precise to about a quarter of themselves, at no per-request cost."""
    shortest = min(config.keepalive or config.header_timeout, config.header_timeout, config.body_timeout,
                   config.send_timeout)
    if config.request_timeout:
        shortest = min(shortest, config.request_timeout)
    return max(0.02, min(1.0, shortest / 4.0))


class WSGIServer(StreamServer):
    """A WSGI server on gevent; see the module docstring and docs/migrating.md."""

    #: Seconds ``stop()`` waits when called without a timeout; None means ``graceful_timeout``.
    stop_timeout = None
    #: True when no other process accepts from this listener (a socket of this worker's own,
    #: with SO_REUSEPORT: ``reuse_port`` in the config).
    private_queue = False
    # When accepting paused for a full pool (monotonic time), while it is. A class default too:
    # gevent calls _start_accepting_if_started from StreamServer.__init__ when the pool it is
    # given is shared and already linked (the command's servers of one worker share one pool).
    _paused_at = None
    #: What speaks on each connection once its PROXY header and TLS handshake are done: called
    #: with the ``connection.Connection``, it returns the protocol (docs/architecture.md, "The
    #: protocol seam"). A class is called as it is; a function must be a staticmethod here.
    choose_protocol = Http11Protocol
    #: --sticky: this server's ``sticky.Place`` (``enable_sticky``); None when off.
    sticky = None

    def __init__(
        self,
        listener,
        application=None,
        backlog=None,
        spawn="default",
        log="default",
        error_log="default",
        handler_class=None,
        environ=None,
        config=None,
        **kwargs
    ):
        if handler_class is not None and not _is_builtin_handler(handler_class):
            raise TypeError(
                "greenserve.WSGIServer does not run gevent.pywsgi handler classes (%r); "
                "gevent-websocket's WebSocketHandler is accepted (its environ[\"wsgi.websocket\"] "
                "is built in): see docs/websockets.md" % (handler_class,)
            )
        self.config = config = _checked_config(config, kwargs)
        ssl_args = {name: value for name, value in kwargs.items() if name in SSL_ARGUMENTS}
        if config.reuse_port:
            self.private_queue = True
        self.error_log = error_log if isinstance(error_log, ErrorLog) else ErrorLog(error_log, config.log_level)
        if isinstance(log, accesslog.AccessLog) or log is None:
            self.access_log = log
        else:
            self.access_log = accesslog.for_pywsgi_log(log, config.access_log_format)
        self.ssl_context = make_ssl_context(ssl_args) if ssl_args else None
        self._enable_http2(config)
        if config.protocol == "uwsgi" and type(self).choose_protocol is Http11Protocol:
            from greenserve.uwsgi_protocol import chooser

            self.choose_protocol = chooser(self)
        # True when the context asks clients for certificates (CERT_OPTIONAL or CERT_REQUIRED):
        # each connection then puts the client's in its environ (tls.client_cert_environ).
        self.client_certs = False
        if self.ssl_context is not None:
            from gevent.ssl import SSLSocket

            self.ssl_socket_class = SSLSocket
            self.client_certs = self.ssl_context.verify_mode != 0  # ssl.CERT_NONE
        StreamServer.__init__(self, listener, backlog=backlog, spawn=spawn)
        # The hub whose loop gevent's __init__ just took (this thread's): its accept loop runs
        # there, so each accepted socket belongs to it (connection.accepted_socket), whichever
        # thread calls start().
        self._hub = gevent.get_hub()
        if application is not None:
            self.application = application
        self.limits = Limits(
            config.limit_request_line,
            config.limit_request_fields,
            config.limit_request_field_size,
            config.limit_request_body,
        )
        self.server_line = server_line_for(config.server_header)
        # The peers forwarded_allow_ips trusts, read once for the three that ask: proxy headers,
        # the PROXY protocol and overload control's X-Request-Start.
        trusted = None
        if config.proxy_headers or config.proxy_protocol or config.overload_control:
            from greenserve.proxy import TrustedProxies

            trusted = TrustedProxies(config.forwarded_allow_ips)
        self.proxy = None
        if config.proxy_headers:
            from greenserve.proxy import ProxyHeaders

            self.proxy = ProxyHeaders(trusted)
        # The peers that may send a PROXY protocol header; None: no header is read.
        self.proxy_protocol = trusted if config.proxy_protocol else None
        self.extra_environ = environ
        self.base_environ = None
        self.stopping = False
        # Set when a graceful stop begins; every environ carries it as "greenserve.stopping", so
        # that a long-lived response (a WebSocket, an event stream) can end itself in time.
        self.stop_event = Event()
        self.connections = set()
        # Set by the last connection to end while stop() waits (serve_connection); None otherwise.
        self.drained = None
        self.requests_done = 0  # requests of connections that have closed
        self._stats = None
        self.recv_buffer = bytearray(_RECV_BUFFER_SIZE)
        self.recv_view = memoryview(self.recv_buffer)
        self._sweep_interval = _sweep_interval(config)
        self._sweeper = None
        self._pressure_warned = None  # monotonic time of the last pool-full warning
        # Times the pool filled and accepting paused, and the seconds it stayed paused (the
        # metrics' greenserve_pool_full_total and greenserve_accept_paused_seconds_total).
        self.pool_full = 0
        self.accept_paused = 0.0
        self._paused_at = None  # monotonic time accepting paused for a full pool, while it is
        self._room_timer = None  # the next look for room in a full pool (_make_room)
        self.admission = self._admission(config, trusted)
        # --static: the mounts and their open files (static.Static), None without one.
        self.static = None
        if config.static:
            from greenserve.static import Static

            self.static = Static(config.static, config.static_max_age, config.static_index,
                                 config.static_follow_symlinks)

    def _admission(self, config, trusted):
        """Overload control (``overload_control``, on by default): the ``admission.Admission``
        each responder asks before calling the application; None when off. ``trusted``: the
        peers whose X-Request-Start counts (none when forwarded_allow_ips is empty)."""
        if not config.overload_control:
            return None
        from greenserve.admission import Admission

        return Admission(self, self.loop, config.queue_target, config.max_queue_time, config.health_path,
                         trusted if config.forwarded_allow_ips else None)

    def _enable_http2(self, config):
        """With h2 in http_protocols: the codec's limits from the settings (``http2_config``),
        h2 offered by ALPN on the server's TLS context (the command's, a hook's, the API's),
        and the protocol chosen per connection (``http2_protocol.chooser``), unless a subclass
        chose its own. Without: nothing of HTTP/2 is imported."""
        self.http2_config = None
        if "h2" not in config.http_protocols:
            return
        from greenserve.http2 import H2Config

        self.http2_config = H2Config(
            max_concurrent_streams=config.http2_max_concurrent_streams,
            initial_window_size=config.http2_initial_window_size,
            max_frame_size=config.http2_max_frame_size,
            max_header_list_size=config.http2_max_header_list_size,
        )
        if self.ssl_context is not None:
            from greenserve.tls import set_alpn

            set_alpn(self.ssl_context, config.http_protocols)
        if type(self).choose_protocol is Http11Protocol:
            from greenserve.http2_protocol import chooser

            self.choose_protocol = chooser(self)

    def enable_sticky(self, worker_slot, index):
        """--sticky, in a worker, before start(): serve each client on the worker that owns it
        (``greenserve.sticky``). ``worker_slot``: the worker's ``process.slots.WorkerSlot``;
        ``index``: this server's place among the worker's servers, the same in every worker."""
        from greenserve.sticky import Handoff, StickyProxyHeaders

        if worker_slot.handoff is None:  # one per worker, shared by its servers
            worker_slot.handoff = Handoff(worker_slot, self.error_log)
        self.sticky = worker_slot.handoff.place(self, index)
        if self.proxy is not None:
            self.proxy = StickyProxyHeaders(self.proxy.trusted, self.sticky)
        if self.base_environ is not None:
            self.update_environ()  # (each connection reads both through its ConnectionSetup)

    def take_handed_over(self, fd, address, peer_environ, early):
        """Serve descriptor ``fd``, a connection another worker accepted and handed over (--sticky),
        as if this server had accepted it: ``address`` and ``peer_environ`` are its peer's as that
        worker knew them (a PROXY header's included), ``early`` the bytes it had read."""
        if self.base_environ is None:
            self.update_environ()
        family, kind, proto = self._accepted
        sock = accepted_socket(family, kind, proto, fd, self._hub)
        try:
            self._spawn(serve_received, self, sock, address, peer_environ, early)
        except BaseException:
            sock.close()
            raise

    @property
    def ssl_enabled(self):
        return self.ssl_context is not None

    @property
    def stats(self):
        """A ``stats.Sink`` (``stats.WorkerStats``, ``statsd.StatsdSink``) when metrics are on
        (the process model sets it, one per worker), else None: each connection reads it once,
        and calls it at the end of each request."""
        return self._stats

    @stats.setter
    def stats(self, sink):
        # Checked here, once, rather than by the compiled connection (a C call on a typed
        # Sink) at its first request: the two builds fail alike, and where the mistake is.
        if sink is not None and not isinstance(sink, Sink):
            raise TypeError("server.stats must be a greenserve.observe.stats.Sink or None, not %r" % (sink,))
        self._stats = sink
        if getattr(self, "admission", None) is not None:
            self.admission.stats = sink
        if getattr(self, "static", None) is not None:
            self.static.stats = sink  # (static_request: counted by the static path alone)

    @property
    def requests_served(self):
        """Requests served so far, on closed and open connections (for --max-requests)."""
        return self.requests_done + sum(connection.requests for connection in self.connections)

    def init_socket(self):
        StreamServer.init_socket(self)
        # gevent's accept loop calls accept() up to max_accept times per readiness event; on a
        # listener left in blocking mode (a plain socket passed in) the second call would block
        # the whole hub.
        self.socket.setblocking(False)
        listener = self.socket
        raw = getattr(listener, "_sock", listener)
        # The compiled build accepts TCP connections non-blocking from the start (accept4(2)):
        # no ioctl(FIONBIO) per connection after it.
        nonblocking = nonblocking_acceptor(raw)
        self._accept = nonblocking or raw._accept
        # Each accepted socket's family, type and protocol: the listener's, as plain ints.
        kind = int(listener.type) | (_socket.SOCK_NONBLOCK if nonblocking else 0)
        self._accepted = (int(listener.family), kind, listener.proto)
        self.update_environ()

    def do_read(self):
        """Accept one connection: (gevent socket, address), or None when none is waiting.

        gevent's own do_read does the same through the listener's gevent wrapper and reads the
        listener's family and type through enum properties each time: about 1,500 instructions
        a connection more (callgrind). The socket is gevent's, made by connection.accepted_socket.
        """
        try:
            accepted = self._accept()
        except BlockingIOError:  # (the listener's own accept)
            return None
        if accepted is None:
            return None
        fd, address = accepted
        family, kind, proto = self._accepted
        return accepted_socket(family, kind, proto, fd, self._hub), address

    def start(self):
        self.stopping = False
        if self.stop_event.is_set():  # started again after a stop
            self.stop_event = Event()
            if self.base_environ is not None:
                self.base_environ["greenserve.stopping"] = self.stop_event
        StreamServer.start(self)
        if self.sticky is not None:
            self.sticky.start()
        if self._sweeper is None:
            self._sweeper = self.loop.timer(self._sweep_interval, self._sweep_interval)
            self._sweeper.start(self._sweep)

    def _sweep(self):
        # Runs in the hub: throwing into a greenlet from here is what gevent's own Timeout does.
        # A connection's deadline is non-zero only while ``waiter`` is blocked in that
        # connection's recv/send, so the exception lands there and nowhere else (not in app
        # code, and in the right greenlet when the app reads wsgi.input from another one).
        now = monotonic()
        expired = [c for c in self.connections if 0.0 < c.deadline <= now]
        for connection in expired:
            waiter = connection.waiter
            if connection.deadline and waiter is not None and not waiter.dead:
                connection.deadline = 0.0
                waiter.throw(Expired())
        if self.config.request_timeout:
            self._expire_requests(now)
        if self.closed:
            if not self.connections:
                self._stop_sweeper()
        elif self.full():
            self._make_room(now)

    def _expire_requests(self, now):
        """Interrupt each application that has waited past its request_deadline for its head."""
        expired = [c for c in self.connections if 0.0 < c.request_deadline <= now]
        for connection in expired:
            connection.expire_request(now)

    def _do_read(self):
        # gevent's accept callback: when the pool is full it stops accepting until a slot frees.
        # Free slots first, so that a waiting client is let in now, not at a timeout.
        if self.full():
            self._make_room(monotonic())
        StreamServer._do_read(self)
        if self._watcher is None and self._paused_at is None and self.full() and not self.closed:
            # gevent stopped accepting until a slot frees (_start_accepting_if_started).
            self._paused_at = monotonic()
            self.pool_full += 1

    def _start_accepting_if_started(self, _event=None):
        # gevent's callback when the pool's semaphore frees a slot (or a delay after EMFILE ends).
        if self._paused_at is not None:
            self.accept_paused += monotonic() - self._paused_at
            self._paused_at = None
        StreamServer._start_accepting_if_started(self, _event)

    def paused_seconds(self, now):
        """Seconds accepting has been paused for a full pool, the current pause included."""
        if self._paused_at is None:
            return self.accept_paused
        return self.accept_paused + now - self._paused_at

    def _make_room(self, now):
        """The pool is full: close the connections that hold a slot for nothing (idle
        keep-alive ones, heads incomplete for PRESSURE_GRACE; see Connection.make_room), and
        look again when the next unfinished head reaches that age, if the pool is still full."""
        closed = 0
        again = 0.0
        for connection in list(self.connections):
            at = connection.make_room(now, PRESSURE_GRACE)
            if at == 0.0:
                closed += 1
            elif at > 0.0 and (again == 0.0 or at < again):
                again = at
        if again and self._room_timer is None:
            self._room_timer = self.loop.timer(again - now)
            self._room_timer.start(self._make_room_again)
        if self._pressure_warned is None or now - self._pressure_warned >= _PRESSURE_WARNING_INTERVAL:
            self._warn_pressure(now, closed)

    def _warn_pressure(self, now, closed):
        """Say that clients wait for a full pool, if any do (the listen queue, on Linux; where it
        cannot be read, a full pool is taken to mean they may)."""
        from greenserve.listeners import listen_queue

        queue = listen_queue(self.socket) if getattr(self, "socket", None) is not None else None
        if queue is not None and not queue[0]:
            return  # full, but nobody waits: the pool is sized right for now
        if queue is None:
            waiting = "clients may wait in the listen backlog"
        else:
            waiting = "%d client(s) waiting in the listen backlog" % queue[0]
        if self._paused_at is not None:
            waiting += ", accepting paused for %.1f s" % (now - self._paused_at)
        if self.pool is None:
            in_use = size = len(self.connections)
        else:  # (the command's listeners share one pool per worker)
            in_use, size = len(self.pool), self.pool.size
        self._pressure_warned = now
        self.error_log.warning(
            "connection pool full: %d/%d connections in use, %s; closed %d idle or slow "
            "connection(s) to let them in. If this repeats, raise --worker-connections "
            "(spawn=N in Python) or add --workers" % (in_use, size, waiting, closed)
        )

    def _make_room_again(self):
        self._room_timer.close()
        self._room_timer = None
        if not self.closed and self.full():
            self._make_room(monotonic())

    def _stop_sweeper(self):
        for timer in (self._sweeper, self._room_timer):
            if timer is not None:
                timer.stop()
                timer.close()
        self._sweeper = self._room_timer = None
        if self.admission is not None:
            self.admission.close()

    def update_environ(self):
        """Build the environ keys shared by all requests (no DNS: SERVER_NAME is the bound host),
        and what each connection reads of the server (wsgi.ConnectionSetup)."""
        environ = server_environ(
            self.config,
            self.address,
            "https" if self.ssl_context is not None else "http",
            self.error_log.errors_stream(),
        )
        if self.extra_environ:
            environ.update(self.extra_environ)
        environ["greenserve.stopping"] = self.stop_event
        self.base_environ = roomy_copy(environ)  # each connection's environ is a copy of it
        self.connection_setup = ConnectionSetup(self)

    def get_environ(self):
        return dict(self.base_environ)

    @property
    def environ(self):
        """The environ keys shared by all requests (gevent.pywsgi's attribute; a dict to update).

        Before start() it holds the keys to add (the constructor's ``environ``); from start() on,
        the live dict every request's environ is copied from.
        """
        if self.base_environ is None:
            if self.extra_environ is None:
                self.extra_environ = {}
            return self.extra_environ
        return self.base_environ

    def set_environ(self, environ=None):
        """gevent.pywsgi's method: add ``environ``'s keys to every request's environ."""
        if environ is not None:
            self.extra_environ = dict(self.extra_environ or {}, **environ)
        if self.base_environ is not None:
            self.update_environ()

    def handle(self, sock, address):
        """Serve one accepted connection until it closes (gevent's StreamServer API)."""
        if self.base_environ is None:
            self.update_environ()
        serve_connection(self, sock, address)

    def set_spawn(self, spawn):
        """spawn: 'default' or None (no bound), N (at most N connections at once), a
        ``greenserve.pool.ConnectionPool``, or gevent's other kinds (a ``gevent.pool.Pool``, a
        callable), which gevent's StreamServer takes as it does."""
        # gevent's spawn=None runs each connection's handler in the hub itself, which must never
        # block; an HTTP connection blocks at once, reading its request, and every request
        # failed with BlockingSwitchOutError. None means a greenlet per connection here, as
        # 'default' does: no limit on connections, which is what None says of a pool.
        reuse = self.config.reuse_greenlets
        if spawn is None or (isinstance(spawn, str) and spawn == "default"):
            spawn = ConnectionPool(None, reuse)
        elif isinstance(spawn, int) and not isinstance(spawn, bool):
            spawn = ConnectionPool(spawn, reuse)
        if isinstance(spawn, ConnectionPool):
            self.pool = spawn
            self._spawn = spawn.spawn
            self.full = spawn.full
        else:
            StreamServer.set_spawn(self, spawn)

    def do_handle(self, sock, address):
        # gevent's do_handle runs handle() under two Python frames; spawning the compiled
        # serve_connection directly keeps the greenlet's C stack shallow, and greenlet copies
        # that stack at every switch. A subclass that overrides handle() gets gevent's path.
        # (Only the accept loop calls this, after init_socket() built base_environ.)
        if type(self).handle is not WSGIServer.handle:
            return StreamServer.do_handle(self, sock, address)
        try:
            self._spawn(serve_connection, self, sock, address)
        except BaseException:
            sock.close()
            raise

    def stop(self, timeout=None):
        """Stop accepting, close idle connections, let busy ones finish, then close the rest."""
        if timeout is None:
            timeout = self.stop_timeout if self.stop_timeout is not None else self.config.graceful_timeout
        self.stopping = True
        self.stop_event.set()
        if self.sticky is not None:
            self.sticky.stop()  # what is handed over from now on waits for this slot's next worker
        self._serve_queued()
        if self._paused_at is not None:  # a pause for a full pool ends with accepting itself
            self.accept_paused = self.paused_seconds(monotonic())
            self._paused_at = None
        self.close()
        # Connections accepted in this very loop iteration have been spawned but not started:
        # let them register before taking the list (they serve one request, with close).
        gevent.sleep(0)
        connections = list(self.connections)
        for connection in connections:
            connection.shutdown()
        if connections:
            self._wait_drained(timeout)
            left = [c for c in connections if c in self.connections]
            if left:
                if timeout > 0:
                    said = "graceful timeout (%.1f s)" % timeout
                else:  # stop(0): a second signal, QUIT, or a caller that wants no drain
                    said = "fast stop"
                self.error_log.warning("%s: closing %d connection(s) still busy" % (said, len(left)))
                self._kill(left)
        # Only this server's connections: its pool may be shared with the worker's other
        # listeners (the CLI gives them one), whose connections are still draining.
        if self.connections:
            self._kill(list(self.connections))
        if not self.connections:
            self._stop_sweeper()

    def _wait_drained(self, timeout):
        """Wait up to ``timeout`` seconds for this server's last connection to end."""
        if self.connections:
            # One event for every stop() waiting: a second signal's fast stop waits beside the
            # graceful one, and both wake when the last connection ends.
            if self.drained is None or self.drained.is_set():
                self.drained = Event()
            self.drained.wait(timeout)

    def _kill(self, connections):
        """End these connections' greenlets (GreenletExit where each waits), then wait 1 s for them."""
        for connection in connections:
            self.loop.run_callback(connection.kill)
        self._wait_drained(1)


    def _serve_queued(self):
        """Take the connections the kernel has queued on the listener, before it is closed.

        When the last descriptor of a listening socket closes, the kernel resets every
        connection still in its accept queue: a client (a load balancer's, with its request
        already sent) gets a reset for a request nobody read, and a balancer replays only what
        it is sure never reached a server (HAProxy's L7 retries did not, seen in
        tests/test_haproxy.py's rolling restart: one request in about forty restarts). A
        worker cannot know whether it closes last (a stop of the whole instance: the master
        closed its copy first, and its sibling workers close theirs at the same time), nor
        whether a sibling would accept what waits: its own SO_REUSEPORT socket
        (``private_queue``, ``--reuse-port``) has a queue no other socket shares. So each stop
        accepts what is queued at that moment, without waiting, and answers it (one request,
        then ``Connection: close``); taken from a queue the next generation shares (a reload),
        it costs that generation nothing. What arrives in the microseconds between this and the
        close is the kernel's to reset.
        """
        if self.closed or getattr(self, "socket", None) is None:
            return  # (no socket: closed already, and a second stop() is a fast one)
        while not self.full():
            try:
                args = self.do_read()  # a non-blocking accept: None when the queue is empty
            except OSError:
                return
            if not args:
                return
            self.do_handle(*args)



def make_ssl_context(ssl_args):
    """An SSLContext from gevent.pywsgi-style TLS keywords (``ssl_context`` passes through).

    The Python API's way; the command builds its context from its settings with
    ``tls.default_ssl_context(config)``.
    """
    from gevent import ssl as gevent_ssl

    ssl_args = dict(ssl_args)
    context = ssl_args.pop("ssl_context", None)
    if context is None:
        context = gevent_ssl.SSLContext(ssl_args.pop("ssl_version", gevent_ssl.PROTOCOL_TLS_SERVER))
        certfile = ssl_args.pop("certfile", None)
        keyfile = ssl_args.pop("keyfile", None)
        if certfile is None:
            raise ValueError("TLS needs a certfile")
        context.load_cert_chain(certfile, keyfile)
        ca_certs = ssl_args.pop("ca_certs", None)
        cert_reqs = ssl_args.pop("cert_reqs", None)
        if ca_certs:
            context.load_verify_locations(ca_certs)
        if cert_reqs is not None:
            context.verify_mode = cert_reqs
        ciphers = ssl_args.pop("ciphers", None)
        if ciphers:
            context.set_ciphers(ciphers)
    return context

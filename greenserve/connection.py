"""One accepted connection: its socket, its clock, its output, and the protocol that speaks on it.

This is the one module that touches an accepted socket. It makes gevent's socket for each
accepted descriptor (``accepted_socket``, ``AcceptedSocket``), and ``Connection`` reads, writes
and waits on it (``receive``, ``flush``, ``send_file``; ``receive_for_application`` for the
WebSocket) under deadlines it keeps; nothing else holds the non-blocking socket or its watchers.
A ``Connection`` does what comes before any protocol (the PROXY header, the TLS handshake),
then hands the connection to the protocol its server chooses (``server.choose_protocol``:
``http11.Http11Protocol``, or ``http2_protocol.Http2Protocol``), which drives its parser and its
responders through the connection's reads and output queue until the connection should close.
docs/architecture.md, "The protocol seam", is the contract between the two; ``Protocol`` below
declares its half. A protocol whose streams run in greenlets of their own (HTTP/2) says so
(``duplex``): their output is then sent by the hub or by the connection's greenlet, woken from
its wait for the peer (``send_soon``, ``wake``), and never by two greenlets at once.

Output is queued in ``out`` and sent in one ``send`` per batch: the responses of a pipelined
batch go out together, and if an application blocks while responses wait, a hub callback sends
them without waiting for it (``flush_if_blocked``). A keep-alive response is sent by that same
hub callback at the end of the loop's turn (``flush_at_end_of_turn``), once every connection
woken in the turn has run: the responses of one turn go out back to back, and a client on
another core is woken once for them (issue 31); what the kernel does not take then is sent by
the connection's greenlet, woken for it.

Timeouts are deadlines, not socket timeouts: before blocking I/O the connection stores
``deadline`` (a float) and the greenlet that waits (``waiter``), and clears the deadline after;
the server's one sweeper timer throws ``Expired`` into the waiter when the deadline has passed
(see ``server.WSGIServer._sweep``). That costs a float store per wait instead of a libev timer
started and stopped per wait (gevent's socket timeouts create a ``Timeout`` each time a read
blocks), and the I/O deadline is never armed while the application runs, so an app's own slow
work is not cut off by it: only ``request_deadline`` is, when ``request_timeout`` is set, by the
same sweeper (a float store per request, against a libev timer started and stopped per request
for a ``gevent.Timeout``). The connection's own: the PROXY header and the TLS handshake within
``header_timeout`` of the start, each send within ``send_timeout``; a protocol's reads wait as
long as it says (``receive(timeout)``).

``shutdown()`` implements graceful stop: the protocol is told (``going_away``: a busy connection
finishes its request with ``Connection: close``), and an idle one is closed once it has been
quiet for ``DRAIN_WINDOW``; a request that reaches it before then is answered. ``make_room()``
lets the server close idle and slow connections when its pool is full.
"""

import errno
import os
import socket as _socket
import sys
from time import monotonic
from types import MemberDescriptorType

from gevent import getcurrent
from gevent.exceptions import ConcurrentObjectUseError
from gevent.socket import socket as GeventSocket
from greenlet import GreenletExit
from greenlet import greenlet as _greenlet

_greenlet_switch = _greenlet.switch

from greenserve._accel import compiled
from greenserve.http import errors
from greenserve.proxy_protocol import ProxyHeaderParser, ProxyProtocolError
from greenserve.tls import client_cert_environ
from greenserve.wsgi import connection_environ

if compiled():
    from greenserve._csys import SysCalls, acceptor_for
    from greenserve.http._chttp import Joiner

    # recv(2)/send(2) on the descriptor itself and the C clock (see _csys.pyx).
    _SYS = SysCalls()
else:
    from greenserve.http._pyhttp import Joiner

    _SYS = None  # the socket's own methods and time.monotonic()
    acceptor_for = None  # the listener's own accept
# b"".join for a batch of responses (see framing._JOINER).
_JOINER = Joiner()
# The C clock only where CPython's monotonic() reads the same one: Linux's CLOCK_MONOTONIC.
_C_CLOCK = _SYS is not None and sys.platform.startswith("linux")

_TCP_FAMILIES = (_socket.AF_INET, getattr(_socket, "AF_INET6", _socket.AF_INET))
_SOCK_NONBLOCK = getattr(_socket, "SOCK_NONBLOCK", 0)
# send(2)'s "more follows" flag (Linux): a file's head then leaves with the file's first bytes.
_MSG_MORE = getattr(_socket, "MSG_MORE", 0)
# Joining a batch costs a copy; above this many bytes the pieces go out one by one instead.
_JOIN_LIMIT = 256 * 1024
# A body at least this long goes out beside its head with sendmsg(2) (_send_two) rather than
# joined to it: below, the join's copy costs less than the gather (callgrind, bench/instructions.py).
_GATHER_MIN = 2048
_timeout_error = _socket.timeout
# ssl's errors, imported by the first TLS connection (Connection._take_tls).
_SSLWantRead = _SSLWantWrite = _SSLZeroReturn = _SSLEOF = _SSLError = None
# A file's response sends at most this much between two polls of the loop (nginx's
# sendfile_max_chunk, 2m since 1.21.4): a reader as fast as loopback keeps the socket writable, so
# without it one response held the worker until its whole file had gone, and every other request
# on the worker waited (docs/performance.md, "Static files": hello beside 100 MiB downloads).
_SENDFILE_CHUNK = 2 << 20
# Lingering close: at most this long and this many bytes dropped while waiting for the client.
_LINGER_SECONDS = 2.0
_LINGER_BYTES = 1 << 20
# A graceful stop closes a connection between requests only after it has been quiet this long.
# A keep-alive client may have sent its next request already (in the kernel's buffer, or on the
# wire): closing at once resets it, and clients do not retry a POST (nginx answers 502). Clients
# that keep a connection busy send again within milliseconds of a response; one second of quiet
# says the connection really is idle, and bounds what the drain adds to a stop.
DRAIN_WINDOW = 1.0
# os.sendfile errors that mean the peer is gone (the file's own errors are the app's).
_PEER_GONE = frozenset(
    (errno.EPIPE, errno.ECONNRESET, errno.ECONNABORTED, errno.ETIMEDOUT, errno.EHOSTUNREACH,
     errno.ENETUNREACH, errno.ENOTCONN)
)


def _socket_slots(cls):
    """Every slot name of ``cls`` and its bases."""
    names = set()
    for klass in cls.__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names.update((slots,) if isinstance(slots, str) else slots)
    return names


def _slot(cls, name):
    """The member descriptor of slot ``name`` in ``cls`` or a base, or None."""
    for klass in cls.__mro__:
        found = klass.__dict__.get(name)
        if found is not None:
            return found if type(found) is MemberDescriptorType else None
    return None


# What gevent's socket.__init__ sets, in gevent 20.x to 26.x: accepted_socket sets the same.
_GEVENT_SOCKET_SLOTS = ("_closed", "_sock", "timeout", "_io_refs", "hub", "_read_event", "_write_event")
_GEVENT_RAW_SOCKET = getattr(GeventSocket, "_gevent_sock_class", None)
_READ_SLOT = _slot(GeventSocket, "_read_event")
_WRITE_SLOT = _slot(GeventSocket, "_write_event")
# Another layout (a gevent that changed it): its own constructor.
_SOCKET_LAYOUT_KNOWN = (
    _GEVENT_RAW_SOCKET is not None
    and set(_GEVENT_SOCKET_SLOTS) <= _socket_slots(GeventSocket)
    and _READ_SLOT is not None
    and _WRITE_SLOT is not None
)


def _watcher(sock, slot, events):
    watcher = slot.__get__(sock, AcceptedSocket)
    if watcher is None:
        raw = sock._sock  # gevent's placeholder once the descriptor is gone: false
        # None while gevent's close or detach drops the watchers (it sets _closed first), as
        # it finds them; but a socket closed with makefile() objects still open keeps its
        # descriptor, and those files still wait on it (the standard library's idiom).
        if raw and (not sock._closed or sock._io_refs > 0) and raw.fileno() >= 0:
            watcher = sock.hub.loop.io(raw.fileno(), events)
            slot.__set__(sock, watcher)
    return watcher


# The slots read and written as they are, by what needs no watcher made (bound once: looking up
# a descriptor's __get__ is an attribute lookup each time).
_read_slot_get = _READ_SLOT.__get__ if _SOCKET_LAYOUT_KNOWN else None
_write_slot_get = _WRITE_SLOT.__get__ if _SOCKET_LAYOUT_KNOWN else None
_read_slot_set = _READ_SLOT.__set__ if _SOCKET_LAYOUT_KNOWN else None
_write_slot_set = _WRITE_SLOT.__set__ if _SOCKET_LAYOUT_KNOWN else None


class AcceptedSocket(GeventSocket):
    """gevent's socket, whose two watchers are made when something first waits on them.

    gevent's constructor makes a read and a write watcher for every socket: ~2,800 instructions
    and an ``fcntl(F_GETFD)`` each (libev's check of the descriptor). Most connections never
    wait to write, and one that gets its request with its accept (HTTP/1.0, health checks,
    load balancers that open a connection per request) never waits at all. Anything that reads
    ``_read_event`` or ``_write_event`` (gevent's own recv, send and wait functions, an
    application holding ``greenserve.socket``) gets the watcher, made then.
    """

    __slots__ = ()

    _read_event = property(lambda self: _watcher(self, _READ_SLOT, 1), lambda self, v: _read_slot_set(self, v))
    _write_event = property(lambda self: _watcher(self, _WRITE_SLOT, 2), lambda self, v: _write_slot_set(self, v))


def _made(watcher):
    """A watcher the connection waits on; none: the socket was closed under it (the peer is
    gone as far as this connection is concerned)."""
    if watcher is None:
        raise errors.ClientDisconnected(OSError(errno.EBADF, "the socket is closed"))
    return watcher


def made_watchers(sock):
    """The socket's read and write watchers as they are (None: not made, or closed), making none."""
    if type(sock) is AcceptedSocket:
        return _read_slot_get(sock, AcceptedSocket), _write_slot_get(sock, AcceptedSocket)
    return getattr(sock, "_read_event", None), getattr(sock, "_write_event", None)


def nonblocking_acceptor(listener):
    """For the server's accept loop: a function that accepts a connection on ``listener`` (the
    socket object under gevent's) already non-blocking, giving ``(descriptor, address)`` or
    None when none is waiting; None where there is none (the pure build, a listener that is
    not TCP). Its descriptors are made into sockets with ``SOCK_NONBLOCK`` in their type."""
    return None if acceptor_for is None else acceptor_for(listener)


def accepted_socket(family, kind, proto, fd, hub):
    """gevent's socket for a descriptor accept() just returned, in the thread of ``hub``.

    What ``gevent.socket.socket(family, kind, proto, fd)`` makes, with the same slots set in
    the same order (tests/test_http_connection.py compares the two), made without running that
    constructor (its two Python frames, ``get_hub()`` and its attribute stores through bytecode
    are ~5,000 instructions a connection, callgrind), and with its watchers made when first
    needed (AcceptedSocket).
    """
    if not _SOCKET_LAYOUT_KNOWN:
        return GeventSocket(family, kind, proto, fd)
    sock = AcceptedSocket.__new__(AcceptedSocket)
    _read_slot_set(sock, None)  # (SocketMixin.__init__'s order: the watchers, then the hub)
    _write_slot_set(sock, None)
    sock.hub = None
    sock._closed = False
    raw = sock._sock = _GEVENT_RAW_SOCKET(family, kind, proto, fd)
    sock.timeout = None
    sock._io_refs = 0
    if not kind & _SOCK_NONBLOCK:  # (accepted non-blocking: CPython takes the type's word for it)
        raw.setblocking(False)
    sock.hub = hub
    sock.timeout = _socket.getdefaulttimeout()
    return sock


def clock():
    """time.monotonic(), without a call through Python and a float object in the compiled build.

    The connection's clock, and its protocols': the deadlines it sets are compared with
    time.monotonic() by the server's sweeper, so the C clock is used only where it is the same
    clock (_C_CLOCK).
    """
    if _C_CLOCK:
        return _SYS.monotonic()
    return monotonic()


def serve_connection(server, sock, address):
    """The body of one connection's greenlet: serve it, then close the socket.

    Registered in ``server.connections`` before anything can block (the TLS handshake
    included), so that a graceful stop sees every connection it must wait for.
    """
    _serve_and_close(Connection(server, sock, address), server, sock, False)


def serve_received(server, sock, address, peer_environ, early):
    """The body of the greenlet of a connection another worker handed over (--sticky,
    ``greenserve.sticky``): served as if this worker had accepted it, from what the other read.

    ``address`` and ``peer_environ`` (REMOTE_ADDR, REMOTE_PORT, SERVER_NAME, SERVER_PORT,
    wsgi.url_scheme) are the connection's as the other worker knew them: a PROXY header's,
    which cannot be read twice, included. ``early``: the bytes it had read, the protocol's first.
    """
    connection = Connection(server, sock, address)
    connection.environ.update(peer_environ)
    connection.early = early
    _serve_and_close(connection, server, sock, True)


def _serve_and_close(connection, server, sock, received):
    connections = server.connections
    connections.add(connection)
    try:
        connection.run(received)
    finally:
        connections.discard(connection)
        server.requests_done += connection.requests  # for --max-requests (server.requests_served)
        connection.done = True
        if server.drained is not None and not connections:
            server.drained.set()  # stop() waits for it
        if connection.sock is not sock:
            connection.sock.close()  # the TLS socket, which owns the plain one
            sock.close()
        elif not connection.close_plain():
            sock.close()


class Expired(Exception):
    """Thrown into the greenlet waiting on a connection's I/O by the sweeper when its deadline passed."""


class HandOver(Exception):
    """--sticky: the request just read belongs to a client another worker owns (raised by
    ``sticky.StickyProxyHeaders`` as the responder builds its environ, before the application
    is called). The protocol hands the connection over at that request (``place.send``) or,
    when it cannot be, serves it here."""

    def __init__(self, place, slot):
        Exception.__init__(self, slot)
        self.place = place  # the server's sticky.Place
        self.slot = slot  # the owner's slot


class _Woken(Exception):
    """Thrown into the connection's greenlet waiting in a TLS read (``wake``): gevent's TLS
    socket waits on a Waiter that refuses any other switch, so an exception is the only way in."""


class Protocol:
    """What speaks on a connection once its start is done: the half of the seam a protocol
    implements (docs/architecture.md, "The protocol seam"; the other half is ``Connection``).

    ``server.choose_protocol(connection)`` makes one in the connection's greenlet, after the
    PROXY header and the TLS handshake. This class declares the methods and is not inherited:
    ``http11.Http11Protocol`` is a ``wsgi.ConnectionIO`` (a compiled class has one base), and
    the connection calls these through Python, once a connection or on a stop, never per
    request. What a protocol keeps up to date on the connection (``idle``, ``head_deadline``,
    ``requests``, ``linger``, ``request_deadline``) is said in the docs' contract.
    """

    __slots__ = ()

    def serve(self, early):
        """Serve the connection until it should close, in its greenlet. ``early``: what the peer
        sent before the protocol was chosen (what followed a PROXY header in its packet), its
        first bytes. Return to close: the connection then sends what is left in ``out`` and,
        if ``linger`` is set, closes in two steps. ``errors.ClientDisconnected`` says the peer
        is gone."""
        raise NotImplementedError

    def going_away(self):
        """The connection is to close (``closing`` is True now): a graceful stop began, or the
        server closes it to make room. Finish what is in progress, start nothing new, and tell
        the peer where the protocol can. Runs in the hub: must not block; may come more than
        once (a stop after a stop)."""
        raise NotImplementedError

    def expire_request(self, now):
        """The sweeper saw ``connection.request_deadline`` pass (in the hub): interrupt each
        request whose own deadline has passed (throw ``wsgi.RequestTimeout`` where its
        application waits), and leave ``request_deadline`` at the next one armed, or 0.0."""
        raise NotImplementedError

    def close(self):
        """The connection ended (called once, in its greenlet, however it ended): let go of
        everything, breaking reference cycles, so that it is freed without the GC."""
        raise NotImplementedError


class Connection:
    """One accepted connection: the socket, the deadlines, the output queue (see the module
    docstring), its start, and the protocol chosen after it (``protocol``)."""

    # The attributes connection.pxd declares, as slots in the pure build too: as an instance
    # dict, more than 30 of them (CPython's limit for a class's shared keys) make every
    # attribute read and write of the hot path take the slower path of an ordinary dict.
    __slots__ = (
        "server", "setup", "sock", "address", "environ", "early", "protocol", "out", "closing", "keepalive",
        "header_timeout", "send_timeout", "request_deadline", "idle", "greenlet", "done", "requests", "linger",
        "evicted", "killed", "deadline", "waiter", "head_deadline", "recv_buffer", "direct_io", "_flush_pending", "_raw",
        "_hub_switch", "_to_hub", "_switch", "_read_event", "_write_event", "duplex", "sending", "_woken", "_tls",
        "_wake_pending",
    )

    def __init__(self, server, sock, address):
        self.server = server
        self.sock = sock
        self.address = address
        setup = self.setup = server.connection_setup  # the server's settings (wsgi.ConnectionSetup)
        # The connection's own environ keys (the server's, the peer's, a PROXY header's, TLS's):
        # the protocol takes it when it is made, and each request's environ is a copy of it.
        self.environ = connection_environ(server.base_environ, address)
        self.early = b""  # read before the protocol was chosen: the protocol's first bytes
        self.protocol = None  # made after the PROXY header and the TLS handshake (run)
        self.out = []
        self.closing = server.stopping
        self.keepalive = setup.keepalive
        self.header_timeout = setup.header_timeout
        self.send_timeout = setup.send_timeout
        self.request_deadline = 0.0  # 0.0: no request waiting for its head under request_timeout
        self.idle = True  # no request yet (but see shutdown(): one is awaited)
        self.greenlet = getcurrent()
        self.done = False  # served and closed: its greenlet may serve another connection now
        self.requests = 0
        self.linger = False  # close in two steps: the client may still be sending
        self.evicted = False  # closed to make room in a full pool (make_room)
        self.killed = False  # kill() threw GreenletExit into its greenlet (a stop past its timeout)
        self.deadline = 0.0  # 0.0: not waiting on I/O; else monotonic time to give up
        self.waiter = None  # the greenlet blocked in this connection's I/O, when deadline is set
        self._flush_pending = False
        # A protocol whose streams queue output from greenlets of their own (HTTP/2) sets
        # ``duplex``: its output is sent by the hub and by the connection's greenlet, woken
        # from its wait for the peer for it (send_soon, wake); never by a stream's greenlet.
        self.duplex = False
        self.sending = False  # a greenlet waits for room to send: the hub's sends wait for it
        self._woken = False  # the greenlet was woken from its read (plain socket): receive() says -1
        self._wake_pending = False
        self.head_deadline = monotonic() + self.header_timeout
        # The server's receive buffer, shared by all its connections (see receive).
        self.recv_buffer = setup.recv_buffer
        # Plain gevent sockets: talk to the underlying non-blocking socket directly and wait on
        # the gevent socket's own watchers only when the kernel says EAGAIN. This skips gevent's
        # generic sendall (a getsockopt syscall and several Python frames per call) and recv
        # wrappers; TLS sockets and anything unusual take gevent's ordinary methods.
        raw = getattr(sock, "_sock", None)
        # The compiled build calls recv(2)/send(2) on the descriptor itself (_csys.pyx).
        direct_io = _SYS is not None and raw is not None and _SYS.owns_descriptor(raw)
        # (Asked of the socket itself where there is one: gevent's family and setsockopt are
        # Python wrappers converting to and from enums, 7,700 instructions a connection.)
        plain = raw if raw is not None else sock
        if plain.family in _TCP_FAMILIES:
            # Without this, a response that fits in one packet waits for the client's delayed
            # ACK of the previous one: ~40 ms per keep-alive request (gevent #1233).
            if direct_io:
                _SYS.no_delay(raw)
            else:
                try:
                    plain.setsockopt(_socket.IPPROTO_TCP, _socket.TCP_NODELAY, 1)
                except OSError:
                    pass
        # The socket's watchers, taken at the first wait (_read_watcher): an AcceptedSocket makes
        # them only then.
        self._read_event = self._write_event = None
        if setup.ssl_context is None and raw is not None and (type(sock) is AcceptedSocket or hasattr(sock, "_read_event")):
            self._raw = raw
            self._own_waits(sock.hub)
            self.direct_io = direct_io
        else:
            self._raw = None
            self._switch = None
            self.direct_io = False
        self._tls = None  # the TLS object read and written directly, after the handshake (_take_tls)

    def _own_waits(self, hub):
        # What gevent's hub.wait(watcher) does, minus its Waiter object and two call layers:
        # the watcher's callback switches straight back into this greenlet.
        self._hub_switch = hub.switch
        # The connection's own greenlet switches to the hub with greenlet's switch itself:
        # gevent's Hub.switch first asks the current greenlet for a switch_out hook, which
        # only the hub has (it refuses to block in itself), never a connection's greenlet.
        self._to_hub = _greenlet_switch.__get__(hub) if isinstance(hub, _greenlet) else hub.switch
        # Bound once: a wait would otherwise make (and free) a bound method each time.
        self._switch = self.greenlet.switch

    def take_over(self, greenlet):
        """``greenlet`` is the connection's from now on: the one its waits, wakes and kill()
        reach (HTTP/2: the greenlet that reads the connection while its own runs a stream whose
        application blocked, http2_protocol._read_for; and the connection's own again after)."""
        self.greenlet = greenlet
        self._switch = greenlet.switch

    # --- the start, then the protocol ---

    def run(self, received=False):
        """Serve the connection: its start, then its protocol. ``received``: another worker
        accepted it, read its PROXY header and placed it here (--sticky: ``serve_received``)."""
        setup = self.setup
        error_log = setup.error_log
        try:
            if not received:
                # --proxy-protocol: one test per connection when off.
                if setup.proxy_protocol is not None and not self._read_proxy_header():
                    return
                # --sticky: the client's owner takes the connection (a test per connection when
                # off); the address is known now, unless a trusted proxy's X-Forwarded-For
                # names another client in a request (then the protocol hands it over there).
                if setup.sticky is not None and setup.sticky.elsewhere(self):
                    return
            if setup.ssl_context is not None and not self._tls_handshake():
                return
            protocol = self.protocol = setup.choose_protocol(self)
            self.environ = None  # the protocol's now (an idle WebSocket keeps no copy of it here)
            early = self.early
            self.early = b""
            protocol.serve(early)
            if self.out:
                self.flush()  # a response the hub had not sent yet (the client closed first)
            if self.linger:
                self._lingering_close()
        except errors.ClientDisconnected as exc:
            if error_log.debug_enabled:
                error_log.debug("client %s went away: %s" % (self.peer(), exc))
        except Exception as exc:  # a bug of ours: say so once, with the traceback
            error_log.exception("internal error on connection from %s" % (self.peer(),), exc)
        finally:
            protocol = self.protocol
            if protocol is not None:
                self.protocol = None
                protocol.close()
            self._switch = None  # the greenlet's bound switch: no reference left to it

    def _read_proxy_header(self):
        """The PROXY protocol header that starts the connection (--proxy-protocol). False: close.

        Only a trusted peer may send one (the spec: "The receiver SHOULD ensure proper access
        filtering so that only trusted proxies are allowed to use this protocol"); anyone else
        could claim any address. It is read under the first request head's deadline
        (header_timeout): the header, a TLS handshake and the head share it. Over TLS the
        header comes before the handshake, and only the header's own bytes are read (the
        parser's ``wanted``): the rest belongs to the TLS socket. A plain connection reads what
        has arrived and hands what follows the header (a request sent in the same packet) to
        the protocol (``early``).
        """
        server = self.server
        setup = self.setup
        if isinstance(self.address, tuple) and self.address[0] not in setup.proxy_protocol:
            self._proxy_refused("the peer is not in forwarded_allow_ips", True)
            return False
        parser = ProxyHeaderParser()
        exact = setup.ssl_context is not None
        sock = self.sock
        self.deadline = self.head_deadline
        self.waiter = self.greenlet
        got = 0  # bytes of a header begun: a peer that sent part of one is told apart from a silent one
        try:
            header = None
            while header is None:
                received = sock.recv_into(server.recv_buffer, parser.wanted if exact else 0)
                if not received:
                    self._proxy_refused(
                        "closed after %d bytes, before a complete PROXY protocol header" % got, got > 0)
                    return False
                got += received
                header = parser.feed(server.recv_view[:received])
        except Expired:
            # header_timeout passed, or a stop or a full pool closed the waiting connection.
            self._proxy_refused("no complete PROXY protocol header in time (%d bytes of one)" % got, got > 0)
            return False
        except ProxyProtocolError as exc:
            self._proxy_refused(exc, True)
            return False
        except OSError as exc:  # a reset
            self._proxy_refused("%s (after %d bytes of a PROXY protocol header)" % (exc, got), got > 0)
            return False
        finally:
            self.deadline = 0.0
        if parser.rest:
            self.early = parser.rest  # the protocol's first bytes
        if not header.local:
            # A header without addresses (v2 LOCAL: the proxy's own health check; v1 UNKNOWN)
            # leaves the connection's own endpoints, as the spec says.
            source, destination = header.source, header.destination
            self.address = source
            environ = self.environ
            environ["REMOTE_ADDR"] = source[0]
            environ["REMOTE_PORT"] = str(source[1])
            environ["SERVER_NAME"] = destination[0]
            environ["SERVER_PORT"] = str(destination[1])
            if header.ssl is not None:
                # v2 with the SSL TLV (HAProxy's send-proxy-v2-ssl): how the client connected
                # to the proxy. Without it (and with v1) the listener's scheme stands.
                environ["wsgi.url_scheme"] = "https" if header.ssl else "http"
        return True

    def _proxy_refused(self, why, misconfigured):
        # INFO when the sender is misconfigured or hostile (the operator should see it): an
        # untrusted peer, bytes that are no header, a header cut short. DEBUG when a peer went
        # away or stayed silent before its first byte: a balancer's TCP check connects and
        # closes every second or two, and would fill the log.
        error_log = self.server.error_log
        if misconfigured:
            error_log.info("PROXY protocol: closed the connection from %s: %s" % (self.peer(), why))
        elif error_log.debug_enabled:
            error_log.debug("PROXY protocol: closed the connection from %s: %s" % (self.peer(), why))

    def _tls_handshake(self):
        # In the connection's greenlet and under header_timeout: a client that connects and
        # never says hello holds one greenlet for a bounded time, never the accept loop.
        server = self.server
        try:
            # gevent's SSLSocket with the context given: cooperative even for a stdlib context
            # (what gevent's own SSLContext.wrap_socket does).
            tls = server.ssl_socket_class(
                sock=self.sock, server_side=True, do_handshake_on_connect=False, _context=self.setup.ssl_context
            )
        except OSError as exc:
            self._handshake_failed(exc)
            return False
        # The plain socket now belongs to the TLS one: closing the TLS socket closes both.
        self.sock = tls
        self.deadline = self.head_deadline
        self.waiter = self.greenlet
        try:
            tls.do_handshake()
        except Expired:
            self._handshake_failed("no handshake within header_timeout")
            return False
        except OSError as exc:  # ssl.SSLError, resets: all OSError
            self._handshake_failed(exc)
            return False
        finally:
            self.deadline = 0.0
        if server.client_certs:
            # Once per connection: every request's environ is a copy of the connection's.
            self.environ.update(client_cert_environ(tls))
        self._take_tls(tls)
        return True

    def _take_tls(self, tls):
        """Read and write the TLS records through the socket's SSL object, waiting on the
        socket's watchers as a plain socket's reads and writes do (``_wait_for``), rather than
        through gevent's SSLSocket methods: those are Python frames around the same calls, and
        their waits can be left only by an exception thrown in (``_Woken``: a C++ unwind in
        greenlet, 4 % of an HTTP/2 request over TLS). A TLS socket of another kind keeps its
        own methods."""
        global _SSLWantRead, _SSLWantWrite, _SSLZeroReturn, _SSLEOF, _SSLError
        sslobj = getattr(tls, "_sslobj", None)
        if sslobj is None or not isinstance(tls, GeventSocket) or not hasattr(tls, "_read_event"):
            return
        if _SSLError is None:
            # Imported here, not at the top: a server without TLS does not load ssl's modules.
            import ssl

            _SSLWantRead, _SSLWantWrite = ssl.SSLWantReadError, ssl.SSLWantWriteError
            _SSLZeroReturn, _SSLEOF, _SSLError = ssl.SSLZeroReturnError, ssl.SSLEOFError, ssl.SSLError
        self._own_waits(tls.hub)
        self._tls = sslobj

    def _handshake_failed(self, why):
        error_log = self.server.error_log
        if error_log.debug_enabled:
            error_log.debug("TLS handshake with %s failed: %s" % (self.peer(), why))

    # --- input ---

    def receive(self, timeout, wait_first=False):
        """Read what the peer sent into ``recv_buffer``, waiting at most ``timeout`` seconds for
        it (then socket.timeout); the number of bytes, 0 when the peer closed. A reset is
        ``errors.ClientDisconnected``.

        ``recv_buffer`` is the server's, shared by all its connections (an idle connection holds
        no buffer at all): the caller copies what it got (its parser's ``feed``) before anything
        can switch greenlets. ``wait_first``: wait until the socket is readable before reading,
        for a peer that sends only once it has read what was sent to it (a keep-alive client's
        next request), instead of trying a recv that fails with EAGAIN (a syscall and an
        exception saved a request).

        -1: nothing was read, and another greenlet (or the hub) asked the connection's greenlet
        to come back from its wait (``wake``, ``send_soon`` on a ``duplex`` connection): its
        protocol sends what was queued meanwhile, and decides again how long to wait.
        """
        raw = self._raw
        if raw is None:
            if self._tls is not None:
                return self._recv_tls(timeout, wait_first)
            return self._recv_generic(timeout)
        if wait_first:
            watcher = self._read_event  # (made at the connection's first wait: _read_watcher)
            if watcher is None:
                watcher = self._read_watcher()
            self._wait_for(watcher, timeout)
        while True:
            if self.direct_io:
                received = _SYS.recv(raw, self.recv_buffer)
                if received >= 0:
                    return received
            else:
                try:
                    return raw.recv_into(self.recv_buffer)
                except BlockingIOError:
                    pass
                except OSError as exc:  # ECONNRESET, ...
                    raise errors.ClientDisconnected(exc) from None
            if self._woken:
                self._woken = False
                return -1  # (wake) the protocol sends what its streams queued, then reads again
            if self.idle and self.out:
                self.flush()  # what the hub could not send (see _flush_from_hub)
            self._wait_for(self._read_watcher(), timeout)

    def receive_body(self, timeout):
        """``receive`` for a request body an application reads (``wsgi.input``): nothing in
        ``timeout`` seconds (``body_timeout``) is the client's fault, answered 408, and the
        peer's close mid-body is ``errors.ClientDisconnected``."""
        try:
            received = self.receive(timeout)
        except _timeout_error:
            raise errors.ProtocolError("request body not received in time", 408) from None
        if not received:
            raise errors.ClientDisconnected("connection closed during the request body")
        return received

    def _read_watcher(self):
        watcher = self._read_event
        if watcher is None:
            watcher = self._read_event = _made(self.sock._read_event)
        return watcher

    def _write_watcher(self):
        watcher = self._write_event
        if watcher is None:
            watcher = self._write_event = _made(self.sock._write_event)
        return watcher

    def _wait_for(self, watcher, timeout):
        """Block the calling greenlet until watcher fires; socket.timeout when the deadline passes.

        The sweeper throws ``Expired`` into ``waiter`` at the deadline; gevent throws its
        cancel_wait error (an OSError) into the greenlet its callback belongs to when the
        socket is closed under us. Any other switch back is harmless: the caller retries its
        non-blocking call and waits again on EAGAIN. A ``timeout`` below zero waits under no
        deadline and leaves ``deadline`` and ``waiter`` to a send another greenlet may be
        waiting in (see receive_for_application).
        """
        if watcher.callback is not None:
            # gevent's own check (ConcurrentObjectUseError): one greenlet waits per watcher.
            raise ConcurrentObjectUseError("another greenlet is already waiting on %r" % (watcher,))
        waiter = getcurrent()
        if timeout >= 0.0:
            self.deadline = clock() + timeout
            self.waiter = waiter
        own = waiter is self.greenlet
        if own:
            watcher.start(self._switch)
        else:  # another greenlet of the app's reads the body (wsgi.input)
            watcher.start(waiter.switch)
        try:
            if own:
                self._to_hub()
            else:
                self._hub_switch()
        except Expired:
            raise _timeout_error() from None
        except OSError as exc:  # the socket was closed under us
            raise errors.ClientDisconnected(exc) from None
        finally:
            watcher.stop()
            if timeout >= 0.0:
                self.deadline = 0.0

    def take(self, n):
        """The first ``n`` bytes ``receive`` read, as bytes the caller keeps: the receive buffer
        is the next connection's once this greenlet switches."""
        if _SYS is not None:
            return _SYS.take(self.recv_buffer, n)
        return bytes(self.server.recv_view[:n])

    def receive_for_application(self):
        """What the peer sent next, read into the server's receive buffer (``recv_buffer``: copy
        it out before this greenlet can switch); 0 when the peer closed or the connection is gone.

        For a reader the application runs (the built-in WebSocket), in whichever greenlet calls
        it: no deadline of the connection's (the wait is the application's, and a
        ``gevent.Timeout`` passes through), and a timeout the application set on the socket is
        kept (gevent's ``recv_into`` reads then, as it does for TLS, whose records it decrypts).
        A plain socket is read as the protocol's reads are (``receive``): the descriptor
        itself, parked on its read watcher at EAGAIN; tests/websocket/test_builtin.py's
        test_receive_reads_a_plain_socket_directly fails when it is not.
        """
        raw = self._raw
        sock = self.sock
        try:
            if raw is None or sock.timeout is not None:
                return sock.recv_into(self.server.recv_buffer)
            while True:
                if self.direct_io:
                    received = _SYS.recv(raw, self.recv_buffer)
                    if received >= 0:
                        return received
                else:
                    try:
                        return raw.recv_into(self.recv_buffer)
                    except BlockingIOError:
                        pass
                self._wait_for(self._read_watcher(), -1.0)
        except OSError:  # a reset, the socket closed under the wait (ClientDisconnected), ...
            return 0

    def _recv_tls(self, timeout, wait_first):
        """receive() over TLS (_take_tls): a record the SSL object holds already is read
        without waiting; woken (wake), -1 as on a plain socket. ``wait_first`` with nothing
        decrypted pending: wait until the socket is readable before reading, as on a plain
        socket, and more so here: a read that finds nothing raises SSLWantReadError, which
        CPython's ssl builds with its library and reason (7,000 instructions)."""
        tls = self._tls
        buffer = self.recv_buffer
        if wait_first and not tls.pending():
            self._wait_for(self._read_watcher(), timeout)
        while True:
            if self._woken:
                # Woken to send (what the hub could not write: _flush_from_hub), not by the
                # peer: a read now would find nothing, at the price of an SSLWantReadError.
                self._woken = False
                return -1
            try:
                return tls.read(len(buffer), buffer)
            except _SSLWantRead:
                watcher = self._read_watcher()
            except _SSLWantWrite:  # (a TLS 1.2 renegotiation's record to send)
                watcher = self._write_watcher()
            except (_SSLZeroReturn, _SSLEOF):
                return 0  # the client's close_notify, or a close without one: the peer closed
            except OSError as exc:  # ssl.SSLError, ECONNRESET, ...
                raise errors.ClientDisconnected(exc) from None
            self._wait_for(watcher, timeout)

    def _recv_generic(self, timeout):
        self.deadline = monotonic() + timeout
        self.waiter = getcurrent()
        try:
            return self.sock.recv_into(self.recv_buffer)
        except Expired:
            raise _timeout_error() from None
        except _Woken:
            return -1  # (wake) as receive() says
        except OSError as exc:  # ECONNRESET, TLS EOF, ...
            raise errors.ClientDisconnected(exc) from None
        finally:
            self.deadline = 0.0

    def receive_pending(self):
        """For a connection being closed by a stop or to make room (else 0): what the kernel
        already holds for it, read into ``recv_buffer`` without waiting. A request that arrived
        just before the close is answered (with Connection: close) instead of being reset unread."""
        raw = self._raw
        if not self.closing or raw is None:
            return 0  # (TLS: its buffered records cannot be read without waiting)
        try:
            return raw.recv_into(self.recv_buffer)
        except OSError:  # BlockingIOError: nothing there; anything else: the peer is gone
            return 0

    # --- output ---

    def flush(self):
        out = self.out
        n = len(out)
        if not n:
            return
        if n == 1:
            data = out[0]
        elif n == 2 and len(out[1]) <= _JOIN_LIMIT:
            # The common case: one response, head and body.
            if self.direct_io and len(out[1]) >= _GATHER_MIN and type(out[0]) is bytes and type(out[1]) is bytes:
                head = out[0]
                body = out[1]
                out.clear()
                self._send_two(head, body)
                return
            data = _JOINER.join(out)
        else:
            total = 0
            for piece in out:
                total += len(piece)
            if total > _JOIN_LIMIT:
                # Joining would copy a large body: send the pieces one by one instead.
                pieces = out[:]
                out.clear()
                for piece in pieces:
                    self._send(piece)
                return
            data = _JOINER.join(out)
        out.clear()
        self._send(data)

    def _flush_more(self):
        """flush(), telling the kernel that more follows at once (MSG_MORE): the head of a file's
        response waits for the file's first bytes, and they leave in the same segments, as with
        nginx's tcp_nopush; not a packet of its own, which the client acknowledges apart (on
        loopback, both paid on the server's CPU). TLS, another socket, or a full buffer: flush()."""
        raw = self._raw
        if raw is None or not _MSG_MORE:
            self.flush()
            return
        out = self.out
        data = out[0] if len(out) == 1 else _JOINER.join(out)
        out.clear()
        try:
            sent = raw.send(data, _MSG_MORE)
        except BlockingIOError:
            sent = 0
        except OSError as exc:  # EPIPE, ECONNRESET, ...
            raise errors.ClientDisconnected(exc) from None
        if sent < len(data):
            out.append(data[sent:])
            self.flush()

    def flush_scheduled(self):
        """Will the hub send what is queued at the end of this turn (send_soon, flush_if_blocked)?"""
        return self._flush_pending

    def flush_if_blocked(self):
        """Have the hub send what is queued if this greenlet blocks before it flushes itself
        (where the hub can send for it: not over TLS)."""
        if not self._flush_pending and self._raw is not None:
            self._flush_pending = True
            self.server.loop.run_callback(self._flush_from_hub)

    def send_soon(self):
        """For a ``duplex`` protocol's streams, from their own greenlets: have what is queued in
        ``out`` sent without the caller sending it. The hub sends it at the end of this turn of
        the loop, with every other connection's (a plain socket, or TLS records through the SSL
        object: _write_tls_from_hub); what the kernel does not take then, and everything on a
        socket of another kind, the connection's greenlet sends, woken from its wait for the
        peer (receive() returns -1). So one greenlet at a time sends, in the order ``out`` holds: a stream's
        greenlet never waits on the socket, and two senders never interleave their bytes."""
        if not self._flush_pending:
            self._flush_pending = True
            self.server.loop.run_callback(self._flush_from_hub)

    def wake(self):
        """Have the connection's greenlet, if it waits in receive() for the peer, come back from
        it with -1 at the end of this turn (from another greenlet or the hub: a ``duplex``
        protocol that must decide again how long to wait, a graceful stop's deadline)."""
        if not self._wake_pending:
            self._wake_pending = True
            self.server.loop.run_callback(self._wake_from_hub)

    def _wake_from_hub(self):
        self._wake_pending = False
        self._wake_reader()

    def _wake_reader(self):
        # In the hub. Only a greenlet waiting in receive() for the peer is woken (its own, with
        # a deadline, and not blocked sending): anywhere else it is running its protocol's
        # loop, which looks at ``out`` before its next wait.
        waiter = self.waiter
        if waiter is not self.greenlet or not self.deadline or self.sending or waiter is None or waiter.dead:
            return
        if self._raw is None and self._tls is None:
            waiter.throw(_Woken())  # gevent's TLS read waits on a Waiter: see _Woken
        else:
            self._woken = True
            self._switch()  # _wait_for returns; receive() finds nothing and says -1

    def flush_at_end_of_turn(self):
        """Send what is queued from the hub at the end of this turn of the loop, after every
        connection woken in the turn has run; over TLS (whose records the TLS socket writes,
        in this greenlet), now.

        For a response the peer must read before it sends again (a keep-alive response): the
        responses every connection completed in one turn go out back to back, and a client on
        another core is woken once for them instead of once each (issue 31: the loopback
        send's wake-up was 15 % of a Flask worker's samples). One alone waits for nothing.
        """
        if self._raw is None:
            self.flush()
        elif not self._flush_pending:
            self._flush_pending = True
            self.server.loop.run_callback(self._flush_from_hub)

    def _flush_from_hub(self):
        # Runs in the hub, so only when the connection's greenlet is blocked (in app code, or in
        # its own recv with nothing queued). A non-blocking send: what the kernel does not take
        # stays queued, in order, for the greenlet's own next flush. A greenlet blocked in its
        # own send (``sending``) has taken what it sends out of ``out``: what others queued
        # since waits for it, or it would overtake the rest of that send.
        self._flush_pending = False
        out = self.out
        if not out or self.sending or self.done:
            # (sending: a greenlet sends what it took from ``out``; the rest after it. done:
            # the connection's socket is closed, and a TLS write would not check it.)
            return
        if self._raw is None and self._tls is None:
            self._wake_reader()  # (a socket of another kind) only its greenlet can send
            return
        if len(out) == 2 and self.direct_io and len(out[1]) >= _GATHER_MIN and type(out[0]) is bytes and \
                type(out[1]) is bytes:
            # A response's head and a body of a few KiB (a static file's from memory): one
            # sendmsg(2), not a join that copies the body only for the kernel to copy it again
            # (perf, 10 KiB files: memmove was 4.5 % of the worker's time).
            head = out[0]
            sent = _SYS.send2(self._raw, head, out[1])
            if sent == len(head) + len(out[1]):
                out.clear()
                return
            if sent > 0:
                # What is left, without joining the body to the head only to cut it again.
                if sent < len(head):
                    out[0] = head[sent:]
                else:
                    out[:] = [out[1][sent - len(head):]]
            self._hub_sent_short()
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        if self._raw is None:
            sent = self._write_tls_from_hub(data)
            if sent < 0:
                return  # the greenlet meets the error at its own next write
            if not sent:
                out[:] = [data]  # (the retry OpenSSL wants: these bytes, first and whole)
        else:
            try:
                sent = self._raw.send(data)
            except BlockingIOError:
                sent = 0
            except OSError:
                return  # the greenlet meets the error at its own next send
        if sent == len(data):
            out.clear()
            return
        if sent:
            out[:] = [data[sent:]]
        self._hub_sent_short()

    def _hub_sent_short(self):
        """The hub's send left bytes in ``out``: have the greenlet send them, waiting for room."""
        if self.duplex:
            self._wake_reader()  # its protocol sends the rest, waiting for room
        elif self.idle and self.waiter is self.greenlet and self.deadline:
            # The greenlet waits for a request the client sends only after reading the rest:
            # wake it, and receive() sends the rest (waiting for room) before it waits again.
            self._switch()

    def _write_tls_from_hub(self, data):
        # send_soon over TLS (every HTTP/2 response): the records are written here, in the hub,
        # as a plain socket's bytes are, rather than by the connection's greenlet woken for
        # them (two greenlet switches and a turn of its loop a response: callgrind h2load
        # -c100 -m1, 7,000 instructions of 94,000). Safe between the greenlet's own calls: the
        # SSL object is in none of them (it waits between calls, never inside one), and OpenSSL
        # 3 refuses a client's renegotiation, the one way a write could need a read first.
        # A write the kernel had no room for (SSLWantWriteError) has its record buffered in
        # the SSL object: OpenSSL wants it retried with the same bytes, and ``data`` stays at
        # the front of ``out`` for the greenlet, whose next write starts with them (CPython
        # sets SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER, and a longer buffer with the same start
        # is a retry: ssl3_write_bytes). 0: nothing sent, the greenlet sends it; len(data): all;
        # -1: the SSL object failed (a reset, a TLS error).
        try:
            self._tls.write(data)
        except (_SSLWantWrite, _SSLWantRead):
            return 0
        except OSError:
            return -1  # the greenlet meets the error at its own next write
        return len(data)

    def _send(self, data):
        raw = self._raw
        if raw is None:
            if self._tls is not None:
                return self._send_tls(data)
            return self._send_generic(data)
        if self.direct_io and type(data) is bytes:
            sent = _SYS.send(raw, data)
            if sent < 0:
                sent = 0
        else:
            try:
                sent = raw.send(data)
            except BlockingIOError:
                sent = 0
            except OSError as exc:  # EPIPE, ECONNRESET, ...
                raise errors.ClientDisconnected(exc) from None
        if sent == len(data):
            return
        # The kernel's send buffer is full: wait for room, send the rest.
        view = memoryview(data)[sent:]
        self.sending = True
        try:
            while view:
                try:
                    self._wait_for(self._write_watcher(), self.send_timeout)
                except _timeout_error:
                    raise errors.ClientDisconnected("client did not read the response in time") from None
                try:
                    sent = raw.send(view)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    raise errors.ClientDisconnected(exc) from None
                view = view[sent:]
        finally:
            self.sending = False
            view.release()

    def _send_two(self, head, body):
        """head and body in one sendmsg(2), not joined first; what the kernel did not take
        goes as _send sends, joined (a full send buffer: rare, and a wait follows anyway)."""
        sent = _SYS.send2(self._raw, head, body)
        if sent == len(head) + len(body):
            return
        if sent < 0:
            sent = 0
        self._send(_JOINER.join([head, body])[sent:])

    def _send_tls(self, data):
        """data as TLS records (_take_tls), waiting for room under send_timeout. The SSL
        object writes all of it or none (no partial writes: an SSLWantWriteError is retried with
        the same data, as OpenSSL asks)."""
        tls = self._tls
        while True:
            try:
                sent = tls.write(data)
            except _SSLWantWrite:
                watcher = self._write_watcher()
            except _SSLWantRead:
                watcher = self._read_watcher()
            except OSError as exc:  # ssl.SSLError, EPIPE, ECONNRESET, ...
                raise errors.ClientDisconnected(exc) from None
            else:
                if sent >= len(data):
                    return
                data = data[sent:]
                continue
            self.sending = True
            try:
                self._wait_for(watcher, self.send_timeout)
            except _timeout_error:
                raise errors.ClientDisconnected("client did not read the response in time") from None
            finally:
                self.sending = False

    def _send_generic(self, data):
        self.deadline = monotonic() + self.send_timeout
        self.waiter = getcurrent()
        self.sending = True
        try:
            self.sock.sendall(data)
        except Expired:
            raise errors.ClientDisconnected("client did not read the response in time") from None
        except OSError as exc:  # EPIPE, ECONNRESET, ...
            raise errors.ClientDisconnected(exc) from None
        finally:
            self.deadline = 0.0
            self.sending = False

    def send_file(self, fileno, offset, count):
        """Send what ``out`` holds (the response's head), then count bytes of a regular file with
        os.sendfile: at most _SENDFILE_CHUNK between two polls of the loop, and waiting for room
        when the socket is full."""
        if self.out:
            self._flush_more()
        sockfd = self.sock.fileno()
        budget = _SENDFILE_CHUNK  # what may still go before the loop polls again
        while count > 0:
            if budget <= 0:
                # The socket took a chunk and would take more: wait for it to be writable, which
                # it is, so the wait ends at the loop's next poll, after what else was ready.
                self._wait_writable()
                budget = _SENDFILE_CHUNK
            try:
                sent = os.sendfile(sockfd, fileno, offset, min(count, budget))  # (looked up each call: tests spy on it)
            except BlockingIOError:
                self._wait_writable()
                budget = _SENDFILE_CHUNK
                continue
            except OSError as exc:
                if exc.errno in _PEER_GONE:
                    raise errors.ClientDisconnected(exc) from None
                raise
            if sent == 0:
                raise IOError("file ended %d bytes short of its announced size" % count)
            offset += sent
            count -= sent
            budget -= sent

    def _wait_writable(self):
        """Wait for room in the socket as _send does: its write watcher, under send_timeout."""
        self.sending = True
        try:
            self._wait_for(self._write_watcher(), self.send_timeout)
        except _timeout_error:
            raise errors.ClientDisconnected("client did not read the response in time") from None
        finally:
            self.sending = False

    def _lingering_close(self):
        """Close in two steps when the client may still be sending (RFC 9112 §9.6).

        Closing a socket whose receive queue holds unread data makes the kernel send a reset,
        and a reset can destroy our last response in the client's buffers before it is read.
        So: stop sending (FIN), then read and drop what still arrives, for a bounded time and
        amount, until the client closes too. (nginx's lingering_close does the same.)
        """
        if self._raw is None:
            return  # TLS: a half-close would end the TLS session; close at once.
        try:
            self.sock.shutdown(_socket.SHUT_WR)
        except OSError:
            return
        deadline = monotonic() + _LINGER_SECONDS
        dropped = 0
        while dropped < _LINGER_BYTES:
            remaining = deadline - monotonic()
            if remaining <= 0:
                return
            try:
                received = self.receive(remaining)  # dropped: not copied out of recv_buffer
            except (_timeout_error, errors.ClientDisconnected):
                return
            if not received:
                return
            dropped += received

    def expire_request(self, now):
        """The server's sweeper saw ``request_deadline`` pass: the protocol interrupts what ran
        out of ``request_timeout`` (``Protocol.expire_request``)."""
        protocol = self.protocol
        if protocol is None:
            self.request_deadline = 0.0
            return
        protocol.expire_request(now)

    def is_sending(self):
        """Does a greenlet wait for room to send on this connection's socket right now?"""
        sending = made_watchers(self.sock)[1]
        return sending is not None and sending.callback is not None

    # --- graceful stop, and room under pressure ---

    def close_plain(self):
        """Close a plain socket no greenlet waits on, directly; False: close it the usual way.

        gevent's close() wakes every greenlet waiting on the socket's watchers and closes the
        descriptor only after they have run: a hub callback and a dozen Python frames, about
        16,000 instructions per connection (callgrind). At the end of a connection nothing
        waits on them (an application greenlet reading wsgi.input could: then gevent's close
        runs), so the watchers are closed, then the descriptor, at once.
        """
        raw = self._raw
        if raw is None:
            return False
        # The socket's own: an application holding it (greenserve.socket) may have made them.
        read_event, write_event = made_watchers(self.sock)
        if (read_event is not None and read_event.active) or (write_event is not None and write_event.active):
            return False
        if read_event is not None:
            read_event.close()
        if write_event is not None:
            write_event.close()
        raw.close()
        self.sock._closed = True  # what gevent's socket says it is, to whoever still holds it
        return True

    def kill(self):
        """End this connection where its greenlet waits (GreenletExit); in the hub, by stop()."""
        greenlet = self.greenlet
        # Its greenlet may have moved on to another connection since stop() listed this one.
        if not self.done and greenlet is not None and not greenlet.dead:
            # (``killed``: for a greenlet that runs a stream of its own connection's and catches
            # its stream's kills, http2_protocol's _run_inline: this one is the connection's.)
            self.killed = True
            greenlet.throw(GreenletExit)

    def shutdown(self):
        """Graceful stop: a busy connection finishes its request with Connection: close; one
        waiting for a request closes once it has been quiet for DRAIN_WINDOW.

        Waiting for a request includes a connection that has not sent its first one yet: its
        client connected to send one, and a fresh connection is not retried the way a reused
        one is. A request that arrives within the window is answered, with Connection: close.
        The protocol is told first (``going_away``: HTTP/1.1 closes an open built-in WebSocket
        with 1001 "going away").
        """
        self._going_away()
        if self.idle:
            self.server.loop.run_callback(self._close_when_quiet)

    def _going_away(self):
        """The connection is to close: say so to its protocol (Protocol.going_away)."""
        self.closing = True
        protocol = self.protocol
        if protocol is not None:
            protocol.going_away()

    def _quiet_since(self):
        """When a connection waiting for a request last heard from its client: the first byte
        of an unfinished head (or the connection's start), else the start of its keep-alive wait."""
        if self.head_deadline > 0.0:
            return self.head_deadline - self.header_timeout
        return self.deadline - self.keepalive

    def _close_when_quiet(self, timer=None):
        # In the hub, so the connection's greenlet is blocked somewhere right now (the hub
        # switches into a woken greenlet at once). Throw only if that is our wait for a request:
        # a request read meanwhile has cleared ``idle``, and its app is never interrupted.
        if timer is not None:
            timer.close()
        waiter = self.waiter
        if not (self.idle and self.deadline and waiter is not None and not waiter.dead):
            return
        left = self._quiet_since() + min(DRAIN_WINDOW, self.keepalive) - monotonic()
        if left > 0.0:
            timer = self.server.loop.timer(left)
            timer.start(self._close_when_quiet, timer)
            return
        self.deadline = 0.0
        waiter.throw(Expired())

    def make_room(self, now, grace):
        """Close this connection if it holds a slot of a full pool for nothing.

        Called by the server while no new client can be accepted. Idle keep-alive connections
        give way at once (nginx reuses them the same way), and so do connections whose request
        head has been incomplete for ``grace`` seconds (slowloris: a trickled head holds a slot
        for the whole header_timeout otherwise); the latter are told 408. A request already in
        the kernel's buffer is still answered (see receive_pending). Nothing else is touched:
        an application at work, a body being read, a response being sent.

        Returns 0.0 when the connection will close, else the monotonic time from which an
        unfinished head would give way (-1.0: not a candidate at all).
        """
        waiter = self.waiter
        if not self.deadline or waiter is None or waiter.dead or self.evicted:
            return -1.0
        if self.head_deadline > 0.0:
            eligible = self.head_deadline - self.header_timeout + grace
            if now < eligible:
                return eligible
        elif not (self.idle and self.requests):
            return -1.0
        self.evicted = True
        self._going_away()
        self.deadline = 0.0
        waiter.throw(Expired())
        return 0.0

    def peer(self):
        """The peer, for the logs: "host:port", or "unix socket"."""
        address = self.address
        if isinstance(address, tuple):
            return "%s:%s" % (address[0], address[1])
        return "unix socket"

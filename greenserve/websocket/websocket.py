"""``environ["wsgi.websocket"]``: the built-in WebSocket, with gevent-websocket 0.10.1's API and behaviour.

An upgrade request for a WebSocket (a GET whose Upgrade names ``websocket``) gets a
``WebSocket`` in its environ, beside the socket hand-off keys (``greenserve.socket``,
``gunicorn.socket``) that simple-websocket and Flask-Sock use. The handshake is lazy: the 101
goes out on the object's first ``receive()``, ``send()`` or ``close()``, so an application that
answers the request itself (simple-websocket writes its own 101; a 400 or 404 from a router)
still can. Once the 101 is out the WebSocket owns the connection: what the application then
passes to ``start_response`` and returns is dropped (gevent-websocket's handler gives the
application a ``start_response`` that does nothing), and when the application returns, an open
WebSocket is closed with 1000 (1011 if the application raised) and then the TCP connection.

It runs on the connection's socket and in whichever greenlet calls it: ``receive()`` reads in
the caller's greenlet (one reader at a time, as with any gevent socket), sends from any number
of greenlets are serialized whole frames (Flask-SocketIO emits from other greenlets while the
handler waits in ``receive()``). The frame codec is ``frames`` (sans-I/O, compiled in the
compiled build); this module is the gevent-websocket surface around it, which reads and writes
through the connection (``receive_for_application``, its output queue): it touches no socket.
"""

import gevent
from gevent.event import Event
from gevent.lock import Semaphore

from greenserve.http import errors
from greenserve.http.framing import NoBodyWriter, build_head
from greenserve.websocket import frames
from greenserve.websocket.deflate import MIN_COMPRESSED_SIZE
from greenserve.websocket.exceptions import FrameTooLargeException, HandshakeFailed, ProtocolError, WebSocketError
from greenserve.websocket.handshake import HandshakeError, is_websocket_request, negotiate

# gevent-websocket's messages, which applications match on.
MSG_SOCKET_DEAD = "Socket is dead"
MSG_ALREADY_CLOSED = "Connection is already closed"

# close() waits this long for the peer's Close before closing the connection anyway
# (RFC 6455 §7.1.1: the server closes the TCP connection once the closing handshake is done).
CLOSE_TIMEOUT = 2.0


def offer(responder, environ):
    """For an upgrade request: a WebSocket in the environ if it asks for one; the object or None."""
    if not is_websocket_request(environ):
        return None
    websocket = WebSocket(environ, responder)
    environ["wsgi.websocket"] = websocket
    environ["wsgi.websocket_version"] = "13"
    return websocket


class WebSocket:
    """gevent-websocket's ``WebSocket``: ``receive()``, ``send()``, ``close()``, ``closed`` and
    the request's ``path``, ``origin``, ``protocol``, ``version`` (see the module docstring).

    ``started`` says the handshake has been answered (the 101, or its HTTP error).
    """

    __slots__ = (
        "environ",
        "closed",
        "started",
        "_responder",
        "_connection",
        "_parser",
        "_send_lock",
        "_sending",
        "_deflate",
        "_close_sent",
        "_peer_closed",
        "_done",
        "_receiving",
        "_heard",
        "_pinger",
        "__weakref__",
    )

    OPCODE_CONTINUATION = frames.CONTINUATION
    OPCODE_TEXT = frames.TEXT
    OPCODE_BINARY = frames.BINARY
    OPCODE_CLOSE = frames.CLOSE
    OPCODE_PING = frames.PING
    OPCODE_PONG = frames.PONG

    def __init__(self, environ, responder):
        self.environ = environ
        self.closed = False
        self.started = False
        self._responder = responder
        # The connection.Connection under the HTTP/1.1 protocol that carried the upgrade (the
        # responder's ConnectionIO, http11.Http11Protocol): read through its own read
        # (receive_for_application, which takes a plain socket's descriptor directly), sent
        # through its output queue.
        self._connection = responder.connection.connection
        self._parser = None
        self._send_lock = None  # made when two greenlets first contend to send (see _acquire)
        self._sending = False  # a greenlet is sending, while there is no _send_lock
        self._deflate = None
        self._close_sent = False
        self._peer_closed = None  # an Event, set when the closing handshake is over, once ours is sent
        self._done = False  # the closing handshake is over (or the connection is gone)
        self._receiving = False  # a greenlet is in receive()
        self._heard = False  # bytes arrived since the last keepalive ping
        self._pinger = None

    # --- the request, as gevent-websocket shows it ---

    @property
    def path(self):
        return self.environ.get("PATH_INFO")

    @property
    def origin(self):
        return self.environ.get("HTTP_ORIGIN")

    @property
    def protocol(self):
        """The subprotocols the client offered (gevent-websocket's value: the request's field)."""
        return self.environ.get("HTTP_SEC_WEBSOCKET_PROTOCOL")

    @property
    def version(self):
        return self.environ.get("HTTP_SEC_WEBSOCKET_VERSION")

    # --- the handshake ---

    def _start(self):
        """Answer the handshake: the 101 (or the HTTP error, and HandshakeFailed)."""
        responder = self._responder
        connection = self._connection
        protocol = responder.connection  # the HTTP/1.1 protocol (http11.Http11Protocol)
        config = connection.server.config
        outcome = responder.outcome
        # Another greenlet may send or receive while this one is still sending the answer:
        # the send turn orders its frames after the 101, and the codec is ready before it goes out.
        self.started = True
        try:
            if not outcome.body_done:
                raise HandshakeError("a WebSocket handshake has no body")
            handshake = negotiate(self.environ, responder.application, config.websocket_per_message_deflate)
        except HandshakeError as exc:
            self.closed = self._done = True
            status, headers, body = errors.error_response(exc.status, str(exc))
            headers = headers + exc.headers
            self._acquire()
            try:
                self._answer(status, headers, build_head(status, headers, 1, False, False, len(body), responder.server_line)[0] + body)
            finally:
                self._release()
            outcome.body_sent = len(body)
            raise HandshakeFailed("WebSocket handshake refused (%s): %s" % (status, exc), exc.status) from None
        status = "101 Switching Protocols"
        self._deflate = handshake.deflate
        parser = self._parser = frames.FrameParser(config.websocket_max_message_size, handshake.deflate)
        # What the client sent right behind the request's head, before our 101 (a client may
        # pipeline its first frames: RFC 6455 §4.1 asks it to wait, not all do), is in the HTTP
        # parser's buffer: those are the WebSocket's first bytes.
        early = protocol.parser.take_buffered()
        if early:
            parser.receive_data(early)
        self._acquire()
        try:
            self._answer(status, handshake.headers, build_head(status, handshake.headers, 1, False, False, -1, responder.server_line)[0])
        finally:
            self._release()
        # The connection carries no other HTTP request: let go of what only HTTP needed, which
        # an idle WebSocket would otherwise keep for its whole life (about 2 KiB of ~16 per
        # WebSocket, bench/wsbench.py): the connection's environ (each request's is a copy of
        # it; the application holds its own), the head's fields (the environ holds their
        # values), the 101's headers (the access log's line needs only the status and bytes).
        responder.conn_environ = None
        responder.request.headers.clear()
        outcome.headers = None
        interval = config.websocket_ping_interval
        if interval:
            self._pinger = gevent.spawn(self._keepalive, interval)
        if protocol.closing:
            # A graceful stop began while the application was deciding: open, then say goodbye
            # at once, so the client reconnects elsewhere (see going_away).
            self.going_away()

    def _answer(self, status, headers, data):
        """Send the handshake's answer; from now on the connection is the WebSocket's."""
        responder = self._responder
        outcome = responder.outcome
        # What the application passes to start_response and returns from now on is dropped
        # (wsgi.Responder: a second start_response while this status stands is ignored).
        responder.status = status
        responder.writer = NoBodyWriter()
        outcome.headers = headers
        outcome.status_code = int(status[:3])
        outcome.started = True
        outcome.taken_over = True
        outcome.body_done = True
        connection = self._connection
        # The connection closes in two steps (FIN, then read until the client's): RFC 6455 §7.1.1
        # wants the server to close first, and a close with unread bytes (the rest of a message
        # refused with 1009) would reset the connection and lose our Close frame.
        connection.linger = True
        connection.out.append(data)
        try:
            connection.flush()
        except errors.ClientDisconnected:
            self.closed = self._done = True
            raise WebSocketError(MSG_SOCKET_DEAD) from None

    # --- receiving ---

    def receive(self):
        """The next message: str (text) or bytes (binary); None once the WebSocket is closed
        (the peer closed it, the connection was lost, or the peer broke the protocol: then it
        is closed with the protocol's code, 1002, 1007 or 1009)."""
        return self._receive(False)

    def read_message(self):
        """gevent-websocket's lower-level receive: like ``receive()``, but a protocol error is
        raised (``ProtocolError``; ``FrameTooLargeException`` for 1009) after the close is sent."""
        return self._receive(True)

    def _receive(self, raise_errors):
        if self.closed:
            raise WebSocketError(MSG_ALREADY_CLOSED)
        if not self.started:
            self._start()
        self._receiving = True
        try:
            while True:
                try:
                    event = self._next_event()
                except frames.ProtocolError as exc:
                    # RFC 6455 §7.1.7 "Fail the WebSocket Connection": send the Close with its code.
                    self._fail(exc.code, exc.reason)
                    if raise_errors:
                        error = FrameTooLargeException if exc.code == 1009 else ProtocolError
                        raise error("%d %s" % (exc.code, exc.reason)) from None
                    return None
                if event is None:
                    return None
                kind = type(event)
                if kind is frames.Message:
                    return event.data
                if kind is frames.Ping:
                    # §5.5.2: "Upon receipt of a Ping frame, an endpoint MUST send a Pong frame in
                    # response, unless it already received a Close frame."
                    try:
                        self._send(frames.PONG, event.payload)
                    except WebSocketError:
                        return None
                elif kind is frames.Close:
                    self._on_close(event)
                    return None
                # (a Pong: the peer is alive; _heard says so already)
        finally:
            self._receiving = False

    def _next_event(self):
        """The codec's next event, reading as needed; None when the connection is gone."""
        parser = self._parser
        while True:
            event = parser.next_event()
            if event is not frames.NEED_DATA:
                return event
            connection = self._connection
            received = connection.receive_for_application()
            if not received:
                # No Close frame: §7.1.5, the close code is 1006 (abnormal), sent to no one.
                self._lost()
                return None
            self._heard = True
            # The server's receive buffer, shared by its connections as the HTTP side shares it
            # (connection.py): the codec copies what it gets before this greenlet can switch.
            parser.receive_data(connection.server.recv_view[:received])

    def _on_close(self, event):
        """The peer's Close (§5.5.1): answer it, unless this is the answer to ours."""
        self.closed = True
        if not self._close_sent:
            # "the endpoint ... MUST send a Close frame in response. (When sending a Close frame
            # in response, the endpoint typically echos the status code it received.)"
            try:
                self._send_close(event.code, "")
            except WebSocketError:
                pass
        self._ended()

    def _fail(self, code, reason):
        """§7.1.7 "Fail the WebSocket Connection": our Close with the code, and no wait for the
        peer's (the application returns, the connection closes)."""
        self.closed = True
        if not self._close_sent:
            try:
                self._send_close(code, reason)
            except WebSocketError:
                pass
        self._ended()

    def _lost(self):
        self._close_sent = True  # nothing can be sent any more
        self._ended()

    def _ended(self):
        """The closing handshake is over: the peer's Close came, or the connection is gone."""
        self.closed = True
        self._done = True
        waiting = self._peer_closed
        if waiting is not None:
            waiting.set()
        self._stop_pinger()

    # --- sending ---

    def send(self, message, binary=None):
        """Send one message: binary when ``binary`` is true, or when it is None and ``message``
        is not a str (gevent-websocket's rule)."""
        if binary is None:
            binary = not isinstance(message, str)
        if binary:
            self.send_frame(message, frames.BINARY)
        else:
            self.send_frame(message, frames.TEXT)

    def send_frame(self, message, opcode):
        """Send ``message`` as one frame of ``opcode`` (text and ping payloads given as str are
        encoded as UTF-8)."""
        if self.closed:
            raise WebSocketError(MSG_ALREADY_CLOSED)
        if not self.started:
            self._start()
        if isinstance(message, str):
            payload = message.encode("utf-8")
        elif message is None:
            payload = b""
        else:
            payload = bytes(message)
        self._send(opcode, payload)

    def _send(self, opcode, payload):
        deflate = self._deflate
        # One frame at a time on the wire, whichever greenlets send.
        self._acquire()
        try:
            if self._done:
                # The connection is gone, the closing handshake is over, or the handshake was
                # refused, while this greenlet waited for its turn.
                raise WebSocketError(MSG_ALREADY_CLOSED)
            # RFC 7692 §6: RSV1 "indicates whether a message is compressed or not": a short one
            # is sent as it is (see deflate.MIN_COMPRESSED_SIZE).
            if deflate is not None and opcode < frames.CLOSE and len(payload) >= MIN_COMPRESSED_SIZE:
                data = frames.frame(opcode, deflate.compress(payload), True, True)
            else:
                data = frames.frame(opcode, payload)
            connection = self._connection
            connection.out.append(data)
            try:
                connection.flush()
            except errors.ClientDisconnected:
                self._lost()
                raise WebSocketError(MSG_SOCKET_DEAD) from None
        finally:
            self._release()
        self._responder.outcome.body_sent += len(data)

    def _acquire(self):
        """Take the turn to send (one frame at a time on the wire). Most WebSockets never have
        two senders at once, so the lock is made only when a second greenlet finds a send in
        progress (a gevent Semaphore is about 150 B; an idle WebSocket keeps none)."""
        lock = self._send_lock
        if lock is None:
            if not self._sending:
                self._sending = True
                return
            # Made held: the turn is the sender's in progress, which hands it on in _release.
            lock = self._send_lock = Semaphore(0)
        lock.acquire()

    def _release(self):
        lock = self._send_lock
        if lock is None:
            self._sending = False
        else:
            lock.release()

    def _send_close(self, code, reason):
        self._close_sent = True
        self._peer_closed = Event()
        self._send(frames.CLOSE, frames.close_payload(code, reason))

    # --- closing ---

    def close(self, code=1000, message=b""):
        """Start the closing handshake with ``code`` and the reason ``message`` (str or UTF-8
        bytes), and wait up to CLOSE_TIMEOUT for the peer's Close. ``closed`` is True at once
        (gevent-websocket's behaviour); closing a closed WebSocket does nothing."""
        if self.closed:
            return
        if not self.started:
            self._start()  # (a refused handshake raises HandshakeFailed here)
        self.closed = True
        if isinstance(message, (bytes, bytearray)):
            message = bytes(message).decode("utf-8", "replace")
        try:
            self._send_close(code, message or "")
        except WebSocketError:
            return
        self._await_close(True)

    def _await_close(self, may_read):
        """After our Close: wait for the peer's. The greenlet in receive() reads it, if there is
        one; else this one does when ``may_read``. Past CLOSE_TIMEOUT the connection is shut."""
        if self._done:
            return
        if may_read and not self._receiving:
            try:
                with gevent.Timeout(CLOSE_TIMEOUT, False):
                    while not self._done:
                        event = self._next_event()  # (None: the connection is gone, _done)
                        if event is not None and type(event) is frames.Close:
                            break
            except frames.ProtocolError:
                pass
            self._ended()
        elif not self._peer_closed.wait(CLOSE_TIMEOUT):
            self._shut()  # the reader wakes with EOF: its receive() returns None

    def _shut(self):
        try:
            self._connection.sock.shutdown(2)  # socket.SHUT_RDWR
        except OSError:
            pass

    def going_away(self):
        """A graceful stop began (the connection's shutdown()): close with 1001 "going away",
        so that the client reconnects elsewhere, in a greenlet of its own (the stop goes on)."""
        if self.started and not self.closed:
            gevent.spawn(self._go_away)

    def _go_away(self):
        if self.closed:
            return
        self.closed = True
        try:
            # §7.4.1: 1001 "indicates that an endpoint is "going away", such as a server going down"
            self._send_close(1001, "going away")
        except WebSocketError:
            return
        # Not read here: the application's greenlet reads, in receive() or when it returns.
        self._await_close(False)

    def finish(self, failed):
        """The application returned (``failed``: it raised): end what it left open."""
        self._stop_pinger()
        if not self.started or self._done:
            return
        if not self._close_sent:
            self.closed = True
            # 1011: "a server is terminating the connection because it encountered an
            # unexpected condition that prevented it from fulfilling the request" (§7.4.1).
            try:
                self._send_close(1011 if failed else 1000, "")
            except WebSocketError:
                return
        self._await_close(True)

    # --- keepalive ---

    def _keepalive(self, interval):
        """Ping every ``interval`` seconds; a peer from which nothing arrived during a whole
        interval after a ping (not even its Pong) is gone: close with 1011 and drop it."""
        waiting = False
        while not self.closed:
            gevent.sleep(interval)
            if self.closed:
                return
            if waiting and not self._heard:
                self._pinger = None
                self._fail(1011, "keepalive ping timeout")
                self._shut()
                return
            self._heard = False
            waiting = True
            try:
                self._send(frames.PING, b"")
            except WebSocketError:
                return

    def _stop_pinger(self):
        pinger = self._pinger
        if pinger is not None:
            self._pinger = None
            if pinger is not gevent.getcurrent():
                pinger.kill(block=False)

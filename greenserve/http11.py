"""HTTP/1.1 on a connection: the loop that drives the request parser and the responder.

``Http11Protocol`` is what a ``connection.Connection`` hands itself to once its PROXY header and
TLS handshake are done (docs/architecture.md, "The protocol seam"). Its loop asks the parser
(``http.parser.RequestParser``, sans-I/O) for the next event and reads from the connection only
when the parser needs data, so every request already in the buffer (pipelining) is answered
before the next read, and the responses of such a batch go out in one send. Each request is
answered by the connection's one ``wsgi.Responder``, which sees this protocol as its
``ConnectionIO``: an HTTP/1.1 connection carries one request at a time, so the protocol is the
responder's stream, as an HTTP/2 stream is on an HTTP/2 connection (``http2_protocol``).

Timeouts (deadlines the connection's reads arm; see connection.py):

- waiting idle for the next request: ``keepalive`` (then close quietly);
- receiving a request head: ``header_timeout`` from the connection's start (its PROXY header and
  TLS handshake share it) or from the first byte of the head (then 408 and close) -- slowloris
  cannot hold a connection by trickling bytes;
- the app reading the body: ``body_timeout`` per read (and the connection's ``send_timeout`` per
  send);
- the application starting its response: ``request_timeout`` (off unless set), from the call of
  the application until its response's head is queued; then ``RequestTimeout`` is thrown into
  the connection's greenlet wherever the application waits, and the responder answers 504.
"""

import socket as _socket
from time import monotonic

from greenserve.connection import DRAIN_WINDOW, HandOver, clock
from greenserve.http import errors
from greenserve.http.framing import build_head, informational_head
from greenserve.http.head import Request, request_head
from greenserve.http.parser import END_OF_MESSAGE, NEED_DATA, RequestParser
from greenserve.wsgi import ConnectionIO, RequestTimeout, Responder

_timeout_error = _socket.timeout


class Http11Protocol(ConnectionIO):
    """HTTP/1.1 on one connection: the request loop (``serve``), the parser and the responder,
    whose ``ConnectionIO`` it is; a ``connection.Protocol`` (see the module docstring)."""

    # The attributes http11.pxd declares, as slots in the pure build too (see Connection's).
    __slots__ = (
        "connection", "server", "parser", "responder", "outcome", "keepalive", "header_timeout", "body_timeout",
        "request_timeout", "recv_buffer", "recv_view",
    )

    def __init__(self, connection):
        server = self.server = connection.server
        setup = connection.setup
        self.connection = connection
        # ConnectionIO's: one output queue, the connection's (what the responder queues, the
        # connection sends); the socket an upgrade takes over (after TLS: the TLS socket).
        self.out = connection.out
        self.closing = connection.closing
        self.can_sendfile = setup.sendfile
        self.sock = connection.sock
        self.request_deadline = 0.0  # 0.0: no application waiting for its head under the timeout
        self.keepalive = connection.keepalive
        self.header_timeout = connection.header_timeout
        self.body_timeout = setup.body_timeout
        self.request_timeout = setup.request_timeout  # 0.0: off
        # Where the connection's reads land (the server's shared buffer), and a view of it.
        self.recv_buffer = connection.recv_buffer
        self.recv_view = server.recv_view
        self.parser = RequestParser(setup.limits)
        self.responder = Responder(self, server, connection.environ)
        # What respond() reports: the one record the responder refills per request. Held here
        # too, for the access log of a request whose respond() raised.
        self.outcome = self.responder.outcome

    # --- connection.Protocol ---

    def serve(self, early):
        """Answer requests until the connection should close (``Protocol.serve``), or until a
        request's client is another worker's (--sticky: ``HandOver``, raised before its
        application is called), which then serves the connection from that request on."""
        if early:
            self.parser.feed(early)
        while True:
            try:
                self._serve()
                return
            except HandOver as handover:
                if self._hand_over(handover):
                    return

    def _hand_over(self, handover):
        """Hand the connection to the worker that owns the request just read (``handover``): what
        earlier requests' responses left queued goes out first, then the descriptor travels with
        the request's head and every byte read after it. True: handed over, this worker is done
        with it. False: it could not be (the place said why, and skips that worker for a while):
        the request is served here, parsed again."""
        connection = self.connection
        request = self.responder.request
        self.responder.release()
        connection.requests -= 1  # the owner counts it
        self.request_deadline = connection.request_deadline = 0.0
        connection.flush()
        data = request_head(request) + self.parser.take_buffered()
        if handover.place.hand_over(connection, handover.slot, data, self.responder.conn_environ):
            return True
        self.parser = RequestParser(connection.setup.limits)
        self.parser.feed(data)
        return False

    def going_away(self):
        """``Protocol.going_away``: a request in progress is answered with ``Connection: close``
        and is the last; an open built-in WebSocket is closed with 1001 "going away", so that
        its client reconnects elsewhere (in a greenlet of its own: this runs in the hub)."""
        self.closing = True
        websocket = self.responder.websocket
        if websocket is not None:
            websocket.going_away()

    def expire_request(self, now):
        """``Protocol.expire_request``: throw RequestTimeout into the connection's greenlet,
        where its application waits (the responder answers 504); see ``expire_request_of``."""
        expire_request_of(self, self.connection, self.request_timeout, now)

    def close(self):
        """``Protocol.close``: the responder lets go of the request and of this protocol."""
        self.responder.close()

    # --- the loop ---

    def _serve(self):
        connection = self.connection
        parser = self.parser
        responder = self.responder
        outcome = self.outcome  # the responder's record of each request, refilled per request
        stats = self.server.stats  # a stats.Sink, or None: metrics are off
        access_log = self.server.access_log
        # Decided once per connection: with neither the access log nor metrics, a request costs
        # no clock read and no call here.
        observed = access_log is not None or stats is not None
        while True:
            try:
                event = parser.next_event()
            except errors.ProtocolError as exc:
                self.queue_error(exc)
                connection.flush()
                connection.linger = True  # the client may still be sending what we refused
                return
            if type(event) is Request:
                connection.requests += 1
                connection.head_deadline = 0.0
                connection.idle = False
                if self.request_timeout and event.upgrade is None:
                    # Not for an upgrade: a WebSocket's whole session runs inside the application
                    # call. The responder clears its own at the head (see wsgi.Responder._start);
                    # the connection's is the sweeper's cue (expire_request).
                    self.request_deadline = connection.request_deadline = clock() + self.request_timeout
                if not observed:
                    keep = responder.respond(event)
                else:
                    started = clock()
                    try:
                        keep = responder.respond(event)
                    finally:
                        observe_request(responder, started, access_log, stats, event.method)
                # Nothing of this request stays alive while the connection waits for the next.
                responder.release()
                # A stop that began after the head promised keep-alive does not close here:
                # the client may already be sending its next request (see _receive_head).
                if not keep:
                    if outcome.taken_over:
                        return  # the application owned the socket: nothing more to send or read
                    connection.flush()
                    # An unread body or pipelined requests may still be on their way, unless
                    # the client said this request was its last.
                    connection.linger = not outcome.body_done or not (
                        parser.at_request_boundary or parser.at_last_request_end
                    )
                    return
            elif event is NEED_DATA:
                if self.out:
                    if parser.at_request_boundary and not self.closing:
                        # A keep-alive client sends its next request only once it has read this
                        # response: sent with the other responses of this turn of the loop.
                        connection.flush_at_end_of_turn()
                    else:
                        connection.flush()
                if not self._receive_head():
                    return
            elif event is not END_OF_MESSAGE:  # PAUSED: the last request asked to close
                connection.flush()
                connection.linger = not parser.at_last_request_end  # requests pipelined after it
                return

    def _receive_head(self):
        """Wait for (more of) a request head. False: close the connection."""
        connection = self.connection
        parser = self.parser
        deadline = connection.head_deadline
        at_boundary = parser.at_request_boundary
        if deadline == 0.0:
            if at_boundary:
                # Idle between requests.
                connection.idle = True
                timeout = self.keepalive
                if self.closing:
                    # A stop began after our last response promised keep-alive: the client
                    # may send again, and is answered (with close) within the drain window.
                    timeout = min(timeout, DRAIN_WINDOW)
                try:
                    # A keep-alive client sends its next request only after reading our
                    # response: wait for it instead of trying a recv that would fail with EAGAIN.
                    received = connection.receive(timeout, True)
                except _timeout_error:
                    received = connection.receive_pending()
                    if not received:
                        return False
                # The head's deadline starts now; it is computed only if the head turns out
                # to be incomplete (the next call), which keeps a clock read off the fast path.
                connection.head_deadline = -1.0
                if received:
                    # No greenlet switch between the read and this copy (Connection.receive).
                    if connection.direct_io:
                        parser.feed_from(self.recv_buffer, received)  # one memcpy, in C
                    else:
                        parser.feed(self.recv_view[:received])  # (feed_from's own way, a call less)
                return received > 0
            deadline = 0.0
        if deadline <= 0.0:
            deadline = connection.head_deadline = monotonic() + self.header_timeout
        remaining = deadline - monotonic()
        # Still idle if nothing of a request has arrived (a stray CRLF is not a request).
        connection.idle = at_boundary
        try:
            if remaining <= 0:
                raise _timeout_error()
            received = connection.receive(remaining)
        except _timeout_error:
            if parser.at_request_boundary:
                received = connection.receive_pending()
                if not received:
                    return False
            else:
                self.queue_error(errors.ProtocolError("request head not received in time", 408))
                connection.flush()
                # A connection closed to make room goes at once: lingering would hold its slot.
                connection.linger = not connection.evicted
                return False
        if received:
            if connection.direct_io:
                parser.feed_from(self.recv_buffer, received)
            else:
                parser.feed(self.recv_view[:received])
            if not parser.at_request_boundary:
                connection.idle = False
        return received > 0

    # --- wsgi.ConnectionIO, for the responder ---

    def read_body(self, max_data, flush=True):
        """The next piece of the current request's body; b"" at its end. For wsgi.input.

        What is queued goes out before a wait for more (the app may be answering as it reads),
        unless ``flush`` is False: the responder drains an unread body before its answer.
        """
        parser = self.parser
        while True:
            event = parser.next_event(max_data)
            if event is NEED_DATA:
                connection = self.connection
                if flush and self.out:
                    connection.flush()
                received = connection.receive_body(self.body_timeout)
                if connection.direct_io:
                    parser.feed_from(self.recv_buffer, received)
                else:
                    parser.feed(self.recv_view[:received])
            elif event is END_OF_MESSAGE:
                return b""
            else:
                return event

    def flush(self):
        self.connection.flush()

    def flush_soon(self):
        """A complete response is queued and app code is still to run: send it before that code,
        unless more pipelined requests are buffered (their responses may join it in one send; if
        the app then blocks, the hub sends what is queued)."""
        if self.parser.at_request_boundary:
            self.connection.flush()
        else:
            self.connection.flush_if_blocked()

    def flush_if_blocked(self):
        self.connection.flush_if_blocked()

    def send_file(self, fileno, offset, count):
        self.connection.send_file(fileno, offset, count)

    def informational(self, status, headers):
        """``ConnectionIO.informational``: the interim response's bytes, sent now, after whatever
        is queued before them (an earlier pipelined response). None to an HTTP/1.0 client: RFC
        9110 §15.2, "a server MUST NOT send a 1xx response to an HTTP/1.0 client"."""
        if self.responder.request.minor == 0:
            return
        self.out.append(informational_head(status, headers))
        self.connection.flush()

    def response_head(self, status, headers, request, keep_alive, body_length, server_line):
        """The response's head as HTTP/1.1's bytes (``ConnectionIO.response_head``)."""
        return build_head(status, headers, request.minor, request.method == "HEAD", keep_alive, body_length, server_line)

    def queue_error(self, exc, access_log=True):
        """Queue the short text response for a client's protocol error; the connection closes.

        Returns the body's length. ``access_log=False`` when the responder logs the request.
        """
        # Between requests the outcome's environ is the connection's own keys.
        return queue_error_response(self, self.connection, self.outcome.environ, exc, access_log)


# --- what a protocol that carries one request at a time on its connection shares with this one
# (uwsgi_protocol.UwsgiProtocol) ---


def expire_request_of(io, connection, request_timeout, now):
    """``Protocol.expire_request`` for ``io``, the ``ConnectionIO`` of ``connection``'s one
    request: throw RequestTimeout into the connection's greenlet, where its application waits.

    Not while the greenlet is sending what was queued before this response (an earlier
    pipelined response, a 100 Continue) to a client slow to read: cut short, that response
    would be followed by the 504's bytes as if they were its own. The next sweep tries again.
    """
    deadline = io.request_deadline
    if not deadline or connection.greenlet.dead:
        # The application's head went out (the responder cleared its deadline), or it
        # finished meanwhile (an earlier throw of the same sweep).
        connection.request_deadline = 0.0
        return
    if connection.is_sending():
        return
    io.request_deadline = connection.request_deadline = 0.0
    connection.greenlet.throw(RequestTimeout(request_timeout, now - deadline + request_timeout))


def observe_request(responder, started, access_log, stats, method):
    """The end of ``responder``'s request, for the access log and the metrics (``stats.Sink``:
    the one seam a metrics sink is called through)."""
    outcome = responder.outcome
    if outcome.started:
        status = outcome.status_code
    elif outcome.environ is responder.conn_environ:
        # The responder stopped before the request's environ was made: the request is
        # another worker's (--sticky's HandOver), which answers, logs and counts it.
        return
    else:
        status = 499  # the client went away before its response started (nginx's convention)
    elapsed = clock() - started
    if access_log is not None:
        access_log.log(outcome.environ, status, outcome.body_sent, elapsed, outcome.headers)
    if stats is not None:
        stats.request(status, method, elapsed, responder.body_received, outcome.body_sent)


def queue_error_response(io, connection, environ, exc, access_log=True):
    """Queue on ``io.out`` the short text response for a client's protocol error (``exc``), the
    connection to close after it; log and count it unless ``access_log`` is False (the
    responder logs the request). ``environ``: the request's, or the connection's keys between
    requests. Returns the body's length."""
    server = connection.server
    status = exc.status_hint
    status_line, headers, body = errors.error_response(status, str(exc))
    head = build_head(status_line, headers, 1, False, False, len(body), server.server_line)[0]
    io.out.append(head + body)
    if server.error_log.debug_enabled:
        server.error_log.debug("%d from %s: %s" % (status, connection.peer(), exc))
    if access_log and server.access_log is not None:
        server.access_log.log(environ, status, len(body), 0.0, None)
    if access_log and server.stats is not None:
        server.stats.request(status, None, 0.0, 0, len(body))  # (no method: the head was refused)
    return len(body)

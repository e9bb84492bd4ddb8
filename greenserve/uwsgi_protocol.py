"""The uwsgi protocol on a connection (--protocol uwsgi): one request from nginx's uwsgi_pass,
answered as plain HTTP/1.x, then the connection closes.

``chooser(server)`` is the server's ``choose_protocol`` then (docs/architecture.md, "The protocol
seam"); with --protocol http, the default, nothing of this module is imported. A connection from
a peer outside --uwsgi-allow-from is closed at once with one log line (the vars say who the
client is and what it asked: only a trusted front-end may send them). The packet is read under
``header_timeout`` (``uwsgi_packet.UwsgiParser``: a malformed one is one log line naming the
peer and the problem, and the connection is closed unanswered); its vars become the environ,
and its body ``wsgi.input``, read from the socket as the application reads it.

The one ``wsgi.Responder`` answers it, this protocol its ``ConnectionIO``. The response's head is
HTTP/1.1's status line and fields; its body is never chunked, since nginx's uwsgi module passes
the upstream's bytes on as they are, and reads to the connection's end where no Content-Length
says otherwise (the head says ``Connection: close``). No interim response is sent (nginx does
not pass a 1xx on from a uwsgi upstream; it answers ``Expect: 100-continue`` itself). Pure
Python: a packet's parse runs once a connection, and the request's path is the responder's.
"""

import socket as _socket

from greenserve.connection import clock
from greenserve.http import errors
from greenserve.http.framing import build_head
from greenserve.http.parser import END_OF_MESSAGE, NEED_DATA
from greenserve.http11 import expire_request_of, observe_request, queue_error_response
from greenserve.uwsgi_packet import PacketError, UwsgiParser
from greenserve.wsgi import ConnectionIO, Responder

_timeout_error = _socket.timeout


def chooser(server):
    """``server``'s ``choose_protocol`` for --protocol uwsgi: a ``UwsgiProtocol`` per connection,
    with the peers --uwsgi-allow-from names."""
    from greenserve.proxy import TrustedProxies

    allowed = TrustedProxies(server.config.uwsgi_allow_ips)

    def choose_protocol(connection):
        return UwsgiProtocol(connection, allowed)

    return choose_protocol


class UwsgiProtocol(ConnectionIO):
    """One uwsgi request on one connection: ``serve`` reads the packet, the responder answers;
    a ``connection.Protocol`` and the responder's ``ConnectionIO``."""

    __slots__ = ("connection", "server", "allowed", "parser", "responder", "body_timeout", "request_timeout")

    def __init__(self, connection, allowed):
        setup = connection.setup
        self.connection = connection
        self.server = connection.server
        self.allowed = allowed
        self.out = connection.out
        self.closing = connection.closing
        self.can_sendfile = setup.sendfile
        self.sock = connection.sock
        self.request_deadline = 0.0
        self.body_timeout = setup.body_timeout
        self.request_timeout = setup.request_timeout
        self.parser = UwsgiParser(setup.limits)
        self.responder = Responder(self, connection.server, connection.environ)

    # --- connection.Protocol ---

    def serve(self, early):
        """``Protocol.serve``: the peer checked, its packet read (under header_timeout, from
        the connection's start), its one request answered; returning closes the connection."""
        connection = self.connection
        # A PROXY header came from a trusted peer, and the address is its client's since.
        if connection.setup.proxy_protocol is None and not self._allowed(connection.address):
            return
        if early:
            self.parser.feed(early)
        try:
            request = self._receive_packet()
        except PacketError as exc:
            self._refuse("malformed uwsgi packet: %s" % exc)
            return
        except errors.ProtocolError as exc:  # a request the limits refuse: answered in HTTP
            self.queue_error(exc)
            connection.flush()
            connection.linger = True  # the body it announced may be on its way
            return
        if request is None:
            return
        self._respond(request)

    def going_away(self):
        """``Protocol.going_away``: the response in progress is the connection's last anyway."""
        self.closing = True

    def expire_request(self, now):
        """As HTTP/1.1's (``http11.expire_request_of``): the responder answers 504."""
        expire_request_of(self, self.connection, self.request_timeout, now)

    def close(self):
        """``Protocol.close``: the responder lets go of the request and of this protocol."""
        self.responder.close()

    # --- the request ---

    def _allowed(self, address):
        if not isinstance(address, tuple) or address[0] in self.allowed:
            return True  # (a unix socket's peer: only who may open its file)
        self._refuse("uwsgi request from %s refused: not in --uwsgi-allow-from %s (add the front-end's "
                     "address there)" % (address[0], ",".join(self.server.config.uwsgi_allow_ips)))
        return False

    def _refuse(self, why):
        self.server.error_log.warning("%s (connection from %s closed)" % (why, self.connection.peer()))

    def _receive_packet(self):
        """The request, once its packet's vars are in; None: the peer closed or took longer
        than header_timeout (said in the log if it had begun a packet)."""
        connection = self.connection
        parser = self.parser
        received = 0
        while True:
            event = parser.next_event()
            if event is not NEED_DATA:
                return event
            try:
                remaining = connection.head_deadline - clock()
                if remaining <= 0.0:
                    raise _timeout_error()
                count = connection.receive(remaining)
            except _timeout_error:
                if received:
                    self._refuse("no complete uwsgi packet in time (header_timeout; %d bytes of one)" % received)
                return None
            if count <= 0:
                if received:
                    self._refuse("closed after %d bytes, before a complete uwsgi packet" % received)
                return None
            received += count
            parser.feed(self.server.recv_view[:count])

    def _respond(self, request):
        connection = self.connection
        responder = self.responder
        environ = self.parser.environ
        if "REMOTE_ADDR" in environ and "REMOTE_PORT" not in environ:
            responder.conn_environ.pop("REMOTE_PORT", None)  # the front-end's own port, not its client's
        responder.conn_environ.update(environ)  # the front-end's say on the client and the request
        connection.requests += 1
        connection.head_deadline = 0.0
        connection.idle = False
        if self.request_timeout:
            self.request_deadline = connection.request_deadline = clock() + self.request_timeout
        server = self.server
        observed = server.access_log is not None or server.stats is not None
        started = clock() if observed else 0.0
        try:
            responder.respond(request)
        finally:
            if observed:
                observe_request(responder, started, server.access_log, server.stats, request.method)
        outcome = responder.outcome
        responder.release()
        if not outcome.taken_over:
            connection.flush()
            connection.linger = not outcome.body_done

    # --- wsgi.ConnectionIO, for the responder ---

    def read_body(self, max_data, flush=True):
        """The next piece of the body, b"" at its end: CONTENT_LENGTH bytes, no other framing."""
        parser = self.parser
        event = parser.next_event(max_data)
        if event is NEED_DATA:
            connection = self.connection
            if flush and self.out:
                connection.flush()
            parser.feed(self.server.recv_view[: connection.receive_body(self.body_timeout)])
            event = parser.next_event(max_data)  # (a read brings a byte at least)
        return b"" if event is END_OF_MESSAGE else event

    def flush(self):
        self.connection.flush()

    def flush_soon(self):
        self.connection.flush()

    def flush_if_blocked(self):
        self.connection.flush_if_blocked()

    def send_file(self, fileno, offset, count):
        self.connection.send_file(fileno, offset, count)

    def informational(self, status, headers):
        """None: nginx's uwsgi module reads one response head from its upstream."""

    def response_head(self, status, headers, request, keep_alive, body_length, server_line):
        # As HTTP/1.0's: never chunked, Connection: close; a body without Content-Length ends
        # with the connection (nginx's uwsgi module copies the body's bytes as they come).
        return build_head(status, headers, 0, request.method == "HEAD", False, body_length, server_line)

    def queue_error(self, exc, access_log=True):
        """The short text answer to a request the server refuses (a body over the limit, one
        not received in time): HTTP/1.1's (``http11.queue_error_response``, which says
        ``Connection: close`` with a Content-Length); the connection closes after it."""
        return queue_error_response(self, self.connection, self.responder.outcome.environ, exc, access_log)

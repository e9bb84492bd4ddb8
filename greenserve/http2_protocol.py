"""HTTP/2 on a connection: the frames' loop, and a greenlet and a responder per stream.

``Http2Protocol`` is what a ``connection.Connection`` hands itself to when TLS negotiated ALPN
``h2``, or when a trusted peer opened a cleartext connection with HTTP/2's preface (``chooser``:
``WSGIServer``'s protocol choice once ``http_protocols`` has h2; docs/http2.md, "Serving
HTTP/2"). The connection's greenlet reads frames into the sans-I/O codec
(``http2.H2Connection``) and handles its events; each request runs in a greenlet of its own in
the server's pool (a stream the pool has no room for is refused with REFUSED_STREAM, the
connection goes on), with a ``wsgi.Responder`` whose ``ConnectionIO`` is the stream
(``Stream``): the same environ, header policy, ``start_response`` checks and error answers as
HTTP/1.1. A request alone on its connection starts in the connection's greenlet instead
(``_run_inline``), until its application blocks: then a greenlet of the pool reads the
connection from that moment (``_promote``, ``_read_for``), as the connection's would have.

Output. Every greenlet hands its frames to the one codec, and what the codec queued goes onto
the connection's ``out`` at once, so ``out`` holds the frames in the codec's order (HPACK's
table depends on it). The connection sends it (``Connection.send_soon``): the hub at the end of
the loop's turn, every stream's frames in one send (over TLS, one write of records), and what
the kernel did not take then the connection's greenlet, woken for it; a stream's greenlet never
writes to the socket. A stream that would queue more while that output is backed up waits for room, and
one whose client's window is closed waits for a WINDOW_UPDATE: each wait is bounded by
``send_timeout``, and a window that keeps closing by ``http2_min_send_rate``, after which the
stream alone is reset.

Input. DATA is kept on its stream until the application reads it (``wsgi.input``) and is given
back to the client's flow-control windows as it is read, so a client has at most
``http2_initial_window_size`` bytes of a request in flight, however slowly the application reads.

Closing. A graceful stop (or a connection closed to make room) sends GOAWAY in the two steps
of RFC 9113 §6.8: the first, with a PING; the final one when the PING's answer says every
stream the client opened before it has arrived, or after ``_GOAWAY_GRACE``. Streams opened
until then are served, later ones refused (REFUSED_STREAM: safe to retry elsewhere); the
connection closes once its streams are done. ``close()`` ends the greenlets of streams still
running (a stop past its graceful timeout, a peer gone).
"""

import socket as _socket

from gevent import getcurrent
from gevent.event import Event
from greenlet import GreenletExit

from greenserve.connection import clock
from greenserve.http import errors
from greenserve.http.framing import CONTINUE_100, build_fields
from greenserve.http.head import Request
from greenserve.http11 import Http11Protocol
from greenserve.http2 import (
    CLOSED,
    DRAINING,
    GOING_AWAY,
    OPEN,
    ConnectionTerminated,
    DataReceived,
    ErrorCode,
    LocalProtocolError,
    RequestReceived,
    RequestRejected,
    SettingsChanged,
    StreamEnded,
    StreamReset,
    WindowUpdated,
)
from greenserve.http2.connection import SETTINGS_INITIAL_WINDOW_SIZE, H2Connection
from greenserve.http2.frames import PREFACE
from greenserve.pool import ConnectionPool
from greenserve.wsgi import ConnectionIO, RequestTimeout, Responder

__all__ = ["Http2Protocol", "Stream", "chooser", "SERVER_PROTOCOL"]

_timeout_error = _socket.timeout

# The environ's SERVER_PROTOCOL and the access log's %(H)s: what gunicorn, Apache's mod_http2
# and nginx ($server_protocol) say, and what code that splits "HTTP/x.y" expects.
SERVER_PROTOCOL = "HTTP/2.0"
# The final GOAWAY waits this long for the answer to the PING sent with the first (§6.8); a
# client that never answers one (python-hyper's h2 drops frames after a GOAWAY) gets it then.
_GOAWAY_GRACE = 1.0
# The connection's greenlet waits this long for the peer while streams are open: it may rightly
# stay silent while applications work, and each stream's own waits have their own bounds.
_BUSY_WAIT = 3600.0
# Bytes queued on the connection and not yet sent above which a stream waits for them to go
# before it queues more: a client that announces a large window and reads slowly cannot make
# the server buffer the responses of every stream whole.
_HIGH_WATER = 1 << 20
# The most of one body a stream hands the codec at once: the room is looked at between.
_CHUNK = 256 * 1024
# Streams kept, done, for a connection's next requests (Stream.begin): as many as a client's
# requests in flight commonly are; a burst beyond makes new ones.
_SPARE = 32


class _Promoted(Exception):
    """The stream the connection's greenlet ran itself blocked, and another greenlet reads the
    connection now (Http2Protocol._promote): the connection's greenlet leaves its loop."""


class _StreamKilled(GreenletExit):
    """Stream.kill's for a stream run by its connection's greenlet: the stream ends, and the
    greenlet goes on (_run_inline catches it) to close the connection. Still a GreenletExit for
    the application, which must let it through as it does gevent's kill."""


class _Refused(Exception):
    """A request this server answers itself, with ``status``, before any application runs."""

    def __init__(self, message, status):
        Exception.__init__(self, message)
        self.status_hint = status


class Http2Protocol:
    """HTTP/2 on one connection: a ``connection.Protocol`` (see the module docstring)."""

    __slots__ = ("connection", "server", "setup", "codec", "environ", "streams", "limits", "room_waiters",
                 "queued", "closing", "closed", "goaway_at", "idle_since", "preface_done", "peer_going_away",
                 "request_timeout", "body_timeout", "send_timeout", "min_send_rate", "sent", "keepalive", "spare",
                 "pool", "observed",
                 "inline_ok", "pending", "inline", "ran_inline", "reader_done", "reader_error", "_promote_soon")

    def __init__(self, connection):
        server = self.server = connection.server
        setup = self.setup = connection.setup
        self.connection = connection
        # The connection's own keys (peer, PROXY header, TLS): each stream's environ is a copy.
        self.environ = connection.environ
        self.codec = H2Connection(server.http2_config)  # our SETTINGS are queued at once
        self.streams = {}  # stream id -> Stream, from its request until its greenlet is done
        self.limits = setup.limits
        self.room_waiters = []  # streams waiting for the output to drain (Stream._wait_for_room)
        self.queued = 0  # bytes put on connection.out since it was last seen empty
        self.closing = connection.closing
        self.closed = False  # close() was called: the streams' greenlets leave the codec alone
        self.goaway_at = 0.0  # when the first GOAWAY of a graceful stop was queued
        self.idle_since = clock()
        self.preface_done = False  # the client's preface and SETTINGS arrived (§3.4)
        self.peer_going_away = False  # the client's GOAWAY (NO_ERROR): finish its streams, then close
        self.request_timeout = setup.request_timeout
        self.body_timeout = setup.body_timeout
        self.send_timeout = setup.send_timeout
        self.min_send_rate = server.config.http2_min_send_rate  # (Stream._wait_for_window)
        self.sent = 0  # DATA bytes the client's windows let through, of every stream
        self.keepalive = connection.keepalive
        self.spare = []  # streams done, each with its responder, for the next requests (_SPARE)
        # The server's pool when it is greenserve's own (spawn=N, the default): started by a C
        # call; a pool of another kind (a gevent.pool.Pool given as spawn) through the server.
        pool = getattr(server, "pool", None)
        self.pool = pool if type(pool) is ConnectionPool else None
        # Decided once per connection, as HTTP/1.1 does: with neither the access log nor
        # metrics, a stream costs no clock read and no call to observe it.
        self.observed = server.access_log is not None or server.stats is not None
        # A request alone on its connection runs in the connection's greenlet (_run_inline)
        # until its application blocks; then another greenlet reads (_promote), and this
        # connection's later streams get greenlets of their own. Only with greenserve's pool,
        # which counts the stream as it would count its greenlet.
        self.inline_ok = self.pool is not None
        self.pending = None  # a stream _receive runs inline once its batch of events is handled
        self.inline = None  # the stream the connection's greenlet runs now
        self.ran_inline = False  # the loop's last read ended with a stream run inline
        self.reader_done = None  # promoted: set when the reader's loop ends (_read_for)
        self.reader_error = None  # and what ended it, for the connection's greenlet to raise
        self._promote_soon = self._promote  # (bound once: armed before every stream run inline)

    # --- connection.Protocol ---

    def serve(self, early):
        """Read frames until the connection should close (``Protocol.serve``)."""
        connection = self.connection
        connection.duplex = True  # streams queue output from their greenlets: see send_soon
        self.queue(False)  # our SETTINGS: §3.4 lets the server's preface go before the client's
        try:
            if early:
                self._receive(early)
            self._loop()
        except _Promoted:
            self._join_reader()

    def _loop(self):
        """The frames' loop: flush, wait for the peer, feed the codec, until the connection is
        done; in the connection's greenlet, or in the one that reads for it (_read_for)."""
        connection = self.connection
        tls = self.setup.ssl_context is not None
        while True:
            wait_first = tls
            if self.ran_inline and connection.flush_scheduled():
                # A stream run here queued its response for the hub, which sends it at the end
                # of this turn of the loop with every other connection's (a client on another
                # core woken once for all of them, as HTTP/1.1's flush_at_end_of_turn); its
                # client sends nothing more before reading it, so wait before reading.
                wait_first = True
            else:
                while connection.out:
                    connection.flush()
            self.ran_inline = False
            self.queued = 0
            if self.room_waiters:
                self._release_room()
            if self._finished():
                return
            timeout = self._wait_time()
            try:
                if timeout <= 0.0:
                    raise _timeout_error()
                # Over TLS, wait for the peer before reading (receive's wait_first): a read that
                # finds nothing costs an SSLWantReadError there, an EAGAIN on a plain socket.
                received = connection.receive(timeout, wait_first)
            except _timeout_error:
                if not self._timed_out():
                    return
                continue
            if received < 0:
                continue  # woken: output to send, or a deadline to look at again
            if not received:
                return  # the peer closed
            self._receive(connection.take(received))

    def going_away(self):
        """``Protocol.going_away``, in the hub: the first GOAWAY (with its PING) goes out now,
        the final one after the PING's answer or ``_GOAWAY_GRACE``; the streams in progress
        finish, and the connection closes once they have."""
        self.closing = True
        for stream in self.streams.values():
            stream.closing = True
        if self.codec.state == OPEN:
            self.codec.start_graceful_shutdown()
            self.goaway_at = clock()
            self.queue(True)
        self.connection.wake()  # its wait has a new deadline: the final GOAWAY's

    def expire_request(self, now):
        """``Protocol.expire_request``: throw RequestTimeout into each stream whose application
        has not started its response within ``request_timeout``; the connection's deadline is
        then the earliest left."""
        for stream in list(self.streams.values()):
            deadline = stream.request_deadline
            if 0.0 < deadline <= now and stream.running:
                stream.request_deadline = 0.0
                stream.greenlet.throw(RequestTimeout(self.request_timeout, now - deadline + self.request_timeout))
        earliest = 0.0
        for stream in self.streams.values():
            if stream.request_deadline and (not earliest or stream.request_deadline < earliest):
                earliest = stream.request_deadline
        self.connection.request_deadline = earliest

    def close(self):
        """``Protocol.close``: the greenlets of streams still running end (GreenletExit where
        each waits), from the hub, where each is known to be still this stream's."""
        self.closed = True
        self._promote_soon = None  # (the bound method's cycle through this protocol)
        loop = self.server.loop
        for stream in self.streams.values():
            stream.cancelled = True
            if stream.running:
                loop.run_callback(stream.kill)
        self.streams = {}
        self.room_waiters = []
        for stream in self.spare:
            stream.responder.close()
        self.spare = []

    # --- the loop ---

    def _receive(self, data):
        """Feed the client's bytes to the codec and handle what they complete."""
        try:
            for event in self.codec.receive(data, clock()):
                self._handle(event)
        except BaseException:
            if self.pending is not None:  # (a bug of ours: the connection ends, counted whole)
                self.pending = None
                self.pool.vacate()
            raise
        stream = self.pending
        if stream is not None:
            self.pending = None
            if len(self.streams) == 1 and not self.closing and self.codec.state != CLOSED:
                self.queue(False)
                self._run_inline(stream)
            else:
                # Others came in the same read: each in a greenlet, this one too (its count
                # moves to the greenlet).
                self.pool.vacate()
                self._spawn(stream)
        self.queue(False)

    def _run_inline(self, stream):
        """Run a request alone on its connection in the connection's greenlet, as HTTP/1.1
        runs each: a stream's greenlet costs two switches and a spawn a request (callgrind,
        h2load -c100 -m1: a sixth of a request). The pool counts it (from _on_request) as it
        would count its greenlet.

        Streams still run side by side: a callback armed before the application runs goes off
        only if this greenlet switches to the hub meanwhile, that is if the application blocks
        (a wait on I/O, a sleep, a lock); then another greenlet reads the connection from that
        moment (_promote), and this one serves the stream to its end and then waits for that
        reader. A stream whose application does not block is done when the callback is stopped."""
        pool = self.pool
        self.inline = stream
        blocked = pool.loop.run_callback(self._promote_soon)
        # Each stream starts in an empty contextvars context, as in a greenlet of its own (the
        # pool's): nothing an application set for one request is seen by the next.
        greenlet = getcurrent()
        context = greenlet.gr_context
        greenlet.gr_context = None
        try:
            stream.run()
        except GreenletExit:
            # _StreamKilled (the reader's loop ended, or close()), or the application's own kill
            # of the greenlet it runs in (a watchdog): the stream ends, as its own greenlet
            # would, and the connection goes on. A stop's kill of the connection goes on up.
            if self.connection.killed:
                raise
        finally:
            blocked.stop()
            greenlet.gr_context = context
            self.inline = None
            pool.vacate()
        if self.reader_done is not None:
            raise _Promoted  # another greenlet reads: this one leaves the loop (serve)
        self.ran_inline = True

    def _promote(self):
        """In the hub: the application of the stream the connection's greenlet runs blocked.
        A greenlet of the pool reads the connection from now on (_read_for), as the connection's
        greenlet would have while the stream ran in a greenlet of its own; the pool's count of
        the connection moves to it. Later streams of this connection each get a greenlet: an
        application that blocked once most likely blocks again."""
        if self.inline is None or self.closed:
            return
        self.inline_ok = False
        self.reader_done = Event()
        pool = self.pool
        pool.start(_read_for, (self,))
        pool.vacate()  # the connection's count moves to the reader, and back at its end (_read_for)

    def _join_reader(self):
        """In the connection's greenlet, after the stream it ran (promoted): wait for the
        reader's loop to end, and end as it did (its exception raised here, where the
        connection's greenlet handles it as its own loop's)."""
        self.reader_done.wait()
        error = self.reader_error
        if error is not None:
            self.reader_error = None
            raise error

    def _spawn(self, stream):
        pool = self.pool
        if pool is not None:
            pool.start(_run_stream, (stream,))
        else:
            self.server._spawn(_run_stream, stream)

    def _handle(self, event):
        """One codec event, by its type (what the connection does with each: the ``_on_*``)."""
        kind = type(event)
        if kind is DataReceived:
            self._on_data(event)
        elif kind is RequestReceived:
            self._on_request(event)
        elif kind is StreamEnded:
            self._on_end(event)
        elif kind is WindowUpdated:
            self._on_window(event)
        elif kind is StreamReset:
            self._on_reset(event)
        elif kind is SettingsChanged:
            self._on_settings(event)
        elif kind is RequestRejected:
            self._on_rejected(event)
        elif kind is ConnectionTerminated:
            self._on_terminated(event)

    def _finished(self):
        """Is the connection done: closed by an error, or gone away with no stream left?"""
        state = self.codec.state
        if state == CLOSED:
            return True
        return not self.streams and (state == GOING_AWAY or self.peer_going_away)

    def _wait_time(self):
        """How long the connection's greenlet may wait for the peer now, and what the
        connection says of it (``idle``, ``head_deadline``)."""
        connection = self.connection
        now = clock()
        if not self.preface_done:
            wait = connection.head_deadline - now  # the preface is owed within header_timeout
        elif self.streams:
            connection.idle = False
            wait = _BUSY_WAIT
        else:
            # Idle: keepalive from the end of the last stream, not from the last frame, so a
            # client cannot hold the connection by pinging it.
            connection.idle = True
            wait = self.idle_since + self.keepalive - now
        if self.codec.state == DRAINING:
            wait = min(wait, self.goaway_at + _GOAWAY_GRACE - now)
        return wait

    def _timed_out(self):
        """The wait for the peer ended without a byte (or a stop or eviction ended it): go on
        (True) or close (False)."""
        codec = self.codec
        if not self.preface_done:
            return False  # no HTTP/2 client: nothing to say GOAWAY to
        if codec.state in (OPEN, DRAINING) and (self.closing or not self.streams or codec.state == DRAINING):
            # Idle past keepalive, a stop's final GOAWAY due, or a stop that found us idle.
            codec.close_connection()
            self.queue(False)
        return bool(self.streams) and codec.state != CLOSED

    def queue(self, send):
        """Put what the codec queued on the connection's output, in the codec's order; ``send``:
        have it sent (``send_soon``: from a stream's greenlet or the hub; the connection's own
        greenlet sends at the top of its loop)."""
        data = self.codec.data_to_send()
        if data:
            connection = self.connection
            connection.out.append(data)
            self.queued += len(data)
            if send:
                connection.send_soon()

    def backed_up(self):
        """Is the connection's output waiting for the peer to read (a greenlet blocked sending
        it, or more than _HIGH_WATER bytes queued)?"""
        connection = self.connection
        if connection.sending:
            return True
        if not connection.out:
            self.queued = 0
            return False
        return self.queued > _HIGH_WATER

    def _release_room(self):
        waiters = self.room_waiters
        self.room_waiters = []
        for stream in waiters:
            stream.signal()

    # --- the codec's events, in the connection's greenlet ---

    def _on_request(self, event):
        stream_id = event.stream_id
        try:
            request = request_for(event, self.limits)
        except _Refused as exc:
            self._refuse(stream_id, exc)
            return
        pool = self.pool
        if pool.full() if pool is not None else self.server.full():
            # The worker's budget (worker_connections) counts streams too: this one waits for
            # no slot, and the client may retry it (§8.7), on this connection or another.
            self.codec.reset_stream(stream_id, ErrorCode.REFUSED_STREAM)
            error_log = self.setup.error_log
            if error_log.debug_enabled:
                error_log.debug("stream %d from %s refused: the worker's pool is full" % (stream_id, self.connection.peer()))
            return
        spare = self.spare
        if spare:
            stream = spare.pop()
            stream.begin(stream_id, request, event.end_stream)
        else:
            stream = Stream(self, stream_id, request, event.end_stream)
        self.streams[stream_id] = stream
        connection = self.connection
        connection.requests += 1  # (--max-requests counts streams)
        connection.idle = False
        if self.request_timeout:
            stream.request_deadline = clock() + self.request_timeout
            if not connection.request_deadline or stream.request_deadline < connection.request_deadline:
                connection.request_deadline = stream.request_deadline
        if self.inline_ok and event.end_stream and self.pending is None and len(self.streams) == 1:
            # Run by this greenlet once the read's events are handled (_receive), and counted
            # by the pool from now, as a greenlet spawned for it would be.
            self.pending = stream
            pool.occupy()
        else:
            self._spawn(stream)

    def _on_data(self, event):
        stream = self.streams.get(event.stream_id)
        if stream is not None:
            stream.received_data(event.data)
        # (Else answered already: the codec gives what nobody reads back to the window.)

    def _on_end(self, event):
        stream = self.streams.get(event.stream_id)
        if stream is not None:
            stream.remote_ended = True
            stream.signal()

    def _on_reset(self, event):
        stream = self.streams.get(event.stream_id)
        if stream is not None:
            stream.reset_code = event.error_code
            stream.signal()

    def _on_window(self, event):
        if event.stream_id:
            stream = self.streams.get(event.stream_id)
            if stream is not None:
                stream.signal()
        else:
            for stream in self.streams.values():
                stream.signal()

    def _on_settings(self, event):
        self.preface_done = True
        self.connection.head_deadline = 0.0  # the preface is in: nothing more is owed in time
        if SETTINGS_INITIAL_WINDOW_SIZE in event.changed:
            for stream in self.streams.values():
                stream.signal()  # every stream's window moved (§6.9.2)

    def _on_rejected(self, event):
        # The codec answered 431 itself (a header list over http2_max_header_list_size).
        self._log_refusal(event.status, 0, event.reason)

    def _on_terminated(self, event):
        if event.remote and event.error_code == ErrorCode.NO_ERROR:
            self.peer_going_away = True  # its open streams are still answered
            return
        error_log = self.setup.error_log
        if event.remote:
            # The client gave up on the connection: nothing more is sent on it.
            self.codec.close_connection(ErrorCode.NO_ERROR)
            if error_log.debug_enabled:
                error_log.debug("HTTP/2 GOAWAY from %s: %s %r" % (self.connection.peer(), event.error_code,
                                                                  event.additional_data))
            self.peer_going_away = True
            for stream in self.streams.values():
                stream.reset_code = event.error_code
                stream.signal()
            return
        # The client broke a rule that costs the connection: our GOAWAY is queued, and the
        # client may still be sending (a lingering close keeps the GOAWAY from being reset away).
        self.connection.linger = True
        if error_log.debug_enabled:
            error_log.debug("HTTP/2 connection from %s closed: %s (%s)" % (self.connection.peer(), event.reason,
                                                                       event.error_code))

    def _refuse(self, stream_id, exc):
        """Answer a request we refuse before any application runs (its limits), without
        waiting: the head, and the short body if the windows take it now (the connection's
        greenlet must never wait for the client)."""
        status = exc.status_hint
        status_line, headers, body = errors.error_response(status, str(exc))
        codec = self.codec
        fits = codec.send_window(stream_id) >= len(body)
        fields = build_fields(status_line, headers if fits else headers[:1] + [("Content-Length", "0")], False,
                              -1, self.server.server_line)[0]
        try:
            codec.send_headers(stream_id, fields, not fits)
            if fits:
                codec.send_data(stream_id, body, True)
        except LocalProtocolError:
            return  # reset by a later event of the same read: nobody to answer
        codec.reset_stream(stream_id, ErrorCode.NO_ERROR)  # (§8.1) a body still coming is not wanted
        self._log_refusal(status, len(body) if fits else 0, exc)

    def _log_refusal(self, status, sent, why):
        server = self.server
        error_log = self.setup.error_log
        if error_log.debug_enabled:
            error_log.debug("%d from %s: %s" % (status, self.connection.peer(), why))
        if server.access_log is not None:
            server.access_log.log(self.environ, status, sent, 0.0, None)
        if server.stats is not None:
            server.stats.request(status, None, 0.0, 0, sent)

    # --- the streams' ends, in their greenlets ---

    def stream_done(self, stream):
        """A stream's greenlet is done with it: whatever the stream left unsaid is said (a
        response cut short is reset, an unread request body stopped), and the connection's
        greenlet looks again at what it waits for."""
        if self.closed:
            return  # the connection is gone: nothing to say, nobody to wake
        streams = self.streams
        if streams.get(stream.stream_id) is stream:
            del streams[stream.stream_id]
        codec = self.codec
        if codec.state != CLOSED and stream.reset_code is None:
            if not stream.ended:
                codec.reset_stream(stream.stream_id, ErrorCode.INTERNAL_ERROR)
            elif not stream.remote_ended:
                # §8.1: the response is complete before the request: ask the client to stop
                # sending it, without error.
                codec.reset_stream(stream.stream_id, ErrorCode.NO_ERROR)
        self.queue(True)
        if not streams:
            self.idle_since = clock()
            connection = self.connection
            if (codec.state == OPEN and not self.closing and not self.peer_going_away and not connection.sending
                    and connection.deadline and connection.waiter is connection.greenlet):
                # Its greenlet waits for the client (under _BUSY_WAIT): the keepalive deadline
                # goes where the sweeper reads it, without waking the greenlet to compute it
                # (two switches and a recv that finds nothing, a fifth of a request at -m1).
                connection.idle = True
                connection.deadline = self.idle_since + self.keepalive
            elif self.inline is not stream or self.reader_done is not None:
                connection.wake()  # the end of a stop, or a wait to decide again
            # (Else the connection's greenlet ran the stream: it decides its wait itself, next.)

    def observe(self, stream, started):
        """The end of a stream's request, for the access log and the metrics (as HTTP/1.1's)."""
        server = self.server
        outcome = stream.responder.outcome
        elapsed = clock() - started
        status = outcome.status_code if outcome.started else 499  # (nginx's: the client left first)
        if server.access_log is not None:
            server.access_log.log(outcome.environ, status, outcome.body_sent, elapsed, outcome.headers)
        stats = server.stats
        if stats is not None:
            stats.request(status, stream.request.method, elapsed, stream.responder.body_received, outcome.body_sent)
            stats.http2_request()




def _run_stream(stream):
    """The body of a stream's greenlet (one of the server's pool)."""
    stream.run()


def _read_for(protocol):
    """The body of the greenlet that reads a connection while the connection's own greenlet
    runs a stream whose application blocked (Http2Protocol._promote): the frames' loop, as the
    connection's greenlet, until the connection is done. Then the stream still running there
    ends (as close() ends every stream's greenlet), and the connection's greenlet, which waits
    for this one, closes the connection, raising what ended this loop as if its own had."""
    connection = protocol.connection
    own = connection.greenlet
    try:
        if protocol.closed or connection.done:
            return  # the connection's greenlet ended it before this one started (a stop's kill)
        connection.take_over(getcurrent())
        try:
            protocol._loop()
        except BaseException as exc:  # (GreenletExit included: a stop that killed the connection)
            protocol.reader_error = exc
        finally:
            connection.take_over(own)
            stream = protocol.inline
            if stream is not None:
                protocol.pool.loop.run_callback(stream.kill)
    finally:
        # The connection's count goes back to its own greenlet, which the pool releases when
        # that ends (whichever of the two ends first, the count is whole once both have).
        protocol.pool.occupy()
        protocol.reader_done.set()


class Stream(ConnectionIO):
    """One request of an HTTP/2 connection and its response: the ``wsgi.ConnectionIO`` of its
    responder (see the module docstring). Its ``out`` holds what the responder queued: the head
    as header fields (a list, from ``response_head``), body pieces, ``CONTINUE_100``."""

    __slots__ = ("protocol", "codec", "stream_id", "request", "responder", "inbound", "received", "remote_ended",
                 "reset_code", "ended", "body_error", "event", "greenlet", "running", "cancelled", "sent",
                 "slow_since", "slow_mark", "slow_mark_connection")

    def __init__(self, protocol, stream_id, request, end_stream):
        self.protocol = protocol
        self.codec = protocol.codec
        # ConnectionIO's: no socket to take over, no sendfile (DATA frames carry every byte).
        self.out = []
        self.can_sendfile = False
        self.sock = None
        self.inbound = []  # DATA not yet read by the application, oldest first
        self.event = None  # a gevent Event this stream's greenlet waits on, made at its first wait
        responder = self.responder = Responder(self, protocol.server, protocol.environ)
        # Nothing to drain: an unread body is stopped with RST_STREAM(NO_ERROR) after the
        # response (stream_done), which HTTP/1.1 cannot do without closing the connection.
        responder.drain_limit = 0
        self.begin(stream_id, request, end_stream)

    def begin(self, stream_id, request, end_stream):
        """This stream's state for a new request: a Stream (and its responder, whose environ
        copy and bound callables cost a fifth of a small request) serves one stream after
        another on its connection, as HTTP/1.1's responder serves one request after another."""
        self.stream_id = stream_id
        self.request = request
        self.closing = self.protocol.closing
        self.request_deadline = 0.0
        del self.out[:]  # (the responder holds this list)
        del self.inbound[:]
        self.received = 0  # request body bytes received
        self.remote_ended = end_stream  # the client's END_STREAM: the request is complete
        self.reset_code = None  # the stream was reset (by the client, or the connection is gone)
        self.ended = False  # our END_STREAM is queued: nothing more may be sent
        self.body_error = None  # a ProtocolError the next body read raises (413)
        self.greenlet = None
        self.running = False
        self.cancelled = False
        self.sent = 0  # DATA bytes of the response the client's windows let through
        self.slow_since = 0.0  # the span the send rate is judged over began (_wait_for_window)
        self.slow_mark = 0  # sent, and the connection's, at that moment
        self.slow_mark_connection = 0

    # --- its greenlet ---

    def run(self):
        if self.cancelled:
            return  # the connection ended before this greenlet started
        self.greenlet = getcurrent()
        self.running = True
        protocol = self.protocol
        try:
            if self.reset_code is None:  # (reset before its greenlet started: no application runs)
                self._respond()
        except errors.ClientDisconnected:
            pass  # reset by the client, or the connection is gone: nothing to say on it
        finally:
            self.running = False
            self.greenlet = None
            protocol.stream_done(self)
            if protocol.closed or len(protocol.spare) >= _SPARE:
                self.responder.close()
                self.responder = None
                self.event = None
            else:
                protocol.spare.append(self)  # (its responder was released by _respond)

    def _respond(self):
        protocol = self.protocol
        observed = protocol.observed
        started = clock() if observed else 0.0
        try:
            self.responder.respond(self.request)
            self._finish()
        finally:
            self.request_deadline = 0.0
            if observed:
                protocol.observe(self, started)
            self.responder.release()

    def _finish(self):
        """The application is done: end the stream, or reset it if its response is cut short."""
        if self.ended or self.reset_code is not None:
            return
        responder = self.responder
        writer = responder.writer
        if responder.outcome.started and writer is not None and writer.delimits():
            self._send(True)
        # Else (an application that failed after its head, a body short of its Content-Length)
        # stream_done resets the stream: the client must not take it for a complete response.

    def kill(self):
        """In the hub: end this stream's greenlet where it waits, if it still runs this stream."""
        if self.running and self.greenlet is not None and not self.greenlet.dead:
            # (_StreamKilled: the connection's own greenlet runs this stream, and goes on)
            self.greenlet.throw(_StreamKilled if self.protocol.inline is self else GreenletExit)

    def signal(self):
        """Something this stream's greenlet may wait for happened (data, its end, a window, room)."""
        event = self.event
        if event is not None:
            event.set()

    def _wait(self, timeout):
        """Wait for ``signal``, at most ``timeout`` seconds; False when the time ran out."""
        event = self.event
        if event is None:
            event = self.event = Event()
        else:
            event.clear()
        return event.wait(timeout)

    def _gone(self):
        if self.reset_code is not None:
            raise errors.ClientDisconnected("stream %d reset (%s)" % (self.stream_id, _code_name(self.reset_code)))
        raise errors.ClientDisconnected("the HTTP/2 connection is closed")

    # --- the request body ---

    def received_data(self, data):
        """DATA for this stream (in the connection's greenlet), kept until the application reads it."""
        self.received += len(data)
        max_body = self.protocol.limits.max_body
        if max_body and self.received > max_body and self.body_error is None:
            self.body_error = errors.ProtocolError("request body larger than %d bytes" % max_body, 413)
        if self.body_error is None:
            self.inbound.append(data)
        else:
            self.codec.acknowledge_received_data(self.stream_id, len(data))  # dropped, not kept
        self.signal()

    def read_body(self, max_data, flush=True):
        """``ConnectionIO.read_body``: the next DATA the client sent; b"" at END_STREAM. What is
        read is given back to the client's windows (the credit it may send again)."""
        inbound = self.inbound
        while not inbound:
            if self.body_error is not None:
                raise self.body_error
            if self.reset_code is not None or self.protocol.codec.state == CLOSED:
                self._gone()
            if self.remote_ended:
                return b""
            if flush and self.out:
                self.flush()
            if not self._wait(self.protocol.body_timeout):
                raise errors.ProtocolError("request body not received in time", 408)
        data = inbound[0]
        if 0 < max_data < len(data):
            inbound[0] = data[max_data:]
            data = data[:max_data]
        else:
            del inbound[0]
        self.codec.acknowledge_received_data(self.stream_id, len(data))
        self.protocol.queue(True)
        return data

    # --- the response ---

    def response_head(self, status, headers, request, keep_alive, body_length, server_line):
        """``ConnectionIO.response_head``: the head as HTTP/2 fields (``framing.build_fields``),
        queued as one list; the stream's end delimits the body, so it never closes anything."""
        fields, code, writer = build_fields(status, headers, request.method == "HEAD", body_length, server_line)
        return fields, code, writer, True

    def informational(self, status, headers):
        """``ConnectionIO.informational``: a 1xx before the final head (103 Early Hints)."""
        if self.responder.outcome.started or self.ended or self.reset_code is not None:
            return  # too late for a hint: the final head went (or the stream is gone)
        if self.out:
            self._send(False)
        fields = [(b":status", b"%d" % status)]
        for name, value in headers:
            fields.append((name.lower().encode("latin-1"), value.encode("latin-1")))
        try:
            self.codec.send_informational(self.stream_id, fields)
        except LocalProtocolError:
            if self._own_mistake():
                raise
        self.protocol.queue(True)

    def flush(self):
        """Hand what is queued to the codec, and the codec's frames to the connection; waits
        while the client's window is closed or the connection's output is backed up."""
        if self.out:
            self._send(self._complete())

    def flush_soon(self):
        self.flush()

    def flush_if_blocked(self):
        self.flush()

    def send_file(self, fileno, offset, count):
        raise NotImplementedError("HTTP/2 streams do not use sendfile (can_sendfile is False)")

    def queue_error(self, exc, access_log=True):
        """``ConnectionIO.queue_error``: the short text answer to a client's error (a body over
        limit_request_body, one too slow), as a whole response on this stream."""
        status_line, headers, body = errors.error_response(exc.status_hint, str(exc))
        fields = build_fields(status_line, headers, False, len(body), self.protocol.server.server_line)[0]
        self.out[:] = [fields, body]
        self._send(True)
        if access_log:
            self.protocol._log_refusal(exc.status_hint, len(body), exc)
        return len(body)

    def _complete(self):
        """Is the response all queued (so the last frame may carry END_STREAM)?"""
        responder = self.responder
        writer = responder.writer
        return responder.outcome.started and writer is not None and writer.delimits()

    def _send(self, end):
        """Hand ``out`` to the codec in order: header fields (HEADERS), a 100 Continue, body
        pieces (DATA); ``end``: the response is complete, END_STREAM goes with its last frame."""
        out = self.out
        if self.ended:
            out.clear()  # (nothing may follow END_STREAM; the writers send nothing after it anyway)
            return
        if self.reset_code is not None or self.codec.state == CLOSED:
            out.clear()
            self._gone()
        pieces = out[:]
        out.clear()
        last = len(pieces) - 1
        while last >= 0 and not (type(pieces[last]) is list or pieces[last] is CONTINUE_100 or len(pieces[last])):
            last -= 1  # empty pieces carry nothing: END_STREAM goes with the last that does
        codec = self.codec
        for index in range(last + 1):
            piece = pieces[index]
            final = end and index == last
            if type(piece) is list:  # (response_head's: build_fields checked it)
                try:
                    codec.send_headers(self.stream_id, piece, final, True)
                except LocalProtocolError:
                    if self._own_mistake():
                        raise
            elif piece is CONTINUE_100:
                try:
                    codec.send_informational(self.stream_id, [(b":status", b"100")])
                except LocalProtocolError:
                    if self._own_mistake():
                        raise
            elif len(piece):
                self._data(piece, final)
            if final:
                self.ended = True
        if end and not self.ended:
            try:
                codec.end_stream(self.stream_id)
            except LocalProtocolError:
                if self._own_mistake():
                    raise
            self.ended = True
        # The frames of all the pieces onto the connection at once (one join of the codec's
        # output a response, not one a frame); _data queues before it waits and between chunks.
        self.protocol.queue(True)

    def _data(self, piece, end):
        """One body piece as DATA frames, as the windows and the connection's room allow."""
        codec = self.codec
        protocol = self.protocol
        length = len(piece)
        view = None
        position = 0
        while position < length:
            if protocol.backed_up():
                protocol.queue(True)  # (what the codec holds goes before this stream waits)
                self._wait_for_room()
            window = codec.send_window(self.stream_id)
            if window <= 0:
                protocol.queue(True)
                self._wait_for_window()
                continue
            size = min(window, length - position, _CHUNK)
            if size == length:
                chunk = piece
            else:
                if view is None:
                    view = memoryview(piece)
                chunk = view[position : position + size]
            try:
                size = codec.send_data(self.stream_id, chunk, end and position + size == length)
            except LocalProtocolError:
                if self._own_mistake():
                    raise
            position += size
            self.sent += size
            protocol.sent += size
            if position < length:
                protocol.queue(True)  # counted in the room the next chunk looks at

    def _own_mistake(self):
        """In a codec call's LocalProtocolError: True if it is ours (a bug: re-raised), else the
        stream the client reset meanwhile, or the closed connection, is the client gone (as a
        failed send is on HTTP/1.1), and ClientDisconnected is raised."""
        if self.reset_code is None and self.codec.state != CLOSED and self.stream_id in self.protocol.streams:
            return True
        self._gone()
        return False

    def _wait_for_room(self):
        protocol = self.protocol
        while protocol.backed_up():
            protocol.room_waiters.append(self)
            protocol.connection.wake()  # its greenlet sends, then lets the waiting streams go on
            if not self._wait(protocol.send_timeout):
                raise errors.ClientDisconnected("the client did not read the response in time")
            if self.reset_code is not None or self.codec.state == CLOSED:
                self._gone()

    def _wait_for_window(self):
        """The client's window for this stream (or the connection) is closed: wait for its
        WINDOW_UPDATE. The stream alone is reset (CANCEL) when its window stays closed for
        ``send_timeout``, or when over a span of ``send_timeout`` in which it closed the client
        let less than ``http2_min_send_rate`` bytes a second through (a window opened a byte a
        second holds no response for ever). A stream whose own window is open waits for the
        connection's, which all streams share: it is judged by what the connection moves (it
        gets only its share, and which stream takes the next bytes is ours to choose, not the
        client's). Only a stream whose window closed comes here: one whose data flows pays
        nothing for the rate, not even a clock read."""
        protocol = self.protocol
        codec = self.codec
        send_timeout = protocol.send_timeout
        now = clock()
        closed_until = now + send_timeout  # a window closed this long: reset, whatever came before
        moved = protocol.sent
        if not self.slow_since:
            self._start_span(now)
        while codec.send_window(self.stream_id) <= 0:
            if self.reset_code is not None or codec.state == CLOSED:
                self._gone()
            now = clock()
            shared = codec.stream_window(self.stream_id) > 0
            if now >= closed_until:
                if not shared or protocol.sent == moved:
                    self._too_slow("its flow-control window stayed closed for send_timeout (%g s)" % send_timeout)
                closed_until = now + send_timeout  # the connection moved: other streams took it
                moved = protocol.sent
            span = now - self.slow_since
            if span >= send_timeout:
                if shared:
                    sent = protocol.sent - self.slow_mark_connection
                else:
                    sent = self.sent - self.slow_mark
                if sent < protocol.min_send_rate * span:
                    self._too_slow("its client let %d bytes through in %.1f s, under --http2-min-send-rate (%d "
                                   "bytes/s)" % (sent, span, protocol.min_send_rate))
                self._start_span(now)
            self._wait(min(closed_until, self.slow_since + send_timeout) - now)

    def _start_span(self, now):
        self.slow_since = now
        self.slow_mark = self.sent
        self.slow_mark_connection = self.protocol.sent

    def _too_slow(self, why):
        """RST_STREAM(CANCEL), RFC 9113 §7: "the stream is no longer needed"; not
        ENHANCE_YOUR_CALM, which is for a peer that makes excessive load: a slow window makes
        none, it only holds the stream. One INFO line; the application sees the client gone."""
        protocol = self.protocol
        self.codec.reset_stream(self.stream_id, ErrorCode.CANCEL)
        self.reset_code = ErrorCode.CANCEL
        protocol.queue(True)
        protocol.setup.error_log.info("HTTP/2 stream %d from %s reset: %s" % (self.stream_id, protocol.connection.peer(),
                                                                             why))
        self._gone()


def _code_name(code):
    return getattr(code, "name", str(code))


def request_for(event, limits):
    """The ``http.head.Request`` a responder answers, from a ``RequestReceived``: HTTP/1.1's
    limits (``_Refused`` with 414, 431, 413) and its header policy (one Host field) apply."""
    raw = event.path
    if raw is None:
        raise _Refused("CONNECT is not served", 405)  # (§8.5: no :path; nothing to route)
    target = raw.decode("latin-1")
    raw = event.method
    method = _METHODS.get(raw)
    if method is None:
        method = raw.decode("latin-1")
    # "METHOD TARGET HTTP/2.0": the request line HTTP/1.1 would have had.
    if len(method) + len(target) + 10 > limits.max_request_line:
        raise _Refused("request target longer than %d bytes" % limits.max_request_line, 414)
    fields = event.headers
    if len(fields) > limits.max_header_count:
        raise _Refused("more than %d header fields" % limits.max_header_count, 431)
    max_size = limits.max_header_size
    headers = []
    hosts = 0
    forwarded = False
    expect_continue = False
    for name, value in fields:
        if len(name) + len(value) + 2 > max_size:
            raise _Refused("header field longer than %d bytes" % max_size, 431)
        lname = _NAMES.get(name)
        if lname is None:
            lname = name.decode("latin-1")
            if len(_NAMES) < _NAMES_MAX:
                _NAMES[name] = lname
        if lname == "content-length":
            continue  # one, below: the codec checked that every value is the same number
        text = value.decode("latin-1")
        if lname == "host":
            hosts += 1
        elif lname == "expect":
            expect_continue = text.lower() == "100-continue"
        elif lname in _FORWARDED:
            forwarded = True
        headers.append((lname, text))
    if hosts > 1:
        # As HTTP/1.1 (RFC 9112 §3.2): two readings of the target are what smuggling is made of.
        raise _Refused("more than one host field", 400)
    length = event.content_length
    if length is not None:
        if limits.max_body and length > limits.max_body:
            raise _Refused("request body larger than %d bytes" % limits.max_body, 413)
        headers.append(("content-length", str(length)))
    path, _, query = target.partition("?")
    raw = event.authority
    if raw is not None:
        # As an absolute-form target in HTTP/1.1: :authority is HTTP_HOST (wsgi.Responder).
        authority = raw.decode("latin-1")
        raw = event.scheme
        request = Request(method, target, path, query, SERVER_PROTOCOL, 1, headers, authority, raw.decode("latin-1"))
    else:
        request = Request(method, target, path, query, SERVER_PROTOCOL, 1, headers)
    if event.end_stream:
        request.content_length = 0
    elif length is not None:
        request.content_length = length
    else:
        request.content_length = -1
        request.chunked = True  # a body of a length unknown until its END_STREAM
    request.expect_continue = expect_continue and not event.end_stream
    request.forwarded = forwarded
    return request


# The methods' names as str, by their bytes (the environ's REQUEST_METHOD, as HTTP/1.1's parser).
_METHODS = {name.encode(): name for name in ("GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH")}
# Field names as the environ's str, by their bytes: a client sends the same names on every request.
_NAMES = {}
_NAMES_MAX = 1024

_UNTRUSTED_LOG_INTERVAL = 10.0  # seconds between two lines of _log_untrusted_preface

_FORWARDED = frozenset(("x-forwarded-for", "x-forwarded-proto", "x-forwarded-ssl", "x-forwarded-protocol"))


# --- the choice of protocol ---------------------------------------------------------------------


def chooser(server):
    """``server``'s ``choose_protocol`` when its ``http_protocols`` has h2: over TLS, what ALPN
    chose; in cleartext (``http2_cleartext`` prior-knowledge), HTTP/2 for a trusted peer whose
    first bytes are HTTP/2's preface, and for every trusted peer when ``http_protocols`` has no
    h1 (HTTP/2 only, as in gunicorn: other first bytes are the codec's GOAWAY(PROTOCOL_ERROR),
    RFC 9113 §3.4); HTTP/1.1 for everyone else, exactly as without HTTP/2 (an untrusted peer's
    preface gets its 505, and one INFO line says why)."""
    prior_knowledge = server.config.http2_cleartext == "prior-knowledge" and server.ssl_context is None
    h2_only = "h1" not in server.config.http_protocols
    untrusted_logged = [-_UNTRUSTED_LOG_INTERVAL]  # when the last untrusted preface was logged
    trusted = None
    if prior_knowledge:
        from greenserve.proxy import TrustedProxies

        trusted = TrustedProxies(server.config.forwarded_allow_ips)

    def choose_protocol(connection):
        if connection.setup.ssl_context is not None:
            if connection.sock.selected_alpn_protocol() == "h2":
                return Http2Protocol(connection)
        elif prior_knowledge:
            if _trusted(connection, trusted):
                if h2_only or _reads_preface(connection):
                    return Http2Protocol(connection)
            elif _reads_preface(connection):
                _log_untrusted_preface(connection, untrusted_logged)
        return Http11Protocol(connection)

    return choose_protocol


def _log_untrusted_preface(connection, logged):
    # An operator whose proxy is missing from forwarded_allow_ips sees its h2c requests fail
    # with 505 (HTTP/1.1's answer to "PRI * HTTP/2.0"): said at the default level, or it is a
    # mystery. One line per _UNTRUSTED_LOG_INTERVAL: enough to find the cause, and a client
    # that sends prefaces in a loop cannot fill the log (HTTP/1.1's 4xx are logged at debug).
    now = clock()
    if now - logged[0] < _UNTRUSTED_LOG_INTERVAL:
        return
    logged[0] = now
    connection.setup.error_log.info(
        "HTTP/2 preface from %s, which is not in --forwarded-allow-ips: answered 505 in HTTP/1.1 "
        "(h2c by prior knowledge is served to trusted proxies only; add its address to "
        "--forwarded-allow-ips if it is one)" % (connection.peer(),)
    )


def _trusted(connection, trusted):
    """May this peer speak HTTP/2 in cleartext? A proxy listed in forwarded_allow_ips, a unix
    socket's peer, or any connection that began with a PROXY header (only a trusted peer may
    send one, and the connection's address is then the client's, not the proxy's)."""
    if connection.setup.proxy_protocol is not None:
        return True
    address = connection.address
    return not isinstance(address, tuple) or address[0] in trusted


def _reads_preface(connection):
    """Do the peer's first bytes start HTTP/2's preface (RFC 9113 §3.4)? Read until they do
    not, or all 24 are in, under the connection's header_timeout; what was read is kept for
    the protocol chosen (``connection.early``)."""
    early = connection.early
    while len(early) < len(PREFACE) and PREFACE.startswith(early):
        remaining = connection.head_deadline - clock()
        if remaining <= 0.0:
            break
        try:
            received = connection.receive(remaining)
        except _timeout_error:
            break
        if received <= 0:
            break
        early += connection.take(received)
    connection.early = early
    return early[: len(PREFACE)] == PREFACE

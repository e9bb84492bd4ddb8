"""H2Connection: the server side of one HTTP/2 connection (RFC 9113), sans-I/O.

Bytes in, events out, bytes to send out, in the spirit of h11::

    conn = H2Connection(H2Config())          # our SETTINGS are queued at once
    events = conn.receive(data, now)         # RequestReceived, DataReceived, StreamEnded, ...
    conn.send_headers(1, [(b":status", b"200"), (b"content-type", b"text/plain")])
    taken = conn.send_data(1, body, end_stream=True)   # what the windows let through
    sock.sendall(conn.data_to_send())        # every frame of every stream, one bytes object

It never touches a socket, a clock, a thread or gevent: ``now`` (seconds, any monotonic
origin) is passed in where a limit is per second. The peer's mistakes do not raise: a
connection error queues GOAWAY and gives ``ConnectionTerminated``, a stream error queues
RST_STREAM and gives ``StreamReset``; only the caller's own mistakes raise
(``LocalProtocolError``). Server push is not offered (SETTINGS_ENABLE_PUSH 0).

Stream states (§5.1) are kept small: a stream is in ``_streams`` from the HEADERS that opens it
until both sides have ended it or it is reset. A client stream id above the highest seen is
idle; one at or below it and not in ``_streams`` is closed. The last ``closed_stream_memory``
closed ids are remembered: the late frames of one we reset are ignored, as §5.1 "closed" asks,
those of one the client closed are STREAM_CLOSED, and HEADERS on an id never opened is a
PROTOCOL_ERROR (§5.1.1).
"""

import re

import greenserve.http2.frames as frames
from greenserve.http2.config import H2Config
from greenserve.http2.errors import (
    ErrorCode,
    H2ConnectionError,
    HeaderListTooLarge,
    LocalProtocolError,
    StreamError,
    error_code,
)
from greenserve.http2.events import (
    ConnectionTerminated,
    DataReceived,
    PingAcknowledged,
    PingReceived,
    PriorityIgnored,
    RequestReceived,
    RequestRejected,
    SettingsAcknowledged,
    SettingsChanged,
    StreamEnded,
    StreamReset,
    TrailersReceived,
    WindowUpdated,
    data_received,
    request_received,
    stream_ended,
)
from greenserve.http2.frames import (
    ACK,
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PING,
    PRIORITY,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    FrameReader,
    data_payload,
    frame_header,
    goaway_frame,
    goaway_payload,
    headers_frames,
    headers_payload,
    ping_frame,
    priority_payload,
    rst_stream_frame,
    settings_frame,
    settings_payload,
    uint31,
    uint32,
    window_update_frame,
)
from greenserve.http2.hpack import Decoder, Encoder
from greenserve.http2.validation import CONNECTION_SPECIFIC, Malformed, request_head, trailers

__all__ = ["H2Connection", "SETTINGS_HEADER_TABLE_SIZE", "SETTINGS_ENABLE_PUSH",
           "SETTINGS_MAX_CONCURRENT_STREAMS", "SETTINGS_INITIAL_WINDOW_SIZE",
           "SETTINGS_MAX_FRAME_SIZE", "SETTINGS_MAX_HEADER_LIST_SIZE",
           "SETTINGS_ENABLE_CONNECT_PROTOCOL", "SETTINGS_NO_RFC7540_PRIORITIES"]

# RFC 9113 §6.5.2; RFC 8441 §3; RFC 9218 §2.1.
SETTINGS_HEADER_TABLE_SIZE = 0x1
SETTINGS_ENABLE_PUSH = 0x2
SETTINGS_MAX_CONCURRENT_STREAMS = 0x3
SETTINGS_INITIAL_WINDOW_SIZE = 0x4
SETTINGS_MAX_FRAME_SIZE = 0x5
SETTINGS_MAX_HEADER_LIST_SIZE = 0x6
SETTINGS_ENABLE_CONNECT_PROTOCOL = 0x8
SETTINGS_NO_RFC7540_PRIORITIES = 0x9

_MAX_WINDOW = 2**31 - 1  # §6.9.1
_MAX_STREAM_ID = 2**31 - 1
_DEFAULT_WINDOW = 65535  # §6.9.2: every window starts here until SETTINGS say otherwise
_SHUTDOWN_PING = b"gs-drain"  # our PING of a graceful shutdown's first step (8 bytes, §6.7)
_MAX_DEBUG_DATA = 256  # of a GOAWAY's reason: enough to diagnose, not a reflection channel

# The connection's states, as the caller sees them.
OPEN = "open"
DRAINING = "draining"  # a graceful shutdown's first GOAWAY is sent; new streams still welcome
GOING_AWAY = "going away"  # the final GOAWAY is sent: streams above its last id are ignored
CLOSED = "closed"  # a connection error or close_connection(): nothing more is read


class _Stream:
    __slots__ = ("stream_id", "inbound_window", "outbound_window", "unacknowledged", "unread", "remote_closed",
                 "local_closed", "response_started", "content_length", "received")

    def __init__(self, stream_id, inbound_window, outbound_window, content_length):
        self.stream_id = stream_id
        self.inbound_window = inbound_window  # what the client may still send us (§6.9)
        self.outbound_window = outbound_window  # what we may still send it
        self.unacknowledged = 0  # bytes the application read, not yet returned by WINDOW_UPDATE
        self.unread = 0  # DATA bytes handed to the application and not yet acknowledged by it
        self.remote_closed = False  # the client's END_STREAM (half-closed remote, §5.1)
        self.local_closed = False  # our END_STREAM (half-closed local)
        self.response_started = False  # a final (non-1xx) HEADERS was sent
        self.content_length = content_length  # the request's, checked against its DATA (§8.1.1)
        self.received = 0


class H2Connection:
    """One server connection. See the module's docstring for the contract."""

    # The fields connection.pxd declares (C fields in the compiled build).
    __slots__ = ("config", "state", "peer_settings", "highest_stream_id", "_streams", "_closed", "_reader",
                 "_decoder", "_encoder", "_out", "_got_settings", "_settings_acked", "_stream_window",
                 "_inbound_window", "_unacknowledged", "_outbound_window", "_outbound_frame_size", "_block_stream",
                 "_block_flags", "_block_parts", "_block_size", "_block_self_dependent", "_reset_tokens",
                 "_reset_clock", "_reset_rate", "_reset_burst", "_queued_control", "_empty_frames", "_goaway_last")

    def __init__(self, config=None):
        self.config = config = config or H2Config()
        self.state = OPEN
        self.peer_settings = {
            SETTINGS_HEADER_TABLE_SIZE: 4096, SETTINGS_ENABLE_PUSH: 1,
            SETTINGS_MAX_CONCURRENT_STREAMS: None, SETTINGS_INITIAL_WINDOW_SIZE: _DEFAULT_WINDOW,
            SETTINGS_MAX_FRAME_SIZE: 16384, SETTINGS_MAX_HEADER_LIST_SIZE: None,
        }
        self.highest_stream_id = 0  # of the client's streams: above it, idle (§5.1.1)
        self._streams = {}
        self._closed = {}  # recently closed stream id -> whether we reset it; oldest first
        self._reader = FrameReader(config.max_frame_size)
        self._decoder = Decoder(config.header_table_size, config.max_header_list_size)
        self._encoder = Encoder()
        self._out = []  # frames for data_to_send, in order
        self._got_settings = False  # §3.4: the client's first frame must be SETTINGS
        self._settings_acked = False
        # Flow control (§6.9): what the client may send (the stream windows start at the
        # default until it acknowledges our SETTINGS) and what we may send.
        self._stream_window = _DEFAULT_WINDOW
        self._inbound_window = config.connection_window_size
        self._unacknowledged = 0
        self._outbound_window = _DEFAULT_WINDOW
        self._outbound_frame_size = 16384
        # A header block being read across CONTINUATION frames (§6.10).
        self._block_stream = 0
        self._block_flags = 0
        self._block_parts = []
        self._block_size = 0
        self._block_self_dependent = False
        # The limits against floods (config's docstring).
        self._reset_tokens = float(config.reset_burst)
        self._reset_clock = -1.0  # when the tokens were last refilled (-1: never)
        # The config's, as C doubles: the refill runs at every read.
        self._reset_rate = config.reset_rate
        self._reset_burst = float(config.reset_burst)
        self._queued_control = 0
        self._empty_frames = 0
        self._goaway_last = _MAX_STREAM_ID
        self._send_preface()

    # --- what the caller reads -----------------------------------------------------------------

    @property
    def open_streams(self):
        """Streams not yet closed on both sides: the ones a graceful shutdown waits for."""
        return len(self._streams)

    def send_window(self, stream_id):
        """How many DATA bytes ``send_data`` would take for the stream now (both windows)."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return 0
        return max(0, min(stream.outbound_window, self._outbound_window))

    def stream_window(self, stream_id):
        """The stream's own window alone, without the connection's that all streams share: above
        0 while ``send_window`` is 0, the stream waits for the connection's WINDOW_UPDATE."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return 0
        return stream.outbound_window

    @property
    def max_outbound_frame_size(self):
        return self._outbound_frame_size

    def data_to_send(self):
        """Every frame queued since the last call, of every stream, as one bytes object."""
        if not self._out:
            return b""
        data = b"".join(self._out)
        self._out = []
        self._queued_control = 0
        return data

    # --- receiving -----------------------------------------------------------------------------

    def receive(self, data, now=None):
        """Read ``data`` (any split of the client's bytes); the events it completes, in order.

        ``now``: seconds on any monotonic clock, for the limits counted per second; without it
        they refill only as streams complete.
        """
        events = []
        if self.state == CLOSED:
            return events
        if now is not None:
            self._refill_resets(now)
        reader = self._reader
        reader.feed(data)
        while True:
            try:
                frame = reader.next_frame()
                if frame is None:
                    break
                frame_type, flags, stream_id, payload = frame
                if self._block_stream and frame_type != CONTINUATION:
                    # §6.10: "If the END_HEADERS flag is not set, this frame MUST be followed
                    # by another CONTINUATION frame"; anything else is a PROTOCOL_ERROR.
                    raise H2ConnectionError("%s frame inside a header block" % _frame_name(frame_type))
                if not self._got_settings:
                    if frame_type != SETTINGS or flags & ACK:
                        raise H2ConnectionError("the preface's first frame is not SETTINGS (§3.4)")
                    self._got_settings = True
                # By type, the frequent first; a chain, not a table of bound methods, so that
                # the compiled build calls its C methods directly.
                if frame_type == HEADERS:
                    self._on_headers(flags, stream_id, payload, events)
                elif frame_type == DATA:
                    self._on_data(flags, stream_id, payload, events)
                elif frame_type == WINDOW_UPDATE:
                    self._on_window_update(flags, stream_id, payload, events)
                elif frame_type == SETTINGS:
                    self._on_settings(flags, stream_id, payload, events)
                elif frame_type == RST_STREAM:
                    self._on_rst_stream(flags, stream_id, payload, events)
                elif frame_type == PING:
                    self._on_ping(flags, stream_id, payload, events)
                elif frame_type == CONTINUATION:
                    self._on_continuation(flags, stream_id, payload, events)
                elif frame_type == PRIORITY:
                    self._on_priority(flags, stream_id, payload, events)
                elif frame_type == GOAWAY:
                    self._on_goaway(flags, stream_id, payload, events)
                elif frame_type == PUSH_PROMISE:
                    self._on_push_promise(flags, stream_id, payload, events)
                # §5.5: "Implementations MUST ignore and discard frames of unknown types."
            except StreamError as exc:
                self._stream_error(exc, events)
                if self.state == CLOSED:
                    break  # the stream errors were too many (_spend_reset): nothing more is read
            except H2ConnectionError as exc:
                self._connection_error(exc, events)
                break
        return events

    def _on_data(self, flags, stream_id, payload, events):
        if stream_id == 0:
            raise H2ConnectionError("DATA on stream 0")  # §6.1
        data = data_payload(flags, payload)
        length = len(payload)  # §6.1: "The entire DATA frame payload is included in flow control"
        if length > self._inbound_window:
            raise H2ConnectionError("DATA beyond the connection's window", ErrorCode.FLOW_CONTROL_ERROR)
        self._inbound_window -= length
        stream = self._streams.get(stream_id)
        if stream is None or stream.remote_closed:
            # Nobody reads these bytes: they go back to the connection's window now.
            self._return_window(None, length)
            if stream is None:
                self._check_not_idle(stream_id, "DATA")
                if self._closed.get(stream_id):
                    return  # §5.1 closed: "MUST ignore frames that it receives on closed streams after it has sent a RST_STREAM"
            # §6.1: "If a DATA frame is received whose stream is not in the "open" or
            # "half-closed (local)" state, the recipient MUST respond with a stream error of
            # type STREAM_CLOSED."
            raise StreamError(stream_id, "DATA on a closed stream", ErrorCode.STREAM_CLOSED)
        if length > stream.inbound_window:
            self._return_window(None, length)
            raise StreamError(stream_id, "DATA beyond the stream's window", ErrorCode.FLOW_CONTROL_ERROR)
        stream.inbound_window -= length
        if length != len(data):
            self._return_window(stream, length - len(data))  # the padding: no one else will
        if data:
            self._empty_frames = 0
            stream.received += len(data)
            stream.unread += len(data)
            if stream.content_length is not None and stream.received > stream.content_length:
                raise StreamError(stream_id, "more DATA than content-length")  # §8.1.1
            events.append(data_received(stream_id, data, length))
        elif not flags & END_STREAM:
            self._count_empty_frame("DATA")
        if flags & END_STREAM:
            self._remote_end(stream, events)

    def _on_headers(self, flags, stream_id, payload, events):
        if stream_id == 0:
            raise H2ConnectionError("HEADERS on stream 0")  # §6.2
        if not stream_id & 1:
            # §5.1.1: "Streams initiated by a client MUST use odd-numbered stream identifiers"
            raise H2ConnectionError("HEADERS on even stream %d" % stream_id)
        fragment, depends_on = headers_payload(flags, payload)
        self._block_stream = stream_id
        self._block_flags = flags
        self._block_parts = [fragment]
        self._block_size = len(fragment)
        # §5.3.1: "A stream cannot depend on itself. An endpoint MUST treat this as a stream
        # error of type PROTOCOL_ERROR." The block is decoded first all the same.
        self._block_self_dependent = depends_on == stream_id
        self._check_block_size()
        if flags & END_HEADERS:
            self._end_header_block(events)
        elif not fragment:
            self._count_empty_frame("HEADERS")

    def _on_continuation(self, flags, stream_id, payload, events):
        if stream_id == 0 or stream_id != self._block_stream:
            # §6.10: "A CONTINUATION frame MUST be preceded by a HEADERS, PUSH_PROMISE or
            # CONTINUATION frame without the END_HEADERS flag set."
            raise H2ConnectionError("CONTINUATION outside a header block of stream %d" % stream_id)
        self._block_parts.append(payload)
        self._block_size += len(payload)
        self._check_block_size()
        if flags & END_HEADERS:
            self._end_header_block(events)
        elif not payload:
            self._count_empty_frame("CONTINUATION")

    def _check_block_size(self):
        # CONTINUATION flood (CVE-2024-27316 and kin): a header block is bounded in bytes as it
        # arrives, before anything is decoded or joined; an endless run of CONTINUATION frames
        # ends here, or in the empty-frame count for empty ones.
        if self._block_size > self.config.max_header_block_size:
            raise H2ConnectionError(
                "header block of %d+ bytes over the limit of %d" % (self._block_size, self.config.max_header_block_size),
                ErrorCode.ENHANCE_YOUR_CALM,
            )

    def _end_header_block(self, events):
        stream_id = self._block_stream
        flags = self._block_flags
        parts = self._block_parts
        self._block_stream = 0
        self._block_parts = []
        block = parts[0] if len(parts) == 1 else b"".join(parts)
        # Every block is decoded, whatever becomes of its stream: the decoder's table must
        # follow the client's encoder (§4.3). An undecodable block is a COMPRESSION_ERROR.
        try:
            headers = self._decoder.decode(block)
            too_large = None
        except HeaderListTooLarge as exc:
            headers = None
            too_large = exc
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._trailers(stream, flags, headers, too_large, events)
        elif stream_id <= self.highest_stream_id:
            reset_by_us = self._closed.get(stream_id)
            if reset_by_us is None:
                # §5.1.1: "The identifier of a newly established stream MUST be numerically
                # greater than all streams that the initiating endpoint has opened [...] An
                # endpoint that receives an unexpected stream identifier MUST respond with a
                # connection error of type PROTOCOL_ERROR."
                raise H2ConnectionError("HEADERS on stream %d, below the highest stream %d" % (stream_id, self.highest_stream_id))
            if not reset_by_us:
                # §5.1 closed: "An endpoint that receives any frame other than PRIORITY after
                # receiving a RST_STREAM MUST treat that as a stream error of type
                # STREAM_CLOSED"; after END_STREAM both ways, the same. No new stream may
                # reuse its id, so the connection ends.
                raise H2ConnectionError("HEADERS on closed stream %d" % stream_id, ErrorCode.STREAM_CLOSED)
        else:
            self._new_stream(stream_id, flags, headers, too_large, events)

    def _new_stream(self, stream_id, flags, headers, too_large, events):
        # §5.1.1: the first use of an id closes every idle stream below it.
        self.highest_stream_id = stream_id
        if stream_id > self._goaway_last:
            # §6.8: after our final GOAWAY newer streams are not processed (their block was
            # decoded above). §8.7: REFUSED_STREAM says so on the stream itself, so a client
            # that sent it before reading our GOAWAY retries it elsewhere at once, instead of
            # waiting for an answer that never comes.
            raise StreamError(stream_id, "opened after our final GOAWAY (last stream %d)" % self._goaway_last,
                              ErrorCode.REFUSED_STREAM)
        if self._block_self_dependent:
            raise StreamError(stream_id, "stream depends on itself")
        end_stream = bool(flags & END_STREAM)
        if too_large is not None:
            self._reject_too_large(stream_id, end_stream, str(too_large), events)
            return
        if len(self._streams) >= self.config.max_concurrent_streams:
            # §5.1.2: "An endpoint that receives a HEADERS frame that causes its advertised
            # concurrent stream limit to be exceeded MUST treat this as a stream error of type
            # PROTOCOL_ERROR or REFUSED_STREAM." REFUSED_STREAM tells the client the request
            # was not processed and may be retried (§8.7); the connection goes on.
            raise StreamError(stream_id, "over SETTINGS_MAX_CONCURRENT_STREAMS %d" % self.config.max_concurrent_streams,
                              ErrorCode.REFUSED_STREAM)
        try:
            method, scheme, authority, path, fields, content_length = request_head(headers)
        except Malformed as exc:
            raise StreamError(stream_id, "malformed request: %s" % exc)
        if end_stream and content_length:
            raise StreamError(stream_id, "content-length %d with no DATA" % content_length)  # §8.1.1
        stream = _Stream(stream_id, self._stream_window, self.peer_settings[SETTINGS_INITIAL_WINDOW_SIZE], content_length)
        self._streams[stream_id] = stream
        events.append(request_received(stream_id, method, scheme, authority, path, fields, end_stream,
                                      content_length, self._decoder.never_indexed))
        if end_stream:
            stream.remote_closed = True
            events.append(stream_ended(stream_id))

    def _trailers(self, stream, flags, headers, too_large, events):
        stream_id = stream.stream_id
        if stream.remote_closed:
            # §5.1 half-closed (remote): frames other than WINDOW_UPDATE, PRIORITY and
            # RST_STREAM are a stream error of type STREAM_CLOSED.
            raise StreamError(stream_id, "HEADERS after END_STREAM", ErrorCode.STREAM_CLOSED)
        if self._block_self_dependent:
            raise StreamError(stream_id, "stream depends on itself")
        if not flags & END_STREAM:
            # §8.1: a HEADERS frame after the request's head must end the stream (trailers).
            raise StreamError(stream_id, "second HEADERS without END_STREAM")
        if too_large is not None:
            raise StreamError(stream_id, "trailers: %s" % too_large, ErrorCode.ENHANCE_YOUR_CALM)
        try:
            fields = trailers(headers)
        except Malformed as exc:
            raise StreamError(stream_id, "malformed trailers: %s" % exc)
        events.append(TrailersReceived(stream_id, fields))
        self._remote_end(stream, events)

    def _reject_too_large(self, stream_id, end_stream, reason, events):
        """RFC 9113 §10.5.1: "A server that receives a larger header section than it is willing
        to handle can send an HTTP 431 (Request Header Fields Too Large) status code"; the
        block was decoded all the same, so the connection goes on. A request body still to
        come is stopped with RST_STREAM(NO_ERROR) (§8.1)."""
        block = self._encoder.encode([(b":status", b"431"), (b"content-length", b"0")])
        headers_frames(stream_id, block, True, self._outbound_frame_size, self._out)
        if not end_stream:
            self._queue_control(rst_stream_frame(stream_id, ErrorCode.NO_ERROR))
        self._remember_closed(stream_id, not end_stream)
        events.append(RequestRejected(stream_id, 431, reason))

    def _remote_end(self, stream, events):
        stream.remote_closed = True
        if stream.content_length is not None and stream.received != stream.content_length:
            # §8.1.1: "A request or response is also malformed if the value of a
            # content-length header field does not equal the sum of the DATA frame payload
            # lengths that form the content".
            raise StreamError(stream.stream_id, "%d bytes of DATA for content-length %d" % (stream.received, stream.content_length))
        events.append(stream_ended(stream.stream_id))
        if stream.local_closed:
            self._close(stream, True)

    def _on_priority(self, flags, stream_id, payload, events):
        if stream_id == 0:
            raise H2ConnectionError("PRIORITY on stream 0")  # §6.3
        if len(payload) != 5:
            # §6.3: "A PRIORITY frame with a length other than 5 octets MUST be treated as a
            # stream error of type FRAME_SIZE_ERROR."
            raise StreamError(stream_id, "PRIORITY of %d bytes" % len(payload), ErrorCode.FRAME_SIZE_ERROR)
        depends_on = priority_payload(payload)
        if depends_on == stream_id:
            raise StreamError(stream_id, "stream depends on itself")  # §5.3.1
        events.append(PriorityIgnored(stream_id, depends_on))

    def _on_rst_stream(self, flags, stream_id, payload, events):
        if len(payload) != 4:
            raise H2ConnectionError("RST_STREAM of %d bytes" % len(payload), ErrorCode.FRAME_SIZE_ERROR)  # §6.4
        if stream_id == 0:
            raise H2ConnectionError("RST_STREAM on stream 0")
        stream = self._streams.get(stream_id)
        if stream is None:
            # §6.4: "If a RST_STREAM frame identifying an idle stream is received, the
            # recipient MUST treat this as a connection error of type PROTOCOL_ERROR."
            self._check_not_idle(stream_id, "RST_STREAM")
            return
        self._close(stream, False)
        events.append(StreamReset(stream_id, error_code(uint32(payload)), True, "reset by the client"))
        if not stream.local_closed:
            self._spend_reset("the client reset %d streams before their responses ended (rapid reset)")

    def _on_push_promise(self, flags, stream_id, payload, events):
        # §8.4: "A client cannot push. Thus, servers MUST treat the receipt of a PUSH_PROMISE
        # frame as a connection error of type PROTOCOL_ERROR."
        raise H2ConnectionError("PUSH_PROMISE from a client")

    def _on_ping(self, flags, stream_id, payload, events):
        if len(payload) != 8:
            raise H2ConnectionError("PING of %d bytes" % len(payload), ErrorCode.FRAME_SIZE_ERROR)  # §6.7
        if stream_id != 0:
            raise H2ConnectionError("PING on stream %d" % stream_id)
        if flags & ACK:
            events.append(PingAcknowledged(payload))
            if payload == _SHUTDOWN_PING and self.state == DRAINING:
                self._final_goaway()
            return
        # PING flood (CVE-2019-9512): each PING costs us an ACK; the ACKs not yet taken by
        # data_to_send are bounded (_queue_control).
        self._queue_control(ping_frame(payload, True))
        events.append(PingReceived(payload))

    def _on_goaway(self, flags, stream_id, payload, events):
        if stream_id != 0:
            raise H2ConnectionError("GOAWAY on stream %d" % stream_id)  # §6.8
        last_stream_id, code, debug = goaway_payload(payload)
        events.append(ConnectionTerminated(error_code(code), last_stream_id, debug, True, "GOAWAY from the client"))

    def _on_window_update(self, flags, stream_id, payload, events):
        if len(payload) != 4:
            # §6.9: "A WINDOW_UPDATE frame with a length other than 4 octets MUST be treated as
            # a connection error of type FRAME_SIZE_ERROR."
            raise H2ConnectionError("WINDOW_UPDATE of %d bytes" % len(payload), ErrorCode.FRAME_SIZE_ERROR)
        increment = uint31(payload)
        if stream_id == 0:
            if increment == 0:
                raise H2ConnectionError("WINDOW_UPDATE of 0 for the connection")  # §6.9
            self._outbound_window += increment
            if self._outbound_window > _MAX_WINDOW:
                # §6.9.1: "If a sender receives a WINDOW_UPDATE that causes a flow-control
                # window to exceed this maximum, it MUST terminate either the stream or the
                # connection, as appropriate."
                raise H2ConnectionError("connection window over 2^31-1", ErrorCode.FLOW_CONTROL_ERROR)
            events.append(WindowUpdated(0, increment))
            return
        stream = self._streams.get(stream_id)
        if stream is None:
            self._check_not_idle(stream_id, "WINDOW_UPDATE")
            return  # §5.1: a closed stream may still see WINDOW_UPDATE "for a short period"
        if increment == 0:
            raise StreamError(stream_id, "WINDOW_UPDATE of 0")
        stream.outbound_window += increment
        if stream.outbound_window > _MAX_WINDOW:
            raise StreamError(stream_id, "stream window over 2^31-1", ErrorCode.FLOW_CONTROL_ERROR)
        events.append(WindowUpdated(stream_id, increment))

    def _on_settings(self, flags, stream_id, payload, events):
        if stream_id != 0:
            raise H2ConnectionError("SETTINGS on stream %d" % stream_id)  # §6.5
        if flags & ACK:
            if payload:
                # §6.5: "Receipt of a SETTINGS frame with the ACK flag set and a length field
                # value other than 0 MUST be treated as a connection error of type
                # FRAME_SIZE_ERROR."
                raise H2ConnectionError("SETTINGS ACK with a payload", ErrorCode.FRAME_SIZE_ERROR)
            if not self._settings_acked:
                self._our_settings_apply()
                events.append(SettingsAcknowledged())
            return
        changed = {}
        for identifier, value in settings_payload(payload):
            self._peer_setting(identifier, value)
            changed[identifier] = value
        # SETTINGS flood: every SETTINGS costs an ACK, bounded like PING's.
        self._queue_control(_SETTINGS_ACK)
        events.append(SettingsChanged(changed))

    def _peer_setting(self, identifier, value):
        """§6.5.2: check and apply one of the client's settings (unknown ones are ignored)."""
        if identifier == SETTINGS_HEADER_TABLE_SIZE:
            self._encoder.set_max_table_size(value)
        elif identifier in (SETTINGS_ENABLE_PUSH, SETTINGS_ENABLE_CONNECT_PROTOCOL, SETTINGS_NO_RFC7540_PRIORITIES):
            if value > 1:
                # §6.5.2: "Any value other than 0 or 1 MUST be treated as a connection error
                # of type PROTOCOL_ERROR" (RFC 8441 §3, RFC 9218 §2.1 alike).
                raise H2ConnectionError("setting 0x%x = %d, not 0 or 1" % (identifier, value))
        elif identifier == SETTINGS_INITIAL_WINDOW_SIZE:
            if value > _MAX_WINDOW:
                raise H2ConnectionError("SETTINGS_INITIAL_WINDOW_SIZE %d" % value, ErrorCode.FLOW_CONTROL_ERROR)
            # §6.9.2: the change applies to every stream's window, which may go negative;
            # one that would exceed 2^31-1 is a connection FLOW_CONTROL_ERROR.
            delta = value - self.peer_settings[SETTINGS_INITIAL_WINDOW_SIZE]
            for stream in self._streams.values():
                stream.outbound_window += delta
                if stream.outbound_window > _MAX_WINDOW:
                    raise H2ConnectionError("stream window over 2^31-1", ErrorCode.FLOW_CONTROL_ERROR)
        elif identifier == SETTINGS_MAX_FRAME_SIZE:
            if not 16384 <= value <= 16777215:
                raise H2ConnectionError("SETTINGS_MAX_FRAME_SIZE %d" % value)
            self._outbound_frame_size = value
        self.peer_settings[identifier] = value

    def _our_settings_apply(self):
        """§6.5.3: our SETTINGS take effect when acknowledged: the stream windows the client
        counts from (which it assumed were 65,535 until now) and the HPACK table size."""
        self._settings_acked = True
        delta = self.config.initial_window_size - self._stream_window
        self._stream_window = self.config.initial_window_size
        for stream in self._streams.values():
            stream.inbound_window += delta
        self._decoder.set_max_allowed_table_size(self.config.header_table_size)

    # --- sending -------------------------------------------------------------------------------

    def send_headers(self, stream_id, headers, end_stream=False, checked=False):
        """A response's head (``(b":status", b"200")`` first), or its trailers (after the
        head; ``end_stream`` must then be True). ``headers``: ``(name, value)`` or
        ``(name, value, sensitive)`` tuples, bytes or latin-1 str; names are lowercased and
        connection-specific fields (Connection, Keep-Alive, ...) dropped (§8.2.2), so a WSGI
        application's HTTP/1.1 headers can pass as they are. ``checked``: ``headers`` is a
        response head as ``http.framing.build_fields`` makes it (bytes, lower case, ``:status``
        alone first, no connection-specific field, no CR, LF or NUL: it checked them), taken as
        it is."""
        stream = self._sending_stream(stream_id)
        if checked:
            fields = headers
            pseudo = 1
        else:
            fields, pseudo = _fields_to_send(headers)
        if not stream.response_started:
            status = fields[0][1] if pseudo == 1 and fields[0][0] == b":status" else b""
            if len(status) != 3 or not status.isdigit() or status[:1] == b"1":
                raise LocalProtocolError("a response's head starts with a final :status and has no other pseudo-header")
            stream.response_started = True
        elif not end_stream or pseudo:
            raise LocalProtocolError("trailers end the stream and carry no pseudo-header (§8.1)")
        block = self._encoder.encode(fields)
        headers_frames(stream_id, block, end_stream, self._outbound_frame_size, self._out)
        if end_stream:
            self._local_end(stream)

    def send_informational(self, stream_id, headers):
        """A 1xx response before the final one: 103 Early Hints (RFC 8297), 100 Continue.
        ``headers`` starts with ``(b":status", b"103")``; 101 has no place in HTTP/2 (§8.6)."""
        stream = self._sending_stream(stream_id)
        fields, pseudo = _fields_to_send(headers)
        status = fields[0][1] if pseudo == 1 and fields[0][0] == b":status" else b""
        if stream.response_started or len(status) != 3 or not status.isdigit() or status[:1] != b"1" or status == b"101":
            raise LocalProtocolError("an informational response is a 1xx :status (not 101) before the final one")
        headers_frames(stream_id, self._encoder.encode(fields), False, self._outbound_frame_size, self._out)

    def send_data(self, stream_id, data, end_stream=False):
        """Queue as much of ``data`` as the flow-control windows allow (§6.9), in frames of the
        client's SETTINGS_MAX_FRAME_SIZE; returns how many bytes were taken. END_STREAM goes
        with the last byte only if all of ``data`` was taken; the rest waits for a
        ``WindowUpdated`` (``send_window`` says how much fits)."""
        stream = self._sending_stream(stream_id)
        if not stream.response_started:
            raise LocalProtocolError("DATA before the response's HEADERS")
        length = len(data)
        window = min(stream.outbound_window, self._outbound_window)
        if length > window:
            length = max(window, 0)
            end_stream = False
        if length == 0 and not end_stream:
            return 0
        frame_size = self._outbound_frame_size
        out = self._out
        if length <= frame_size:
            out.append(frame_header(length, DATA, END_STREAM if end_stream else 0, stream_id))
            out.append(data if length == len(data) else memoryview(data)[:length])
        else:
            # Views, not slices: the payload is copied once, by data_to_send's join.
            view = memoryview(data)
            pos = 0
            while pos < length:
                size = min(frame_size, length - pos)
                last = pos + size == length
                out.append(frame_header(size, DATA, END_STREAM if end_stream and last else 0, stream_id))
                out.append(view[pos : pos + size])
                pos += size
        stream.outbound_window -= length
        self._outbound_window -= length
        if end_stream:
            self._local_end(stream)
        return length

    def end_stream(self, stream_id):
        """End the response with an empty DATA frame (allowed with no window, §6.9.1)."""
        self.send_data(stream_id, b"", True)

    def acknowledge_received_data(self, stream_id, size):
        """The application read ``size`` bytes of the stream's DATA: give them back to the
        client's windows (§6.9). WINDOW_UPDATE frames go out once half a window is owed, not
        per read, so a body read in small pieces costs few frames. Once the stream is closed
        this is a no-op: what it had not acknowledged went back to the connection then."""
        if size < 0:
            raise LocalProtocolError("cannot acknowledge %d bytes" % size)
        stream = self._streams.get(stream_id)
        if stream is None:
            return  # closed: what it had not acknowledged went back when it closed (_close)
        size = min(size, stream.unread)
        stream.unread -= size
        self._return_window(stream, size)

    def reset_stream(self, stream_id, error_code=ErrorCode.CANCEL):
        """Abandon a stream with RST_STREAM (§6.4): the application gave up, or (NO_ERROR) the
        response is complete and the rest of the request body is not wanted (§8.1). A stream
        that is already closed is left alone."""
        stream = self._streams.get(stream_id)
        if stream is None:
            return
        self._out.append(rst_stream_frame(stream_id, error_code))
        self._close(stream, False)
        self._remember_closed(stream_id, True)

    def ping(self, opaque=b"\0" * 8):
        """Send a PING (8 bytes); its ACK comes back as ``PingAcknowledged``."""
        if len(opaque) != 8:
            raise LocalProtocolError("a PING carries 8 bytes")
        self._out.append(ping_frame(opaque, False))

    def start_graceful_shutdown(self):
        """The first step of §6.8's graceful shutdown: GOAWAY with the largest stream id (the
        client may still open streams it already sent), and a PING. When the PING's ACK comes
        back, every stream the client opened before it has reached us, and the final GOAWAY
        with the highest stream id seen goes out by itself (or call ``close_connection``
        after a timeout). Then wait for ``open_streams`` to reach 0."""
        if self.state != OPEN:
            return
        self.state = DRAINING
        # The PING first: in one write the order means nothing to the client's reply, and
        # some clients (python-hyper's h2) refuse any frame after a GOAWAY.
        self._out.append(ping_frame(_SHUTDOWN_PING, False))
        self._out.append(goaway_frame(_MAX_STREAM_ID, ErrorCode.NO_ERROR, b""))

    def close_connection(self, error_code=ErrorCode.NO_ERROR, last_stream_id=None, reason=b""):
        """GOAWAY now (§6.8), with ``last_stream_id`` (default: the highest the client
        opened); nothing more is read. With NO_ERROR the open streams may still be answered."""
        if self.state == CLOSED:
            return
        if last_stream_id is None:
            last_stream_id = self.highest_stream_id
        self._out.append(goaway_frame(last_stream_id, error_code, reason[:_MAX_DEBUG_DATA]))
        self._goaway_last = min(self._goaway_last, last_stream_id)
        self.state = CLOSED if error_code != ErrorCode.NO_ERROR else GOING_AWAY

    # --- inside --------------------------------------------------------------------------------

    def _send_preface(self):
        """§3.4: "The server connection preface consists of a potentially empty SETTINGS frame
        that MUST be the first frame the server sends". Ours announces every limit we apply."""
        config = self.config
        settings = [
            (SETTINGS_MAX_CONCURRENT_STREAMS, config.max_concurrent_streams),
            (SETTINGS_ENABLE_PUSH, 0),
            (SETTINGS_MAX_HEADER_LIST_SIZE, config.max_header_list_size),
            (SETTINGS_NO_RFC7540_PRIORITIES, 1),
        ]
        if config.initial_window_size != _DEFAULT_WINDOW:
            settings.append((SETTINGS_INITIAL_WINDOW_SIZE, config.initial_window_size))
        if config.max_frame_size != 16384:
            settings.append((SETTINGS_MAX_FRAME_SIZE, config.max_frame_size))
        if config.header_table_size != 4096:
            settings.append((SETTINGS_HEADER_TABLE_SIZE, config.header_table_size))
        self._out.append(settings_frame(settings))
        if config.connection_window_size > _DEFAULT_WINDOW:
            # §6.9.2: the connection's window changes only by WINDOW_UPDATE.
            self._out.append(window_update_frame(0, config.connection_window_size - _DEFAULT_WINDOW))

    def _sending_stream(self, stream_id):
        stream = self._streams.get(stream_id)
        if stream is None or stream.local_closed:
            raise StreamClosedError(stream_id)
        if self.state == CLOSED:
            raise LocalProtocolError("the connection is closed")
        return stream

    def _local_end(self, stream):
        stream.local_closed = True
        if stream.remote_closed:
            self._close(stream, True)

    def _close(self, stream, completed):
        del self._streams[stream.stream_id]
        self._remember_closed(stream.stream_id, False)
        if stream.unread:
            # Bytes the application will not read now (the stream was reset, or answered
            # without reading its body): back to the connection's window, or every such
            # stream would shrink it for good until uploads stall.
            self._return_window(None, stream.unread)
            stream.unread = 0
        if completed and self._reset_tokens < self._reset_burst:
            self._reset_tokens += 1  # a stream answered in full earns back one reset

    def _remember_closed(self, stream_id, reset_by_us):
        closed = self._closed
        closed[stream_id] = reset_by_us
        memory = self.config.closed_stream_memory
        if len(closed) > memory + (memory >> 1):
            # Forgotten in batches, the newest ``memory`` kept: deleting the oldest id one at a
            # time leaves a dict's deleted slots at its front, and next(iter(closed)) walks them
            # all, so every close cost a scan of the memory (5 % of a hello's instructions).
            items = list(closed.items())
            self._closed = dict(items[len(items) - memory:])

    def _return_window(self, stream, size):
        """Give ``size`` received bytes back: to the connection's window always, to the
        stream's while the client may still send on it; a WINDOW_UPDATE once half is owed."""
        self._unacknowledged += size
        if self._unacknowledged * 2 >= self.config.connection_window_size:
            self._out.append(window_update_frame(0, self._unacknowledged))
            self._inbound_window += self._unacknowledged
            self._unacknowledged = 0
        if stream is not None and not stream.remote_closed and size:
            stream.unacknowledged += size
            if stream.unacknowledged * 2 >= self._stream_window:
                self._out.append(window_update_frame(stream.stream_id, stream.unacknowledged))
                stream.inbound_window += stream.unacknowledged
                stream.unacknowledged = 0

    def _check_not_idle(self, stream_id, what):
        # §5.1 idle: "Receiving any frame other than HEADERS or PRIORITY on a stream in this
        # state MUST be treated as a connection error of type PROTOCOL_ERROR." Even ids are
        # the server's, which opens none.
        if (stream_id > self.highest_stream_id or not stream_id & 1) and stream_id not in self._closed:
            raise H2ConnectionError("%s on idle stream %d" % (what, stream_id))

    def _count_empty_frame(self, what):
        # Empty frames flood (CVE-2019-9518): a DATA or CONTINUATION frame that carries nothing
        # costs us a frame's work and the client nothing of its window; many in a row, with no
        # data between, are an attack.
        self._empty_frames += 1
        if self._empty_frames > self.config.max_empty_frames:
            raise H2ConnectionError("%d empty frames in a row (last: %s)" % (self._empty_frames, what),
                                    ErrorCode.ENHANCE_YOUR_CALM)

    def _refill_resets(self, now):
        if self._reset_clock >= 0.0 and now > self._reset_clock:
            tokens = self._reset_tokens + (now - self._reset_clock) * self._reset_rate
            self._reset_tokens = min(tokens, self._reset_burst)
        self._reset_clock = now

    def _spend_reset(self, message):
        # Rapid reset (CVE-2023-44487): a stream the client opens and cancels at once costs it
        # two frames and us the start of a request's work each time, so the cancelled streams
        # are metered: a burst, then reset_rate per second and one per stream completed. The
        # resets the client makes us send count too (_stream_error): past the bucket, one
        # GOAWAY(ENHANCE_YOUR_CALM) and nothing more is read, whichever kind it was.
        self._reset_tokens -= 1
        if self._reset_tokens < 0:
            raise H2ConnectionError(message % self.config.reset_burst, ErrorCode.ENHANCE_YOUR_CALM)

    def _queue_control(self, frame):
        # Frames we owe the client for frames it sent (PING and SETTINGS ACKs, RST_STREAMs):
        # a client that sends them faster than it reads makes our buffer grow (CVE-2019-9512,
        # -9515, -9514), so those not yet taken by data_to_send are bounded.
        self._out.append(frame)
        self._queued_control += 1
        if self._queued_control > self.config.max_queued_control_frames:
            raise H2ConnectionError("%d control frames owed and not yet sent (flood)" % self._queued_control,
                                    ErrorCode.ENHANCE_YOUR_CALM)

    def _stream_error(self, exc, events):
        """§5.4.2: RST_STREAM with the error's code; the stream is gone."""
        stream_id = exc.stream_id
        stream = self._streams.get(stream_id)
        if stream is not None:
            self._close(stream, False)
        self._remember_closed(stream_id, True)
        events.append(StreamReset(stream_id, exc.error_code, False, exc.message))
        try:
            self._queue_control(rst_stream_frame(stream_id, exc.error_code))
            if exc.error_code != ErrorCode.REFUSED_STREAM:
                # Every reset the client makes us send costs it a frame and us a stream's work:
                # an open stream's (MadeYouReset, CVE-2025-8671: WINDOW_UPDATE of 0, DATA after
                # END_STREAM) and a malformed request's alike, metered by the rapid-reset bucket.
                # REFUSED_STREAM is ours (a limit, a drain): the client did nothing wrong.
                self._spend_reset("the client made us reset %d streams (malformed requests, MadeYouReset)")
        except H2ConnectionError as flood:
            self._connection_error(flood, events)

    def _connection_error(self, exc, events):
        """§5.4.1: GOAWAY with the error's code and the last stream we took; nothing more is
        read, the caller closes the connection once this is sent. §6.8: "Endpoints MUST NOT
        increase the value they send in the last stream identifier", so after a final GOAWAY
        this one names no stream above that one's."""
        reason = exc.message.encode("ascii", "replace")[:_MAX_DEBUG_DATA]
        last_stream_id = min(self.highest_stream_id, self._goaway_last)
        self._out.append(goaway_frame(last_stream_id, exc.error_code, reason))
        self._goaway_last = last_stream_id
        self.state = CLOSED
        self._streams.clear()
        events.append(ConnectionTerminated(exc.error_code, last_stream_id, reason, False, exc.message))

    def _final_goaway(self):
        self._out.append(goaway_frame(self.highest_stream_id, ErrorCode.NO_ERROR, b""))
        self._goaway_last = self.highest_stream_id
        self.state = GOING_AWAY


class StreamClosedError(LocalProtocolError):
    """The stream was reset (by the client or for its error) or already ended on our side:
    the application's response has nowhere to go. A ``StreamReset`` event said so first."""

    def __init__(self, stream_id):
        LocalProtocolError.__init__(self, "stream %d is closed" % stream_id)
        self.stream_id = stream_id


_SETTINGS_ACK = frames.frame(SETTINGS, ACK, 0, b"")


_CR_LF_NUL = re.compile(b"[\r\n\0]").search


def _fields_to_send(headers):
    """Our fields as HPACK takes them: bytes, lowercase names (§8.2), no connection-specific
    field (§8.2.2), no CR, LF or NUL in a value (a response split in two by a value); and how
    many are pseudo-header fields."""
    fields = []
    pseudo = 0
    for header in headers:
        name = header[0]
        value = header[1]
        if type(name) is not bytes:
            name = name.encode("latin-1")
        if type(value) is not bytes:
            value = value.encode("latin-1")
        name = name.lower()
        if name in CONNECTION_SPECIFIC:
            continue
        # One search each, not `b"\r" in value`: bytes' `in` first tries its argument as an
        # integer, and raises (then clears) a TypeError with a formatted message every time.
        if _CR_LF_NUL(value) is not None or _CR_LF_NUL(name) is not None:
            raise LocalProtocolError("CR, LF or NUL in field %r" % (name,))
        if name[:1] == b":":
            pseudo += 1
        if len(header) > 2 and header[2]:
            fields.append((name, value, True))
        else:
            fields.append((name, value))
    return fields, pseudo


def _frame_name(frame_type):
    return frames.FRAME_NAMES[frame_type] if frame_type < len(frames.FRAME_NAMES) else "type 0x%x" % frame_type

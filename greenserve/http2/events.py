"""What ``H2Connection.receive`` hands back: one event per thing the peer did, in order.

Events are plain records (``__slots__``, equality by value, a readable repr), so a test can
compare lists of them and a caller can log them as they are. Stream events carry the stream
id; ``stream_id`` 0 in ``WindowUpdated`` is the connection's window.
"""

__all__ = [
    "Event", "RequestReceived", "DataReceived", "TrailersReceived", "StreamEnded", "StreamReset",
    "RequestRejected", "WindowUpdated", "SettingsChanged", "SettingsAcknowledged", "PingReceived",
    "PingAcknowledged", "PriorityIgnored", "ConnectionTerminated",
]


class Event:
    """The base: fields by position, in ``__slots__`` order. The events of every request
    (RequestReceived, DataReceived, StreamEnded) assign theirs directly, which costs the pure
    build a third of this loop's time."""

    __slots__ = ()

    def __init__(self, *args):
        for name, value in zip(self.__slots__, args):
            setattr(self, name, value)

    def __eq__(self, other):
        return type(other) is type(self) and all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join("%s=%r" % (n, getattr(self, n)) for n in self.__slots__))


class RequestReceived(Event):
    """A request's head (RFC 9113 §8.3.1), validated: the pseudo-header fields apart (None when
    absent, as :scheme and :path are for CONNECT), ``headers`` the regular fields in order as
    ``(name, value)`` bytes with several ``cookie`` fields joined into one (§8.2.3).
    ``end_stream``: no body follows (a ``StreamEnded`` comes next). ``never_indexed``: names of
    the fields the client sent as never indexed (RFC 7541 §6.2.3), or None."""

    __slots__ = ("stream_id", "method", "scheme", "authority", "path", "headers", "end_stream",
                 "content_length", "never_indexed")

    def __init__(self, stream_id, method, scheme, authority, path, headers, end_stream, content_length, never_indexed):
        self.stream_id = stream_id
        self.method = method
        self.scheme = scheme
        self.authority = authority
        self.path = path
        self.headers = headers
        self.end_stream = end_stream
        self.content_length = content_length
        self.never_indexed = never_indexed


class DataReceived(Event):
    """Request body bytes. Acknowledge ``len(data)`` with ``acknowledge_received_data`` as the
    application reads them; ``flow_controlled_length`` also counts the padding, which the codec
    gives back to the peer's window itself."""

    __slots__ = ("stream_id", "data", "flow_controlled_length")

    def __init__(self, stream_id, data, flow_controlled_length):
        self.stream_id = stream_id
        self.data = data
        self.flow_controlled_length = flow_controlled_length


class TrailersReceived(Event):
    """The request's trailer section (§8.1), validated like the head's regular fields."""

    __slots__ = ("stream_id", "headers")


class StreamEnded(Event):
    """The client's END_STREAM: the request is complete."""

    __slots__ = ("stream_id",)

    def __init__(self, stream_id):
        self.stream_id = stream_id


class StreamReset(Event):
    """The stream is gone. ``remote``: the peer sent RST_STREAM with ``error_code``; otherwise we
    reset it (a RST_STREAM is queued) for the stream error ``reason`` explains, or refused it."""

    __slots__ = ("stream_id", "error_code", "remote", "reason")


class RequestRejected(Event):
    """The codec answered the request itself with ``status`` (431: its header list was over
    SETTINGS_MAX_HEADER_LIST_SIZE, RFC 9113 §10.5.1); the application never sees it."""

    __slots__ = ("stream_id", "status", "reason")


class WindowUpdated(Event):
    """The peer opened its flow-control window by ``delta`` (stream 0: the connection's): data
    that did not fit before may fit now (``H2Connection.send_window``)."""

    __slots__ = ("stream_id", "delta")


class SettingsChanged(Event):
    """The peer's SETTINGS (acknowledged already): ``changed`` maps each setting's identifier
    to its new value. A new SETTINGS_INITIAL_WINDOW_SIZE moves every stream's window."""

    __slots__ = ("changed",)


class SettingsAcknowledged(Event):
    """The peer acknowledged our SETTINGS: our limits now apply as announced."""

    __slots__ = ()


class PingReceived(Event):
    """A PING, answered already (its ACK is queued)."""

    __slots__ = ("data",)


class PingAcknowledged(Event):
    """The ACK of one of our PINGs (``H2Connection.ping``, or the graceful shutdown's)."""

    __slots__ = ("data",)


class PriorityIgnored(Event):
    """A PRIORITY frame, valid and ignored: RFC 9113 §5.3.2 deprecates its scheme, and we
    announce SETTINGS_NO_RFC7540_PRIORITIES (RFC 9218 §2.1)."""

    __slots__ = ("stream_id", "depends_on")


class ConnectionTerminated(Event):
    """The connection is over, or ending. ``remote``: the peer sent GOAWAY with ``error_code``,
    ``last_stream_id`` and ``additional_data`` (with NO_ERROR its open streams may still be
    answered). Otherwise the peer broke a rule that costs the connection: ``reason`` says which;
    our GOAWAY with ``error_code`` is queued and ``receive`` reads nothing more."""

    __slots__ = ("error_code", "last_stream_id", "additional_data", "remote", "reason")


# --- the events of every request, made without a call of their class ----------------------------
# The codec makes these two or three a request. Calling the class is a Python call with its
# arguments packed (callgrind, h2load -c100 -m1: 1,500 instructions a request for
# RequestReceived); compiled, these are C functions that fill the struct's fields.


def request_received(stream_id, method, scheme, authority, path, headers, end_stream, content_length, never_indexed):
    event = RequestReceived.__new__(RequestReceived)
    event.stream_id = stream_id
    event.method = method
    event.scheme = scheme
    event.authority = authority
    event.path = path
    event.headers = headers
    event.end_stream = end_stream
    event.content_length = content_length
    event.never_indexed = never_indexed
    return event


def data_received(stream_id, data, flow_controlled_length):
    event = DataReceived.__new__(DataReceived)
    event.stream_id = stream_id
    event.data = data
    event.flow_controlled_length = flow_controlled_length
    return event


def stream_ended(stream_id):
    event = StreamEnded.__new__(StreamEnded)
    event.stream_id = stream_id
    return event

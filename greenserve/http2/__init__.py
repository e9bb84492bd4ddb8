"""greenserve.http2: the HTTP/2 protocol core (RFC 9113, RFC 7541), sans-I/O.

Bytes in, events out, bytes to send out: ``H2Connection`` is the server side of one
connection; nothing here imports gevent, sockets, settings or the WSGI layer, so every rule is
tested with byte strings alone. docs/http2.md, "The codec", describes the API and the limits.
The hot modules (``frames``, ``hpack``, ``huffman``) are compiled like ``http/``'s.
"""

from greenserve.http2.config import H2Config
from greenserve.http2.connection import CLOSED, DRAINING, GOING_AWAY, OPEN, H2Connection, StreamClosedError
from greenserve.http2.errors import ErrorCode, LocalProtocolError
from greenserve.http2.events import (
    ConnectionTerminated,
    DataReceived,
    Event,
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
)

__all__ = [
    "H2Config", "H2Connection", "ErrorCode", "LocalProtocolError", "StreamClosedError",
    "OPEN", "DRAINING", "GOING_AWAY", "CLOSED",
    "Event", "RequestReceived", "DataReceived", "TrailersReceived", "StreamEnded", "StreamReset",
    "RequestRejected", "WindowUpdated", "SettingsChanged", "SettingsAcknowledged", "PingReceived",
    "PingAcknowledged", "PriorityIgnored", "ConnectionTerminated",
]

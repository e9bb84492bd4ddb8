"""HTTP/2 error codes (RFC 9113 §7) and the exceptions that carry them through the codec.

Who decides what: the frame reader, the HPACK decoder and the connection raise these where a
rule is broken; ``H2Connection.receive`` turns a ``H2ConnectionError`` into a GOAWAY with its
code (and a ``ConnectionTerminated`` event) and a ``StreamError`` into a RST_STREAM on that
stream (and a ``StreamReset`` event), so the caller only logs. ``LocalProtocolError`` is the
caller's own mistake (data on a stream it already ended, ...): raised to the caller, nothing is
sent.
"""

import enum

__all__ = [
    "ErrorCode",
    "H2Error",
    "H2ConnectionError",
    "StreamError",
    "HPACKError",
    "HeaderListTooLarge",
    "LocalProtocolError",
]


class ErrorCode(enum.IntEnum):
    """RFC 9113 §7: the 32-bit codes of RST_STREAM and GOAWAY."""

    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    SETTINGS_TIMEOUT = 0x4
    STREAM_CLOSED = 0x5
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    CONNECT_ERROR = 0xA
    ENHANCE_YOUR_CALM = 0xB
    INADEQUATE_SECURITY = 0xC
    HTTP_1_1_REQUIRED = 0xD


def error_code(value):
    """An ErrorCode for a known value; the int itself for an unknown one (§7: "Unknown or
    unsupported error codes MUST NOT trigger any special behavior")."""
    try:
        return ErrorCode(value)
    except ValueError:
        return value


class H2Error(Exception):
    """A rule of RFC 9113 or RFC 7541 that the peer broke; ``error_code`` is what to answer with."""

    error_code = ErrorCode.PROTOCOL_ERROR

    def __init__(self, message, error_code=None):
        Exception.__init__(self, message)
        if error_code is not None:
            self.error_code = error_code

    @property
    def message(self):
        return self.args[0]


class H2ConnectionError(H2Error):
    """§5.4.1: the whole connection is unusable; answered by GOAWAY with ``error_code``."""


class StreamError(H2Error):
    """§5.4.2: one stream is unusable; answered by RST_STREAM on ``stream_id``."""

    def __init__(self, stream_id, message, error_code=None):
        H2Error.__init__(self, message, error_code)
        self.stream_id = stream_id


class HPACKError(H2ConnectionError):
    """RFC 7541: a header block that cannot be decoded. The decoder's table may now differ from
    the encoder's, so every later block is suspect: a connection error (RFC 9113 §4.3)."""

    error_code = ErrorCode.COMPRESSION_ERROR


class HeaderListTooLarge(Exception):
    """The decoded header list is larger than SETTINGS_MAX_HEADER_LIST_SIZE (RFC 9113 §6.5.2).

    Raised only after the whole block was decoded, so the HPACK tables stay in step and the
    connection can go on: RFC 9113 §10.5.1 lets the server answer 431 for this one stream.
    """

    def __init__(self, size, limit):
        Exception.__init__(self, "decoded header list of %d bytes over the limit of %d" % (size, limit))
        self.size = size
        self.limit = limit


class LocalProtocolError(Exception):
    """The caller asked for something HTTP/2 forbids (a frame on a closed stream, DATA before
    HEADERS, a pseudo-header in trailers...). Nothing was sent."""

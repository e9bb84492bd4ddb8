"""HTTP/2 frames (RFC 9113 §4, §6): the client's bytes cut into frames, and our frames made.

``FrameReader`` takes the bytes as they come (any split) and hands back whole frames as
``(type, flags, stream_id, payload)``; it knows only the frame layout and the size limit, not
what a frame means (that is the connection's). A frame announcing more than our
SETTINGS_MAX_FRAME_SIZE is refused from its 9-byte header, before its payload is waited for
or stored (§4.2). The payload parsers below check what each frame type's layout requires
(§6.x); the connection decides whether a broken rule costs the stream or the connection.

Cost: bytes received are kept as the chunks they came in and joined only when a frame needs
bytes from more than one chunk, once, so a frame of N bytes fed one byte at a time costs O(N),
and chunks holding whole frames (the usual case) are never copied but for each payload's one
slice.
"""

import struct

from greenserve.http2.errors import ErrorCode, H2ConnectionError

__all__ = [
    "PREFACE", "FRAME_HEADER_LENGTH", "DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS",
    "PUSH_PROMISE", "PING", "GOAWAY", "WINDOW_UPDATE", "CONTINUATION", "FRAME_NAMES",
    "END_STREAM", "ACK", "END_HEADERS", "PADDED", "PRIORITY_FLAG", "FrameReader",
    "frame", "frame_header", "data_payload", "headers_payload", "priority_payload",
    "settings_payload", "goaway_payload", "uint31", "uint32", "settings_frame",
    "window_update_frame", "rst_stream_frame", "ping_frame", "goaway_frame", "headers_frames",
]

# §3.4: the client connection preface, before its first SETTINGS frame.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_PREFACE_LENGTH = 24
_SMALL = 4096  # reads shorter than this are gathered before they are kept (FrameReader.feed)

# §4.1: Length (24) | Type (8) | Flags (8) | R (1) Stream Identifier (31) | Payload
_HEADER_LENGTH = 9
FRAME_HEADER_LENGTH = _HEADER_LENGTH
_HEADER = struct.Struct(">BHBBL")

# §6: frame types.
DATA = 0x0
HEADERS = 0x1
PRIORITY = 0x2
RST_STREAM = 0x3
SETTINGS = 0x4
PUSH_PROMISE = 0x5
PING = 0x6
GOAWAY = 0x7
WINDOW_UPDATE = 0x8
CONTINUATION = 0x9
FRAME_NAMES = ("DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING",
               "GOAWAY", "WINDOW_UPDATE", "CONTINUATION")

# §6: flags (END_STREAM on DATA and HEADERS; ACK on SETTINGS and PING).
END_STREAM = 0x1
ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20


class FrameReader:
    """Bytes in (``feed``), whole frames out (``next_frame``: a 4-tuple, or None for "more").

    With ``expect_preface`` the stream must start with the connection preface (§3.4), checked
    as it arrives, so an HTTP/1.1 client is turned away from its first bytes.
    """

    __slots__ = ("max_frame_size", "_data", "_pos", "_pending", "_pending_size", "_small", "_preface")

    def __init__(self, max_frame_size=16384, expect_preface=True):
        self.max_frame_size = max_frame_size
        self._data = b""  # the chunk being read, from _pos
        self._pos = 0
        self._pending = []  # chunks after _data, not yet joined to it
        self._pending_size = 0  # their bytes and _small's
        self._small = bytearray()  # small chunks after _pending, gathered
        self._preface = expect_preface

    def feed(self, data):
        # A chunk is kept until its frames are read: a copy of anything that is not bytes (a
        # view of the caller's receive buffer, which the next read overwrites).
        if not data:
            return
        if self._pos == len(self._data) and not self._pending_size:
            self._data = data if type(data) is bytes else bytes(data)
            self._pos = 0
            return
        self._pending_size += len(data)
        if len(data) < _SMALL:
            # Small reads are gathered in one bytearray: a peer trickling a frame a byte at a
            # time would otherwise have us keep an object (~40 bytes) per byte it sent.
            self._small += data
            if len(self._small) < _SMALL:
                return
            data = bytes(self._small)
            del self._small[:]
        elif self._small:
            self._pending.append(bytes(self._small))
            del self._small[:]
        self._pending.append(data if type(data) is bytes else bytes(data))

    def buffered(self):
        """Bytes received and not yet read as frames."""
        return len(self._data) - self._pos + self._pending_size

    def _available(self, n):
        """Whether ``n`` bytes from ``_pos`` are in ``_data``, joining pending chunks once
        there are enough of them in all."""
        if len(self._data) - self._pos >= n:
            return True
        if len(self._data) - self._pos + self._pending_size < n:
            return False
        self._pending.insert(0, self._data[self._pos :])
        if self._small:
            self._pending.append(bytes(self._small))
            del self._small[:]
        self._data = b"".join(self._pending)
        self._pos = 0
        self._pending = []
        self._pending_size = 0
        return True

    def next_frame(self):
        if self._preface:
            if not self._read_preface():
                return None
        if not self._available(_HEADER_LENGTH):
            return None
        data = self._data
        pos = self._pos
        length = (data[pos] << 16) | (data[pos + 1] << 8) | data[pos + 2]
        if length > self.max_frame_size:
            # §4.2: "An endpoint MUST send an error code of FRAME_SIZE_ERROR if a frame exceeds
            # the size defined in SETTINGS_MAX_FRAME_SIZE"; for any frame that can alter the
            # connection's state it is a connection error, and we do not read the rest of
            # any frame so large.
            raise H2ConnectionError(
                "%s frame of %d bytes over SETTINGS_MAX_FRAME_SIZE %d"
                % (_frame_name(data[pos + 3]), length, self.max_frame_size),
                ErrorCode.FRAME_SIZE_ERROR,
            )
        if not self._available(_HEADER_LENGTH + length):
            return None
        data = self._data
        pos = self._pos
        high = data[pos + 5] & 0x7F  # §4.1: the reserved bit "MUST be ignored when receiving"
        stream_id = (high << 24) | (data[pos + 6] << 16) | (data[pos + 7] << 8) | data[pos + 8]
        self._pos = pos + _HEADER_LENGTH + length
        payload = data[pos + _HEADER_LENGTH : self._pos]
        return (data[pos + 3], data[pos + 4], stream_id, payload)

    def _read_preface(self):
        """§3.4: True once the whole preface has been read; an error as soon as a byte differs
        ("MUST treat an invalid connection preface as a connection error of type
        PROTOCOL_ERROR")."""
        have = len(self._data) - self._pos + self._pending_size
        if not self._available(min(have, _PREFACE_LENGTH)):
            return False
        start = self._pos
        got = self._data[start : start + _PREFACE_LENGTH]
        if not PREFACE.startswith(got):
            raise H2ConnectionError("invalid connection preface %r" % (got,), ErrorCode.PROTOCOL_ERROR)
        if len(got) < _PREFACE_LENGTH:
            return False
        self._pos = start + _PREFACE_LENGTH
        self._preface = False
        return True


def _frame_name(frame_type):
    return FRAME_NAMES[frame_type] if frame_type < len(FRAME_NAMES) else "type-0x%x" % frame_type


# --- payloads ------------------------------------------------------------------------------------


def _unpadded(flags, payload, name):
    """§6.1/§6.2: the payload without Pad Length and Padding when PADDED is set."""
    if not flags & PADDED:
        return payload
    if not payload:
        raise H2ConnectionError("padded %s frame without a Pad Length" % name, ErrorCode.FRAME_SIZE_ERROR)
    pad = payload[0]
    # §6.1: "If the length of the padding is the length of the frame payload or greater, the
    # recipient MUST treat this as a connection error of type PROTOCOL_ERROR." (§6.2 too.)
    if pad >= len(payload):
        raise H2ConnectionError("%s padding of %d bytes in a %d-byte payload" % (name, pad, len(payload)),
                                ErrorCode.PROTOCOL_ERROR)
    return payload[1 : len(payload) - pad]


def data_payload(flags, payload):
    """§6.1: the data of a DATA frame."""
    return _unpadded(flags, payload, "DATA")


def headers_payload(flags, payload):
    """§6.2: ``(field block fragment, stream dependency or -1)`` of a HEADERS frame."""
    payload = _unpadded(flags, payload, "HEADERS")
    if not flags & PRIORITY_FLAG:
        return payload, -1
    if len(payload) < 5:
        raise H2ConnectionError("HEADERS priority fields cut short", ErrorCode.FRAME_SIZE_ERROR)
    return payload[5:], uint31(payload)


def priority_payload(payload):
    """§6.3: the stream dependency of a PRIORITY frame (its length is checked by the caller)."""
    return uint31(payload)


def uint31(payload):
    """The 31-bit value after a reserved bit, at the payload's start (stream ids, increments)."""
    high = payload[0] & 0x7F
    return (high << 24) | (payload[1] << 16) | (payload[2] << 8) | payload[3]


def uint32(payload):
    high = payload[0]  # an unsigned long in the compiled build: shifted 24 bits, it must not overflow
    return (high << 24) | (payload[1] << 16) | (payload[2] << 8) | payload[3]


def settings_payload(payload):
    """§6.5.1: the ``(identifier, value)`` pairs of a SETTINGS frame, in order."""
    if len(payload) % 6:
        # §6.5: "A SETTINGS frame with a length other than a multiple of 6 octets MUST be
        # treated as a connection error of type FRAME_SIZE_ERROR."
        raise H2ConnectionError("SETTINGS payload of %d bytes" % len(payload), ErrorCode.FRAME_SIZE_ERROR)
    settings = []
    for pos in range(0, len(payload), 6):
        settings.append(((payload[pos] << 8) | payload[pos + 1], uint32(payload[pos + 2 : pos + 6])))
    return settings


def goaway_payload(payload):
    """§6.8: ``(last stream id, error code, additional debug data)``."""
    if len(payload) < 8:
        raise H2ConnectionError("GOAWAY payload of %d bytes" % len(payload), ErrorCode.FRAME_SIZE_ERROR)
    return uint31(payload), uint32(payload[4:8]), payload[8:]


# --- our frames ----------------------------------------------------------------------------------


def frame_header(length, frame_type, flags, stream_id):
    return _HEADER.pack(length >> 16, length & 0xFFFF, frame_type, flags, stream_id)


def frame(frame_type, flags, stream_id, payload):
    return _HEADER.pack(len(payload) >> 16, len(payload) & 0xFFFF, frame_type, flags, stream_id) + payload


def settings_frame(settings):
    """§6.5: SETTINGS with ``settings``, a list of (identifier, value); empty for the ACK."""
    payload = b"".join([struct.pack(">HL", identifier, value) for identifier, value in settings])
    return frame(SETTINGS, 0, 0, payload)


def window_update_frame(stream_id, increment):
    return frame_header(4, WINDOW_UPDATE, 0, stream_id) + struct.pack(">L", increment)


def rst_stream_frame(stream_id, error_code):
    return frame_header(4, RST_STREAM, 0, stream_id) + struct.pack(">L", error_code)


def ping_frame(opaque, ack):
    return frame(PING, ACK if ack else 0, 0, opaque)


def goaway_frame(last_stream_id, error_code, debug):
    return frame(GOAWAY, 0, 0, struct.pack(">LL", last_stream_id, error_code) + debug)


def headers_frames(stream_id, block, end_stream, max_frame_size, out):
    """§6.2/§6.10: a HEADERS frame and as many CONTINUATION frames as the block needs, onto
    ``out`` (a list of bytes). END_STREAM goes on HEADERS, END_HEADERS on the last frame."""
    flags = END_STREAM if end_stream else 0
    length = len(block)
    if length <= max_frame_size:
        out.append(frame_header(length, HEADERS, flags | END_HEADERS, stream_id))
        out.append(block)
        return
    out.append(frame_header(max_frame_size, HEADERS, flags, stream_id))
    out.append(block[:max_frame_size])
    pos = max_frame_size
    while pos < length:
        size = min(max_frame_size, length - pos)
        last = pos + size == length
        out.append(frame_header(size, CONTINUATION, END_HEADERS if last else 0, stream_id))
        out.append(block[pos : pos + size])
        pos += size

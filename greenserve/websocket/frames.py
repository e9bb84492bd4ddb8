"""Incremental, sans-I/O RFC 6455 frame codec, server side: client bytes in, message events out.

It never touches a socket, a clock or a thread, so every rule is tested with byte strings alone,
and it can be fed one byte at a time. Contract, after h11 and our HTTP parser::

    parser = FrameParser(max_message_size=16 * 1024 * 1024, inflater=None)
    parser.receive_data(data)          # any bytes-like object, any split; b"" means EOF
    event = parser.next_event()        # Message | Ping | Pong | Close | NEED_DATA

A ``Message`` is a whole data message (fragments joined, ``str`` for text, ``bytes`` for
binary); control frames are events of their own, delivered in the order they arrived, also
between the fragments of a message. Errors are raised as ``ProtocolError`` carrying the close
code to answer with (1002, 1007, 1009); after one, the parser raises it again on every call.
After a ``Close`` the parser reads nothing more: the peer may send no frame after its Close
(§5.5.1), so what follows is dropped and ``next_event`` says NEED_DATA. After EOF at a frame
boundary it says NEED_DATA too (the caller, who fed the EOF, knows: close code 1006); EOF in the
middle of a frame is a ``ProtocolError(1002)``.

Strictness: what RFC 6455 says an endpoint MUST fail the connection for, and also what it only
says a sender MUST NOT do where accepting it would let two readings of one stream differ
(a non-minimal length encoding, as our HTTP parser refuses an ambiguous head). Each rule is
quoted from the RFC above the line that enforces it.

Cost: per frame, the header is read from the buffer in place, the payload is unmasked once into
a new ``bytes`` object, straight from the buffer (``_MASKER.unmask``: C in the compiled build,
from ``_cframes``), and the buffer is cut once. A text message is decoded once, as it arrives (fail fast, §8.1); a binary message of
one frame is the unmasked payload itself, no further copy.
"""

import codecs
import struct
import sys

from greenserve._accel import compiled

# "Feed me": the same sentinel as the HTTP parser's, one for both sans-I/O codecs.
from greenserve.http.parser import NEED_DATA

__all__ = [
    "BINARY",
    "CLOSE",
    "CONTINUATION",
    "NEED_DATA",
    "PING",
    "PONG",
    "TEXT",
    "Close",
    "FrameParser",
    "Message",
    "Ping",
    "Pong",
    "ProtocolError",
    "close_payload",
    "frame",
    "mask",
]

# RFC 6455 §5.2:
#   Opcode:  4 bits
#   %x0 denotes a continuation frame
#   %x1 denotes a text frame
#   %x2 denotes a binary frame
#   %x3-7 are reserved for further non-control frames
#   %x8 denotes a connection close
#   %x9 denotes a ping
#   %xA denotes a pong
#   %xB-F are reserved for further control frames
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

# The first two bytes of a frame (RFC 6455 §5.2):
#   FIN (1) RSV1 (1) RSV2 (1) RSV3 (1) opcode (4) | MASK (1) Payload len (7)
_FIN = 0x80
_RSV1 = 0x40
_RSV2_RSV3 = 0x30
_OPCODE = 0x0F
_MASKED = 0x80
_LENGTH = 0x7F

# RFC 6455 §5.5: "All control frames MUST have a payload length of 125 bytes or less".
MAX_CONTROL_PAYLOAD = 125
# The largest payload a frame header may announce here: a buffer's largest size, less the
# longest header.
_MAX_FRAME_PAYLOAD = sys.maxsize - 14


class ProtocolError(Exception):
    """The peer broke RFC 6455: close the connection with ``code`` (1002 protocol error,
    1007 invalid UTF-8 in a text message or close reason, 1009 message too big)."""

    def __init__(self, code, reason):
        super().__init__(code, reason)
        self.code = code
        self.reason = reason  # short, ASCII: it goes into the Close frame we answer with

    def __str__(self):
        return "%d %s" % (self.code, self.reason)


# --- events --------------------------------------------------------------------------------------


class Message:
    """A whole data message: ``str`` for a text message, ``bytes`` for a binary one."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data

    def __eq__(self, other):
        return type(other) is Message and self.data == other.data

    def __repr__(self):
        return "Message(%r)" % (self.data,)


class Ping:
    __slots__ = ("payload",)

    def __init__(self, payload):
        self.payload = payload

    def __eq__(self, other):
        return type(other) is Ping and self.payload == other.payload

    def __repr__(self):
        return "Ping(%r)" % (self.payload,)


class Pong:
    __slots__ = ("payload",)

    def __init__(self, payload):
        self.payload = payload

    def __eq__(self, other):
        return type(other) is Pong and self.payload == other.payload

    def __repr__(self):
        return "Pong(%r)" % (self.payload,)


class Close:
    """The peer's Close: ``code`` is None when the frame had no body (RFC 6455 §7.1.5: the
    status is then 1005, a value never sent on the wire)."""

    __slots__ = ("code", "reason")

    def __init__(self, code, reason):
        self.code = code
        self.reason = reason

    def __eq__(self, other):
        return type(other) is Close and self.code == other.code and self.reason == other.reason

    def __repr__(self):
        return "Close(%r, %r)" % (self.code, self.reason)


# --- masking -------------------------------------------------------------------------------------


class _PyMasker:
    """The pure-Python build's masking: one XOR of two big integers, no loop per byte.

    RFC 6455 §5.3:
      Octet i of the transformed data ("transformed-octet-i") is the XOR of
      octet i of the original data ("original-octet-i") with octet at index
      i modulo 4 of the masking key ("masking-key-octet-j"):
        j                   = i MOD 4
        transformed-octet-i = original-octet-i XOR masking-key-octet-j

    The compiled build uses ``_cframes.Masker``, the same in C a word at a time; the parser picks
    one of the two once, at import (``greenserve._accel.compiled()``).
    """

    __slots__ = ()

    def unmask(self, buf, start, end):
        """The payload ``buf[start:end]`` unmasked with the key in the 4 bytes before it."""
        return self.mask(memoryview(buf)[start:end], buf[start - 4 : start])

    def mask(self, payload, key):
        if len(key) != 4:
            raise ValueError("a masking key is 4 bytes, not %d" % len(key))
        n = len(payload)
        if n == 0:
            return b""
        key = bytes(key)
        repeated = key * (n >> 2) + key[: n & 3]
        return (int.from_bytes(payload, "little") ^ int.from_bytes(repeated, "little")).to_bytes(n, "little")


if compiled():
    from greenserve.websocket._cframes import Masker
else:
    Masker = _PyMasker

# The build's masker; stateless, so one serves every parser.
_MASKER = Masker()


def mask(payload, key):
    """The payload (bytes-like) XOR the 4-byte key repeated, as bytes (RFC 6455 §5.3).

    Its own inverse: the parser unmasks with it, and tests mask client frames with it."""
    return _MASKER.mask(payload, key)


def _rotated(key, n):
    """The masking key for the payload from its byte ``n`` on (j = i MOD 4, §5.3)."""
    n &= 3
    return key[n:] + key[:n] if n else key


# --- close codes ---------------------------------------------------------------------------------


def _valid_close_code(code):
    """A status code an endpoint may put in a Close frame (RFC 6455 §7.4).

    §7.4.1 defines 1000-1003 and 1007-1011 (IANA has since registered 1012-1014); 1004 is
    reserved, and "1005 ... 1006 ... 1015 ... is a reserved value and MUST NOT be set as a
    status code in a Close control frame by an endpoint". §7.4.2: "Status codes in the range
    0-999 are not used"; the rest of 1000-2999 is for the protocol's own future use; 3000-3999
    are registered with IANA for libraries and frameworks, and 4000-4999 are for private use.
    """
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


# --- the parser ----------------------------------------------------------------------------------

_HEADER = 0  # waiting for (the rest of) a frame header
_PAYLOAD = 1  # the header is read; waiting for the rest of its payload
_CLOSED = 2  # the peer's Close was read: nothing more is read


def _extended_length(buf, length):
    """The payload length of a header whose 7 bits say 126 or 127 (``length``), read from the
    2 or 8 bytes after them (the caller checked that they are here); ProtocolError."""
    if length == 126:
        length = (buf[2] << 8) | buf[3]
        # "in all cases, the minimal number of bytes MUST be used to encode the length":
        # refused rather than read, as our HTTP parser refuses an ambiguous head.
        if length < 126:
            raise ProtocolError(1002, "payload length not in its shortest form")
        return length
    if buf[2] & 0x80:
        raise ProtocolError(1002, "64-bit payload length with its top bit set")
    length = 0
    for i in range(2, 10):
        length = (length << 8) | buf[i]
    if length < 65536:
        raise ProtocolError(1002, "payload length not in its shortest form")
    if length > _MAX_FRAME_PAYLOAD:
        # More than this process can buffer (and an index past the header must stay a valid
        # size): too big to process, whatever the limit.
        raise ProtocolError(1009, "frame of %d bytes" % length)
    return length


class FrameParser:
    """Server side: client frames MUST be masked (§5.1).

    ``max_message_size``: 0 = no limit. Over it (a frame header announcing it counts: fail
    before buffering) -> ProtocolError(1009). ``inflater``: None (RSV1 set is then a 1002) or a
    ``deflate.PerMessageDeflate``: a message whose first frame has RSV1 is passed whole to
    ``inflater.decompress(payload, max_message_size)`` (which raises ProtocolError(1009) itself).
    """

    __slots__ = (
        "max_message_size",
        "inflater",
        "_buf",
        "_state",
        "_eof",
        "_error",
        "_opcode",
        "_fin",
        "_key",
        "_remaining",
        "_message_opcode",
        "_compressed",
        "_message_size",
        "_parts",
        "_decoding",
        "_decoder",
    )

    def __init__(self, max_message_size=16 * 1024 * 1024, inflater=None):
        self.max_message_size = max_message_size
        self.inflater = inflater
        self._buf = bytearray()
        self._state = _HEADER
        self._eof = False
        self._error = None
        # The frame whose payload is being received (state _PAYLOAD).
        self._opcode = 0
        self._fin = False
        self._key = b""  # its masking key, turned to where the payload is read up to
        self._remaining = 0
        # The data message being received: its opcode (TEXT or BINARY; 0 between messages),
        # whether it is compressed (RSV1 on its first frame), its size so far and its parts.
        self._message_opcode = 0
        self._compressed = False
        self._message_size = 0
        self._parts = []
        self._decoding = False  # a text message's bytes are going through self._decoder
        self._decoder = None  # made at the first text message that needs it, then reset

    def receive_data(self, data):
        """Add bytes received from the peer (any split); ``b""`` means the peer closed (EOF)."""
        if not data:
            self._eof = True
        elif self._state != _CLOSED:
            self._buf += data

    def next_event(self):
        """The next event: Message, Ping, Pong, Close, or NEED_DATA; raises ProtocolError."""
        if self._error is not None:
            raise self._error
        try:
            return self._next_event()
        except ProtocolError as exc:
            self._error = exc
            self._buf.clear()
            raise

    def _next_event(self):
        while True:
            state = self._state
            if state == _HEADER:
                event = self._read_header()
            elif state == _PAYLOAD:
                event = self._read_payload()
            else:
                self._buf.clear()
                return NEED_DATA
            if event is not None:
                return event

    def _read_header(self):
        """In _HEADER: a whole frame's event, NEED_DATA, or None (a frame consumed without an
        event, or its header read and its payload still to come: go on)."""
        buf = self._buf
        size = len(buf)
        if size < 2:
            return self._need_data()
        first = buf[0]
        second = buf[1]
        opcode = first & _OPCODE
        fin = first & _FIN
        if opcode >= CLOSE:
            self._check_control_frame(opcode, first, second)
        else:
            self._check_data_frame(opcode, first)
        # RFC 6455 §5.1: "The server MUST close the connection upon receiving a frame
        # that is not masked. In this case, a server MAY send a Close frame with a
        # status code of 1002 (protocol error)".
        if not second & _MASKED:
            raise ProtocolError(1002, "client frame not masked")
        # RFC 6455 §5.2: "Payload length: 7 bits, 7+16 bits, or 7+64 bits. [...] If
        # 0-125, that is the payload length. If 126, the following 2 bytes interpreted
        # as a 16-bit unsigned integer are the payload length. If 127, the following 8
        # bytes interpreted as a 64-bit unsigned integer (the most significant bit MUST
        # be 0) are the payload length."
        length = second & _LENGTH
        if length < 126:
            header = 6
        else:
            header = 8 if length == 126 else 14
            if size < header - 4:  # the extended length is not all here
                return self._need_data()
            length = _extended_length(buf, length)
        message_size = length
        if opcode < CLOSE:
            # RFC 6455 §10.4: "Implementations that have implementation- and/or
            # platform-specific limitations regarding the frame size or total message
            # size after reassembly from multiple frames MUST protect themselves against
            # exceeding those limits." The length a header announces counts at once: a
            # message over the limit is refused before any of its payload is buffered.
            if opcode == CONTINUATION:
                message_size += self._message_size
            limit = self.max_message_size
            if limit and message_size > limit:
                raise ProtocolError(1009, "message over %d bytes" % limit)
        if size < header:
            return self._need_data()
        if opcode < CLOSE:
            if opcode != CONTINUATION:
                self._message_opcode = opcode
                self._compressed = (first & _RSV1) != 0
            self._message_size = message_size
        end = header + length
        if size >= end:
            # The whole frame is here (the usual case): one unmask, one cut.
            payload = _MASKER.unmask(buf, header, end)
            del buf[:end]
            return self._frame(opcode, fin, payload)
        self._key = bytes(buf[header - 4 : header])
        del buf[:header]
        self._opcode = opcode
        self._fin = fin
        self._remaining = length
        self._state = _PAYLOAD
        return None

    def _read_payload(self):
        """In _PAYLOAD: the frame's event once its payload is all here, NEED_DATA before, or None
        (the frame ended without an event: go on)."""
        buf = self._buf
        size = len(buf)
        remaining = self._remaining
        if size >= remaining:
            payload = _MASKER.mask(memoryview(buf)[:remaining], self._key)
            del buf[:remaining]
            self._state = _HEADER
            return self._frame(self._opcode, self._fin, payload)
        if size and self._opcode < CLOSE and self._message_opcode == TEXT and not self._compressed:
            # RFC 6455 §8.1: "When an endpoint is to interpret a byte stream as UTF-8
            # but finds that the byte stream is not, in fact, a valid UTF-8 stream, that
            # endpoint MUST _Fail the WebSocket Connection_." The part of a text frame
            # that is here is checked now, not when the rest arrives: a peer streaming
            # garbage is stopped at its first bad byte (Autobahn case 6.4, "fail fast").
            key = self._key
            self._decode(_MASKER.mask(buf, key), False)
            buf.clear()
            self._key = _rotated(key, size)
            self._remaining = remaining - size
        return self._need_data()

    def _need_data(self):
        if self._eof and (self._buf or self._state == _PAYLOAD):
            raise ProtocolError(1002, "connection closed mid-frame")
        return NEED_DATA

    def _check_control_frame(self, opcode, first, second):
        # RFC 6455 §5.2: "%xB-F are reserved for further control frames" and "If an unknown
        # opcode is received, the receiving endpoint MUST _Fail the WebSocket Connection_."
        if opcode > PONG:
            raise ProtocolError(1002, "reserved opcode 0x%X" % opcode)
        # RFC 6455 §5.2: "RSV1, RSV2, RSV3: 1 bit each. MUST be 0 unless an extension is
        # negotiated that defines meanings for non-zero values." RFC 7692 §6.1, the one such
        # extension we negotiate, sets RSV1 on data messages only: "An endpoint MUST NOT set the
        # "Per-Message Compressed" bit of control frames".
        if first & (_RSV1 | _RSV2_RSV3):
            raise ProtocolError(1002, "reserved bit set on a control frame")
        # RFC 6455 §5.5: "All control frames MUST have a payload length of 125 bytes or less
        # and MUST NOT be fragmented."
        if not first & _FIN:
            raise ProtocolError(1002, "fragmented control frame")
        if second & _LENGTH > MAX_CONTROL_PAYLOAD:
            raise ProtocolError(1002, "control frame payload over 125 bytes")

    def _check_data_frame(self, opcode, first):
        # RFC 6455 §5.2: "%x3-7 are reserved for further non-control frames".
        if opcode > BINARY:
            raise ProtocolError(1002, "reserved opcode 0x%X" % opcode)
        if first & _RSV2_RSV3:
            raise ProtocolError(1002, "reserved bit set (no extension defines it)")
        if opcode == CONTINUATION:
            # RFC 6455 §5.4: "A fragmented message consists of a single frame with the FIN bit
            # clear and an opcode other than 0, followed by zero or more frames with the FIN bit
            # clear and the opcode set to 0, and terminated by a single frame with the FIN bit
            # set and an opcode of 0."
            if not self._message_opcode:
                raise ProtocolError(1002, "continuation frame without a message to continue")
            # RFC 7692 §6.1: "An endpoint MUST NOT set the "Per-Message Compressed" bit of
            # [...] non-first fragments of a data message."
            if first & _RSV1:
                raise ProtocolError(1002, "RSV1 set on a continuation frame")
        # RFC 6455 §5.4: "The fragments of one message MUST NOT be interleaved between the
        # fragments of another message unless an extension has been negotiated that can
        # interpret the interleaving." None that we negotiate does.
        elif self._message_opcode:
            raise ProtocolError(1002, "new data frame inside a fragmented message")
        # RSV1 means "compressed" only where permessage-deflate was negotiated (RFC 7692 §6).
        elif first & _RSV1 and self.inflater is None:
            raise ProtocolError(1002, "reserved bit set (no extension defines it)")

    def _frame(self, opcode, fin, payload):
        """A whole frame, unmasked: its event, or None for a fragment that ends no message."""
        if opcode >= CLOSE:
            if opcode == PING:
                return Ping(payload)
            if opcode == PONG:
                return Pong(payload)
            return self._close(payload)
        message_opcode = self._message_opcode
        if self._compressed:
            self._parts.append(payload)
            if not fin:
                return None
            data = self.inflater.decompress(b"".join(self._parts), self.max_message_size)
            self._end_message()
            if message_opcode == TEXT:
                try:
                    return Message(data.decode("utf-8"))
                except UnicodeDecodeError:
                    raise ProtocolError(1007, "invalid UTF-8 in a text message") from None
            return Message(data)
        if message_opcode == TEXT:
            # RFC 6455 §5.6: "Note that a particular text frame might include a partial UTF-8
            # sequence; however, the whole message MUST contain valid UTF-8." Fragments go
            # through an incremental decoder, each checked as it comes (§8.1, fail fast).
            if fin and not self._decoding:
                self._end_message()
                try:
                    return Message(payload.decode("utf-8"))
                except UnicodeDecodeError:
                    raise ProtocolError(1007, "invalid UTF-8 in a text message") from None
            self._decode(payload, fin)
            if not fin:
                return None
            text = "".join(self._parts)
            self._end_message()
            return Message(text)
        if fin and not self._parts:
            self._end_message()
            return Message(payload)
        self._parts.append(payload)
        if not fin:
            return None
        data = b"".join(self._parts)
        self._end_message()
        return Message(data)

    def _decode(self, data, final):
        """Decode a piece of a text message into its parts; 1007 at the first invalid byte."""
        decoder = self._decoder
        if decoder is None:
            decoder = self._decoder = codecs.getincrementaldecoder("utf-8")("strict")
        if not self._decoding:
            decoder.reset()
            self._decoding = True
        try:
            text = decoder.decode(data, final)
        except UnicodeDecodeError:
            raise ProtocolError(1007, "invalid UTF-8 in a text message") from None
        if not final:
            # Python's decoder holds back ED A0..ED BF (the start of a UTF-16 surrogate, which
            # UTF-8 excludes: RFC 3629 §3) until a third byte arrives; no third byte can make
            # it valid, so fail now, as for every other impossible prefix.
            pending = decoder.getstate()[0]
            if len(pending) >= 2 and pending[0] == 0xED and pending[1] >= 0xA0:
                raise ProtocolError(1007, "invalid UTF-8 in a text message")
        if text:
            self._parts.append(text)

    def _end_message(self):
        self._message_opcode = 0
        self._compressed = False
        self._decoding = False
        self._parts = []

    def _close(self, payload):
        """The peer's Close frame: its code and reason, checked."""
        n = len(payload)
        # RFC 6455 §5.5.1: "If there is a body, the first two bytes of the body MUST be a
        # 2-byte unsigned integer (in network byte order) representing a status code": a body
        # of one byte is neither empty nor a code.
        if n == 0:
            code = None
            reason = ""
        elif n == 1:
            raise ProtocolError(1002, "close frame body of 1 byte")
        else:
            code = (payload[0] << 8) | payload[1]
            if not _valid_close_code(code):
                raise ProtocolError(1002, "invalid close code %d" % code)
            # RFC 6455 §5.5.1: "Following the 2-byte integer, the body MAY contain UTF-8-encoded
            # data with value /reason/"; §8.1 applies to it as to a text message.
            try:
                reason = payload[2:].decode("utf-8")
            except UnicodeDecodeError:
                raise ProtocolError(1007, "invalid UTF-8 in a close reason") from None
        # RFC 6455 §5.5.1: "The application MUST NOT send any more data frames after sending a
        # Close frame." Whatever follows is not read.
        self._state = _CLOSED
        self._buf.clear()
        return Close(code, reason)


# --- the sending side ----------------------------------------------------------------------------


def frame(opcode, payload, fin=True, rsv1=False):
    """One server frame (header and payload) as bytes, unmasked.

    RFC 6455 §5.1: "A server MUST NOT mask any frames that it sends to the client." The length
    takes its shortest encoding (§5.2: "the minimal number of bytes MUST be used").
    """
    n = len(payload)
    first = opcode | (_FIN if fin else 0) | (_RSV1 if rsv1 else 0)
    if opcode >= CLOSE and (n > MAX_CONTROL_PAYLOAD or not fin):
        raise ValueError("a control frame is unfragmented with at most 125 bytes of payload (RFC 6455 §5.5)")
    if n < 126:
        header = struct.pack("!BB", first, n)
    elif n < 65536:
        header = struct.pack("!BBH", first, 126, n)
    else:
        header = struct.pack("!BBQ", first, 127, n)
    return header + payload


def close_payload(code=None, reason=""):
    """The body of a Close frame: the code and the UTF-8 reason, or nothing for code None.

    The reason is cut, at a character boundary, to the 123 bytes a control frame leaves after
    the code (§5.5). Codes an endpoint may not send (1005, 1006, 1015, ..., see
    ``_valid_close_code``) are a ValueError: a strict client would fail the connection on them.
    """
    if code is None:
        if reason:
            raise ValueError("a close reason needs a close code (RFC 6455 §5.5.1)")
        return b""
    if not _valid_close_code(code):
        raise ValueError("%r is not a close code an endpoint may send (RFC 6455 §7.4)" % (code,))
    body = reason.encode("utf-8") if isinstance(reason, str) else bytes(reason)
    if len(body) > MAX_CONTROL_PAYLOAD - 2:
        body = body[: MAX_CONTROL_PAYLOAD - 2].decode("utf-8", "ignore").encode("utf-8")
    else:
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("a close reason is UTF-8 (RFC 6455 §5.5.1)") from None
    return struct.pack("!H", code) + body

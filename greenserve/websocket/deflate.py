"""permessage-deflate (RFC 7692): its negotiation in the opening handshake, and the compression
and decompression of each message once it is agreed.

Sans-I/O like ``frames.py``: strings and bytes in, bytes out, no socket. The handshake calls
``PerMessageDeflate.accept(offers_header)`` and answers with the value it returns; the frame
parser calls ``decompress`` with the whole payload of a message whose first frame had RSV1; the
WebSocket object calls ``compress`` for a message it sends and sets RSV1 on its first frame.

What it costs, and why greenserve answers what it answers
---------------------------------------------------------
zlib holds ``2 ** (wbits + 2) + 2 ** (memLevel + 9)`` bytes for a compressor and about
``2 ** wbits + 7 KiB`` for a decompressor (zlib's zconf.h). Measured in a subprocess over 1,000
objects each fed 140 KB (RSS; tracemalloc agrees, as CPython gives zlib its raw allocator):
262 KiB for a compressor of 15 bits and memLevel 8 (zlib's defaults), 39 KiB at 12 bits and
memLevel 5, 10 KiB at 9 bits and memLevel 1; 40 KiB for a decompressor of 15 bits, 12 KiB at
12 bits, 8.7 KiB at 9.

With context takeover a WebSocket holds its compressor and its decompressor for as long as it
is open, idle or not. To a browser's ``permessage-deflate; client_max_window_bits``, uvicorn
answers ``permessage-deflate`` (websockets' ``ServerPerMessageDeflateFactory()``) or
``permessage-deflate; client_max_window_bits=15`` (wsproto): takeover both ways at 15 bits,
about 300 KiB per WebSocket once both sides have spoken. websockets' own ``serve`` answers
``server_max_window_bits=12; client_max_window_bits=12`` with memLevel 5: about 51 KiB. Both
are far over greenserve's budget of 16 KiB per open WebSocket.

So greenserve always answers ``server_no_context_takeover; client_no_context_takeover`` (RFC
7692 §7.1.1 lets a server add both to any offer) and keeps no zlib state per WebSocket:

- Its messages are compressed by a compressor shared by the process: 144 KiB (15 bits,
  memLevel 5) once per worker, not per WebSocket. Each message ends with ``Z_FULL_FLUSH``,
  which empties the LZ77 window, so no message refers back to another, nor to another
  WebSocket's data: what server_no_context_takeover asks for. A new compressor per message
  would make the same bytes but allocate and clear its memory every time (5 to 34 us for a
  91-byte message, depending on whether malloc had given it back to the kernel, against 4 us).
- A client's message is inflated by a decompressor made for it and dropped after (about 1 us
  for a small message). Never one shared between WebSockets: a client that broke its promise
  and referred back past its message's start would read what the decompressor held before.

The price is paid by small messages: 91-byte JSON chat messages shrink to 85 % without context
takeover, to 12 % with it. That is why the WebSocket object sends messages under
``MIN_COMPRESSED_SIZE`` uncompressed (RSV1 "indicates whether a message is compressed or not",
RFC 7692 §6). From a few KiB up, context takeover hardly matters (4 KiB of JSON: 24.3 % against
22.2 %).

The level is zlib's fastest (1), as aiohttp's WebSocket compresses: 4 KiB of JSON in 29 us to
24 % of its size, 64 KiB in 0.33 ms to 22 %; the default level 6 takes 52 us to 21 % and
1.5 ms to 15 %. A worker's core serves all its WebSockets, so time counts more than bytes.
"""

import zlib

from greenserve.http.grammar import TCHAR
from greenserve.websocket.frames import ProtocolError

__all__ = ["EXTENSION_NAME", "MIN_COMPRESSED_SIZE", "PerMessageDeflate"]

# RFC 7692 §7: 'The registered extension name for this extension is "permessage-deflate".'
EXTENSION_NAME = "permessage-deflate"

# RFC 7692 §7.2.1: "Remove 4 octets (that are 0x00 0x00 0xff 0xff) from the tail end."
# RFC 7692 §7.2.2: "Append 4 octets of 0x00 0x00 0xff 0xff to the tail end of the payload of
# the message." (The header of an empty stored block, which a sync flush ends with.)
_TAIL = b"\x00\x00\xff\xff"

# RFC 7692 §7.1.2.1 / §7.1.2.2: the window bits are "a decimal integer value without leading
# zeroes between 8 to 15, inclusive". A compressor cannot use 8: zlib refuses a raw deflate
# stream of windowBits 8 since 1.2.9 (zlib.compressobj: "Invalid initialization option";
# madler/zlib#171), so an offer that asks the server for 8 is declined.
_WINDOW_BITS = {str(bits): bits for bits in range(8, 16)}
_MIN_COMPRESS_BITS = 9
_MAX_BITS = 15

# A client's message is inflated with the largest window, whatever the client said it would
# use: a larger window decodes a stream made with a smaller one, and the decompressor lives
# only while its message is inflated (zlib allocates its window at the first output).
_INFLATE_WBITS = -_MAX_BITS

_PARAMETERS = frozenset(
    (
        "server_no_context_takeover",
        "client_no_context_takeover",
        "server_max_window_bits",
        "client_max_window_bits",
    )
)

# Messages shorter than this are better sent uncompressed: without context takeover, 128 bytes
# of JSON shrink to 72 % (64 bytes to 90 %, 32 bytes not at all) for a few microseconds each.
# Node's ws leaves messages under 1 KiB uncompressed by default.
MIN_COMPRESSED_SIZE = 128

# zlib's fastest level (the module docstring has the measurements).
_LEVEL = zlib.Z_BEST_SPEED

# Idle shared compressors by window bits (see the module docstring). A list and not one
# object: pop() and append() are atomic, so two threads (an app's own) compressing at once
# each take a compressor of their own; greenlets never interleave inside compress().
_idle_compressors = {}


def _new_compressor(bits):
    # memLevel 5, as websockets' serve() has it: every full flush clears the hash table, 8 KiB
    # at memLevel 5 against 64 KiB at zlib's default 8, and the output was the same size for
    # 4 KiB and 64 KiB of JSON. Below 12 bits, less, so that the table has no more entries
    # than the window has bytes (zlib's own proportion: 15 bits, memLevel 8).
    return zlib.compressobj(_LEVEL, zlib.DEFLATED, -bits, min(5, bits - 7))


class PerMessageDeflate:
    """The agreed parameters of one WebSocket and its compression state.

    ``accept`` makes one from a client's offers; the constructor takes agreed parameters as
    they are. The client never uses context takeover (greenserve always answers
    client_no_context_takeover), so each client message is inflated on its own.
    ``server_no_context_takeover=False`` gives the WebSocket a compressor of its own that keeps
    its window between messages (RFC 7692 §7.2.3.2): smaller small messages, and its
    memory held per WebSocket (11 KiB at 9 bits, 39 KiB at 12). ``accept`` never agrees to it.
    """

    __slots__ = ("server_max_window_bits", "client_max_window_bits", "server_no_context_takeover", "_compressor")

    def __init__(self, server_max_window_bits=15, client_max_window_bits=15, server_no_context_takeover=True):
        if not _MIN_COMPRESS_BITS <= server_max_window_bits <= _MAX_BITS:
            raise ValueError("server_max_window_bits must be between 9 and 15, not %r" % server_max_window_bits)
        self.server_max_window_bits = server_max_window_bits
        self.client_max_window_bits = client_max_window_bits
        self.server_no_context_takeover = server_no_context_takeover
        self._compressor = None if server_no_context_takeover else _new_compressor(server_max_window_bits)

    def __repr__(self):
        return "PerMessageDeflate(server_max_window_bits=%d, client_max_window_bits=%d, %s)" % (
            self.server_max_window_bits,
            self.client_max_window_bits,
            "server_no_context_takeover=%r" % self.server_no_context_takeover,
        )

    @classmethod
    def accept(cls, offers_header, max_window_bits=15):
        """Answer the ``Sec-WebSocket-Extensions`` of a request: ``(instance, response value)``
        for its first acceptable permessage-deflate offer, or ``(None, None)``.

        ``offers_header`` is the field's value, several fields joined with ", " (RFC 9110
        §5.3). ``max_window_bits`` (9 to 15) bounds the server's LZ77 window, and the client's
        where its offer allows (it has ``client_max_window_bits``). An offer greenserve
        cannot accept is declined and the next one tried; a header that cannot be read at all
        declines them all: the handshake goes on without the extension, never an error.
        """
        if not _MIN_COMPRESS_BITS <= max_window_bits <= _MAX_BITS:
            raise ValueError("max_window_bits must be between 9 and 15, not %r" % max_window_bits)
        # RFC 7692 §5: "The order of elements is important as it specifies the client's
        # preference. An element preceding another element has higher preference. It is
        # recommended that a server accepts PMCEs with higher preference if the server
        # supports them." Names are compared as they are, as websockets compares them: RFC 7692
        # registers them in lower case, and an offer spelled otherwise is only declined.
        for name, params in _parse_extensions(offers_header or ""):
            if name == EXTENSION_NAME and params is not None:
                accepted = _accept_offer(params, max_window_bits)
                if accepted is not None:
                    return accepted
        return None, None

    def compress(self, data):
        """The payload of one whole message (bytes), to send with RSV1 on its first frame."""
        compressor = self._compressor
        if compressor is not None:
            # RFC 7692 §7.2.1: "If the resulting data does not end with an empty DEFLATE block
            # with no compression (the "BTYPE" bits are set to 00), append an empty DEFLATE
            # block with no compression to the tail end." A sync flush ends with one.
            return (compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH))[:-4]
        bits = self.server_max_window_bits
        idle = _idle_compressors.setdefault(bits, [])
        try:
            compressor = idle.pop()
        except IndexError:
            compressor = _new_compressor(bits)
        # RFC 7692 §7.2.1: "If the "agreed parameters" contain the "server_no_context_takeover"
        # extension parameter, the server MUST start compressing each new message with an empty
        # LZ77 sliding window." A full flush ends this message as a sync flush does (the same
        # empty stored block) and empties the window for the next one: zlib's manual, "the
        # compression state is reset so that decompression can restart from this point".
        payload = compressor.compress(data) + compressor.flush(zlib.Z_FULL_FLUSH)
        idle.append(compressor)
        return payload[:-4]

    def decompress(self, payload, max_size):
        """The whole message from its compressed payload (bytes, every frame's joined).

        Raises ``ProtocolError(1009)`` once the message inflates past ``max_size`` bytes (0: no
        limit), having inflated at most one byte more: a small payload that inflates to
        gigabytes (a "zip bomb") stops there. Raises ``ProtocolError(1002)`` for data that is
        not DEFLATE: the extension's framing is broken, which is a protocol error (RFC 6455
        §7.4.1: 1002 "due to a protocol error"; 1007 is for data "not consistent with the type
        of the message", as non-UTF-8 text, checked after inflating). websockets answers 1002
        too; Autobahn's cases 12 and 13 send no corrupt data.
        """
        # RFC 7692 §7.2.2: "Append 4 octets of 0x00 0x00 0xff 0xff to the tail end of the payload
        # of the message. Decompress the resulting data using DEFLATE." and "If the "agreed
        # parameters" contain the "client_no_context_takeover" extension parameter, the server
        # MAY decompress each new message with an empty LZ77 sliding window": a new
        # decompressor per message.
        data = payload + _TAIL
        limit = max_size + 1 if max_size else 0
        decompressor = zlib.decompressobj(_INFLATE_WBITS)
        parts = []
        size = 0
        window = b""
        while True:
            try:
                part = decompressor.decompress(data, limit - size if limit else 0)
            except zlib.error:
                raise ProtocolError(1002, "invalid compressed data") from None
            size += len(part)
            if limit and size >= limit:
                raise ProtocolError(1009, "message too big")
            parts.append(part)
            if not decompressor.eof:
                return b"".join(parts)
            # RFC 7692 §7.2.3.4: a sender may end a block with "BFINAL" set to 1, and §7.2.1:
            # "The next DEFLATE block follows the padded data if any." zlib's stream ends at
            # that block, so what follows is inflated by a new decompressor that starts from
            # the message's LZ77 window so far (the last 32 KiB of its output). A decompressor
            # gets all its data in one call, so ``part`` is all it produced.
            data = decompressor.unused_data
            window = (window + part)[-(1 << _MAX_BITS) :]
            decompressor = zlib.decompressobj(_INFLATE_WBITS, zdict=window)


def _accept_offer(params, max_window_bits):
    """The answer to one permessage-deflate offer: (instance, response value), or None to
    decline it."""
    # RFC 7692 §7: "A server MUST decline an extension negotiation offer for this extension if
    # any of the following conditions are met: The negotiation offer contains an extension
    # parameter not defined for use in an offer. The negotiation offer contains an extension
    # parameter with an invalid value. The negotiation offer contains multiple extension
    # parameters with the same name. The server doesn't support the offered configuration."
    offered = {}
    for name, value in params:
        if name not in _PARAMETERS or name in offered:
            return None
        offered[name] = value
    # RFC 7692 §7.1.1.1 / §7.1.1.2: the *_no_context_takeover parameters have no value.
    for name in ("server_no_context_takeover", "client_no_context_takeover"):
        if offered.get(name, None) is not None:
            return None
    # RFC 7692 §7.1.2.1: "A client MAY include the "server_max_window_bits" extension parameter
    # in an extension negotiation offer. This parameter has a decimal integer value without
    # leading zeroes between 8 to 15, inclusive [...]. A server accepts an extension negotiation
    # offer with this parameter by including the "server_max_window_bits" extension parameter
    # in the extension negotiation response to send back to the client with the same or smaller
    # value as the offer." and "A server declines an extension negotiation offer with this
    # parameter if the server doesn't support it."
    server_bits = max_window_bits
    if "server_max_window_bits" in offered:
        requested = _WINDOW_BITS.get(offered["server_max_window_bits"])
        if requested is None:
            return None
        server_bits = min(requested, max_window_bits)
        if server_bits < _MIN_COMPRESS_BITS:
            return None
    # RFC 7692 §7.1.2.2: "This parameter has no value or a decimal integer value without
    # leading zeroes between 8 to 15 inclusive indicating the base-2 logarithm of the LZ77
    # sliding window size." and "If a received extension negotiation offer doesn't have the
    # "client_max_window_bits" extension parameter, the corresponding extension negotiation
    # response to the offer MUST NOT include the "client_max_window_bits" extension parameter."
    client_bits = _MAX_BITS
    if "client_max_window_bits" in offered:
        value = offered["client_max_window_bits"]
        offered_bits = _MAX_BITS if value is None else _WINDOW_BITS.get(value)
        if offered_bits is None:
            return None
        client_bits = min(offered_bits, max_window_bits)
    # RFC 7692 §7.1.1.1: "A server MAY include the "server_no_context_takeover" extension
    # parameter in an extension negotiation response even if the extension negotiation offer
    # being accepted by the extension negotiation response didn't include [it]." §7.1.1.2: "A
    # server MAY include the "client_no_context_takeover" extension parameter in an extension
    # negotiation response." Both always: no zlib state is kept per WebSocket (module docstring).
    response = [EXTENSION_NAME, "server_no_context_takeover", "client_no_context_takeover"]
    # §7.1.2.1: "A server MAY include the "server_max_window_bits" extension parameter in an
    # extension negotiation response even if the extension negotiation offer being accepted by
    # the response didn't include the "server_max_window_bits" extension parameter."
    if "server_max_window_bits" in offered or server_bits < _MAX_BITS:
        response.append("server_max_window_bits=%d" % server_bits)
    # §7.1.2.2: "the server may either ignore this value or use this value to avoid allocating
    # an unnecessarily big LZ77 sliding window by including the "client_max_window_bits"
    # extension parameter in the corresponding extension negotiation response to the offer
    # with a value equal to or smaller than the received value."
    # Without it in the response the client may use 15 bits ("Absence of this extension
    # parameter in an extension negotiation response indicates that the server can receive
    # messages compressed using an LZ77 sliding window of up to 32,768 bytes").
    if client_bits < _MAX_BITS:
        response.append("client_max_window_bits=%d" % client_bits)
    return PerMessageDeflate(server_bits, client_bits), "; ".join(response)


def _parse_extensions(header):
    """The extensions of a ``Sec-WebSocket-Extensions`` value, in order: [(name, params)],
    params a list of (name, value or None), or None for an extension whose syntax is bad (it
    is declined, the others are still read). A header whose quotes do not close gives []."""
    # RFC 6455 §9.1:
    #   Sec-WebSocket-Extensions = extension-list
    #   extension-list = 1#extension
    #   extension = extension-token *( ";" extension-param )
    #   extension-token = registered-token
    #   registered-token = token
    #   extension-param = token [ "=" (token | quoted-string) ]
    #       ;When using the quoted-string syntax variant, the value
    #       ;after quoted-string unescaping MUST conform to the
    #       ;'token' ABNF.
    # A quoted value may hold "," and ";" (RFC 9110 §5.6.4), so the value is cut where they
    # stand outside quotes, not with str.split: a quoted "10, permessage-deflate" is one bad
    # value, not a second offer.
    extensions = []
    elements = []  # the ";"-separated elements of the extension being read
    start = 0
    quoted = escaped = False
    for i, char in enumerate(header):
        if quoted:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                quoted = False
        elif char == '"':
            quoted = True
        elif char == ";" or char == ",":
            elements.append(header[start:i])
            start = i + 1
            if char == ",":
                _add_extension(extensions, elements)
                elements = []
    if quoted:
        return []
    elements.append(header[start:])
    _add_extension(extensions, elements)
    return extensions


def _add_extension(extensions, elements):
    name = elements[0].strip(" \t")
    if len(elements) == 1 and not name:
        # RFC 9110 §5.6.1.2: "A recipient MUST parse and ignore a reasonable number of empty
        # list elements" (", ,"). The header is bounded by the HTTP parser's limits.
        return
    params = []
    for element in elements[1:]:
        param, equals, value = element.partition("=")
        param = param.strip(" \t")
        value = value.strip(" \t")
        if equals:
            if len(value) >= 2 and value[0] == '"' and value[-1] == '"':
                value = _unquote(value[1:-1])
            if not _is_token(value):
                params = None
                break
        else:
            value = None
        if not _is_token(param):
            params = None
            break
        params.append((param, value))
    extensions.append((name if _is_token(name) else None, params))


def _unquote(text):
    # RFC 9110 §5.6.4: quoted-pair = "\" ( HTAB / SP / VCHAR / obs-text ): the backslash goes,
    # the character after it stays.
    if "\\" not in text:
        return text
    chars = []
    escaped = False
    for char in text:
        if char == "\\" and not escaped:
            escaped = True
            continue
        escaped = False
        chars.append(char)
    return "".join(chars)


def _is_token(text):
    # RFC 9110 §5.6.2: token = 1*tchar. The header arrives as a WSGI-style latin-1 str.
    return bool(text) and text.isascii() and not text.encode("ascii").translate(None, TCHAR)

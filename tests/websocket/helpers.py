"""Byte-vector helpers for the frame codec: client frames built byte by byte, run three ways.

Like tests/http/helpers.py: every vector is fed whole, one byte at a time, and followed by the
first byte of another frame. A codec that decided differently depending on how TCP split the
stream would be one two peers can disagree with, so all three must give the same events and
the same error.
"""

import struct

from greenserve.websocket.frames import NEED_DATA, FrameParser, ProtocolError, mask

KEY = b"\x37\xfa\x21\x3d"  # RFC 6455 §5.7's example masking key

# The first byte of another frame: a valid stream followed by it must give the same events.
TRAILING = b"\x81"


def client_frame(opcode, payload=b"", fin=True, rsv=0, key=KEY, masked=True, length_form=None):
    """One client frame as a client sends it (masked), with every header field settable.

    ``rsv``: the RSV bits as a number 0-7 (4 = RSV1). ``length_form``: 7, 16 or 64 to encode the
    length in that form whatever its value (non-minimal encodings), or a raw 8-byte length field
    as bytes; None for the shortest form.
    """
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    n = len(payload)
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    mask_bit = 0x80 if masked else 0
    if length_form is None:
        length_form = 7 if n < 126 else 16 if n < 65536 else 64
    if isinstance(length_form, bytes):
        header = bytes((first, mask_bit | 127)) + length_form
    elif length_form == 7:
        header = bytes((first, mask_bit | n))
    elif length_form == 16:
        header = bytes((first, mask_bit | 126)) + struct.pack("!H", n)
    else:
        header = bytes((first, mask_bit | 127)) + struct.pack("!Q", n)
    if not masked:
        return header + payload
    return header + key + mask(payload, key)


def drain(parser):
    """The events the parser has now, up to NEED_DATA (not included)."""
    events = []
    while True:
        event = parser.next_event()
        if event is NEED_DATA:
            return events
        events.append(event)


def feed(pieces, **parser_options):
    """Feed ``pieces`` one after the other, draining events after each: ``(events, error)``.

    ``error`` is the ProtocolError raised, or None. After an error the parser must keep
    raising the same one, whatever it is fed.
    """
    parser = FrameParser(**parser_options)
    events = []
    for piece in pieces:
        parser.receive_data(piece)
        try:
            while (event := parser.next_event()) is not NEED_DATA:
                events.append(event)
        except ProtocolError as exc:
            for extra in (b"", client_frame(0x1, b"x")):
                parser.receive_data(extra)
                try:
                    parser.next_event()
                except ProtocolError as again:
                    assert again is exc
                else:
                    raise AssertionError("the parser went on after %r" % exc)
            return events, exc
    return events, None


def run(data, **parser_options):
    """Feed ``data`` whole, one byte at a time, and with TRAILING; all three must agree.

    Returns ``(events, code)``: ``code`` is the close code of the ProtocolError, or None.
    """
    outcomes = []
    for pieces in ([data], [data[i : i + 1] for i in range(len(data))], [data, TRAILING]):
        events, error = feed(pieces, **parser_options)
        outcomes.append((events, None if error is None else error.code))
    assert outcomes[0] == outcomes[1] == outcomes[2], outcomes
    return outcomes[0]


def events_of(data, **parser_options):
    """The events of a valid stream (run three ways); fails the test on a ProtocolError."""
    events, code = run(data, **parser_options)
    assert code is None, "refused with %s" % code
    return events


def refused(data, **parser_options):
    """The close code a stream is refused with (run three ways); fails the test if accepted."""
    events, code = run(data, **parser_options)
    assert code is not None, "accepted: %r" % events
    return code

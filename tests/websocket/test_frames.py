"""Byte vectors for the frame codec, grouped like the Autobahn testsuite's cases.

1 framing, 2 ping/pong, 3 reserved bits, 4 opcodes, 5 fragmentation, 6 UTF-8 handling,
7 close handling, 9 limits; then the sending side (``frame``, ``close_payload``, ``mask``) and
EOF. Every vector runs three ways (whole, one byte at a time, followed by the start of another
frame; ``helpers.run``) and must give the same events or the same close code. The Autobahn case
a test follows is named in its docstring.
"""

import struct
import zlib

import pytest

from greenserve.websocket.frames import (
    BINARY,
    CLOSE,
    CONTINUATION,
    NEED_DATA,
    PING,
    PONG,
    TEXT,
    Close,
    FrameParser,
    Message,
    Ping,
    Pong,
    ProtocolError,
    close_payload,
    frame,
    mask,
)

from tests.websocket.helpers import KEY, client_frame, drain, events_of, feed, refused, run

CLOSE_1000 = client_frame(CLOSE, close_payload(1000))


# === 1 framing ==================================================================================


@pytest.mark.parametrize("length", [0, 1, 125, 126, 127, 128, 65535, 65536, 300000])
def test_1_1_text_and_1_2_binary_messages_of_every_length_form(length):
    """1.1.1-1.1.6, 1.2.1-1.2.6: the 7-bit, 16-bit and 64-bit lengths at their edges."""
    text = "*" * length
    blob = bytes(range(256)) * (length // 256) + bytes(range(length % 256))
    data = client_frame(TEXT, text) + client_frame(BINARY, blob)
    if length <= 65536:
        assert events_of(data) == [Message(text), Message(blob)]
    else:  # byte-at-a-time over 600 KB is slow in the pure build; chops of 997 bytes (1.1.8)
        events, error = feed([data[i : i + 997] for i in range(0, len(data), 997)])
        assert error is None and events == [Message(text), Message(blob)]
    assert type(events_of(client_frame(TEXT, text))[0].data) is str
    assert type(events_of(client_frame(BINARY, blob))[0].data) is bytes


def test_1_1_7_a_frame_in_chops_gives_one_message():
    """1.1.7/1.1.8: a 65536-byte message sent in chops of 997 bytes."""
    data = client_frame(TEXT, "*" * 65536)
    events, error = feed([data[i : i + 997] for i in range(0, len(data), 997)])
    assert error is None and events == [Message("*" * 65536)]


def test_the_rfc_6455_5_7_examples():
    """RFC 6455 §5.7: "A single-frame masked text message" and a fragmented unmasked one
    (unmasked: refused from a client)."""
    assert events_of(b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58") == [Message("Hello")]
    assert refused(b"\x81\x05\x48\x65\x6c\x6c\x6f") == 1002


def test_a_client_frame_not_masked_is_refused_1002():
    """RFC 6455 §5.1: the server MUST close on a frame that is not masked."""
    for opcode in (TEXT, BINARY, PING, CLOSE):
        assert refused(client_frame(opcode, b"x", masked=False)) == 1002


@pytest.mark.parametrize(
    "length, form",
    [(0, 16), (125, 16), (125, 64), (65535, 64), (0, 64)],
)
def test_a_length_not_in_its_shortest_form_is_refused_1002(length, form):
    """RFC 6455 §5.2: "the minimal number of bytes MUST be used to encode the length"."""
    assert refused(client_frame(BINARY, b"a" * length, length_form=form)) == 1002


def test_a_64_bit_length_with_its_top_bit_set_is_refused_before_any_payload():
    """RFC 6455 §5.2: the most significant bit of a 64-bit length MUST be 0."""
    header = bytes((0x82, 0xFF)) + b"\x80" + b"\x00" * 7
    assert refused(header, max_message_size=0) == 1002


def test_the_mask_key_is_per_frame():
    data = client_frame(TEXT, "abc", key=b"\x00\x00\x00\x00") + client_frame(TEXT, "abc", key=b"\xff\x01\x80\x7f")
    assert events_of(data) == [Message("abc"), Message("abc")]


# === 2 ping/pong ================================================================================


def test_2_1_to_2_4_pings_with_payloads_up_to_125_bytes():
    """2.1 empty, 2.2 text payload, 2.3 binary payload, 2.4 125 bytes."""
    payloads = [b"", b"Hello, world!", b"\x00\xff\xfe\xfd\xfc\xfb\x00\xff", b"\xfe" * 125]
    data = b"".join(client_frame(PING, p) for p in payloads)
    assert events_of(data) == [Ping(p) for p in payloads]


def test_2_5_a_ping_of_126_bytes_is_refused_1002():
    assert refused(client_frame(PING, b"\xfe" * 126)) == 1002


@pytest.mark.parametrize("opcode", [PING, PONG, CLOSE])
def test_a_control_frame_over_125_bytes_is_refused_from_its_header(opcode):
    # The 16-bit length is not even waited for: the 7-bit field already says "over 125".
    assert refused(bytes((0x80 | opcode, 0x80 | 126))) == 1002


def test_2_7_to_2_9_pongs_unsolicited_or_not_are_events():
    """2.7 unsolicited pong, 2.8 with payload, 2.9 pong then ping."""
    data = client_frame(PONG) + client_frame(PONG, b"unsolicited") + client_frame(PING, b"ping")
    assert events_of(data) == [Pong(b""), Pong(b"unsolicited"), Ping(b"ping")]


def test_2_10_ten_pings_in_a_row_each_answered():
    """2.10/2.11: ten pings, each an event in order."""
    data = b"".join(client_frame(PING, b"payload-%d" % i) for i in range(10))
    assert events_of(data) == [Ping(b"payload-%d" % i) for i in range(10)]


# === 3 reserved bits ============================================================================


@pytest.mark.parametrize(
    "opcode, rsv",
    [(TEXT, 4), (TEXT, 2), (TEXT, 1), (TEXT, 5), (BINARY, 6), (PING, 6), (CLOSE, 7), (PONG, 4), (CONTINUATION, 1)],
)
def test_3_reserved_bits_without_an_extension_are_refused_1002(opcode, rsv):
    """3.1-3.7: RSV1, RSV2, RSV3 and mixes on text, binary, ping and close, after a valid frame
    (which is delivered before the error)."""
    data = client_frame(TEXT, "Hello, world!") + client_frame(opcode, b"x", rsv=rsv)
    events, code = run(data)
    assert events == [Message("Hello, world!")]
    assert code == 1002


class Inflater:
    """A permessage-deflate stand-in: raw DEFLATE, as RFC 7692 §7.2.2 has the receiver do it."""

    def __init__(self):
        self.calls = []

    def decompress(self, payload, max_size):
        self.calls.append((payload, max_size))
        data = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
        if max_size and len(data) > max_size:
            raise ProtocolError(1009, "message too big")
        return data


def deflate(data):
    compressor = zlib.compressobj(wbits=-15)
    out = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(b"\x00\x00\xff\xff")
    return out[:-4]  # RFC 7692 §7.2.1: the sender removes the last four octets


def test_rsv1_with_an_inflater_is_a_compressed_message_passed_whole():
    compressed = deflate("héllo wörld ".encode() * 20)
    half = len(compressed) // 2
    data = (
        client_frame(TEXT, compressed[:half], fin=False, rsv=4)
        + client_frame(PING, b"between")
        + client_frame(CONTINUATION, compressed[half:])
        + client_frame(BINARY, deflate(b"\x00\x01" * 50), rsv=4)
        + client_frame(BINARY, b"plain")
    )
    inflater = Inflater()
    parser = FrameParser(max_message_size=1000, inflater=inflater)
    parser.receive_data(data)
    assert drain(parser) == [
        Ping(b"between"),
        Message("héllo wörld " * 20),
        Message(b"\x00\x01" * 50),
        Message(b"plain"),
    ]
    assert inflater.calls == [(compressed, 1000), (deflate(b"\x00\x01" * 50), 1000)]
    assert events_of(data, inflater=Inflater())[1] == Message("héllo wörld " * 20)


def test_rsv1_with_an_inflater_still_refused_on_control_and_continuation_frames():
    """RFC 7692 §6.1: not on control frames, nor on non-first fragments."""
    assert refused(client_frame(PING, b"x", rsv=4), inflater=Inflater()) == 1002
    data = client_frame(TEXT, deflate(b"ab"), fin=False, rsv=4) + client_frame(CONTINUATION, b"", rsv=4)
    assert refused(data, inflater=Inflater()) == 1002
    assert refused(client_frame(TEXT, deflate(b"ab"), rsv=2), inflater=Inflater()) == 1002


def test_a_compressed_text_message_is_checked_as_utf8_after_inflating():
    assert refused(client_frame(TEXT, deflate(b"\xce\xba\xff"), rsv=4), inflater=Inflater()) == 1007


def test_the_inflaters_own_1009_comes_through():
    data = client_frame(BINARY, deflate(b"\x00" * 5000), rsv=4)
    assert refused(data, inflater=Inflater(), max_message_size=4000) == 1009


# === 4 opcodes ==================================================================================


@pytest.mark.parametrize("opcode", [3, 4, 5, 6, 7, 11, 12, 13, 14, 15])
def test_4_reserved_opcodes_are_refused_1002(opcode):
    """4.1.1-4.1.5 (non-control 3-7) and 4.2.1-4.2.5 (control 11-15), alone and after a valid
    frame, which is delivered first."""
    assert refused(client_frame(opcode)) == 1002
    events, code = run(client_frame(TEXT, "Hello") + client_frame(opcode, b"reserved") + client_frame(PING))
    assert events == [Message("Hello")] and code == 1002


# === 5 fragmentation ============================================================================


@pytest.mark.parametrize("opcode", [PING, PONG, CLOSE])
def test_5_1_5_2_fragmented_control_frames_are_refused_1002(opcode):
    data = client_frame(opcode, b"fragment1", fin=False) + client_frame(CONTINUATION, b"fragment2")
    assert refused(data) == 1002


def test_5_3_to_5_5_a_message_in_fragments_is_one_message():
    data = client_frame(TEXT, "fragment1", fin=False) + client_frame(CONTINUATION, "fragment2")
    assert events_of(data) == [Message("fragment1fragment2")]
    data = (
        client_frame(BINARY, b"a", fin=False)
        + client_frame(CONTINUATION, b"", fin=False)
        + client_frame(CONTINUATION, b"b", fin=False)
        + client_frame(CONTINUATION, b"c")
    )
    assert events_of(data) == [Message(b"abc")]


def test_5_6_to_5_8_control_frames_between_fragments_are_delivered_in_order():
    data = (
        client_frame(TEXT, "fragment1", fin=False)
        + client_frame(PING, b"ping")
        + client_frame(CONTINUATION, "fragment2", fin=False)
        + client_frame(PONG, b"pong")
        + client_frame(CONTINUATION, "fragment3")
        + client_frame(TEXT, "next")
    )
    assert events_of(data) == [Ping(b"ping"), Pong(b"pong"), Message("fragment1fragment2fragment3"), Message("next")]


def test_a_close_between_fragments_is_delivered_and_ends_reading():
    data = client_frame(TEXT, "frag", fin=False) + CLOSE_1000 + client_frame(CONTINUATION, "ment")
    assert events_of(data) == [Close(1000, "")]


@pytest.mark.parametrize("fin", [True, False])
def test_5_9_to_5_14_a_continuation_without_a_message_is_refused_1002(fin):
    assert refused(client_frame(CONTINUATION, "fragment", fin=fin)) == 1002
    # Also right after a message that ended (5.13/5.14 start with a whole message).
    data = client_frame(TEXT, "whole") + client_frame(CONTINUATION, "more", fin=fin)
    assert run(data) == ([Message("whole")], 1002)


@pytest.mark.parametrize("second", [TEXT, BINARY])
def test_5_15_to_5_20_a_new_data_frame_inside_a_fragmented_message_is_refused_1002(second):
    data = client_frame(TEXT, "fragment1", fin=False) + client_frame(PING) + client_frame(second, "fragment2")
    assert run(data) == ([Ping(b"")], 1002)


# === 6 UTF-8 handling ===========================================================================

# 6.2, 6.5-6.7, 6.9, 6.11, 6.22-6.23: valid text, up to the edges of the code space.
VALID_TEXT = [
    b"",
    b"Hello-\xc2\xb5@\xc3\x9f\xc3\xb6\xc3\xa4\xc3\xbc\xc3\xa0\xc3\xa1-UTF-8!!",
    b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5",  # κόσμε
    b"\x00",  # 6.7.1 first possible sequences of each length
    b"\xc2\x80",
    b"\xe0\xa0\x80",
    b"\xf0\x90\x80\x80",
    b"\x7f",  # 6.9 last possible sequences of each length
    b"\xdf\xbf",
    b"\xef\xbf\xbf",
    b"\xf4\x8f\xbf\xbf",
    b"\xed\x9f\xbf",  # 6.11 boundaries: before and after the surrogates, U+FFFD, U+10FFFF
    b"\xee\x80\x80",
    b"\xef\xbf\xbd",
    b"\xef\xbf\xbe",  # 6.22 noncharacters are valid UTF-8
    b"\xf0\x9f\xbf\xbe",
    b"\xf4\x8f\xbf\xbe",
    b"\xef\xbb\xbf",  # 6.23 a BOM is a character like any other
]

# 6.3, 6.8, 6.10, 6.12-6.21: invalid text.
INVALID_TEXT = [
    b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5\xed\xa0\x80edited",  # 6.3 a surrogate
    b"\xf8\x88\x80\x80\x80",  # 6.8 first impossible: 5 and 6 bytes
    b"\xfc\x84\x80\x80\x80\x80",
    b"\xf7\xbf\xbf\xbf",  # 6.10 last impossible
    b"\xfb\xbf\xbf\xbf\xbf",
    b"\xf4\x90\x80\x80",  # 6.11.5 past U+10FFFF
    b"\x80",  # 6.12 unexpected continuation bytes
    b"\xbf",
    b"\x80\xbf\x80",
    b"\xc0 ",  # 6.13 lonely start characters
    b"\xe0 ",
    b"\xf0 ",
    b"\xc0",  # 6.14 sequences with their last continuation byte missing
    b"\xe0\x80",
    b"\xf7\xbf\xbf",
    b"\xdf",
    b"\xef\xbf",
    b"\xc0\xe0\x80\xf0\x80\x80\xdf\xef\xbf\xf7\xbf\xbf",  # 6.15 concatenated incomplete
    b"\xfe",  # 6.16 impossible bytes
    b"\xff",
    b"\xfe\xfe\xff\xff",
    b"\xc0\xaf",  # 6.17 overlong ASCII
    b"\xe0\x80\xaf",
    b"\xf0\x80\x80\xaf",
    b"\xc1\xbf",  # 6.18 maximum overlong
    b"\xe0\x9f\xbf",
    b"\xf0\x8f\xbf\xbf",
    b"\xc0\x80",  # 6.19 overlong NUL
    b"\xe0\x80\x80",
    b"\xf0\x80\x80\x80",
    b"\xed\xa0\x80",  # 6.20 single UTF-16 surrogates
    b"\xed\xad\xbf",
    b"\xed\xae\x80",
    b"\xed\xaf\xbf",
    b"\xed\xb0\x80",
    b"\xed\xbe\x80",
    b"\xed\xbf\xbf",
    b"\xed\xa0\x80\xed\xb0\x80",  # 6.21 paired surrogates
    b"\xed\xaf\xbf\xed\xbf\xbf",
]


@pytest.mark.parametrize("text", VALID_TEXT)
def test_6_valid_utf8_is_a_text_message_whole_and_split_per_byte_into_fragments(text):
    assert events_of(client_frame(TEXT, text)) == [Message(text.decode("utf-8"))]
    # 6.6: the same text as one fragment per byte (sequences split across fragments).
    pieces = [text[i : i + 1] for i in range(len(text))] or [b""]
    data = b"".join(
        client_frame(TEXT if i == 0 else CONTINUATION, piece, fin=i == len(pieces) - 1)
        for i, piece in enumerate(pieces)
    )
    assert events_of(data) == [Message(text.decode("utf-8"))]


@pytest.mark.parametrize("text", INVALID_TEXT)
def test_6_invalid_utf8_is_refused_1007_whole_and_in_fragments(text):
    assert refused(client_frame(TEXT, text)) == 1007
    pieces = [text[i : i + 1] for i in range(len(text))]
    data = b"".join(
        client_frame(TEXT if i == 0 else CONTINUATION, piece, fin=i == len(pieces) - 1)
        for i, piece in enumerate(pieces)
    )
    assert refused(data) == 1007


def test_invalid_utf8_in_a_binary_message_is_just_bytes():
    assert events_of(client_frame(BINARY, b"\xff\xfe")) == [Message(b"\xff\xfe")]


KOSME = b"\xce\xba\xe1\xbd\xb9\xcf\x83\xce\xbc\xce\xb5"


def bytes_fed_until_refused(pieces):
    """Feed ``pieces`` one by one; how many had been fed when the 1007 came."""
    parser = FrameParser()
    for count, piece in enumerate(pieces, 1):
        parser.receive_data(piece)
        try:
            drain(parser)
        except ProtocolError as exc:
            assert exc.code == 1007
            return count
    raise AssertionError("never refused")


@pytest.mark.parametrize(
    "bad, fatal",
    [
        (b"\xf4\x90\x80\x80", 2),  # 6.4.1/6.4.3: past U+10FFFF, known at its second byte
        (b"\xed\xa0\x80", 2),  # 6.3.2: a surrogate, known at its second byte
        (b"\xc0\xaf", 1),  # overlong: C0 can start nothing
        (b"\x80", 1),
    ],
)
def test_6_4_fail_fast_inside_a_frame_and_across_fragments(bad, fatal):
    """6.3.2, 6.4.1-6.4.4: an invalid sequence in the middle of a text message is refused when
    its first impossible byte arrives, not when the message or the frame ends."""
    tail = b"edited"
    # 6.4.3/6.4.4: one frame, its bytes arriving one at a time.
    data = client_frame(TEXT, KOSME + bad + tail)
    header = len(data) - len(KOSME + bad + tail)
    pieces = [data[:header]] + [data[i : i + 1] for i in range(header, len(data))]
    assert bytes_fed_until_refused(pieces) == 1 + len(KOSME) + fatal
    # 6.4.1/6.4.2: three fragments, the bad one in the middle; the third is never needed.
    fragments = [
        client_frame(TEXT, KOSME, fin=False),
        client_frame(CONTINUATION, bad, fin=False),
        client_frame(CONTINUATION, tail),
    ]
    assert bytes_fed_until_refused(fragments) == 2
    # 6.4.2: the bad sequence split over the fragment boundary.
    fragments = [
        client_frame(TEXT, KOSME + bad[:1], fin=False),
        client_frame(CONTINUATION, bad[1:2], fin=False),
        client_frame(CONTINUATION, bad[2:] + tail),
    ]
    assert bytes_fed_until_refused(fragments) == fatal


def test_a_text_frame_arriving_in_pieces_with_a_sequence_split_across_them():
    text = "κόσμε €𝄞" * 50
    data = client_frame(TEXT, text, fin=False) + client_frame(CONTINUATION, text)
    events, error = feed([data[i : i + 7] for i in range(0, len(data), 7)])
    assert error is None and events == [Message(text * 2)]


# === 7 close handling ===========================================================================


def test_7_1_1_a_message_then_a_close():
    assert events_of(client_frame(TEXT, "Hello World!") + CLOSE_1000) == [Message("Hello World!"), Close(1000, "")]


def test_7_1_2_to_7_1_5_nothing_after_a_close_is_read():
    """7.1.2 a second close, 7.1.3 a ping, 7.1.4 a text message, 7.1.5 a fragment after close;
    and bytes that would be errors (the peer may send nothing more)."""
    after = [CLOSE_1000, client_frame(PING, b"x"), client_frame(TEXT, "x"), client_frame(TEXT, "x", fin=False),
             b"\xff\xff\xff\xff", client_frame(TEXT, b"\xff")]
    for extra in after:
        assert events_of(CLOSE_1000 + extra) == [Close(1000, "")]
    parser = FrameParser()
    parser.receive_data(CLOSE_1000)
    assert drain(parser) == [Close(1000, "")]
    parser.receive_data(b"\x00" * 100)
    assert parser.next_event() is NEED_DATA


def test_7_3_1_a_close_without_a_body_has_no_code():
    """RFC 6455 §7.1.5: no status code in the frame, the status is 1005 (never on the wire)."""
    assert events_of(client_frame(CLOSE)) == [Close(None, "")]


def test_7_3_2_a_close_body_of_1_byte_is_refused_1002():
    assert refused(client_frame(CLOSE, b"\x03")) == 1002


def test_7_3_3_to_7_3_5_a_close_with_a_code_and_a_reason():
    assert events_of(client_frame(CLOSE, b"\x03\xe8")) == [Close(1000, "")]
    assert events_of(client_frame(CLOSE, b"\x03\xe8Hello World!")) == [Close(1000, "Hello World!")]
    reason = "*" * 123
    assert events_of(client_frame(CLOSE, b"\x03\xe8" + reason.encode())) == [Close(1000, reason)]


def test_7_3_6_a_close_with_a_124_byte_reason_is_over_125_bytes_1002():
    assert refused(client_frame(CLOSE, b"\x03\xe8" + b"*" * 124)) == 1002


def test_7_5_1_a_close_reason_not_utf8_is_refused_1007():
    assert refused(client_frame(CLOSE, b"\x03\xe8" + KOSME + b"\xed\xa0\x80")) == 1007
    assert events_of(client_frame(CLOSE, b"\x03\xe8" + KOSME)) == [Close(1000, KOSME.decode())]


VALID_CODES = [1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014, 3000, 3999, 4000, 4999]
INVALID_CODES = [0, 999, 1004, 1005, 1006, 1015, 1016, 1100, 2000, 2999, 5000, 65535]


@pytest.mark.parametrize("code", VALID_CODES)
def test_7_7_valid_close_codes(code):
    assert events_of(client_frame(CLOSE, struct.pack("!H", code))) == [Close(code, "")]


@pytest.mark.parametrize("code", INVALID_CODES)
def test_7_9_and_7_13_invalid_close_codes_are_refused_1002(code):
    assert refused(client_frame(CLOSE, struct.pack("!H", code))) == 1002


# === 9 limits ===================================================================================


def test_9_a_frame_over_the_limit_is_refused_1009_from_its_header_alone():
    """RFC 6455 §10.4: the announced length counts, so nothing of the payload is buffered."""
    header = client_frame(BINARY, b"x" * 70000)[:14]  # the 64-bit header and the key, no payload
    parser = FrameParser(max_message_size=65536)
    parser.receive_data(header[:10])  # the length is known before the masking key arrives
    with pytest.raises(ProtocolError) as caught:
        parser.next_event()
    assert caught.value.code == 1009
    assert refused(header, max_message_size=65536) == 1009
    # Announced sizes up to 2**63 - 1 are a number like another: 1009, no overflow.
    assert refused(b"\x82\xff\x7f" + b"\xff" * 7 + KEY) == 1009


def test_9_the_limit_counts_a_message_summed_over_its_fragments():
    fragment = client_frame(BINARY, b"a" * 600, fin=False)
    at_limit = fragment + client_frame(CONTINUATION, b"b" * 400)
    assert events_of(at_limit, max_message_size=1000) == [Message(b"a" * 600 + b"b" * 400)]
    over = fragment + client_frame(PING) + client_frame(CONTINUATION, b"b" * 401)
    assert run(over, max_message_size=1000) == ([Ping(b"")], 1009)
    # The count starts again with each message.
    two = client_frame(TEXT, "x" * 1000) + client_frame(TEXT, "y" * 1000)
    assert events_of(two, max_message_size=1000) == [Message("x" * 1000), Message("y" * 1000)]


def test_9_control_frames_do_not_count_and_zero_means_no_limit():
    assert events_of(client_frame(PING, b"p" * 125), max_message_size=1) == [Ping(b"p" * 125)]
    assert events_of(client_frame(BINARY, b"z" * 70000), max_message_size=0) == [Message(b"z" * 70000)]


def test_the_default_limit_is_16_mib():
    assert FrameParser().max_message_size == 16 * 1024 * 1024
    assert refused(b"\x82\xff" + struct.pack("!Q", 16 * 1024 * 1024 + 1) + KEY) == 1009


# === EOF and errors =============================================================================


@pytest.mark.parametrize("cut", [1, 3, 6, 9])
def test_eof_in_the_middle_of_a_frame_is_refused_1002(cut):
    data = client_frame(TEXT, "hello")[:cut]
    events, error = feed([data, b""])
    assert events == [] and error.code == 1002 and error.reason == "connection closed mid-frame"


def test_eof_between_frames_is_need_data():
    parser = FrameParser()
    parser.receive_data(client_frame(TEXT, "hi"))
    parser.receive_data(b"")
    assert drain(parser) == [Message("hi")]
    assert parser.next_event() is NEED_DATA


def test_a_protocol_error_carries_its_code_and_reason():
    error = ProtocolError(1009, "message over 10 bytes")
    assert (error.code, error.reason, str(error)) == (1009, "message over 10 bytes", "1009 message over 10 bytes")


# === the sending side ===========================================================================


@pytest.mark.parametrize(
    "length, header",
    [(0, b"\x81\x00"), (125, b"\x81\x7d"), (126, b"\x81\x7e\x00\x7e"), (65535, b"\x81\x7e\xff\xff"),
     (65536, b"\x81\x7f\x00\x00\x00\x00\x00\x01\x00\x00")],
)
def test_frame_is_unmasked_with_the_shortest_length(length, header):
    payload = b"p" * length
    assert frame(TEXT, payload) == header + payload


def test_frame_bits():
    assert frame(BINARY, b"ab", fin=False) == b"\x02\x02ab"
    assert frame(TEXT, b"ab", rsv1=True) == b"\xc1\x02ab"
    assert frame(CONTINUATION, b"") == b"\x80\x00"
    assert frame(PONG, bytearray(b"x")) == b"\x8a\x01x"
    assert frame(CLOSE, close_payload(1001, "going away")) == b"\x88\x0c\x03\xe9going away"


def test_frame_refuses_control_frames_the_rfc_forbids():
    with pytest.raises(ValueError):
        frame(PING, b"x" * 126)
    with pytest.raises(ValueError):
        frame(PING, b"x", fin=False)


def test_close_payload():
    assert close_payload() == b""
    assert close_payload(1000) == b"\x03\xe8"
    assert close_payload(4000, "héllo") == b"\x0f\xa0" + "héllo".encode()
    assert close_payload(1000, b"bytes") == b"\x03\xe8bytes"
    # Cut to 123 bytes, at a character boundary: still valid UTF-8, still a control frame.
    body = close_payload(1000, "é" * 100)
    assert len(body) == 124 and body[2:].decode() == "é" * 61
    assert len(frame(CLOSE, close_payload(1000, "x" * 200))) == 2 + 125
    for code in INVALID_CODES:
        with pytest.raises(ValueError):
            close_payload(code)
    with pytest.raises(ValueError):
        close_payload(None, "a reason without a code")
    with pytest.raises(ValueError):
        close_payload(1000, b"\xff")


def test_a_close_payload_reads_back_as_the_same_close():
    for code, reason in [(None, ""), (1000, ""), (1011, "internal error"), (3000, "κόσμε")]:
        assert events_of(client_frame(CLOSE, close_payload(code, reason))) == [Close(code, reason)]


def test_mask_is_rfc_6455_5_3_and_its_own_inverse():
    assert mask(b"Hello", KEY) == b"\x7f\x9f\x4d\x51\x58"  # RFC 6455 §5.7
    data = bytes(range(256)) * 3 + b"tail"
    for n in range(0, 40):
        masked = mask(data[:n], KEY)
        assert len(masked) == n and type(masked) is bytes
        assert bytes(b ^ KEY[i % 4] for i, b in enumerate(data[:n])) == masked
        assert mask(masked, KEY) == data[:n]
    assert mask(bytearray(b"Hello"), KEY) == mask(memoryview(b"xHello")[1:], KEY) == b"\x7f\x9f\x4d\x51\x58"
    with pytest.raises(ValueError):
        mask(b"abc", b"abc")


def test_a_length_no_buffer_could_hold_is_1009_even_without_a_limit():
    assert refused(b"\x82\xff\x7f" + b"\xff" * 7 + KEY, max_message_size=0) == 1009

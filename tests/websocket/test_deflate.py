"""permessage-deflate (RFC 7692): negotiation vectors, the RFC's own byte examples, bounded
inflation, round trips, and interop with the ``websockets`` library's implementation (a strict
peer: its client factory checks our answer, its extension compresses and inflates our payloads).
"""

import os
import threading
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory
from websockets.extensions.permessage_deflate import PerMessageDeflate as WebsocketsDeflate
from websockets.frames import Frame, Opcode
from websockets.headers import build_extension, parse_extension

from greenserve.websocket import deflate
from greenserve.websocket.deflate import PerMessageDeflate
from greenserve.websocket.frames import BINARY, CONTINUATION, PING, TEXT, Message, Ping, ProtocolError

from tests.websocket.helpers import client_frame, events_of, refused

# What greenserve answers to any offer it accepts without window parameters.
DEFAULT_ANSWER = "permessage-deflate; server_no_context_takeover; client_no_context_takeover"


def accept(header, **options):
    instance, answer = PerMessageDeflate.accept(header, **options)
    assert (instance is None) == (answer is None)
    return instance, answer


# -- negotiation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "offer",
    [
        # Chromium (Chrome, Edge, Opera) and the websockets client's default offer.
        "permessage-deflate; client_max_window_bits",
        # Firefox.
        "permessage-deflate",
        # Whitespace is OWS around ";" and "=" (RFC 9110 §5.6.3).
        "permessage-deflate ;client_max_window_bits",
        "\tpermessage-deflate;  client_max_window_bits  ",
    ],
)
def test_browser_offers_get_no_context_takeover_both_ways(offer):
    instance, answer = accept(offer)
    assert answer == DEFAULT_ANSWER
    assert instance.server_no_context_takeover
    assert (instance.server_max_window_bits, instance.client_max_window_bits) == (15, 15)


def test_old_safari_deflate_frame_offer_is_declined():
    # Safari before permessage-deflate offered a pre-RFC extension of another name.
    assert accept("x-webkit-deflate-frame") == (None, None)


@pytest.mark.parametrize(
    "header", ["", None, "x-foo", "x-foo; a=1, x-bar", "permessage-deflate-x", "Permessage-Deflate"]
)
def test_no_permessage_deflate_offer_is_no_extension(header):
    assert accept(header) == (None, None)


def test_the_first_acceptable_offer_is_taken():
    # RFC 7692 §5: "An element preceding another element has higher preference."
    instance, answer = accept("permessage-deflate; server_max_window_bits=10, permessage-deflate")
    assert answer == DEFAULT_ANSWER + "; server_max_window_bits=10"
    assert instance.server_max_window_bits == 10


def test_an_other_extension_before_it_is_skipped():
    _, answer = accept("x-webkit-deflate-frame, permessage-deflate; client_max_window_bits")
    assert answer == DEFAULT_ANSWER


def test_several_header_fields_joined():
    # RFC 9110 §5.3: several fields of one name are one list, joined with ", ".
    _, answer = accept(", ".join(["x-foo", "permessage-deflate; server_max_window_bits=16", "permessage-deflate"]))
    assert answer == DEFAULT_ANSWER


@pytest.mark.parametrize(
    "bad_offer",
    [
        "permessage-deflate; unknown_parameter",  # not defined for use in an offer
        "permessage-deflate; server_no_context_takeover; server_no_context_takeover",  # duplicate
        "permessage-deflate; client_max_window_bits; client_max_window_bits=10",  # duplicate
        "permessage-deflate; server_no_context_takeover=1",  # the parameter has no value
        "permessage-deflate; client_no_context_takeover=true",
        "permessage-deflate; server_max_window_bits",  # a value is required
        "permessage-deflate; server_max_window_bits=16",  # 8 to 15
        "permessage-deflate; server_max_window_bits=7",
        "permessage-deflate; server_max_window_bits=015",  # "without leading zeroes"
        "permessage-deflate; client_max_window_bits=16",
        "permessage-deflate; client_max_window_bits=abc",
        "permessage-deflate; client_max_window_bits=",
        'permessage-deflate; client_max_window_bits=""',
        "permessage-deflate; client_max_window_bits=1 0",
        # zlib cannot compress with a 256-byte window: declined, not answered with 9.
        "permessage-deflate; server_max_window_bits=8",
        # Syntax: an empty parameter, a parameter name that is not a token.
        "permessage-deflate;",
        "permessage-deflate; ; client_max_window_bits",
        "permessage-deflate; client max window bits",
        "permessage-deflate; =10",
    ],
)
def test_a_bad_offer_is_declined_and_the_next_one_taken(bad_offer):
    # RFC 7692 §7: "A server MUST decline an extension negotiation offer for this extension if
    # [...]": declined, not a failed handshake.
    assert accept(bad_offer) == (None, None)
    _, answer = accept(bad_offer + ", permessage-deflate; server_max_window_bits=11")
    assert answer == DEFAULT_ANSWER + "; server_max_window_bits=11"


def test_a_quoted_value_is_unquoted():
    # RFC 6455 §9.1: the value may be a quoted-string whose content is a token.
    instance, answer = accept('permessage-deflate; server_max_window_bits="12"; client_max_window_bits="1\\0"')
    assert answer == DEFAULT_ANSWER + "; server_max_window_bits=12; client_max_window_bits=10"
    assert (instance.server_max_window_bits, instance.client_max_window_bits) == (12, 10)


def test_a_comma_inside_quotes_does_not_start_an_offer():
    # Split naively, this would be a bad offer, a good bare "permessage-deflate" and junk.
    assert accept('permessage-deflate; client_max_window_bits="10, permessage-deflate, x"') == (None, None)


def test_unbalanced_quotes_decline_everything():
    assert accept('permessage-deflate, x-foo; a="b, permessage-deflate') == (None, None)


def test_empty_list_elements_are_skipped():
    # RFC 9110 §5.6.1.2: "A recipient MUST parse and ignore a reasonable number of empty list
    # elements".
    _, answer = accept(" , ,permessage-deflate,")
    assert answer == DEFAULT_ANSWER


@pytest.mark.parametrize(
    "offer, max_window_bits, answer_params, bits",
    [
        # The server's window: the offer's value, bounded by ours, always answered when offered.
        ("server_max_window_bits=15", 15, "; server_max_window_bits=15", (15, 15)),
        ("server_max_window_bits=9", 15, "; server_max_window_bits=9", (9, 15)),
        ("server_max_window_bits=14", 10, "; server_max_window_bits=10", (10, 15)),
        # Ours below 15 is answered even when not offered (§7.1.2.1 allows it).
        ("", 12, "; server_max_window_bits=12", (12, 15)),
        # The client's: only where offered (§7.1.2.2: MUST NOT otherwise), at most its value.
        ("client_max_window_bits", 12, "; server_max_window_bits=12; client_max_window_bits=12", (12, 12)),
        ("client_max_window_bits=10", 12, "; server_max_window_bits=12; client_max_window_bits=10", (12, 10)),
        ("client_max_window_bits=10", 15, "; client_max_window_bits=10", (15, 10)),
        ("client_max_window_bits=15", 15, "", (15, 15)),
        ("client_max_window_bits=8", 15, "; client_max_window_bits=8", (15, 8)),
        ("server_no_context_takeover; client_no_context_takeover", 15, "", (15, 15)),
    ],
)
def test_window_bits(offer, max_window_bits, answer_params, bits):
    header = "permessage-deflate; " + offer if offer else "permessage-deflate"
    instance, answer = accept(header, max_window_bits=max_window_bits)
    assert answer == DEFAULT_ANSWER + answer_params
    assert (instance.server_max_window_bits, instance.client_max_window_bits) == bits


@pytest.mark.parametrize("max_window_bits", [8, 16, 0])
def test_max_window_bits_out_of_range_is_a_programming_error(max_window_bits):
    with pytest.raises(ValueError):
        PerMessageDeflate.accept("permessage-deflate", max_window_bits=max_window_bits)


@pytest.mark.parametrize(
    "client_options",
    [
        {},  # its default offer: "permessage-deflate; client_max_window_bits"
        {"client_max_window_bits": None},  # "permessage-deflate", as Firefox
        {"server_max_window_bits": 10, "client_max_window_bits": 11},
        {"server_no_context_takeover": True, "client_no_context_takeover": True},
    ],
)
def test_websockets_client_accepts_the_answer_and_both_ends_agree(client_options):
    # The strict client checks our answer against its offer (RFC 7692 §7.1), then each side's
    # compressed messages inflate on the other.
    factory = ClientPerMessageDeflateFactory(**client_options)
    offer = build_extension([(factory.name, factory.get_request_params())])
    ours, answer = accept(offer)
    [(name, params)] = parse_extension(answer)
    client = factory.process_response_params(params, [])
    assert client.remote_no_context_takeover and client.local_no_context_takeover
    for message in [b"Hello", b"x" * 5000, os.urandom(3000), b"", b"Hello"]:
        sent = client.encode(Frame(Opcode.BINARY, message))
        assert sent.rsv1
        assert ours.decompress(bytes(sent.data), 0) == message
        received = client.decode(Frame(Opcode.BINARY, ours.compress(message), rsv1=True))
        assert received.data == message


# -- RFC 7692 §7.2.3's examples ---------------------------------------------------------------

HELLO = bytes.fromhex("f248cdc9c90700")  # §7.2.3.1: 0xc1 0x07 0xf2 0x48 0xcd 0xc9 0xc9 0x07 0x00


def test_hello_compressed():
    assert PerMessageDeflate().compress(b"Hello") == HELLO
    assert PerMessageDeflate().decompress(HELLO, 0) == b"Hello"


def test_hello_fragmented():
    # §7.2.3.1: "0x41 0x03 0xf2 0x48 0xcd" then "0x80 0x04 0xc9 0xc9 0x07 0x00": the parser
    # joins the fragments' payloads before inflating.
    assert PerMessageDeflate().decompress(bytes.fromhex("f248cd") + bytes.fromhex("c9c90700"), 0) == b"Hello"


def test_hello_twice_without_context_takeover():
    # §7.2.3.2: "0xc1 0x07 0xf2 0x48 0xcd 0xc9 0xc9 0x07 0x00" both times when the window is
    # not taken over, which greenserve always agrees. The shared compressor starts afresh.
    server = PerMessageDeflate()
    assert [server.compress(b"Hello"), PerMessageDeflate().compress(b"Hello"), server.compress(b"Hello")] == [HELLO] * 3


def test_hello_twice_with_context_takeover():
    # §7.2.3.2: "the second message [...] 0xc1 0x05 0xf2 0x00 0x11 0x00 0x00".
    server = PerMessageDeflate(server_no_context_takeover=False)
    assert server.compress(b"Hello") == HELLO
    assert server.compress(b"Hello") == bytes.fromhex("f200110000")
    # A takeover compressor is the WebSocket's own: the shared one is untouched by it.
    assert PerMessageDeflate().compress(b"Hello") == HELLO


def test_hello_in_a_stored_block():
    # §7.2.3.3: "0xc1 0x0b 0x00 0x05 0x00 0xfa 0xff 0x48 0x65 0x6c 0x6c 0x6f 0x00"
    assert PerMessageDeflate().decompress(bytes.fromhex("000500faff48656c6c6f00"), 0) == b"Hello"


def test_hello_in_a_block_with_bfinal():
    # §7.2.3.4: "0xc1 0x08 0xf3 0x48 0xcd 0xc9 0xc9 0x07 0x00 0x00"
    inflater = PerMessageDeflate()
    assert inflater.decompress(bytes.fromhex("f348cdc9c9070000"), 0) == b"Hello"
    assert inflater.decompress(bytes.fromhex("f348cdc9c90700"), 0) == b"Hello"  # no padding block
    assert inflater.decompress(HELLO, 0) == b"Hello"  # and the next message is not poisoned


def test_hello_in_two_blocks():
    # §7.2.3.5: "0xc1 0x0d 0xf2 0x48 0x05 0x00 0x00 0x00 0xff 0xff 0xca 0xc9 0xc9 0x07 0x00"
    assert PerMessageDeflate().decompress(bytes.fromhex("f24805000000ffffcac9c90700"), 0) == b"Hello"


def test_blocks_after_a_bfinal_block_may_refer_back_to_it():
    # §7.2.1: "The next DEFLATE block follows the padded data if any." The LZ77 window is the
    # message's, across the final block: the second half is mostly back-references.
    text = b"context takeover " * 40
    first = zlib.compressobj(6, zlib.DEFLATED, -15)
    final_block = first.compress(text) + first.flush(zlib.Z_FINISH)
    second = zlib.compressobj(6, zlib.DEFLATED, -15, zdict=text)
    rest = (second.compress(text) + second.flush(zlib.Z_SYNC_FLUSH))[:-4]
    assert len(rest) < 20
    assert PerMessageDeflate().decompress(final_block + rest, 0) == text * 2


def test_the_empty_message():
    # §7.2.3.6 sends an empty DEFLATE block with no compression as "0x00": the 0x00 0x00 0xff
    # 0xff of a sync flush with nothing before it, tail removed.
    for server in (PerMessageDeflate(), PerMessageDeflate(server_no_context_takeover=False)):
        assert server.compress(b"") == b"\x00"
        assert server.compress(b"") == b"\x00"  # two flushes in a row still make the block
    assert PerMessageDeflate().decompress(b"\x00", 0) == b""
    # Nothing at all, which no compressor makes, is an empty message too.
    assert PerMessageDeflate().decompress(b"", 0) == b""


# -- limits and corrupt data ------------------------------------------------------------------


def bomb(size):
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return (compressor.compress(b"\x00" * size) + compressor.flush(zlib.Z_SYNC_FLUSH))[:-4]


def test_a_zip_bomb_stops_at_the_limit():
    payload = bomb(50_000_000)  # about 48 KB of payload for 50 MB of zeros
    assert len(payload) < 60_000
    with pytest.raises(ProtocolError) as caught:
        PerMessageDeflate().decompress(payload, 1_000_000)
    assert caught.value.code == 1009


def test_a_zip_bomb_inflates_at_most_one_byte_past_the_limit(monkeypatch):
    produced = []
    real_decompressobj = zlib.decompressobj

    class Counting:
        def __init__(self, *args, **kwargs):
            self._inner = real_decompressobj(*args, **kwargs)

        def decompress(self, data, max_length=0):
            out = self._inner.decompress(data, max_length)
            produced.append(len(out))
            return out

        def __getattr__(self, name):
            return getattr(self._inner, name)

    monkeypatch.setattr(deflate.zlib, "decompressobj", Counting)
    with pytest.raises(ProtocolError):
        PerMessageDeflate().decompress(bomb(10_000_000), 65_536)
    assert sum(produced) == 65_537


@pytest.mark.parametrize("size", [2, 1000, 65_536])
def test_the_limit_is_the_inflated_size_exactly(size):
    payload = PerMessageDeflate().compress(b"a" * size)
    assert PerMessageDeflate().decompress(payload, size) == b"a" * size
    assert PerMessageDeflate().decompress(payload, 0) == b"a" * size  # 0: no limit
    with pytest.raises(ProtocolError) as caught:
        PerMessageDeflate().decompress(payload, size - 1)
    assert caught.value.code == 1009


def test_the_limit_counts_the_blocks_after_a_final_block():
    first = zlib.compressobj(6, zlib.DEFLATED, -15)
    payload = first.compress(b"a" * 600) + first.flush(zlib.Z_FINISH) + PerMessageDeflate().compress(b"b" * 600)
    assert PerMessageDeflate().decompress(payload, 1200) == b"a" * 600 + b"b" * 600
    with pytest.raises(ProtocolError) as caught:
        PerMessageDeflate().decompress(payload, 1199)
    assert caught.value.code == 1009


@pytest.mark.parametrize(
    "payload",
    [
        b"\xff\xff\xff\xff",  # BTYPE 11: reserved (RFC 1951 §3.2.3)
        bytes.fromhex("000500fbff48656c6c6f00"),  # stored block whose NLEN is not LEN's complement
        # A back-reference before the start of the message: what a client that takes its window
        # over, against our client_no_context_takeover, would send ("invalid distance too far").
        bytes.fromhex("f200110000"),
    ],
)
def test_corrupt_data_is_a_protocol_error(payload):
    with pytest.raises(ProtocolError) as caught:
        PerMessageDeflate().decompress(payload, 0)
    assert caught.value.code == 1002


# -- round trips --------------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=5000) | st.text(max_size=2000).map(str.encode), min_size=1, max_size=6))
def test_round_trip(messages):
    server, client_side = PerMessageDeflate(), PerMessageDeflate()
    for message in messages:
        payload = server.compress(message)
        # Each message inflates on its own, with an empty window: no back-reference to the
        # previous one (which the shared compressor just compressed).
        assert zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff") == message
        assert client_side.decompress(payload, len(message)) == message


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=3000), min_size=1, max_size=6), st.integers(9, 15))
def test_round_trip_with_context_takeover_and_websockets(messages, bits):
    # Our takeover compressor against websockets' decoder, which keeps its window.
    server = PerMessageDeflate(server_max_window_bits=bits, server_no_context_takeover=False)
    client = WebsocketsDeflate(False, True, bits, 15)
    for message in messages:
        assert client.decode(Frame(Opcode.BINARY, server.compress(message), rsv1=True)).data == message


def test_no_context_takeover_costs_size_on_repeats():
    message = os.urandom(500).hex().encode()
    shared, own = PerMessageDeflate(), PerMessageDeflate(server_no_context_takeover=False)
    assert len(shared.compress(message)) == len(shared.compress(message)) > 500
    own.compress(message)
    assert len(own.compress(message)) < 20


def test_threads_compressing_at_once_each_take_a_compressor():
    messages = [os.urandom(200).hex().encode() * 20 for _ in range(8)]
    errors = []

    def work(message):
        server = PerMessageDeflate()
        for _ in range(200):
            if zlib.decompressobj(-15).decompress(server.compress(message) + b"\x00\x00\xff\xff") != message:
                errors.append(message)

    threads = [threading.Thread(target=work, args=(m,)) for m in messages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_websockets_decoder_reads_our_shared_compressor():
    # The client side as negotiated: a new inflater per message (remote_no_context_takeover).
    client = WebsocketsDeflate(True, True, 15, 15)
    server = PerMessageDeflate()
    for message in [b"Hello", b"Hello", b"", os.urandom(70_000), b"Hello" * 1000]:
        assert client.decode(Frame(Opcode.BINARY, server.compress(message), rsv1=True)).data == message


# -- with the frame parser ------------------------------------------------------------------------


def test_the_parser_inflates_a_fragmented_masked_message():
    # RFC 7692 §7.2.3.1's fragmented "Hello" (0x41 0x03 0xf2 0x48 0xcd, 0x80 0x04 0xc9 0xc9 0x07
    # 0x00), masked as a client sends it, a ping between the fragments; every split of the bytes.
    data = (
        client_frame(TEXT, bytes.fromhex("f248cd"), fin=False, rsv=4)
        + client_frame(PING, b"between")
        + client_frame(CONTINUATION, bytes.fromhex("c9c90700"))
    )
    assert data[:2] == b"\x41\x83"
    assert events_of(data, inflater=PerMessageDeflate()) == [Ping(b"between"), Message("Hello")]


def test_the_parser_inflates_our_own_messages_in_three_fragments():
    text = "héllo wörld, " * 300
    payload = PerMessageDeflate().compress(text.encode())
    third = len(payload) // 3
    data = (
        client_frame(TEXT, payload[:third], fin=False, rsv=4)
        + client_frame(CONTINUATION, payload[third : 2 * third], fin=False)
        + client_frame(CONTINUATION, payload[2 * third :])
        + client_frame(BINARY, b"plain")  # a message without RSV1 is not inflated
        + client_frame(BINARY, PerMessageDeflate().compress(b"\x00\xff" * 100), rsv=4)
    )
    expected = [Message(text), Message(b"plain"), Message(b"\x00\xff" * 100)]
    assert events_of(data, inflater=PerMessageDeflate()) == expected


def test_the_parsers_limit_applies_to_the_inflated_size():
    payload = PerMessageDeflate().compress(b"a" * 100_000)
    assert len(payload) < 1000
    data = client_frame(BINARY, payload[:50], fin=False, rsv=4) + client_frame(CONTINUATION, payload[50:])
    assert refused(data, inflater=PerMessageDeflate(), max_message_size=99_999) == 1009
    assert events_of(data, inflater=PerMessageDeflate(), max_message_size=100_000) == [Message(b"a" * 100_000)]


def test_the_parser_closes_corrupt_compressed_data_with_1002():
    assert refused(client_frame(BINARY, b"\xff\xff", rsv=4), inflater=PerMessageDeflate()) == 1002


def test_the_parser_checks_inflated_text_is_utf8():
    payload = PerMessageDeflate().compress(b"valid until \xff")
    assert refused(client_frame(TEXT, payload, rsv=4), inflater=PerMessageDeflate()) == 1007

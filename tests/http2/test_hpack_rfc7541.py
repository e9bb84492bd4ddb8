"""RFC 7541 Appendix C, every example, through our decoder (fields and the dynamic table after
each block) and our encoder (its blocks decode back, by our decoder and by the hpack
library's); Appendix C.1's integers; the decoder's refusals (§4.2, §5.1, §5.2, §6.1, §6.3)
and its limits against HPACK bombs; and Huffman (§5.2, Appendix B).
"""

import random

import hpack
import pytest
from hpack.huffman_constants import REQUEST_CODES, REQUEST_CODES_LENGTH

from greenserve.http2 import huffman
from greenserve.http2.errors import HeaderListTooLarge, HPACKError
from greenserve.http2.hpack import STATIC_TABLE, Decoder, Encoder, encode_integer

DATE1 = b"Mon, 21 Oct 2013 20:13:21 GMT"
DATE2 = b"Mon, 21 Oct 2013 20:13:22 GMT"
COOKIE = b"foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"
LOCATION = b"https://www.example.com"

REQUESTS = [  # C.3 / C.4: (fields, the dynamic table after the block, newest first)
    ([(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com")],
     [(b":authority", b"www.example.com")]),
    ([(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"www.example.com"),
      (b"cache-control", b"no-cache")],
     [(b"cache-control", b"no-cache"), (b":authority", b"www.example.com")]),
    ([(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/index.html"), (b":authority", b"www.example.com"),
      (b"custom-key", b"custom-value")],
     [(b"custom-key", b"custom-value"), (b"cache-control", b"no-cache"), (b":authority", b"www.example.com")]),
]
RESPONSES = [  # C.5 / C.6, with a 256-byte table
    ([(b":status", b"302"), (b"cache-control", b"private"), (b"date", DATE1), (b"location", LOCATION)],
     [(b"location", LOCATION), (b"date", DATE1), (b"cache-control", b"private"), (b":status", b"302")]),
    ([(b":status", b"307"), (b"cache-control", b"private"), (b"date", DATE1), (b"location", LOCATION)],
     [(b":status", b"307"), (b"location", LOCATION), (b"date", DATE1), (b"cache-control", b"private")]),
    ([(b":status", b"200"), (b"cache-control", b"private"), (b"date", DATE2), (b"location", LOCATION),
      (b"content-encoding", b"gzip"), (b"set-cookie", COOKIE)],
     [(b"set-cookie", COOKIE), (b"content-encoding", b"gzip"), (b"date", DATE2)]),
]
VECTORS = {
    "C.3": (4096, REQUESTS, [
        "828684410f7777772e6578616d706c652e636f6d",
        "828684be58086e6f2d6361636865",
        "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
    ]),
    "C.4": (4096, REQUESTS, [
        "828684418cf1e3c2e5f23a6ba0ab90f4ff",
        "828684be5886a8eb10649cbf",
        "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
    ]),
    "C.5": (256, RESPONSES, [
        "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d54"
        "6e1768747470733a2f2f7777772e6578616d706c652e636f6d",
        "4803333037c1c0bf",
        "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f3d"
        "4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b20766572"
        "73696f6e3d31",
    ]),
    "C.6": (256, RESPONSES, [
        "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b"
        "97c8e9ae82ae43d3",
        "4883640effc1c0bf",
        "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdf"
        "cd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
    ]),
}


def table_of(decoder):
    return decoder.entries()


@pytest.mark.parametrize("section", sorted(VECTORS))
def test_appendix_c_blocks_decode_to_their_fields_and_tables(section):
    table_size, messages, blocks = VECTORS[section]
    decoder = Decoder()
    decoder.max_table_size = table_size  # the examples' tables are this size from the start
    for (fields, table), hex_block in zip(messages, blocks):
        assert decoder.decode(bytes.fromhex(hex_block)) == fields
        assert table_of(decoder) == table
        assert decoder.table_size == sum(len(n) + len(v) + 32 for n, v in table)


@pytest.mark.parametrize("section", sorted(VECTORS))
def test_appendix_c_fields_encode_to_blocks_both_decoders_read(section):
    table_size, messages, blocks = VECTORS[section]
    encoder = Encoder()
    encoder.set_max_table_size(table_size)
    ours = Decoder(max_allowed_table_size=4096)
    theirs = hpack.Decoder()
    for (fields, table), hex_block in zip(messages, blocks):
        block = encoder.encode(fields)
        assert ours.decode(block) == fields
        assert theirs.decode(block, raw=True) == fields
        assert len(block) <= len(bytes.fromhex(hex_block)) + 40  # no worse than the RFC's choices, roughly
    assert encoder.table_size <= table_size


def test_c_2_literal_field_representations():
    decoder = Decoder()
    # C.2.1 literal with indexing
    assert decoder.decode(bytes.fromhex("400a637573746f6d2d6b65790d637573746f6d2d686561646572")) == [
        (b"custom-key", b"custom-header")]
    assert table_of(decoder) == [(b"custom-key", b"custom-header")] and decoder.table_size == 55
    # C.2.2 literal without indexing, C.2.3 never indexed: the table is unchanged
    assert decoder.decode(bytes.fromhex("040c2f73616d706c652f70617468")) == [(b":path", b"/sample/path")]
    assert decoder.never_indexed is None
    assert decoder.decode(bytes.fromhex("100870617373776f726406736563726574")) == [(b"password", b"secret")]
    assert decoder.never_indexed == [b"password"]
    assert decoder.table_size == 55
    # C.2.4 indexed
    assert decoder.decode(b"\x82") == [(b":method", b"GET")]


@pytest.mark.parametrize("value, prefix, encoded", [(10, 5, "0a"), (1337, 5, "1f9a0a"), (42, 8, "2a"), (31, 5, "1f00"),
                                                    (0, 5, "00"), (4096, 5, "1fe11f"), (2**28, 7, "7f81ffff7f")])
def test_c_1_integers(value, prefix, encoded):
    out = bytearray()
    encode_integer(value, prefix, 0, out)
    assert out.hex() == encoded
    if prefix == 5 and value <= 4096:
        # As a dynamic table size update (§6.3): read back by the decoder.
        decoder = Decoder()
        decoder.decode(bytes([0x20 | out[0]]) + bytes(out[1:]))
        assert decoder.max_table_size == value


def test_never_indexed_fields_are_sent_as_such_and_not_added_to_the_table():
    encoder = Encoder()
    block = encoder.encode([(b"authorization", b"secret", True), (b"x-token", b"t", True), (b"x", b"y")])
    decoder = hpack.Decoder()
    fields = decoder.decode(block, raw=True)
    assert [type(f).__name__ for f in fields] == ["NeverIndexedHeaderTuple", "NeverIndexedHeaderTuple", "HeaderTuple"]
    assert encoder.table_size == len(b"xy") + 32
    # A sensitive value already in the table is still sent literally.
    block = encoder.encode([(b"x", b"y", True)])
    assert block[0] & 0xF0 == 0x10


# --- refusals ------------------------------------------------------------------------------------

BAD_BLOCKS = {
    "index 0 (§6.1)": b"\x80",
    "index beyond the tables": b"\xbe",  # 62: the dynamic table is empty
    "literal name index beyond": b"\x7f\x00\x01a",
    "block ends in an integer": b"\xff\x80",
    "integer over 5 continuation octets": b"\xff\x80\x80\x80\x80\x80\x01",
    "string past the block": b"\x00\x05ab",
    "block ends before a value": b"\x00\x01a",
    "size update over the allowed (§6.3)": b"\x3f\xe2\x1f",  # 4097
    "size update after a field (§4.2)": b"\x82\x20",
    "Huffman EOS in a string (§5.2)": b"\x00\x84\xff\xff\xff\xff\x01a",
    "Huffman padding over 7 bits": b"\x00\x82\x1f\xff\x01a",  # 'a' (00011) then 11 bits of ones
    "Huffman padding not ones": b"\x00\x81\x18\x01a",  # 'a' then 000
}


@pytest.mark.parametrize("case", sorted(BAD_BLOCKS))
def test_undecodable_blocks_are_compression_errors(case):
    with pytest.raises(HPACKError):
        Decoder().decode(BAD_BLOCKS[case])


def test_a_smaller_table_must_be_signalled_at_the_next_block_start():
    decoder = Decoder()
    decoder.decode(b"\x40\x01a\x01b")  # one entry
    decoder.set_max_allowed_table_size(0)  # our SETTINGS_HEADER_TABLE_SIZE 0 was acknowledged
    with pytest.raises(HPACKError):
        decoder.decode(b"\x82")
    decoder = Decoder()
    decoder.set_max_allowed_table_size(0)
    assert decoder.decode(b"\x20\x82") == [(b":method", b"GET")] and decoder.table_size == 0
    # Several updates in a row are allowed; the last sets the size.
    decoder = Decoder()
    assert decoder.decode(b"\x20\x3f\x11\x82") == [(b":method", b"GET")] and decoder.max_table_size == 48


def test_encoder_signals_the_smallest_then_the_final_table_size():
    encoder = Encoder()
    encoder.encode([(b"a", b"b")])
    encoder.set_max_table_size(0)
    encoder.set_max_table_size(100)
    block = encoder.encode([(b"a", b"b")])
    assert block[:3] == b"\x20\x3f\x45"  # 0, then 100 (31 + 69)
    decoder = hpack.Decoder()
    decoder.decode(b"\x40\x01a\x01b", raw=True)
    assert decoder.decode(block, raw=True) == [(b"a", b"b")]
    # Our own limit holds whatever the peer allows.
    encoder = Encoder(table_size_limit=512)
    encoder.set_max_table_size(65536)
    assert encoder.max_table_size == 512


def test_hpack_bomb_header_list_is_measured_not_stored():
    # One 4,000-byte entry, then a 40,000-byte block naming it 40,000 times: 160 MB decoded.
    decoder = Decoder(max_header_list_size=65536)
    entry = b"\x40\x01x\x7f\xa1\x1e" + b"v" * 4000  # literal with indexing, value of 4000 bytes
    with pytest.raises(HeaderListTooLarge) as info:
        decoder.decode(entry + b"\xbe" * 40000)
    assert info.value.size > 160_000_000 and info.value.limit == 65536
    # The block was decoded whole: the table is as the encoder's is, and the next block reads.
    assert decoder.decode(b"\xbe") == [(b"x", b"v" * 4000)]


def test_header_list_size_counts_32_bytes_per_field():
    decoder = Decoder(max_header_list_size=2 * (1 + 1 + 32))
    assert decoder.decode(b"\x00\x01a\x01b" * 2) == [(b"a", b"b")] * 2
    with pytest.raises(HeaderListTooLarge):
        decoder.decode(b"\x00\x01a\x01b" * 3)


def test_the_dynamic_table_evicts_oldest_first_and_an_entry_too_large_empties_it():
    decoder = Decoder()
    decoder.max_table_size = 100
    decoder.decode(b"\x40\x01a\x01b" + b"\x40\x01c\x01d")  # 34 + 34
    decoder.decode(b"\x40\x01e\x01f")  # 102 > 100: a:b goes
    assert table_of(decoder) == [(b"e", b"f"), (b"c", b"d")]
    decoder.decode(b"\x40\x01g\x7f\x2a" + b"h" * 169)  # 1 + 169 + 32 > 100
    assert table_of(decoder) == [] and decoder.table_size == 0


def test_static_table_is_rfc_7541_appendix_a():
    assert len(STATIC_TABLE) == 61
    assert STATIC_TABLE == tuple(hpack.table.HeaderTable.STATIC_TABLE)


# --- Huffman -------------------------------------------------------------------------------------


def test_huffman_code_table_is_appendix_b():
    assert [code for code, length in huffman._CODE_TABLE] == REQUEST_CODES
    assert [length for code, length in huffman._CODE_TABLE] == REQUEST_CODES_LENGTH


@pytest.mark.parametrize("text, coded", [
    (b"www.example.com", "f1e3c2e5f23a6ba0ab90f4ff"),  # C.4.1
    (b"no-cache", "a8eb10649cbf"),  # C.4.2
    (b"custom-key", "25a849e95ba97d7f"),  # C.4.3
    (b"custom-value", "25a849e95bb8e8b4bf"),
    (b"302", "6402"),  # C.6.1
    (b"private", "aec3771a4b"),
    (b"", ""),
])
def test_huffman_examples(text, coded):
    assert huffman.encode(text).hex() == coded
    assert huffman.decode(bytes.fromhex(coded)) == text
    assert huffman.encoded_length(text) == len(coded) // 2


def test_huffman_round_trips_every_byte_and_random_strings():
    rng = random.Random(7541)
    samples = [bytes(range(256)), bytes(range(255, -1, -1))] + [
        bytes(rng.randrange(256) for _ in range(rng.randrange(300))) for _ in range(300)]
    for text in samples:
        coded = huffman.encode(text)
        assert huffman.decode(coded) == text
        assert len(coded) == huffman.encoded_length(text)


def test_huffman_decoder_refuses_every_bad_ending():
    # Any string whose padding is 8+ bits, or not all ones, or which holds EOS, is refused;
    # every shorter all-ones padding is accepted. Checked over all 1- and 2-byte inputs.
    for value in range(1 << 16):
        coded = value.to_bytes(2, "big")
        for data in (coded[:1], coded) if value < 256 else (coded,):
            expected = _reference_decode(data)
            try:
                got = huffman.decode(data)
            except HPACKError:
                got = None
            assert got == expected, data.hex()


_SYMBOLS = {(code, length): symbol for symbol, (code, length) in enumerate(zip(REQUEST_CODES, REQUEST_CODES_LENGTH))}


def _reference_decode(data):
    """A bit-at-a-time reading of §5.2, for the table-driven decoder to agree with."""
    codes = _SYMBOLS
    out = bytearray()
    code = length = 0
    for byte in data:
        for shift in range(7, -1, -1):
            code = (code << 1) | ((byte >> shift) & 1)
            length += 1
            symbol = codes.get((code, length))
            if symbol == 256:
                return None
            if symbol is not None:
                out.append(symbol)
                code = length = 0
    if length > 7 or code != (1 << length) - 1:
        return None
    return bytes(out)

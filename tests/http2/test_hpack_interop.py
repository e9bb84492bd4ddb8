"""HPACK against the hpack library, both directions: random header lists (names and values of
every byte, lengths across the 7-bit prefix's edge, repeats that the dynamic tables index,
sensitive fields, table size changes between blocks) encoded by one and decoded by the other,
block after block on one pair of tables, which must stay in step."""

import random

import hpack
import pytest

from greenserve.http2.hpack import Decoder, Encoder

NAMES = [b":status", b":path", b"content-type", b"content-length", b"set-cookie", b"cookie", b"date", b"x-a",
         b"x-request-id", b"user-agent", b"accept-encoding", b"location", b"n" * 130]


def random_fields(rng, seen):
    fields = []
    for _ in range(rng.randrange(12)):
        if seen and rng.random() < 0.4:
            fields.append(rng.choice(seen))
            continue
        name = rng.choice(NAMES) if rng.random() < 0.7 else bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz-") for _ in range(rng.randrange(1, 40)))
        length = rng.choice([0, 1, 5, 30, 126, 127, 128, 300, 2000])
        if rng.random() < 0.5:
            value = bytes(rng.randrange(256) for _ in range(length))
        else:
            value = bytes(rng.choice(b"abcdefghij0123456789 ;=/") for _ in range(length))
        fields.append((name, value))
        seen.append((name, value))
    return fields


@pytest.mark.parametrize("seed", range(6))
def test_our_encoder_their_decoder(seed):
    rng = random.Random(seed)
    encoder = Encoder()
    decoder = hpack.Decoder()
    decoder.max_header_list_size = 1 << 30
    seen = []
    for _ in range(150):
        if rng.random() < 0.1:
            size = rng.choice([0, 64, 256, 4096, 8192])
            encoder.set_max_table_size(size)
            decoder.max_allowed_table_size = size
        fields = random_fields(rng, seen)
        sensitive = [(n, v, True) if rng.random() < 0.1 else (n, v) for n, v in fields]
        decoded = decoder.decode(encoder.encode(sensitive), raw=True)
        assert [(n, v) for n, v in decoded] == fields
        assert [type(f).__name__ == "NeverIndexedHeaderTuple" for f in decoded] == [len(f) == 3 for f in sensitive]
        assert encoder.table_size <= encoder.max_table_size


@pytest.mark.parametrize("seed", range(6))
def test_their_encoder_our_decoder(seed):
    rng = random.Random(100 + seed)
    encoder = hpack.Encoder()
    decoder = Decoder(max_header_list_size=1 << 30)
    reference = hpack.Decoder()  # which fields went as never indexed (a sensitive field already
    reference.max_header_list_size = 1 << 30  # in hpack's table goes indexed)
    seen = []
    for _ in range(150):
        if rng.random() < 0.1:
            # Within what we allow: a larger size would be our COMPRESSION_ERROR (§6.3).
            encoder.header_table_size = rng.choice([0, 64, 256, 4096])
        fields = random_fields(rng, seen)
        sensitive = [hpack.NeverIndexedHeaderTuple(n, v) if rng.random() < 0.1 else (n, v) for n, v in fields]
        block = encoder.encode(sensitive, huffman=rng.random() < 0.7)
        assert decoder.decode(block) == fields
        names = [f[0] for f in reference.decode(block, raw=True) if isinstance(f, hpack.NeverIndexedHeaderTuple)]
        assert (decoder.never_indexed or []) == names
        assert decoder.table_size <= decoder.max_table_size <= 4096


@pytest.mark.parametrize("seed", range(4))
def test_a_repeated_list_of_the_same_fields_reuses_its_block_while_the_table_stays(seed):
    # As a server sends them (framing.build_fields hands out the same tuples response after
    # response): the encoder reuses its last block for the same tuples while its table is
    # unchanged, and every block still decodes, on a decoder kept in step, to its fields.
    rng = random.Random(200 + seed)
    encoder = Encoder()
    decoder = hpack.Decoder()
    decoder.max_header_list_size = 1 << 30
    status, kind, server = (b":status", b"200"), (b"content-type", b"text/plain"), (b"server", b"greenserve")
    length = (b"content-length", b"13")
    date = (b"date", b"Sat, 28 Nov 2026 05:00:00 GMT")
    previous = None
    reused = 0
    for step in range(300):
        roll = rng.random()
        if roll < 0.05:
            date = (b"date", b"Sat, 28 Nov 2026 05:%02d:%02d GMT" % divmod(step, 60))  # a new second
        elif roll < 0.08:
            size = rng.choice([0, 64, 256, 4096])
            encoder.set_max_table_size(size)
            decoder.max_allowed_table_size = size
        elif roll < 0.12:
            other = [(b"x-other", b"%d" % step)]  # a response of another kind between
            assert [(n, v) for n, v in decoder.decode(encoder.encode(other), raw=True)] == other
        fields = [status, kind, length, date, server][: rng.choice([4, 5])]
        block = encoder.encode(fields)
        reused += block is previous
        previous = block
        assert [(n, v) for n, v in decoder.decode(block, raw=True)] == fields
    assert reused > 50  # (each new second, table size or other response costs the next one its reuse)

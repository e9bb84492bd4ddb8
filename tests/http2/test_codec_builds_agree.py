"""The compiled HTTP/2 codec decides every input the way the pure-Python one does.

huffman.py, hpack.py and frames.py are one source with two builds: compiled (Cython, with
their .pxd's C integers: a bit accumulator, 35-bit HPACK integers, 31- and 32-bit fields read
byte by byte) and plain Python. An integer that overflowed or a typed path that took another
branch would be a difference between two builds of one server (a stream id read as 2^64-1
in one of them was found this way). So a corpus (Huffman strings, header blocks valid and
mutated, header lists to encode with table size changes, frame streams cut anywhere, and
whole client conversations through H2Connection) is run here, in this run's build, and in a
subprocess with GREENSERVE_PURE_PYTHON=1; both must give the same results or the same errors.
"""

import random
import struct

import pytest

from greenserve import _accel

from tests.conftest import in_both_builds

pytestmark = pytest.mark.skipif(
    _accel.module_build("greenserve.http2.hpack") != "compiled",
    reason="pure-Python build: there is no second reading to compare with",
)

RUN = r"""
from greenserve.http2 import huffman, H2Config, H2Connection
from greenserve.http2.errors import H2Error, HeaderListTooLarge
from greenserve.http2.frames import FrameReader
from greenserve.http2.hpack import Decoder, Encoder

def b(text):
    return text.encode("latin-1")

def s(data):
    return bytes(data).decode("latin-1")

def attempt(call):
    try:
        return call()
    except (H2Error, HeaderListTooLarge) as exc:
        return ["error", type(exc).__name__, str(exc)]

def huffman_case(text):
    coded = huffman.encode(b(text))
    return [s(coded), huffman.encoded_length(b(text)), attempt(lambda: s(huffman.decode(coded))),
            attempt(lambda: s(huffman.decode(b(text))))]

def decode_case(blocks):
    decoder = Decoder(max_header_list_size=3000)
    out = []
    for block in blocks:
        out.append(attempt(lambda: [[s(n), s(v)] for n, v in decoder.decode(b(block))]))
        out.append([decoder.table_size, decoder.max_table_size, [[s(n), s(v)] for n, v in decoder.entries()]])
    return out

def encode_case(steps):
    encoder = Encoder()
    out = []
    for size, fields in steps:
        if size is not None:
            encoder.set_max_table_size(size)
        out.append(s(encoder.encode([tuple(b(x) for x in f[:2]) + tuple(f[2:]) for f in fields])))
    return out

def frames_case(stream, cuts):
    reader = FrameReader(max_frame_size=20000)
    got = []
    def read():
        while True:
            item = reader.next_frame()
            if item is None:
                return
            got.append([item[0], item[1], item[2], s(item[3])])
    for start, end in zip([0] + cuts, cuts + [len(stream)]):
        reader.feed(b(stream[start:end]))
        result = attempt(read)
        if result is not None:
            return got + [result]
    return got

def conversation_case(chunks):
    conn = H2Connection(H2Config(max_concurrent_streams=3, reset_burst=5, max_empty_frames=3))
    out = [s(conn.data_to_send())]
    for chunk in chunks:
        out.append([repr(event) for event in conn.receive(b(chunk), 0.0)])
        out.append(s(conn.data_to_send()))
    return out

def main(cases):
    handlers = {"huffman": huffman_case, "decode": decode_case, "encode": encode_case,
                "frames": frames_case, "conversation": conversation_case}
    return [handlers[kind](*args) for kind, args in cases]
"""


def mutate(rng, data):
    data = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        if data:
            at = rng.randrange(len(data))
            data[at] = data[at] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
    return bytes(data)


def s(data):
    return data.decode("latin-1")


def random_fields(rng):
    names = [b":status", b":path", b"content-type", b"x", b"set-cookie", b"n" * 200, b"date"]
    fields = []
    for _ in range(rng.randrange(8)):
        value = bytes(rng.randrange(256) for _ in range(rng.choice([0, 3, 30, 126, 127, 128, 500])))
        fields.append([s(rng.choice(names)), s(value)] + ([True] if rng.random() < 0.1 else []))
    return fields


def literal_block(fields):
    """Literal fields without indexing: a block any decoder state reads the same."""
    return b"".join(b"\x00" + bytes([len(n)]) + n + bytes([len(v)]) + v for n, v in fields)


def frame(frame_type, flags, stream_id, payload=b""):
    return struct.pack(">BHBBL", len(payload) >> 16, len(payload) & 0xFFFF, frame_type, flags, stream_id) + payload


def client_frames(rng, encoder_blocks):
    """A plausible client frame of any type, valid or not."""
    stream_id = rng.choice([0, 1, 2, 3, 5, 7, 9, 0x80000001])
    kind = rng.random()
    if kind < 0.3:
        return frame(1, rng.choice([4, 5, 1, 0x25, 0x0D]), stream_id, rng.choice(encoder_blocks))
    if kind < 0.5:
        return frame(0, rng.choice([0, 1, 8, 9]), stream_id, bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 10, 300]))))
    if kind < 0.6:
        return frame(3, 0, stream_id, struct.pack(">L", rng.randrange(14)))
    if kind < 0.7:
        return frame(8, 0, stream_id, struct.pack(">L", rng.choice([0, 1, 1000, 2**31 - 1])))
    if kind < 0.8:
        return frame(4, rng.choice([0, 1]), 0, b"".join(struct.pack(">HL", rng.randrange(10), rng.choice([0, 1, 2, 16384, 2**31])) for _ in range(rng.randrange(3))))
    if kind < 0.85:
        return frame(6, rng.choice([0, 1]), 0, b"12345678")
    if kind < 0.9:
        return frame(9, rng.choice([0, 4]), stream_id, rng.choice(encoder_blocks)[:5])
    if kind < 0.95:
        return frame(2, 0, stream_id, struct.pack(">LB", rng.choice([0, stream_id]), 3))
    return frame(rng.randrange(256), rng.randrange(256), stream_id, b"?" * rng.randrange(5))


def corpus():
    rng = random.Random(9113)
    cases = []
    for _ in range(200):
        text = bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
        cases.append(["huffman", [s(text)]])
    from greenserve.http2.hpack import Encoder  # valid blocks to start from, by this build's encoder

    encoder = Encoder()
    blocks = [encoder.encode([(f[0].encode("latin-1"), f[1].encode("latin-1")) for f in random_fields(rng)]) for _ in range(60)]
    blocks += [b"\x3f\xe1\x1f", b"\x20", b"\x3f\xe2\x1f", b"\xff\x80\x80\x80\x80\x80\x01", b"\x00\x84\xff\xff\xff\xff\x01a",
               b"\x40\x01x\x7f\xe9\x06" + b"v" * 1000 + b"\xbe" * 5]  # a bomb over max_header_list_size
    for _ in range(150):
        chosen = [rng.choice(blocks) for _ in range(rng.randrange(1, 5))]
        chosen = [mutate(rng, block) if rng.random() < 0.4 else block for block in chosen]
        cases.append(["decode", [[s(block) for block in chosen]]])
    for _ in range(60):
        steps = [[rng.choice([None, None, 0, 100, 256, 4096, 9999]), random_fields(rng)] for _ in range(rng.randrange(1, 6))]
        cases.append(["encode", [steps]])
    from greenserve.http2.frames import PREFACE

    for _ in range(150):
        stream = PREFACE + b"".join(client_frames(rng, blocks) for _ in range(rng.randrange(1, 8)))
        if rng.random() < 0.3:
            stream = mutate(rng, stream)
        cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(4)))
        cases.append(["frames", [s(stream), cuts]])
    settings = frame(4, 0, 0, b"")
    requests = [literal_block([(b":method", method), (b":scheme", b"https"), (b":path", path), (b":authority", b"a")] + extra)
                for method in (b"GET", b"POST") for path in (b"/", b"/x?y", b"")
                for extra in ([], [(b"content-length", b"3")], [(b"te", b"gzip")], [(b"cookie", b"a"), (b"cookie", b"b")])]
    for _ in range(200):
        frames = [client_frames(rng, requests + blocks[:5]) for _ in range(rng.randrange(1, 10))]
        stream = PREFACE + settings + b"".join(frames)
        cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(3)))
        chunks = [s(stream[a:b]) for a, b in zip([0] + cuts, cuts + [len(stream)])]
        cases.append(["conversation", [chunks]])
    return cases


def test_compiled_and_pure_codecs_agree():
    cases = corpus()
    here, pure = in_both_builds(RUN, cases)
    differ = [(case, mine, theirs) for case, mine, theirs in zip(cases, here, pure) if mine != theirs]
    assert not differ, "%d of %d cases differ, the first: %r" % (len(differ), len(cases), differ[0])
    # The corpus reaches both sides: errors and successes of each kind.
    text = repr(here)
    for needle in ("HPACKError", "H2ConnectionError", "RequestReceived", "StreamReset", "ConnectionTerminated",
                   "HeaderListTooLarge"):
        assert needle in text, needle

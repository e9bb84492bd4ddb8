"""The compiled frame codec decides every stream the way the pure-Python one does.

frames.py is one source with two builds: compiled (Cython, with frames.pxd's C types, and the
payload unmasked by websocket/_cframes.pyx a word at a time) and plain Python (``_PyMasker``, a
big-integer XOR). A C integer that overflowed, a typed path that took another branch, or a mask
that slipped at a word's edge would be a difference between two builds of one server. So a
corpus of streams (valid frames of every kind and length form, reserved bits and opcodes, bad
UTF-8, close codes, limits, compressed messages, and random mutations of all of them, each cut
into random reads) is parsed here, in this run's build, and in a subprocess with
GREENSERVE_PURE_PYTHON=1; both must give the same events or the same error.
"""

import random
import struct
import zlib

import pytest

from greenserve import _accel

from tests.conftest import in_both_builds
from tests.websocket.helpers import client_frame

pytestmark = pytest.mark.skipif(
    _accel.module_build("greenserve.websocket.frames") != "compiled",
    reason="pure-Python build: there is no second reading to compare with",
)

TEXTS = [b"", b"hello", "κόσμε €𝄞".encode(), b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xce",
         b"ab\xff", "é".encode() * 70, b"x" * 125, b"y" * 126]
CODES = [1000, 1001, 1005, 1011, 1015, 2999, 3000, 4999, 5000, 0]


def deflate(data):
    compressor = zlib.compressobj(wbits=-15)
    return (compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH))[:-4]


def random_frame(rng, in_message):
    kind = rng.random()
    key = bytes(rng.randrange(256) for _ in range(4))
    if kind < 0.25:
        return client_frame(rng.choice([1, 2]), rng.choice(TEXTS), key=key, fin=rng.random() < 0.7)
    if kind < 0.4 and in_message:
        return client_frame(0, rng.choice(TEXTS), key=key, fin=rng.random() < 0.6)
    if kind < 0.55:
        return client_frame(rng.choice([9, 10]), rng.choice(TEXTS)[:125], key=key)
    if kind < 0.62:
        body = b"" if rng.random() < 0.2 else struct.pack("!H", rng.choice(CODES)) + rng.choice(TEXTS)[:60]
        return client_frame(8, body, key=key)
    if kind < 0.7:
        return client_frame(rng.choice([1, 2]), deflate(rng.choice(TEXTS)), rsv=4, key=key)
    if kind < 0.8:  # large, and in every length form
        n = rng.choice([126, 1000, 65535, 65536, 70001])
        return client_frame(2, bytes(rng.randrange(256) for _ in range(64)) * (n // 64) + b"t" * (n % 64), key=key)
    if kind < 0.85:
        return client_frame(rng.choice([3, 7, 11, 15]), b"r", key=key)
    if kind < 0.9:
        return client_frame(rng.choice([1, 9]), b"z", rsv=rng.randrange(1, 8), key=key)
    if kind < 0.95:
        return client_frame(2, b"w" * rng.choice([3, 200]), length_form=rng.choice([16, 64]), key=key)
    return client_frame(1, b"u", masked=False)


def corpus():
    rng = random.Random(20261125)
    cases = []
    for _ in range(600):
        frames = []
        in_message = False
        for _ in range(rng.randrange(1, 7)):
            data = random_frame(rng, in_message)
            in_message = bool(data[0] & 0x0F in (1, 2) and not data[0] & 0x80) or in_message
            frames.append(data)
        stream = bytearray(b"".join(frames))
        if rng.random() < 0.4:  # mutations: a flipped bit or a changed byte anywhere
            for _ in range(rng.randrange(1, 4)):
                at = rng.randrange(len(stream))
                stream[at] = stream[at] ^ (1 << rng.randrange(8)) if rng.random() < 0.5 else rng.randrange(256)
        if rng.random() < 0.1:
            stream = stream[: rng.randrange(len(stream))]
        cuts = sorted(rng.randrange(len(stream) + 1) for _ in range(rng.randrange(4)))
        limit = rng.choice([0, 0, 100, 1000, 70000])
        eof = rng.random() < 0.3
        cases.append([stream.decode("latin-1"), cuts, limit, eof])
    return cases


# Run in this process and in the pure-Python subprocess: one JSON list per case.
PARSE = r"""
import zlib
from greenserve.websocket.frames import NEED_DATA, FrameParser, Message, Ping, Pong, Close, ProtocolError

class Inflater:
    def decompress(self, payload, max_size):
        try:
            data = zlib.decompressobj(-15).decompress(payload + b"\x00\x00\xff\xff")
        except zlib.error:
            raise ProtocolError(1002, "corrupt compressed data")
        if max_size and len(data) > max_size:
            raise ProtocolError(1009, "message too big")
        return data

def describe(event):
    if type(event) is Message:
        if type(event.data) is str:
            return ["text", event.data]
        return ["binary", event.data.decode("latin-1")]
    if type(event) is Close:
        return ["close", event.code, event.reason]
    return [type(event).__name__, event.payload.decode("latin-1")]

def parse(case):
    stream, cuts, limit, eof = case
    data = stream.encode("latin-1")
    pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    if eof:
        pieces.append(b"")
    parser = FrameParser(max_message_size=limit, inflater=Inflater())
    events = []
    try:
        for piece in pieces:
            parser.receive_data(piece)
            while (event := parser.next_event()) is not NEED_DATA:
                events.append(describe(event))
    except ProtocolError as exc:
        events.append(["error", exc.code, exc.reason])
    except Exception as exc:
        events.append(["unexpected", type(exc).__name__, str(exc)])
    return events

def main(cases):
    return [parse(case) for case in cases]
"""


def test_compiled_and_pure_codecs_agree_on_every_stream():
    cases = corpus()
    here, pure = in_both_builds(PARSE, cases)
    differ = [(case, mine, theirs) for case, mine, theirs in zip(cases, here, pure) if mine != theirs]
    assert not differ, "%d of %d streams differ, the first: %r" % (len(differ), len(cases), differ[0])
    # The corpus reaches every outcome: each event kind, each close code we raise, and nothing
    # but ProtocolError as an error.
    kinds = {event[0] for outcome in here for event in outcome}
    assert kinds == {"text", "binary", "Ping", "Pong", "close", "error"}, kinds
    codes = {event[1] for outcome in here for event in outcome if event[0] == "error"}
    assert codes == {1002, 1007, 1009}, codes


def test_the_c_mask_equals_the_pure_one_at_every_length_and_offset():
    from greenserve.websocket import _cframes, frames

    c_mask = _cframes.Masker().mask
    pure_mask = frames._PyMasker().mask
    rng = random.Random(5)
    data = bytes(rng.randrange(256) for _ in range(4200))
    for n in list(range(0, 70)) + [255, 256, 1023, 4096]:
        for start in range(0, 9):
            key = bytes(rng.randrange(256) for _ in range(4))
            piece = data[start : start + n]
            assert c_mask(piece, key) == pure_mask(piece, key)
            assert c_mask(memoryview(data)[start : start + n], key) == pure_mask(piece, key)
            assert c_mask(bytearray(piece), bytearray(key)) == pure_mask(piece, key)
    for bad_key in (b"", b"abc", b"abcde"):
        with pytest.raises(ValueError):
            c_mask(b"x", bad_key)
        with pytest.raises(ValueError):
            pure_mask(b"x", bad_key)

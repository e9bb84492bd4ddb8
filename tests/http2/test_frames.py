"""The frame layer (RFC 9113 §4, §6): FrameReader's cutting of a byte stream into frames, the
payload parsers' layout rules, and our frames as hyperframe (python-hyper's parser) reads them."""

import random
import struct

import pytest

from greenserve.http2 import frames
from greenserve.http2.errors import ErrorCode, H2ConnectionError
from greenserve.http2.frames import PREFACE, FrameReader

from tests.http2.helpers import frame, parse


def read_all(reader):
    out = []
    while True:
        item = reader.next_frame()
        if item is None:
            return out
        out.append(item)


STREAM = PREFACE + frame(4, 0, 0, b"\0\x03\0\0\0\x64") + frame(1, 5, 1, b"abc") + frame(0, 1, 1, b"x" * 1000) + frame(
    0xEE, 0xFF, 0x80000003, b"") + frame(6, 0, 0, b"12345678")
EXPECTED = [(4, 0, 0, b"\0\x03\0\0\0\x64"), (1, 5, 1, b"abc"), (0, 1, 1, b"x" * 1000), (0xEE, 0xFF, 3, b""),
            (6, 0, 0, b"12345678")]


def test_whole_stream():
    reader = FrameReader()
    reader.feed(STREAM)
    assert read_all(reader) == EXPECTED
    assert reader.buffered() == 0


@pytest.mark.parametrize("size", [1, 2, 3, 7, 9, 10, 100, 997])
def test_any_split_gives_the_same_frames(size):
    reader = FrameReader()
    got = []
    for pos in range(0, len(STREAM), size):
        reader.feed(memoryview(STREAM)[pos : pos + size])  # views of a buffer the caller reuses
        got += read_all(reader)
    assert got == EXPECTED


def test_random_splits():
    rng = random.Random(4)
    for _ in range(200):
        cuts = sorted(rng.randrange(len(STREAM)) for _ in range(rng.randrange(1, 12)))
        reader = FrameReader()
        got = []
        for start, end in zip([0] + cuts, cuts + [len(STREAM)]):
            reader.feed(bytearray(STREAM[start:end]))
            got += read_all(reader)
        assert got == EXPECTED


def test_a_frame_of_16_mb_fed_in_small_pieces_costs_linear_time():
    # Joined once when complete: a quadratic buffer would copy ~128 GB here.
    size = 2**24 - 1
    reader = FrameReader(max_frame_size=size, expect_preface=False)
    piece = b"p" * 1024
    reader.feed(frame(0, 0, 1, length=size))
    for _ in range(size // 1024):
        reader.feed(piece)
        assert reader.next_frame() is None
    reader.feed(b"p" * (size % 1024))
    frame_type, flags, stream_id, payload = reader.next_frame()
    assert len(payload) == size and payload[:3] == b"ppp"


def test_a_frame_trickled_a_byte_at_a_time_is_kept_in_few_objects():
    # Kept as one bytes object per read, 16 KB sent a byte at a time would hold ~40 bytes of
    # object per byte; gathered, it holds about what was sent.
    import tracemalloc

    reader = FrameReader(expect_preface=False)
    reader.feed(frame(0, 0, 1, length=16384))
    chunks = [bytes([i & 0xFF]) for i in range(16383)]  # made before measuring
    tracemalloc.start()
    try:
        for chunk in chunks:
            reader.feed(chunk)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 3 * 16384, held
    reader.feed(b"\xff")
    assert reader.next_frame()[3] == bytes(i & 0xFF for i in range(16384))


def test_preface_is_checked_byte_by_byte():
    reader = FrameReader()
    reader.feed(b"PRI * HTTP/2.0\r\n")
    assert reader.next_frame() is None
    reader.feed(b"\r\nSM\r\n\r\n")
    assert reader.next_frame() is None
    reader = FrameReader()
    reader.feed(b"PRI * HTTP/1.1")
    with pytest.raises(H2ConnectionError) as info:
        reader.next_frame()
    assert info.value.error_code == ErrorCode.PROTOCOL_ERROR


def test_an_oversized_frame_is_refused_from_its_header_before_its_payload():
    reader = FrameReader(expect_preface=False)
    reader.feed(frame(0, 0, 1, length=16385))  # header only: the payload never needs to arrive
    with pytest.raises(H2ConnectionError) as info:
        reader.next_frame()
    assert info.value.error_code == ErrorCode.FRAME_SIZE_ERROR
    assert "DATA frame of 16385 bytes" in str(info.value)


# --- payloads ------------------------------------------------------------------------------------


def test_padded_payloads():
    assert frames.data_payload(0x8, b"\x02abc\0\0") == b"abc"
    assert frames.data_payload(0x8, b"\x00abc") == b"abc"
    assert frames.data_payload(0x8, b"\x03abc") == b""  # all padding
    assert frames.data_payload(0, b"\x02abc") == b"\x02abc"
    for bad in (b"\x04abc", b"\x09", b""):
        with pytest.raises(H2ConnectionError):
            frames.data_payload(0x8, bad)
    assert frames.headers_payload(0x28, b"\x01" + struct.pack(">LB", 0x80000005, 200) + b"blk\0") == (b"blk", 5)
    assert frames.headers_payload(0, b"blk") == (b"blk", -1)
    with pytest.raises(H2ConnectionError):
        frames.headers_payload(0x20, b"\0\0\0")


def test_settings_and_goaway_payloads():
    assert frames.settings_payload(b"\0\x01\0\0\x10\0\0\x04\x7f\xff\xff\xff") == [(1, 4096), (4, 2**31 - 1)]
    assert frames.settings_payload(b"") == []
    with pytest.raises(H2ConnectionError) as info:
        frames.settings_payload(b"\0\x01\0\0\x10")
    assert info.value.error_code == ErrorCode.FRAME_SIZE_ERROR
    assert frames.goaway_payload(b"\x80\0\0\x07\0\0\0\x0bdebug") == (7, 11, b"debug")
    with pytest.raises(H2ConnectionError):
        frames.goaway_payload(b"\0\0\0\x07\0\0\0")
    assert frames.uint31(b"\xff\xff\xff\xff") == 2**31 - 1
    assert frames.uint32(b"\xff\xff\xff\xff") == 2**32 - 1


# --- our frames ----------------------------------------------------------------------------------


def test_our_frames_as_hyperframe_reads_them():
    data = b"".join([
        frames.settings_frame([(3, 100), (2, 0)]), frames.window_update_frame(3, 2**31 - 1),
        frames.rst_stream_frame(5, 8), frames.ping_frame(b"abcdefgh", True), frames.goaway_frame(7, 11, b"calm"),
        frames.frame_header(3, frames.DATA, frames.END_STREAM, 9) + b"abc",
    ])
    settings, window, rst, ping, goaway, data_frame = parse(data)
    assert settings.settings == {3: 100, 2: 0}
    assert (window.stream_id, window.window_increment) == (3, 2**31 - 1)
    assert (rst.stream_id, rst.error_code) == (5, 8)
    assert ping.opaque_data == b"abcdefgh" and "ACK" in ping.flags
    assert (goaway.last_stream_id, goaway.error_code, goaway.additional_data) == (7, 11, b"calm")
    assert data_frame.data == b"abc" and "END_STREAM" in data_frame.flags


@pytest.mark.parametrize("length", [0, 1, 16384, 16385, 40000, 49152])
def test_a_header_block_is_cut_into_headers_and_continuations(length):
    block = bytes(random.Random(length).randrange(256) for _ in range(length))
    out = []
    frames.headers_frames(3, block, True, 16384, out)
    parsed = parse(b"".join(out))
    assert type(parsed[0]).__name__ == "HeadersFrame" and "END_STREAM" in parsed[0].flags
    assert all(type(f).__name__ == "ContinuationFrame" for f in parsed[1:])
    assert ["END_HEADERS" in f.flags for f in parsed] == [False] * (len(parsed) - 1) + [True]
    assert b"".join(f.data for f in parsed) == block
    assert len(parsed) == max(1, -(-length // 16384))

"""Properties of the frame codec, over generated streams of client frames.

- However a valid stream is split into reads, the codec gives the same events, and they are the
  messages and control frames that were generated (fragmented or not, control frames between
  fragments, any masking key, every length form).
- A stream with bytes changed anywhere gives the same events or a ProtocolError: never another
  exception, whatever the split.
- The compiled build's C unmasking equals the pure build's on any data and key.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenserve import _accel
from greenserve.websocket.frames import (
    BINARY,
    CLOSE,
    CONTINUATION,
    PING,
    PONG,
    TEXT,
    Close,
    Message,
    Ping,
    Pong,
    close_payload,
)

from tests.websocket.helpers import client_frame, feed

keys = st.binary(min_size=4, max_size=4)
texts = st.text(max_size=40) | st.text(st.characters(max_codepoint=0x7F), min_size=120, max_size=300)
blobs = st.binary(max_size=40) | st.builds(lambda b, n: b * n, st.binary(min_size=1, max_size=8), st.integers(16, 9000))
control_payloads = st.binary(max_size=125)
close_codes = st.sampled_from([1000, 1001, 1003, 1008, 1011, 3000, 4999])


@st.composite
def control_frames(draw):
    """A ping or pong: (its frame, its event)."""
    opcode = draw(st.sampled_from([PING, PONG]))
    payload = draw(control_payloads)
    event = Ping(payload) if opcode == PING else Pong(payload)
    return client_frame(opcode, payload, key=draw(keys)), event


@st.composite
def messages(draw):
    """A data message in one or more fragments, maybe with control frames between them:
    (its frames, the events they give, in order)."""
    text = draw(st.booleans())
    data = draw(texts) if text else draw(blobs)
    raw = data.encode("utf-8") if text else data
    # Fragments cut anywhere, also inside a UTF-8 sequence (RFC 6455 §5.6 allows it).
    cuts = sorted(draw(st.lists(st.integers(0, len(raw)), max_size=4)))
    pieces = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
    frames = b""
    events = []
    for i, piece in enumerate(pieces):
        if i:
            for frame_, event in draw(st.lists(control_frames(), max_size=2)):
                frames += frame_
                events.append(event)
        opcode = (TEXT if text else BINARY) if i == 0 else CONTINUATION
        frames += client_frame(opcode, piece, fin=i == len(pieces) - 1, key=draw(keys))
    events.append(Message(data))
    return frames, events


@st.composite
def streams(draw):
    """A valid stream: messages and control frames, maybe ending with a Close."""
    raw = b""
    expected = []
    for _ in range(draw(st.integers(1, 5))):
        frames, events = draw(st.one_of(messages(), control_frames().map(lambda fe: (fe[0], [fe[1]]))))
        raw += frames
        expected += events
    if draw(st.booleans()):
        code = draw(st.none() | close_codes)
        reason = draw(st.text(max_size=20)) if code else ""
        body = close_payload(code, reason)
        raw += client_frame(CLOSE, body, key=draw(keys))
        expected.append(Close(code, body[2:].decode("utf-8")))
    return raw, expected


def split(data, raw):
    """``raw`` cut at drawn points, or one byte at a time (no empty piece: b"" is EOF)."""
    if len(raw) < 800 and data.draw(st.booleans(), label="byte by byte"):
        return [raw[i : i + 1] for i in range(len(raw))]
    cuts = sorted(set(data.draw(st.lists(st.integers(0, len(raw)), max_size=10), label="cuts")))
    return [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)]) if b > a]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=streams(), data=st.data())
def test_any_split_gives_the_events_that_were_sent(stream, data):
    raw, expected = stream
    whole, error = feed([raw])
    assert error is None, error
    assert whole == expected
    pieces = split(data, raw)
    assert b"".join(pieces) == raw
    assert feed(pieces) == (whole, None)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=streams(), data=st.data())
def test_a_mutated_stream_gives_the_same_events_or_a_protocol_error(stream, data):
    raw, expected = stream
    mutated = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        at = data.draw(st.integers(0, len(raw) - 1), label="at")
        mutated[at] = data.draw(st.integers(0, 255), label="byte")
    mutated = bytes(mutated)
    limit = data.draw(st.sampled_from([0, 16 * 1024 * 1024, 100]), label="max_message_size")
    eof = [b""] if data.draw(st.booleans(), label="eof") else []
    # feed() lets only ProtocolError through as an outcome: any other exception fails the test.
    whole = feed([mutated] + eof, max_message_size=limit)
    pieces = split(data, mutated)
    outcome = feed(pieces + eof, max_message_size=limit)
    events, error = outcome
    assert (events, error and (error.code, error.reason)) == (whole[0], whole[1] and (whole[1].code, whole[1].reason))
    if error is not None:
        assert error.code in (1002, 1007, 1009)
    if mutated == raw and limit != 100:
        assert events == expected


@pytest.mark.skipif(not _accel.compiled(), reason="pure-Python build: there is no C mask to compare with")
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=300), keys, st.integers(0, 7))
def test_the_c_unmask_equals_the_pure_one(payload, key, offset):
    from greenserve.websocket import _cframes, frames

    view = memoryview(b"\x00" * offset + payload)[offset:]  # any alignment
    assert _cframes.Masker().mask(view, key) == frames._PyMasker().mask(payload, key)

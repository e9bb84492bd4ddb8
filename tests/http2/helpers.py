"""Byte-level helpers for the HTTP/2 codec's tests: a client's frames written by hand, and
our output read back by hyperframe (python-hyper's frame parser: another reading than ours)."""

import struct

import hyperframe.frame

from greenserve.http2 import ConnectionTerminated, H2Config, H2Connection, StreamReset
from greenserve.http2.frames import PREFACE

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20


def frame(frame_type, flags, stream_id, payload=b"", length=None):
    """One frame as a client sends it; ``length`` lies about the payload's size when given."""
    length = len(payload) if length is None else length
    return struct.pack(">BHBBL", length >> 16, length & 0xFFFF, frame_type, flags, stream_id) + payload


def settings(*pairs, ack=False):
    return frame(SETTINGS, ACK if ack else 0, 0, b"".join(struct.pack(">HL", k, v) for k, v in pairs))


def string(data):
    """RFC 7541 §5.2 string literal without Huffman (§5.1: its length with a 7-bit prefix)."""
    length = len(data)
    if length < 127:
        return bytes([length]) + data
    out = bytearray([127])
    length -= 127
    while length >= 128:
        out.append(length & 0x7F | 0x80)
        length >>= 7
    return bytes(out) + bytes([length]) + data


def literal(name, value):
    """§6.2.2 literal field without indexing, new name: a field exactly as written."""
    return b"\x00" + string(name) + string(value)


def block(fields):
    return b"".join(literal(name, value) for name, value in fields)


GET = [(b":method", b"GET"), (b":scheme", b"https"), (b":path", b"/"), (b":authority", b"example.com")]
POST = [(b":method", b"POST"), (b":scheme", b"https"), (b":path", b"/upload"), (b":authority", b"example.com")]


def headers(stream_id, fields=GET, end_stream=True, end_headers=True, extra_flags=0, prefix=b""):
    flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0) | extra_flags
    return frame(HEADERS, flags, stream_id, prefix + block(fields))


def data(stream_id, payload, end_stream=False):
    return frame(DATA, END_STREAM if end_stream else 0, stream_id, payload)


def rst(stream_id, code=8):
    return frame(RST_STREAM, 0, stream_id, struct.pack(">L", code))


def window_update(stream_id, increment):
    return frame(WINDOW_UPDATE, 0, stream_id, struct.pack(">L", increment))


def priority(stream_id, depends_on, weight=16):
    return frame(PRIORITY, 0, stream_id, struct.pack(">LB", depends_on, weight - 1))


def ping(payload=b"12345678", ack=False):
    return frame(PING, ACK if ack else 0, 0, payload)


HANDSHAKE = PREFACE + settings()


def server(**config):
    """A connection whose preface (ours and the client's) is done and whose output is drained."""
    conn = H2Connection(H2Config(**config))
    conn.receive(HANDSHAKE + settings(ack=True))
    conn.data_to_send()
    return conn


def parse(data):
    """Frames as hyperframe reads them."""
    frames = []
    while data:
        header, length = hyperframe.frame.Frame.parse_frame_header(memoryview(data[:9]))
        header.parse_body(memoryview(data[9 : 9 + length]))
        frames.append(header)
        data = data[9 + length :]
    return frames


def sent(conn):
    """Our queued output as hyperframe frames."""
    return parse(conn.data_to_send())


def outcome(conn, data):
    """What ``data`` makes the server do: ('connection', code), ('stream', id, code) or
    ('ok', [event types]); checks that the events and the frames sent say the same."""
    events = conn.receive(data)
    out = sent(conn)
    goaways = [f for f in out if isinstance(f, hyperframe.frame.GoAwayFrame)]
    terminated = [e for e in events if isinstance(e, ConnectionTerminated) and not e.remote]
    if terminated:
        assert goaways and goaways[-1].error_code == terminated[-1].error_code, (events, out)
        return ("connection", terminated[-1].error_code)
    assert not goaways, out
    resets = [e for e in events if isinstance(e, StreamReset) and not e.remote]
    if resets:
        rsts = [f for f in out if isinstance(f, hyperframe.frame.RstStreamFrame)]
        assert [(f.stream_id, f.error_code) for f in rsts] == [(e.stream_id, e.error_code) for e in resets]
        return ("stream", resets[-1].stream_id, resets[-1].error_code)
    return ("ok", [type(e).__name__ for e in events])

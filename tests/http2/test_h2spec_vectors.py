"""Byte vectors for the connection, grouped and named as h2spec's "http2" cases (RFC 9113).

Each case is a client's bytes after the connection preface and the answer the server must
give: a connection error (GOAWAY with the code), a stream error (RST_STREAM with the code on
that stream), or events. ``outcome`` (helpers) checks that the events and the frames we sent
agree. The h2spec case a row follows is its id (section/number).
"""

import struct

import pytest

from greenserve.http2 import ErrorCode, H2Config, H2Connection
from greenserve.http2.frames import PREFACE

from tests.http2.helpers import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    GET,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    POST,
    PRIORITY,
    PRIORITY_FLAG,
    PUSH_PROMISE,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    block,
    data,
    frame,
    headers,
    outcome,
    ping,
    priority,
    rst,
    sent,
    server,
    settings,
    window_update,
)

E = ErrorCode
OPEN_1 = headers(1, POST, end_stream=False)  # stream 1 open: a POST whose body is to come
HALF_CLOSED_1 = headers(1, GET)  # stream 1 half-closed (remote): a GET, answer pending


def conn_error(code):
    return ("connection", code)


def stream_error(stream_id, code):
    return ("stream", stream_id, code)


def ok(*events):
    return ("ok", list(events))


CASES = {
    # 4.1 Frame format
    "4.1/1 unknown frame type is ignored": (frame(0x16, 0, 0, b"x" * 8) + ping(), ok("PingReceived")),
    "4.1/2 undefined flags are ignored": (frame(PING, 0x16, 0, b"12345678"), ok("PingReceived")),
    "4.1/3 reserved bit is ignored": (frame(HEADERS, END_STREAM | END_HEADERS, 0x80000001, block(GET)),
                                      ok("RequestReceived", "StreamEnded")),
    # 4.2 Frame size
    "4.2/1 DATA of SETTINGS_MAX_FRAME_SIZE": (OPEN_1 + data(1, b"x" * 16384), ok("RequestReceived", "DataReceived")),
    "4.2/2 DATA over SETTINGS_MAX_FRAME_SIZE": (OPEN_1 + data(1, b"x" * 16385), conn_error(E.FRAME_SIZE_ERROR)),
    "4.2/3 HEADERS over SETTINGS_MAX_FRAME_SIZE": (frame(HEADERS, 5, 1, b"\x00" * 16385), conn_error(E.FRAME_SIZE_ERROR)),
    # 4.3 Header compression
    "4.3/1 invalid header block fragment": (frame(HEADERS, 5, 1, b"\xff\xff\xff\xff\xff\xff\xff\x7f"),
                                            conn_error(E.COMPRESSION_ERROR)),
    "4.3/2 PRIORITY between HEADERS and CONTINUATION": (
        headers(1, end_headers=False) + priority(1, 0) + frame(CONTINUATION, END_HEADERS, 1), conn_error(E.PROTOCOL_ERROR)),
    "4.3/3 index 0": (frame(HEADERS, 5, 1, b"\x80"), conn_error(E.COMPRESSION_ERROR)),
    "4.3/4 dynamic table size update after a field": (frame(HEADERS, 5, 1, block(GET) + b"\x20"),
                                                       conn_error(E.COMPRESSION_ERROR)),
    # 5.1 Stream states
    "5.1/1 idle: DATA": (data(1, b"x"), conn_error(E.PROTOCOL_ERROR)),
    "5.1/2 idle: RST_STREAM": (rst(1), conn_error(E.PROTOCOL_ERROR)),
    "5.1/3 idle: WINDOW_UPDATE": (window_update(1, 100), conn_error(E.PROTOCOL_ERROR)),
    "5.1/4 idle: CONTINUATION": (frame(CONTINUATION, END_HEADERS, 1, block(GET)), conn_error(E.PROTOCOL_ERROR)),
    "5.1/5 half closed (remote): DATA": (HALF_CLOSED_1 + data(1, b"x"), stream_error(1, E.STREAM_CLOSED)),
    "5.1/6 half closed (remote): HEADERS": (HALF_CLOSED_1 + headers(1, [(b"x", b"y")]), stream_error(1, E.STREAM_CLOSED)),
    "5.1/7 half closed (remote): CONTINUATION": (HALF_CLOSED_1 + frame(CONTINUATION, END_HEADERS, 1, block(GET)),
                                                 conn_error(E.PROTOCOL_ERROR)),
    "5.1/8 closed: DATA after RST_STREAM": (OPEN_1 + rst(1) + data(1, b"x"), stream_error(1, E.STREAM_CLOSED)),
    "5.1/9 closed: HEADERS after RST_STREAM": (OPEN_1 + rst(1) + headers(1), conn_error(E.STREAM_CLOSED)),
    "5.1/10 closed: CONTINUATION after RST_STREAM": (OPEN_1 + rst(1) + frame(CONTINUATION, END_HEADERS, 1, block(GET)),
                                                     conn_error(E.PROTOCOL_ERROR)),
    "5.1/11 closed: PRIORITY after RST_STREAM is fine": (OPEN_1 + rst(1) + priority(1, 0), ok(
        "RequestReceived", "StreamReset", "PriorityIgnored")),
    "5.1/12 closed: WINDOW_UPDATE after RST_STREAM is ignored": (OPEN_1 + rst(1) + window_update(1, 5), ok(
        "RequestReceived", "StreamReset")),
    # 5.1.1 Stream identifiers
    "5.1.1/1 even-numbered stream": (headers(2), conn_error(E.PROTOCOL_ERROR)),
    "5.1.1/2 stream id below the previous": (headers(5) + headers(3), conn_error(E.PROTOCOL_ERROR)),
    # 5.3.1 Stream dependencies
    "5.3.1/1 HEADERS depending on itself": (
        frame(HEADERS, END_STREAM | END_HEADERS | PRIORITY_FLAG, 1, struct.pack(">LB", 1, 15) + block(GET)),
        stream_error(1, E.PROTOCOL_ERROR)),
    "5.3.1/2 PRIORITY depending on itself": (priority(1, 1), stream_error(1, E.PROTOCOL_ERROR)),
    "5.3/3 PRIORITY on an idle stream is fine": (priority(3, 0), ok("PriorityIgnored")),
    # 5.4.1 Connection error handling
    "5.4.1/1 invalid PING: GOAWAY": (frame(PING, 0, 0, b"123456"), conn_error(E.FRAME_SIZE_ERROR)),
    # 5.5 Extending HTTP/2
    "5.5/1 unknown extension frame is ignored": (frame(0xFF, 0, 1, b"abc") + ping(), ok("PingReceived")),
    "5.5/2 unknown frame inside a header block": (
        headers(1, end_headers=False) + frame(0xFF, 0, 1) + frame(CONTINUATION, END_HEADERS, 1), conn_error(E.PROTOCOL_ERROR)),
    # 6.1 DATA
    "6.1/1 DATA on stream 0": (data(0, b"x"), conn_error(E.PROTOCOL_ERROR)),
    "6.1/2 DATA on a stream not open or half-closed (local)": (HALF_CLOSED_1 + data(1, b"x"), stream_error(1, E.STREAM_CLOSED)),
    "6.1/3 DATA with padding as long as the payload": (OPEN_1 + frame(DATA, PADDED, 1, b"\x05abcd"), conn_error(E.PROTOCOL_ERROR)),
    "6.1/4 padded DATA is read without its padding": (OPEN_1 + frame(DATA, PADDED, 1, b"\x02abc\x00\x00"),
                                                      ok("RequestReceived", "DataReceived")),
    # 6.2 HEADERS
    "6.2/1 HEADERS without END_HEADERS, then PRIORITY": (headers(1, end_headers=False) + priority(1, 0),
                                                         conn_error(E.PROTOCOL_ERROR)),
    "6.2/2 HEADERS without END_HEADERS, then HEADERS on another stream": (
        headers(1, end_headers=False) + headers(3), conn_error(E.PROTOCOL_ERROR)),
    "6.2/3 HEADERS on stream 0": (headers(0), conn_error(E.PROTOCOL_ERROR)),
    "6.2/4 HEADERS with padding as long as the payload": (frame(HEADERS, 5 | PADDED, 1, b"\x10" + block(GET)[:15]),
                                                          conn_error(E.PROTOCOL_ERROR)),
    "6.2/5 padded HEADERS with priority": (frame(HEADERS, 5 | PADDED | PRIORITY_FLAG, 1,
                                                 b"\x03" + struct.pack(">LB", 0, 15) + block(GET) + b"\0\0\0"),
                                           ok("RequestReceived", "StreamEnded")),
    # 6.3 PRIORITY
    "6.3/1 PRIORITY on stream 0": (priority(0, 1), conn_error(E.PROTOCOL_ERROR)),
    "6.3/2 PRIORITY of 4 bytes": (frame(PRIORITY, 0, 1, b"\0\0\0\0"), stream_error(1, E.FRAME_SIZE_ERROR)),
    # 6.4 RST_STREAM
    "6.4/1 RST_STREAM on stream 0": (rst(0), conn_error(E.PROTOCOL_ERROR)),
    "6.4/2 RST_STREAM on an idle stream": (rst(3), conn_error(E.PROTOCOL_ERROR)),
    "6.4/3 RST_STREAM of 3 bytes": (OPEN_1 + frame(RST_STREAM, 0, 1, b"\0\0\x08"), conn_error(E.FRAME_SIZE_ERROR)),
    # 6.5 SETTINGS
    "6.5/1 SETTINGS ACK with a payload": (frame(SETTINGS, 1, 0, b"\0\x01\0\0\0\0"), conn_error(E.FRAME_SIZE_ERROR)),
    "6.5/2 SETTINGS on a stream": (frame(SETTINGS, 0, 1, b""), conn_error(E.PROTOCOL_ERROR)),
    "6.5/3 SETTINGS of 3 bytes": (frame(SETTINGS, 0, 0, b"\0\x01\0"), conn_error(E.FRAME_SIZE_ERROR)),
    "6.5.2/1 ENABLE_PUSH 2": (settings((2, 2)), conn_error(E.PROTOCOL_ERROR)),
    "6.5.2/2 INITIAL_WINDOW_SIZE 2^31": (settings((4, 2**31)), conn_error(E.FLOW_CONTROL_ERROR)),
    "6.5.2/3 MAX_FRAME_SIZE 16383": (settings((5, 16383)), conn_error(E.PROTOCOL_ERROR)),
    "6.5.2/4 MAX_FRAME_SIZE 2^24": (settings((5, 2**24)), conn_error(E.PROTOCOL_ERROR)),
    "6.5.2/5 unknown setting is ignored": (settings((0xFF, 1)), ok("SettingsChanged")),
    # 6.7 PING
    "6.7/1 PING is acknowledged": (ping(), ok("PingReceived")),
    "6.7/2 PING ACK is not answered": (ping(ack=True), ok("PingAcknowledged")),
    "6.7/3 PING on a stream": (frame(PING, 0, 1, b"12345678"), conn_error(E.PROTOCOL_ERROR)),
    "6.7/4 PING of 6 bytes": (frame(PING, 0, 0, b"123456"), conn_error(E.FRAME_SIZE_ERROR)),
    # 6.8 GOAWAY
    "6.8/1 GOAWAY on a stream": (frame(GOAWAY, 0, 1, b"\0" * 8), conn_error(E.PROTOCOL_ERROR)),
    "6.8/2 GOAWAY from the client": (frame(GOAWAY, 0, 0, b"\0" * 8 + b"bye"), ok("ConnectionTerminated")),
    # 6.9 WINDOW_UPDATE
    "6.9/1 increment 0 on the connection": (window_update(0, 0), conn_error(E.PROTOCOL_ERROR)),
    "6.9/2 increment 0 on a stream": (HALF_CLOSED_1 + window_update(1, 0), stream_error(1, E.PROTOCOL_ERROR)),
    "6.9/3 WINDOW_UPDATE of 3 bytes": (frame(WINDOW_UPDATE, 0, 0, b"\0\0\x01"), conn_error(E.FRAME_SIZE_ERROR)),
    "6.9.1/1 connection window over 2^31-1": (window_update(0, 2**31 - 1), conn_error(E.FLOW_CONTROL_ERROR)),
    "6.9.1/2 stream window over 2^31-1": (HALF_CLOSED_1 + window_update(1, 2**31 - 1), stream_error(1, E.FLOW_CONTROL_ERROR)),
    "6.9.1/3 DATA over the stream window": (OPEN_1 + data(1, b"x" * 16384) * 4 + data(1, b"x" * 16384),
                                            conn_error(E.FLOW_CONTROL_ERROR)),
    "6.9.2/3 INITIAL_WINDOW_SIZE moving a stream window over 2^31-1": (
        HALF_CLOSED_1 + window_update(1, 2**31 - 1 - 65535) + settings((4, 65536)), conn_error(E.FLOW_CONTROL_ERROR)),
    # 6.10 CONTINUATION
    "6.10/1 several CONTINUATION frames": (
        frame(HEADERS, END_STREAM, 1, block(GET[:2])) + frame(CONTINUATION, 0, 1, block(GET[2:3]))
        + frame(CONTINUATION, END_HEADERS, 1, block(GET[3:])), ok("RequestReceived", "StreamEnded")),
    "6.10/2 CONTINUATION followed by a frame other than CONTINUATION": (
        headers(1, end_headers=False) + frame(CONTINUATION, 0, 1) + data(1, b"x"), conn_error(E.PROTOCOL_ERROR)),
    "6.10/3 CONTINUATION on stream 0": (headers(1, end_headers=False) + frame(CONTINUATION, 4, 0), conn_error(E.PROTOCOL_ERROR)),
    "6.10/4 CONTINUATION after END_HEADERS": (headers(1, end_stream=False) + frame(CONTINUATION, 4, 1, block(GET)),
                                              conn_error(E.PROTOCOL_ERROR)),
    "6.10/5 CONTINUATION on another stream": (headers(1, end_headers=False) + frame(CONTINUATION, 4, 3),
                                              conn_error(E.PROTOCOL_ERROR)),
    # 8.1 HTTP request/response exchange
    "8.1/1 second HEADERS without END_STREAM": (OPEN_1 + headers(1, [(b"x", b"y")], end_stream=False),
                                                stream_error(1, E.PROTOCOL_ERROR)),
    "8.1/2 trailers": (OPEN_1 + data(1, b"abc") + headers(1, [(b"x-checksum", b"y")]),
                       ok("RequestReceived", "DataReceived", "TrailersReceived", "StreamEnded")),
    "8.1/3 trailers with a pseudo-header": (OPEN_1 + headers(1, [(b":path", b"/")]), stream_error(1, E.PROTOCOL_ERROR)),
    "8.1.1/1 content-length larger than the DATA": (
        headers(1, POST + [(b"content-length", b"4")], end_stream=False) + data(1, b"abc", end_stream=True),
        stream_error(1, E.PROTOCOL_ERROR)),
    "8.1.1/2 content-length smaller than the DATA": (
        headers(1, POST + [(b"content-length", b"2")], end_stream=False) + data(1, b"abc"), stream_error(1, E.PROTOCOL_ERROR)),
    "8.1.1/3 content-length with END_STREAM on HEADERS": (headers(1, POST + [(b"content-length", b"2")]),
                                                          stream_error(1, E.PROTOCOL_ERROR)),
    "8.1.1/4 content-length matching the DATA": (
        headers(1, POST + [(b"content-length", b"3")], end_stream=False) + data(1, b"ab") + data(1, b"c", True),
        ok("RequestReceived", "DataReceived", "DataReceived", "StreamEnded")),
    # 8.4 Server push
    "8.4/1 PUSH_PROMISE from a client": (frame(PUSH_PROMISE, 4, 1, b"\0\0\0\x02" + block(GET)), conn_error(E.PROTOCOL_ERROR)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_h2spec_case(case):
    client_bytes, expected = CASES[case]
    assert outcome(server(), client_bytes) == expected


# 8.2-8.3 request fields: each malformed request is a stream error PROTOCOL_ERROR, and the
# connection goes on (a request on stream 3 after it is served).
MALFORMED = {
    "8.2/1 uppercase field name": GET + [(b"X-Upper", b"v")],
    "8.2/2 field name with a space": GET + [(b"x y", b"v")],
    "8.2/3 field value with CR": GET + [(b"x", b"a\rb")],
    "8.2/4 field value with LF": GET + [(b"x", b"a\nb")],
    "8.2/5 field value with NUL": GET + [(b"x", b"a\0b")],
    "8.2/6 field value with leading space": GET + [(b"x", b" a")],
    "8.2/7 field value with trailing tab": GET + [(b"x", b"a\t")],
    "8.2.2/1 connection": GET + [(b"connection", b"keep-alive")],
    "8.2.2/2 keep-alive": GET + [(b"keep-alive", b"timeout=5")],
    "8.2.2/3 proxy-connection": GET + [(b"proxy-connection", b"close")],
    "8.2.2/4 transfer-encoding": GET + [(b"transfer-encoding", b"chunked")],
    "8.2.2/5 upgrade": GET + [(b"upgrade", b"h2c")],
    "8.2.2/6 te other than trailers": GET + [(b"te", b"trailers, deflate")],
    "8.3/1 unknown pseudo-header": [(b":foo", b"bar")] + GET,
    "8.3/2 response pseudo-header in a request": GET + [(b":status", b"200")],
    "8.3/3 pseudo-header after a regular field": GET[:3] + [(b"x", b"y"), GET[3]],
    "8.3.1/1 no :method": GET[1:],
    "8.3.1/2 no :scheme": [GET[0]] + GET[2:],
    "8.3.1/3 no :path": GET[:2] + GET[3:],
    "8.3.1/4 empty :path": [GET[0], GET[1], (b":path", b""), GET[3]],
    "8.3.1/5 :path not starting with /": [GET[0], GET[1], (b":path", b"index.html"), GET[3]],
    "8.3.1/6 :path * for GET": [GET[0], GET[1], (b":path", b"*"), GET[3]],
    "8.3.1/7 :method twice": GET + [(b":method", b"POST")],
    "8.3.1/8 :path twice": [GET[2]] + GET,
    "8.3.1/9 :method not a token": [(b":method", b"G T")] + GET[1:],
    "8.3.1/10 host different from :authority": GET + [(b"host", b"other.example")],
    "8.3.1/11 :authority with userinfo": GET[:3] + [(b":authority", b"user@example.com")],
    "8.3.1/12 :authority with a space": GET[:3] + [(b":authority", b"example .com")],
    "8.3.1/13 host with a space": GET[:3] + [(b"host", b"a b")],
    "8.3.1/14 :path with a space": [GET[0], GET[1], (b":path", b"/a b"), GET[3]],
    "8.5/1 CONNECT with :path": [(b":method", b"CONNECT"), (b":authority", b"a:443"), (b":path", b"/")],
    "8.5/2 CONNECT without :authority": [(b":method", b"CONNECT")],
    "8.1.1/5 content-length not a number": POST + [(b"content-length", b"1x")],
    "8.1.1/6 content-length twice, different": POST + [(b"content-length", b"1"), (b"content-length", b"2")],
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_request_is_a_stream_error(case):
    conn = server()
    assert outcome(conn, headers(1, MALFORMED[case])) == stream_error(1, E.PROTOCOL_ERROR)
    assert outcome(conn, headers(3)) == ok("RequestReceived", "StreamEnded")


def test_valid_requests_and_what_they_carry():
    conn = server()
    fields = GET + [(b"cookie", b"a=1"), (b"x", b"1"), (b"cookie", b"b=2"), (b"te", b"trailers"), (b"host", b"example.com")]
    request, ended = conn.receive(headers(1, fields))
    assert (request.method, request.scheme, request.authority, request.path) == (b"GET", b"https", b"example.com", b"/")
    # §8.2.3: the cookie fields are joined, in the first one's place.
    assert request.headers == [(b"cookie", b"a=1; b=2"), (b"x", b"1"), (b"te", b"trailers"), (b"host", b"example.com")]
    assert request.end_stream and ended.stream_id == 1
    options = [(b":method", b"OPTIONS"), (b":scheme", b"http"), (b":path", b"*")]
    assert conn.receive(headers(3, options))[0].path == b"*"
    connect = conn.receive(headers(5, [(b":method", b"CONNECT"), (b":authority", b"example.com:443")], end_stream=False))[0]
    assert (connect.method, connect.scheme, connect.path, connect.authority) == (b"CONNECT", None, None, b"example.com:443")


# 3.5 HTTP/2 connection preface


def test_3_5_invalid_preface_is_refused_at_its_first_wrong_byte():
    conn = H2Connection()
    ours = sent(conn)
    assert type(ours[0]).__name__ == "SettingsFrame"  # §3.4: our preface is SETTINGS, sent first
    events = conn.receive(b"GET / HTTP/1.1\r\n")
    assert events[0].error_code == E.PROTOCOL_ERROR and not events[0].remote
    assert sent(conn)[0].error_code == E.PROTOCOL_ERROR
    assert conn.receive(PREFACE + settings()) == []  # nothing more is read


@pytest.mark.parametrize("first", [ping(), settings(ack=True), headers(1)])
def test_3_5_preface_must_be_followed_by_settings(first):
    conn = H2Connection()
    conn.data_to_send()
    assert outcome(conn, PREFACE + first) == conn_error(E.PROTOCOL_ERROR)


def test_3_5_preface_split_anywhere():
    for cut in range(1, len(PREFACE)):
        conn = H2Connection()
        assert conn.receive(PREFACE[:cut]) == []
        assert [type(e).__name__ for e in conn.receive(PREFACE[cut:] + settings())] == ["SettingsChanged"]


# 5.1.2 Stream concurrency


def test_5_1_2_streams_over_the_limit_are_refused_and_the_connection_goes_on():
    conn = server(max_concurrent_streams=2)
    assert outcome(conn, headers(1) + headers(3)) == ok("RequestReceived", "StreamEnded", "RequestReceived", "StreamEnded")
    assert outcome(conn, headers(5)) == stream_error(5, E.REFUSED_STREAM)
    # The refused stream's block was decoded (the HPACK state goes on) and a finished stream
    # frees a place.
    conn.send_headers(1, [(b":status", b"204")], end_stream=True)
    conn.data_to_send()
    assert outcome(conn, headers(7)) == ok("RequestReceived", "StreamEnded")
    assert conn.open_streams == 2


def test_5_1_2_the_limit_is_announced():
    conn = H2Connection(H2Config(max_concurrent_streams=7, initial_window_size=1000, max_frame_size=20000,
                                 max_header_list_size=3000, header_table_size=1024))
    announced = dict(sent(conn)[0].settings)
    assert announced == {0x3: 7, 0x4: 1000, 0x5: 20000, 0x6: 3000, 0x1: 1024, 0x2: 0, 0x9: 1}


# 6.5.3 Settings synchronisation, 6.9.2 initial window size


def test_6_5_3_settings_are_acknowledged_and_reported():
    conn = server()
    events = conn.receive(settings((1, 100), (4, 1000), (5, 20000), (0xF0, 3)))
    assert events[0].changed == {1: 100, 4: 1000, 5: 20000, 0xF0: 3}
    (ack,) = sent(conn)
    assert "ACK" in ack.flags and not ack.settings
    assert conn.max_outbound_frame_size == 20000


def test_6_9_2_initial_window_size_moves_open_streams_windows_even_below_zero():
    conn = server()
    conn.receive(headers(1))
    conn.send_headers(1, [(b":status", b"200")])
    assert conn.send_data(1, b"x" * 1000) == 1000
    conn.receive(settings((4, 500)))
    assert conn.send_window(1) == 0  # 500 - 1000: negative, nothing may be sent
    conn.receive(settings((4, 2000)))
    assert conn.send_window(1) == 1000


def test_6_9_our_initial_window_applies_once_acknowledged():
    # Until the client acknowledges our SETTINGS it may assume 65,535 per stream (§6.5.3).
    conn = H2Connection(H2Config(initial_window_size=16384))
    conn.receive(PREFACE + settings())
    events = conn.receive(headers(1, POST, end_stream=False) + data(1, b"x" * 16384) + data(1, b"y" * 16384))
    assert [type(e).__name__ for e in events] == ["RequestReceived", "DataReceived", "DataReceived"]
    events = conn.receive(settings(ack=True) + headers(3, POST, end_stream=False) + data(3, b"x" * 16384) + data(3, b"y"))
    assert [type(e).__name__ for e in events][-1] == "StreamReset" and events[-1].error_code == E.FLOW_CONTROL_ERROR

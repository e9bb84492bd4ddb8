"""H2Connection's API as the integrator uses it: responses, flow control both ways, resets,
informational responses, trailers, the graceful shutdown, the caller's mistakes, and that the
package stays sans-I/O."""

import subprocess
import sys

import pytest

from greenserve.http2 import (
    ErrorCode,
    H2Connection,
    LocalProtocolError,
    PingAcknowledged,
    StreamClosedError,
    StreamReset,
    WindowUpdated,
)

from tests.conftest import ROOT, subprocess_env
from tests.http2.helpers import GET, POST, data, headers, ping, rst, sent, server, settings, window_update

OK = [(b":status", b"200")]


def frame_names(frames):
    return [type(f).__name__.replace("Frame", "") for f in frames]


def test_a_response_is_one_bytes_object_of_all_streams_frames():
    conn = server()
    conn.receive(headers(1) + headers(3))
    for stream_id in (1, 3):
        conn.send_headers(stream_id, OK + [("Content-Type", "text/plain"), (b"Connection", b"close")])
        assert conn.send_data(stream_id, b"hello", end_stream=True) == 5
    out = sent(conn)
    assert frame_names(out) == ["Headers", "Data", "Headers", "Data"]
    assert conn.open_streams == 0
    assert conn.data_to_send() == b""


def test_send_data_takes_what_the_windows_allow_and_the_rest_after_window_update():
    conn = server()
    conn.receive(headers(1))
    conn.send_headers(1, OK)
    body = bytes(range(256)) * 1000  # 256,000 bytes, 65,535 of window
    taken = conn.send_data(1, body, end_stream=True)
    assert taken == 65535 and conn.send_window(1) == 0
    frames = sent(conn)
    assert [len(f.data) for f in frames[1:]] == [16384, 16384, 16384, 16383]
    assert not any("END_STREAM" in f.flags for f in frames)
    events = conn.receive(window_update(0, 300000) + window_update(1, 300000))
    assert events == [WindowUpdated(0, 300000), WindowUpdated(1, 300000)]
    assert conn.send_data(1, memoryview(body)[taken:], end_stream=True) == len(body) - taken
    frames = sent(conn)
    assert b"".join(f.data for f in frames) == body[taken:] and "END_STREAM" in frames[-1].flags
    assert conn.open_streams == 0


def test_stream_window_is_the_streams_own_without_the_connections():
    conn = server()
    conn.receive(settings((4, 100000)) + headers(1) + headers(3))
    conn.send_headers(1, OK)
    assert conn.send_data(1, b"x" * 70000) == 65535  # the connection's window is spent
    assert (conn.send_window(1), conn.stream_window(1)) == (0, 100000 - 65535)
    assert (conn.send_window(3), conn.stream_window(3)) == (0, 100000)  # waits on the connection's
    conn.receive(window_update(0, 10))
    assert (conn.send_window(3), conn.stream_window(3)) == (10, 100000)
    assert conn.stream_window(5) == 0  # (no such stream)


def test_send_data_frames_follow_the_clients_max_frame_size():
    conn = server()
    conn.receive(settings((5, 20000)) + window_update(0, 100000) + settings((4, 100000)) + headers(1))
    conn.data_to_send()
    conn.send_headers(1, OK)
    conn.send_data(1, b"x" * 50000, end_stream=True)
    assert [len(f.data) for f in sent(conn)[1:]] == [20000, 20000, 10000]


def test_an_empty_end_of_stream_needs_no_window():
    conn = server()
    conn.receive(headers(1))
    conn.send_headers(1, OK)
    conn.send_data(1, b"x" * 65535)
    assert conn.send_data(1, b"more") == 0
    conn.end_stream(1)  # §6.9.1: an empty DATA with END_STREAM may be sent with no window
    assert frame_names(sent(conn))[-1] == "Data" and conn.open_streams == 0


def test_received_data_is_given_back_once_half_a_window_is_owed():
    conn = server()
    conn.receive(headers(1, POST, end_stream=False))
    for _ in range(3):
        (event,) = conn.receive(data(1, b"x" * 10000))
        conn.acknowledge_received_data(1, len(event.data))
    assert sent(conn) == []  # 30,000 owed: less than half
    conn.receive(data(1, b"x" * 10000))
    conn.acknowledge_received_data(1, 10000)
    updates = sent(conn)
    assert sorted((f.stream_id, f.window_increment) for f in updates) == [(0, 40000), (1, 40000)]


def test_a_large_upload_streams_through_with_window_updates():
    conn = server()
    conn.receive(headers(1, POST, end_stream=False))
    received = 0
    for _ in range(640):  # 10 MB in 16 KB frames, the application reading as it comes
        for event in conn.receive(data(1, b"u" * 16384)):
            received += len(event.data)
            conn.acknowledge_received_data(1, len(event.data))
        conn.data_to_send()
    assert received == 640 * 16384 and conn.state == "open"


def test_unread_data_of_a_closed_stream_goes_back_to_the_connections_window():
    # The client sends most of the connection's window on stream 1 and resets it; the
    # application never reads (nor acknowledges) those bytes. Stream 3 must still get through.
    conn = server()
    conn.receive(headers(1, POST, end_stream=False) + data(1, b"x" * 16384) * 3 + data(1, b"x" * 16383))
    conn.receive(rst(1))
    conn.acknowledge_received_data(1, 65535)  # late, after the close: ignored
    (update,) = sent(conn)
    assert (update.stream_id, update.window_increment) == (0, 65535)
    events = conn.receive(headers(3, POST, end_stream=False) + data(3, b"y" * 16384) * 3)
    assert [type(e).__name__ for e in events] == ["RequestReceived"] + ["DataReceived"] * 3
    # The same when a response ends a stream whose body was never read (§8.1).
    conn.send_headers(3, [(b":status", b"413")], end_stream=True)
    conn.reset_stream(3, ErrorCode.NO_ERROR)
    assert [(f.stream_id, f.window_increment) for f in sent(conn) if type(f).__name__ == "WindowUpdateFrame"] == [(0, 49152)]


def test_padding_is_given_back_by_the_codec():
    conn = server()
    conn.receive(headers(1, POST, end_stream=False))
    padded = b"\x00\x00\x41\x00\x08\x00\x00\x00\x01" + b"\x3f" + b"x" + b"\0" * 63  # 1 byte + 63 of padding
    for _ in range(600):
        (event,) = conn.receive(padded)
        assert event.data == b"x" and event.flow_controlled_length == 65
        conn.acknowledge_received_data(1, 1)
    assert conn.state == "open"  # 38 KB of padding never starved the windows


def test_peer_reset_closes_the_stream_and_sending_on_it_says_so():
    conn = server()
    conn.receive(headers(1))
    events = conn.receive(rst(1, 8))
    assert events == [StreamReset(1, ErrorCode.CANCEL, True, "reset by the client")]
    with pytest.raises(StreamClosedError):
        conn.send_headers(1, OK)
    with pytest.raises(LocalProtocolError):
        conn.send_data(1, b"x")


def test_reset_stream_and_late_frames_after_it():
    conn = server()
    conn.receive(headers(1, POST, end_stream=False))
    conn.reset_stream(1)
    assert frame_names(sent(conn)) == ["RstStream"]
    assert conn.receive(data(1, b"late") + headers(1, [(b"x-trailer", b"1")])) == []
    conn.reset_stream(1)  # already closed: nothing
    assert sent(conn) == [] and conn.open_streams == 0
    assert conn.receive(headers(3))[0].stream_id == 3


def test_send_after_the_response_ended_a_request_still_uploading():
    # §8.1: a complete response before the request's end; RST_STREAM(NO_ERROR) stops the body.
    conn = server()
    conn.receive(headers(1, POST, end_stream=False))
    conn.send_headers(1, [(b":status", b"413")], end_stream=True)
    assert conn.open_streams == 1  # the client's half is still open
    conn.reset_stream(1, ErrorCode.NO_ERROR)
    assert [f.error_code for f in sent(conn)[1:]] == [0]


def test_informational_responses_then_the_final_one():
    conn = server()
    conn.receive(headers(1))
    conn.send_informational(1, [(b":status", b"103"), (b"link", b"</style.css>; rel=preload")])
    conn.send_headers(1, OK, end_stream=True)
    hints, final = sent(conn)
    assert "END_STREAM" not in hints.flags and "END_STREAM" in final.flags
    conn.receive(headers(3))
    for bad in ([(b":status", b"101")], [(b":status", b"200")], [(b"link", b"x")]):
        with pytest.raises(LocalProtocolError):
            conn.send_informational(3, bad)


def test_trailers():
    conn = server()
    conn.receive(headers(1))
    conn.send_headers(1, OK)
    conn.send_data(1, b"body")
    with pytest.raises(LocalProtocolError):
        conn.send_headers(1, [(b"grpc-status", b"0")])  # trailers must end the stream
    with pytest.raises(LocalProtocolError):
        conn.send_headers(1, [(b":status", b"200")], end_stream=True)
    conn.send_headers(1, [(b"grpc-status", b"0")], end_stream=True)
    assert frame_names(sent(conn)) == ["Headers", "Data", "Headers"]


@pytest.mark.parametrize("fields", [[], [(b"content-type", b"x")], [(b":status", b"2000")], [(b":status", b"103")],
                                    OK + [(b":path", b"/")], OK + [(b"x", b"a\r\nb")]])
def test_a_bad_response_head_is_the_callers_error(fields):
    conn = server()
    conn.receive(headers(1))
    with pytest.raises(LocalProtocolError):
        conn.send_headers(1, fields)
    assert sent(conn) == []


def test_data_before_headers_and_on_unknown_streams_are_the_callers_errors():
    conn = server()
    conn.receive(headers(1))
    with pytest.raises(LocalProtocolError):
        conn.send_data(1, b"x")
    with pytest.raises(StreamClosedError):
        conn.send_headers(7, OK)


def test_sensitive_response_fields_go_never_indexed():
    conn = server()
    conn.receive(headers(1))
    conn.send_headers(1, OK + [(b"set-cookie", b"session=secret", True)], end_stream=True)
    (frame,) = sent(conn)
    assert frame.data[1] & 0xF0 == 0x10  # after :status 200 (0x88): a never-indexed literal


def test_graceful_shutdown_in_two_steps():
    conn = server()
    conn.receive(headers(1, POST, end_stream=False))
    conn.start_graceful_shutdown()
    probe, first = sent(conn)
    assert (first.last_stream_id, first.error_code) == (2**31 - 1, 0)
    # Streams the client opened before it saw the GOAWAY are still taken.
    assert conn.receive(headers(3))[0].stream_id == 3
    events = conn.receive(ping(probe.opaque_data, ack=True))
    assert events == [PingAcknowledged(probe.opaque_data)]
    (final,) = sent(conn)
    assert (final.last_stream_id, final.error_code) == (3, 0)
    # Newer streams are refused (their block decoded all the same); older ones finish.
    (refused,) = conn.receive(headers(5))
    assert (refused.stream_id, refused.error_code, refused.remote) == (5, ErrorCode.REFUSED_STREAM, False)
    (rst,) = sent(conn)
    assert (rst.stream_id, rst.error_code) == (5, ErrorCode.REFUSED_STREAM)
    assert conn.receive(data(1, b"end", end_stream=True))[-1].stream_id == 1
    for stream_id in (1, 3):
        conn.send_headers(stream_id, OK, end_stream=True)
    assert conn.open_streams == 0 and conn.state == "going away"


def test_close_connection():
    conn = server()
    conn.receive(headers(1))
    conn.close_connection(ErrorCode.INTERNAL_ERROR, reason=b"worker stopping")
    (goaway,) = sent(conn)
    assert (goaway.last_stream_id, goaway.error_code, goaway.additional_data) == (1, 2, b"worker stopping")
    assert conn.receive(headers(3)) == [] and conn.state == "closed"


def test_the_codec_imports_no_io():
    code = (
        "import sys, greenserve.http2, greenserve.http2.connection\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('gevent', 'socket', 'ssl', 'select', 'selectors')"
        " or m.startswith(('greenserve.settings', 'greenserve.process', 'greenserve.wsgi', 'greenserve.connection',"
        " 'greenserve.entry'))]\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=subprocess_env(),
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_our_preface_comes_first():
    conn = H2Connection()
    assert frame_names(sent(conn)) == ["Settings"]
    conn.receive(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings())
    assert frame_names(sent(conn)) == ["Settings"]  # the ACK of theirs
    assert GET  # (the helpers' request, used above)

"""The limits against known HTTP/2 attacks, each with the attack's bytes (docs/http2.md, "The
codec", lists them). Each ends in GOAWAY(ENHANCE_YOUR_CALM) or the RFC's own code, and none
costs an honest client anything at the defaults."""

import pytest
from hyperframe.frame import GoAwayFrame, RstStreamFrame

from greenserve.http2 import ErrorCode, H2Config, H2Connection, RequestRejected
from greenserve.http2.frames import PREFACE

from tests.http2.helpers import (
    CONTINUATION,
    END_HEADERS,
    GET,
    HEADERS,
    PING,
    POST,
    block,
    data,
    frame,
    headers,
    outcome,
    ping,
    rst,
    sent,
    server,
    settings,
    window_update,
)

CALM = ("connection", ErrorCode.ENHANCE_YOUR_CALM)


# --- rapid reset (CVE-2023-44487) ----------------------------------------------------------------


def test_rapid_reset_beyond_the_burst_ends_the_connection():
    conn = server(reset_burst=10)
    attack = b"".join(headers(i, end_stream=False) + rst(i) for i in range(1, 22, 2))  # 11 streams
    assert outcome(conn, attack) == CALM
    assert conn.state == "closed"


def test_rapid_reset_budget_refills_with_time_and_with_completed_streams():
    conn = server(reset_burst=10, reset_rate=5.0)
    stream_id = 1
    for second in range(20):  # 5 resets a second, for 20 s: within the rate
        burst = b"".join(headers(stream_id + 2 * i, end_stream=False) + rst(stream_id + 2 * i) for i in range(5))
        stream_id += 10
        assert conn.receive(burst, now=float(second))[-1].remote
    assert conn.state == "open"
    # Without a clock, streams answered in full earn resets back one for one.
    conn = server(reset_burst=2)
    for stream_id in range(1, 400, 4):
        conn.receive(headers(stream_id))
        conn.send_headers(stream_id, [(b":status", b"204")], end_stream=True)
        conn.receive(headers(stream_id + 2, end_stream=False) + rst(stream_id + 2))
    assert conn.state == "open"
    conn.data_to_send()
    assert outcome(conn, b"".join(headers(i, end_stream=False) + rst(i) for i in range(401, 409, 2))) == CALM


def test_resets_we_are_made_to_send_count_too():
    # "MadeYouReset" (CVE-2025-8671): the client has us reset its streams by breaking a
    # stream-level rule (here a WINDOW_UPDATE of 0) instead of sending RST_STREAM itself.
    conn = server(reset_burst=10)
    attack = b"".join(headers(i, end_stream=False) + window_update(i, 0) for i in range(1, 22, 2))
    assert outcome(conn, attack) == CALM


def test_made_you_reset_past_the_bucket_is_one_goaway_and_nothing_more_is_read():
    # The report's bytes: 300 streams each made to reset by a WINDOW_UPDATE of 0 (and, after
    # the first GOAWAY, more): one GOAWAY(ENHANCE_YOUR_CALM), its last stream id the highest
    # read before it, and not a frame more for the streams that follow (§6.8: a later GOAWAY
    # could only repeat or lower it).
    conn = server()  # the defaults: a burst of 200
    attack = b"".join(headers(i, end_stream=False) + window_update(i, 0) for i in range(1, 601, 2))
    conn.data_to_send()
    events = conn.receive(attack, now=0.0)
    frames = sent(conn)
    goaways = [f for f in frames if isinstance(f, GoAwayFrame)]
    resets = [f for f in frames if isinstance(f, RstStreamFrame)]
    assert [(f.last_stream_id, f.error_code) for f in goaways] == [(401, ErrorCode.ENHANCE_YOUR_CALM)]
    assert len(resets) == 201 and resets[-1].stream_id == 401 and frames[-1] is goaways[0]
    assert type(events[-1]).__name__ == "ConnectionTerminated" and conn.state == "closed"
    assert conn.receive(headers(603, end_stream=False) + window_update(603, 0), now=1.0) == []
    assert conn.data_to_send() == b""


def test_data_on_a_half_closed_stream_is_made_you_reset_too():
    conn = server(reset_burst=10)
    attack = b"".join(headers(i) + data(i, b"x") for i in range(1, 24, 2))  # GET, then DATA after END_STREAM
    assert outcome(conn, attack) == CALM


def test_malformed_requests_end_the_connection_past_the_bucket():
    # 10,000 malformed HEADERS (no :path) on one connection: each is a stream error
    # (RST_STREAM PROTOCOL_ERROR, §8.1.1), and past the rapid-reset bucket's burst one
    # GOAWAY(ENHANCE_YOUR_CALM) ends the connection; before, 10,000 RST_STREAMs and no end.
    conn = server()
    malformed = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a")]
    attack = b"".join(headers(i, malformed) for i in range(1, 20001, 2))
    conn.data_to_send()
    conn.receive(attack, now=0.0)
    frames = sent(conn)
    resets = [f for f in frames if isinstance(f, RstStreamFrame)]
    assert len(resets) == 201 and {f.error_code for f in resets} == {ErrorCode.PROTOCOL_ERROR}
    goaways = [f for f in frames if isinstance(f, GoAwayFrame)]
    assert [(f.last_stream_id, f.error_code) for f in goaways] == [(401, ErrorCode.ENHANCE_YOUR_CALM)]
    assert frames[-1] is goaways[0]


def test_a_few_malformed_requests_a_second_are_answered_and_the_connection_goes_on():
    conn = server(reset_burst=10, reset_rate=5.0)
    malformed = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"a")]
    stream_id = 1
    for second in range(30):  # 5 a second, for 30 s: within the rate
        conn.receive(b"".join(headers(stream_id + 2 * i, malformed) for i in range(5)), now=float(second))
        stream_id += 10
    assert conn.state == "open"


def test_refused_streams_are_not_counted():
    conn = server(reset_burst=5, max_concurrent_streams=1)
    conn.receive(headers(1, POST, end_stream=False))
    for stream_id in range(3, 60, 2):  # the client races past our limit: REFUSED_STREAM each time
        conn.receive(headers(stream_id))
    assert conn.state == "open"


def test_a_goaway_after_our_final_one_does_not_raise_its_last_stream_id():
    conn = server()
    conn.receive(headers(1, POST, end_stream=False))
    conn.close_connection(last_stream_id=1)  # the final GOAWAY: NO_ERROR, last stream 1
    conn.data_to_send()
    conn.receive(headers(3) + frame(PING, 0, 0, b"\0" * 7))  # stream 3 refused, then a PING of 7 bytes
    goaways = [f for f in sent(conn) if isinstance(f, GoAwayFrame)]
    assert [(f.last_stream_id, f.error_code) for f in goaways] == [(1, ErrorCode.FRAME_SIZE_ERROR)]


def test_resets_after_the_response_are_not_rapid_resets():
    conn = server(reset_burst=3)
    for stream_id in range(1, 41, 2):  # an upload the server answered early, then cancelled
        conn.receive(headers(stream_id, POST, end_stream=False))
        conn.send_headers(stream_id, [(b":status", b"413")], end_stream=True)
        conn.receive(rst(stream_id))
    assert conn.state == "open"


# --- CONTINUATION flood (CVE-2024-27316 and kin) -------------------------------------------------


def test_a_header_block_is_bounded_before_it_is_decoded():
    conn = server(max_header_block_size=50000)
    flood = headers(1, end_headers=False) + frame(CONTINUATION, 0, 1, b"\x00" * 16000) * 3
    assert outcome(conn, flood) == ("ok", [])  # 48 KB so far, not decoded
    assert outcome(conn, frame(CONTINUATION, 0, 1, b"\x00" * 16000)) == CALM  # never reaches END_HEADERS


def test_empty_continuations_are_an_empty_frame_flood():
    conn = server(max_empty_frames=100)
    flood = headers(1, end_headers=False) + frame(CONTINUATION, 0, 1) * 101
    assert outcome(conn, flood) == CALM


def test_a_large_but_honest_header_block_in_continuations_is_fine():
    fields = GET + [(b"x-%d" % i, b"v" * 100) for i in range(300)]  # 33 KB of literal fields
    encoded = block(fields)
    frames = frame(HEADERS, 1, 1, encoded[:16384]) + frame(CONTINUATION, 0, 1, encoded[16384:32768]) + frame(
        CONTINUATION, END_HEADERS, 1, encoded[32768:])
    conn = server()
    assert outcome(conn, frames) == ("ok", ["RequestReceived", "StreamEnded"])


# --- PING and SETTINGS floods (CVE-2019-9512, CVE-2019-9515) -------------------------------------


def test_ping_flood_unread_acks_are_bounded():
    conn = server(max_queued_control_frames=100)
    assert outcome(conn, ping() * 100) == ("ok", ["PingReceived"] * 100)
    for _ in range(5):  # a client that reads our ACKs may ping as it likes
        conn.receive(ping() * 100)
        conn.data_to_send()
    assert conn.state == "open"
    assert outcome(conn, ping() * 101) == CALM


def test_settings_flood_unread_acks_are_bounded():
    conn = server(max_queued_control_frames=100)
    assert outcome(conn, settings((4, 1000)) * 101) == CALM


def test_reset_flood_we_owe_is_bounded():
    # RST_STREAM we owe for DATA on closed streams (CVE-2019-9514, reset flood).
    conn = server(max_queued_control_frames=50)
    conn.receive(b"".join(headers(i) for i in range(1, 120, 2)))
    for i in range(1, 120, 2):
        conn.send_headers(i, [(b":status", b"204")], end_stream=True)
    conn.data_to_send()
    assert outcome(conn, b"".join(data(i, b"x") for i in range(1, 120, 2))) == CALM


# --- HPACK bombs ---------------------------------------------------------------------------------


def test_a_header_list_over_the_limit_is_answered_431_and_the_connection_goes_on():
    conn = server(max_header_list_size=8000)
    # One 4,000-byte field put in the dynamic table, then named 20 times: 20 bytes of block
    # for 80 KB of header list.
    big = b"\x40\x01x\x7f\xa1\x1e" + b"v" * 4000
    request = frame(HEADERS, 5, 1, block(GET) + big + b"\xbe" * 20)
    events = conn.receive(request)
    assert events == [RequestRejected(1, 431, "decoded header list of 84870 bytes over the limit of 8000")]
    (answer,) = sent(conn)
    assert type(answer).__name__ == "HeadersFrame" and "END_STREAM" in answer.flags
    # The table kept the entry: the next request names it once and is served.
    assert outcome(conn, frame(HEADERS, 5, 3, block(GET) + b"\xbe")) == ("ok", ["RequestReceived", "StreamEnded"])


def test_a_431_stops_the_request_body():
    conn = server(max_header_list_size=200)
    conn.receive(frame(HEADERS, 4, 1, block(POST + [(b"x", b"y" * 200)])))
    answer, reset = sent(conn)
    assert type(reset).__name__ == "RstStreamFrame" and reset.error_code == ErrorCode.NO_ERROR
    assert outcome(conn, data(1, b"body", end_stream=True)) == ("ok", [])  # late DATA ignored


def test_dynamic_table_size_update_over_our_setting_is_a_compression_error():
    conn = server(header_table_size=1024)
    assert outcome(conn, frame(HEADERS, 5, 1, b"\x3f\xe2\x07" + block(GET))) == ("connection", ErrorCode.COMPRESSION_ERROR)


def test_our_smaller_table_is_enforced_once_acknowledged():
    conn = H2Connection(H2Config(header_table_size=0))
    conn.receive(PREFACE + settings() + settings(ack=True))
    conn.data_to_send()
    # The client's encoder must now say its table is 0 bytes before indexing anything.
    assert outcome(conn, frame(HEADERS, 5, 1, block(GET))) == ("connection", ErrorCode.COMPRESSION_ERROR)
    conn = H2Connection(H2Config(header_table_size=0))
    conn.receive(PREFACE + settings() + settings(ack=True))
    assert conn.receive(frame(HEADERS, 5, 1, b"\x20" + block(GET)))[0].path == b"/"


def test_bad_huffman_is_a_compression_error():
    bad = b"\x00\x84\xff\xff\xff\xff\x01a"  # a name holding EOS
    assert outcome(server(), frame(HEADERS, 5, 1, block(GET) + bad)) == ("connection", ErrorCode.COMPRESSION_ERROR)


# --- empty frames (CVE-2019-9518) ----------------------------------------------------------------


def test_empty_data_flood_ends_the_connection():
    conn = server(max_empty_frames=100)
    assert outcome(conn, headers(1, POST, end_stream=False) + data(1, b"") * 100)[0] == "ok"
    assert outcome(conn, data(1, b"")) == CALM


def test_empty_data_between_real_data_is_not_counted():
    conn = server(max_empty_frames=10)
    conn.receive(headers(1, POST, end_stream=False))
    for _ in range(20):
        assert conn.receive(data(1, b"") * 9 + data(1, b"x"))
        conn.acknowledge_received_data(1, 1)
    assert conn.receive(data(1, b"", end_stream=True))[-1].stream_id == 1
    assert conn.state == "open"


# --- concurrency ---------------------------------------------------------------------------------


def test_over_budget_streams_cost_only_their_stream():
    conn = server(max_concurrent_streams=1)
    conn.receive(headers(1, end_stream=False))
    conn.data_to_send()
    for stream_id in range(3, 200, 2):
        assert outcome(conn, headers(stream_id)) == ("stream", stream_id, ErrorCode.REFUSED_STREAM)
    assert conn.state == "open" and conn.open_streams == 1


@pytest.mark.parametrize("field, value", [("reset_burst", 0), ("max_frame_size", 16383), ("initial_window_size", 2**31),
                                          ("max_concurrent_streams", -1), ("connection_window_size", 100)])
def test_config_refuses_values_out_of_range(field, value):
    with pytest.raises(ValueError):
        H2Config(**{field: value})

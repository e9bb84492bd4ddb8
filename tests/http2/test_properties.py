"""Split anywhere: a valid client conversation gives the same events and the same bytes out
however the bytes are cut (at every single boundary, one byte at a time, random chunks)."""

import random

import h2.config
import h2.connection
from hypothesis import given, settings
from hypothesis import strategies as st

from greenserve.http2 import H2Config, H2Connection


def conversation():
    """What python-hyper's h2 sends as a client: preface, requests with bodies and trailers,
    a reset, a ping, window and priority frames, a settings change, large headers."""
    rng = random.Random(3)
    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    base = [(b":scheme", b"https"), (b":authority", b"example.com")]
    client.send_headers(1, [(b":method", b"GET"), (b":path", b"/")] + base + [(b"accept", b"*/*")], end_stream=True)
    client.send_headers(3, [(b":method", b"POST"), (b":path", b"/up")] + base + [(b"content-length", b"1500")])
    body = bytes(rng.randrange(256) for _ in range(1500))
    client.send_data(3, body[:700])
    client.send_data(3, body[700:], end_stream=True)
    client.send_headers(5, [(b":method", b"PUT"), (b":path", b"/t")] + base + [(b"te", b"trailers")])
    client.send_data(5, b"chunk", pad_length=10)
    client.send_headers(5, [(b"x-sum", b"5")], end_stream=True)
    client.ping(b"pingpong")
    client.send_headers(7, [(b":method", b"GET"), (b":path", b"/cancel")] + base)
    client.reset_stream(7)
    client.increment_flow_control_window(1000)
    client.prioritize(9, weight=32, depends_on=0)
    client.update_settings({4: 100000})
    client.send_headers(9, [(b":method", b"GET"), (b":path", b"/" + b"p" * 300)] + base + [(b"x-big", b"v" * 3000)],
                        end_stream=True)
    return client.data_to_send()


CONVERSATION = conversation()


def run(chunks):
    conn = H2Connection(H2Config(initial_window_size=32768))
    events = []
    out = [conn.data_to_send()]
    for chunk in chunks:
        events += conn.receive(chunk)
        out.append(conn.data_to_send())
    return [repr(e) for e in events], b"".join(out)


WHOLE = run([CONVERSATION])


def test_the_conversation_is_read_whole():
    events, out = WHOLE
    kinds = [e.split("(")[0] for e in events]
    assert kinds.count("RequestReceived") == 5 and kinds.count("StreamEnded") == 4
    assert "TrailersReceived" in kinds and "StreamReset" in kinds and "PingReceived" in kinds
    assert "ConnectionTerminated" not in kinds and "PriorityIgnored" in kinds


def test_split_at_every_boundary():
    for cut in range(1, len(CONVERSATION)):
        assert run([CONVERSATION[:cut], CONVERSATION[cut:]]) == WHOLE, cut


def test_one_byte_at_a_time():
    assert run([CONVERSATION[i : i + 1] for i in range(len(CONVERSATION))]) == WHOLE


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(CONVERSATION)), max_size=30))
def test_random_chunks(cuts):
    cuts = sorted(set(cuts))
    bounds = [0] + cuts + [len(CONVERSATION)]
    chunks = [CONVERSATION[a:b] for a, b in zip(bounds, bounds[1:])]
    assert run(chunks) == WHOLE

"""The frame codec against two independent implementations of RFC 6455: the ``websockets``
library (strict; its sans-I/O Protocol as a client) and ``wsproto`` (its FrameProtocol).

Their client frames (masked, fragmented, with control frames between fragments, compressed with
permessage-deflate) parse to what they sent; our server frames parse, in theirs, to what we
sent. Both are test dependencies (pyproject's ``test`` extras).
"""

import pytest

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
    frame,
)

from tests.websocket.helpers import Inflater, feed

websockets = pytest.importorskip("websockets")
wsproto_frames = pytest.importorskip("wsproto.frame_protocol")

from websockets.frames import Opcode  # noqa: E402
from websockets.protocol import Protocol, Side, State  # noqa: E402

BIG = bytes(range(256)) * 300  # 76,800 bytes: the 64-bit length form
TEXT_MESSAGE = "héllo wörld, κόσμε 𝄞 " * 10


def websockets_client(*extensions):
    client = Protocol(Side.CLIENT, state=State.OPEN, max_size=None)
    client.extensions = list(extensions)
    return client


def sent(client):
    return b"".join(client.data_to_send())


def in_reads(data, size=1000):
    return [data[i : i + size] for i in range(0, len(data), size)]


EXPECTED = [
    Message(TEXT_MESSAGE),
    Message(BIG),
    Ping(b"between"),
    Message("fragmented message"),
    Pong(b"unsolicited"),
    Message(b""),
    Close(1001, "going away"),
]


def test_websockets_client_frames_parse_to_what_it_sent():
    client = websockets_client()
    client.send_text(TEXT_MESSAGE.encode())
    client.send_binary(BIG)
    client.send_text("fragmented ".encode(), fin=False)
    client.send_ping(b"between")
    client.send_continuation("message".encode(), fin=True)
    client.send_pong(b"unsolicited")
    client.send_binary(b"")
    client.send_close(1001, "going away")
    data = sent(client)
    assert data[1] & 0x80  # masked, as a client must
    assert feed(in_reads(data)) == (EXPECTED, None)
    assert feed(in_reads(data, 7)) == (EXPECTED, None)


def test_wsproto_client_frames_parse_to_what_it_sent():
    client = wsproto_frames.FrameProtocol(client=True, extensions=[])
    data = b"".join(
        bytes(piece)
        for piece in [
            client.send_data(TEXT_MESSAGE),
            client.send_data(BIG),
            client.send_data("fragmented ", fin=False),
            client.ping(b"between"),
            client.send_data("message", fin=True),
            client.pong(b"unsolicited"),
            client.send_data(b""),
            client.close(1001, "going away"),
        ]
    )
    assert feed(in_reads(data)) == (EXPECTED, None)


def test_websockets_compressed_messages_go_through_the_inflater():
    from websockets.extensions.permessage_deflate import PerMessageDeflate

    # No context takeover: each message inflates on its own (the stand-in keeps no context).
    client = websockets_client(PerMessageDeflate(True, True, 15, 15))
    client.send_text(TEXT_MESSAGE.encode())
    client.send_binary(BIG)
    client.send_text(b"frag", fin=False)
    client.send_ping(b"p")
    client.send_continuation(b"mented", fin=True)
    data = sent(client)
    assert data[0] & 0x40  # RSV1: compressed
    inflater = Inflater()
    events, error = feed(in_reads(data), inflater=inflater)
    assert error is None
    assert events == [Message(TEXT_MESSAGE), Message(BIG), Ping(b"p"), Message("fragmented")]
    assert len(inflater.calls) == 3


def our_server_frames():
    return b"".join([
        frame(TEXT, TEXT_MESSAGE.encode()),
        frame(BINARY, BIG),
        frame(TEXT, b"fragmented ", fin=False),
        frame(PING, b"between"),
        frame(CONTINUATION, b"message"),
        frame(PONG, b"unsolicited"),
        frame(CLOSE, close_payload(1001, "going away")),
    ])


def test_our_server_frames_parse_in_websockets_to_what_we_sent():
    client = websockets_client()
    client.receive_data(our_server_frames())
    frames = [(f.opcode, bytes(f.data), f.fin) for f in client.events_received()]
    assert frames == [
        (Opcode.TEXT, TEXT_MESSAGE.encode(), True),
        (Opcode.BINARY, BIG, True),
        (Opcode.TEXT, b"fragmented ", False),
        (Opcode.PING, b"between", True),
        (Opcode.CONT, b"message", True),
        (Opcode.PONG, b"unsolicited", True),
        (Opcode.CLOSE, close_payload(1001, "going away"), True),
    ]
    assert client.close_rcvd.code == 1001 and client.close_rcvd.reason == "going away"


def test_our_server_frames_parse_in_wsproto_to_what_we_sent():
    client = wsproto_frames.FrameProtocol(client=True, extensions=[])
    client.receive_bytes(our_server_frames())
    frames = [(f.opcode, f.payload, f.message_finished) for f in client.received_frames()]
    opcode = wsproto_frames.Opcode
    assert frames == [
        (opcode.TEXT, TEXT_MESSAGE, True),
        (opcode.BINARY, BIG, True),
        (opcode.TEXT, "fragmented ", False),
        (opcode.PING, b"between", True),
        (opcode.TEXT, "message", True),  # wsproto names a continuation by its message's opcode
        (opcode.PONG, b"unsolicited", True),
        (opcode.CLOSE, (1001, "going away"), True),
    ]

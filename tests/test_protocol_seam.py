"""The seam between a connection and the protocol that speaks on it (docs/architecture.md,
"The protocol seam"): a second protocol plugs in through ``WSGIServer.choose_protocol`` without
touching HTTP/1.1, and a chooser may read the peer's first bytes to pick one (as h2c's prior
knowledge will)."""

import socket
import time

import pytest

from greenserve import WSGIServer
from greenserve.connection import DRAIN_WINDOW, Protocol
from greenserve.http11 import Http11Protocol
from greenserve.wsgi import ConnectionIO
from tests.conftest import Client, ServerThread, hello_app, wait_until

WAIT = 5


def _methods(cls):
    return {name for name, value in vars(cls).items() if callable(value) and not name.startswith("_")}


def test_the_http11_protocol_implements_the_declared_protocol_and_the_responders_io():
    # Protocol is a declaration a compiled protocol cannot inherit (its one base is ConnectionIO):
    # nothing but this test holds the two to the same method names.
    for name in sorted(_methods(Protocol) | _methods(ConnectionIO)):
        assert callable(getattr(Http11Protocol, name, None)), name


def test_the_http2_protocol_and_its_streams_implement_the_seam():
    from greenserve.http2_protocol import Http2Protocol, Stream

    for name in sorted(_methods(Protocol)):
        assert callable(getattr(Http2Protocol, name, None)), name
    # Every method of the responder's I/O is the stream's own (none left to ConnectionIO's
    # NotImplementedError).
    for name in sorted(_methods(ConnectionIO)):
        assert name in vars(Stream), name


class LineEcho:
    """A second protocol, in plain Python on either build's connection: each line comes back
    in capitals. It uses only what the seam offers: receive, recv_buffer's view, out, flush,
    idle, head_deadline, keepalive."""

    seen = []

    def __init__(self, connection):
        self.connection = connection

    def serve(self, early):
        connection = self.connection
        connection.head_deadline = 0.0  # its opening is done: no head under header_timeout
        pending = early
        while True:
            while b"\n" in pending:
                line, _, pending = pending.partition(b"\n")
                connection.out.append(line.upper() + b"\n")
            if connection.out:
                connection.flush()
            connection.idle = True  # waiting for the peer: a stop may close it once quiet
            try:
                received = connection.receive(connection.keepalive, True)
            except socket.timeout:  # the keep-alive wait ended, or a stop closed it
                return
            if not received:
                return
            connection.idle = False
            pending += bytes(connection.server.recv_view[:received])

    def going_away(self):
        self.seen.append("going_away")

    def expire_request(self, now):
        self.connection.request_deadline = 0.0

    def close(self):
        self.seen.append("close")


def _choose_by_first_bytes(connection):
    """Pick the protocol from what the peer sends first, read before any protocol runs (the
    chooser's read lands in the server's shared buffer: it keeps a copy in ``early``)."""
    received = connection.receive(connection.header_timeout)
    connection.early = bytes(connection.server.recv_view[:received])
    if connection.early.startswith(b"ECHO\n"):
        connection.early = connection.early[5:]
        return LineEcho(connection)
    return Http11Protocol(connection)


@pytest.fixture
def echo_server(monkeypatch):
    LineEcho.seen = []
    monkeypatch.setattr(WSGIServer, "choose_protocol", staticmethod(_choose_by_first_bytes))
    servers = []

    def start(**settings):
        server = ServerThread(hello_app, **settings).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def _recv_until(sock, end):
    data = b""
    while not data.endswith(end):
        piece = sock.recv(4096)
        if not piece:
            break
        data += piece
    return data


def test_a_second_protocol_plugs_in_through_choose_protocol(echo_server):
    server = echo_server()
    with socket.create_connection(server.address, timeout=WAIT) as sock:
        sock.sendall(b"ECHO\nhello\nwor")
        assert _recv_until(sock, b"HELLO\n") == b"HELLO\n"
        sock.sendall(b"ld\n")
        assert _recv_until(sock, b"WORLD\n") == b"WORLD\n"
    wait_until(lambda: LineEcho.seen == ["close"], WAIT, "the protocol's close")
    assert server.errors.getvalue() == ""


def test_http11_takes_the_bytes_a_chooser_read_first(echo_server):
    # What the chooser read is HTTP/1.1's first bytes (Protocol.serve's ``early``): the request
    # in them is answered, and so is the next one on the same connection.
    server = echo_server()
    client = Client(server.address)
    for _ in range(2):
        response = client.get("/")
        assert (response.status, response.body) == (200, b"Hello, World!")
    client.close()
    assert server.errors.getvalue() == ""


def test_a_graceful_stop_tells_the_protocol_and_closes_an_idle_connection(echo_server):
    server = echo_server()
    with socket.create_connection(server.address, timeout=WAIT) as sock:
        sock.sendall(b"ECHO\nping\n")
        assert _recv_until(sock, b"PING\n") == b"PING\n"
        stopping = time.monotonic()
        server.stop(5)
        assert sock.recv(16) == b""  # closed once quiet for the drain window
        assert time.monotonic() - stopping < DRAIN_WINDOW + 3
    # (A stop may say so more than once: serve_forever's own stop follows the first.)
    assert set(LineEcho.seen[:-1]) == {"going_away"} and LineEcho.seen[-1] == "close"

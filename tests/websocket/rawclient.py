"""A raw WebSocket client for tests against a server: the handshake and every frame by hand.

Client frames are tests/websocket/helpers.py's ``client_frame`` (every header field settable);
server frames are read here, strictly: one that is masked, or has RSV bits, fails the test.
"""

import os
import socket
import struct

from tests.websocket.helpers import client_frame

KEY = "dGhlIHNhbXBsZSBub25jZQ=="
ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 §1.3's example
CONTINUATION, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def handshake_request(path="/", key=KEY, version="13", extra=()):
    lines = [
        "GET %s HTTP/1.1" % path,
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
    ]
    if key is not None:
        lines.append("Sec-WebSocket-Key: %s" % key)
    if version is not None:
        lines.append("Sec-WebSocket-Version: %s" % version)
    lines.extend("%s: %s" % field for field in extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def close_body(code, reason=b""):
    return struct.pack("!H", code) + reason


class RawWebSocket:
    """A socket that did the handshake; ``read_frame()`` returns (fin, opcode, payload)."""

    def __init__(self, address, path="/", early=b"", timeout=10, **request):
        self.sock = socket.create_connection(address, timeout=timeout)
        self.buffer = b""
        self.rsv1 = False  # the last frame read had RSV1 (only once permessage-deflate is agreed)
        self.sock.sendall(handshake_request(path, **request) + early)
        self.head = self._read_head()

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection")
        self.buffer += data

    def _read_head(self):
        while b"\r\n\r\n" not in self.buffer:
            self._fill()
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        return head.decode("latin-1")

    @property
    def status(self):
        return int(self.head.split(" ", 2)[1])

    def header(self, name):
        for line in self.head.split("\r\n")[1:]:
            field, _, value = line.partition(":")
            if field.strip().lower() == name.lower():
                return value.strip()
        return None

    def _exact(self, n):
        while len(self.buffer) < n:
            self._fill()
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_frame(self):
        first, second = self._exact(2)
        deflate = self.header("Sec-WebSocket-Extensions") or ""
        allowed = 0x40 if deflate.startswith("permessage-deflate") else 0
        assert not first & 0x70 & ~allowed, "RSV bits set in a server frame: %#x" % first
        self.rsv1 = bool(first & 0x40)
        assert not second & 0x80, "a server frame must not be masked (RFC 6455 §5.1)"
        n = second & 0x7F
        if n == 126:
            (n,) = struct.unpack("!H", self._exact(2))
        elif n == 127:
            (n,) = struct.unpack("!Q", self._exact(8))
        return bool(first & 0x80), first & 0x0F, self._exact(n)

    def read_message(self):
        """The next data message (opcode, payload), its frames joined; control frames skipped."""
        parts = []
        opcode = None
        while True:
            fin, op, payload = self.read_frame()
            if op >= CLOSE:
                continue
            if opcode is None:
                opcode = op
            parts.append(payload)
            if fin:
                return opcode, b"".join(parts)

    def read_close(self):
        """Frames up to the server's Close; its (code or None, reason bytes)."""
        while True:
            _fin, opcode, payload = self.read_frame()
            if opcode == CLOSE:
                if not payload:
                    return None, b""
                return struct.unpack("!H", payload[:2])[0], payload[2:]

    def send(self, data):
        self.sock.sendall(data)

    def send_frame(self, opcode, payload=b"", **kwargs):
        self.sock.sendall(client_frame(opcode, payload, key=os.urandom(4), **kwargs))

    def at_eof(self, timeout=5):
        """True when the server closes the TCP connection (FIN, after any remaining bytes)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


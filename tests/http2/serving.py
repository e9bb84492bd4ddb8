"""What the tests of HTTP/2 served on real sockets share: the applications, a certificate, and a
client over one socket (python-hyper's h2, the oracle the codec's tests use too) that can also
write frames by hand where h2 would refuse to (a stream opened after a GOAWAY)."""

import json
import shutil
import socket
import ssl
import subprocess
import time

import gevent
import pytest

WAIT = 10


# --- applications -------------------------------------------------------------------------------


def app(environ, start_response):
    """/slow sleeps 2 s; /echo returns the body it read; /stream streams 5 chunks; /environ
    answers JSON of the keys the tests look at; /status/NNN answers NNN; / says hello."""
    path = environ["PATH_INFO"]
    if path == "/slow":
        gevent.sleep(float(environ["QUERY_STRING"] or 2))
    elif path == "/echo":
        return _echo(environ, start_response)
    elif path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return (b"chunk %d\n" % index for index in range(5))
    elif path == "/environ":
        keys = ("SERVER_PROTOCOL", "HTTP_HOST", "REMOTE_ADDR", "REMOTE_PORT", "CONTENT_TYPE", "CONTENT_LENGTH",
                "HTTP_X_FORWARDED_FOR", "HTTP_X_CUSTOM", "REQUEST_METHOD", "PATH_INFO", "QUERY_STRING",
                "wsgi.url_scheme", "HTTP_COOKIE")
        body = json.dumps({key: environ.get(key) for key in keys}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]
    elif path == "/big":
        # int(QUERY_STRING) bytes in 64 KiB chunks, each byte the stream's own pattern.
        size = int(environ["QUERY_STRING"])
        seed = environ.get("HTTP_X_SEED", "0").encode()
        start_response("200 OK", [("Content-Type", "application/octet-stream")])
        return _big(size, seed)
    elif path == "/fail-midway":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return _fail_midway()
    elif path == "/short":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "100")])
        return [b"only 19 bytes of it"]
    elif path.startswith("/status/"):
        start_response(path[8:] + " Status", [("Content-Type", "text/plain")])
        return [b"body the server drops for a status without one"]
    body = b"Hello, World!"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def _fail_midway():
    yield b"the first part"
    raise RuntimeError("the application failed after its head (a test)")


def big_body(size, seed):
    pattern = (seed * 65536)[:65536]
    return (pattern * (size // 65536 + 1))[:size]


def _big(size, seed):
    body = big_body(size, seed)
    for start in range(0, size, 65536):
        yield body[start : start + 65536]


def _echo(environ, start_response):
    # The server's CPU for the body (this server thread's, from the application's start: the
    # frames are read in the same thread, between the application's reads).
    started = time.thread_time()
    stream = environ["wsgi.input"]
    size = 0
    pieces = []
    while True:
        piece = stream.read(65536)
        if not piece:
            break
        size += len(piece)
        pieces.append(piece)
    body = b"".join(pieces)
    cpu = time.thread_time() - started
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("X-Size", str(size)),
                              ("X-CPU", "%.3f" % cpu)])
    return [body]


# --- a certificate -----------------------------------------------------------------------------


def make_certificate(folder):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        check=True, capture_output=True,
    )
    return cert, key


def client_context(cert):
    context = ssl.create_default_context(cafile=cert)
    context.set_alpn_protocols(["h2", "http/1.1"])
    return context


# --- a client ----------------------------------------------------------------------------------


class Response:
    def __init__(self):
        self.headers = None
        self.informational = []
        self.data = bytearray()
        self.ended = False
        self.reset = None  # the error code of a RST_STREAM

    @property
    def status(self):
        return int(dict(self.headers)[b":status"]) if self.headers else None

    def header(self, name):
        return dict(self.headers).get(name)


class H2Client:
    """One HTTP/2 connection from the test's thread: requests, and the server's answers read
    as they come (``wait``), each stream's in ``responses``; connection-level events in
    ``events``. ``window``: our initial stream window (0: the server may send no DATA until
    we open it)."""

    def __init__(self, address, context=None, window=None, preamble=b"", auto_window=True):
        import h2.config
        import h2.connection
        import h2.settings

        sock = socket.create_connection(address, timeout=WAIT)
        if preamble:
            sock.sendall(preamble)
        if context is not None:
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
            assert sock.selected_alpn_protocol() == "h2"
        self.sock = sock
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
        self.conn.initiate_connection()
        if window is not None:
            self.conn.update_settings({h2.settings.SettingCodes.INITIAL_WINDOW_SIZE: window})
        self.auto_window = auto_window
        self.responses = {}
        self.events = []
        self.closed = False
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def request(self, path, method="GET", body=None, headers=(), end=True, authority="127.0.0.1"):
        stream_id = self.conn.get_next_available_stream_id()
        fields = [(":method", method), (":scheme", "https"), (":path", path), (":authority", authority)]
        fields += list(headers)
        self.conn.send_headers(stream_id, fields, end_stream=end and body is None)
        self.responses[stream_id] = Response()
        self.flush()
        if body is not None:
            self.send_body(stream_id, body, end)
        return stream_id

    def send_body(self, stream_id, body, end=True):
        """Send ``body`` as the windows allow, reading the server's WINDOW_UPDATEs meanwhile."""
        view = memoryview(body)
        while view:
            size = min(self.conn.local_flow_control_window(stream_id), self.conn.max_outbound_frame_size, len(view))
            if size <= 0:
                self.read()
                continue
            self.conn.send_data(stream_id, view[:size].tobytes())
            view = view[size:]
            self.flush()
        if end:
            self.conn.end_stream(stream_id)
            self.flush()

    def read(self, timeout=WAIT):
        """Read what the server sent next (at most ``timeout`` seconds); False once it closed."""
        import h2.events

        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            return True
        if not data:
            self.closed = True
            return False
        for event in self.conn.receive_data(data):
            response = self.responses.get(getattr(event, "stream_id", None))
            if isinstance(event, h2.events.ResponseReceived):
                response.headers = event.headers
            elif isinstance(event, h2.events.InformationalResponseReceived):
                response.informational.append(event.headers)
            elif isinstance(event, h2.events.DataReceived):
                response.data += event.data
                if self.auto_window:
                    self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
            elif isinstance(event, h2.events.StreamEnded):
                response.ended = True
            elif isinstance(event, h2.events.StreamReset):
                if response is not None:
                    response.reset = event.error_code
                else:
                    self.events.append(event)
            else:
                self.events.append(event)
        self.flush()
        return True

    def wait(self, condition, timeout=WAIT, what="the server's answer"):
        deadline = time.monotonic() + timeout
        while not condition():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError("no %s within %s s" % (what, timeout))
            if not self.read(remaining) and not condition():
                raise AssertionError("the server closed the connection before %s" % what)

    def response(self, stream_id, timeout=WAIT):
        response = self.responses[stream_id]
        self.wait(lambda: response.ended or response.reset is not None, timeout, "stream %d's end" % stream_id)
        return response

    def get(self, path, **kwargs):
        return self.response(self.request(path, **kwargs))

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def raw_headers(stream_id, path):
    """A HEADERS frame opening ``stream_id`` (literal fields, so the server's HPACK table is not
    changed), for what h2 refuses to send (a stream after the server's GOAWAY)."""
    from tests.http2.helpers import headers

    fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", path), (b":authority", b"127.0.0.1")]
    return headers(stream_id, fields)


class FrameReader:
    """The server's frames read one by one off a socket (hyperframe's reading of them), for the
    tests that speak HTTP/2 by hand."""

    def __init__(self, sock):
        self.sock = sock
        self.buffer = b""

    def _read(self, size, deadline):
        while len(self.buffer) < size:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise EOFError("the server closed the connection")
            self.buffer += data
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def next(self, timeout=WAIT):
        from hyperframe.frame import Frame

        deadline = time.monotonic() + timeout
        frame, length = Frame.parse_frame_header(memoryview(self._read(9, deadline)))
        frame.parse_body(memoryview(self._read(length, deadline)))
        return frame

    def until(self, predicate, timeout=WAIT):
        """Frames until one that ``predicate`` accepts (returned last)."""
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            frame = self.next(max(0.01, deadline - time.monotonic()))
            seen.append(frame)
            if predicate(frame):
                return seen


def hpack_fields(frames):
    """The fields of the first HEADERS frame among ``frames`` (a block that fits one frame)."""
    import hpack

    block = next(bytes(f.data) for f in frames if type(f).__name__ == "HeadersFrame")
    return hpack.Decoder().decode(block, raw=True)

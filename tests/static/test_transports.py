"""--static over each way a body leaves: HTTP/2 (h2c by prior knowledge, and over TLS by ALPN) with
a file larger than the initial flow-control window, TLS without sendfile, --no-sendfile; a 100 MiB
sparse file with the worker's peak memory bounded; WSGIServer(static=...) from Python. Real
clients: curl (HTTP/1.1 and HTTP/2) against the command, the h1 test client in-process."""

import os
import subprocess

import pytest

from tests.conftest import Client, CLIServer, ServerThread, children_of, hello_app, wait_until
from tests.http2.serving import make_certificate

BIG = os.urandom(3 * 65535 + 1234)  # three initial HTTP/2 windows and some
APP = '''
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"app"]
'''
SPARSE_SIZE = 100 * 1024 * 1024


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    (root / "static").mkdir()
    (root / "app.py").write_text(APP)
    (root / "static" / "big.bin").write_bytes(BIG)
    with open(root / "static" / "sparse.bin", "wb") as f:
        f.truncate(SPARSE_SIZE)  # 100 MiB of zeros, no disk blocks
    return root


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return make_certificate(tmp_path_factory.mktemp("cert"))


def start(site, *flags):
    server = CLIServer("--static", "/static=static", "--workers", "1", *flags, "app:app", cwd=str(site))
    server.wait_ready()
    return server


def curl(*args):
    result = subprocess.run(["curl", "-s", "--max-time", "60", *args], capture_output=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


def head_and_body(output):
    head, _, body = output.partition(b"\r\n\r\n")
    return head.decode("latin-1").lower(), body


def test_h2c_prior_knowledge_past_the_initial_window(site):
    server = start(site, "--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge")
    try:
        head, body = head_and_body(curl("--http2-prior-knowledge", "-i", server.url + "/static/big.bin"))
        assert head.startswith("http/2 200") and body == BIG
        head, body = head_and_body(curl("--http2-prior-knowledge", "-i", "-r", "70000-70009",
                                        server.url + "/static/big.bin"))
        assert head.startswith("http/2 206") and body == BIG[70000:70010]
        etag = [line for line in head.splitlines() if line.startswith("etag:")][0].split(":", 1)[1].strip()
        head, body = head_and_body(curl("--http2-prior-knowledge", "-i", "-H", "If-None-Match: " + etag,
                                        server.url + "/static/big.bin"))
        assert head.startswith("http/2 304") and body == b""
        head = curl("--http2-prior-knowledge", "-I", server.url + "/static/big.bin").decode().lower()
        assert head.startswith("http/2 200") and "content-length: %d" % len(BIG) in head
        head, _ = head_and_body(curl("--http2-prior-knowledge", "-i", "-X", "POST", server.url + "/static/big.bin"))
        assert head.startswith("http/2 405") and "allow: get, head" in head
    finally:
        server.stop()


def test_tls_http1_and_http2(site, certificate):
    cert, key = certificate
    server = start(site, "--certfile", cert, "--keyfile", key, "--http-protocols", "h2,h1")
    url = "https://127.0.0.1:%d/static/big.bin" % server.port
    try:
        head, body = head_and_body(curl("--cacert", cert, "--http1.1", "-i", url))
        assert head.startswith("http/1.1 200") and body == BIG
        head, body = head_and_body(curl("--cacert", cert, "--http1.1", "-i", "-r", "100000-", url))
        assert head.startswith("http/1.1 206") and body == BIG[100000:]
        head, body = head_and_body(curl("--cacert", cert, "--http2", "-i", url))
        assert head.startswith("http/2 200") and body == BIG
    finally:
        server.stop()


def test_without_sendfile(site):
    server = start(site, "--no-sendfile")
    try:
        with Client(("127.0.0.1", server.port)) as client:
            client.request("GET", "/static/big.bin", headers=[("Range", "bytes=1-200000")])
            response = client.read_response()
            assert (response.status, response.body) == (206, BIG[1:200001])
            client.request("GET", "/static/big.bin")  # the same connection goes on
            assert client.read_response().body == BIG
    finally:
        server.stop()


def _peak_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM for %d" % pid)


@pytest.mark.parametrize("transport", ["sendfile", "tls"])
def test_a_100_mib_file_costs_no_more_memory(site, certificate, transport):
    cert, key = certificate
    flags = ("--certfile", cert, "--keyfile", key) if transport == "tls" else ()
    server = start(site, *flags)
    scheme = "https" if transport == "tls" else "http"
    url = "%s://127.0.0.1:%d/static/sparse.bin" % (scheme, server.port)
    try:
        curl("--cacert", cert, "-r", "0-99", url)  # the worker has served a static file once
        (worker,) = children_of(server.process.pid)
        before = _peak_rss_kib(worker)
        output = subprocess.run(["curl", "-s", "--cacert", cert, "-o", "/dev/null", "-w", "%{http_code} %{size_download}",
                                 url], capture_output=True, text=True, timeout=120).stdout
        assert output == "200 %d" % SPARSE_SIZE
        grown = _peak_rss_kib(worker) - before
        assert grown < 16 * 1024, "the worker's peak RSS grew by %d KiB sending 100 MiB" % grown
    finally:
        server.stop()


def test_wsgiserver_static_keyword(site):
    server = ServerThread(hello_app, static={"/static": str(site / "static")}, static_max_age=5).start()
    try:
        with Client(server.address) as client:
            client.request("GET", "/static/big.bin", headers=[("Range", "bytes=0-9")])
            response = client.read_response()
            assert (response.status, response.body) == (206, BIG[:10])
            assert response.header("Cache-Control") == "public, max-age=5"
            client.request("GET", "/other")
            assert client.read_response().body == b"Hello, World!"
        wait_until(lambda: len(server.access.getvalue().splitlines()) == 2, 10, "two access-log lines")
        first, second = server.access.getvalue().splitlines()
        assert first.endswith(" static") and not second.endswith(" static")
    finally:
        server.stop()


class _Broken:
    @property
    def prefix(self):
        raise RuntimeError("a fault in the static path")


def test_a_fault_in_the_static_path_is_a_500_and_a_traceback(site):
    # Not a connection closed without a word (found when a typing mistake in static.pxd raised
    # TypeError in Static.answer): the client gets a 500, the error log the traceback, and the
    # connection serves on.
    server = ServerThread(hello_app, static={"/static": str(site / "static")}).start()
    server.server.static.mounts = [_Broken()]  # (the same Static the connections are given)
    try:
        with Client(server.address) as client:
            client.request("GET", "/static/big.bin")
            response = client.read_response()
            assert response.status == 500 and response.body == b"Internal Server Error\n"
            client.request("GET", "/other")
            assert client.read_response().body == b"Hello, World!"
        wait_until(lambda: "a fault in the static path" in server.errors.getvalue(), 10, "the traceback")
        assert "Error handling request GET /static/big.bin" in server.errors.getvalue()
    finally:
        server.stop()


def test_wsgiserver_refuses_a_missing_directory(tmp_path):
    from greenserve import WSGIServer

    with pytest.raises(ValueError, match="no such directory"):
        WSGIServer(("127.0.0.1", 0), hello_app, static={"/static": str(tmp_path / "nowhere")})


def _data_segments_received(sock):
    """tcpi_data_segs_in of a Linux socket's TCP_INFO (struct tcp_info, offset 152): segments
    that carried data, as the kernel counted them."""
    import socket
    import struct

    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 232)
    if len(info) < 156:
        pytest.skip("this kernel's TCP_INFO has no tcpi_data_segs_in (Linux 4.6+)")
    return struct.unpack_from("I", info, 152)[0]


def test_a_small_files_head_and_body_leave_in_one_segment(site):
    # The head is sent with MSG_MORE before the sendfile: one packet a response, as nginx's
    # tcp_nopush, not a head on its own then the file (measured: 1 KiB and 10 KiB files at 0.63
    # and 0.48 of nginx's rate, 0.87 and 0.86 with it; bench/static.py).
    import socket

    (site / "static" / "small.txt").write_bytes(b"s" * 1024)
    server = ServerThread(hello_app, static={"/static": str(site / "static")}).start()
    try:
        with socket.create_connection(server.address, timeout=10) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(20):
                sock.sendall(b"GET /static/small.txt HTTP/1.1\r\nHost: x\r\n\r\n")
                received = b""
                while not (b"\r\n\r\n" in received and len(received.split(b"\r\n\r\n", 1)[1]) >= 1024):
                    chunk = sock.recv(65536)
                    assert chunk, received
                    received += chunk
                assert received.startswith(b"HTTP/1.1 200 OK\r\n")
            assert _data_segments_received(sock) == 20
    finally:
        server.stop()


def test_small_files_to_a_client_that_reads_late_arrive_whole_and_in_order(site):
    # Each request arrives on its own (not pipelined in one read), so each response is a head
    # and a 10 KiB body the hub sends in one sendmsg. The client reads nothing until the end and
    # the server's send buffer is fixed small (the listener's SO_SNDBUF, which its connections
    # inherit), so those sends fill up and are partial: the rest must follow, in order.
    import socket
    import time

    files = {}
    for number in range(30):
        data = os.urandom(10 * 1024 - number)
        files[number] = data
        (site / "static" / ("s%d.bin" % number)).write_bytes(data)
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    server = ServerThread(hello_app, listener=listener, static={"/static": str(site / "static")}).start()
    try:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # (before connect: the window)
        sock.settimeout(10)
        sock.connect(server.address)
        with Client.__new__(Client) as client:
            client.sock, client.buffer = sock, bytearray()
            for number in files:
                client.request("GET", "/static/s%d.bin" % number)
                time.sleep(0.01)
            for number, data in files.items():
                response = client.read_response()
                assert (response.status, response.body) == (200, data), number
    finally:
        server.stop()


def test_a_large_file_leaves_in_chunks_that_let_the_loop_run(site, monkeypatch):
    # A reader as fast as the sender (loopback, a fast network) keeps the socket writable, so
    # one sendfile call for the whole file held the worker's loop until the file had gone, and
    # every other request on the worker waited (docs/performance.md, "Static files"). Between two
    # polls of the loop (the hub's loop.iteration) a response sends at most _SENDFILE_CHUNK.
    import socket

    import gevent

    from greenserve import connection

    calls = []  # (the loop's iteration, bytes sent)
    real_sendfile = os.sendfile

    def recording_sendfile(out_fd, in_fd, offset, count):
        try:
            sent = real_sendfile(out_fd, in_fd, offset, count)
        except BlockingIOError:
            sent = 0
        calls.append((gevent.get_hub().loop.iteration, sent))
        if not sent:
            raise BlockingIOError()
        return sent

    monkeypatch.setattr(os, "sendfile", recording_sendfile)
    server = ServerThread(hello_app, static={"/static": str(site / "static")}).start()
    try:
        with socket.create_connection(server.address, timeout=30) as sock:
            sock.sendall(b"GET /static/sparse.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            received = bytearray()
            while True:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                received += chunk
        head, _, body = bytes(received).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and len(body) == SPARSE_SIZE and not body.strip(b"\0")
    finally:
        server.stop()
    per_turn = {}
    for iteration, sent in calls:
        per_turn[iteration] = per_turn.get(iteration, 0) + sent
    assert sum(per_turn.values()) == SPARSE_SIZE
    assert max(per_turn.values()) <= connection._SENDFILE_CHUNK == 2 << 20, sorted(per_turn.values())[-3:]
    assert len(per_turn) >= SPARSE_SIZE // connection._SENDFILE_CHUNK


@pytest.mark.parametrize("transport", ["no-sendfile", "tls"])
def test_a_large_file_read_in_pieces_lets_the_loop_poll(site, certificate, transport, monkeypatch):
    # Without sendfile (TLS, --no-sendfile) a file is read and sent in pieces; a reader as fast
    # as loopback never fills the socket, so without a pause the response held the worker's loop
    # until its whole file had gone, as one sendfile call did. Between two polls of the loop (the
    # hub's loop.iteration) a response reads at most 2 MiB and a piece.
    import socket
    import ssl

    import gevent

    reads = []  # (the loop's iteration, bytes read)
    real_pread = os.pread

    def recording_pread(fd, count, offset):
        data = real_pread(fd, count, offset)
        reads.append((gevent.get_hub().loop.iteration, len(data)))
        return data

    monkeypatch.setattr(os, "pread", recording_pread)
    kwargs = {"static": {"/static": str(site / "static")}}
    if transport == "tls":
        kwargs.update(certfile=certificate[0], keyfile=certificate[1])
    else:
        kwargs["sendfile"] = False
    server = ServerThread(hello_app, **kwargs).start()
    try:
        raw = socket.create_connection(server.address, timeout=60)
        if transport == "tls":
            context = ssl.create_default_context()
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
            raw = context.wrap_socket(raw)
        with raw as sock:
            sock.sendall(b"GET /static/sparse.bin HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            length = 0
            while True:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                length += len(chunk)
    finally:
        server.stop()
    per_turn = {}
    for iteration, read in reads:
        per_turn[iteration] = per_turn.get(iteration, 0) + read
    assert sum(per_turn.values()) == SPARSE_SIZE and length > SPARSE_SIZE
    # (wsgi's _POLL_EVERY and _FILE_PIECE: C constants in the compiled build)
    assert max(per_turn.values()) <= (2 << 20) + 262144, sorted(per_turn.values())[-3:]
    assert len(per_turn) >= SPARSE_SIZE // (2 << 20)

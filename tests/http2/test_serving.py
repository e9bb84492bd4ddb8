"""HTTP/2 served on real sockets (docs/http2.md, "Serving HTTP/2"): ALPN over TLS and h2c by
prior knowledge, streams side by side, WSGI per stream, limits, deadlines, a graceful stop, with
real clients (curl, nghttp, h2load, httpx) and python-hyper's h2 for what they cannot do."""

import json
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from greenserve.http2.frames import PREFACE
from tests.conftest import ServerThread, wait_until
from tests.http2.helpers import GOAWAY, RST_STREAM, WINDOW_UPDATE, frame, headers as headers_frame, settings
from tests.http2.serving import WAIT, FrameReader, H2Client, app, client_context, hpack_fields, make_certificate, raw_headers

REFUSED_STREAM = 0x7
CANCEL = 0x8


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return make_certificate(tmp_path_factory.mktemp("h2tls"))


@pytest.fixture
def h2_server(certificate):
    """start(tls=False, application=app, **settings): a server speaking HTTP/2 (ALPN with
    ``tls``, else h2c by prior knowledge) and HTTP/1.1, stopped at the end of the test."""
    servers = []

    def start(tls=False, application=app, **settings):
        settings.setdefault("http_protocols", "h2,h1")
        if tls:
            settings.update(certfile=certificate[0], keyfile=certificate[1])
        else:
            settings.setdefault("http2_cleartext", "prior-knowledge")
        server = ServerThread(application, **settings).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()
        errors = server.errors.getvalue()
        assert "Traceback" not in errors and "internal error" not in errors, errors


def _client(server, tls, certificate, **kwargs):
    return H2Client(server.address, client_context(certificate[0]) if tls else None, **kwargs)


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.skip("%s is not installed (apt-get install nghttp2-client / curl)" % name)
    return path


# --- the real clients -------------------------------------------------------------------------


def test_curl_speaks_http2_over_tls_and_by_prior_knowledge(h2_server, certificate):
    curl = _tool("curl")
    tls = h2_server(tls=True)
    clear = h2_server()
    for arguments in (
        ["--http2", "--cacert", certificate[0], "https://127.0.0.1:%d/" % tls.port],
        ["--http2-prior-knowledge", "http://127.0.0.1:%d/" % clear.port],
    ):
        result = subprocess.run([curl, "-sS", "-w", " %{http_version}", *arguments], capture_output=True, text=True,
                                timeout=WAIT)
        assert result.stdout == "Hello, World! 2", result.stderr
    # The same ports still speak HTTP/1.1 to a client that does not offer HTTP/2.
    for arguments in (["--http1.1", "--cacert", certificate[0], "https://127.0.0.1:%d/" % tls.port],
                      ["http://127.0.0.1:%d/" % clear.port]):
        result = subprocess.run([curl, "-sS", "-w", " %{http_version}", *arguments], capture_output=True, text=True,
                                timeout=WAIT)
        assert result.stdout == "Hello, World! 1.1", result.stderr
    assert '"GET / HTTP/2.0" 200' in tls.access.getvalue()


@pytest.mark.parametrize("tls", [True, False], ids=["h2", "h2c"])
def test_a_slow_stream_does_not_hold_the_one_beside_it(h2_server, certificate, tls):
    nghttp = _tool("nghttp")
    server = h2_server(tls=tls)
    base = "%s://127.0.0.1:%d" % ("https" if tls else "http", server.port)
    result = subprocess.run([nghttp, "-nv", base + "/slow?2", base + "/"], capture_output=True, text=True,
                            timeout=WAIT)
    # nghttp numbers its streams from 13 (its first ones carry its priorities): 13 is /slow, 15 /.
    times = {}
    for line in result.stdout.splitlines():
        if ":status: 200" in line:
            times[int(line.split("stream_id=")[1].split(")")[0])] = float(line[1:].split("]")[0])
    assert sorted(times) == [13, 15], result.stdout[-2000:]
    assert times[15] < 0.5 and times[13] >= 1.9, times


def test_h2load_bounded(h2_server, certificate):
    h2load = _tool("h2load")
    server = h2_server(tls=True)
    result = subprocess.run([h2load, "-n", "2000", "-c", "10", "-m", "10", "https://127.0.0.1:%d/" % server.port],
                            capture_output=True, text=True, timeout=60)
    assert "2000 succeeded, 0 failed, 0 errored, 0 timeout" in result.stdout, result.stdout[-2000:]
    assert "status codes: 2000 2xx" in result.stdout


def test_httpx_bodies_both_ways(h2_server, certificate):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("h2")
    server = h2_server(tls=True)
    with httpx.Client(http2=True, verify=ssl.create_default_context(cafile=certificate[0]), timeout=60) as client:
        for size in (0, 1, 65535, 65536, 1 << 20, 16 << 20):
            body = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
            response = client.post("https://127.0.0.1:%d/echo" % server.port, content=body)
            assert response.http_version == "HTTP/2"
            assert (response.status_code, response.headers["x-size"], len(response.content)) == (200, str(size), size)
            assert response.content == body
            if size == 16 << 20:
                # Linear: a 16 MiB body read in 64 KiB pieces, through 16 KiB frames and 64 KiB
                # windows, costs the server's thread a fraction of a second (0.7 s in gunicorn's,
                # quadratic).
                assert float(response.headers["x-cpu"]) < 1.0, response.headers["x-cpu"]
        streamed = client.get("https://127.0.0.1:%d/stream" % server.port)
        assert streamed.http_version == "HTTP/2"
        assert streamed.content == b"".join(b"chunk %d\n" % index for index in range(5))
        assert "content-length" not in streamed.headers
        head = client.head("https://127.0.0.1:%d/" % server.port)
        assert (head.status_code, head.headers["content-length"], head.content) == (200, "13", b"")


@pytest.mark.parametrize("status", [204, 304])
def test_bodiless_answers_send_no_data(h2_server, certificate, status):
    server = h2_server()
    client = _client(server, False, certificate)
    for method, path in (("GET", "/status/%d" % status), ("HEAD", "/")):
        response = client.get(path, method=method)
        assert response.ended and response.data == b""
    assert client.responses[1].status == status
    # HEADERS with END_STREAM, no DATA frame at all (a frame reader sees what h2 hides).
    sock = socket.create_connection(server.address, timeout=WAIT)
    sock.sendall(PREFACE + settings() + raw_headers(1, b"/status/%d" % status))
    frames = FrameReader(sock).until(lambda f: f.stream_id == 1 and "END_STREAM" in f.flags)
    assert [type(f).__name__ for f in frames if f.stream_id == 1] == ["HeadersFrame"]
    sock.close()
    client.close()


# --- streams: budget, resets, deadlines ---------------------------------------------------------


def test_streams_over_the_limit_are_refused_and_the_connection_lives(h2_server, certificate):
    server = h2_server()
    client = _client(server, False, certificate)
    streams = [client.request("/slow?1") for _ in range(101)]
    client.wait(lambda: client.responses[streams[-1]].reset is not None, what="the 101st stream's refusal")
    assert client.responses[streams[-1]].reset == REFUSED_STREAM
    for stream_id in streams[:100]:
        assert client.response(stream_id).status == 200
    assert client.get("/").data == b"Hello, World!"  # the same connection, after
    client.close()


def test_a_full_pool_refuses_streams(h2_server, certificate):
    # spawn=3: the connection and two streams; a third stream waits for no slot.
    server = h2_server(spawn=3)
    client = _client(server, False, certificate)
    slow = [client.request("/slow?1") for _ in range(3)]
    client.wait(lambda: client.responses[slow[2]].reset is not None, what="the refusal")
    assert client.responses[slow[2]].reset == REFUSED_STREAM
    assert [client.response(stream_id).status for stream_id in slow[:2]] == [200, 200]
    assert client.get("/").status == 200
    client.close()


def test_a_closed_window_resets_the_stream_after_send_timeout(h2_server, certificate):
    server = h2_server(send_timeout=0.5)
    client = _client(server, False, certificate, window=0)
    started = time.monotonic()
    stalled = client.get("/")
    assert stalled.status == 200 and stalled.reset == CANCEL and stalled.data == b""
    assert 0.4 < time.monotonic() - started < 3
    # The connection lives: an answer that needs no window still comes.
    assert client.get("/status/204").status == 204
    assert "flow-control window stayed closed" in server.errors.getvalue()
    client.close()


def _download(server, step, interval, limit, streams=1, stream_window=0):
    """GET /big?1048576 on ``streams`` streams by a client whose windows start closed
    (SETTINGS_INITIAL_WINDOW_SIZE ``stream_window``, the connection's 65,535) and that opens them
    ``step`` bytes every ``interval`` s (stream 1's with the connection's when ``stream_window``
    is 0, else only the connection's, which the streams share), for at most ``limit`` s: the DATA
    bytes it got, how it ended ("ended": every stream, "reset N": the first reset, or "still
    open") and when."""
    big = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x"), (b":path", b"/big?1048576")]
    sock = socket.create_connection(server.address, timeout=WAIT)
    sock.sendall(PREFACE + settings((4, stream_window)) + settings(ack=True)
                 + b"".join(headers_frame(2 * i + 1, big) for i in range(streams)))
    update = frame(WINDOW_UPDATE, 0, 0, step.to_bytes(4, "big"))
    if not stream_window:
        update += frame(WINDOW_UPDATE, 0, 1, step.to_bytes(4, "big"))
    received, ended, buffer, started = 0, 0, b"", time.monotonic()
    try:
        while time.monotonic() - started < limit:
            sock.sendall(update)
            deadline = time.monotonic() + interval
            while deadline > time.monotonic():
                sock.settimeout(deadline - time.monotonic())
                try:
                    piece = sock.recv(1 << 20)
                except socket.timeout:
                    break
                assert piece, "the server closed the connection"
                buffer += piece
                while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                    length, kind, flags = int.from_bytes(buffer[:3], "big"), buffer[3], buffer[4]
                    stream_id, payload = int.from_bytes(buffer[5:9], "big"), buffer[9 : 9 + length]
                    buffer = buffer[9 + length :]
                    if stream_id and kind == 0:  # DATA
                        received += length
                        ended += flags & 1
                        if ended == streams:
                            return received, "ended", time.monotonic() - started
                    elif stream_id and kind == RST_STREAM:
                        return received, "reset %d" % int.from_bytes(payload, "big"), time.monotonic() - started
        return received, "still open", time.monotonic() - started
    finally:
        sock.close()


def test_a_window_opened_a_byte_at_a_time_is_reset_under_the_min_send_rate(h2_server, certificate):
    # One byte every 0.1 s: the window closes after each, never for all of send_timeout, so
    # only the rate ends it: after a span of send_timeout (1 s), RST_STREAM(CANCEL), one line.
    server = h2_server(send_timeout=1)
    received, how, seconds = _download(server, 1, 0.1, 10)
    assert how == "reset %d" % CANCEL and 0.9 < seconds < 4 and received < 40, (how, seconds, received)
    wait_until(lambda: "under --http2-min-send-rate (1024 bytes/s)" in server.errors.getvalue(), WAIT, "the line")
    assert server.errors.getvalue().count("reset: its client let") == 1, server.errors.getvalue()


def test_a_window_bound_download_at_a_fair_rate_is_not_reset(h2_server, certificate):
    # 16 KiB every 20 ms (about 800 KB/s), its window closing after each: a megabyte over more
    # than one span of send_timeout, all of it.
    server = h2_server(send_timeout=1)
    assert _download(server, 16384, 0.02, 30)[:2] == (1 << 20, "ended")
    assert "reset" not in server.errors.getvalue()


def test_streams_sharing_the_connections_window_are_judged_by_the_connections_rate(h2_server, certificate):
    # The connection's window opened 800 bytes every 0.1 s (8,000 bytes/s), the streams' own
    # windows wide: four streams share it, about 2,000 bytes/s each, under a minimum of 3,000;
    # the connection moves at more than twice it (a slow machine's longer intervals leave a
    # margin), and no stream is reset. One stream alone at 1,000 is.
    server = h2_server(send_timeout=1, http2_min_send_rate=3000)
    received, how, seconds = _download(server, 800, 0.1, 3.5, streams=4, stream_window=1 << 20)
    assert how == "still open" and "reset" not in server.errors.getvalue(), (how, server.errors.getvalue())
    received, how, seconds = _download(server, 100, 0.1, 6, streams=1, stream_window=1 << 20)
    assert how == "reset %d" % CANCEL and seconds < 4, (how, seconds)
    assert "under --http2-min-send-rate (3000 bytes/s)" in server.errors.getvalue()


def test_min_send_rate_0_leaves_only_the_closed_window_deadline(h2_server, certificate):
    server = h2_server(send_timeout=1, http2_min_send_rate=0)
    received, how, seconds = _download(server, 1, 0.1, 2.5)
    assert how == "still open" and received >= 15, (how, received)


@pytest.mark.parametrize("attack", ["made-you-reset", "malformed"])
def test_stream_errors_past_the_bucket_end_the_connection_with_one_goaway(h2_server, certificate, attack):
    # MadeYouReset: DATA on 300 half-closed streams (their applications still at work); and
    # 10,000 malformed HEADERS (no :path). Each is a RST_STREAM the client makes us send; past
    # the rapid-reset bucket (200), one GOAWAY(ENHANCE_YOUR_CALM), the last stream id never
    # raised by a second one, and the connection closes.
    server = h2_server()
    if attack == "made-you-reset":
        slow = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x"), (b":path", b"/slow?5")]
        frames = b"".join(headers_frame(i, slow) + frame(0, 0, i, b"x") for i in range(1, 601, 2))
    else:
        malformed = [(b":method", b"GET"), (b":scheme", b"http"), (b":authority", b"x")]
        frames = b"".join(headers_frame(i, malformed) for i in range(1, 20001, 2))
    sock = socket.create_connection(server.address, timeout=WAIT)
    sock.sendall(PREFACE + settings() + settings(ack=True))
    try:
        sock.sendall(frames)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server closed first: what it sent before is read below
    reader = FrameReader(sock)
    seen = []
    with pytest.raises((EOFError, ConnectionResetError)):
        while True:
            seen.append(reader.next())
    sock.close()
    goaways = [f for f in seen if type(f).__name__ == "GoAwayFrame"]
    resets = [f for f in seen if type(f).__name__ == "RstStreamFrame"]
    assert [(f.last_stream_id, f.error_code) for f in goaways] == [(401, 0xB)], goaways
    assert len(resets) == 201


def test_request_timeout_is_per_stream(h2_server, certificate):
    server = h2_server(request_timeout=0.5)
    client = _client(server, False, certificate)
    slow = client.request("/slow?3")
    fast = client.request("/")
    assert client.response(fast).status == 200
    response = client.response(slow)
    assert response.status == 504 and response.ended
    assert "request timeout: GET /slow" in server.errors.getvalue()
    client.close()
    server.errors.truncate(0)


def test_a_stream_the_client_resets_leaves_the_connection_alone(h2_server, certificate):
    server = h2_server()
    client = _client(server, False, certificate)
    slow = client.request("/slow?0.3")
    client.conn.reset_stream(slow)
    client.flush()
    assert client.get("/").status == 200
    time.sleep(0.5)  # the reset stream's application ends; its response has nowhere to go
    assert client.get("/").status == 200
    client.close()


def test_max_requests_counts_streams(h2_server, certificate):
    server = h2_server()
    client = _client(server, False, certificate)
    for _ in range(5):
        assert client.get("/").status == 200
    assert server.server.requests_served == 5
    client.close()


# --- WSGI per stream ----------------------------------------------------------------------------


def _environ_over_http11(server, fields):
    from tests.conftest import Client

    client = Client(server.address)
    response = client.request("GET", "/environ", headers=fields)
    response = client.read_response()
    client.close()
    return response.status, json.loads(response.body) if response.status == 200 else None


def test_the_header_policy_is_http11s(h2_server, certificate):
    """The environ an application sees is the same whichever version carried the request:
    names with underscores are dropped (a client cannot pose as a proxy's X-Forwarded-For),
    repeated fields are joined, one Host at most (gunicorn 26.2 let HTTP/2 bypass these)."""
    server = h2_server()
    client = _client(server, False, certificate)
    fields = [("x_forwarded_for", "6.6.6.6"), ("x-custom", "a"), ("x-custom", "b"), ("content-type", "text/plain"),
              ("content-type", "text/html"), ("cookie", "a=1"), ("cookie", "b=2")]
    response = client.get("/environ", headers=fields)
    over_h2 = json.loads(bytes(response.data))
    status, over_h1 = _environ_over_http11(server, [("Host", "127.0.0.1")] + fields)
    assert status == 200
    assert over_h2["HTTP_X_FORWARDED_FOR"] is None and over_h1["HTTP_X_FORWARDED_FOR"] is None
    for key in ("HTTP_X_CUSTOM", "CONTENT_TYPE", "HTTP_COOKIE", "HTTP_HOST", "REMOTE_ADDR", "QUERY_STRING"):
        assert over_h2[key] == over_h1[key], key
    assert over_h2["SERVER_PROTOCOL"] == "HTTP/2.0" and over_h1["SERVER_PROTOCOL"] == "HTTP/1.1"
    # Two Host fields: 400 (and test_two_host_fields_are_refused over HTTP/2).
    assert _environ_over_http11(server, [("Host", "127.0.0.1"), ("Host", "evil.example")])[0] == 400
    client.close()


def _by_hand(server, fields, until):
    """Open stream 1 with ``fields`` written by hand (what h2 would refuse to send); the
    server's frames up to the one ``until`` accepts."""
    with socket.create_connection(server.address, timeout=WAIT) as sock:
        sock.sendall(PREFACE + settings() + headers_frame(1, fields))
        return FrameReader(sock).until(until)


def test_two_host_fields_are_refused(h2_server, certificate):
    fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/environ"), (b"host", b"evil.example"),
              (b"host", b"127.0.0.1")]
    frames = _by_hand(h2_server(), fields, lambda f: f.stream_id == 1 and "END_STREAM" in f.flags)
    assert dict(hpack_fields(frames))[b":status"] == b"400"
    body = b"".join(bytes(f.data) for f in frames if f.stream_id == 1 and type(f).__name__ == "DataFrame")
    assert b"more than one host field" in body


def test_a_control_character_in_a_field_resets_the_stream(h2_server, certificate):
    fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"127.0.0.1"),
              (b"x-evil", b"a\x01b")]
    frames = _by_hand(h2_server(), fields, lambda f: f.type == RST_STREAM)
    assert frames[-1].stream_id == 1 and frames[-1].error_code == 0x1  # PROTOCOL_ERROR: malformed


def test_proxy_protocol_before_the_preface_gives_every_stream_the_clients_address(h2_server, certificate):
    server = h2_server(proxy_protocol=True)
    client = _client(server, False, certificate, preamble=b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n")
    for _ in range(2):
        environ = json.loads(bytes(client.get("/environ").data))
        assert (environ["REMOTE_ADDR"], environ["REMOTE_PORT"]) == ("203.0.113.7", "5555")
    client.close()


def test_prior_knowledge_only_for_trusted_peers(h2_server, certificate):
    # An untrusted peer's preface is HTTP/1.1's to answer (505: no HTTP/2.0 here).
    untrusted = h2_server(forwarded_allow_ips="10.9.9.9")
    sock = socket.create_connection(untrusted.address, timeout=WAIT)
    port = sock.getsockname()[1]
    sock.sendall(PREFACE + settings())
    answer = sock.recv(4096)
    assert answer.startswith(b"HTTP/1.1 505"), answer
    sock.close()
    # ... and at the default level one line says which peer, and the setting that decides.
    line = "HTTP/2 preface from 127.0.0.1:%d, which is not in --forwarded-allow-ips" % port
    wait_until(lambda: line in untrusted.errors.getvalue(), WAIT, "the untrusted preface's line")
    # An untrusted peer's HTTP/1.1 is served as ever, and logged by nothing; more prefaces
    # within 10 s are answered alike, and not logged again (a loop of them fills no log).
    sock = socket.create_connection(untrusted.address, timeout=WAIT)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    sock.close()
    for _ in range(3):
        sock = socket.create_connection(untrusted.address, timeout=WAIT)
        sock.sendall(PREFACE + settings())
        assert sock.recv(4096).startswith(b"HTTP/1.1 505")
        sock.close()
    assert untrusted.errors.getvalue().count("HTTP/2 preface from") == 1
    # A trusted peer that speaks HTTP/1.1 (a proxy's health check) is answered in HTTP/1.1.
    trusted = h2_server()
    sock = socket.create_connection(trusted.address, timeout=WAIT)
    sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    answer = b""
    while True:
        piece = sock.recv(4096)
        if not piece:
            break
        answer += piece
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"Hello, World!")
    sock.close()


@pytest.mark.parametrize("first_bytes", [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n",
                                         b"\x00" * 24], ids=["http1", "bad-preface", "zeros"])
def test_h2_without_h1_in_cleartext_is_http2_only(h2_server, certificate, first_bytes):
    # --http-protocols h2 (no h1): a trusted peer's bytes that are not the preface are a
    # connection error (RFC 9113 §3.4): our SETTINGS, GOAWAY(PROTOCOL_ERROR), and the close;
    # not an HTTP/1.1 answer (h2spec's http2/3.5/2).
    server = h2_server(http_protocols="h2")
    sock = socket.create_connection(server.address, timeout=WAIT)
    sock.sendall(first_bytes)
    reader = FrameReader(sock)
    frames = [reader.next(), reader.next()]
    with pytest.raises((EOFError, ConnectionResetError)):
        reader.next()  # then the close
    sock.close()
    assert [type(f).__name__ for f in frames] == ["SettingsFrame", "GoAwayFrame"], frames
    assert frames[1].error_code == 0x1  # PROTOCOL_ERROR
    # The preface is served as ever.
    client = _client(server, False, certificate)
    assert bytes(client.get("/").data) == b"Hello, World!"
    client.close()


def test_h2_only_serves_h2load_and_refuses_curls_http1(h2_server, certificate):
    h2load, curl = _tool("h2load"), _tool("curl")
    server = h2_server(http_protocols="h2")
    result = subprocess.run([h2load, "-n", "500", "-c", "5", "-m", "5", "http://127.0.0.1:%d/" % server.port],
                            capture_output=True, text=True, timeout=60)
    assert "500 succeeded, 0 failed, 0 errored, 0 timeout" in result.stdout, result.stdout[-2000:]
    result = subprocess.run([curl, "-sS", "--http1.1", "http://127.0.0.1:%d/" % server.port], capture_output=True,
                            text=True, timeout=WAIT)
    assert result.returncode != 0 and "Hello" not in result.stdout, (result.returncode, result.stdout)


def test_a_body_over_limit_request_body_is_413(h2_server, certificate):
    server = h2_server(limit_request_body=1000)
    client = _client(server, False, certificate)
    # Announced: refused before the application runs.
    announced = client.get("/echo", method="POST", body=b"x" * 2000, headers=[("content-length", "2000")])
    assert announced.status == 413
    # Not announced: the application's read fails, and it is answered 413 all the same.
    streamed = client.get("/echo", method="POST", body=b"x" * 2000)
    assert streamed.status == 413
    assert client.get("/").status == 200
    client.close()


def test_expect_100_continue(h2_server, certificate):
    server = h2_server()
    client = _client(server, False, certificate)
    stream_id = client.request("/echo", method="POST", headers=[("expect", "100-continue")], end=False)
    client.wait(lambda: client.responses[stream_id].informational, what="100 Continue")
    assert dict(client.responses[stream_id].informational[0])[b":status"] == b"100"
    client.send_body(stream_id, b"after the 100")
    assert bytes(client.response(stream_id).data) == b"after the 100"
    client.close()


# --- a graceful stop ----------------------------------------------------------------------------


def test_sigterm_finishes_a_long_stream_and_refuses_a_new_one(cli_server):
    """SIGTERM: GOAWAY (2^31-1, with a PING), then the final GOAWAY once the PING is answered;
    the stream in flight finishes; a stream opened after it is refused, not left hanging; the
    connection closes once its stream is done."""
    server = cli_server("--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge", "--graceful-timeout",
                        "10", "tests.http2.serving:app")
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=WAIT)
    sock.sendall(PREFACE + settings() + raw_headers(1, b"/slow?2"))
    reader = FrameReader(sock)
    reader.until(lambda f: type(f).__name__ == "SettingsFrame" and "ACK" not in f.flags)
    sock.sendall(settings(ack=True))
    time.sleep(0.5)
    server.process.send_signal(signal.SIGTERM)
    first = reader.until(lambda f: f.type == GOAWAY)
    ping = [f for f in first if type(f).__name__ == "PingFrame"]
    assert ping and first[-1].last_stream_id == 2**31 - 1
    sock.sendall(frame(0x6, 0x1, 0, ping[0].opaque_data))  # the PING's ACK
    final = reader.until(lambda f: f.type == GOAWAY)[-1]
    assert (final.last_stream_id, final.error_code) == (1, 0)
    sock.sendall(raw_headers(3, b"/"))
    refused = reader.until(lambda f: f.type == RST_STREAM)[-1]
    assert (refused.stream_id, refused.error_code) == (3, REFUSED_STREAM)
    answer = reader.until(lambda f: f.stream_id == 1 and "END_STREAM" in f.flags)
    assert b"Hello, World!" in b"".join(bytes(f.data) for f in answer if type(f).__name__ == "DataFrame")
    with pytest.raises(EOFError):
        reader.next(5)  # the connection closes: its last stream is done
    sock.close()
    returncode, out, err = server.stop()
    assert "Traceback" not in err, err


def test_metrics_count_http2_requests_apart(h2_server, certificate):
    from greenserve.observe import metrics
    from greenserve.observe.stats import HTTP2_REQUESTS, REQUESTS, WorkerStats

    server = h2_server()
    stats = WorkerStats()
    server.server.stats = stats
    client = _client(server, False, certificate)
    for _ in range(3):
        assert client.get("/").status == 200
    client.close()
    from tests.conftest import Client

    http11 = Client(server.address)
    assert http11.get("/").status == 200
    http11.close()
    wait_until(lambda: sum(stats.requests) == 4, WAIT, "four requests counted")
    assert stats.http2_requests == 3
    totals = metrics.last_report(stats.report([server.server]))
    assert totals[HTTP2_REQUESTS] == 3 and sum(totals[REQUESTS:REQUESTS + 40]) == 4
    assert "greenserve_http2_requests_total 3" in metrics.render(totals, {}, [], {}, 0.0)


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "h2"])
def test_a_slow_reader_with_large_windows_gets_every_byte_in_order(h2_server, certificate, tls):
    """A client that announces 16 MiB windows and then reads slowly: the server may not buffer
    eight 4 MiB responses whole (each stream waits for the output to drain, _HIGH_WATER), and
    every stream's bytes arrive whole and in order, over TLS too (where the hub's write meets a
    full socket, and the connection's greenlet, woken, retries the record OpenSSL kept)."""
    from tests.http2.serving import big_body

    server = h2_server(tls=tls)
    client = _client(server, tls, certificate, window=16 << 20)
    client.conn.increment_flow_control_window(64 << 20)
    client.flush()
    size = 4 << 20
    streams = {client.request("/big?%d" % size, headers=[("x-seed", "s%d" % n)]): "s%d" % n for n in range(8)}
    time.sleep(0.5)  # not reading: the server's output backs up
    for stream_id, seed in streams.items():
        response = client.response(stream_id, timeout=60)
        assert response.status == 200 and response.ended
        assert bytes(response.data) == big_body(size, seed.encode())
    client.close()


# --- the codec's limits, over the wire (tests/http2/test_limits.py has each attack's bytes) -------

ENHANCE_YOUR_CALM = 0xB


def _attack_then_goaway(server, attack):
    with socket.create_connection(server.address, timeout=WAIT) as sock:
        sock.sendall(PREFACE + settings() + attack)
        frames = FrameReader(sock).until(lambda f: f.type == GOAWAY)
    return frames[-1]


def test_rapid_reset_ends_the_connection_and_runs_no_application(h2_server, certificate):
    from tests.http2.helpers import rst

    started = []

    def counting(environ, start_response):
        started.append(environ["PATH_INFO"])
        return app(environ, start_response)

    server = h2_server(application=counting)
    fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/slow?5"), (b":authority", b"x")]
    attack = b"".join(headers_frame(n, fields, end_stream=False) + rst(n) for n in range(1, 801, 2))
    goaway = _attack_then_goaway(server, attack)
    assert goaway.error_code == ENHANCE_YOUR_CALM  # CVE-2023-44487
    assert started == []  # every stream was reset before its greenlet ran: no work started
    assert _client(server, False, certificate).get("/").status == 200  # the server is fine


def test_a_continuation_flood_ends_the_connection(h2_server, certificate):
    fields = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"x")]
    attack = headers_frame(1, fields, end_headers=False) + b"".join(
        frame(0x9, 0, 1, b"\x00" + b"\x00" * 16000) for _ in range(20))  # CVE-2024-27316
    assert _attack_then_goaway(h2_server(), attack).error_code == ENHANCE_YOUR_CALM


def test_an_hpack_bomb_is_answered_431_and_the_connection_lives(h2_server, certificate):
    from tests.http2.helpers import block, string

    server = h2_server()
    pseudo = [(b":method", b"GET"), (b":scheme", b"http"), (b":path", b"/"), (b":authority", b"x")]
    # One 4 KB field put in the HPACK table, then named 30 times by its index: 120 KB decoded
    # from a 4 KB block, over http2_max_header_list_size (64 KiB).
    bomb = block(pseudo) + b"\x40" + string(b"x-bomb") + string(b"a" * 4000) + b"\xbe" * 30
    with socket.create_connection(server.address, timeout=WAIT) as sock:
        sock.sendall(PREFACE + settings() + frame(0x1, 0x5, 1, bomb) + raw_headers(3, b"/"))
        reader = FrameReader(sock)
        frames = reader.until(lambda f: f.stream_id == 3 and "END_STREAM" in f.flags)
    assert dict(hpack_fields(frames))[b":status"] == b"431"
    assert any(f.stream_id == 3 and type(f).__name__ == "DataFrame" for f in frames)


def test_informational_sends_early_hints_before_the_response(h2_server, certificate):
    # ConnectionIO.informational, as wsgi.early_hints calls it: a 103 (RFC 8297) on the stream
    # before the final head, through the codec's send_informational.
    def hinting(environ, start_response):
        environ["wsgi.early_hints"]([("Link", "</app.css>; rel=preload")])
        return app(environ, start_response)

    server = h2_server(application=hinting)
    client = _client(server, False, certificate)
    response = client.get("/")
    assert [dict(fields) for fields in response.informational] == [
        {b":status": b"103", b"link": b"</app.css>; rel=preload"}]
    assert response.status == 200 and bytes(response.data) == b"Hello, World!"
    client.close()


def test_a_stream_past_the_graceful_timeout_is_cut(h2_server, certificate):
    server = h2_server()
    client = _client(server, False, certificate)
    slow = client.request("/slow?5")
    time.sleep(0.3)
    started = time.monotonic()
    server.stop(timeout=1)
    assert time.monotonic() - started < 4
    client.wait(lambda: client.closed or client.responses[slow].reset is not None, what="the connection's end")
    assert not client.responses[slow].ended  # cut, not taken for complete
    assert "graceful timeout" in server.errors.getvalue()
    client.close()


@pytest.mark.parametrize("path", ["/fail-midway", "/short"])
def test_a_response_cut_short_is_reset_not_ended(h2_server, certificate, path):
    # Where HTTP/1.1 closes the connection, HTTP/2 resets the stream (INTERNAL_ERROR): the client
    # never takes a truncated body for a complete one, and the connection goes on.
    server = h2_server()
    client = _client(server, False, certificate)
    response = client.get(path)
    assert response.status == 200 and not response.ended and response.reset == 0x2
    assert client.get("/").status == 200
    client.close()
    errors = server.errors.getvalue()
    assert ("application failed after its head" in errors) if path == "/fail-midway" else (
        "sent 19 bytes of a 100-byte Content-Length" in errors)
    server.errors.truncate(0)
    server.errors.seek(0)


def test_overload_control_sheds_a_stream_and_the_connection_lives(h2_server, certificate):
    # A trusted peer's X-Request-Start says the request waited 5 s before greenserve: overload
    # control answers it 503 on its stream (docs/production.md, "Overload"); the connection and
    # the streams beside it go on.
    server = h2_server(health_path=["/health"])
    client = _client(server, False, certificate)
    old = [("x-request-start", "t=%.3f" % (time.time() - 5))]
    shed = client.request("/", headers=old)
    beside = client.request("/")
    response = client.response(shed)
    assert response.status == 503 and response.header(b"retry-after") == b"1" and response.ended
    assert response.header(b"connection") is None  # (no such field in HTTP/2)
    assert client.response(beside).status == 200
    assert client.get("/", headers=old).status == 503
    assert client.get("/health", headers=old).status == 200  # the health path whatever it waited
    assert client.get("/").data == b"Hello, World!"  # the same connection, after
    client.close()
    assert 'shed="queued 5' in server.access.getvalue()

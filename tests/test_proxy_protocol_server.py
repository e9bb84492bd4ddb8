"""--proxy-protocol on real sockets: the header read before HTTP, who may send it, what the
application and the access log see, and every way a connection without a valid header is closed.
"""

import json
import socket
import ssl
import struct
import time

import pytest

from greenserve.proxy_protocol import PP2_TYPE_SSL, V2_SIGNATURE

from tests.conftest import Client, ServerThread, wait_until
from tests.entry.test_api import certificate  # noqa: F401 (a fixture)

KEYS = ("REMOTE_ADDR", "REMOTE_PORT", "SERVER_NAME", "SERVER_PORT", "wsgi.url_scheme")


def environ_app(environ, start_response):
    body = json.dumps({key: environ.get(key) for key in KEYS}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def v2_header(src=("203.0.113.7", 51000), dst=("192.0.2.10", 443), command=0x21, tlvs=b""):
    if command == 0x20:
        block = b""
        family = 0x00
    else:
        block = socket.inet_aton(src[0]) + socket.inet_aton(dst[0]) + struct.pack("!HH", src[1], dst[1]) + tlvs
        family = 0x11
    return V2_SIGNATURE + bytes([command, family]) + struct.pack("!H", len(block)) + block


def ssl_tlv(client_ssl=True):
    value = bytes([0x01 if client_ssl else 0x00]) + bytes(4)
    return bytes([PP2_TYPE_SSL]) + struct.pack("!H", len(value)) + value


V1_HEADER = b"PROXY TCP4 203.0.113.7 192.0.2.10 51000 443\r\n"
REQUEST = b"GET / HTTP/1.1\r\nHost: test\r\n\r\n"


@pytest.fixture
def server():
    servers = []

    def start(app=environ_app, **kwargs):
        kwargs.setdefault("proxy_protocol", True)
        kwargs.setdefault("log_level", "debug")
        thread = ServerThread(app, **kwargs).start()
        servers.append(thread)
        return thread

    yield start
    for thread in servers:
        thread.stop()


def ask(address, data):
    """Send data on a new connection; the first response's environ keys."""
    with Client(address) as client:
        client.send(data)
        response = client.read_response()
        assert response.status == 200, response
        return json.loads(response.body)


def refused(address, data):
    """Send data; the server must close the connection without sending a byte."""
    with Client(address) as client:
        if data:
            client.send(data)
        assert client.read_until_close(timeout=5) == b""


def wait_for_log(thread, text):
    wait_until(lambda: text in thread.errors.getvalue(), 5, "%r in the error log" % text)


def test_v1_header_gives_the_client_address(server):
    thread = server()
    environ = ask(thread.address, V1_HEADER + REQUEST)
    assert environ == {
        "REMOTE_ADDR": "203.0.113.7",
        "REMOTE_PORT": "51000",
        "SERVER_NAME": "192.0.2.10",
        "SERVER_PORT": "443",
        "wsgi.url_scheme": "http",  # v1 says nothing of the scheme: the listener's stands
    }


def test_v2_header_and_its_tls_flag(server):
    thread = server()
    environ = ask(thread.address, v2_header() + REQUEST)
    assert (environ["REMOTE_ADDR"], environ["REMOTE_PORT"], environ["wsgi.url_scheme"]) == ("203.0.113.7", "51000", "http")
    environ = ask(thread.address, v2_header(tlvs=ssl_tlv()) + REQUEST)
    assert (environ["REMOTE_ADDR"], environ["SERVER_PORT"], environ["wsgi.url_scheme"]) == ("203.0.113.7", "443", "https")
    environ = ask(thread.address, v2_header(tlvs=ssl_tlv(False)) + REQUEST)
    assert environ["wsgi.url_scheme"] == "http"


def test_health_checks_keep_the_peer_address(server):
    # v2 LOCAL (HAProxy's check-send-proxy with send-proxy-v2) and v1 UNKNOWN.
    thread = server()
    for header in (v2_header(command=0x20), b"PROXY UNKNOWN\r\n"):
        environ = ask(thread.address, header + REQUEST)
        assert environ["REMOTE_ADDR"] == "127.0.0.1"
        assert environ["SERVER_NAME"] == "127.0.0.1"
        assert environ["SERVER_PORT"] == str(thread.port)


def test_access_log_shows_the_client(server):
    thread = server()
    ask(thread.address, V1_HEADER + REQUEST)
    wait_until(lambda: "GET / HTTP/1.1" in thread.access.getvalue(), 5, "the access log line")
    assert thread.access.getvalue().startswith("203.0.113.7 - - [")


def test_pipelined_requests_in_the_headers_packet_and_keep_alive(server):
    thread = server()
    with Client(thread.address) as client:
        client.send(V1_HEADER + REQUEST + REQUEST)  # one send: header and two requests
        for _ in range(2):
            assert json.loads(client.read_response().body)["REMOTE_ADDR"] == "203.0.113.7"
        # The header is read once: a later request on the connection is plain HTTP.
        client.send(REQUEST)
        assert json.loads(client.read_response().body)["REMOTE_PORT"] == "51000"
        client.send(V1_HEADER + REQUEST)  # a second header is not a request
        assert client.read_response().status == 400


def test_header_split_across_packets(server):
    thread = server()
    data = v2_header(tlvs=ssl_tlv()) + REQUEST
    with Client(thread.address) as client:
        for cut in (5, 13, 15, 20, len(data) - len(REQUEST) - 1, len(data) - 3):
            client.send(data[:cut])
            time.sleep(0.02)
            data = data[cut:]
        client.send(data)
        assert json.loads(client.read_response().body)["wsgi.url_scheme"] == "https"


def test_missing_header_is_refused(server):
    thread = server()
    refused(thread.address, REQUEST)
    wait_for_log(thread, "did not start with a PROXY protocol header")


@pytest.mark.parametrize(
    "data",
    [
        b"PROXY TCP4 203.0.113.7 192.0.2.10 51000 65536\r\n",
        b"PROXY TCP4 203.0.113.777 192.0.2.10 51000 443\r\n",
        b"PROXY TCP4 203.0.113.7 192.0.2.10 51000 443\n",
        b"PROXY TCP4 " + b"1" * 120 + b"\r\n",
        V2_SIGNATURE + b"\x21\x41\x00\x0c" + bytes(12),
        V2_SIGNATURE + b"\x21\x11\xff\xff",
    ],
    ids=["port", "address", "bare-lf", "too-long", "family", "oversized"],
)
def test_malformed_header_is_refused(server, data):
    thread = server()
    refused(thread.address, data + REQUEST)
    wait_for_log(thread, "PROXY protocol: closed the connection from 127.0.0.1")


@pytest.mark.parametrize("data, allowed, reason", [
    (V1_HEADER[:20], "127.0.0.1", "closed after 20 bytes, before a complete PROXY protocol header"),
    (v2_header()[:20], "127.0.0.1", "closed after 20 bytes, before a complete PROXY protocol header"),
    (V1_HEADER + REQUEST, "10.0.0.1", "the peer is not in forwarded_allow_ips"),
    (b"PROXY TCP4 203.0.113.777 192.0.2.10 51000 443\r\n" + REQUEST, "127.0.0.1", "PROXY v1: "),
    (b"", "127.0.0.1", None),  # a balancer's TCP check: connects and closes, said at DEBUG only
], ids=["truncated-v1", "truncated-v2", "untrusted", "malformed", "silent"])
def test_a_refused_header_is_one_info_line_naming_the_peer_and_why(server, data, allowed, reason):
    thread = server(log_level="info", forwarded_allow_ips=allowed)
    with Client(thread.address) as client:
        peer = "127.0.0.1:%d" % client.sock.getsockname()[1]
        try:
            client.send(data)
            client.sock.shutdown(socket.SHUT_WR)  # the peer sends no more: a truncated header stays so
        except OSError:
            assert allowed == "10.0.0.1"  # an untrusted peer is closed before anything is read
        assert client.read_until_close(timeout=5) == b""
    time.sleep(0.2)  # (a second line would be written by now)
    lines = [line for line in thread.errors.getvalue().splitlines() if "PROXY" in line]
    if reason is None:
        assert lines == []
    else:
        assert len(lines) == 1 and "[INFO] PROXY protocol: closed the connection from %s: %s" % (peer, reason) in lines[0]


def test_untrusted_peer_is_refused(server):
    thread = server(forwarded_allow_ips="10.0.0.1")
    refused(thread.address, V1_HEADER + REQUEST)
    wait_for_log(thread, "the peer is not in forwarded_allow_ips")


def test_trusted_network(server):
    thread = server(forwarded_allow_ips="10.0.0.0/8, 127.0.0.0/8")
    assert ask(thread.address, V1_HEADER + REQUEST)["REMOTE_ADDR"] == "203.0.113.7"


def test_unix_socket_peer_is_trusted(server, tmp_path):
    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    server(listener=listener, forwarded_allow_ips="10.0.0.1")
    assert ask(path, V1_HEADER + REQUEST)["REMOTE_ADDR"] == "203.0.113.7"
    refused(path, REQUEST)


def test_no_header_within_header_timeout(server):
    thread = server(header_timeout=0.5)
    with Client(thread.address) as client:
        client.send(V1_HEADER[:10])  # a trickle that never ends the line
        started = time.monotonic()
        assert client.read_until_close(timeout=5) == b""
        assert time.monotonic() - started < 4
    wait_for_log(thread, "no complete PROXY protocol header in time")


def test_x_forwarded_for_counts_only_from_a_trusted_client(server):
    # With the PROXY header, its source is the peer whose X-Forwarded-* could count: a TCP
    # balancer passes the client's own headers through.
    thread = server()
    spoof = b"GET / HTTP/1.1\r\nHost: test\r\nX-Forwarded-For: 198.51.100.1\r\nX-Forwarded-Proto: https\r\n\r\n"
    environ = ask(thread.address, V1_HEADER + spoof)
    assert (environ["REMOTE_ADDR"], environ["wsgi.url_scheme"]) == ("203.0.113.7", "http")
    chained = b"PROXY TCP4 127.0.0.5 127.0.0.1 40000 80\r\n"
    thread = server(forwarded_allow_ips="127.0.0.0/8")
    environ = ask(thread.address, chained + spoof)
    assert (environ["REMOTE_ADDR"], environ["wsgi.url_scheme"]) == ("198.51.100.1", "https")


def test_off_by_default_a_proxy_line_is_a_bad_request(server):
    thread = server(proxy_protocol=False)
    with Client(thread.address) as client:
        client.send(V1_HEADER + REQUEST)
        assert client.read_response().status == 400


def tls_request_after(header, address, context):
    """One HTTPS request whose TLS ClientHello goes out in the same send as the PROXY header
    (through a memory BIO), so the server must read the header's bytes and not one more."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = context.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    with socket.create_connection(address, timeout=10) as raw:

        def pump(pending=b""):
            raw.sendall(pending + outgoing.read())
            data = raw.recv(65536)
            if not data:
                incoming.write_eof()
            incoming.write(data)

        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            pass
        pump(header)  # header + ClientHello: one send
        while True:
            try:
                tls.do_handshake()
                break
            except ssl.SSLWantReadError:
                pump()
        tls.write(REQUEST.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        raw.sendall(outgoing.read())
        data = b""
        while True:
            try:
                piece = tls.read(65536)
            except ssl.SSLWantReadError:
                received = raw.recv(65536)
                if not received:
                    break
                incoming.write(received)
                continue
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                break
            if not piece:
                break
            data += piece
    return json.loads(data.split(b"\r\n\r\n", 1)[1])


def test_proxy_header_before_the_tls_handshake(server, certificate):  # noqa: F811
    cert, key = certificate
    thread = server(certfile=cert, keyfile=key)
    context = ssl.create_default_context(cafile=cert)
    for header, address in ((V1_HEADER, "203.0.113.7"), (v2_header(tlvs=ssl_tlv()), "203.0.113.7"),
                            (v2_header(command=0x20), "127.0.0.1")):
        environ = tls_request_after(header, thread.address, context)
        assert environ["REMOTE_ADDR"] == address
        assert environ["wsgi.url_scheme"] == "https"  # the listener's own TLS, or the TLV's

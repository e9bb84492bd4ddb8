"""greenserve behind a real HAProxy 2.6 that speaks HTTP/2 to it: h2c by prior knowledge
(``server ... proto h2``) for HTTP/1.1 and HTTP/2 clients, and h2 over TLS (``ssl verify none
alpn h2``). HAProxy multiplexes its clients' requests onto few backend connections, so each
greenserve connection carries many streams at once. HAProxy runs in the foreground from a
temporary directory and is stopped by its PID."""

import http.client
import json
import os
import shutil
import subprocess
import socket
import threading
import time

import pytest

from tests.conftest import ServerThread, free_port, wait_for_port
from tests.http2.serving import app, make_certificate

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")

CONFIG = """
global
    log stdout format raw local0 info

defaults
    mode http
    log global
    option forwardfor
    timeout connect 5s
    timeout client 30s
    timeout server 30s

frontend clients
    bind 127.0.0.1:{plain}
    bind 127.0.0.1:{tls} ssl crt {pem} alpn h2,http/1.1
    default_backend greenserve_h2c

frontend to_tls
    bind 127.0.0.1:{to_tls}
    default_backend greenserve_h2

frontend to_proxied
    bind 127.0.0.1:{to_proxied}
    default_backend greenserve_h2c_proxy

backend greenserve_h2c
    http-reuse always
    server s1 127.0.0.1:{h2c} proto h2

backend greenserve_h2
    server s2 127.0.0.1:{h2} ssl verify none alpn h2

backend greenserve_h2c_proxy
    server s3 127.0.0.1:{h2c_proxied} proto h2 send-proxy-v2
"""


@pytest.fixture
def haproxy(tmp_path):
    cert, key = make_certificate(tmp_path)
    pem = tmp_path / "haproxy.pem"
    pem.write_text(open(cert).read() + open(key).read())
    h2c = ServerThread(app, http_protocols="h2,h1", http2_cleartext="prior-knowledge").start()
    h2 = ServerThread(app, http_protocols="h2,h1", certfile=cert, keyfile=key).start()
    proxied = ServerThread(app, http_protocols="h2,h1", http2_cleartext="prior-knowledge", proxy_protocol=True).start()
    ports = {"plain": free_port(), "tls": free_port(), "to_tls": free_port(), "to_proxied": free_port(),
             "h2c": h2c.port, "h2": h2.port, "h2c_proxied": proxied.port, "pem": pem}
    path = tmp_path / "haproxy.cfg"
    path.write_text(CONFIG.format(**ports))
    check = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    log = open(tmp_path / "haproxy.log", "w+")
    process = subprocess.Popen([HAPROXY, "-db", "-f", str(path)], stdout=log, stderr=subprocess.STDOUT)
    try:
        for name in ("plain", "tls", "to_tls", "to_proxied"):
            wait_for_port(ports[name], process=process)
        yield ports, cert, (h2c, h2)
    finally:
        process.terminate()
        process.wait(10)
        log.close()
        for server in (h2c, h2, proxied):
            server.stop()
            assert "Traceback" not in server.errors.getvalue(), server.errors.getvalue()


def _environ(port, context=None, method="GET", body=None):
    if context is None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    else:
        connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    connection.request(method, "/echo" if body is not None else "/environ", body=body)
    response = connection.getresponse()
    data = response.read()
    connection.close()
    assert response.status == 200, data
    return data if body is not None else json.loads(data)


def test_haproxy_speaks_h2c_to_greenserve_for_http11_clients(haproxy):
    ports, cert, (h2c, _) = haproxy
    environ = _environ(ports["plain"])
    assert environ["SERVER_PROTOCOL"] == "HTTP/2.0"
    assert environ["HTTP_X_FORWARDED_FOR"] == "127.0.0.1"
    body = os.urandom(300000)
    assert _environ(ports["plain"], method="POST", body=body) == body
    assert '"GET /environ HTTP/2.0" 200' in h2c.access.getvalue()


def test_haproxy_passes_http2_clients_on_over_h2c(haproxy):
    ports, cert, (h2c, _) = haproxy
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    result = subprocess.run([curl, "-sS", "--http2", "--cacert", cert, "-w", "\n%{http_version}",
                             "https://127.0.0.1:%d/environ" % ports["tls"]], capture_output=True, text=True, timeout=10)
    body, version = result.stdout.rsplit("\n", 1)
    assert version == "2", result.stderr
    assert json.loads(body)["SERVER_PROTOCOL"] == "HTTP/2.0"


def test_haproxy_speaks_h2_over_tls_to_greenserve(haproxy):
    ports, cert, (_, h2) = haproxy
    environ = _environ(ports["to_tls"])
    assert (environ["SERVER_PROTOCOL"], environ["wsgi.url_scheme"]) == ("HTTP/2.0", "https")


def test_many_clients_multiplexed_onto_greenserve(haproxy):
    # HAProxy puts concurrent requests on one HTTP/2 connection: greenserve answers them side by
    # side (a 0.3 s request each, 40 at once, in far less than 40 x 0.3 s).
    ports, cert, (h2c, _) = haproxy
    failures = []
    statuses = []

    def fetch():
        try:
            connection = http.client.HTTPConnection("127.0.0.1", ports["plain"], timeout=10)
            connection.request("GET", "/slow?0.3")
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
            connection.close()
        except Exception as exc:
            failures.append(repr(exc))

    started = time.monotonic()
    threads = [threading.Thread(target=fetch) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert not failures and statuses == [200] * 40
    assert time.monotonic() - started < 4
    assert len(h2c.server.connections) <= 4  # few connections from HAProxy, many streams on each


def test_haproxy_proxy_v2_over_h2c_gives_each_stream_its_client(haproxy):
    # send-proxy-v2 on an h2c backend connection: the PROXY header comes before HTTP/2's
    # preface, and every stream on that connection is the client's. Each client below connects
    # from a port of its own: the environ's REMOTE_PORT is the client's, not HAProxy's
    # backend connection's (which is the same for the two requests, as HAProxy reuses it).
    ports = haproxy[0]
    seen = []
    for _ in range(2):
        client = socket.create_connection(("127.0.0.1", ports["to_proxied"]), timeout=10)
        connection = http.client.HTTPConnection("127.0.0.1", ports["to_proxied"], timeout=10)
        connection.sock = client
        connection.request("GET", "/environ")
        response = connection.getresponse()
        environ = json.loads(response.read())
        assert response.status == 200 and environ["SERVER_PROTOCOL"] == "HTTP/2.0"
        seen.append((environ["REMOTE_ADDR"], environ["REMOTE_PORT"], str(client.getsockname()[1])))
        connection.close()
    for address, port, client_port in seen:
        assert (address, port) == ("127.0.0.1", client_port)


def test_a_graceful_stop_finishes_the_streams_haproxy_has_in_flight(haproxy):
    # GOAWAY in two steps (RFC 9113 §6.8) to HAProxy: the slow requests it already passed on
    # are answered in full although the server is stopping meanwhile.
    ports, cert, (h2c, _) = haproxy
    results = []

    def fetch():
        connection = http.client.HTTPConnection("127.0.0.1", ports["plain"], timeout=15)
        connection.request("GET", "/slow")
        response = connection.getresponse()
        results.append((response.status, response.read()))
        connection.close()

    threads = [threading.Thread(target=fetch) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 5
    while sum(c.requests for c in list(h2c.server.connections)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    h2c.stop(timeout=5)
    for thread in threads:
        thread.join(15)
    assert [status for status, _ in results] == [200, 200, 200], results

"""--sticky: every client served by the worker that owns it (greenserve/sticky.py, process/slots.py).

The owner hash and the request head rebuilt for a hand-over, as byte-level facts; then the real
command with four workers on loopback: clients from several source addresses (127.0.0.0/8 is
all loopback on Linux), the same clients named by a trusted X-Forwarded-For on one keep-alive
connection (pipelined, with bodies), named by a PROXY header; a worker killed with SIGKILL moves
its own clients only; TTIN replaces the generation; a slot whose worker is stopped queues what
is handed to it and, once its queue is full, the rest is served where it lands, with a warning.
Every process started here is stopped by its PID; every wait is bounded.
"""

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.conftest import ROOT, CLIServer, Client, children_of, wait_until

APP = '''
import hashlib
import json
import os


def app(environ, start_response):
    data = environ["wsgi.input"].read()
    body = json.dumps({
        "pid": os.getpid(),
        "remote_addr": environ["REMOTE_ADDR"],
        "remote_port": environ.get("REMOTE_PORT"),
        "server_name": environ["SERVER_NAME"],
        "server_port": environ["SERVER_PORT"],
        "scheme": environ["wsgi.url_scheme"],
        "path": environ["PATH_INFO"],
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
'''

WORKERS = 4
SOURCES = ["127.0.0.%d" % n for n in range(1, 25)]


# --- the owner, and the head a hand-over carries -------------------------------------------------


def test_owner_is_stable_across_processes_and_spreads_neighbouring_addresses():
    from greenserve.sticky import owner

    addresses = ["10.0.%d.%d" % (n // 250, n % 250) for n in range(1000)] + SOURCES + ["2001:db8::%x" % n for n in range(50)]
    here = [owner(address, WORKERS) for address in addresses]
    # Python's hash() is salted per process; the owner must be the same in every worker.
    script = "import json, sys; from greenserve.sticky import owner; print(json.dumps([owner(a, %d) for a in json.load(sys.stdin)]))" % WORKERS
    other = subprocess.run([sys.executable, "-c", script], input=json.dumps(addresses), capture_output=True, text=True,
                           env=dict(os.environ, PYTHONHASHSEED="12345", PYTHONPATH=ROOT), timeout=60, check=True)
    assert json.loads(other.stdout) == here
    counts = [here[:1000].count(slot) for slot in range(WORKERS)]
    assert min(counts) > 200, counts  # 250 each if even
    assert len(set(owner(a, WORKERS) for a in SOURCES)) == WORKERS
    assert all(owner(a, 1) == 0 for a in addresses[:10])
    # A dual-stack listener's IPv4-mapped address is the IPv4 client's.
    assert owner("::ffff:192.0.2.1", 7) == owner("192.0.2.1", 7)


@pytest.mark.parametrize("head", [
    b"GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 192.0.2.1, 10.0.0.1\r\n\r\n",
    b"POST http://example.com/p HTTP/1.1\r\nHOST:  example.com \r\nContent-Length: 5\r\nCookie: a=1\r\nCookie: b=2\r\n\r\n",
    b"GET /ws HTTP/1.0\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nX_Odd: 1\r\n\r\n",
    b"PUT / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n",
])
def test_a_request_head_rebuilt_for_a_hand_over_parses_to_the_same_request(head):
    from greenserve.http.head import request_head
    from greenserve.http.parser import RequestParser

    def parsed(data):
        parser = RequestParser()
        parser.feed(data + b"rest")
        request = parser.next_event()
        fields = [getattr(request, name) for name in request.__slots__ if name not in ("host",)]
        return fields, parser.buffered

    original = parsed(head)
    parser = RequestParser()
    parser.feed(head + b"rest")
    again = parsed(request_head(parser.next_event()))
    assert again == original
    assert original[1] == b"rest"  # what followed the head follows it in the hand-over too


# --- the command -----------------------------------------------------------------------------------


@pytest.fixture
def app_dir(tmp_path):
    (tmp_path / "stickyapp.py").write_text(textwrap.dedent(APP))
    return tmp_path


@pytest.fixture
def sticky_server(app_dir):
    started = []

    def start(*flags, workers=WORKERS):
        server = CLIServer("--workers", str(workers), "--sticky", "--graceful-timeout", "3", *flags,
                           "--chdir", str(app_dir), "stickyapp:app")
        started.append(server)
        server.wait_ready()
        wait_until(lambda: len(children_of(server.process.pid)) == workers, 20, "%d workers" % workers)
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.stop()


def exchange(port, data, count=1, source=None):
    """Send ``data`` (``count`` requests) on a new connection (from ``source``); the bodies of the
    responses, as JSON, in order."""
    with Client(("127.0.0.1", port), source=source) as client:
        client.send(data)
        responses = [client.read_response() for _ in range(count)]
    assert [response.status for response in responses] == [200] * count, responses
    return [json.loads(response.body) for response in responses]


def get(port, source=None, headers=b"", path="/"):
    return exchange(port, b"GET %s HTTP/1.1\r\nHost: x\r\n%sConnection: close\r\n\r\n" % (path.encode(), headers),
                    source=source)[0]


def owners(port, sources=SOURCES):
    return {source: get(port, source)["pid"] for source in sources}


def test_each_client_address_is_served_by_one_worker_and_x_forwarded_for_names_the_same_one(sticky_server):
    server = sticky_server()
    workers = set(children_of(server.process.pid))
    first = owners(server.port)
    assert set(first.values()) == workers  # 24 addresses over 4 workers: each has some
    for _ in range(2):
        assert owners(server.port) == first
    # One keep-alive connection from 127.0.0.1 (a trusted proxy, by default) carrying requests of
    # those clients, pipelined, with bodies: each answered by its client's worker, the body whole.
    requests, expected = [], []
    for n, source in enumerate(SOURCES * 2):
        body = os.urandom(n * 997 % 70000)
        requests.append(b"POST /%d HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\nContent-Length: %d\r\n\r\n"
                        % (n, source.encode(), len(body)) + body)
        expected.append((source, first[source], len(body), hashlib.sha256(body).hexdigest()))
    requests.append(b"GET /last HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\nConnection: close\r\n\r\n" % SOURCES[0].encode())
    expected.append((SOURCES[0], first[SOURCES[0]], 0, hashlib.sha256(b"").hexdigest()))
    bodies = exchange(server.port, b"".join(requests), len(requests))
    assert [(b["remote_addr"], b["pid"], b["size"], b["sha256"]) for b in bodies] == expected
    code, _, err = server.stop()
    assert code == 0 and "Traceback" not in err and "--sticky" not in err, err


def test_a_proxy_header_decides_and_travels_with_the_connection(sticky_server):
    server = sticky_server("--proxy-protocol")
    # The worker that owns 127.0.0.9 when it connects itself (through a PROXY header of its own).
    def proxied(source, destination_port, v2_tls=False):
        header = b"PROXY TCP4 %s 127.0.0.1 4711 %d\r\n" % (source.encode(), destination_port)
        return exchange(server.port, header + b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")[0]

    direct = {source: proxied(source, server.port)["pid"] for source in SOURCES}
    assert len(set(direct.values())) == WORKERS
    for source in SOURCES:
        body = proxied(source, 8443)
        # The receiving worker serves what the PROXY header said: it cannot read it again.
        assert (body["pid"], body["remote_addr"], body["remote_port"], body["server_port"]) == (
            direct[source], source, "4711", "8443")
    # A PROXY header from the proxy itself, then its X-Forwarded-For: the latter decides.
    header = b"PROXY TCP4 127.0.0.1 127.0.0.1 4711 %d\r\n" % server.port
    requests = b"".join(b"GET / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\n\r\n" % s.encode() for s in SOURCES)
    bodies = exchange(server.port, header + requests + b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                      len(SOURCES) + 1)
    assert [(b["remote_addr"], b["pid"]) for b in bodies[:-1]] == [(s, direct[s]) for s in SOURCES]
    server.stop()


def test_a_killed_worker_moves_only_its_own_clients_and_ttin_replaces_the_generation(sticky_server):
    server = sticky_server()
    before = owners(server.port)
    victim = before[SOURCES[0]]
    os.kill(victim, signal.SIGKILL)
    # The replacement takes over the victim's slot: the victim's clients are its, no one else moves.
    # (Asked at once: what is handed to the slot while no worker holds it waits in its queue.)
    after = owners(server.port)
    replacement = after[SOURCES[0]]
    assert replacement != victim and replacement in children_of(server.process.pid)
    assert after == {s: (replacement if pid == victim else pid) for s, pid in before.items()}

    server.process.send_signal(signal.SIGTTIN)
    old = set(after.values())
    wait_until(lambda: len(set(children_of(server.process.pid)) - old) == WORKERS + 1
               and not old & set(children_of(server.process.pid)), 20, "a generation of five")
    five = owners(server.port)
    assert set(five.values()) == set(children_of(server.process.pid))
    assert owners(server.port) == five
    code, _, err = server.stop()
    assert code == 0 and "Traceback" not in err, err
    assert "--sticky: 5 slots instead of 4" in err, err


def test_a_stopped_owner_queues_its_connections_and_a_full_queue_is_served_where_it_lands(sticky_server):
    server = sticky_server()
    first = owners(server.port, SOURCES[:8])
    # A client whose worker is not 127.0.0.1's (the proxy's, which reads each request's head).
    source = next(s for s in SOURCES[1:8] if first[s] != first["127.0.0.1"])
    owner = first[source]
    # Each request, from the proxy, names the client and arrives with a 60 kB body already sent:
    # its hand-over carries what was read of it, so a stopped owner's queue (1 MiB of socket
    # buffer at most) fills after a few dozen.
    body = os.urandom(60000)
    request = (b"POST / HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
               % (source.encode(), len(body)) + body)
    os.kill(owner, signal.SIGSTOP)
    try:
        clients = []
        for _ in range(60):
            client = Client(("127.0.0.1", server.port), timeout=15, source="127.0.0.1")
            client.send(request)
            clients.append(client)
        time.sleep(1.0)
    finally:
        os.kill(owner, signal.SIGCONT)
    served = []
    for client in clients:
        with client:
            answer = json.loads(client.read_response().body)
        assert answer["size"] == len(body) and answer["sha256"] == hashlib.sha256(body).hexdigest()
        served.append(answer["pid"])
    # Some waited for their owner, the rest were served at once by whoever accepted them.
    assert owner in served and set(served) - {owner}, served
    assert owners(server.port, SOURCES[:8]) == first  # and the owner serves its clients again
    code, _, err = server.stop()
    assert code == 0 and "Traceback" not in err, err
    assert "was served by the worker in slot" in err and "its queue is full" in err, err


@pytest.mark.parametrize("flags, said", [
    (["--certfile", "cert.pem", "--keyfile", "key.pem"], "--sticky cannot be used with TLS (--certfile)"),
    (["--http-protocols", "h2,h1", "--http2-cleartext", "prior-knowledge"], "--sticky cannot be used with h2"),
])
def test_sticky_is_refused_with_tls_and_http2_in_one_line(app_dir, flags, said):
    for name in ("cert.pem", "key.pem"):
        (app_dir / name).write_text("")
    result = subprocess.run(
        [sys.executable, "-m", "greenserve", "--workers", "2", "--sticky", *flags, "--chdir", str(app_dir), "stickyapp:app"],
        cwd=str(app_dir), capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("greenserve: error: ") and said in lines[0], result.stderr

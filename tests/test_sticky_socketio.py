"""Flask-SocketIO on four workers of one instance with --sticky (docs/deployment.md, "Socket.IO with several workers").

Real components, all on loopback and started here: a redis-server as the message queue,
`greenserve --workers 4 --sticky` serving examples/socketio_redis.py, and 200 python-socketio
clients, half on long-polling alone, half upgrading to WebSocket, each from an address of its
own in 127.0.0.0/8 (requests' and websocket-client's sockets bound to it). Three ways in:
straight to greenserve; through nginx without ip_hash (its workers as www-data; greenserve trusts
its X-Forwarded-For); through HAProxy sending PROXY v2. The proxies' configurations are read
from docs/deployment.md (only addresses and ports substituted). Every client connects, all of a
client's requests reach one worker (the clients of one slot all say the same worker), and every
broadcast reaches every client once. Then a worker is killed with SIGKILL between broadcasts:
its clients reconnect, to its replacement; the others see no disconnection and miss nothing.
Everything started here is stopped by its PID; every wait is bounded.
"""

import os
import queue
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests import test_haproxy, test_nginx, test_request_timeout_redis
from tests.conftest import (
    ROOT, CLIServer, children_of, documented_config, free_port, stop_process, substitute, wait_for_port, wait_until,
)

socketio = pytest.importorskip("socketio", reason="python-socketio is not installed")
pytest.importorskip("flask_socketio", reason="flask-socketio is not installed")
websocket_client = pytest.importorskip("websocket", reason="websocket-client (python-socketio[client]) is not installed")
requests = pytest.importorskip("requests", reason="requests (python-socketio[client]) is not installed")

from tests.test_socketio import _fake_gevent_websocket  # noqa: E402 (after the skips)

pytestmark = pytest.mark.skipif(test_request_timeout_redis.REDIS_SERVER is None,
                                reason="redis-server is not installed (apt-get install redis-server)")

redis_port = test_request_timeout_redis.redis_port  # the fixture, under this name
nginx_tmp_dir = test_nginx.tmp_dir

WORKERS = 4
CLIENTS = 200
WAIT = 15  # seconds, for any one thing to arrive
SECTION = "Socket.IO with several workers"


def source_of(n):
    """Client n's own address: 127.0.0.0/8 is all loopback on Linux."""
    return "127.0.%d.%d" % (1 + n // 250, 1 + n % 250)


class SourceAdapter(requests.adapters.HTTPAdapter):
    """requests' connections from one local address."""

    def __init__(self, source):
        self.source = source
        requests.adapters.HTTPAdapter.__init__(self)

    def init_poolmanager(self, *args, **kwargs):
        kwargs["source_address"] = (self.source, 0)
        return requests.adapters.HTTPAdapter.init_poolmanager(self, *args, **kwargs)


@pytest.fixture
def websocket_from_source(monkeypatch):
    """websocket-client connects from the address a ("source", address) entry of its sockopt
    names (engineio passes websocket_extra_options through; websocket-client has no option)."""
    original = websocket_client._http._open_socket

    def open_socket(addrinfo_list, sockopt, timeout):
        sources = [option[1] for option in sockopt if option[0] == "source"]
        if not sources:
            return original(addrinfo_list, sockopt, timeout)
        family, kind, proto, _, address = addrinfo_list[0]
        sock = socket.socket(family, kind, proto)
        sock.settimeout(timeout)
        sock.bind((sources[0], 0))
        sock.connect(address)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    monkeypatch.setattr(websocket_client._http, "_open_socket", open_socket)


class Peer:
    """A python-socketio client from its own address that reconnects by itself; the texts of
    the ``message`` events it got, in order, and its connects and disconnects."""

    def __init__(self, url, n, upgrade):
        self.n, self.source, self.upgrade = n, source_of(n), upgrade
        self.texts = []
        self.connects = 0
        self.disconnects = []
        session = requests.Session()
        session.mount("http://", SourceAdapter(self.source))
        self.sio = socketio.Client(
            reconnection_delay=0.2, reconnection_delay_max=1, randomization_factor=0.5, http_session=session,
            websocket_extra_options={"sockopt": [("source", self.source)]},
        )
        self.sio.on("connect", self._connected)
        self.sio.on("disconnect", lambda reason=None: self.disconnects.append(reason))
        self.sio.on("message", lambda data: self.texts.append(data["text"]))
        self.sio.connect(url, transports=["polling", "websocket"] if upgrade else ["polling"], wait_timeout=WAIT)
        self.pid = self.where()

    def _connected(self):
        self.connects += 1

    def where(self):
        return self.sio.call("where", timeout=WAIT)["pid"]

    def shout(self, text):
        assert self.sio.call("shout", {"text": text}, timeout=WAIT) == {"ok": True}

    def close(self):
        try:
            self.sio.disconnect()
        except Exception:  # noqa: BLE001 (a client of a stopped server: nothing to tell)
            pass


def start_instance(redis, directory, *flags):
    path = [ROOT, _fake_gevent_websocket(directory, importable=False)]
    env = {"PYTHONPATH": os.pathsep.join(path), "SOCKETIO_MESSAGE_QUEUE": "redis://127.0.0.1:%d/0" % redis,
           "SOCKETIO_ASYNC_MODE": ""}
    # (--no-overload-control: 200 clients connecting at once, half of them long-polling, saturate
    # the 2 CPUs of CI's machine for longer than overload control's interval, and python-socketio's
    # client does not retry a 503; this test is about where each connection lands.)
    instance = CLIServer("--workers", str(WORKERS), "--sticky", "--graceful-timeout", "2", "--no-overload-control", *flags,
                         "--chdir", os.path.join(ROOT, "examples"), "socketio_redis:app", env=env)
    instance.wait_ready()
    wait_until(lambda: len(children_of(instance.process.pid)) == WORKERS, 20, "%d workers" % WORKERS)
    return instance


def nginx_in_front(directory, instance):
    port = free_port()
    config = documented_config("nginx", section=SECTION)
    config = substitute(config, "listen 80;", "listen 127.0.0.1:%d;" % port)
    config = substitute(config, "10.0.0.11:8000", "127.0.0.1:%d" % instance.port)
    # Each client holds a long poll or a WebSocket, and a second request at times: two
    # connections on each side of nginx, more than the 256 of test_nginx's worker.
    whole = substitute(test_nginx.nginx_conf(directory, config), "worker_connections 256;", "worker_connections 2048;")
    (directory / "nginx.conf").write_text(whole)
    nginx = subprocess.Popen([test_nginx.NGINX, "-p", str(directory), "-c", str(directory / "nginx.conf")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        wait_for_port(port, timeout=15, process=nginx)
    except AssertionError:
        stop_process(nginx, signal.SIGQUIT)
        pytest.skip("nginx did not start here: %s" % nginx.stderr.read().decode(errors="replace")[-500:])
    return nginx, port


def haproxy_in_front(directory, instance):
    port = free_port()
    config = documented_config("haproxy", section=SECTION)
    config = substitute(config, "bind :80\n", "bind 127.0.0.1:%d\n" % port)
    config = substitute(config, "10.0.0.11:8000", "127.0.0.1:%d" % instance.port)
    path = directory / "haproxy.cfg"
    path.write_text(config)
    check = subprocess.run([test_haproxy.HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr
    haproxy = subprocess.Popen([test_haproxy.HAPROXY, "-db", "-f", str(path)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    wait_for_port(port, process=haproxy)
    return haproxy, port


@pytest.fixture(params=["straight", "nginx", "haproxy"])
def sticky_socketio(request, redis_port, nginx_tmp_dir, websocket_from_source):
    """(url the clients connect to, the greenserve instance), its proxy started in front."""
    directory, front, signum = nginx_tmp_dir, None, None
    if request.param == "nginx":
        for skip, why in ((test_nginx.NGINX is None, "nginx is not installed (apt-get install nginx-light)"),
                          (test_nginx.WORKER_USER is None, "no user www-data to run nginx's workers as"),
                          (os.geteuid() != 0, "nginx's master must run as root to run its workers as www-data")):
            if skip:
                pytest.skip(why)
    if request.param == "haproxy" and test_haproxy.HAPROXY is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    # Behind HAProxy every connection starts with its PROXY header (HAProxy is 127.0.0.1, trusted).
    instance = start_instance(redis_port, directory, *(["--proxy-protocol"] if request.param == "haproxy" else []))
    try:
        if request.param == "nginx":
            front, port = nginx_in_front(directory, instance)
            signum = signal.SIGQUIT
        elif request.param == "haproxy":
            front, port = haproxy_in_front(directory, instance)
            signum = signal.SIGUSR1  # soft stop
        yield ("http://127.0.0.1:%d" % port) if front is not None else instance.url, instance
    finally:
        if front is not None:
            stop_process(front, signum)
        if instance.process.poll() is None:
            instance.stop()


def connect_all(url):
    """CLIENTS peers, connected 40 at a time; the even ones upgrade to WebSocket."""
    with ThreadPoolExecutor(40) as pool:
        return list(pool.map(lambda n: Peer(url, n, upgrade=n % 2 == 0), range(CLIENTS)))


def received_each_once(peers, texts):
    for peer in peers:
        wait_until(lambda: set(texts) <= set(peer.texts), WAIT,
                   "client %d (%s, worker %d) to get %s (has %s)" % (peer.n, peer.source, peer.pid, texts, peer.texts[-5:]))
    time.sleep(0.3)  # a duplicate would come right behind
    for peer in peers:
        assert sorted(t for t in peer.texts if t in texts) == sorted(texts), (peer.n, peer.texts)


def check_placement(peers, workers):
    """All of a client's requests reach one worker: the clients whose addresses hash to one slot
    all say the same worker, and each worker holds one slot's."""
    from greenserve.sticky import owner

    by_slot = {}
    for peer in peers:
        by_slot.setdefault(owner(peer.source, WORKERS), set()).add(peer.pid)
    assert all(len(pids) == 1 for pids in by_slot.values()), by_slot
    assert sorted(pid for pids in by_slot.values() for pid in pids) == sorted(workers), (by_slot, workers)
    for peer in peers:
        assert peer.sio.transport() == ("websocket" if peer.upgrade else "polling"), (peer.n, peer.sio.transport())


def test_200_clients_on_four_workers_all_connect_and_get_every_broadcast(sticky_socketio):
    url, instance = sticky_socketio
    peers = []
    try:
        peers = connect_all(url)
        check_placement(peers, children_of(instance.process.pid))
        # A broadcast from a client of each worker reaches every client once, through Redis.
        senders = {peer.pid: peer for peer in peers}
        texts = ["from %d" % pid for pid in senders]
        for pid, peer in senders.items():
            peer.shout("from %d" % pid)
        received_each_once(peers, texts)
        assert all(peer.connects == 1 and not peer.disconnects for peer in peers)
    finally:
        with ThreadPoolExecutor(40) as pool:
            list(pool.map(Peer.close, peers))
    code, _, err = instance.stop()
    assert code == 0 and "Traceback" not in err and "--sticky" not in err, err[-3000:]


@pytest.mark.parametrize("sticky_socketio", ["straight"], indirect=True)  # (the proxies change nothing of it)
def test_a_worker_killed_under_load_moves_only_its_clients(sticky_socketio):
    url, instance = sticky_socketio
    peers = []
    try:
        peers = connect_all(url)
        victim = peers[0].pid
        moving = [peer for peer in peers if peer.pid == victim]
        staying = [peer for peer in peers if peer.pid != victim]
        shouter = staying[0]
        # Load: a broadcast every 50 ms from a client that stays, each reaching all 200.
        sent, pause, done = [], threading.Event(), threading.Event()
        errors = queue.Queue()

        def shout():
            n = 0
            while not done.is_set():
                if pause.is_set():
                    time.sleep(0.01)
                    continue
                try:
                    shouter.shout("load %d" % n)
                    sent.append("load %d" % n)
                except Exception as exc:  # noqa: BLE001 (the test's thread reports it)
                    errors.put(exc)
                    return
                n += 1
                time.sleep(0.05)

        loader = threading.Thread(target=shout, daemon=True)
        loader.start()
        time.sleep(1.0)
        # Between two broadcasts: no poll of another client's is on its way through the victim
        # (a connection the victim has accepted and not yet handed over dies with it).
        pause.set()
        time.sleep(0.3)
        os.kill(victim, signal.SIGKILL)
        pause.clear()
        wait_until(lambda: all(peer.disconnects for peer in moving), WAIT, "the killed worker's clients to notice")
        wait_until(lambda: all(peer.sio.connected and peer.connects == 2 for peer in moving), 2 * WAIT,
                   "the killed worker's clients to reconnect")
        time.sleep(1.0)
        done.set()
        loader.join(WAIT)
        assert errors.empty(), errors.get()
        replacement = {peer.where() for peer in moving}
        assert len(replacement) == 1 and victim not in replacement
        assert replacement < set(children_of(instance.process.pid))
        # The others never noticed: no disconnection, every broadcast of the whole run, once.
        assert all(peer.connects == 1 and not peer.disconnects for peer in staying)
        received_each_once(staying, sent)
        # And once back, the moved clients get every broadcast too.
        shouter.shout("after")
        received_each_once(peers, ["after"])
    finally:
        with ThreadPoolExecutor(40) as pool:
            list(pool.map(Peer.close, peers))
    code, _, err = instance.stop()
    assert code == 0 and "Traceback" not in err, err[-3000:]
    assert "was killed by SIGKILL; starting another" in err, err[-3000:]

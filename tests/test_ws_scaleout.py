"""Flask-SocketIO across workers and machines (docs/deployment.md, "WebSockets across workers and machines").

Real components, all on 127.0.0.1 and started here: a redis-server (Debian's) as the message
queue, two `greenserve` instances of two workers each serving examples/socketio_redis.py, and
nginx in front of both with the configuration of docs/deployment.md, read from the page itself
so the two cannot drift (only addresses and ports are substituted). python-socketio clients on
the WebSocket transport hold a connection on every worker of both instances; a broadcast from
any of them reaches every client; then one instance gets a TERM by its PID: its clients are
disconnected (greenserve's built-in WebSocket: 1001 at once; simple-websocket through the
hand-off: at the graceful timeout, without a close frame), reconnect through nginx to the other
instance, and every message sent after that reaches every client. Everything started is
stopped by its PID; every wait is bounded.
"""

import json
import os
import queue
import signal
import subprocess
import threading
import time

import pytest

from tests import test_nginx, test_request_timeout_redis
from tests.conftest import (
    ROOT, CLIServer, children_of, documented_config, free_port, gevent_websocket_path, substitute, wait_for_port,
    wait_until,
)

socketio = pytest.importorskip("socketio", reason="python-socketio is not installed")
pytest.importorskip("flask_socketio", reason="flask-socketio is not installed")
pytest.importorskip("websocket", reason="websocket-client (python-socketio[client]) is not installed")
websockets_client = pytest.importorskip("websockets.sync.client", reason="websockets is not installed")
from websockets.exceptions import ConnectionClosed  # noqa: E402 (after the skip)

from tests.test_socketio import _fake_gevent_websocket  # noqa: E402

pytestmark = [
    pytest.mark.skipif(test_request_timeout_redis.REDIS_SERVER is None,
                       reason="redis-server is not installed (apt-get install redis-server)"),
    pytest.mark.skipif(test_nginx.NGINX is None, reason="nginx is not installed (apt-get install nginx-light)"),
    pytest.mark.skipif(test_nginx.WORKER_USER is None, reason="no user www-data to run nginx's workers as"),
    pytest.mark.skipif(os.geteuid() != 0, reason="nginx's master must run as root to run its workers as www-data"),
]

# The fixtures of those modules, under the names used here.
redis_port = test_request_timeout_redis.redis_port
nginx_tmp_dir = test_nginx.tmp_dir

WAIT = 10  # seconds, for any one thing to arrive
GRACEFUL_TIMEOUT = 5  # the instances' --graceful-timeout
MOST_CLIENTS = 24  # per instance, while looking for a client on each of its workers


def nginx_conf(directory, port, upstream_ports):
    """docs/deployment.md's nginx configuration for WebSockets, on loopback addresses."""
    config = documented_config("nginx", section="WebSockets across workers and machines")
    config = substitute(config, "listen 80;", "listen 127.0.0.1:%d;" % port)
    config = substitute(config, "10.0.0.11:8000", "127.0.0.1:%d" % upstream_ports[0])
    config = substitute(config, "10.0.0.12:8000", "127.0.0.1:%d" % upstream_ports[1])
    return test_nginx.nginx_conf(directory, config)


class Peer:
    """A python-socketio client on the WebSocket transport that reconnects by itself (its
    defaults, with shorter delays); the texts of the ``message`` events it got, in order."""

    def __init__(self, url, name):
        self.url, self.name = url, name
        self.texts = []
        self.disconnects = []  # (reason, monotonic time)
        self.connects = 0
        self.sio = socketio.Client(reconnection_delay=0.2, reconnection_delay_max=1, randomization_factor=0.5)
        self.sio.on("connect", self._connected)
        self.sio.on("disconnect", self._disconnected)
        self.sio.on("message", lambda data: self.texts.append(data["text"]))
        self.sio.connect(url, transports=["websocket"], wait_timeout=WAIT)
        self.where = self.call("where")

    def _connected(self):
        self.connects += 1

    def _disconnected(self, reason=None):
        self.disconnects.append((reason, time.monotonic()))

    def call(self, event, data=None):
        return self.sio.call(event, data, timeout=WAIT)

    def shout(self, text):
        assert self.call("shout", {"text": text}) == {"ok": True}

    def close(self):
        self.sio.disconnect()


class RawObserver:
    """An Engine.IO session on a strict WebSocket client (the `websockets` library), to see how
    the server closes it: python-socketio's client does not tell the close code. The session
    runs in a thread of its own, answering the server's pings."""

    def __init__(self, url):
        self._where, self._closed = queue.Queue(), queue.Queue()
        url = url.replace("http://", "ws://") + "/socket.io/?EIO=4&transport=websocket"
        threading.Thread(target=self._run, args=(url,), daemon=True).start()
        self.where = self._where.get(timeout=2 * WAIT)
        if isinstance(self.where, BaseException):
            raise self.where

    def _run(self, url):
        try:
            with websockets_client.connect(url, open_timeout=WAIT, close_timeout=2) as ws:
                assert ws.recv(timeout=WAIT).startswith("0{")  # Engine.IO open
                ws.send("40")  # Socket.IO connect, default namespace
                assert ws.recv(timeout=WAIT).startswith("40{")
                ws.send('421["where"]')  # an event with ack id 1
                self._serve(ws, lambda message: message.startswith("431"), timeout=WAIT)
                self._serve(ws, lambda message: False, timeout=None)
        except ConnectionClosed as closed:
            rcvd = closed.rcvd
            self._closed.put((rcvd.code, rcvd.reason) if rcvd is not None else (None, None))
        except BaseException as exc:  # the handshake failed: the test's thread raises it
            self._where.put(exc)

    def _serve(self, ws, wanted, timeout):
        """Answer pings (a session that does not is closed by the server) until ``wanted``."""
        while True:
            message = ws.recv(timeout=timeout)
            if message == "2":
                ws.send("3")
            elif wanted(message):
                self._where.put(json.loads(message[3:])[0])
                return

    def close_code(self, timeout):
        """(code, reason) of the server's close frame; (None, None) when there was none."""
        return self._closed.get(timeout=timeout)


@pytest.fixture(params=["built-in", "hand-off"])
def scaleout(nginx_tmp_dir, redis_port, request):
    """redis-server, two instances of two workers, nginx with the documented config in front.
    engineio's gevent driver serves the WebSockets with greenserve's built-in
    ``environ["wsgi.websocket"]`` when gevent-websocket is importable ("built-in"), and with
    simple-websocket through the upgrade hand-off when it is not ("hand-off")."""
    directory = nginx_tmp_dir
    if request.param == "built-in":
        path = [ROOT] + gevent_websocket_path()
    else:
        path = [ROOT, _fake_gevent_websocket(directory, importable=False)]
    existing = os.environ.get("PYTHONPATH")
    env = {"PYTHONPATH": os.pathsep.join(path + ([existing] if existing else [])),
           "SOCKETIO_MESSAGE_QUEUE": "redis://127.0.0.1:%d/0" % redis_port, "SOCKETIO_ASYNC_MODE": ""}
    # --reuse-port, as docs/deployment.md advises for long-lived connections: the kernel spreads
    # them evenly over the workers, where with the shared socket one worker may take most, and
    # a few clients reach every worker.
    instances = [
        CLIServer("--workers", "2", "--reuse-port", "--graceful-timeout", str(GRACEFUL_TIMEOUT), "--chdir", "examples",
                  "socketio_redis:app", env=env)
        for _ in range(2)
    ]
    port = free_port()
    (directory / "nginx.conf").write_text(nginx_conf(directory, port, [i.port for i in instances]))
    nginx = subprocess.Popen(
        [test_nginx.NGINX, "-p", str(directory), "-c", str(directory / "nginx.conf")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        for instance in instances:
            instance.wait_ready()
            wait_until(lambda: len(children_of(instance.process.pid)) == 2, 20, "two workers")
        try:
            wait_for_port(port, timeout=15, process=nginx)
        except AssertionError:
            pytest.skip("nginx did not start here: %s" % nginx.stderr.read().decode(errors="replace")[-500:])
        yield {"instances": instances, "url": "http://127.0.0.1:%d" % port, "dir": directory,
               "websocket": request.param}
    finally:
        if nginx.poll() is None:
            nginx.send_signal(signal.SIGQUIT)
        for instance in instances:
            if instance.process.poll() is None:
                instance.stop()
        try:
            nginx.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(nginx.pid, signal.SIGKILL)
            nginx.wait(timeout=5)


def clients_on_every_worker(url, master, workers, name):
    """Peers connected to ``url`` until each of ``workers`` (the PIDs of ``master``'s workers)
    holds at least one: which worker accepts a connection is the kernel's choice."""
    peers = []
    while {peer.where["pid"] for peer in peers} != set(workers) or len(peers) < 3:
        assert len(peers) < MOST_CLIENTS, "no client reached some worker of %d: %s" % (
            master, sorted(peer.where["pid"] for peer in peers))
        peer = Peer(url, "%s%d" % (name, len(peers)))
        assert peer.where["master"] == master, (peer.where, master)
        peers.append(peer)
    return peers


def received_each_once(peers, texts):
    """Wait until every peer got each of ``texts``; then each exactly once."""
    for peer in peers:
        wait_until(lambda: set(texts) <= set(peer.texts), WAIT, "%s to get %s (has %s)" % (peer.name, texts, peer.texts))
    time.sleep(0.3)  # a duplicate would come right behind
    for peer in peers:
        assert sorted(t for t in peer.texts if t in texts) == sorted(texts), (peer.name, peer.where, peer.texts)


def test_a_broadcast_reaches_every_worker_of_both_instances_and_survives_a_stop(scaleout):
    instances, url = scaleout["instances"], scaleout["url"]
    masters = [instance.process.pid for instance in instances]
    workers = {master: children_of(master) for master in masters}
    assert all(len(pids) == 2 for pids in workers.values()), workers
    peers = []
    try:
        # ip_hash keys on the client address's first three octets: every client here is
        # 127.0.0.1, so nginx sends them all to one instance, "pinned". The clients through
        # nginx cover its workers; clients connected straight to the other instance, "other",
        # cover its own. Those through nginx are the ones that must move when "pinned" stops:
        # their reconnection goes through nginx, which finds "pinned" refusing and passes them
        # to "other" (a client straight to the stopped instance would have nowhere to go).
        first = Peer(url, "probe")
        peers.append(first)
        pinned = first.where["master"]
        assert pinned in masters, (first.where, masters)
        other = next(master for master in masters if master != pinned)
        other_url = next(i.url for i in instances if i.process.pid == other)
        peers.extend(clients_on_every_worker(url, pinned, workers[pinned], "nginx"))
        peers.extend(clients_on_every_worker(other_url, other, workers[other], "direct"))
        held = {(peer.where["master"], peer.where["pid"]) for peer in peers}
        assert held == {(m, w) for m in masters for w in workers[m]}, held  # every worker of both

        # A broadcast from a client on each instance reaches every client, through Redis.
        moving = [peer for peer in peers if peer.where["master"] == pinned]
        staying = [peer for peer in peers if peer.where["master"] == other]
        moving[-1].shout("from pinned")
        staying[-1].shout("from other")
        received_each_once(peers, ["from pinned", "from other"])

        # Two strict observers on "pinned", one through nginx and one straight, see how the
        # stop closes their WebSocket.
        observers = [RawObserver(url), RawObserver(next(i.url for i in instances if i.process.pid == pinned))]
        assert [o.where["master"] for o in observers] == [pinned, pinned]

        stopped = next(i for i in instances if i.process.pid == pinned)
        stopped.process.send_signal(signal.SIGTERM)
        if scaleout["websocket"] == "built-in":
            # greenserve's own WebSockets: the stop closes each with 1001 "going away" as it
            # begins (through nginx too), and the clients go at once.
            for observer in observers:
                assert observer.close_code(WAIT)[0] == 1001
        else:
            # simple-websocket's, through the hand-off: they are the application's. The stopping
            # workers still serve them, and messages still reach their clients, until the
            # graceful timeout; then the workers close the connections, with no close frame.
            staying[0].shout("while stopping")
            received_each_once(peers, ["while stopping"])
            assert all(not peer.disconnects for peer in peers)
            for observer in observers:
                assert observer.close_code(GRACEFUL_TIMEOUT + WAIT) == (None, None)
        wait_until(lambda: all(peer.disconnects for peer in moving), WAIT, "the clients of the stopped instance to go")
        assert all(not peer.disconnects for peer in staying)
        stopped.process.wait(timeout=GRACEFUL_TIMEOUT + WAIT)
        code, _, err = stopped.stop()
        assert code == 0 and "Traceback" not in err, err
        cut = "graceful timeout (%.1f s): closing" % GRACEFUL_TIMEOUT in err
        assert cut == (scaleout["websocket"] == "hand-off"), err

        # They reconnected by themselves, through nginx, to the other instance.
        def moved():
            return all(peer.sio.connected and peer.connects >= 2 for peer in moving)

        wait_until(moved, WAIT, "the clients of the stopped instance to reconnect")
        for peer in moving:
            peer.where = peer.call("where")
            assert peer.where["master"] == other, peer.where
        assert all(peer.connects == 1 for peer in staying)

        # Every message sent after that reaches every client, from wherever it is sent.
        after = ["after %d" % n for n in range(6)]
        for n, text in enumerate(after):
            (moving if n % 2 else staying)[n // 2 % 3].shout(text)
        received_each_once(peers, after)
    finally:
        for peer in peers:
            peer.close()
    survivor = next(i for i in instances if i.process.pid == other)
    code, _, err = survivor.stop()
    assert code == 0 and "Traceback" not in err and "graceful timeout" not in err, err
    errors = (scaleout["dir"] / "nginx-error.log").read_text()
    # nginx found the stopped instance refusing, and passed its clients to the other one.
    assert "connect() failed (111: Connection refused) while connecting to upstream" in errors, errors[-2000:]

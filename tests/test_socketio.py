"""Flask-SocketIO through the real CLI: examples/socketio_chat.py with python-socketio clients.

engineio's "gevent" async driver (the one Flask-SocketIO picks under the greenserve command)
serves WebSockets with gevent-websocket's ``environ["wsgi.websocket"]`` when ``import
geventwebsocket`` works (greenserve's built-in WebSocket), and with simple-websocket (greenserve's
upgrade hand-off) when it does not. Each server here gets a directory first on its PYTHONPATH
with a ``geventwebsocket`` package of our own: one that raises ImportError (hidden), or an empty
one (importable: all engineio checks), so the tests do not depend on whether the real
gevent-websocket is installed; "real" puts the real one there (conftest.gevent_websocket_path).
Loopback only, every wait bounded.
"""

import os
import queue
import subprocess
import urllib.request

import pytest

from tests.conftest import ROOT, Client, gevent_websocket_path, greenserve_command, subprocess_env, wait_until

pytest.importorskip("flask_socketio", reason="flask-socketio is not installed")
socketio = pytest.importorskip("socketio", reason="python-socketio is not installed")
pytest.importorskip("websocket", reason="websocket-client (python-socketio[client]) is not installed")

WAIT = 10  # seconds, for any one thing to arrive


def _fake_gevent_websocket(tmp_path, importable):
    directory = tmp_path / ("stub" if importable else "hidden")
    package = directory / "geventwebsocket"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "" if importable else 'raise ImportError("hidden by the test: tests/test_socketio.py")\n'
    )
    return str(directory)


@pytest.fixture
def chat_server(cli_server, tmp_path):
    """chat_server(gevent_websocket="hidden"|"importable"|"real", async_mode=None) -> a CLIServer."""

    def start(gevent_websocket="hidden", async_mode=None):
        if gevent_websocket == "real":
            first = gevent_websocket_path()
        else:
            first = [_fake_gevent_websocket(tmp_path, importable=gevent_websocket == "importable")]
        existing = os.environ.get("PYTHONPATH")
        env = {"PYTHONPATH": os.pathsep.join([ROOT] + first + ([existing] if existing else []))}
        env["SOCKETIO_ASYNC_MODE"] = async_mode or ""
        return cli_server("--chdir", "examples", "--access-log", "-", "socketio_chat:app", env=env)

    return start


class ChatClient:
    """A socketio.Client whose received events land in a queue, in order."""

    def __init__(self, server, transports=("websocket",)):
        self.events = queue.Queue()
        self.sio = socketio.Client(reconnection=False)
        self.sio.on("status", lambda data: self.events.put(("status", data)))
        self.sio.on("message", lambda data: self.events.put(("message", data)))
        kwargs = {"transports": list(transports)} if transports else {}
        self.sio.connect(server.url, wait_timeout=WAIT, **kwargs)

    def call(self, event, data=None):
        return self.sio.call(event, data, timeout=WAIT)

    def next(self):
        return self.events.get(timeout=WAIT)

    def pending(self):
        found = []
        while True:
            try:
                found.append(self.events.get_nowait())
            except queue.Empty:
                return found

    def join(self, room, user):
        assert self.call("join", {"room": room, "user": user}) == {"room": room, "user": user}
        assert self.next() == ("status", {"room": room, "user": user, "text": user + " joined"})

    def say(self, text):
        assert self.call("message", {"text": text}) == {"ok": True}

    def disconnect(self):
        self.sio.disconnect()
        wait_until(lambda: not self.sio.connected, WAIT, "the client to disconnect")


def _async_mode(server):
    with urllib.request.urlopen(server.url + "/", timeout=WAIT) as response:
        page = response.read().decode()
    return page.rsplit("async mode: ", 1)[1].split("<", 1)[0]


def _access_lines(out, *parts):
    return [line for line in out.splitlines() if all(part in line for part in parts)]


def _stop(server):
    code, out, err = server.stop()
    # Every client left before the stop: nothing may have held it up to the graceful timeout.
    assert "graceful timeout" not in err, err
    return code, out, err


def test_rooms_over_websocket_with_gevent_websocket_hidden(chat_server):
    server = chat_server()
    assert _async_mode(server) == "gevent"
    alice, bob, carol = (ChatClient(server) for _ in range(3))
    for client in (alice, bob, carol):
        assert client.sio.transport() == "websocket"
    alice.join("a", "alice")
    bob.join("a", "bob")
    assert alice.next() == ("status", {"room": "a", "user": "bob", "text": "bob joined"})
    carol.join("b", "carol")

    alice.say("hello bob")
    assert alice.next() == ("message", {"user": "alice", "text": "hello bob"})
    assert bob.next() == ("message", {"user": "alice", "text": "hello bob"})
    bob.say("hi alice")
    assert bob.next() == ("message", {"user": "bob", "text": "hi alice"})
    assert alice.next() == ("message", {"user": "bob", "text": "hi alice"})

    # Room "b" hears nothing of "a", and the other way round: carol's own message comes back to
    # her after anything of room "a" would have (one connection's events arrive in order).
    carol.say("anyone?")
    assert carol.next() == ("message", {"user": "carol", "text": "anyone?"})
    assert carol.pending() == []
    # A message to a room one has not joined is refused.
    lone = ChatClient(server)
    assert lone.call("message", {"text": "x"}) == {"error": "join a room first"}
    lone.disconnect()

    # leave, then disconnect without leaving: both reach the server, which tells the room.
    assert bob.call("leave") == {"left": "a"}
    assert alice.next() == ("status", {"room": "a", "user": "bob", "text": "bob left"})
    assert bob.call("message", {"text": "x"}) == {"error": "join a room first"}
    assert bob.pending() == []
    carol.join("a", "carol")  # leaves "b", joins "a"
    assert alice.next() == ("status", {"room": "a", "user": "carol", "text": "carol joined"})
    carol.disconnect()
    assert alice.next() == ("status", {"room": "a", "user": "carol", "text": "carol left"})
    assert alice.pending() == [] and bob.pending() == []
    alice.disconnect()
    bob.disconnect()

    code, out, err = _stop(server)
    assert code == 0 and "Traceback" not in err, err
    # The four WebSockets went through the upgrade hand-off: 101s in the access log.
    assert len(_access_lines(out, "transport=websocket", '" 101 ')) == 4, out


def test_default_transports_start_polling_then_upgrade(chat_server):
    server = chat_server()
    polled = ChatClient(server, transports=None)  # polling first, then the upgrade
    wait_until(lambda: polled.sio.transport() == "websocket", WAIT, "the upgrade to websocket")
    direct = ChatClient(server)
    polled.join("a", "polled")
    direct.join("a", "direct")
    assert polled.next()[1]["user"] == "direct"
    polled.say("from the upgraded one")
    direct.say("from the direct one")
    for client in (polled, direct):
        assert client.next() == ("message", {"user": "polled", "text": "from the upgraded one"})
        assert client.next() == ("message", {"user": "direct", "text": "from the direct one"})
    polled.disconnect()
    assert direct.next() == ("status", {"room": "a", "user": "polled", "text": "polled left"})
    direct.disconnect()

    code, out, err = _stop(server)
    assert code == 0 and "Traceback" not in err, err
    # The session began with long-polling and was upgraded on its sid.
    assert _access_lines(out, "transport=polling", '" 200 '), out
    assert len(_access_lines(out, "transport=websocket", "sid=", '" 101 ')) == 1, out


def test_threading_async_mode_uses_simple_websocket_even_with_gevent_websocket(chat_server):
    # async_mode="threading" always serves WebSockets with simple-websocket; under the greenserve
    # command its threads are greenlets.
    server = chat_server(gevent_websocket="importable", async_mode="threading")
    assert _async_mode(server) == "threading"
    one, two = ChatClient(server), ChatClient(server, transports=None)
    wait_until(lambda: two.sio.transport() == "websocket", WAIT, "the upgrade to websocket")
    assert one.sio.transport() == "websocket"
    one.join("room", "one")
    two.join("room", "two")
    assert one.next()[1]["user"] == "two"
    one.say("ping")
    two.say("pong")
    for client in (one, two):
        assert [client.next(), client.next()] == [
            ("message", {"user": "one", "text": "ping"}),
            ("message", {"user": "two", "text": "pong"}),
        ]
    one.disconnect()
    two.disconnect()
    code, out, err = _stop(server)
    assert code == 0 and "Traceback" not in err, err


@pytest.mark.parametrize("gevent_websocket", ["importable", "real"])
def test_with_gevent_websocket_importable_the_builtin_websocket_serves_it(chat_server, gevent_websocket):
    # Flask-SocketIO's documented gevent setup: gevent-websocket installed, so engineio's gevent
    # driver takes environ["wsgi.websocket"] (its version, path, origin, protocol, receive,
    # send, close): greenserve's built-in WebSocket, with nothing to configure.
    server = chat_server(gevent_websocket=gevent_websocket)
    assert _async_mode(server) == "gevent"

    raw = Client(("127.0.0.1", server.port), timeout=WAIT)
    try:
        raw.send(
            b"GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Connection: Upgrade\r\nUpgrade: websocket\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        head = raw._read_until(b"\r\n\r\n").decode("latin-1")
        assert head.startswith("HTTP/1.1 101 ") and "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head, head
    finally:
        raw.close()

    alice, bob = ChatClient(server), ChatClient(server, transports=None)  # direct; polling, then upgraded
    wait_until(lambda: bob.sio.transport() == "websocket", WAIT, "the upgrade to websocket")
    assert alice.sio.transport() == "websocket"
    alice.join("a", "alice")
    bob.join("a", "bob")
    assert alice.next()[1]["user"] == "bob"
    bob.say("over the built-in WebSocket")
    for client in (alice, bob):
        assert client.next() == ("message", {"user": "bob", "text": "over the built-in WebSocket"})
    alice.disconnect()
    assert bob.next() == ("status", {"room": "a", "user": "alice", "text": "alice left"})
    bob.disconnect()

    code, out, err = _stop(server)
    assert code == 0 and "Traceback" not in err and "RuntimeError" not in err, err
    assert "gevent-websocket" not in err, err  # no boot warning any more
    assert len(_access_lines(out, "transport=websocket", '" 101 ')) == 3, out
    assert not _access_lines(out, "transport=websocket", '" 500 '), out


def test_check_says_nothing_of_gevent_websocket(tmp_path):
    # `greenserve check` imports the app as a worker would: engineio in gevent mode with
    # gevent-websocket importable is no finding now.
    stub = _fake_gevent_websocket(tmp_path, importable=True)
    env = subprocess_env(PYTHONPATH=os.pathsep.join([ROOT, stub]), SOCKETIO_ASYNC_MODE="")
    result = subprocess.run(
        greenserve_command("check", "--chdir", "examples", "socketio_chat:app"),
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "gevent-websocket" not in result.stdout, result.stdout

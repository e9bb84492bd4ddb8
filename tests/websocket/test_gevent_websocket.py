"""A gevent-websocket application, unchanged, served by greenserve.WSGIServer.

The script a gevent.pywsgi + gevent-websocket user has -- ``WSGIServer(addr, app,
handler_class=WebSocketHandler)`` with the import changed to greenserve's -- runs in a
subprocess with the real gevent-websocket importable (conftest.gevent_websocket_path), and its
app is bench/ws_apps.py's ``gevent_websocket_echo``. The exceptions greenserve raises are caught
by the app's ``except geventwebsocket.exceptions.WebSocketError``.
"""

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT, gevent_websocket_path, subprocess_env

websockets_sync = pytest.importorskip("websockets.sync.client", reason="websockets is not installed")
websocket_client = pytest.importorskip("websocket", reason="websocket-client is not installed")
from websockets.exceptions import ConnectionClosed  # noqa: E402

WAIT = 10

SCRIPT = r'''
from geventwebsocket.exceptions import WebSocketError
from geventwebsocket.handler import WebSocketHandler

from greenserve import WSGIServer  # was: from gevent.pywsgi import WSGIServer
from bench.ws_apps import gevent_websocket_echo


def app(environ, start_response):
    if environ["PATH_INFO"] == "/late":
        ws = environ["wsgi.websocket"]
        ws.receive()
        ws.close()
        try:
            ws.send("too late")
        except WebSocketError as exc:
            print("caught %s.%s: %s" % (type(exc).__module__, type(exc).__name__, exc), flush=True)
        return []
    return gevent_websocket_echo(environ, start_response)


server = WSGIServer(("127.0.0.1", 0), app, handler_class=WebSocketHandler, log=None)
server.start()
print(server.server_port, flush=True)
server.serve_forever()
'''


@pytest.fixture
def pywsgi_script():
    env = subprocess_env(PYTHONPATH=os.pathsep.join([ROOT] + gevent_websocket_path()))
    process = subprocess.Popen(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        port = process.stdout.readline().strip()
        assert port.isdigit(), process.communicate(timeout=WAIT)
        yield process, int(port)
    finally:
        process.kill()  # (by its own PID)
        process.communicate(timeout=WAIT)


def test_gevent_websocket_echo_app_runs_unchanged(pywsgi_script):
    process, port = pywsgi_script
    with websockets_sync.connect("ws://127.0.0.1:%d/" % port) as client:
        client.send("text")
        assert client.recv(timeout=WAIT) == "text"
        client.send(b"\x00binary")
        assert client.recv(timeout=WAIT) == b"\x00binary"
    assert client.close_code == 1000
    other = websocket_client.create_connection("ws://127.0.0.1:%d/" % port, timeout=WAIT)
    try:
        other.send("from websocket-client")
        assert other.recv() == "from websocket-client"
    finally:
        other.close()


def test_greenserves_errors_are_gevent_websockets(pywsgi_script):
    process, port = pywsgi_script
    with websockets_sync.connect("ws://127.0.0.1:%d/late" % port) as client:
        client.send("go")
        with pytest.raises(ConnectionClosed):  # nothing but the Close comes
            client.recv(timeout=WAIT)
    assert client.close_code == 1000
    line = process.stdout.readline()
    assert line == "caught greenserve.websocket.exceptions.WebSocketError: Connection is already closed\n", line

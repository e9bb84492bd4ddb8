"""A WebSocket echo server with Flask-Sock, served by greenserve unchanged.

    pip install flask-sock
    greenserve --chdir examples websocket_echo:app

Flask-Sock (through simple-websocket) finds the connection's socket in the environ under
``gunicorn.socket``, which greenserve sets for requests that ask for an upgrade; it answers the
handshake on the socket itself, and greenserve leaves the connection to it until the view
returns (docs/websockets.md). When the server stops, the view closes each WebSocket with
1001 "going away" (the stop hook, ``environ["greenserve.stopping"]``). Try it with ``websocat ws://127.0.0.1:8000/echo``, or the Python
client snippet in examples/README.md.
"""

import gevent
from flask import Flask, request
from flask_sock import ConnectionClosed, Sock

app = Flask(__name__)
sock = Sock(app)


@app.get("/")
def index():
    return "WebSocket echo at ws://<this host>/echo\n"


def _close_when_stopping(stopping, ws):
    # greenserve sets environ["greenserve.stopping"] when a graceful stop (TERM, or HUP's reload
    # of this worker) begins: say goodbye with 1001 "going away", and the client knows to
    # reconnect, instead of being cut off at the end of --graceful-timeout.
    stopping.wait()
    try:
        ws.close(reason=1001, message="server restarting")
    except ConnectionClosed:
        pass


@sock.route("/echo")
def echo(ws):
    # time.sleep, sockets and simple-websocket's reader thread are cooperative: the greenserve
    # command patched before importing this module.
    stopping = request.environ.get("greenserve.stopping")  # absent under other servers
    watcher = gevent.spawn(_close_when_stopping, stopping, ws) if stopping is not None else None
    try:
        while True:
            data = ws.receive()
            if data is None:  # the client closed
                break
            ws.send(data)
    finally:
        if watcher is not None:
            watcher.kill(block=False)

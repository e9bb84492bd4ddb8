"""A WebSocket echo server with Flask-Sock, served by greenserve unchanged.

    pip install flask-sock
    greenserve --chdir examples websocket_echo:app

Flask-Sock (through simple-websocket) finds the connection's socket in the environ under
``gunicorn.socket``, which greenserve sets for requests that ask for an upgrade; it answers the
handshake on the socket itself, and greenserve leaves the connection to it until the view
returns (docs/websockets.md). Try it with ``websocat ws://127.0.0.1:8000/echo``, or the Python
client snippet in examples/README.md.
"""

from flask import Flask
from flask_sock import Sock

app = Flask(__name__)
sock = Sock(app)


@app.get("/")
def index():
    return "WebSocket echo at ws://<this host>/echo\n"


@sock.route("/echo")
def echo(ws):
    # time.sleep, sockets and simple-websocket's reader thread are cooperative: the greenserve
    # command patched before importing this module.
    while True:
        data = ws.receive()
        if data is None:  # the client closed
            break
        ws.send(data)

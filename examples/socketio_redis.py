"""Flask-SocketIO across workers and machines: a broadcast through Redis reaches every client.

    pip install flask-socketio redis
    redis-server --port 6379 --save "" &
    greenserve --workers 2 --reuse-port --bind 127.0.0.1:8001 --chdir examples socketio_redis:app
    greenserve --workers 2 --reuse-port --bind 127.0.0.1:8002 --chdir examples socketio_redis:app
    # and nginx in front of both: docs/deployment.md, "WebSockets across workers and machines"

Every worker of every instance is a Socket.IO server of its own, knowing only the clients
connected to it. With ``message_queue=`` each of them publishes its emits to Redis and delivers
to its own clients what any of them published, so an emit "to everyone" reaches every client,
wherever it is connected. SOCKETIO_MESSAGE_QUEUE is the queue's URL (default
``redis://127.0.0.1:6379/0``); SOCKETIO_ASYNC_MODE, if set, is passed as ``async_mode`` (as in
socketio_chat.py). With gevent-websocket installed, engineio's gevent driver uses greenserve's
built-in WebSocket, which a stopping worker closes with 1001 at once (clients reconnect to
another worker or instance); without it, simple-websocket through the hand-off.

Events from a client: ``where`` answers which worker holds this connection (``pid``, the
instance's master ``master``, ``host``); ``shout`` {"text"} sends ``message`` {"text", "from"}
to every client of every worker and answers ``{"ok": True}``.

Several workers behind one port share its connections at the kernel's choice, so a client's
requests are sticky to a worker only when they are one connection (the WebSocket transport,
``transports=["websocket"]``), or with ``--sticky``, which hands every connection to the
worker that owns its client (long-polling included)::

    greenserve --workers 4 --sticky --bind 127.0.0.1:8000 --chdir examples socketio_redis:app

Without it, long-polling clients need one worker per instance and sticky sessions in front
(nginx ``ip_hash``): docs/deployment.md says why, and how.
"""

import os
import socket

from flask import Flask
from flask_socketio import SocketIO, emit

MAX_TEXT = 2000
MESSAGE_QUEUE = os.environ.get("SOCKETIO_MESSAGE_QUEUE") or "redis://127.0.0.1:6379/0"

app = Flask(__name__)
app.config["SECRET_KEY"] = os.environ.get("FLASK_SECRET_KEY", "change me")
socketio = SocketIO(app, message_queue=MESSAGE_QUEUE, async_mode=os.environ.get("SOCKETIO_ASYNC_MODE") or None)


def _where():
    # Under the greenserve command a worker's parent is its instance's master.
    return {"pid": os.getpid(), "master": os.getppid(), "host": socket.gethostname()}


@socketio.on("where")
def on_where(data=None):
    return _where()


@socketio.on("shout")
def on_shout(data):
    text = data.get("text") if isinstance(data, dict) else None
    if not isinstance(text, str) or not 0 < len(text) <= MAX_TEXT:
        return {"error": "text: 1 to %d characters" % MAX_TEXT}
    # broadcast: published to the queue, delivered by every worker to its own clients,
    # this one's included.
    emit("message", {"text": text, "from": _where()}, broadcast=True)
    return {"ok": True}


@app.get("/")
def index():
    return "Flask-SocketIO (async mode %s) on worker %d\n" % (socketio.async_mode, os.getpid())

"""A chat with rooms on Flask-SocketIO, served by greenserve (one worker).

    pip install flask-socketio
    greenserve --chdir examples socketio_chat:app           # http://127.0.0.1:8000/

Events from a client: ``join`` {"room", "user"} (leaves the room it was in, joins this one and
sends a ``status`` to the room), ``message`` {"text"} (sends {"user", "text"} to that room only)
and ``leave``. Each answers with an acknowledgement, which clients may ignore. ``/`` serves a
tiny page to try it in a browser (it loads the Socket.IO client from cdn.socket.io).

Run it with ONE worker (the default). With several workers, Flask-SocketIO needs sticky sessions
in front of them (a client's requests must all reach the same worker) and a message queue
between them (``SocketIO(app, message_queue="redis://")``) so that an emit reaches clients
connected to another worker; this example sets up neither (socketio_redis.py does).

WebSocket: the async mode is left to Flask-SocketIO, which picks "gevent" under the greenserve
command. Its gevent driver uses gevent-websocket's ``environ["wsgi.websocket"]`` when that
package is importable, which greenserve builds in; without gevent-websocket installed, it uses
simple-websocket through the upgrade hand-off (docs/websockets.md). WebSocket works either way.
To use simple-websocket whatever is installed, set SOCKETIO_ASYNC_MODE=threading (under the
greenserve command, threads are greenlets): it is passed as ``async_mode``; unset or empty
leaves Flask-SocketIO's choice.
"""

import os

from flask import Flask, request
from flask_socketio import SocketIO, emit, join_room, leave_room

MAX_NAME = 64
MAX_TEXT = 2000

app = Flask(__name__)
app.config["SECRET_KEY"] = os.environ.get("FLASK_SECRET_KEY", "change me")
socketio = SocketIO(app, async_mode=os.environ.get("SOCKETIO_ASYNC_MODE") or None)

# sid -> (room, user) for the connections that joined a room (one worker: a plain dict).
members = {}


def _name(value):
    value = value.strip() if isinstance(value, str) else ""
    return value if 0 < len(value) <= MAX_NAME else None


def _leave(sid):
    room, user = members.pop(sid, (None, None))
    if room is not None:
        leave_room(room, sid=sid)
        emit("status", {"room": room, "user": user, "text": "%s left" % user}, to=room)
    return room


@socketio.on("join")
def on_join(data):
    room = _name((data or {}).get("room"))
    user = _name((data or {}).get("user"))
    if room is None or user is None:
        return {"error": "room and user: 1 to %d characters" % MAX_NAME}
    _leave(request.sid)
    join_room(room)
    members[request.sid] = (room, user)
    emit("status", {"room": room, "user": user, "text": "%s joined" % user}, to=room)
    return {"room": room, "user": user}


@socketio.on("message")
def on_message(data):
    if request.sid not in members:
        return {"error": "join a room first"}
    text = (data or {}).get("text") if isinstance(data, dict) else data
    if not isinstance(text, str) or not 0 < len(text) <= MAX_TEXT:
        return {"error": "text: 1 to %d characters" % MAX_TEXT}
    room, user = members[request.sid]
    emit("message", {"user": user, "text": text}, to=room)
    return {"ok": True}


@socketio.on("leave")
def on_leave(data=None):
    return {"left": _leave(request.sid)}


@socketio.on("disconnect")
def on_disconnect(*args):
    _leave(request.sid)


PAGE = """<!doctype html><meta charset="utf-8"><title>chat</title>
<script src="https://cdn.socket.io/4.7.5/socket.io.min.js"></script>
<form id="j"><input id="r" placeholder="room" value="lobby"><input id="u" placeholder="name">
<button>join</button></form><form id="m"><input id="t" size="50"><button>send</button></form>
<pre id="log"></pre><script>
const s = io(), $ = (id) => document.getElementById(id);
const log = (line) => { $("log").textContent += line + "\\n"; };
s.on("status", (d) => log("* " + d.text));
s.on("message", (d) => log(d.user + ": " + d.text));
$("j").onsubmit = (e) => { e.preventDefault(); s.emit("join", {room: $("r").value, user: $("u").value},
  (a) => a.error && log("! " + a.error)); };
$("m").onsubmit = (e) => { e.preventDefault(); s.emit("message", {text: $("t").value},
  (a) => a.error && log("! " + a.error)); $("t").value = ""; };
</script>
"""


@app.get("/")
def index():
    return PAGE + "<p>Flask-SocketIO async mode: %s</p>\n" % socketio.async_mode

"""The WebSocket echo apps of bench/wsbench.py.

- ``simple_echo``: a plain WSGI app on simple-websocket (``simple_websocket.Server(environ)``),
  which finds the connection's socket under ``gunicorn.socket``. greenserve and gunicorn's
  gevent worker both set that key for a request that carries ``Upgrade``. When the WebSocket
  ends, the app raises ``StopIteration``, as Flask-Sock does: that tells gunicorn, and
  greenserve, that the app took the connection over and no HTTP response follows.
- ``gevent_websocket_echo``: the same echo on gevent-websocket's ``environ['wsgi.websocket']``,
  for ``gevent.pywsgi.WSGIServer(..., handler_class=geventwebsocket.handler.WebSocketHandler)``
  and, unchanged, for greenserve's built-in WebSocket.

Both echo every message back as it came (text as text, binary as binary), one at a time, until
the client closes. A request without ``Upgrade: websocket`` gets bench/apps.py's 13-byte hello,
so the harness's readiness check (``GET /`` answered 200) works on every server.
"""

import simple_websocket

from bench.apps import hello

try:  # gevent.pywsgi's; greenserve's WebSocket raises subclasses of it when it is importable
    from geventwebsocket.exceptions import WebSocketError
except ImportError:  # pragma: no cover
    WebSocketError = OSError  # (greenserve's own WebSocketError is an OSError, like gevent-websocket's)


def _is_upgrade(environ):
    return environ.get("HTTP_UPGRADE", "").lower() == "websocket"


def simple_echo(environ, start_response):
    if not _is_upgrade(environ):
        return hello(environ, start_response)
    ws = simple_websocket.Server(environ)  # writes the 101 itself, starts its reader "thread" (a greenlet)
    try:
        while True:
            data = ws.receive()  # no timeout: None never comes back; a close raises ConnectionClosed
            if data is None:
                break
            ws.send(data)
    except (simple_websocket.ConnectionClosed, OSError):
        pass
    # Flask-Sock's convention: the connection was taken over, send nothing more on it.
    raise StopIteration


def gevent_websocket_echo(environ, start_response):
    ws = environ.get("wsgi.websocket")
    if ws is None:
        return hello(environ, start_response)
    try:
        while True:
            data = ws.receive()  # None once the client closed
            if data is None:
                break
            ws.send(data)
    except (WebSocketError, OSError):
        pass
    return []

"""The exceptions the built-in WebSocket raises, under gevent-websocket's names.

When gevent-websocket is importable they are subclasses of its own, so an application's
``except geventwebsocket.exceptions.WebSocketError`` catches what greenserve raises; otherwise
they derive from ``OSError`` (``socket.error``), as gevent-websocket's do. Imported at the first
WebSocket, never at server start: gevent-websocket's package imports gevent.pywsgi.
"""


try:
    from geventwebsocket.exceptions import (
        FrameTooLargeException as _FrameTooLarge,
        ProtocolError as _ProtocolError,
        WebSocketError as _WebSocketError,
    )
except ImportError:  # (also a package that hides itself by raising ImportError)
    _WebSocketError = OSError
    _ProtocolError = _FrameTooLarge = None


class WebSocketError(_WebSocketError):
    """Base of the errors the WebSocket object raises (a closed socket, a failed handshake)."""


class ProtocolError(WebSocketError, *((_ProtocolError,) if _ProtocolError is not None else ())):
    """The peer broke RFC 6455 (``receive()`` closes with the code instead of raising it)."""


class FrameTooLargeException(ProtocolError, *((_FrameTooLarge,) if _FrameTooLarge is not None else ())):
    """A message over ``websocket_max_message_size`` (closed with 1009)."""


class HandshakeFailed(WebSocketError):
    """The upgrade request is not a valid WebSocket handshake; the server answered it with
    ``status`` (400, or 426 for a version other than 13) and closes the connection."""

    def __init__(self, message, status):
        WebSocketError.__init__(self, message)
        self.status = status

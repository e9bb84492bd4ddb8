"""Built-in RFC 6455 WebSockets: ``environ["wsgi.websocket"]``, with gevent-websocket's API.

``frames`` (the sans-I/O frame codec), ``handshake`` (the opening handshake), ``deflate``
(permessage-deflate), ``websocket`` (the object an application gets) and ``exceptions``
(``WebSocketError``, ``ProtocolError``, ``FrameTooLargeException``, ``HandshakeFailed``, also
importable from here). Nothing here imports gevent at import time: ``frames`` is bytes in,
events out, like ``http/``.
"""

_EXCEPTIONS = ("WebSocketError", "ProtocolError", "FrameTooLargeException", "HandshakeFailed")


def __getattr__(name):
    # The exceptions on first use (PEP 562): they may import gevent-websocket (see exceptions).
    if name in _EXCEPTIONS:
        from greenserve.websocket import exceptions

        return getattr(exceptions, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

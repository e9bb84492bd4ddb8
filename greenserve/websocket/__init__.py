"""Built-in RFC 6455 WebSockets: the sans-I/O frame codec (``frames``) and what serves it.

Nothing here imports gevent at import time: ``frames`` is bytes in, events out, like ``http/``.
"""

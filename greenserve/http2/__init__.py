"""greenserve.http2: the HTTP/2 protocol core (RFC 9113, RFC 7541), sans-I/O.

Nothing here imports gevent, sockets, settings or the WSGI layer, so every rule is tested with
byte strings alone. The hot modules (``frames``, ``hpack``, ``huffman``) are compiled like
``http/``'s.
"""

"""The application behind --protocol uwsgi in tests/test_uwsgi_server.py (in-process) and
tests/test_uwsgi_nginx.py (``tests.uwsgi_app:app`` behind nginx): /slow sleeps 5 s, /upload reads wsgi.input in
pieces and answers its size and SHA-256, /stream answers without Content-Length, and every other
path answers the environ keys below as JSON, with an X-App header."""

import hashlib
import json

KEYS = ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "RAW_URI", "SERVER_PROTOCOL", "CONTENT_TYPE",
        "CONTENT_LENGTH", "REMOTE_ADDR", "REMOTE_PORT", "SERVER_NAME", "SERVER_PORT", "DOCUMENT_ROOT",
        "HTTP_HOST", "HTTP_USER_AGENT", "HTTP_CONTENT_LENGTH", "HTTP_X_CUSTOM", "HTTP_COOKIE", "wsgi.url_scheme",
        "SCRIPT_NAME")
STREAM = [b"part %d\n" % i for i in range(1000)]


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return iter(STREAM)
    if path == "/slow":  # past a test's request_timeout
        import gevent

        gevent.sleep(5)
    if path == "/upload":
        digest, size = hashlib.sha256(), 0
        while True:
            piece = environ["wsgi.input"].read(65536)
            if not piece:
                break
            digest.update(piece)
            size += len(piece)
        body = json.dumps({"size": size, "sha256": digest.hexdigest()}).encode()
    else:
        body = json.dumps({key: environ.get(key) for key in KEYS}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                              ("X-App", "greenserve")])
    return [body]

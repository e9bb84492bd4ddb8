"""The WSGI applications every server in bench/ is measured with."""

HELLO = b"Hello, World!"
# The classic ~4.5 KB HTML page of the gevent-vs-paste write-up.
PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>greenserve benchmark page</title></head><body>\n"
    + b"".join(b"<p>Paragraph %04d: the quick brown fox jumps over the lazy dog.</p>\n" % i for i in range(64))
    + b"</body></html>\n"
)
MIB = b"x" * (1024 * 1024)


def hello(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(HELLO)))])
    return [HELLO]


def page(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/html"), ("Content-Length", str(len(PAGE)))])
    return [PAGE]


def big(environ, start_response):
    start_response("200 OK", [("Content-Type", "application/octet-stream"), ("Content-Length", str(len(MIB)))])
    return [MIB]


def upload(environ, start_response):
    body = environ["wsgi.input"].read()
    reply = b"%d" % len(body)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(reply)))])
    return [reply]


def app(environ, start_response):
    """Routes by path, so one server process serves every scenario."""
    path = environ["PATH_INFO"]
    if path == "/page":
        return page(environ, start_response)
    if path == "/big":
        return big(environ, start_response)
    if path == "/upload":
        return upload(environ, start_response)
    return hello(environ, start_response)

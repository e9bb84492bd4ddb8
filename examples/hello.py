"""The smallest WSGI application: `greenserve examples.hello:app` (or `greenserve hello:app` from examples/)."""


def app(environ, start_response):
    body = b"Hello from greenserve!\n"
    start_response("200 OK", [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
    return [body]

"""The server hooks that run around each request, pre_request and post_request: a WSGI middleware.

The hooks are settings (``--pre-request``, ``--post-request``, gunicorn's names and arguments);
``process.hooks`` resolves them with the others and says where each runs. Here is what they are
given and when they are called: ``req`` (``Request``, read from the environ), ``resp``
(``Response``, what the application gave start_response), pre_request before the application is
called, post_request after the response's iterable is closed. Not compiled: with neither hook set
the application is not wrapped and nothing here runs.
"""

import os

from greenserve.http.errors import error_response


def wrap_application(application, hooks):
    """The application with pre_request/post_request around it, or itself when neither is set.
    ``hooks``: the start's ``process.hooks.Hooks``, in a worker (its ``worker`` is this one's)."""
    pre, post = hooks.request_hooks()
    if pre is None and post is None:
        return application
    return RequestHooks(application, hooks.worker, pre, post)


class Request:
    """``req`` of pre_request and post_request: what gunicorn's request offers that hooks read.

    ``method``, ``uri`` (the request target as sent), ``path`` (its path, before --root-path is
    taken off), ``query``, ``version`` ((1, 1)), ``scheme``, ``remote_addr``, and ``headers``, a
    list of (NAME, value) with upper-case names as gunicorn's. Read from the environ when asked.
    """

    __slots__ = ("environ",)

    def __init__(self, environ):
        self.environ = environ

    @property
    def method(self):
        return self.environ["REQUEST_METHOD"]

    @property
    def uri(self):
        uri = self.environ.get("RAW_URI")
        if uri is None:
            query = self.query
            uri = self.path + ("?" + query if query else "")
        return uri

    @property
    def path(self):
        uri = self.environ.get("RAW_URI")
        if uri is not None and uri.startswith("/"):
            return uri.partition("?")[0]
        return self.environ.get("SCRIPT_NAME", "") + self.environ.get("PATH_INFO", "")

    @property
    def query(self):
        return self.environ.get("QUERY_STRING", "")

    @property
    def version(self):
        protocol = self.environ.get("SERVER_PROTOCOL", "HTTP/1.0")
        major, _, minor = protocol.partition("/")[2].partition(".")
        return int(major or 1), int(minor or 0)

    @property
    def scheme(self):
        return self.environ.get("wsgi.url_scheme", "http")

    @property
    def remote_addr(self):
        return self.environ.get("REMOTE_ADDR")

    @property
    def headers(self):
        headers = []
        for key, value in self.environ.items():
            if key.startswith("HTTP_"):
                headers.append((key[5:].replace("_", "-"), value))
            elif key in ("CONTENT_TYPE", "CONTENT_LENGTH") and value:
                headers.append((key.replace("_", "-"), value))
        return headers

    def __repr__(self):
        return "<greenserve request %s %s>" % (self.method, self.uri)


class Response:
    """``resp`` of post_request: ``status`` ('200 OK'), ``status_code`` (200) and ``headers`` as the
    application gave them to start_response; None, None and [] when it never called it."""

    __slots__ = ("status", "headers")

    def __init__(self):
        self.status = None
        self.headers = []

    @property
    def status_code(self):
        return int(self.status.split(None, 1)[0]) if self.status else None


class RequestHooks:
    """The application wrapped once with pre_request and post_request (only when one is set, so
    that neither costs anything when unset): pre_request before the application is called,
    post_request after the response's iterable is closed, as the server closes it.

    ``post_request`` takes 4 arguments (``process.hooks.Hooks.request_hooks`` adapts gunicorn's 2
    and 3). A pre_request that raises is answered with ``http.errors``' 500, and logged as the
    hook's."""

    def __init__(self, application, worker, pre_request, post_request):
        self.application = application
        self.worker = worker
        self.pre_request = pre_request
        self.post_request = post_request

    def __call__(self, environ, start_response):
        request = Request(environ)
        if self.pre_request is not None:
            try:
                self.pre_request(self.worker, request)
            except Exception:
                # Said here, naming the hook: raised on, the server would log it as the
                # application's ("Error handling request"), sending its reader to the wrong code.
                self.worker.log.exception("worker pid %d: the pre_request hook raised (%s %s): answered 500",
                                          os.getpid(), request.method, request.uri)
                status, headers, body = error_response(500)
                start_response(status, headers)
                return [body]
        if self.post_request is None:
            return self.application(environ, start_response)
        response = Response()

        def capture(status, headers, exc_info=None):
            response.status = status
            response.headers = headers
            if exc_info is not None:
                return start_response(status, headers, exc_info)
            return start_response(status, headers)

        try:
            body = self.application(environ, capture)
        except BaseException:
            self._post(request, environ, response)
            raise
        return _ClosingBody(body, self, request, environ, response)

    def _post(self, request, environ, response):
        try:
            self.post_request(self.worker, request, environ, response)
        except Exception:
            self.worker.log.exception("worker pid %d: the post_request hook raised", os.getpid())


class _ClosingBody:
    """The application's iterable, with post_request run once it is closed (PEP 3333: the server
    calls close() after the last byte is sent, or when the client went away)."""

    __slots__ = ("body", "hooks", "request", "environ", "response")

    def __init__(self, body, hooks, request, environ, response):
        self.body = body
        self.hooks = hooks
        self.request = request
        self.environ = environ
        self.response = response

    def __iter__(self):
        return iter(self.body)

    def close(self):
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.hooks._post(self.request, self.environ, self.response)

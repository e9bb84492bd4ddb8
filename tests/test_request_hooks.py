"""request_hooks: pre_request/post_request around the application, in one process (the whole
path, with workers and the command's flags, is tests/process/test_hooks.py)."""

from greenserve.request_hooks import wrap_application


class _Log:
    def __init__(self):
        self.lines = []

    def exception(self, message, *args):
        self.lines.append(message % args)


class _Worker:
    def __init__(self):
        self.log = _Log()


class _Hooks:
    """What wrap_application reads of process.hooks.Hooks."""

    def __init__(self, pre=None, post=None):
        self.worker = _Worker()
        self.pre, self.post = pre, post

    def request_hooks(self):
        return self.pre, self.post


def _app(environ, start_response):
    start_response("201 Created", [("Content-Type", "text/plain")])
    return [b"made"]


def _environ():
    return {"REQUEST_METHOD": "GET", "RAW_URI": "/a?b=1", "PATH_INFO": "/a", "QUERY_STRING": "b=1",
            "SERVER_PROTOCOL": "HTTP/1.1", "HTTP_X_ONE": "1"}


def test_without_either_hook_the_application_is_not_wrapped():
    assert wrap_application(_app, _Hooks()) is _app


def test_pre_request_sees_the_request_and_post_request_runs_when_the_body_is_closed():
    seen = []
    hooks = _Hooks(lambda worker, req: seen.append(("pre", req.method, req.path, req.query, req.version)),
                   lambda worker, req, environ, resp: seen.append(("post", resp.status_code, resp.headers)))
    app = wrap_application(_app, hooks)
    started = []
    body = app(_environ(), lambda status, headers, exc_info=None: started.append(status))
    assert list(body) == [b"made"] and started == ["201 Created"]
    assert seen == [("pre", "GET", "/a", "b=1", (1, 1))]
    body.close()
    assert seen[1] == ("post", 201, [("Content-Type", "text/plain")])


def test_a_pre_request_that_raises_is_answered_500_and_logged_as_the_hooks():
    def pre(worker, req):
        raise RuntimeError("no")

    hooks = _Hooks(pre)
    started = []
    body = wrap_application(_app, hooks)(_environ(), lambda status, headers: started.append((status, headers)))
    assert started[0][0].startswith("500 ") and b"".join(body)
    assert hooks.worker.log.lines[0].endswith("the pre_request hook raised (GET /a?b=1): answered 500")

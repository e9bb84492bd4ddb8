"""Errors of the HTTP layer: what a client did wrong, the status code to answer it with, and the answer.

The parser raises these; it never decides how to answer. The connection turns a
``ProtocolError`` into a short text response with ``status_hint`` and closes the connection
(h11's ``RemoteProtocolError(..., error_status_hint=400)`` contract). A peer that simply went
away is not a protocol error: that is ``ClientDisconnected``, logged as one debug line.

``error_response`` is the one place an error answer is written, whoever sends it: the
connection (a client's protocol error), the WSGI adapter (the application failed: 500; it did
not start its response within the request timeout: 504), the proxy middleware (headers that
contradict each other: 400), a pre_request hook that raised (500, ``request_hooks``), the master's
--metrics-bind endpoint (``observe.metrics``: 400, 404, 405, 500), the static files
(``static``: 301, 404, 405, 412, 416).
"""

STATUS_REASONS = {
    301: "Moved Permanently",  # (a static directory's index asked for without its slash)
    400: "Bad Request",
    404: "Not Found",  # (the --metrics-bind endpoint's, for any path but /metrics)
    405: "Method Not Allowed",
    408: "Request Timeout",
    412: "Precondition Failed",
    413: "Content Too Large",
    414: "URI Too Long",
    416: "Range Not Satisfiable",
    417: "Expectation Failed",
    426: "Upgrade Required",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    504: "Gateway Timeout",
    505: "HTTP Version Not Supported",
}


def error_response(status, detail=None):
    """The short text answer for an error ``status``: ``(status line, headers, body)``, the
    arguments of a WSGI ``start_response`` and the body (``framing.build_head`` makes the head).

    ``detail`` says what went wrong, after the status: a client needs it to fix its request.
    None for a server error: the client learns nothing of ours (the error log has it).
    """
    reason = STATUS_REASONS.get(status, "Error")
    if detail is None:
        body = (reason + "\n").encode("latin-1")
    else:
        body = ("%d %s: %s\n" % (status, reason, detail)).encode("latin-1", "replace")
    headers = [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    return "%d %s" % (status, reason), headers, body


class ProtocolError(Exception):
    """The client broke RFC 9112; answer with ``status_hint`` and close the connection."""

    status_hint = 400

    def __init__(self, message, status_hint=None):
        Exception.__init__(self, message)
        if status_hint is not None:
            self.status_hint = status_hint

    @property
    def reason(self):
        return STATUS_REASONS.get(self.status_hint, "Bad Request")


class InvalidRequestLine(ProtocolError):
    """The request-line is not ``method SP request-target SP HTTP-version``."""


class InvalidHeader(ProtocolError):
    """A field line is malformed: bad name, whitespace before the colon, obs-fold, bad value."""


class InvalidFraming(ProtocolError):
    """Content-Length / Transfer-Encoding are ambiguous or malformed: the smuggling vectors."""


class InvalidChunk(ProtocolError):
    """A chunk-size line, chunk terminator or trailer section is malformed."""


class UnsupportedVersion(ProtocolError):
    status_hint = 505


class UnsupportedTransferCoding(ProtocolError):
    """A transfer coding other than chunked (RFC 9112 §6.1: 501 for codings we do not know)."""

    status_hint = 501


class UnsupportedMethod(ProtocolError):
    status_hint = 501


class ExpectationFailed(ProtocolError):
    status_hint = 417


class RequestLineTooLong(ProtocolError):
    status_hint = 414


class HeadersTooLarge(ProtocolError):
    """Too many field lines, one too long, or a chunked trailer section too large."""

    status_hint = 431


class BodyTooLarge(ProtocolError):
    status_hint = 413


class ClientDisconnected(OSError):
    """The peer closed or reset the connection (EOF, EPIPE, ECONNRESET, TLS EOF, ...).

    Ordinary on the internet: it is logged at debug level, never with a traceback. An OSError,
    so that frameworks reading wsgi.input treat it as the I/O error it is (Django turns an
    OSError from the request stream into UnreadablePostError).
    """

"""PEP 3333: the environ, ``start_response``, ``wsgi.input``, ``wsgi.file_wrapper``, and running the app.

One ``Responder`` lives per HTTP/1.1 connection (not per request: nothing is allocated for it on
the hot path) and answers that connection's requests one after the other; an HTTP/2 stream has
one of its own. It knows no socket and no protocol loop: it talks to whatever carries its
requests through ``ConnectionIO``, the I/O contract declared here (``out``/``flush`` for output,
``read_body`` for input, ``send_file`` for ``wsgi.file_wrapper``, ``response_head`` for the
head's form), implemented by ``http11.Http11Protocol`` and by ``http2_protocol.Stream``
(docs/architecture.md, "The protocol seam"). What the bytes of a response look like is decided
by ``http.framing``; this module decides which application data goes where.
"""

import os
from urllib.parse import unquote_to_bytes

from greenlet import GreenletExit

from gevent import get_hub

from greenserve._accel import compiled
from greenserve.admission import RETRY_AFTER
from greenserve.http import errors
from greenserve.http.framing import CONTINUE_100, CloseDelimitedWriter, ResponseError, informational_fields

if compiled():
    from greenserve._csys import SysCalls

    _SYS = SysCalls()  # for roomy_copy's presized dict
else:
    _SYS = None

# Raised through the application, but not its failure: the greenlet is being killed, or the
# process is exiting. Anything else the app raises (gevent.Timeout included) is answered 500.
_NOT_APPLICATION_ERRORS = (GreenletExit, SystemExit, KeyboardInterrupt)

_HEADER_KEY_CACHE_MAX = 4096
# A static file's piece where sendfile is not used (TLS, HTTP/2, --no-sendfile): large enough
# that TLS records and system calls are few, small enough to hold per request.
_FILE_PIECE = 262144
# ...and after this much, the loop polls before the next piece, as send_file does between its
# sendfile calls (connection._SENDFILE_CHUNK, nginx's sendfile_max_chunk): a reader as fast as
# loopback never fills the socket, and one response held the worker until its file had gone.
_POLL_EVERY = 2 << 20
# lower-case field name -> environ key, or "" for names we drop (see _environ_key).
_ENVIRON_KEYS = {"content-type": "CONTENT_TYPE", "content-length": "CONTENT_LENGTH"}


def _environ_key(lname):
    """The environ key for a lower-case field name; "" for a name that is dropped."""
    key = _ENVIRON_KEYS.get(lname)
    if key is not None:
        return key
    if "_" in lname:
        # "X_Forwarded_For" and "X-Forwarded-For" both become HTTP_X_FORWARDED_FOR; a client
        # could spoof a header a proxy in front of us set. nginx and Apache drop these too.
        key = ""
    else:
        key = "HTTP_" + lname.upper().replace("-", "_")
    if len(_ENVIRON_KEYS) < _HEADER_KEY_CACHE_MAX:
        _ENVIRON_KEYS[lname] = key
    return key


def server_environ(config, address, url_scheme, errors_stream, multiprocess=False):
    """The environ keys shared by every request a listener serves (built once per listener)."""
    if isinstance(address, tuple):
        server_name = str(address[0]) or "localhost"
        server_port = str(address[1])
    else:
        # A unix socket has no name or port; PEP 3333 says they can never be empty.
        server_name, server_port = "localhost", "0"
    from greenserve._version import __version__

    return {
        "GATEWAY_INTERFACE": "CGI/1.1",
        "SERVER_SOFTWARE": "greenserve/%s" % __version__,
        "SERVER_NAME": server_name,
        "SERVER_PORT": server_port,
        "SCRIPT_NAME": config.root_path,
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": url_scheme,
        "wsgi.errors": errors_stream,
        "wsgi.multithread": False,
        "wsgi.multiprocess": multiprocess,
        "wsgi.run_once": False,
        # wsgi.input always ends at the end of the request body, chunked or not, so frameworks
        # may read to EOF (the werkzeug/mod_wsgi convention; gevent #1308).
        "wsgi.input_terminated": True,
        "wsgi.file_wrapper": FileWrapper,
    }


def _offer_websocket(responder, environ):
    """The built-in WebSocket for an upgrade request that asks for one, else None (imported
    here, at the first upgrade: nothing of it is loaded for a server that never sees one)."""
    from greenserve.websocket.websocket import offer

    return offer(responder, environ)


def roomy_copy(environ):
    """A copy of the server's environ with room for a connection's and a request's keys.

    Each connection's environ is a copy of this one plus its peer's two keys, and each
    request's a copy of that plus a dozen. In the compiled build this copy is made presized,
    and copies of it keep its table size (CPython clones a compact dict's table whole), so
    those keys go in without the dict growing (a resize per request otherwise), and a
    connection's copy is one clone, not an insert per key (~3,500 instructions a connection).
    As plain Python: an ordinary copy.
    """
    if _SYS is not None:
        return _SYS.roomy_copy(environ, 24)
    return environ.copy()


def connection_environ(base, address):
    """One connection's environ keys: the server's (``base``, from ``roomy_copy``) and its peer's
    address. A PROXY header's addresses and TLS's keys are added to it before its first request;
    each request's environ is a copy of it (``Responder._environ``)."""
    environ = base.copy()  # presized: see roomy_copy
    if isinstance(address, tuple):
        environ["REMOTE_ADDR"] = address[0]
        environ["REMOTE_PORT"] = str(address[1])
    else:
        environ["REMOTE_ADDR"] = ""  # a unix socket peer has no address (as in gunicorn)
    return environ


class EmptyInput:
    """``wsgi.input`` of a request without a body. Stateless, so one instance serves them all."""

    __slots__ = ()

    def read(self, size=-1):
        return b""

    def readline(self, size=-1):
        return b""

    def readlines(self, hint=-1):
        return []

    def __iter__(self):
        return self

    def __next__(self):
        raise StopIteration


EMPTY_INPUT = EmptyInput()


class Input:
    """``wsgi.input`` for a request with a body: reads through the connection, at most to the end.

    ``Expect: 100-continue`` is answered here, once, on the first read, and only if the response
    has not started (RFC 9110 §10.1.1; gevent #93 sent one per read).
    """

    __slots__ = ("_responder", "_buffer", "_eof")

    def __init__(self, responder):
        self._responder = responder
        self._buffer = b""
        self._eof = False

    def _fill(self, size):
        """Return the next piece of body (at most size bytes if size > 0), b"" at the end."""
        if self._eof:
            return b""
        data = self._responder.read_body(size)
        if not data:
            self._eof = True
        return data

    def read(self, size=-1):
        # File semantics (io.BufferedReader): read(n) returns n bytes unless the body ends
        # first. Django's request.body is one read(CONTENT_LENGTH) call; a short read would
        # truncate it.
        if size is None or size < 0:
            pieces = [self._buffer] if self._buffer else []
            self._buffer = b""
            while True:
                data = self._fill(-1)
                if not data:
                    return b"".join(pieces)
                pieces.append(data)
        if size == 0:
            return b""
        buffer = self._buffer
        if len(buffer) >= size:
            self._buffer = buffer[size:]
            return buffer[:size]
        self._buffer = b""
        pieces = [buffer] if buffer else []
        missing = size - len(buffer)
        while missing > 0:
            data = self._fill(missing)
            if not data:
                break
            pieces.append(data)
            missing -= len(data)
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def readline(self, size=-1):
        if size is None:
            size = -1
        buffer = self._buffer
        while True:
            newline = buffer.find(b"\n")
            if newline >= 0:
                end = newline + 1
                break
            if 0 <= size <= len(buffer):
                end = size
                break
            data = self._fill(-1 if size < 0 else size - len(buffer))
            if not data:
                end = len(buffer)
                break
            buffer += data
        if 0 <= size < end:
            end = size
        self._buffer = buffer[end:]
        return buffer[:end]

    def readlines(self, hint=-1):
        lines = []
        total = 0
        while True:
            line = self.readline()
            if not line:
                return lines
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:
                return lines

    def __iter__(self):
        return self

    def __next__(self):
        line = self.readline()
        if not line:
            raise StopIteration
        return line


class FileWrapper:
    """``wsgi.file_wrapper``: a file the server may send with ``sendfile`` (PEP 3333 optional ext.)."""

    def __init__(self, filelike, blksize=65536):
        self.filelike = filelike
        self.blksize = blksize
        close = getattr(filelike, "close", None)
        if close is not None:
            self.close = close

    def __iter__(self):
        return self

    def __next__(self):
        data = self.filelike.read(self.blksize)
        if data:
            return data
        raise StopIteration

    def regular_file(self):
        """``(fileno, offset, size)`` when the wrapped object is a regular file on disk, else None."""
        try:
            fileno = self.filelike.fileno()
            offset = self.filelike.tell()
            stat = os.fstat(fileno)
        except (AttributeError, OSError, ValueError):
            return None
        import stat as stat_module

        if not stat_module.S_ISREG(stat.st_mode) or stat.st_size == 0:
            # Size 0 is also what procfs, sysfs and some FUSE files report whatever they hold:
            # those are read, not sent with sendfile (as gunicorn does).
            return None
        return fileno, offset, max(stat.st_size - offset, 0)


def _as_bytes(data):
    """A bytes-like chunk whose len() counts bytes (PEP 3333 says bytestrings; bytearray and
    memoryview are accepted alike). A memoryview of wider items is cast to bytes: its len()
    counts items, and the framing must count bytes."""
    if isinstance(data, memoryview):
        if data.itemsize != 1 or data.ndim != 1:
            return data.cast("B") if data.c_contiguous else data.tobytes()
        return data
    if isinstance(data, (bytes, bytearray)):
        return data
    raise TypeError("the application must return bytes, got %s" % type(data).__name__)


def _not_a_list(headers):
    """start_response's and wsgi.early_hints' refusal of headers that are not a list."""
    return TypeError("response headers must be a list, got %s" % type(headers).__name__)


class RequestBodyError(IOError):
    """Raised from ``wsgi.input`` when the client's body is malformed or arrives too slowly."""


class RequestTimeout(BaseException):
    """Thrown into a request's greenlet, where it waits, when its application has not started
    its response within ``request_timeout`` seconds (the server's sweeper throws it).

    A BaseException, like ``GreenletExit``: ``except Exception`` in the application or a library
    (a retry loop, a framework's error page) must not swallow it, or the request would go on
    holding its connection and whatever it waits on. Not ``gevent.Timeout`` itself, though that
    is a BaseException too: applications set their own gevent timeouts and catch them with
    ``except gevent.Timeout`` (without checking it is theirs), which would swallow ours; and the
    responder must tell ours (504) from one of the application's that escaped (500).
    """

    def __init__(self, timeout, elapsed):
        BaseException.__init__(self, "no response after %.2f s (request_timeout %g s)" % (elapsed, timeout))
        self.timeout = timeout
        self.elapsed = elapsed


# The innermost frames of a timed-out request's stack that its error-log entry shows; a deeper
# stack (a framework's middleware) is cut at the outer end, with a count.
_STACK_FRAMES = 24


def _is_machinery(tb):
    """Is this traceback entry greenserve's or gevent's own (not the application's)? Judged by
    the frame's module name: compiled modules' entries carry it too, where file names vary."""
    name = tb.tb_frame.f_globals.get("__name__") or ""
    return name.split(".", 1)[0] in ("greenserve", "gevent", "greenlet")


def _waiting_stack(exc):
    """Where a timed-out request waited, innermost call last: its traceback from the
    application's first frame down to the wait. The responder's frames above the application
    are left out, and so are gevent's frames inside the wait, but for the first (what the
    application called: a socket's recv, ``sleep``), as they are the same for every wait."""
    import traceback

    entries = []
    entry = exc.__traceback__
    while entry is not None:
        entries.append(entry)
        entry = entry.tb_next
    first = 0
    while first < len(entries) and _is_machinery(entries[first]):
        first += 1
    end = len(entries)
    while end > first and _is_machinery(entries[end - 1]):
        end -= 1
    inside = len(entries) - end
    if inside:
        end += 1
        inside -= 1
    shown = entries[first:end][-_STACK_FRAMES:]
    left_out = end - first - len(shown)
    frames = traceback.StackSummary.extract((entry.tb_frame, entry.tb_lineno) for entry in shown)
    return "%s%s%s" % (
        "(%d outer frames left out)\n" % left_out if left_out else "",
        "".join(frames.format()).rstrip("\n"),
        "\n  (%d frames inside gevent's wait left out)" % inside if inside else "",
    )


def _wait_for_poll():
    """Let the worker's loop poll for I/O before going on: a timer due at once fires after the
    loop's next poll, whatever else was ready run first. (gevent.sleep(0) would not poll: gevent
    runs up to 50 queued callbacks before it looks at I/O again. The socket's own write watcher,
    which send_file waits on, is not this greenlet's to wait on under HTTP/2.)"""
    hub = get_hub()
    timer = hub.loop.timer(0.0)
    try:
        hub.wait(timer)
    finally:
        timer.close()


class ConnectionIO:
    """What a ``Responder`` may use of what carries its requests: the I/O contract
    ``http11.Http11Protocol`` implements for an HTTP/1.1 connection, and
    ``http2_protocol.Stream`` for an HTTP/2 stream (declared here, so the responder depends on
    no connection or protocol module).

    ``out`` is the list of pieces queued to be sent, in order; ``closing`` says no further request
    follows this one (a stop began: the response says ``Connection: close``); ``can_sendfile``
    says ``send_file`` may be used (no TLS); ``sock`` is the socket an upgraded application takes
    over (None where there is none to take). ``request_deadline`` is non-zero while the request's
    application runs under ``request_timeout`` (the protocol arms it); the responder clears it
    once the response's head is queued, or the application is done.
    """

    # The attributes wsgi.pxd declares (the compiled build's C fields), as slots in the pure build.
    __slots__ = ("out", "closing", "can_sendfile", "sock", "request_deadline")

    def read_body(self, max_data, flush=True):
        """The next piece of the current request's body, at most max_data bytes if > 0; b"" at
        its end. What is queued goes out before a wait for more, unless ``flush`` is False."""
        raise NotImplementedError

    def flush(self):
        """Send what is queued in ``out``, blocking until the kernel has taken it."""
        raise NotImplementedError

    def flush_soon(self):
        """A complete response is queued and app code is still to run: send it before that code."""
        raise NotImplementedError

    def flush_if_blocked(self):
        """Have what is queued sent if the application blocks before the next flush."""
        raise NotImplementedError

    def send_file(self, fileno, offset, count):
        """Send count bytes of a regular file from offset, after what is queued has been flushed."""
        raise NotImplementedError

    def queue_error(self, exc, access_log=True):
        """Queue the response for a client's protocol error (``exc.status_hint``); the connection
        closes after it. Returns the body's length."""
        raise NotImplementedError

    def response_head(self, status, headers, request, keep_alive, body_length, server_line):
        """The head of the response to ``request``, for the application's ``status`` and
        ``headers`` (``http.framing.build_head``'s checks and its arguments): ``(data, status
        code, body writer, keep_alive)``, ``data`` being what the responder queues on ``out``
        for the head. HTTP/1.1 builds its bytes; an HTTP/2 stream its header fields, and a
        writer that frames nothing (its DATA frames delimit the body)."""
        raise NotImplementedError

    def informational(self, status, headers):
        """Send a 1xx response before the final one now (103 Early Hints, RFC 8297): ``status``
        an int, ``headers`` a list of validated ``(name, value)`` native strings."""
        raise NotImplementedError


class Outcome:
    """What ``Responder.respond`` tells the connection about the request it answered, besides
    whether the connection may carry another (what ``respond`` returns).

    One per responder, refilled per request (nothing allocated on the hot path), and filled as
    the response goes, so the access log can read it when ``respond()`` raised (the client went
    away): ``taken_over``, the application owns the socket (nothing more is sent or read on it); ``body_done``, the request body was
    read to its end (else the client may still be sending it); ``started``, the head is queued;
    ``status_code``, ``body_sent``, ``environ`` and ``headers`` (as given to ``start_response``)
    for the access log. Between requests ``environ`` is the connection's own keys.
    """

    __slots__ = ("taken_over", "body_done", "started", "status_code", "body_sent", "environ", "headers")

    def __init__(self, environ):
        self.taken_over = False
        self.body_done = True
        self.started = False
        self.status_code = 0
        self.body_sent = 0
        self.environ = environ
        self.headers = None


class ConnectionSetup:
    """What each connection of a server reads of it, read once (``WSGIServer.update_environ``,
    at start): a connection takes these from C fields instead of ~25 attribute lookups on the
    server and its Config (~4,500 instructions a connection, callgrind). Fixed from start on,
    as the server's settings are; what changes while it serves (its application, its environ,
    ``stopping``, ``stats``) is read from the server itself.
    """

    __slots__ = ("keepalive", "keep_alive", "header_timeout", "body_timeout", "send_timeout", "request_timeout",
                 "limits", "ssl_context", "proxy_protocol", "recv_buffer", "proxy", "server_line", "root_path",
                 "drain_limit", "error_log", "sendfile", "choose_protocol", "sticky", "admission", "static")

    def __init__(self, server):
        config = server.config
        # keepalive = 0 (gunicorn's "no keep-alive"): every response closes its connection, and
        # the first request is waited for as long as a head may take to arrive.
        self.keep_alive = config.keepalive > 0.0
        self.keepalive = config.keepalive if self.keep_alive else config.header_timeout
        self.header_timeout = config.header_timeout
        self.body_timeout = config.body_timeout
        self.send_timeout = config.send_timeout
        self.request_timeout = config.request_timeout  # 0.0: off
        self.limits = server.limits
        self.ssl_context = server.ssl_context
        self.proxy_protocol = server.proxy_protocol
        self.recv_buffer = server.recv_buffer
        self.proxy = getattr(server, "proxy", None)
        self.server_line = server.server_line
        self.root_path = config.root_path
        self.drain_limit = config.drain_limit
        self.error_log = server.error_log
        self.sendfile = config.sendfile and server.ssl_context is None
        # (connection) -> the protocol that speaks on it, made after its PROXY header and TLS
        # handshake (docs/architecture.md, "The protocol seam").
        self.choose_protocol = server.choose_protocol
        # --sticky: the server's sticky.Place, which hands a connection to the worker that owns
        # its client (Connection.run); None when off.
        self.sticky = getattr(server, "sticky", None)
        # Overload control: the server's admission.Admission, asked before each application
        # call; None when off (--no-overload-control), and a request pays one test.
        self.admission = getattr(server, "admission", None)
        # --static: the server's static.Static, asked for the requests under its prefixes; None
        # when no mount is configured, and a request pays one test.
        self.static = getattr(server, "static", None)


class Responder:
    """Runs the application for each request of one connection (one ``ConnectionIO``) and frames its response.

    Per response it holds ``status`` as given to ``start_response`` and what the head decided
    (``writer``: the body's framing, ``response_keep_alive``); what the connection learns of the
    response is in ``outcome`` (see Outcome). For the request body: ``body_received``, and
    ``drain_failed`` (more was left than ``drain_limit``: the connection must close).
    """

    # The fields wsgi.pxd declares, as slots in the pure build too (see Connection's).
    __slots__ = (
        "outcome", "connection", "out", "application", "conn_environ", "proxy", "server_line", "root_path",
        "drain_limit", "error_log", "persistent", "start_response", "write", "request", "status", "writer",
        "response_keep_alive", "body_received", "drain_failed", "body_error", "continue_sent", "websocket",
        "early_hints", "admission", "static",
    )

    def __init__(self, connection, server, environ):
        self.connection = connection  # a ConnectionIO: all the responder uses of its connection
        self.out = connection.out
        self.application = server.application
        self._take(server.connection_setup)
        self.start_response = self._start_response  # bound once, not per request
        self.write = self._write
        self.early_hints = self._early_hints
        # wsgi.early_hints is this responder's: stored once among the connection's keys, which
        # each request's environ copies (one entry more to copy: ~40 instructions a keep-alive
        # request, callgrind), rather than stored in every environ (~200). Where responders
        # share a connection's keys (HTTP/2's streams), each after the first takes a copy.
        if "wsgi.early_hints" in environ:
            environ = environ.copy()
        environ["wsgi.early_hints"] = self.early_hints
        # The connection's own keys (connection_environ): the base of each request's environ.
        self.conn_environ = environ
        self.outcome = Outcome(environ)
        self.request = None
        self.status = None
        self.writer = None
        self.response_keep_alive = False
        self.body_received = 0
        self.drain_failed = False
        self.body_error = None
        self.continue_sent = False
        # The built-in WebSocket offered to the last upgrade request (set by each one, so
        # ordinary requests pay nothing for it). One that was never used (the application
        # answered HTTP) may outlive its request: it does nothing unless ``started``.
        self.websocket = None

    def _take(self, setup):
        """The server's settings a responder uses, from its ConnectionSetup."""
        self.proxy = setup.proxy
        self.server_line = setup.server_line
        self.root_path = setup.root_path
        self.drain_limit = setup.drain_limit
        self.error_log = setup.error_log
        self.persistent = setup.keep_alive
        self.admission = setup.admission
        self.static = setup.static

    def release(self):
        """Drop what the last request left behind (the connection is idle or gone)."""
        outcome = self.outcome
        outcome.environ = self.conn_environ
        outcome.headers = None
        self.request = None
        self.body_error = None

    def close(self):
        """The connection ended: break the reference cycles so it is freed without the GC."""
        self.release()
        self.start_response = self.write = self.early_hints = None
        if self.conn_environ is not None:  # (an open WebSocket let go of it)
            self.conn_environ.pop("wsgi.early_hints", None)  # bound to this responder
        self.connection = None
        self.websocket = None

    # --- the request body, for Input ---

    def read_body(self, size):
        if self.outcome.body_done:
            return b""
        if self.request.expect_continue and not self.continue_sent:
            self.continue_sent = True
            if not self.outcome.started:
                self.out.append(CONTINUE_100)
                self.connection.flush()
        try:
            data = self.connection.read_body(size)
        except errors.ProtocolError as exc:
            self.body_error = exc
            raise RequestBodyError(str(exc)) from None
        if data:
            self.body_received += len(data)
        else:
            self.outcome.body_done = True
        return data

    # --- PEP 3333 callables ---

    def _start_response(self, status, headers, exc_info=None):
        if exc_info is not None:
            try:
                if self.outcome.started:
                    # PEP 3333: too late to change the response; re-raise so the server closes.
                    raise exc_info[1].with_traceback(exc_info[2])
            finally:
                exc_info = None
        elif self.status is not None:
            if self.websocket is not None and self.websocket.started:
                # The built-in WebSocket answered the request: what the application says after
                # is dropped, as gevent-websocket's handler does (Flask-Sockets answers 200 then).
                return self.write
            raise AssertionError("start_response() called a second time without exc_info (PEP 3333)")
        if type(status) is not str:
            raise TypeError("status must be a str, got %r" % (status,))
        if type(headers) is not list:
            raise _not_a_list(headers)
        self.status = status
        self.outcome.headers = headers
        if self.request.upgrade is not None and status[:3] == "101":
            self._switch_protocols()
        return self.write

    def _early_hints(self, headers):
        """``environ["wsgi.early_hints"](headers)``, gunicorn's API: a 103 (Early Hints, RFC 8297)
        with ``headers``, sent at once, so that the client can fetch what they name while the
        application is still at work. As often as the application likes, each call its own 103.

        ``headers`` are checked as start_response's are (the same TypeError or ResponseError for
        the same faults, on every call: a fault shows whether or not a 103 goes out). Once the final head is
        queued the call does nothing: hints are advisory (RFC 8297 §2), a 1xx cannot follow the
        final response, and an application need not know when its head left (PEP 3333: with
        the first non-empty chunk). The protocol may send none either (HTTP/1.0).
        """
        if type(headers) is not list:
            raise _not_a_list(headers)
        fields = informational_fields(headers)
        if self.request is not None and not self.outcome.started:
            self.connection.informational(103, fields)

    def _write(self, data):
        """The ``write()`` callable, and the path of every chunk of an iterable that is not a list."""
        if type(data) is not bytes:
            data = _as_bytes(data)
        if not self.outcome.started:
            if self.status is None:
                raise AssertionError("write() before start_response() (PEP 3333)")
            if not data:
                return  # PEP 3333: the head goes out with the first non-empty chunk
            self._start(-1)
        if not len(data):
            return
        writer = self.writer
        n = writer.write(self.out, data)
        self.outcome.body_sent += n
        if writer.full():
            if n:
                # The body is complete: send it before the app's remaining work, unless more
                # pipelined requests wait, whose responses may join it in one send, or the
                # request's unread body is to be drained first (see _send_result). (No body at
                # all, HEAD's: the data is dropped and nothing is sent for it.)
                self._send_soon()
            return
        # PEP 3333: each chunk of a streamed body is sent before the next is asked for.
        self.connection.flush()

    # --- one request ---

    def respond(self, request):
        """Answer one request; return True if the connection may carry another. The rest of
        what the connection learns is in ``outcome``."""
        self.request = request
        self.status = None
        outcome = self.outcome
        outcome.headers = None
        outcome.started = False
        outcome.body_sent = 0
        self.body_received = 0
        self.body_error = None
        self.drain_failed = False
        self.continue_sent = False
        has_body = request.chunked or request.content_length > 0
        outcome.body_done = not has_body
        connection = self.connection
        if self.out:
            # Responses of earlier pipelined requests wait to go out in one send; if this app
            # blocks (a long poll), they must not wait for it.
            connection.flush_if_blocked()
        environ = outcome.environ = self._environ(request, has_body)
        outcome.taken_over = False
        # Static files are served before overload control: they cost a few system calls and no
        # application time, so shedding them would save nothing, and a page whose scripts and
        # styles fail to load under load is broken where its 503 alone would be retried.
        static = self.static
        if static is not None and request.path.startswith(static.prefixes):
            return self._static(environ)
        if self.admission is not None:
            shed = self.admission.admit(environ, self.conn_environ)
            if shed is not None:
                return self._shed(shed)
        upgrade = request.upgrade is not None
        if upgrade:
            # The app may take the connection over (a WebSocket): it gets the socket, and what
            # earlier pipelined responses left queued goes out before anything it writes.
            environ["greenserve.socket"] = environ["gunicorn.socket"] = connection.sock
            if self.out:
                connection.flush()
            # And a WebSocket handshake gets the built-in WebSocket (environ["wsgi.websocket"]),
            # which answers it only when the application first uses it.
            self.websocket = _offer_websocket(self, environ)
        result = None
        try:
            try:
                try:
                    result = self.application(environ, self.start_response)
                except StopIteration:
                    # gunicorn's convention for "I took the socket" (Flask-Sock raises it).
                    if not upgrade or self.outcome.started:
                        raise
                    return self._take_over()
                whole = self._send_result(result)
                if self.outcome.taken_over:
                    if self.websocket is not None:
                        self.websocket.finish(False)
                    return False
                if not whole:
                    self._end_body()
            finally:
                if result is not None:
                    close = getattr(result, "close", None)
                    if close is not None:
                        if self.out:
                            # The client need not wait for the app's clean-up (Flask teardown,
                            # Django's request_finished), as with gunicorn and gevent.pywsgi.
                            self._send_soon()
                        close()
            return self._finish(whole)
        except errors.ClientDisconnected:
            raise
        except BaseException as exc:
            if isinstance(exc, _NOT_APPLICATION_ERRORS):
                raise
            # An Exception, or a BaseException the app let through (gevent.Timeout).
            return self._app_failed(exc)

    def _environ(self, request, has_body):
        environ = self.conn_environ.copy()
        environ["REQUEST_METHOD"] = request.method
        path = request.path
        if "%" in path:
            path = unquote_to_bytes(path.encode("latin-1")).decode("latin-1")
        root_path = self.root_path
        if root_path and (path == root_path or path.startswith(root_path + "/")):
            path = path[len(root_path) :]
        environ["PATH_INFO"] = path
        environ["QUERY_STRING"] = request.query
        environ["RAW_URI"] = request.target
        environ["SERVER_PROTOCOL"] = request.version
        environ["wsgi.input"] = Input(self) if has_body else EMPTY_INPUT
        keys = _ENVIRON_KEYS
        for lname, value in request.headers:
            key = keys.get(lname)
            if key is None:
                key = _environ_key(lname)
            if not key:
                continue  # a name we drop (see _environ_key)
            # One lookup for the usual case, a field seen once: the length tells whether
            # setdefault stored the value or found an earlier field of the same name.
            size = len(environ)
            old = environ.setdefault(key, value)
            if len(environ) == size:
                if key == "HTTP_COOKIE":
                    environ[key] = old + "; " + value  # RFC 6265 §5.4: one cookie-string
                else:
                    environ[key] = old + ", " + value  # RFC 9110 §5.3: combine with commas
        if request.scheme is not None:
            # RFC 9112 §3.2.2: an absolute-form target's authority replaces the Host header.
            environ["HTTP_HOST"] = request.host
        # A proxy's forwarding headers (proxy.ProxyHeaders), flagged by the parser: a request
        # without them pays one test.
        if request.forwarded and self.proxy is not None:
            self.proxy.rewrite(environ)
        return environ

    def _keep_alive(self):
        """May the connection persist after this response, as far as the request is concerned?"""
        request = self.request
        if not request.keep_alive or not self.persistent or self.connection.closing:
            return False
        if not self.outcome.body_done:
            if request.expect_continue and not self.continue_sent:
                # The client may be holding the body back for our 100 or may send it anyway:
                # we cannot know which, so the connection cannot be reused (RFC 9110 §10.1.1).
                return False
            if self.drain_failed or request.content_length - self.body_received > self.drain_limit:
                return False
        return True

    def _start(self, body_length):
        """Build the head from status and headers and queue it."""
        # The request timeout covers the wait for the head only: a stream is not cut once its
        # head is out (PEP 3333: the head goes with the first non-empty chunk, which is now).
        self.connection.request_deadline = 0.0
        # What carries the request frames the head (ConnectionIO.response_head): HTTP/1.1's
        # bytes, or an HTTP/2 stream's header fields.
        data, code, self.writer, self.response_keep_alive = self.connection.response_head(
            self.status, self.outcome.headers, self.request, self._keep_alive(), body_length, self.server_line
        )
        if code == 101 and not self.outcome.taken_over:
            # RFC 9110 §15.2.2: "A server MUST NOT switch to a protocol that was not indicated
            # by the client in the corresponding request's Upgrade header field".
            raise ResponseError("101 Switching Protocols to a request that did not ask for an upgrade")
        self.outcome.status_code = code
        self.outcome.started = True
        self.out.append(data)

    def _switch_protocols(self):
        """``start_response("101 ...")`` to an upgrade request: the app takes the connection over.

        The 101 head goes out now, before ``start_response`` returns, since the application may
        speak the new protocol on the socket (``greenserve.socket``) right after. What it then
        yields or passes to ``write()`` is the new protocol's bytes, sent as they come and
        unframed (gunicorn does the same); the connection closes when the application returns.
        """
        if self.outcome.started:
            raise AssertionError("101 Switching Protocols after the response has started")
        self.outcome.taken_over = True
        try:
            self._start(-1)
        except BaseException:
            self.outcome.taken_over = False
            raise
        self.writer = CloseDelimitedWriter()  # the new protocol's bytes, unframed
        self.outcome.body_done = True  # what follows the head on the socket is the new protocol's
        self.connection.flush()

    def _send_result(self, result):
        """Queue the application's body. True: it was taken whole with its head (a list of
        bytes), which leaves nothing to end and needs no check that it is complete (the writer's
        ``write_whole``); else ``_end_body`` follows."""
        if self.status is None:
            # PEP 3333 lets an app call start_response during its first iteration.
            iterator = iter(result)
            for data in iterator:
                self._write(data)
                break
            else:
                if self.status is None:
                    if self.request.upgrade is not None:
                        # An upgrade answered on the socket itself (simple-websocket writes its
                        # own 101): nothing more is ours to send.
                        self._take_over()
                        return False
                    raise AssertionError("the application returned without calling start_response()")
            for data in iterator:
                self._write(data)
            return False
        rtype = type(result)
        if not self.outcome.started and (rtype is list or rtype is tuple):
            # The common case: the whole body is here. Know its length, send it with the head.
            length = 0
            for body in result:
                if type(body) is not bytes:
                    break  # bytes-like chunks take the general path below
                length += len(body)
            else:
                if not self.outcome.body_done and self._drain_first():
                    # The app returned without reading the body: drain it before the head
                    # (a chunked body's length is unknown until then, and the head must say
                    # whether the connection stays open). Any answer to an unread body waits
                    # for it (_drain): a proxy that streams bodies (nginx's
                    # proxy_request_buffering off) closes its client's connection, unannounced
                    # after a keep-alive head, when the answer overtakes the body.
                    self._drain()
                self._start(length)
                sent = self.writer.write_whole(self.out, result, length)
                if sent >= 0:  # else the framing takes it piece by piece (below)
                    self.outcome.body_sent = sent
                    return True
        elif rtype is FileWrapper and not self.outcome.started and self.connection.can_sendfile:
            regular = result.regular_file()
            if regular is not None:
                fileno, offset, size = regular
                self._send_file(fileno, offset, size)
                return False
        for data in result:
            self._write(data)
        return False

    def _static(self, environ):
        """A request under a --static prefix: ``static.Static.answer``'s status, headers and
        body, or its file sent as wsgi.file_wrapper's are (sendfile on a plain socket; read in
        large pieces over TLS, and as DATA frames within HTTP/2's windows), so the access log,
        the metrics and statsd count it as any request. Marked ``greenserve.static`` in the
        environ, for the access log's line."""
        environ["greenserve.static"] = True
        try:
            answer = self.static.answer(environ, self.request.path)
        except Exception as exc:  # (a fault of ours: a 500 and its traceback, as an application's)
            return self._app_failed(exc)
        self.status = answer.status
        self.outcome.headers = answer.headers
        try:
            if answer.file is None:
                body = answer.body
                self._start(len(body))
                self.outcome.body_sent = self.writer.write_whole(self.out, [body], len(body))
            elif self.connection.can_sendfile:
                self._send_file(answer.file.fd, answer.offset, answer.length)
            else:
                self._start(answer.length)
                self._read_file(answer.file.fd, answer.offset, answer.length)
        except errors.ClientDisconnected:
            raise
        except OSError as exc:
            # The file failed under its response (truncated in place within the cache's second,
            # a disk error): its head is out, so closing is what tells the client it is short.
            self.error_log.error("%s %s: static file: %s; closing" % (self.request.method, self.request.target, exc))
            return False
        finally:
            answer.release()
        return self._finish(False)

    def _read_file(self, fileno, offset, size):
        """Send size bytes of a file from offset without sendfile: a piece at a time, each sent
        before the next is read (``_write`` flushes), so a file of any size holds one piece."""
        writer = self.writer
        budget = _POLL_EVERY  # what may still go before the loop polls again
        while size > 0 and not writer.full():
            if budget <= 0:
                _wait_for_poll()
                budget = _POLL_EVERY
            data = os.pread(fileno, min(size, _FILE_PIECE), offset)  # (looked up each call: tests spy on it)
            if not data:
                raise OSError("file ended %d bytes short of its announced size" % size)
            self._write(data)
            offset += len(data)
            size -= len(data)
            budget -= len(data)

    def _send_file(self, fileno, offset, size):
        self._start(size)
        writer = self.writer
        size = writer.begin_file(self.out, size)
        if size:
            self.connection.send_file(fileno, offset, size)  # (the head first, with the file's first bytes)
        writer.end_file(self.out)
        self.outcome.body_sent = size

    def _end_body(self):
        """The app's body is done: queue what ends it (a last chunk), or the head of an empty one."""
        if not self.outcome.started:
            # Only empty chunks (or none): the body is empty.
            self._start(0)
        self.writer.end(self.out)

    def _take_over(self):
        """The application took the connection over (an upgrade it answered on the socket).

        From here the server writes nothing on it and reads nothing from it; the connection
        closes when the application has returned. Returns False: no further request.
        """
        self.outcome.taken_over = True
        self.outcome.started = True
        self.outcome.status_code = 101  # for the access log: the app switched protocols itself
        self.outcome.body_done = True
        return False

    def _finish(self, whole):
        """After the app returned: may the connection carry another request? Drain if needed.
        ``whole``: the body was taken whole (``_send_result``), so it is complete."""
        writer = self.writer
        if not whole and not writer.delimits():
            if writer.content_length >= 0:
                self.error_log.error(
                    "%s %s: the application sent %d bytes of a %d-byte Content-Length; closing"
                    % (self.request.method, self.request.target, self.outcome.body_sent, writer.content_length)
                )
            return False  # a short body, or one that ends when the connection does
        if not self.response_keep_alive:
            return False
        if not self.outcome.body_done:
            return self._drain()
        return True

    def _send_soon(self):
        """A complete response is queued: have it sent before the app's remaining work, unless
        the request's unread body is drained first (see _send_result)."""
        if self.outcome.body_done or not self._drain_first():
            self.connection.flush_soon()

    def _drain_first(self):
        """May the unread body be drained before the head is sent? Not when the client waits
        for a 100 (Continue) before it sends the body, nor when more is left than drain_limit
        (the connection closes after the answer instead)."""
        request = self.request
        if request.expect_continue and not self.continue_sent:
            return False
        return request.chunked or request.content_length - self.body_received <= self.drain_limit

    def _drain(self):
        """Read and drop what the app left of the request body, up to drain_limit bytes."""
        # The application is done: a slow client's body is body_timeout's, not request_timeout's.
        self.connection.request_deadline = 0.0
        if self.drain_failed:
            return False
        budget = self.drain_limit
        try:
            while budget > 0:
                # Not sent before the body is in (see _send_result); Expect: 100-continue
                # never gets here (_keep_alive), so no client waits for our answer first.
                data = self.connection.read_body(min(budget, 65536), False)
                if not data:
                    self.outcome.body_done = True
                    return True
                self.body_received += len(data)
                budget -= len(data)
        except errors.ProtocolError:
            pass
        self.drain_failed = True
        return False

    def _app_failed(self, exc):
        """The application (or its iterable) raised. Answer 500 if we still can, else close."""
        self.connection.request_deadline = 0.0
        request = self.request
        if isinstance(exc, RequestTimeout):
            return self._timed_out(exc)
        websocket = self.websocket
        if websocket is not None and websocket.started:
            # (A refused handshake, raised through the application, is the client's error: its
            # 400 or 426 is answered already.)
            if self.outcome.status_code == 101:
                self.error_log.exception("Error handling WebSocket %s" % (request.target,), exc)
            websocket.finish(True)
            return False
        if self.body_error is not None and isinstance(exc, RequestBodyError):
            # The client's fault, surfaced through wsgi.input: no traceback, answer its status.
            if not self.outcome.started:
                self.outcome.status_code = self.body_error.status_hint
                self.outcome.body_sent = self.connection.queue_error(self.body_error, access_log=False)
                self.outcome.started = True
            return False
        if isinstance(exc, ResponseError):
            self.error_log.error(
                "%s %s: invalid response from the application: %s" % (request.method, request.target, exc)
            )
        else:
            self.error_log.exception("Error handling request %s %s" % (request.method, request.target), exc)
        if self.outcome.started:
            # The client must not take a truncated response for a complete one.
            return False
        self._answer_error(500)
        if not self.response_keep_alive:
            return False
        if not self.outcome.body_done:
            return self._drain()
        return True

    def _timed_out(self, exc):
        """The application waited past request_timeout (RequestTimeout): one error-log entry
        with where it waited; 504 and close (or just close, if its head went out already)."""
        request = self.request
        own = self.conn_environ  # the peer's address, before a trusted proxy's headers
        peer = "%s:%s" % (own["REMOTE_ADDR"], own["REMOTE_PORT"]) if own["REMOTE_ADDR"] else "a unix socket"
        client = self.outcome.environ.get("REMOTE_ADDR")
        if client and client != own["REMOTE_ADDR"]:
            peer = "%s (through %s)" % (client, peer)
        started = self.outcome.started
        self.error_log.error(
            "request timeout: %s %s from %s: %s; %s. Where it waited, innermost call last:\n%s"
            % (request.method, request.target, peer, exc,
               "its response had started: connection closed" if started else "answered 504, connection closed",
               _waiting_stack(exc))
        )
        if started:
            return False
        # Interrupted, the application may have left the request's body half read: the
        # connection carries nothing more (the head says Connection: close).
        self.connection.closing = True
        self._answer_error(504)
        return False

    def _shed(self, reason):
        """Overload control shed the request (``admission.Admission.admit``): 503 with
        Retry-After, without calling the application; the connection closes (an HTTP/2 stream
        ends alone: its ``closing`` is its own). ``reason`` goes in the environ, for the access
        log (``greenserve.shed``)."""
        self.outcome.environ["greenserve.shed"] = reason
        self.connection.closing = True
        self.status, headers, body = errors.error_response(503)
        headers.append(("Retry-After", RETRY_AFTER))
        self.outcome.headers = headers
        self._start(len(body))
        self.outcome.body_sent = self.writer.write_whole(self.out, [body], len(body))
        return False

    def _answer_error(self, status):
        """Queue the short text answer for a server error (``errors.error_response``)."""
        self.status, self.outcome.headers, body = errors.error_response(status)
        self._start(len(body))
        self.outcome.body_sent = self.writer.write_whole(self.out, [body], len(body))

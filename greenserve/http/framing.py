"""Sans-I/O response framing: the status line, the header block and the body's framing.

``build_head()`` takes what a WSGI application gave (status, headers) plus what the request and
the server decided (HEAD or not, HTTP/1.0 or 1.1, keep-alive or not, a known body length) and
returns the bytes of the head together with the body writer it chose, following RFC 9112 §6.3
from the response side. It only decides headers; it writes nothing.

Body framing is one small writer per kind (h11's WRITERS): ``NoBodyWriter``,
``ContentLengthWriter``, ``ChunkedWriter``, ``CloseDelimitedWriter``. The responder hands each
piece of body to the writer ``build_head`` chose and never asks which kind it is; adding a
framing is adding a writer. Writers queue bytes onto a list (the connection's output queue)
and do no I/O.

Nothing a client or application sends reaches the wire unchecked: the finished head is checked
in one C-level pass for any byte outside field-value characters and for CR/LF outside the line
breaks we put there (header injection, RFC 9110 §5.5).
"""

from email.utils import formatdate

from greenserve._accel import compiled
from greenserve.http.grammar import HEAD_CHARS, MAX_CONTENT_LENGTH_DIGITS, TCHAR

if compiled():
    from greenserve.http._chttp import Clock, Joiner
else:
    from greenserve.http._pyhttp import Clock, Joiner

# The build's clock for the Date cache: time(2) compiled (no float, no call through Python; ~350
# instructions a response), int(time.time()) as plain Python.
_CLOCK = Clock()
# The build's b"".join for the head's lines: one memcpy a line compiled (bytes.join takes each
# through the buffer protocol), bytes.join as plain Python.
_JOINER = Joiner()

LAST_CHUNK = b"0\r\n\r\n"
CONTINUE_100 = b"HTTP/1.1 100 Continue\r\n\r\n"
# Status lines of the interim responses with a reason phrase of ours (informational_head).
_INTERIM_LINES = {103: b"HTTP/1.1 103 Early Hints\r\n"}


class ResponseError(Exception):
    """The application's status or headers cannot be sent (PEP 3333 / RFC 9110 violation)."""


# --- body writers: one per framing, chosen once by build_head -----------------------------------

# The largest Content-Length a writer counts down from (a C long long in the compiled build).
_MAX_LENGTH = (1 << 63) - 1


class NoBodyWriter:
    """No body on the wire, whatever the application returns: HEAD, 1xx, 204, 304 (RFC 9110
    §6.4.1, RFC 9112 §6.3 step 1). The base of the writers; each overrides what it frames.

    ``out`` is the list of pieces waiting to be sent; a writer appends to it. ``content_length``
    is the length the head announced (-1: none, or no body).
    """

    __slots__ = ("content_length",)

    def __init__(self):
        self.content_length = -1

    def write(self, out, data):
        """Queue the (non-empty) ``data`` framed; return how many of its bytes the body took."""
        return 0

    def write_whole(self, out, pieces, length):
        """Queue a whole body given as a list of bytes of ``length`` in all, before any other
        body: the bytes taken, or -1 when the framing needs it piece by piece (``write``). A
        body taken whole is complete: ``end`` would queue nothing after it, and ``delimits()``
        is true (the responder calls neither)."""
        return 0

    def begin_file(self, out, size):
        """Before ``size`` bytes of a file go out with sendfile: queue what frames them; return
        how many of them the body takes."""
        return 0

    def end_file(self, out):
        """After the file's bytes: queue what ends their framing."""

    def end(self, out):
        """The application's body is done: queue what ends it."""

    def full(self):
        """No more body may go (all the head announced is queued)?"""
        return True

    def delimits(self):
        """Once ended, does the body end on the wire without the connection closing?"""
        return True


class ContentLengthWriter(NoBodyWriter):
    """``Content-Length: n``: at most n bytes, and the connection closes if fewer were sent."""

    __slots__ = ("remaining",)

    def __init__(self, length):
        self.content_length = length
        self.remaining = length

    def write(self, out, data):
        n = len(data)
        remaining = self.remaining
        if n > remaining:
            # PEP 3333: never send more than the announced Content-Length.
            data = data[:remaining]
            n = remaining
        if n:
            out.append(data)
            self.remaining = remaining - n
        return n

    def write_whole(self, out, pieces, length):
        if length != self.remaining:
            return -1  # the app's Content-Length says otherwise: cut or short, piece by piece
        if length:
            out.extend(pieces)
        self.remaining = 0
        return length

    def begin_file(self, out, size):
        if size > self.remaining:
            size = self.remaining
        self.remaining -= size
        return size

    def full(self):
        return self.remaining == 0

    def delimits(self):
        return self.remaining == 0  # a short body: only closing tells the client


class ChunkedWriter(NoBodyWriter):
    """``Transfer-Encoding: chunked`` (RFC 9112 §7.1): HTTP/1.1 and no length known."""

    __slots__ = ()

    def write(self, out, data):
        n = len(data)
        # Size line, data and CRLF as three pieces: a large chunk is not copied to frame it.
        out.append(chunk_size_line(n))
        out.append(data)
        out.append(b"\r\n")
        return n

    def write_whole(self, out, pieces, length):
        return -1

    def begin_file(self, out, size):
        out.append(chunk_size_line(size))
        return size

    def end_file(self, out):
        out.append(b"\r\n")

    def end(self, out):
        out.append(LAST_CHUNK)

    def full(self):
        return False


class CloseDelimitedWriter(NoBodyWriter):
    """HTTP/1.0 and no length known (RFC 9112 §6.3 step 8): the body ends when the connection
    does. Also what follows a 101: the new protocol's bytes, unframed."""

    __slots__ = ()

    def write(self, out, data):
        out.append(data)
        return len(data)

    def write_whole(self, out, pieces, length):
        return -1

    def begin_file(self, out, size):
        return size

    def full(self):
        return False

    def delimits(self):
        return False


class StreamWriter(NoBodyWriter):
    """No length known, where the protocol's own frames delimit the body (HTTP/2: DATA frames,
    then END_STREAM): the application's bytes as they are. The body is complete once ``end`` is
    called or it was taken whole; until then ``delimits()`` is false, so a response whose
    application failed half-way is told from a complete one (HTTP/2 resets its stream)."""

    __slots__ = ("ended",)

    def __init__(self):
        self.content_length = -1
        self.ended = False

    def write(self, out, data):
        out.append(data)
        return len(data)

    def write_whole(self, out, pieces, length):
        out.extend(pieces)
        self.ended = True
        return length

    def begin_file(self, out, size):
        return size

    def end(self, out):
        self.ended = True

    def full(self):
        return False

    def delimits(self):
        return self.ended


# The writers that keep no count are shared.
NO_BODY = NoBodyWriter()
CHUNKED = ChunkedWriter()
CLOSE_DELIMITED = CloseDelimitedWriter()


# --- Date, cached per second (RFC 9110 §6.6.1: an origin server with a clock MUST send Date) ---

_date_second = -1
_date_line = b""


def date_line():
    """The ``Date: ...\r\n`` line for now, as bytes; formatted at most once a second."""
    global _date_second, _date_line
    second = _CLOCK.now_second()
    if second != _date_second:
        _date_line = ("Date: " + formatdate(second, usegmt=True) + "\r\n").encode("latin-1")
        _date_second = second
    return _date_line


# --- status lines -------------------------------------------------------------------------------

# status string as the app gave it -> (code, b"HTTP/1.1 <status>\r\n"); bounded like the caches below.
_STATUS_CACHE = {}
_CACHE_MAX = 1024


def _status(status):
    if type(status) is not str:
        raise ResponseError("status must be a str, got %r" % (status,))
    # PEP 3333: "a string like '200 OK'": three digits, a space, a reason phrase (RFC 9112 §4:
    # status-line = HTTP-version SP status-code SP [ reason-phrase ]).
    if len(status) < 4 or status[3] != " " or not status[:3].isdigit() or not status[:3].isascii():
        raise ResponseError("invalid status %r: expected '<3 digits> <reason>'" % status[:40])
    try:
        line = ("HTTP/1.1 " + status + "\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise ResponseError("status %r is not latin-1" % status[:40]) from None
    if line.translate(None, HEAD_CHARS) or line.count(b"\r") != 1 or line.count(b"\n") != 1:
        raise ResponseError("control character in status %r" % status[:40])
    code = int(status[:3])
    if code < 100 or code > 599:
        # RFC 9110 §15: "Values outside the range 100..599 are invalid"; a client treats one as a
        # 5xx, so sending it only hides the application's mistake.
        raise ResponseError("invalid status %r: the code must be within 100-599" % status[:40])
    entry = (code, line)
    if len(_STATUS_CACHE) < _CACHE_MAX:
        _STATUS_CACHE[status] = entry
    return entry


# --- header fields ------------------------------------------------------------------------------

_ORDINARY = 0
_CONTENT_LENGTH = 1
_CONNECTION = 2
_DATE = 3
_SERVER = 4
_HOP_BY_HOP = 5
_UPGRADE = 6
_SPECIAL = {
    "content-length": _CONTENT_LENGTH,
    "connection": _CONNECTION,
    "date": _DATE,
    "server": _SERVER,
    # PEP 3333: "applications and middleware are forbidden from using HTTP/1.1 hop-by-hop
    # features or headers". Transfer-Encoding is ours to choose; a second one would corrupt
    # the framing. (waitress refuses the same set.)
    "keep-alive": _HOP_BY_HOP,
    "proxy-authenticate": _HOP_BY_HOP,
    "proxy-authorization": _HOP_BY_HOP,
    "te": _HOP_BY_HOP,
    "trailer": _HOP_BY_HOP,
    "trailers": _HOP_BY_HOP,
    "transfer-encoding": _HOP_BY_HOP,
    "upgrade": _UPGRADE,
}
# header name as the app gave it -> kind; only valid tokens get in.
_NAME_CACHE = {}

# (name, value) tuple as the app gave it -> (validated line as bytes, kind, number), where
# number is the Content-Length for that kind and 1 for a Connection header saying "close".
# Applications send the same pairs over and over (Content-Type, Cache-Control, Vary, ...), so
# most headers are a dict hit: no re-validation, no per-header encoding, and the head is one
# bytes join. Values that vary per response (ETags, request ids) would fill it: it is cleared
# when full rather than grown, which bounds its memory whatever clients make the app send.
_FIELD_CACHE = {}
_FIELD_CACHE_MAX = 2048
# Fields whose values are new in nearly every response are never cached: each would be a miss
# anyway, and evict the lines that are there to hit (a session's Set-Cookie; the handshake's
# Sec-WebSocket-Accept, a hash of the client's random key, one per WebSocket).
_UNCACHED = frozenset(("set-cookie", "sec-websocket-accept"))


def _name_kind(name):
    kind = _NAME_CACHE.get(name)
    if kind is not None:
        return kind
    if type(name) is not str:
        raise ResponseError("header name must be a str, got %r" % (name,))
    try:
        invalid = not name or name.encode("latin-1").translate(None, TCHAR)
    except UnicodeEncodeError:
        invalid = True
    if invalid:
        raise ResponseError("invalid header name %r" % name[:60])
    kind = _SPECIAL.get(name.lower(), _ORDINARY)
    if len(_NAME_CACHE) < _CACHE_MAX:
        _NAME_CACHE[name] = kind
    return kind


def _field(item):
    """Validate one (name, value) header of the application's; return (line, kind, number)."""
    if type(item) is str:
        # "Xy" would unpack into the header "X: y".
        raise ResponseError("each header must be a (name, value) tuple, got %r" % item[:40])
    try:
        name, value = item
    except (TypeError, ValueError):
        raise ResponseError("each header must be a (name, value) tuple, got %r" % (item,)) from None
    kind = _name_kind(name)
    if type(value) is not str:
        # Checked before the special names: a bytes Content-Length passes isdigit() (PEP 3333:
        # values are str).
        raise ResponseError("value of header %r must be a str, got %r" % (name, value))
    # RFC 9110 §5.5: a field value has no leading or trailing whitespace (Django's Set-Cookie
    # values start with a space).
    value = value.strip(" \t")
    number = 0
    if kind == _CONTENT_LENGTH:
        if not value.isdigit() or not value.isascii() or len(value) > MAX_CONTENT_LENGTH_DIGITS:
            raise ResponseError("invalid Content-Length %r" % value[:40])
        number = int(value)
        if number > _MAX_LENGTH:
            raise ResponseError("Content-Length %s is more than can be sent (2**63 - 1)" % value)
    elif kind == _CONNECTION:
        # The connection's fate is ours to announce; "close" from the app is honoured.
        for token in value.lower().split(","):
            if token.strip(" \t") == "close":
                number = 1
    try:
        line = (name + ": " + value + "\r\n").encode("latin-1")
    except UnicodeEncodeError:
        raise ResponseError("the value of header %r is not latin-1 encodable (PEP 3333)" % name) from None
    # One CR and one LF, ours, at the end: "\r\nSet-Cookie: ..." in a value (response
    # splitting) fails the count, and NUL or another control character fails the translate.
    if line.count(b"\r") != 1 or line.count(b"\n") != 1 or line.translate(None, HEAD_CHARS):
        raise ResponseError("control character (CR, LF, NUL, ...) in header %r" % name)
    entry = (line, kind, number)
    if type(item) is tuple and name.lower() not in _UNCACHED:
        if len(_FIELD_CACHE) >= _FIELD_CACHE_MAX:
            _FIELD_CACHE.clear()
        _FIELD_CACHE[item] = entry
    return entry


_CHUNKED_LINE = b"Transfer-Encoding: chunked\r\n"
_CLOSE_LINE = b"Connection: close\r\n"
_KEEP_ALIVE_LINE = b"Connection: keep-alive\r\n"
_UPGRADE_LINE = b"Connection: Upgrade\r\n"


def build_head(status, headers, minor, is_head, keep_alive, body_length, server_line):
    """Build the response head for an application's ``status`` and ``headers``.

    ``minor``: the request's HTTP minor version (0 or 1). ``is_head``: the request was HEAD.
    ``keep_alive``: the connection may persist as far as the client and server are concerned.
    ``body_length``: the body's total length when the server knows it (a list of chunks), else -1.
    ``server_line``: ``b"Server: ...\r\n"`` or b"" to send none.

    Returns ``(data, status_code, writer, keep_alive)``; raises ``ResponseError`` for anything
    that must not reach the wire.
    """
    status_cache = _STATUS_CACHE
    entry = status_cache.get(status)
    if entry is None:
        entry = _status(status)
    code, status_line = entry
    if type(headers) is not list:
        raise _not_a_list(headers)
    parts = [status_line]
    field_cache = _FIELD_CACHE
    content_length = -1
    has_date = False
    has_server = False
    upgrade = False
    for item in headers:
        try:
            entry = field_cache.get(item)
        except TypeError:  # an unhashable item, e.g. a list: validated, not cached
            entry = None
        if entry is None:
            entry = _field(item)
        line, kind, number = entry
        if kind:
            if kind == _CONTENT_LENGTH:
                if content_length >= 0:
                    raise ResponseError("repeated Content-Length")
                content_length = number
                if code == 204 or code < 200:
                    continue  # RFC 9110 §8.6: MUST NOT send Content-Length with 1xx or 204.
            elif kind == _CONNECTION:
                if number:
                    keep_alive = False
                continue
            elif kind == _DATE:
                has_date = True
            elif kind == _SERVER:
                has_server = True
            elif kind == _UPGRADE and code == 101:
                upgrade = True
            else:
                raise _hop_by_hop(item[0])
        parts.append(line)
    if not has_date:
        if _CLOCK.now_second() != _date_second:
            date_line()
        parts.append(_date_line)
    if server_line and not has_server:
        parts.append(server_line)
    if code < 200 and not (code == 101 and upgrade):
        raise ResponseError("status %s cannot be a final response" % status)
    writer = _body_writer(parts, code, is_head, minor, content_length, body_length)
    if writer is CLOSE_DELIMITED:
        keep_alive = False
    if code == 101:
        parts.append(_UPGRADE_LINE)
        keep_alive = False
    elif not keep_alive:
        parts.append(_CLOSE_LINE)
    elif minor == 0:
        parts.append(_KEEP_ALIVE_LINE)
    parts.append(b"\r\n")
    return _JOINER.join(parts), code, writer, keep_alive


def _not_a_list(headers):
    return ResponseError("headers must be a list, got %s" % type(headers).__name__)


def _hop_by_hop(name):
    return ResponseError("%r is a hop-by-hop header; a WSGI application must not send it (PEP 3333)" % (name,))


def informational_fields(headers):
    """The fields of an interim (1xx) response from an application's ``headers``, checked as
    ``build_head`` checks a final response's (the same ``_field``, the same ``ResponseError``):
    a list of ``(name, value)`` str pairs, values trimmed, to send in the order given.

    Content-Length and Connection are left out, as ``build_head`` leaves them out of a 1xx
    (RFC 9110 §8.6: no Content-Length in a 1xx; the connection's fate is announced by the final
    head). The hop-by-hop fields are refused, Upgrade too (it belongs to a 101 only). Date and
    Server are sent only if the application gives them (RFC 9110 §6.6.1: Date is optional in a 1xx).
    """
    if type(headers) is not list:
        raise _not_a_list(headers)
    fields = []
    for item in headers:
        # Checked whole each time, not looked up in the field cache as in build_head: hints are
        # a few fields a request at most, off the path every response takes.
        kind = _field(item)[1]
        if kind == _CONTENT_LENGTH or kind == _CONNECTION:
            continue
        if kind == _HOP_BY_HOP or kind == _UPGRADE:
            raise _hop_by_hop(item[0])
        name, value = item
        fields.append((name, value.strip(" \t")))
    return fields


def informational_head(code, fields):
    """The bytes of an interim response: its status line, ``fields`` and the blank line.

    ``fields`` as ``informational_fields`` returns them. Each line is made by the same checks
    as a final head's, so no pair can split the response, wherever it came from.
    """
    status_line = _INTERIM_LINES.get(code)
    if status_line is None:
        # RFC 9110 §15.2: an interim status is a 1xx. 101 is build_head's: it answers an upgrade
        # and ends HTTP/1.1 on the connection.
        if code < 100 or code > 199 or code == 101:
            raise ResponseError("%r is not an interim status" % (code,))
        status_line = b"HTTP/1.1 %d \r\n" % code  # RFC 9112 §4: the reason phrase may be empty
    parts = [status_line]
    for item in fields:
        parts.append(_field(item)[0])
    parts.append(b"\r\n")
    return _JOINER.join(parts)


# (name, value) tuple as the app gave it -> ((lower-case name, value) as bytes, kind, number): an
# HTTP/2 field, validated by _field as the HTTP/1.1 line is (one rule for both), bounded the same.
_FIELD2_CACHE = {}
_date_field_second = -1
_date_field = None
# HTTP/2's :status field of each code, made once: formatting b"%d" per response was a tenth of
# build_fields. And the server field of the last server_line seen (one per server).
_STATUS_FIELDS = [(b":status", b"%d" % code) for code in range(600)]
_server_field_line = None
_server_field = None


def build_fields(status, headers, is_head, body_length, server_line):
    """HTTP/2's response head for an application's ``status`` and ``headers``: what
    ``build_head`` checks, refuses and adds (Date, Server), as ``(fields, status_code,
    writer)``, ``fields`` the ``(name, value)`` pairs in bytes, ``:status`` first and names in
    lower case (RFC 9113 §8.2, §8.3.2). No Connection header (connection-specific, §8.2.2; an
    application's ``close`` means nothing to one stream); the body's framing is the stream's:
    ``ContentLengthWriter`` for a known length (announced in content-length, and cut to it),
    else ``StreamWriter``, ``NO_BODY`` for HEAD, 204 and 304."""
    global _date_field_second, _date_field, _server_field_line, _server_field
    entry = _STATUS_CACHE.get(status)
    if entry is None:
        entry = _status(status)
    code = entry[0]
    if type(headers) is not list:
        raise ResponseError("headers must be a list, got %s" % type(headers).__name__)
    if code < 200:
        # 101 included: HTTP/2 has no Upgrade (RFC 9113 §8.6); 1xx go as informational responses.
        raise ResponseError("status %s cannot be a final response" % status)
    fields = [_STATUS_FIELDS[code]]
    # build_head's loop, kept apart from it: a helper shared by the two would cost HTTP/1.1's
    # every response a call. The rules are the same: _field2 is _field, the kinds the same.
    cache = _FIELD2_CACHE
    content_length = -1
    has_date = False
    has_server = False
    for item in headers:
        try:
            entry = cache.get(item)
        except TypeError:  # an unhashable item: validated, not cached
            entry = None
        if entry is None:
            entry = _field2(item)
        field, kind, number = entry
        if kind:
            if kind == _CONTENT_LENGTH:
                if content_length >= 0:
                    raise ResponseError("repeated Content-Length")
                content_length = number
                if code == 204:
                    continue  # RFC 9110 §8.6
            elif kind == _CONNECTION:
                continue
            elif kind == _DATE:
                has_date = True
            elif kind == _SERVER:
                has_server = True
            else:
                raise ResponseError("%r is a hop-by-hop header; a WSGI application must not send it (PEP 3333)" % item[0])
        fields.append(field)
    if not has_date:
        second = _CLOCK.now_second()
        if second != _date_field_second:
            _date_field = (b"date", date_line()[6:-2])
            _date_field_second = second
        fields.append(_date_field)
    if server_line and not has_server:
        if server_line is not _server_field_line:
            _server_field = (b"server", server_line[8:-2])
            _server_field_line = server_line
        fields.append(_server_field)
    if code == 204 or code == 304:
        return fields, code, NO_BODY
    if is_head:
        # As build_head: a body the application returned for HEAD tells its length.
        if content_length < 0 and body_length > 0:
            fields.append((b"content-length", b"%d" % body_length))
        return fields, code, NO_BODY
    if content_length < 0:
        if body_length < 0:
            return fields, code, StreamWriter()
        fields.append((b"content-length", b"%d" % body_length))
        content_length = body_length
    writer = ContentLengthWriter.__new__(ContentLengthWriter)
    writer.content_length = content_length
    writer.remaining = content_length
    return fields, code, writer


def _field2(item):
    """One (name, value) header of the application's as an HTTP/2 field, checked by _field."""
    line, kind, number = _field(item)
    colon = line.index(b":")
    entry = ((line[:colon].lower(), line[colon + 2 : -2]), kind, number)
    if type(item) is tuple and item[0].lower() not in _UNCACHED:
        if len(_FIELD2_CACHE) >= _FIELD_CACHE_MAX:
            _FIELD2_CACHE.clear()
        _FIELD2_CACHE[item] = entry
    return entry


def _body_writer(parts, code, is_head, minor, content_length, body_length):
    """RFC 9112 §6.3 from the sender: the body's framing, as its writer; the framing's header
    line (if any) is appended to ``parts``. ``content_length``: the application's, or -1."""
    if code < 200 or code == 204 or code == 304:
        return NO_BODY  # step 1
    if is_head:
        # RFC 9110 §8.6: in a response to HEAD, a server "MUST NOT send Content-Length ... unless
        # its field value equals the decimal number of octets that would have been sent in the
        # content of a response if the same request had used the GET method". A body the app
        # returned for HEAD is that body (PEP 3333: the server strips it); an empty one says
        # nothing, since frameworks (Werkzeug) return no body at all for HEAD.
        if content_length < 0 and body_length > 0:
            parts.append(b"Content-Length: %d\r\n" % body_length)
        return NO_BODY
    if content_length < 0:
        if body_length < 0:
            if minor == 1:
                parts.append(_CHUNKED_LINE)
                return CHUNKED
            return CLOSE_DELIMITED  # step 8: HTTP/1.0 has no chunked coding (RFC 9112 §6.1)
        # No length from the application, but the server knows it (a list body): announce it.
        parts.append(b"Content-Length: %d\r\n" % body_length)
        content_length = body_length
    # Step 6. A writer per response, made without a call to __init__ (a Python frame in the pure
    # build; ~150 instructions in the compiled one).
    writer = ContentLengthWriter.__new__(ContentLengthWriter)
    writer.content_length = content_length
    writer.remaining = content_length
    return writer


def server_line_for(server_header):
    """The ``Server:`` line (bytes) to send for the configured value; b"" turns it off."""
    if not server_header:
        return b""
    line = ("Server: " + server_header + "\r\n").encode("latin-1")
    if line.translate(None, HEAD_CHARS) or line.count(b"\r") != 1 or line.count(b"\n") != 1:
        raise ValueError("invalid server header value %r" % server_header)
    return line


def chunk_size_line(n):
    return b"%x\r\n" % n

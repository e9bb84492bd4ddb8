"""Incremental, sans-I/O HTTP/1.1 request parser (RFC 9112): bytes in, request events out.

It never touches a socket, a clock or a thread, so every rule is tested with byte strings alone,
and it can be fed one byte at a time. Contract, after h11::

    parser = RequestParser(Limits())
    parser.feed(data)                  # any bytes-like object, any split
    event = parser.next_event()        # Request | bytes | END_OF_MESSAGE | NEED_DATA | PAUSED

Per message the events are: one ``Request`` (the head, with its framing decided), zero or more
``bytes`` objects (body data, never empty), then ``END_OF_MESSAGE``. ``NEED_DATA`` means "feed
me"; ``PAUSED`` means the parser will not read another request on this connection (the last
one asked to close). Errors are raised as ``http.errors.ProtocolError`` subclasses carrying the
status code to answer with; after one, the parser raises it again on every call.

Strictness: this parser rejects what lenient parsers guess at, because a front-end proxy that
guesses differently is how request smuggling happens (RFC 9112 §11.2). Rejected: bare CR or LF,
any control character in the head, obs-fold, whitespace before a colon, both Content-Length and
Transfer-Encoding, duplicate or non-numeric Content-Length, Transfer-Encoding other than a final
``chunked``, a malformed chunk-size line, chunk data not followed by CRLF, an HTTP/1.1 request
without exactly one Host.

Hot path notes (compiled by Cython in pure-Python mode, see parser.pxd): the pure build finds
the head with one ``bytearray.find``, checks it for forbidden bytes with one ``translate`` and a
``count`` (C loops), decodes it once as latin-1 and cuts fields at CRLFs by index. The compiled
build does the same work over a pointer to the bytes (one checking pass, memchr for line ends and
colons), because there calling a ``str`` or ``bytearray`` method costs more than its loop. Field
names are looked up in a bounded cache that remembers already-validated names with their
lower-case form. No regex runs for an ordinary request.
"""

import re

try:
    import cython

    _COMPILED = cython.compiled  # True only in the build Cython compiled from this file
except ImportError:  # the pure-Python build runs without Cython installed
    _COMPILED = False

from greenserve.http import errors
from greenserve.http.grammar import (
    FIELD_VALUE_CHARS,
    HEAD_CHARS,
    HEXDIG,
    HOST_CHARS,
    KNOWN_METHODS,
    MAX_CHUNK_LINE,
    MAX_CHUNK_SIZE_DIGITS,
    MAX_CONTENT_LENGTH_DIGITS,
    QDTEXT,
    TCHAR,
    WHITESPACE,
)
from greenserve.settings import SETTINGS_BY_NAME


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")
PAUSED = _Sentinel("PAUSED")
END_OF_MESSAGE = _Sentinel("END_OF_MESSAGE")


def _default(setting):
    # The settings table is where a limit's default is stated (docs/settings.md is made from it).
    return SETTINGS_BY_NAME[setting].default


class Limits:
    """Bounds on what one request may make us buffer: the settings limit_request_line,
    limit_request_fields, limit_request_field_size and limit_request_body, whose defaults these are.

    ``max_body`` of 0 means no limit on the request body. ``max_head`` is derived: the most bytes
    a complete head can take (request line plus every field line), computed once here rather
    than per request.
    """

    __slots__ = ("max_request_line", "max_header_count", "max_header_size", "max_body", "max_head")

    def __init__(self, max_request_line=_default("limit_request_line"), max_header_count=_default("limit_request_fields"),
                 max_header_size=_default("limit_request_field_size"), max_body=_default("limit_request_body")):
        self.max_request_line = max_request_line
        self.max_header_count = max_header_count
        self.max_header_size = max_header_size
        self.max_body = max_body
        self.max_head = max_request_line + 2 + max_header_count * (max_header_size + 2) + 2


class Request:
    """A request head, with its framing already decided by the parser.

    ``method``, ``target``, ``path``, ``query``, ``version`` and header values are ``str`` decoded
    as latin-1 (one byte, one character; PEP 3333's "bytes as latin-1" convention), so nothing is
    lost. ``headers`` is a list of ``(lower-case name, value)`` in the order received.
    ``content_length`` is -1 when the body is chunked; 0 when there is none.
    """

    __slots__ = (
        "method",
        "target",
        "path",
        "query",
        "version",
        "minor",
        "headers",
        "host",
        "scheme",
        "content_length",
        "chunked",
        "keep_alive",
        "expect_continue",
        "upgrade",
        "forwarded",
    )

    def __init__(self, method, target, path, query, version, minor, headers, host=None, scheme=None):
        self.method = method
        self.target = target
        self.path = path
        self.query = query
        self.version = version
        self.minor = minor
        self.headers = headers
        self.host = host
        self.scheme = scheme
        self.content_length = 0
        self.chunked = False
        self.keep_alive = minor == 1
        self.expect_continue = False
        self.upgrade = None
        self.forwarded = False  # an X-Forwarded-* field is present (proxy.ProxyHeaders)

    @property
    def has_body(self):
        return self.chunked or self.content_length > 0

    def __repr__(self):
        return "<Request %s %s %s>" % (self.method, self.target, self.version)


# --- field names -------------------------------------------------------------------------------
# Names that decide framing or connection handling; everything else is kind 0 (ordinary).
_CONTENT_LENGTH = 1
_TRANSFER_ENCODING = 2
_HOST = 3
_CONNECTION = 4
_EXPECT = 5
_UPGRADE = 6
_FORWARDED = 7
_SPECIAL_NAMES = {
    "content-length": _CONTENT_LENGTH,
    "transfer-encoding": _TRANSFER_ENCODING,
    "host": _HOST,
    "connection": _CONNECTION,
    "expect": _EXPECT,
    "upgrade": _UPGRADE,
    # A proxy's forwarding fields: flagged here, so that a request without them costs the
    # server nothing to check (wsgi.Responder, proxy.ProxyHeaders).
    "x-forwarded-for": _FORWARDED,
    "x-forwarded-proto": _FORWARDED,
    "x-forwarded-ssl": _FORWARDED,
    "x-forwarded-protocol": _FORWARDED,
}

# name as received -> (lower-case name, kind). Only valid tokens get in, so a hit needs no further
# check. Bounded so that a client sending endless distinct names cannot grow it without limit.
_NAME_CACHE = {}
_NAME_CACHE_MAX = 4096
# Host values already checked against HOST_CHARS; the same few values arrive again and again.
_HOST_CACHE = set()
_HOST_CACHE_MAX = 1024


def _is_token(text):
    return bool(text) and not text.encode("latin-1").translate(None, TCHAR)


def _field_name(line, colon):
    """Validate the name of a field line we have not seen before; return (lower name, kind)."""
    if line[:1] in (" ", "\t"):
        # RFC 9112 §5.2: obs-fold is deprecated; a server MUST either reject it or replace it
        # with SP. Replacing changes what a proxy in front of us may have seen: reject.
        raise errors.InvalidHeader("obsolete line folding (obs-fold) is not allowed")
    if colon < 0:
        raise errors.InvalidHeader("field line without a colon: %r" % line[:40])
    name = line[:colon]
    if name[-1:] in (" ", "\t"):
        # RFC 9112 §5.1: "No whitespace is allowed between the field name and colon ... A server
        # MUST reject, with a response status code of 400 (Bad Request), any received request
        # message that contains whitespace between a header field name and colon."
        raise errors.InvalidHeader("whitespace between field name and colon: %r" % name[:40])
    if not _is_token(name):
        raise errors.InvalidHeader("invalid field name: %r" % name[:40])
    lname = name.lower()
    entry = (lname, _SPECIAL_NAMES.get(lname, 0))
    if len(_NAME_CACHE) < _NAME_CACHE_MAX:
        _NAME_CACHE[name] = entry
    return entry


def _check_host(value):
    if value in _HOST_CACHE:
        return
    if value.encode("latin-1").translate(None, HOST_CHARS):
        raise errors.InvalidHeader("invalid Host: %r" % value[:80])
    if len(_HOST_CACHE) < _HOST_CACHE_MAX:
        _HOST_CACHE.add(value)


# For the compiled build's one-pass check: 1 for each byte a head line may hold, else 0.
_HEAD_BYTE_OK = bytes(1 if b in HEAD_CHARS and b not in b"\r\n" else 0 for b in range(256))
# For the compiled build's Host check (_host_bytes_ok): 1 for each byte of HOST_CHARS.
_HOST_BYTE_OK = bytes(1 if b in HOST_CHARS else 0 for b in range(256))


def _check_head_bytes(block):
    """The checks of _validated_text in one pass over the bytes, for the compiled build (a C
    loop over a pointer there; as plain Python it would be the slow way, so the pure build never
    calls it). Returns the number of CRLFs: the head's field lines."""
    return _check_head_bytes_at(block, len(block))


def _check_head_bytes_at(p, n):
    """_check_head_bytes over the first n bytes at the pointer p (compiled build only)."""
    table = _HEAD_BYTE_OK
    i = 0
    crlfs = 0
    while i < n:
        c = p[i]
        if table[c]:
            i += 1
            continue
        if c == 13:
            if i + 1 == n or p[i + 1] != 10:
                raise errors.InvalidHeader("bare CR (not followed by LF) in a request or field line")
            crlfs += 1
            i += 2
            continue
        if c == 10:
            raise errors.InvalidHeader("bare LF in request head (lines must end with CRLF)")
        raise errors.InvalidHeader("invalid character %r in request head" % bytes((c,)))
    return crlfs


def _find_head_end(buf, start):
    """buf.find(b"\\r\\n\\r\\n", start) as a loop over a pointer, for the compiled build (where
    bytearray.find costs more to call than to run on a request head)."""
    p = buf
    n = len(buf)
    i = start
    # Look at the last byte of the 4-byte window: most bytes are neither CR nor LF, and then no
    # window that holds that byte can match, so the search moves on by 4.
    while i + 3 < n:
        c = p[i + 3]
        if c == 10:
            if p[i + 2] == 13 and p[i + 1] == 10 and p[i] == 13:
                return i
            i += 2  # the window at i + 1 would need a CR where this LF is (its third byte)
        elif c == 13:
            i += 1  # this CR may be the window's third byte (or, two steps on, its first)
        else:
            i += 4
    return -1


def _index(p, start, end, byte):
    """The first position of byte in p[start:end], or -1: memchr over a pointer, for the compiled
    build only (the pure build searches the decoded text instead and never calls this)."""
    found = memchr(p + start, byte, end - start)
    if found == cython.NULL:
        return -1
    return cython.cast(cython.p_uchar, found) - p


def _validated_text(block):
    """Check a head or trailer block (without its final CRLFCRLF); return it decoded as latin-1.

    Afterwards every CR in the text is followed by a LF and every LF preceded by a CR, so the
    caller can cut lines at CRLFs without looking again.
    """
    if _COMPILED:
        _check_head_bytes(block)
        return block.decode("latin-1")
    # Two C-level passes: the bytes outside field-value characters must be exactly the CRLFs
    # (two per line break). Anything else is a control character or a bare CR or LF, and
    # _refuse_block says which.
    if len(block.translate(None, FIELD_VALUE_CHARS)) != 2 * block.count(b"\r\n"):
        _refuse_block(block)
    return block.decode("latin-1")


def _validated_lines(block):
    """Check a head or trailer block (without its final CRLFCRLF); return its lines as str."""
    return _validated_text(block).split("\r\n")


def _refuse_block(block):
    """Raise the error that describes what is wrong in a head or trailer block (pure build)."""
    bad = block.translate(None, HEAD_CHARS)
    if bad:
        raise errors.InvalidHeader("invalid character %r in request head" % bytes(bad[:1]))
    if block.count(b"\r") != block.count(b"\r\n"):
        # RFC 9112 §2.2: a bare CR is invalid.
        raise errors.InvalidHeader("bare CR (not followed by LF) in a request or field line")
    # RFC 9112 §2.2 lets a recipient accept a bare LF as a line end. We do not: a proxy that
    # splits lines differently from us is a smuggling vector.
    raise errors.InvalidHeader("bare LF in request head (lines must end with CRLF)")


def _check_partial_lines(buf, line_start, searched, lines, limits, request_line):
    """Check the lines of an incomplete head or trailer section that arrived since the last call.

    ``buf[:line_start]`` holds ``lines`` whole lines, already checked, and nothing before
    ``searched`` needs looking at again. Raise as soon as a limit or the line grammar is certain
    to be broken, for every line completed since the last call and not only the one still being
    received: otherwise whether a message is refused would depend on how TCP split it (a long
    field that arrives whole would be caught only at the size of the whole head). Each byte is
    looked at a bounded number of times, so many small reads stay O(n). ``request_line`` is 1
    for a head, whose first line is the request line, and 0 for a trailer section. Returns the
    new ``(line_start, lines)``.
    """
    size = len(buf)
    low = searched if searched > line_start else line_start
    # RFC 9112 §2.2: a bare CR is invalid. Every CR with a byte after it must have a LF there;
    # the last byte may be a CR still waiting for its LF.
    if buf.count(b"\r", low, size - 1) != buf.count(b"\r\n", low, size):
        raise errors.InvalidHeader("bare CR (not followed by LF) in a request or field line")
    lf = buf.find(b"\n", low)
    while lf >= 0:
        if lf == 0 or buf[lf - 1] != 13:
            # RFC 9112 §2.2 lets a recipient accept a bare LF as a line end. We do not: a proxy
            # that splits lines differently from us is a smuggling vector.
            raise errors.InvalidHeader("bare LF (lines must end with CRLF)")
        length = lf - 1 - line_start
        if request_line and lines == 0:
            if length > limits.max_request_line:
                raise errors.RequestLineTooLong(
                    "request line is %d bytes, the limit is %d" % (length, limits.max_request_line)
                )
        elif lines - request_line >= limits.max_header_count:
            raise errors.HeadersTooLarge("more than %d header fields" % limits.max_header_count)
        elif length > limits.max_header_size:
            raise errors.HeadersTooLarge(
                "a header field is %d bytes, the limit is %d" % (length, limits.max_header_size)
            )
        lines += 1
        line_start = lf + 1
        lf = buf.find(b"\n", line_start)
    # The line still being received; a CR at its end may be the start of its CRLF.
    partial = size - line_start
    if partial and buf[size - 1] == 13:
        partial -= 1
    if request_line and lines == 0:
        if partial > limits.max_request_line:
            raise errors.RequestLineTooLong("request line is longer than %d bytes" % limits.max_request_line)
    elif partial > limits.max_header_size:
        raise errors.HeadersTooLarge("a header field is longer than %d bytes" % limits.max_header_size)
    return line_start, lines


def _parse_version(version):
    if version == "HTTP/1.1":
        return 1
    if version == "HTTP/1.0":
        return 0
    # RFC 9112 §2.3: HTTP-version = HTTP-name "/" DIGIT "." DIGIT
    if (
        len(version) == 8
        and version.startswith("HTTP/")
        and version[6] == "."
        and version[5] in "0123456789"
        and version[7] in "0123456789"
    ):
        raise errors.UnsupportedVersion("HTTP version %s is not supported" % version)
    raise errors.InvalidRequestLine("invalid HTTP version: %r" % version[:20])


def _parse_request_line(line, limits):
    if len(line) > limits.max_request_line:
        raise errors.RequestLineTooLong(
            "request line is %d bytes, the limit is %d" % (len(line), limits.max_request_line)
        )
    # RFC 9112 §3: request-line = method SP request-target SP HTTP-version, single spaces. The
    # RFC allows lenient whitespace parsing; we do not, as a proxy may split otherwise.
    parts = line.split(" ")
    if len(parts) != 3:
        raise errors.InvalidRequestLine("malformed request line: %r" % line[:80])
    method, target, version = parts
    if method not in KNOWN_METHODS and not _is_token(method):
        raise errors.InvalidRequestLine("invalid method: %r" % method[:40])
    if version == "HTTP/1.1":
        minor = 1
    else:
        minor = _parse_version(version)
    if not target:
        raise errors.InvalidRequestLine("empty request target")
    if "\t" in target:
        # RFC 9112 §3.2: request-target is URI characters (RFC 3986), never whitespace. The head
        # check lets HTAB through (field values may hold it) and the split above removes SP, so
        # HTAB is the one byte left to refuse here; a peer that splits the request line on any
        # whitespace (§3 allows it) would read another target and version than we do.
        raise errors.InvalidRequestLine("whitespace in request target: %r" % target[:80])
    if method == "CONNECT":
        # authority-form (RFC 9112 §3.2.3) is for proxies; a WSGI application cannot tunnel.
        raise errors.UnsupportedMethod("CONNECT is not supported")
    if "#" in target:
        # RFC 9112 §3.2: request-target has no fragment; a client never sends one.
        raise errors.InvalidRequestLine("fragment (#) in request target")
    scheme = None
    host = None
    first = target[0]
    if first == "/":
        path, _, query = target.partition("?")
    elif target == "*":
        # RFC 9112 §3.2.4: asterisk-form is only for a server-wide OPTIONS.
        if method != "OPTIONS":
            raise errors.InvalidRequestLine("asterisk-form target is only allowed with OPTIONS")
        path, query = "*", ""
    else:
        # RFC 9112 §3.2.2: absolute-form, scheme "://" authority path-abempty [ "?" query ].
        scheme, sep, rest = target.partition("://")
        scheme = scheme.lower()
        if not sep or scheme not in ("http", "https"):
            raise errors.InvalidRequestLine("invalid request target: %r" % target[:80])
        end = len(rest)
        for stop in "/?":
            i = rest.find(stop)
            if 0 <= i < end:
                end = i
        host = rest[:end]
        if not host or "@" in host:
            # userinfo in an http(s) URI is deprecated (RFC 9110 §4.2.4) and used for phishing.
            raise errors.InvalidRequestLine("invalid authority in request target: %r" % host[:80])
        _check_host(host)
        path, _, query = rest[end:].partition("?")
        if not path:
            path = "/"
    return Request(method, target, path, query, version, minor, None, host, scheme)


_HTTP_11 = "HTTP/1.1"
_HTTP_10 = "HTTP/1.0"
# An emptied parser buffer keeps an allocation up to this size (an idle connection's memory).
_KEEP_ALLOCATION = 1024


def _common_method(p, length):
    """The compiled build: the common method the ``length`` bytes at ``p`` spell, else None.

    By length, then bytes (no slice, no hash): the methods most requests have, each returned
    as one shared str. Everything else goes through _parse_request_line."""
    if length == 3:
        if memcmp(p, b"GET", 3) == 0:
            return "GET"
        if memcmp(p, b"PUT", 3) == 0:
            return "PUT"
    elif length == 4:
        if memcmp(p, b"POST", 4) == 0:
            return "POST"
        if memcmp(p, b"HEAD", 4) == 0:
            return "HEAD"
    elif length == 5:
        if memcmp(p, b"PATCH", 5) == 0:
            return "PATCH"
    elif length == 6:
        if memcmp(p, b"DELETE", 6) == 0:
            return "DELETE"
    elif length == 7:
        if memcmp(p, b"OPTIONS", 7) == 0:
            return "OPTIONS"
    return None


def _common_request_line(p, eol, text):
    """The compiled build's reading of the usual request line, over the head's bytes.

    ``GET /path?query HTTP/1.1`` with one of the common methods, an origin-form target and
    HTTP/1.1 or 1.0: the Request, made with the method and version as shared constants and no
    list, partition or __init__ call. Anything else (another method or form, a stray space or
    tab, a fragment) returns None, and _parse_request_line, the one statement of the rules,
    decides it: this function only accepts lines that function accepts, with the same result.
    """
    # method SP: the first SP, at most 8 bytes in ("OPTIONS " is the longest).
    sp = _index(p, 0, eol if eol < 8 else 8, 32)
    if sp < 3:
        return None
    method = _common_method(p, sp)
    if method is None:
        return None
    # SP HTTP-version at the end, and nothing between that is a SP: exactly three parts.
    version_at = eol - 8
    if version_at <= sp + 1 or p[version_at - 1] != 32 or p[version_at] != 72:  # "H"
        return None
    if memcmp(p + version_at, b"HTTP/1.1", 8) == 0:
        version = _HTTP_11
        minor = 1
    elif memcmp(p + version_at, b"HTTP/1.0", 8) == 0:
        version = _HTTP_10
        minor = 0
    else:
        return None
    start = sp + 1
    end = version_at - 1
    if p[start] != 47:  # "/": origin-form
        return None
    if (
        _index(p, start, end, 32) >= 0
        or _index(p, start, end, 9) >= 0
        or _index(p, start, end, 35) >= 0  # "#"
    ):
        return None  # _parse_request_line says which rule it breaks
    target = text[start:end]
    question = _index(p, start, end, 63)  # "?"
    request = Request.__new__(Request)
    request.method = method
    request.target = target
    if question < 0:
        request.path = target
        request.query = ""
    else:
        request.path = text[start:question]
        request.query = text[question + 1 : end]
    request.version = version
    request.minor = minor
    request.content_length = 0
    request.keep_alive = minor == 1
    return request


def _host_bytes_ok(p, start, end):
    """The compiled build's Host check over the head's bytes: every byte in HOST_CHARS.

    The same verdict as _check_host's (which runs when this says no, to raise its error),
    without hashing the value for the cache."""
    table = _HOST_BYTE_OK
    i = start
    while i < end:
        if not table[p[i]]:
            return False
        i += 1
    return True


def _transfer_coding_is_chunked(values):
    """Decide a request's Transfer-Encoding (RFC 9112 §6.1, §6.3 rule 4). True or raise."""
    codings = [c.strip(WHITESPACE).lower() for c in ",".join(values).split(",")]
    if codings[-1] != "chunked":
        # §6.3: chunked not final in a request -> length cannot be determined -> 400 and close.
        raise errors.InvalidFraming("Transfer-Encoding must end with chunked: %r" % ", ".join(values)[:80])
    for coding in codings[:-1]:
        if coding == "chunked":
            # §6.1: a sender MUST NOT apply chunked more than once.
            raise errors.InvalidFraming("chunked applied more than once")
        if not _is_token(coding):
            raise errors.InvalidFraming("invalid transfer coding: %r" % coding[:40])
    if len(codings) > 1:
        # §6.1: "A server that receives a request message with a transfer coding it does not
        # understand SHOULD respond with 501 (Not Implemented)."
        raise errors.UnsupportedTransferCoding("unsupported transfer coding: %s" % codings[0])
    return True


def _take(buf, n):
    """Remove and return the first n bytes of buf as bytes (deleting from the front is O(1))."""
    if n == len(buf):
        data = bytes(buf)
        buf.clear()
    else:
        data = bytes(buf[:n])
        del buf[:n]
    return data


# --- body readers: one small class per framing, chosen once from the head -----------------------


class ContentLengthReader:
    __slots__ = ("remaining",)

    def __init__(self, length):
        self.remaining = length

    def read(self, buf, max_data):
        remaining = self.remaining
        if remaining == 0:
            return END_OF_MESSAGE
        n = len(buf)
        if n == 0:
            return NEED_DATA
        if n > remaining:
            n = remaining
        if 0 < max_data < n:
            n = max_data
        self.remaining = remaining - n
        return _take(buf, n)


# RFC 9112 §7.1.1, checked only when a chunk-size line carries extensions (rare):
#   chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
_TOKEN_RE = b"[" + re.escape(TCHAR) + b"]+"
_QUOTED_RE = b'"(?:[' + re.escape(QDTEXT) + rb"]|\\[\t \x21-\x7e\x80-\xff])*" + b'"'
_CHUNK_EXT = re.compile(
    rb"(?:[ \t]*;[ \t]*" + _TOKEN_RE + rb"(?:[ \t]*=[ \t]*(?:" + _TOKEN_RE + b"|" + _QUOTED_RE + b"))?)*"
)

_SIZE = 0
_DATA = 1
_DATA_END = 2
_TRAILER = 3
_DONE = 4


class ChunkedReader:
    """RFC 9112 §7.1: chunks of ``size-line CRLF data CRLF``, a last chunk of size 0, trailers."""

    __slots__ = ("state", "remaining", "total", "limits", "line_start", "searched", "lines")

    def __init__(self, limits):
        self.state = _SIZE
        self.remaining = 0
        self.total = 0
        self.limits = limits
        # An incomplete trailer section, as in RequestParser: whole lines checked, bytes searched.
        self.line_start = 0
        self.searched = 0
        self.lines = 0

    def read(self, buf, max_data):
        while True:
            state = self.state
            if state == _DATA:
                n = len(buf)
                if n == 0:
                    return NEED_DATA
                remaining = self.remaining
                if n > remaining:
                    n = remaining
                if 0 < max_data < n:
                    n = max_data
                remaining -= n
                self.remaining = remaining
                if remaining == 0:
                    self.state = _DATA_END
                return _take(buf, n)
            if state == _SIZE:
                if not self._read_size_line(buf):
                    return NEED_DATA
            elif state == _DATA_END:
                if len(buf) < 2:
                    if buf and buf[0] != 13:
                        raise errors.InvalidChunk("chunk data not followed by CRLF")
                    return NEED_DATA
                if buf[0] != 13 or buf[1] != 10:
                    raise errors.InvalidChunk("chunk data not followed by CRLF")
                del buf[:2]
                self.state = _SIZE
            elif state == _TRAILER:
                if not self._read_trailers(buf):
                    return NEED_DATA
                self.state = _DONE
                return END_OF_MESSAGE
            else:
                return END_OF_MESSAGE

    def _read_size_line(self, buf):
        if _COMPILED:
            # The common line, hex digits and CRLF, in one loop over a pointer; anything else
            # (extensions, errors, an incomplete line) takes the general path below.
            p = buf
            n = len(buf)
            i = 0
            size = 0
            while i < n and i < 15:  # 15 hex digits fit a C long long
                c = p[i]
                if 48 <= c <= 57:
                    size = size * 16 + (c - 48)
                elif 97 <= c <= 102:
                    size = size * 16 + (c - 87)
                elif 65 <= c <= 70:
                    size = size * 16 + (c - 55)
                else:
                    break
                i += 1
            if 0 < i and i + 1 < n and p[i] == 13 and p[i + 1] == 10:
                del buf[: i + 2]
                return self._start_chunk(size)
        end = buf.find(b"\r\n")
        if end < 0:
            n = len(buf)
            # A line of MAX_CHUNK_LINE bytes may be waiting for the LF after its CR.
            if n > MAX_CHUNK_LINE and (n > MAX_CHUNK_LINE + 1 or buf[n - 1] != 13):
                raise errors.InvalidChunk("chunk-size line longer than %d bytes" % MAX_CHUNK_LINE)
            if b"\n" in buf or buf.find(b"\r", 0, n - 1) >= 0:
                raise errors.InvalidChunk("bare CR or LF in chunk-size line")
            return False
        if end > MAX_CHUNK_LINE:
            raise errors.InvalidChunk("chunk-size line longer than %d bytes" % MAX_CHUNK_LINE)
        line = bytes(buf[:end])
        del buf[: end + 2]
        semicolon = line.find(b";")
        if semicolon >= 0:
            size = line[:semicolon].rstrip(b" \t")
            if not _CHUNK_EXT.fullmatch(line, len(size)):
                raise errors.InvalidChunk("invalid chunk extension: %r" % line[:80])
        else:
            size = line
        if not size or size.translate(None, HEXDIG):
            raise errors.InvalidChunk("invalid chunk size: %r" % line[:40])
        if len(size) > MAX_CHUNK_SIZE_DIGITS:
            raise errors.InvalidChunk("chunk size overflows: %r" % size[:40])
        return self._start_chunk(int(size, 16))

    def _start_chunk(self, n):
        if n == 0:
            self.state = _TRAILER
            return True
        total = self.total + n
        max_body = self.limits.max_body
        if max_body and total > max_body:
            raise errors.BodyTooLarge("chunked body exceeds the limit of %d bytes" % max_body)
        self.total = total
        self.remaining = n
        self.state = _DATA
        return True

    def _read_trailers(self, buf):
        # RFC 9112 §7.1.2: trailer-section = *( field-line CRLF ), then the final CRLF. We check
        # the fields as strictly as the head's and then drop them: nothing in a WSGI environ can
        # carry them, and merging them into the headers is what RFC 9110 §6.5.1 warns against.
        if self.line_start == 0 and len(buf) >= 2 and buf[0] == 13 and buf[1] == 10:
            del buf[:2]
            return True
        end = buf.find(b"\r\n\r\n", self.searched)
        limits = self.limits
        max_size = limits.max_header_count * (limits.max_header_size + 2)
        if end < 0:
            # Checked line by line as it arrives, like a head: a trickled trailer section costs
            # O(n), and it is refused at the same byte however it is split.
            self.line_start, self.lines = _check_partial_lines(
                buf, self.line_start, self.searched, self.lines, limits, 0
            )
            size = len(buf)
            self.searched = size - 3 if size > 3 else 0
            if size - 3 > max_size:
                raise errors.HeadersTooLarge("trailer section too large")
            return False
        if end > max_size:
            raise errors.HeadersTooLarge("trailer section too large")
        lines = _validated_lines(buf[:end])
        del buf[: end + 4]
        if len(lines) > limits.max_header_count:
            raise errors.HeadersTooLarge("too many trailer fields")
        for line in lines:
            if len(line) > limits.max_header_size:
                raise errors.HeadersTooLarge("trailer field too large")
            colon = line.find(":")
            if colon <= 0 or line[:colon] not in _NAME_CACHE:
                _field_name(line, colon)
        return True


# --- the parser ----------------------------------------------------------------------------------

_HEAD = 0
_BODY = 1
_END = 2
_PAUSED = 3
_ERROR = 4


class RequestParser:
    """Turns the bytes of one connection into request events. See the module docstring."""

    __slots__ = (
        "limits",
        "_buf",
        "_state",
        "_body",
        "_searched",
        "_scanned",
        "_lines",
        "_error",
        "_keep_alive",
    )

    def __init__(self, limits=None):
        self.limits = limits if limits is not None else Limits()
        self._buf = bytearray()
        self._state = _HEAD
        self._body = None
        self._searched = 0  # the head terminator is not in _buf[:_searched]
        self._scanned = 0  # _buf[:_scanned] ends after a LF and holds no bare LF
        self._lines = 0  # the complete lines in _buf[:_scanned], each checked against its limit
        self._error = None
        self._keep_alive = True

    def feed(self, data):
        self._buf += data

    def feed_from(self, source, n):
        """Append the first n bytes of the bytearray ``source`` (a connection's receive buffer).

        The same as ``feed(memoryview(source)[:n])``; the compiled build copies them with one
        memcpy instead of making a memoryview and a slice of it per read.
        """
        if source is None:
            raise TypeError("feed_from needs a bytearray, got None")
        if not 0 <= n <= len(source):
            raise ValueError("cannot take %d bytes from a buffer of %d" % (n, len(source)))
        if _COMPILED:
            _buffer_append(self._buf, PyByteArray_AS_STRING(source), n)
        else:
            self._buf += memoryview(source)[:n]

    @property
    def buffered(self):
        """The bytes received but not yet parsed (for handing a connection over after Upgrade)."""
        return bytes(self._buf)

    @property
    def at_request_boundary(self):
        """True when the parser waits for a new request and holds no byte of it yet."""
        return self._state == _HEAD and not self._buf

    def next_event(self, max_data=-1):
        """Return the next event; body data events are at most ``max_data`` bytes when it is > 0."""
        state = self._state
        if state == _HEAD:
            try:
                return self._next_head()
            except errors.ProtocolError as exc:
                self._fail(exc)
                raise
        if state == _BODY:
            try:
                event = self._body.read(self._buf, max_data)
            except errors.ProtocolError as exc:
                self._fail(exc)
                raise
            if event is END_OF_MESSAGE:
                self._end_message()
            return event
        if state == _END:
            self._state = _HEAD if self._keep_alive else _PAUSED
            return END_OF_MESSAGE
        if state == _PAUSED:
            return PAUSED
        raise self._error

    def _fail(self, exc):
        self._state = _ERROR
        self._error = exc

    def _end_message(self):
        self._body = None
        self._state = _HEAD if self._keep_alive else _PAUSED

    def _next_head(self):
        buf = self._buf
        if len(buf) > 1 and buf[0] == 13 and buf[1] == 10:
            # RFC 9112 §2.2: a server SHOULD ignore at least one empty line before the
            # request-line (some clients send CRLF after a POST body).
            while buf.startswith(b"\r\n"):
                del buf[:2]
            self._searched = 0
            self._scanned = 0
            self._lines = 0
        if _COMPILED:
            end = _find_head_end(buf, self._searched)
        else:
            end = buf.find(b"\r\n\r\n", self._searched)
        if end < 0:
            if buf:
                self._check_partial_head()
            return NEED_DATA
        head_end = end
        self._searched = 0
        self._scanned = 0
        self._lines = 0
        limits = self.limits
        if end > limits.max_head:
            raise errors.HeadersTooLarge("request head is larger than %d bytes" % limits.max_head)
        if _COMPILED:
            # Read in place: the head leaves the buffer only once it is parsed (below), and
            # nothing changes the buffer before then, so the pointer stays valid.
            p = buf
            count = _check_head_bytes_at(p, end)  # the CRLFs: one per field line
            text = PyUnicode_DecodeLatin1(cython.cast(cython.p_char, p), end, cython.NULL)
        else:
            head = buf[:end]
            text = _validated_text(head)
            count = text.count("\r\n")
        # Lines are cut at CRLFs by index (no list of lines, no partition or strip per field):
        # per field only its name, its value and their tuple are made.
        size = len(text)
        if _COMPILED:
            eol = _index(p, 0, size, 13)
            if eol < 0:
                eol = size
            request = None
            if eol <= limits.max_request_line:
                request = _common_request_line(p, eol, text)
            if request is None:
                request = _parse_request_line(text[:eol], limits)
        else:
            eol = text.find("\r\n")
            if eol < 0:
                eol = size
            request = _parse_request_line(text[:eol], limits)
        if count > limits.max_header_count:
            raise errors.HeadersTooLarge(
                "%d header fields, the limit is %d" % (count, limits.max_header_count)
            )
        max_header_size = limits.max_header_size
        headers = []
        name_cache = _NAME_CACHE
        content_length = None
        transfer_encoding = None
        hosts = 0
        host = None
        close = False
        keep_alive = False
        upgrade_option = False
        host_ok = True
        pos = eol + 2
        while pos < size:
            if _COMPILED:
                # The bytes were checked: the line ends at its first CR, or at the head's end.
                eol = _index(p, pos, size, 13)
                if eol < 0:
                    eol = size
                if eol - pos > max_header_size:
                    raise errors.HeadersTooLarge(
                        "a header field is %d bytes, the limit is %d" % (eol - pos, max_header_size)
                    )
                colon = _index(p, pos, eol, 58)  # ":"
                entry = name_cache.get(text[pos:colon]) if colon >= 0 else None
                if entry is None:
                    entry = _field_name(text[pos:eol], colon - pos if colon >= 0 else -1)
                # OWS around the value is not part of it (RFC 9112 §5.1); the head check left
                # only SP and HTAB as whitespace.
                start = colon + 1
                while start < eol and (p[start] == 32 or p[start] == 9):
                    start += 1
                end = eol
                while end > start and (p[end - 1] == 32 or p[end - 1] == 9):
                    end -= 1
                value = text[start:end]
            else:
                # As plain Python, str methods are the fast way: one partition and one strip.
                eol = text.find("\r\n", pos)
                if eol < 0:
                    eol = size
                line = text[pos:eol]
                if eol - pos > max_header_size:
                    raise errors.HeadersTooLarge(
                        "a header field is %d bytes, the limit is %d" % (eol - pos, max_header_size)
                    )
                name, sep, value = line.partition(":")
                entry = name_cache.get(name) if sep else None
                if entry is None:
                    entry = _field_name(line, line.find(":"))
                value = value.strip(WHITESPACE)
            pos = eol + 2
            lname, kind = entry
            headers.append((lname, value))
            if kind:
                if kind == _CONTENT_LENGTH:
                    if content_length is not None:
                        # RFC 9112 §6.3 allows identical repeated values; a proxy may not.
                        raise errors.InvalidFraming("more than one Content-Length")
                    content_length = value
                elif kind == _TRANSFER_ENCODING:
                    if transfer_encoding is None:
                        transfer_encoding = [value]
                    else:
                        transfer_encoding.append(value)
                elif kind == _HOST:
                    hosts += 1
                    host = value
                    if _COMPILED:
                        host_ok = _host_bytes_ok(p, start, end)
                elif kind == _CONNECTION:
                    # RFC 9110 §7.6.1: Connection = #connection-option, case-insensitive.
                    for token in value.lower().split(","):
                        token = token.strip(WHITESPACE)
                        if token == "close":
                            close = True
                        elif token == "keep-alive":
                            keep_alive = True
                        elif token == "upgrade":
                            upgrade_option = True
                elif kind == _EXPECT:
                    # RFC 9110 §10.1.1: Expect = #expectation; an empty value is an empty list
                    # (§5.6.1), which holds no expectation to fail.
                    if value:
                        if value.lower() != "100-continue":
                            raise errors.ExpectationFailed("unsupported expectation: %r" % value[:40])
                        # RFC 9110 §10.1.1: a 100-continue in an HTTP/1.0 request MUST be ignored.
                        request.expect_continue = request.minor == 1
                elif kind == _UPGRADE:
                    request.upgrade = value
                else:
                    request.forwarded = True
        request.headers = headers
        # RFC 9112 §9.3: HTTP/1.1 persists unless "close"; HTTP/1.0 only with "keep-alive".
        # "close" wins whatever the order of the tokens.
        request.keep_alive = not close and (keep_alive or request.minor == 1)
        if request.upgrade is not None and not (upgrade_option and request.minor == 1):
            # RFC 9110 §7.8: Upgrade counts only with the "upgrade" connection option (a proxy
            # that does not know it may have passed the field on), and "A server MUST ignore
            # an Upgrade header field that is received in an HTTP/1.0 request". The field
            # stays in the headers; the request is an ordinary one.
            request.upgrade = None
        if hosts != 1:
            # RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to any
            # HTTP/1.1 request message that lacks a Host header field and to any request message
            # that contains more than one Host header field".
            if hosts > 1:
                raise errors.InvalidHeader("more than one Host header")
            if request.minor == 1:
                raise errors.InvalidHeader("HTTP/1.1 request without Host header")
        else:
            # Compiled: the bytes were checked as the field was read (host_ok); pure: a value
            # seen before is in the cache. _check_host decides (and names) anything else.
            if not (host_ok if _COMPILED else host in _HOST_CACHE):
                _check_host(host)
            if request.host is None:
                # RFC 9112 §3.2.2: with an absolute-form target the Host header is ignored.
                request.host = host
        if transfer_encoding is not None:
            if content_length is not None:
                # RFC 9112 §6.1: both present "ought to be handled as an error"; the classic
                # CL.TE / TE.CL smuggling pair. Reject, never pick one.
                raise errors.InvalidFraming("both Content-Length and Transfer-Encoding")
            if request.minor == 0:
                # RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
                raise errors.InvalidFraming("Transfer-Encoding in an HTTP/1.0 request")
            request.chunked = _transfer_coding_is_chunked(transfer_encoding)
            request.content_length = -1
            self._body = ChunkedReader(limits)
            self._state = _BODY
        elif content_length is not None:
            if (
                not content_length
                or len(content_length) > MAX_CONTENT_LENGTH_DIGITS
                or not content_length.isdigit()
                or not content_length.isascii()
            ):
                raise errors.InvalidFraming("invalid Content-Length: %r" % content_length[:40])
            length = int(content_length)
            if limits.max_body and length > limits.max_body:
                raise errors.BodyTooLarge(
                    "body of %d bytes exceeds the limit of %d" % (length, limits.max_body)
                )
            request.content_length = length
            if length:
                self._body = ContentLengthReader(length)
                self._state = _BODY
            else:
                self._state = _END
        else:
            # RFC 9112 §6.3 rule 7: a request without either has no body.
            self._state = _END
        self._keep_alive = request.keep_alive
        # The head leaves the buffer only now (the compiled build read it in place above).
        if _COMPILED and head_end + 4 == len(buf):
            # The usual case, nothing pipelined behind it: empty the buffer but keep its small
            # allocation for the next request (del would free it and the next read allocate
            # it again; ~500 instructions a request).
            _buffer_clear(buf, _KEEP_ALLOCATION)
        else:
            del buf[: head_end + 4]
        return request

    def _check_partial_head(self):
        """Refuse an incomplete head as soon as it is certain to break a limit or the grammar."""
        buf = self._buf
        size = len(buf)
        limits = self.limits
        self._scanned, self._lines = _check_partial_lines(
            buf, self._scanned, self._searched, self._lines, limits, 1
        )
        # Next time, look for the terminator (and LFs) only in what is new: many small reads
        # stay O(n). The terminator may begin in the last 3 bytes.
        self._searched = size - 3 if size > 3 else 0
        # No terminator yet, so the head will end at size - 3 at the earliest.
        if size - 3 > limits.max_head:
            raise errors.HeadersTooLarge("request head is larger than %d bytes" % limits.max_head)

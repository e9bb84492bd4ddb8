"""The request head's grammar and meaning, shared by both builds' head scanners.

A scanner (``_pyhttp.HeadScanner`` in the pure build, ``_chttp.HeadScanner`` in the compiled
one) cuts a head into its request line and field lines; everything it decides beyond where a
line ends is stated here once: what a request line may be (``_parse_request_line``), what a
field name may be (``_field_name``), what the special fields say (``HeadFacts.note``), and what
they make of the request as a whole -- persistence, upgrade, Host and the body's framing
(``frame_request``, RFC 9112 §6.3 step by step). Sans-I/O like the parser above it.
"""

from greenserve.http import errors
from greenserve.http.grammar import (
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_HEADER_COUNT,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_REQUEST_LINE,
    FIELD_VALUE_CHARS,
    HEAD_CHARS,
    HOST_CHARS,
    KNOWN_METHODS,
    MAX_CONTENT_LENGTH_DIGITS,
    TCHAR,
    WHITESPACE,
)


class Limits:
    """Bounds on what one request may make us buffer: the settings limit_request_line,
    limit_request_fields, limit_request_field_size and limit_request_body, whose defaults these are.

    ``max_body`` of 0 means no limit on the request body. ``max_head`` is derived: the most bytes
    a complete head can take (request line plus every field line), computed once here rather
    than per request.
    """

    __slots__ = ("max_request_line", "max_header_count", "max_header_size", "max_body", "max_head")

    def __init__(self, max_request_line=DEFAULT_MAX_REQUEST_LINE, max_header_count=DEFAULT_MAX_HEADER_COUNT,
                 max_header_size=DEFAULT_MAX_HEADER_SIZE, max_body=DEFAULT_MAX_BODY):
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


def request_head(request):
    """The head of a parsed ``request`` as bytes that a parser reads back into the same request:
    its request line and fields (names in lower case, values trimmed), in the order received.

    For --sticky, which hands a connection to another worker at a request whose head this one
    has read (``greenserve.sticky``): the parser consumed those bytes, and the owner parses
    them again, with whatever followed them.
    """
    lines = ["%s %s %s" % (request.method, request.target, request.version)]
    for name, value in request.headers:
        lines.append("%s: %s" % (name, value))
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1")


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




def _validated_text(block):
    """Check a head or trailer block (without its final CRLFCRLF); return it decoded as latin-1.

    The pure build's head check, and both builds' trailer check (rare: two C-level passes are
    cheap enough there in either build). Afterwards every CR in the text is followed by a LF and every LF preceded by a CR, so the
    caller can cut lines at CRLFs without looking again.
    """
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



# --- what a head's fields say, and what that makes of the request -------------------------------


class HeadFacts:
    """What the special fields of one head said, gathered as a scanner meets them.

    One per parser, reset before each head (no allocation per request). ``host_ok`` is set by a
    scanner that has already checked the Host value's bytes itself; else ``frame_request`` checks it.
    """

    __slots__ = ("content_length", "transfer_encoding", "hosts", "host", "host_ok", "close", "keep_alive",
                 "upgrade_option")

    def __init__(self):
        self.reset()

    def reset(self):
        self.content_length = None
        self.transfer_encoding = None
        self.hosts = 0
        self.host = None
        self.host_ok = False
        self.close = False
        self.keep_alive = False
        self.upgrade_option = False

    def note(self, request, kind, value):
        """One field of a special kind (see _SPECIAL_NAMES), its value without OWS."""
        if kind == _CONTENT_LENGTH:
            if self.content_length is not None:
                # RFC 9112 §6.3 allows identical repeated values; a proxy may not.
                raise errors.InvalidFraming("more than one Content-Length")
            self.content_length = value
        elif kind == _TRANSFER_ENCODING:
            if self.transfer_encoding is None:
                self.transfer_encoding = [value]
            else:
                self.transfer_encoding.append(value)
        elif kind == _HOST:
            self.hosts += 1
            self.host = value
        elif kind == _CONNECTION:
            # RFC 9110 §7.6.1: Connection = #connection-option, case-insensitive.
            for token in value.lower().split(","):
                token = token.strip(WHITESPACE)
                if token == "close":
                    self.close = True
                elif token == "keep-alive":
                    self.keep_alive = True
                elif token == "upgrade":
                    self.upgrade_option = True
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


def frame_request(request, facts, limits):
    """Decide what a whole head makes of its request: persistence, upgrade, Host, body framing.

    Sets ``request.keep_alive``, ``upgrade``, ``host``, ``chunked`` and ``content_length`` (-1:
    chunked; 0: no body), or raises the ProtocolError that refuses the request. The parser picks
    its body reader from ``chunked`` and ``content_length``.
    """
    minor = request.minor
    # RFC 9112 §9.3: HTTP/1.1 persists unless "close"; HTTP/1.0 only with "keep-alive".
    # "close" wins whatever the order of the tokens.
    request.keep_alive = not facts.close and (facts.keep_alive or minor == 1)
    if request.upgrade is not None and not (facts.upgrade_option and minor == 1):
        # RFC 9110 §7.8: Upgrade counts only with the "upgrade" connection option (a proxy
        # that does not know it may have passed the field on), and "A server MUST ignore
        # an Upgrade header field that is received in an HTTP/1.0 request". The field
        # stays in the headers; the request is an ordinary one.
        request.upgrade = None
    hosts = facts.hosts
    if hosts != 1:
        # RFC 9112 §3.2: "A server MUST respond with a 400 (Bad Request) status code to any
        # HTTP/1.1 request message that lacks a Host header field and to any request message
        # that contains more than one Host header field".
        if hosts > 1:
            raise errors.InvalidHeader("more than one Host header")
        if minor == 1:
            raise errors.InvalidHeader("HTTP/1.1 request without Host header")
    else:
        # A value checked before is in the cache: no call (the pure build's scanner checks no
        # bytes itself, so this is every request there).
        if not facts.host_ok and facts.host not in _HOST_CACHE:
            _check_host(facts.host)
        if request.host is None:
            # RFC 9112 §3.2.2: with an absolute-form target the Host header is ignored.
            request.host = facts.host
    # RFC 9112 §6.3, the steps that apply to a request:
    content_length = facts.content_length
    if facts.transfer_encoding is not None:
        if content_length is not None:
            # Step 3 and §6.1: both present "ought to be handled as an error"; the classic
            # CL.TE / TE.CL smuggling pair. Reject, never pick one.
            raise errors.InvalidFraming("both Content-Length and Transfer-Encoding")
        if minor == 0:
            # §6.1: Transfer-Encoding in HTTP/1.0 means faulty framing.
            raise errors.InvalidFraming("Transfer-Encoding in an HTTP/1.0 request")
        # Step 4: chunked is final (or the length cannot be determined: 400).
        request.chunked = _transfer_coding_is_chunked(facts.transfer_encoding)
        request.content_length = -1
    elif content_length is not None:
        # Step 5: one valid Content-Length gives the length; anything else is unrecoverable.
        if (
            not content_length
            or len(content_length) > MAX_CONTENT_LENGTH_DIGITS
            or not content_length.isdigit()
            or not content_length.isascii()
        ):
            raise errors.InvalidFraming("invalid Content-Length: %r" % content_length[:40])
        length = int(content_length)
        if limits.max_body and length > limits.max_body:
            raise errors.BodyTooLarge("body of %d bytes exceeds the limit of %d" % (length, limits.max_body))
        request.content_length = length
    # Step 7: a request with neither has no body (content_length stays 0).

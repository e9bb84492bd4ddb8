"""The uwsgi protocol's request packet (nginx's uwsgi_pass), sans-I/O: bytes in, a request out.

The wire format (uWSGI's docs, "The uwsgi protocol"): a 4-byte header -- modifier1 (u8), datasize
(u16, little-endian), modifier2 (u8) -- then datasize bytes of vars, each a key and a value with
a u16 little-endian length before each, then the request body, CONTENT_LENGTH bytes. The vars
are the CGI environ a front-end makes of the request (nginx's uwsgi_params: REQUEST_METHOD,
REQUEST_URI, PATH_INFO, QUERY_STRING, REMOTE_ADDR, ..., and the header fields as HTTP_*).
modifier1 0, a WSGI request, is the only packet served; the response is plain HTTP/1.x and the
connection closes after it (uwsgi_protocol.py). Pure Python: it runs once a connection.

``UwsgiParser`` is fed bytes split anywhere and checks each limit as soon as the bytes that
break it are in: the datasize against the head's limit from the 4-byte header alone, each var's
lengths against the datasize before its bytes are awaited. A malformed packet is a
``PacketError``, which the protocol logs and answers by closing: it is not an HTTP client's
mistake but a front-end that does not speak uwsgi (or is not one).
"""

from greenserve.http import errors
from greenserve.http.grammar import ALPHA, DIGIT, FIELD_VALUE_CHARS, MAX_CONTENT_LENGTH_DIGITS, TCHAR, VCHAR
from greenserve.http.head import Request
from greenserve.http.parser import END_OF_MESSAGE, NEED_DATA

__all__ = ["UwsgiParser", "PacketError", "HEADER_SIZE", "MAX_CGI_VARS"]

HEADER_SIZE = 4
# The vars a front-end sends besides the request's header fields: nginx's uwsgi_params has 15,
# and a deployment adds its own uwsgi_param lines. A bound, so that a packet cannot make us
# build an environ of thousands of keys (the header fields have limit_request_fields).
MAX_CGI_VARS = 64
# A CGI var's key: letters, digits and "_" (RFC 3875 §4.1's meta-variable names). Not "." nor
# anything else: a key such as "wsgi.input" or "greenserve.socket" would replace the server's own.
CGI_NAME_CHARS = ALPHA + DIGIT + b"_"
# A header field's var: HTTP_ and the field's name, as nginx makes it (upper case, "-" as "_").
HEADER_KEY_CHARS = VCHAR
_HTTPS_ON = ("on", "1", "true")
# The two fields CGI names without HTTP_ (RFC 3875 §4.1.2, §4.1.3): field name -> var key.
_CGI_FIELDS = {"content-type": "CONTENT_TYPE", "content-length": "CONTENT_LENGTH"}
# The proxy fields flagged on the request, as http/head.py flags them (proxy.ProxyHeaders).
_FORWARDED_NAMES = frozenset(("x-forwarded-for", "x-forwarded-proto", "x-forwarded-ssl", "x-forwarded-protocol"))


class PacketError(errors.ProtocolError):
    """A malformed uwsgi packet: logged with its peer, and the connection closed unanswered."""


class UwsgiParser:
    """One connection's request packet: ``feed(data)``, then ``next_event(max_data)`` gives
    NEED_DATA until the vars are in, then the ``head.Request`` (its environ keys that are no
    header field in ``environ``), then the body's pieces (bytes, at most ``max_data`` if > 0)
    and END_OF_MESSAGE after CONTENT_LENGTH bytes. Bytes past the body are dropped: the
    connection carries one request."""

    __slots__ = ("limits", "buffer", "pos", "end", "cgi", "headers", "request", "environ", "remaining")

    def __init__(self, limits):
        self.limits = limits  # a head.Limits
        self.buffer = bytearray()
        self.pos = HEADER_SIZE  # where the next var starts in buffer
        self.end = -1  # where the vars end (HEADER_SIZE + datasize), once the header is in
        self.cgi = {}
        self.headers = []
        self.request = None
        self.environ = None
        self.remaining = 0  # body bytes still to come

    def feed(self, data):
        if self.request is None:
            self.buffer += data
        else:
            # Only the body's bytes are kept: nothing a peer sends after them can pile up here.
            room = self.remaining - len(self.buffer)
            if room > 0:
                self.buffer += data[:room]

    def next_event(self, max_data=0):
        if self.request is None:
            return self._packet()
        remaining = self.remaining
        if not remaining:
            return END_OF_MESSAGE
        buffer = self.buffer
        if not buffer:
            return NEED_DATA
        size = min(len(buffer), remaining)
        if 0 < max_data < size:
            size = max_data
        data = bytes(buffer[:size])
        del buffer[:size]
        self.remaining = remaining - size
        return data

    def _packet(self):
        buffer = self.buffer
        if self.end < 0:
            if len(buffer) < HEADER_SIZE:
                return NEED_DATA
            self._header(buffer[0], buffer[1] | buffer[2] << 8, buffer[3])
        available = min(len(buffer), self.end)
        while self.pos < self.end:
            if not self._var(buffer, available):
                return NEED_DATA
        del buffer[: self.end]
        return self._request()

    def _header(self, modifier1, datasize, modifier2):
        if modifier1 != 0:
            raise PacketError(
                "modifier1 %d: only 0 (a WSGI request) is served; nginx sends it unless uwsgi_modifier1 "
                "says otherwise" % modifier1)
        if modifier2 != 0:
            raise PacketError("modifier2 %d: only 0 is served (nginx's uwsgi_modifier2 0)" % modifier2)
        limit = self.limits.max_head
        if datasize > limit:
            raise PacketError(
                "vars of %d bytes, over the limit of %d (limit_request_line, limit_request_fields and "
                "limit_request_field_size make it)" % (datasize, limit))
        self.end = HEADER_SIZE + datasize

    def _var(self, buffer, available):
        """Take the next var if all of it is in; False: wait for more. A length that reaches past
        the datasize is refused at once, before its bytes are awaited."""
        pos = self.pos
        end = self.end
        if pos + 2 > end:
            raise PacketError("%d bytes left at the end of the vars, too few for a key's size" % (end - pos))
        if pos + 2 > available:
            return False
        key_end = pos + 2 + (buffer[pos] | buffer[pos + 1] << 8)
        if key_end + 2 > end:
            raise PacketError("a var's key (at byte %d) runs past the end of the vars (datasize %d)"
                              % (pos, end - HEADER_SIZE))
        if key_end + 2 > available:
            return False
        value_end = key_end + 2 + (buffer[key_end] | buffer[key_end + 1] << 8)
        if value_end > end:
            raise PacketError("a var's value (at byte %d) runs past the end of the vars (datasize %d)"
                              % (key_end, end - HEADER_SIZE))
        if value_end > available:
            return False
        self._store(bytes(buffer[pos + 2 : key_end]), bytes(buffer[key_end + 2 : value_end]))
        self.pos = value_end
        return True

    def _store(self, key, value):
        limits = self.limits
        if key[:5] == b"HTTP_" and len(key) > 5:
            if key.translate(None, HEADER_KEY_CHARS):
                raise PacketError("var key %r is not printable ASCII" % key[:40])
            if value.translate(None, FIELD_VALUE_CHARS):
                raise PacketError("the value of %s holds a control character (CR, LF, NUL ...)" % key.decode("ascii"))
            if len(self.headers) >= limits.max_header_count:
                raise PacketError("more than %d header fields (limit_request_fields)" % limits.max_header_count)
            if len(key) - 5 + len(value) > limits.max_header_size:
                raise PacketError("%s of %d bytes, over limit_request_field_size (%d)"
                                  % (key.decode("ascii"), len(value), limits.max_header_size))
            name = key[5:].decode("ascii").lower().replace("_", "-")
            if name in _CGI_FIELDS:
                # nginx sends HTTP_CONTENT_LENGTH beside CONTENT_LENGTH: one of them counts (_fields).
                self.cgi[key.decode("ascii")] = value.decode("latin-1")
            else:
                self.headers.append((name, value.decode("latin-1")))
            return
        if not key or key.translate(None, CGI_NAME_CHARS):
            raise PacketError("var key %r is not a CGI name (letters, digits and _)" % key[:40])
        if len(self.cgi) >= MAX_CGI_VARS:
            raise PacketError("more than %d vars besides the header fields" % MAX_CGI_VARS)
        self.cgi[key.decode("ascii")] = value.decode("latin-1")

    def _request(self):
        """The request the vars describe, in the form the responder reads an HTTP/1.1 one."""
        cgi = self.cgi
        method = cgi.pop("REQUEST_METHOD", "GET")
        if not method or method.encode("latin-1").translate(None, TCHAR):
            raise PacketError("REQUEST_METHOD %r is not a method name" % method[:40])
        query = cgi.pop("QUERY_STRING", "")
        target = cgi.pop("REQUEST_URI", None)
        path = cgi.pop("PATH_INFO", None)
        if path is None:
            # The path as sent, which the responder decodes as it decodes HTTP/1.1's.
            path = (target or "/").partition("?")[0]
        else:
            # PATH_INFO comes decoded (nginx's $document_uri): the responder's decoding must
            # leave it as it is.
            path = path.replace("%", "%25")
        if target is None:
            target = path + ("?" + query if query else "")
        version = cgi.pop("SERVER_PROTOCOL", "HTTP/1.1")
        headers = self._fields()
        request = Request(method, target, path, query, version, 0 if version == "HTTP/1.0" else 1, headers)
        request.content_length = self.remaining = self._content_length(headers)
        request.keep_alive = False  # nginx's uwsgi module sends one request a connection
        request.forwarded = any(name in _FORWARDED_NAMES for name, _ in self.headers)
        scheme = _scheme(cgi)
        if scheme is not None:
            cgi["wsgi.url_scheme"] = scheme
        self.environ = cgi
        self.request = request
        del self.buffer[self.remaining :]
        return request

    def _fields(self):
        """The header fields, with Content-Type and Content-Length as HTTP/1.1 has them: CGI's
        CONTENT_TYPE and CONTENT_LENGTH, else HTTP_CONTENT_TYPE and HTTP_CONTENT_LENGTH."""
        headers = self.headers
        cgi = self.cgi
        for name, key in _CGI_FIELDS.items():
            value = cgi.pop(key, None)
            fallback = cgi.pop("HTTP_" + key, None)
            if value is None:
                value = fallback
            if value is not None:
                if value.encode("latin-1").translate(None, FIELD_VALUE_CHARS):
                    raise PacketError("the value of %s holds a control character (CR, LF, NUL ...)" % key)
                headers.append((name, value))
        return headers

    def _content_length(self, headers):
        text = ""
        for name, value in headers:
            if name == "content-length":
                text = value
        if not text:
            return 0  # nginx sends CONTENT_LENGTH empty for a request without a body
        if not text.isdigit() or not text.isascii() or len(text) > MAX_CONTENT_LENGTH_DIGITS:
            raise PacketError("CONTENT_LENGTH %r is not a number of bytes" % text[:40])
        length = int(text)
        max_body = self.limits.max_body
        if max_body and length > max_body:
            # A well-formed request the server will not take: answered, as HTTP/1.1's is.
            raise errors.BodyTooLarge("body of %d bytes exceeds the limit of %d" % (length, max_body))
        return length


def _scheme(cgi):
    """The client's scheme as the front-end tells it (nginx's uwsgi_params: HTTPS, set only over
    TLS, and REQUEST_SCHEME), or None: the listener's."""
    if cgi.get("HTTPS", "").lower() in _HTTPS_ON:
        return "https"
    scheme = cgi.get("REQUEST_SCHEME", cgi.get("UWSGI_SCHEME"))
    if scheme in ("http", "https"):
        return scheme
    return None

"""The rules of RFC 9113 §8.2-8.3 for a request's fields, and for the fields we send.

A request that breaks one is "malformed" (§8.1.1): a stream error of type PROTOCOL_ERROR, so
each check raises ``Malformed`` and the connection resets that stream. The character classes
are the HTTP/1.1 parser's (``http/grammar.py``), so both versions accept the same names and
values; RFC 9113 §8.2.1 asks at least for no NUL, CR or LF and no uppercase in names.
"""

import re

from greenserve.http.grammar import DIGIT, FIELD_VALUE_CHARS, HOST_CHARS, TARGET_CHARS, TCHAR

__all__ = ["Malformed", "request_head", "trailers", "CONNECTION_SPECIFIC"]

# §8.2.1: "A field name MUST NOT contain characters in the ranges 0x00-0x20, 0x41-0x5a, or
# 0x7f-0xff"; RFC 9110's token besides, as our HTTP/1.1 parser asks.
_NAME_CHARS = TCHAR.translate(None, b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")

# §8.2.2: "An endpoint MUST NOT generate an HTTP/2 message containing connection-specific
# header fields. This includes the Connection header field and those listed as having
# connection-specific semantics (Proxy-Connection, Keep-Alive, Transfer-Encoding, and
# Upgrade). Any message containing connection-specific header fields MUST be treated as
# malformed."
CONNECTION_SPECIFIC = frozenset([b"connection", b"proxy-connection", b"keep-alive", b"transfer-encoding", b"upgrade"])

# Fields found valid, as (name, value) tuples: a client sends the same fields on every request,
# and HPACK hands back its table's own tuples for them, so a lookup here (hashes of bytes are
# cached) replaces the checks; bounded, emptied when full (a client sending ever new values
# only pays the checks, as without it).
_VALID_FIELDS = {}
_VALID_FIELDS_MAX = 2048


def _outside(allowed):
    """A search for the first byte not in ``allowed``: what ``value.translate(None, allowed)``
    tells, without building a 256-byte table from ``allowed`` at every call."""
    return re.compile(b"[^" + b"".join(re.escape(bytes([c])) for c in allowed) + b"]").search


_NOT_NAME = _outside(_NAME_CHARS)
_NOT_VALUE = _outside(FIELD_VALUE_CHARS)
_NOT_TOKEN = _outside(TCHAR)
_NOT_TARGET = _outside(TARGET_CHARS)
_NOT_HOST = _outside(HOST_CHARS)
_NOT_DIGIT = _outside(DIGIT)


class Malformed(Exception):
    """§8.1.1: a malformed request; the stream is reset with PROTOCOL_ERROR."""


def _check_field(name, value):
    if not name or _NOT_NAME(name) is not None:
        raise Malformed("invalid field name %r" % (name,))
    # §8.2.1: "A field value MUST NOT contain the zero value (0x00), line feed (0x0a), or
    # carriage return (0x0d) at any position. A field value MUST NOT start or end with an ASCII
    # whitespace character (0x20 or 0x09)."
    if value and (_NOT_VALUE(value) is not None or value[0] in (0x20, 0x09) or value[-1] in (0x20, 0x09)):
        raise Malformed("invalid value of field %r" % (name,))
    if name in CONNECTION_SPECIFIC:
        raise Malformed("connection-specific field %r" % (name,))
    # §8.2.2: "The only exception to this is the TE header field, which MAY be present in an
    # HTTP/2 request; when it is, it MUST NOT contain any value other than "trailers"."
    if name == b"te" and value != b"trailers":
        raise Malformed("te: %r" % (value,))


def _content_length(value, previous):
    """§8.1.1 with RFC 9110 §8.6: digits only; repeated, the same number."""
    if not value or _NOT_DIGIT(value) is not None or len(value) > 18:
        raise Malformed("invalid content-length %r" % (value,))
    length = int(value)
    if previous is not None and previous != length:
        raise Malformed("conflicting content-length values")
    return length


def _regular_fields(fields):
    """The regular fields after the pseudo-header fields, checked; ``(fields, content-length
    or None, host or None)`` with the cookie fields joined (§8.2.3)."""
    content_length = None
    host = None
    cookies = 0
    valid = _VALID_FIELDS
    for field in fields:
        name = field[0]
        value = field[1]
        if name and name[0] == 0x3A:  # b":" (its first byte: no one-byte slice to compare)
            # §8.3: "All pseudo-header fields MUST appear in a field block before all regular
            # field lines."
            raise Malformed("pseudo-header field %r after a regular field" % (name,))
        if field not in valid:
            _check_field(name, value)
            if len(valid) >= _VALID_FIELDS_MAX:
                valid.clear()
            valid[field] = None
        if name == b"content-length":
            content_length = _content_length(value, content_length)
        elif name == b"cookie":
            cookies += 1
        elif name == b"host":
            host = value
    if cookies > 1:
        fields = _join_cookies(fields)
    return fields, content_length, host


def _join_cookies(fields):
    """§8.2.3: "If there are multiple Cookie header fields after decompression, these MUST be
    concatenated into a single octet string using the two-octet delimiter of 0x3b, 0x20 ("; ")
    before being passed into a non-HTTP/2 context" -- here, the first cookie's place."""
    joined = b"; ".join([value for name, value in fields if name == b"cookie"])
    out = []
    for field in fields:
        if field[0] != b"cookie":
            out.append(field)
        elif joined is not None:
            out.append((b"cookie", joined))
            joined = None
    return out


def _allowed(field, outside):
    """Whether a pseudo-header field's value has only the bytes its search ``outside`` allows;
    one found so is remembered with the valid regular fields (a pseudo-header's name is no
    regular field's), as a client sends the same :method, :scheme and :authority every time."""
    if field in _VALID_FIELDS:
        return True
    if outside(field[1]) is not None:
        return False
    if len(_VALID_FIELDS) >= _VALID_FIELDS_MAX:
        _VALID_FIELDS.clear()
    _VALID_FIELDS[field] = None
    return True


def request_head(headers):
    """``(method, scheme, authority, path, fields, content_length)`` of a request's decoded
    field block; Malformed for any rule of §8.3.1 it breaks."""
    method_field = scheme_field = authority_field = path_field = None
    count = 0
    for field in headers:
        name = field[0]
        if not name or name[0] != 0x3A:  # b":"
            break
        # §8.3: "Endpoints MUST treat a request or response that contains undefined or invalid
        # pseudo-header fields as malformed"; §8.3.1: the same field MUST NOT appear twice.
        if name == b":method":
            twice = method_field is not None
            method_field = field
        elif name == b":scheme":
            twice = scheme_field is not None
            scheme_field = field
        elif name == b":authority":
            twice = authority_field is not None
            authority_field = field
        elif name == b":path":
            twice = path_field is not None
            path_field = field
        else:
            raise Malformed("pseudo-header field %r in a request" % (name,))
        if twice:
            raise Malformed("%r twice" % (name,))
        count += 1
    fields, content_length, host = _regular_fields(headers[count:] if count else headers)
    method = method_field[1] if method_field is not None else None
    scheme = scheme_field[1] if scheme_field is not None else None
    authority = authority_field[1] if authority_field is not None else None
    path = path_field[1] if path_field is not None else None
    if not method or not _allowed(method_field, _NOT_TOKEN):
        raise Malformed("missing or invalid :method")
    if method == b"CONNECT":
        # §8.5: "The :scheme and :path pseudo-header fields MUST be omitted"; ":authority"
        # holds the host and port to connect to.
        if scheme is not None or path is not None or not authority:
            raise Malformed("CONNECT needs :authority alone")
    else:
        # §8.3.1: "All HTTP/2 requests MUST include exactly one valid value for the :method,
        # :scheme, and :path pseudo-header fields, unless they are CONNECT requests"; :path
        # "MUST NOT be empty for http or https URIs", is "/..." or "*" for OPTIONS.
        if not scheme or not _allowed(scheme_field, _NOT_NAME):
            raise Malformed("missing or invalid :scheme")
        if not path or not (path[0] == 0x2F or (path == b"*" and method == b"OPTIONS")):  # b"/"
            raise Malformed("missing or invalid :path %r" % (path,))
        if not _allowed(path_field, _NOT_TARGET):
            raise Malformed("invalid :path %r" % (path,))
    # §8.3.1: ":authority MUST NOT include the deprecated userinfo subcomponent"; the host
    # grammar of RFC 3986 (http/grammar.py's HOST_CHARS, as the HTTP/1.1 parser checks Host)
    # has no "@", space or control character.
    if authority is not None and not _allowed(authority_field, _NOT_HOST):
        raise Malformed("invalid :authority %r" % (authority,))
    if host is not None and _NOT_HOST(host) is not None:
        raise Malformed("invalid host %r" % (host,))
    # §8.3.1: "A server SHOULD treat a request as malformed if it contains a Host header field
    # that identifies an entity that differs from the entity in the :authority pseudo-header
    # field." Two readings of one request's target are what request smuggling is made of.
    if host is not None and authority is not None and host != authority:
        raise Malformed("host %r differs from :authority %r" % (host, authority))
    return method, scheme, authority, path, fields, content_length


def trailers(headers):
    """§8.1: a trailer section "MUST NOT include pseudo-header fields"; its fields follow the
    rules of any field. Returns the fields."""
    for name, value in headers:
        if name and name[0] == 0x3A:  # b":"
            raise Malformed("pseudo-header field %r in trailers" % (name,))
        _check_field(name, value)
    return headers

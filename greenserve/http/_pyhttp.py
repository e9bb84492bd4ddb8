"""The pure-Python build's byte work for http/: its head scanner and its clock.

The compiled build uses ``_chttp`` instead (the same classes in C, over pointers); the parser
and ``framing`` pick one of the two once, at import (``greenserve._accel.compiled()``). As plain
Python, ``bytes`` and ``str`` methods are the fast way: the head is found with one
``bytearray.find``, checked with one ``translate`` and a ``count``, decoded once as latin-1, and
its fields cut with one ``partition`` and one ``strip`` each.
"""

from time import time

from greenserve.http import errors
from greenserve.http.grammar import WHITESPACE
from greenserve.http.head import _NAME_CACHE, _SPECIAL_NAMES, _field_name, _parse_request_line, _validated_text

# The kind of the Host field (a C constant of head's in the compiled build, where tests run this
# scanner beside the C one).
_HOST = _SPECIAL_NAMES["host"]


class HeadScanner:
    """Finds, checks and cuts request heads in a parser's buffer (stateless: one serves all)."""

    __slots__ = ()

    def find_end(self, buf, start):
        """Where the head's CRLFCRLF begins, looking from ``start``; -1 if not there yet."""
        return buf.find(b"\r\n\r\n", start)

    def scan(self, buf, end, limits, facts):
        """Read the head ``buf[:end]``: the Request (headers set), its special fields in ``facts``."""
        text = _validated_text(buf[:end])
        count = text.count("\r\n")
        size = len(text)
        eol = text.find("\r\n")
        if eol < 0:
            eol = size
        request = _parse_request_line(text[:eol], limits)
        if count > limits.max_header_count:
            raise errors.HeadersTooLarge("%d header fields, the limit is %d" % (count, limits.max_header_count))
        max_header_size = limits.max_header_size
        headers = []
        name_cache = _NAME_CACHE
        pos = eol + 2
        while pos < size:
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
            value = value.strip(WHITESPACE)  # OWS is not part of the value (RFC 9112 §5.1)
            pos = eol + 2
            lname, kind = entry
            headers.append((lname, value))
            if kind == _HOST:
                # note()'s Host branch, here: the one special field of nearly every head, and
                # a Python call less for it.
                facts.hosts += 1
                facts.host = value
            elif kind:
                facts.note(request, kind, value)
        request.headers = headers
        return request

    def consume(self, buf, n):
        """Drop the first n bytes of the buffer (a head just read)."""
        del buf[:n]

    def append(self, buf, source, n):
        """Append the first n bytes of the bytearray ``source`` to ``buf``."""
        buf += memoryview(source)[:n]

    def chunk_size(self, buf):
        """The size of a chunk whose size line is plain hex digits and CRLF, consumed; else -1.

        Not in this build: the general reading of the line (``ChunkedReader``) is the fast way.
        """
        return -1


class Clock:
    def now_second(self):
        """The Unix time in whole seconds."""
        return int(time())


class Joiner:
    __slots__ = ()

    # The pieces (bytes) as one bytes object: bytes.join itself, bound to b"", so a call costs
    # no Python frame (two calls a keep-alive response: its head, and the head with its body).
    join = staticmethod(b"".join)

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

Layout: this module is the state machine and the body readers. A head is found and cut into
lines by the build's head scanner (``_pyhttp.HeadScanner`` as plain Python, ``_chttp.HeadScanner``
compiled, chosen once at import); what its lines mean, and the framing they decide, is
``head``'s, stated once for both. Field names are looked up in a bounded cache that remembers
already-validated names with their lower-case form. No regex runs for an ordinary request.
"""

import re

from greenserve._accel import compiled
from greenserve.http import errors
from greenserve.http.grammar import HEXDIG, MAX_CHUNK_LINE, MAX_CHUNK_SIZE_DIGITS, QDTEXT, TCHAR
from greenserve.http.head import (
    _NAME_CACHE,
    HeadFacts,
    Limits,
    Request,
    _field_name,
    _validated_lines,
    frame_request,
)

if compiled():
    from greenserve.http._chttp import HeadScanner
else:
    from greenserve.http._pyhttp import HeadScanner

# The build's head scanner; stateless, so one serves every parser.
_SCANNER = HeadScanner()

__all__ = ["END_OF_MESSAGE", "NEED_DATA", "PAUSED", "Limits", "Request", "RequestParser"]


class _Sentinel:
    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return self.name


NEED_DATA = _Sentinel("NEED_DATA")
PAUSED = _Sentinel("PAUSED")
END_OF_MESSAGE = _Sentinel("END_OF_MESSAGE")

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
        size = _SCANNER.chunk_size(buf)  # the common line, hex digits and CRLF, if the build has a shortcut
        if size >= 0:
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
        "_facts",
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
        self._facts = HeadFacts()  # reused by every head (see head.HeadFacts)

    def feed(self, data):
        self._buf += data

    def feed_from(self, source, n):
        """Append the first n bytes of the bytearray ``source`` (a connection's receive buffer).

        The same as ``feed(memoryview(source)[:n])``, which is what the pure build does; the
        compiled build copies them with one memcpy instead (no memoryview and slice per read).
        """
        if source is None:
            raise TypeError("feed_from needs a bytearray, got None")
        if not 0 <= n <= len(source):
            raise ValueError("cannot take %d bytes from a buffer of %d" % (n, len(source)))
        _SCANNER.append(self._buf, source, n)

    @property
    def buffered(self):
        """The bytes received but not yet parsed (for handing a connection over after Upgrade)."""
        return bytes(self._buf)

    def take_buffered(self):
        """``buffered``, and the parser lets go of its buffer: the connection now carries
        another protocol (a WebSocket) and this parser reads no more of it."""
        data = bytes(self._buf)
        self._buf = bytearray()  # an empty bytearray holds no allocation
        return data

    @property
    def at_request_boundary(self):
        """True when the parser waits for a new request and holds no byte of it yet."""
        return self._state == _HEAD and not self._buf

    @property
    def at_last_request_end(self):
        """True when the request just read was the client's last and nothing after it is held.

        The client said so: HTTP/1.0 without keep-alive, or "close" (RFC 9112 §9.6: a client that
        sends "close" MUST NOT send further requests). So no byte is on its way after the
        message, and the connection can close at once, without a lingering close.
        """
        return not self._keep_alive and not self._buf and (self._state == _END or self._state == _PAUSED)

    def next_event(self, max_data=-1):
        """Return the next event; body data events are at most ``max_data`` bytes when it is > 0."""
        state = self._state
        if state == _HEAD:
            if not self._buf:
                return NEED_DATA  # (the usual call after a response: nothing to search)
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
        end = _SCANNER.find_end(buf, self._searched)
        if end < 0:
            if buf:
                self._check_partial_head()
            return NEED_DATA
        self._searched = 0
        self._scanned = 0
        self._lines = 0
        limits = self.limits
        if end > limits.max_head:
            raise errors.HeadersTooLarge("request head is larger than %d bytes" % limits.max_head)
        facts = self._facts
        facts.reset()
        request = _SCANNER.scan(buf, end, limits, facts)
        frame_request(request, facts, limits)
        # The body reader, chosen once from the framing decided (h11's READERS).
        if request.chunked:
            self._body = ChunkedReader(limits)
            self._state = _BODY
        elif request.content_length:
            self._body = ContentLengthReader(request.content_length)
            self._state = _BODY
        else:
            self._state = _END
        self._keep_alive = request.keep_alive
        _SCANNER.consume(buf, end + 4)  # the head leaves the buffer only now
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

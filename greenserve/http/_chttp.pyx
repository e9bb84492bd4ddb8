# cython: language_level=3
"""The compiled build's byte work for http/: its head scanner and its clock, in C.

Never imported by the pure-Python build, which uses ``_pyhttp`` (the same classes, with the
same verdicts, in Python); tests/http/test_parser_builds_agree.py holds the two to that. Here
calling a ``str`` or ``bytearray`` method costs more than its loop, so the head is read over a
pointer: one checking pass, memchr for line ends and colons, the usual request line and the Host
value byte by byte. What a line may be and what a field means are not decided here but in
``head`` (``_parse_request_line``, ``_field_name``, ``HeadFacts``, ``frame_request``): these
shortcuts only accept what those accept, with the same result.
"""

cimport cython
from libc.string cimport memchr, memcmp, memcpy
from libc.time cimport time as c_time
from cpython.unicode cimport PyUnicode_DecodeLatin1
from cpython.bytearray cimport PyByteArray_Resize, PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE

from greenserve.http.head cimport HeadFacts, Limits, Request, _field_name, _parse_request_line

from greenserve.http import errors, head
from greenserve.http.grammar import HEAD_CHARS, HOST_CHARS

# bytearray without the reallocations: CPython frees a bytearray's storage whenever it shrinks
# below half of it, so `del buf[:n]` of a whole request and the next read's append cost a free
# and a malloc per request. These keep a small allocation (the struct is the running CPython's,
# from its own header) and fall back to PyByteArray_Resize for anything else.
cdef extern from *:
    """
    static CYTHON_INLINE int greenserve_buffer_clear(PyObject *o, Py_ssize_t keep) {
        PyByteArrayObject *b = (PyByteArrayObject *)o;
        if (b->ob_exports == 0 && b->ob_bytes != NULL && b->ob_alloc <= keep) {
            b->ob_start = b->ob_bytes;
            Py_SET_SIZE(b, 0);
            b->ob_bytes[0] = '\\0';
            return 0;
        }
        return PyByteArray_Resize(o, 0);
    }
    static CYTHON_INLINE int greenserve_buffer_append(PyObject *o, const char *data, Py_ssize_t n) {
        PyByteArrayObject *b = (PyByteArrayObject *)o;
        Py_ssize_t size = Py_SIZE(b);
        if (b->ob_exports == 0 && b->ob_bytes != NULL && b->ob_start == b->ob_bytes
                && size + n < b->ob_alloc) {
            memcpy(b->ob_bytes + size, data, (size_t)n);
            Py_SET_SIZE(b, size + n);
            b->ob_bytes[size + n] = '\\0';
            return 0;
        }
        if (PyByteArray_Resize(o, size + n) < 0)
            return -1;
        memcpy(PyByteArray_AS_STRING(o) + size, data, (size_t)n);
        return 0;
    }
    """
    int _buffer_clear "greenserve_buffer_clear" (bytearray buf, Py_ssize_t keep) except -1
    int _buffer_append "greenserve_buffer_append" (bytearray buf, const char *data, Py_ssize_t n) except -1

# An emptied parser buffer keeps an allocation up to this size (an idle connection's memory).
cdef Py_ssize_t _KEEP_ALLOCATION = 1024
# 1 for each byte a head line may hold, else 0; 1 for each byte of HOST_CHARS, else 0.
cdef bytes _HEAD_BYTE_OK = bytes([1 if b in HEAD_CHARS and b not in b"\r\n" else 0 for b in range(256)])
cdef bytes _HOST_BYTE_OK = bytes([1 if b in HOST_CHARS else 0 for b in range(256)])
# The field-name cache and the Host kind are head's (one source of truth), read once here.
cdef dict _NAME_CACHE = head._NAME_CACHE
cdef int _HOST_KIND = head._SPECIAL_NAMES["host"]
cdef str _HTTP_11 = "HTTP/1.1"
cdef str _HTTP_10 = "HTTP/1.0"


cdef Py_ssize_t _check_head_bytes(const unsigned char *p, Py_ssize_t n) except -1:
    """_validated_text's checks in one pass over the first n bytes at p; the number of CRLFs
    (the head's field lines)."""
    cdef const unsigned char *table = _HEAD_BYTE_OK
    cdef Py_ssize_t i = 0, crlfs = 0
    cdef unsigned char c
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


cdef inline Py_ssize_t _index(const unsigned char *p, Py_ssize_t start, Py_ssize_t end, int byte):
    """The first position of byte in p[start:end], or -1."""
    cdef const void *found = memchr(p + start, byte, end - start)
    if found == NULL:
        return -1
    return <const unsigned char *>found - p


cdef str _common_method(const unsigned char *p, Py_ssize_t length):
    """The common method the ``length`` bytes at ``p`` spell, else None.

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


cdef Request _common_request_line(const unsigned char *p, Py_ssize_t eol, str text):
    """The usual request line, read over the head's bytes.

    ``GET /path?query HTTP/1.1`` with one of the common methods, an origin-form target and
    HTTP/1.1 or 1.0: the Request, made with the method and version as shared constants and no
    list, partition or __init__ call. Anything else (another method or form, a stray space or
    tab, a fragment) returns None, and _parse_request_line, the one statement of the rules,
    decides it: this function only accepts lines that function accepts, with the same result.
    """
    cdef Py_ssize_t sp, version_at, start, end, question
    cdef int minor
    cdef str method, version, target
    cdef Request request
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


cdef bint _host_bytes_ok(const unsigned char *p, Py_ssize_t start, Py_ssize_t end):
    """Every byte of the Host value in HOST_CHARS: _check_host's verdict, without hashing the
    value for its cache (_check_host runs when this says no, to raise its error)."""
    cdef const unsigned char *table = _HOST_BYTE_OK
    cdef Py_ssize_t i = start
    while i < end:
        if not table[p[i]]:
            return False
        i += 1
    return True


@cython.final
cdef class HeadScanner:
    """Finds, checks and cuts request heads in a parser's buffer (stateless: one serves all)."""

    cpdef Py_ssize_t find_end(self, bytearray buf, Py_ssize_t start):
        """buf.find(b"\\r\\n\\r\\n", start) as a loop over a pointer (bytearray.find costs more
        to call than to run on a request head)."""
        cdef const unsigned char *p = buf
        cdef Py_ssize_t n = len(buf), i = start
        cdef unsigned char c
        # Look at the last byte of the 4-byte window: most bytes are neither CR nor LF, and then
        # no window that holds that byte can match, so the search moves on by 4.
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

    cpdef Request scan(self, bytearray buf, Py_ssize_t end, Limits limits, HeadFacts facts):
        """Read the head ``buf[:end]``: the Request (headers set), its special fields in ``facts``.

        In place: the head leaves the buffer only once it is read (``consume``), and nothing
        changes the buffer before then, so the pointer stays valid."""
        cdef const unsigned char *p = buf
        cdef Py_ssize_t count, size, eol, pos, colon, start, stop
        cdef Py_ssize_t max_header_size = limits.max_header_size
        cdef str text, lname, value
        cdef int kind
        cdef tuple entry
        cdef list headers
        cdef Request request = None
        count = _check_head_bytes(p, end)  # the CRLFs: one per field line
        text = PyUnicode_DecodeLatin1(<const char *>p, end, NULL)
        size = end
        # Lines are cut at CRLFs by index (no list of lines, no partition or strip per field):
        # per field only its name, its value and their tuple are made.
        eol = _index(p, 0, size, 13)
        if eol < 0:
            eol = size
        if eol <= limits.max_request_line:
            request = _common_request_line(p, eol, text)
        if request is None:
            request = _parse_request_line(text[:eol], limits)
        if count > limits.max_header_count:
            raise errors.HeadersTooLarge("%d header fields, the limit is %d" % (count, limits.max_header_count))
        headers = []
        pos = eol + 2
        while pos < size:
            # The bytes were checked: the line ends at its first CR, or at the head's end.
            eol = _index(p, pos, size, 13)
            if eol < 0:
                eol = size
            if eol - pos > max_header_size:
                raise errors.HeadersTooLarge(
                    "a header field is %d bytes, the limit is %d" % (eol - pos, max_header_size)
                )
            colon = _index(p, pos, eol, 58)  # ":"
            entry = _NAME_CACHE.get(text[pos:colon]) if colon >= 0 else None
            if entry is None:
                entry = _field_name(text[pos:eol], colon - pos if colon >= 0 else -1)
            # OWS around the value is not part of it (RFC 9112 §5.1); the head check left only
            # SP and HTAB as whitespace.
            start = colon + 1
            while start < eol and (p[start] == 32 or p[start] == 9):
                start += 1
            stop = eol
            while stop > start and (p[stop - 1] == 32 or p[stop - 1] == 9):
                stop -= 1
            value = text[start:stop]
            pos = eol + 2
            lname, kind = entry
            headers.append((lname, value))
            if kind:
                facts.note(request, kind, value)
                if kind == _HOST_KIND:
                    facts.host_ok = _host_bytes_ok(p, start, stop)
        request.headers = headers
        return request

    cpdef int consume(self, bytearray buf, Py_ssize_t n) except -1:
        """Drop the first n bytes of the buffer (a head just read)."""
        if n == len(buf):
            # The usual case, nothing pipelined behind it: empty the buffer but keep its small
            # allocation for the next request (del would free it and the next read allocate it
            # again; ~500 instructions a request).
            return _buffer_clear(buf, _KEEP_ALLOCATION)
        del buf[:n]
        return 0

    cpdef int append(self, bytearray buf, bytearray source, Py_ssize_t n) except -1:
        """Append the first n bytes of ``source`` with one memcpy (no memoryview, no slice)."""
        return _buffer_append(buf, PyByteArray_AS_STRING(source), n)

    cpdef object chunk_size(self, bytearray buf):
        """The size of a chunk whose size line is plain hex digits and CRLF, consumed; else -1.

        The common line in one loop over a pointer; anything else (extensions, errors, an
        incomplete line) is left to the general reading of the line (``ChunkedReader``)."""
        cdef const unsigned char *p = buf
        cdef Py_ssize_t n = len(buf), i = 0
        cdef long long size = 0
        cdef unsigned char c
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
            return size
        return -1


@cython.final
cdef class Clock:
    cpdef long long now_second(self):
        """time(2): no float, no call through Python (~350 instructions a response). 64 bits
        everywhere: no 2038 on 32-bit Linux."""
        return c_time(NULL)


@cython.final
cdef class Joiner:
    cpdef bytes join(self, list pieces):
        """``b"".join(pieces)`` for a list of ``bytes``, with one memcpy per piece. ``bytes.join``
        takes each piece through the buffer protocol (a Py_buffer filled and released per piece:
        ~500 instructions for a response head of six lines); anything but bytes goes to it."""
        cdef Py_ssize_t n = len(pieces)
        cdef Py_ssize_t total = 0
        cdef Py_ssize_t i, size
        cdef object piece
        cdef bytes result
        cdef char* out
        for i in range(n):
            piece = pieces[i]
            if type(piece) is not bytes:
                return b"".join(pieces)
            total += PyBytes_GET_SIZE(piece)
        result = PyBytes_FromStringAndSize(NULL, total)
        out = PyBytes_AS_STRING(result)
        for i in range(n):
            piece = pieces[i]
            size = PyBytes_GET_SIZE(piece)
            memcpy(out, PyBytes_AS_STRING(piece), size)
            out += size
        return result

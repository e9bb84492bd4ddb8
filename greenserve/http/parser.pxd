# Cython declarations for parser.py (pure-Python mode: parser.py stays plain, runnable Python).
# Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# Lengths and offsets are C integers; Content-Length and chunk sizes stay Python ints (up to 19
# decimal / 16 hex digits, more than a C long holds).
cimport cython
from libc.string cimport memchr, memcpy, memcmp
from cpython.unicode cimport PyUnicode_DecodeLatin1
from cpython.bytearray cimport PyByteArray_Resize, PyByteArray_AS_STRING

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

cdef class _Sentinel:
    cdef readonly object name

cdef class Limits:
    cdef public Py_ssize_t max_request_line
    cdef public Py_ssize_t max_header_count
    cdef public Py_ssize_t max_header_size
    cdef public object max_body
    cdef public Py_ssize_t max_head

cdef class Request:
    cdef public str method
    cdef public str target
    cdef public str path
    cdef public str query
    cdef public str version
    cdef public int minor
    cdef public list headers
    cdef public object host
    cdef public object scheme
    cdef public object content_length
    cdef public bint chunked
    cdef public bint keep_alive
    cdef public bint expect_continue
    cdef public object upgrade
    cdef public bint forwarded

cdef int _CONTENT_LENGTH, _TRANSFER_ENCODING, _HOST, _CONNECTION, _EXPECT, _UPGRADE, _FORWARDED
cdef dict _SPECIAL_NAMES, _NAME_CACHE
cdef set _HOST_CACHE
cdef Py_ssize_t _NAME_CACHE_MAX, _HOST_CACHE_MAX

cdef bint _is_token(str text) except -1
cdef tuple _field_name(str line, Py_ssize_t colon)
cdef _check_host(str value)
cdef bint _COMPILED
cdef bytes _HEAD_BYTE_OK

@cython.locals(table="const unsigned char *", p="const unsigned char *", n=Py_ssize_t, i=Py_ssize_t,
               c=cython.uchar, crlfs=Py_ssize_t)
cdef Py_ssize_t _check_head_bytes(bytearray block) except -1

@cython.locals(table="const unsigned char *", i=Py_ssize_t, c=cython.uchar, crlfs=Py_ssize_t)
cdef Py_ssize_t _check_head_bytes_at(const unsigned char *p, Py_ssize_t n) except -1

@cython.locals(p="const unsigned char *", n=Py_ssize_t, i=Py_ssize_t, c=cython.uchar)
cdef Py_ssize_t _find_head_end(bytearray buf, Py_ssize_t start)

@cython.locals(found="const void *")
cdef Py_ssize_t _index(const unsigned char *p, Py_ssize_t start, Py_ssize_t end, int byte)

cdef str _validated_text(bytearray block)
cdef list _validated_lines(bytearray block)

@cython.locals(size=Py_ssize_t, low=Py_ssize_t, lf=Py_ssize_t, length=Py_ssize_t, partial=Py_ssize_t)
cdef tuple _check_partial_lines(bytearray buf, Py_ssize_t line_start, Py_ssize_t searched,
                                Py_ssize_t lines, Limits limits, int request_line)

cdef int _parse_version(str version) except -1
cdef Request _parse_request_line(str line, Limits limits)

cdef str _common_method(const unsigned char *p, Py_ssize_t length)
cdef str _HTTP_11, _HTTP_10
cdef Py_ssize_t _KEEP_ALLOCATION
cdef bytes _HOST_BYTE_OK

@cython.locals(sp=Py_ssize_t, method=str, version_at=Py_ssize_t, version=str, minor=int,
               start=Py_ssize_t, end=Py_ssize_t, target=str, question=Py_ssize_t, request=Request)
cdef Request _common_request_line(const unsigned char *p, Py_ssize_t eol, str text)

@cython.locals(table="const unsigned char *", i=Py_ssize_t)
cdef bint _host_bytes_ok(const unsigned char *p, Py_ssize_t start, Py_ssize_t end)
cdef bint _transfer_coding_is_chunked(list values) except -1

@cython.locals(data=bytes)
cdef bytes _take(bytearray buf, Py_ssize_t n)

cdef class ContentLengthReader:
    cdef public object remaining

    @cython.locals(n=Py_ssize_t)
    cpdef object read(self, bytearray buf, Py_ssize_t max_data)

cdef int _SIZE, _DATA, _DATA_END, _TRAILER, _DONE

cdef class ChunkedReader:
    cdef public int state
    cdef public object remaining
    cdef public object total
    cdef public Limits limits
    cdef public Py_ssize_t line_start
    cdef public Py_ssize_t searched
    cdef public Py_ssize_t lines

    @cython.locals(state=int, n=Py_ssize_t)
    cpdef object read(self, bytearray buf, Py_ssize_t max_data)

    @cython.locals(end=Py_ssize_t, semicolon=Py_ssize_t, line=bytes,  # n: a chunk size, 16 hex digits
                   p="const unsigned char *", i=Py_ssize_t, c=cython.uchar)
    cdef bint _read_size_line(self, bytearray buf) except -1

    cdef bint _start_chunk(self, n) except -1

    @cython.locals(end=Py_ssize_t, size=Py_ssize_t, max_size=Py_ssize_t, limits=Limits)
    cdef bint _read_trailers(self, bytearray buf) except -1

cdef int _HEAD, _BODY, _END, _PAUSED, _ERROR

cdef class RequestParser:
    cdef public Limits limits
    cdef bytearray _buf
    cdef int _state
    cdef object _body
    cdef Py_ssize_t _searched
    cdef Py_ssize_t _scanned
    cdef Py_ssize_t _lines
    cdef object _error
    cdef bint _keep_alive

    cpdef feed(self, data)

    cpdef feed_from(self, bytearray source, Py_ssize_t n)

    @cython.locals(state=int)
    cpdef object next_event(self, Py_ssize_t max_data=*)

    cdef _fail(self, exc)
    cdef _end_message(self)

    @cython.locals(buf=bytearray, end=Py_ssize_t, limits=Limits, lines=list, request=Request,
                   count=Py_ssize_t, max_header_size=Py_ssize_t, headers=list, name_cache=dict,
                   hosts=int, close=bint, keep_alive=bint, upgrade_option=bint, text=str, size=Py_ssize_t,
                   eol=Py_ssize_t, pos=Py_ssize_t, colon=Py_ssize_t, start=Py_ssize_t,
                   p="const unsigned char *", c=cython.uchar, head=bytearray,
                   lname=str, kind=int, value=str, entry=tuple, line=str, name=str, sep=str,
                   head_end=Py_ssize_t, host_ok=bint)
    cdef object _next_head(self)

    @cython.locals(buf=bytearray, size=Py_ssize_t, limits=Limits)
    cdef _check_partial_head(self)

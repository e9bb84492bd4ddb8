# Cython declarations for parser.py (pure-Python mode: parser.py stays plain, runnable Python).
# Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# Lengths and offsets are C integers; Content-Length and chunk sizes stay Python ints (up to 19
# decimal / 16 hex digits, more than a C long holds). head's types are cimported under other
# names so that parser.py's own imports of them stay module attributes (parser.Request, ...).
cimport cython

from greenserve.http.head cimport Limits as _Limits, Request as _Request, HeadFacts as _HeadFacts
from greenserve.http.head cimport frame_request, _field_name, _validated_lines
from greenserve.http._chttp cimport HeadScanner as _CHeadScanner

cdef _CHeadScanner _SCANNER

cdef class _Sentinel:
    cdef readonly object name

@cython.locals(size=Py_ssize_t, low=Py_ssize_t, lf=Py_ssize_t, length=Py_ssize_t, partial=Py_ssize_t)
cdef tuple _check_partial_lines(bytearray buf, Py_ssize_t line_start, Py_ssize_t searched,
                                Py_ssize_t lines, _Limits limits, int request_line)

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
    cdef public _Limits limits
    cdef public Py_ssize_t line_start
    cdef public Py_ssize_t searched
    cdef public Py_ssize_t lines

    @cython.locals(state=int, n=Py_ssize_t)
    cpdef object read(self, bytearray buf, Py_ssize_t max_data)

    @cython.locals(end=Py_ssize_t, semicolon=Py_ssize_t, line=bytes)  # size: 16 hex digits
    cdef bint _read_size_line(self, bytearray buf) except -1

    cdef bint _start_chunk(self, n) except -1

    @cython.locals(end=Py_ssize_t, size=Py_ssize_t, max_size=Py_ssize_t, limits=_Limits)
    cdef bint _read_trailers(self, bytearray buf) except -1

cdef int _HEAD, _BODY, _END, _PAUSED, _ERROR

cdef class RequestParser:
    cdef public _Limits limits
    cdef bytearray _buf
    cdef int _state
    cdef object _body
    cdef Py_ssize_t _searched
    cdef Py_ssize_t _scanned
    cdef Py_ssize_t _lines
    cdef object _error
    cdef bint _keep_alive
    cdef _HeadFacts _facts

    cpdef feed(self, data)

    cpdef feed_from(self, bytearray source, Py_ssize_t n)

    cpdef bytes take_buffered(self)

    @cython.locals(state=int)
    cpdef object next_event(self, Py_ssize_t max_data=*)

    cdef _fail(self, exc)
    cdef _end_message(self)

    @cython.locals(buf=bytearray, end=Py_ssize_t, limits=_Limits, request=_Request, facts=_HeadFacts)
    cdef object _next_head(self)

    @cython.locals(buf=bytearray, size=Py_ssize_t, limits=_Limits)
    cdef _check_partial_head(self)

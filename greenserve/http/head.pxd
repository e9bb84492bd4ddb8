# Cython declarations for head.py (pure-Python mode; see greenserve/_accel.py). Functions the
# compiled scanner (_chttp.pyx) and the parser call are cdef/cpdef, so those calls are C calls.
# _NAME_CACHE and _SPECIAL_NAMES stay module attributes: _chttp reads them at import.
cimport cython

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
cdef set _HOST_CACHE
cdef Py_ssize_t _NAME_CACHE_MAX, _HOST_CACHE_MAX

cdef bint _is_token(str text) except -1
cpdef tuple _field_name(str line, Py_ssize_t colon)
cdef _check_host(str value)
cpdef str _validated_text(bytearray block)
cpdef list _validated_lines(bytearray block)
cdef int _parse_version(str version) except -1
cpdef Request _parse_request_line(str line, Limits limits)
cdef bint _transfer_coding_is_chunked(list values) except -1

cdef class HeadFacts:
    cdef public object content_length
    cdef public list transfer_encoding
    cdef public Py_ssize_t hosts
    cdef public object host
    cdef public bint host_ok
    cdef public bint close
    cdef public bint keep_alive
    cdef public bint upgrade_option

    cpdef reset(self)
    cpdef note(self, Request request, int kind, str value)

@cython.locals(minor=int, hosts=Py_ssize_t, length=object)
cpdef frame_request(Request request, HeadFacts facts, Limits limits)

# Cython declarations for framing.py (pure-Python mode; see parser.pxd and greenserve/_accel.py).
# The caches stay module attributes (tests look into them); the Date cache is C state.
cimport cython
from greenserve.http._chttp cimport Clock as _CClock, Joiner as _CJoiner

cdef object formatdate
cdef _CClock _CLOCK
cdef _CJoiner _JOINER

cdef long long _MAX_LENGTH

cdef class NoBodyWriter:
    cdef public long long content_length

    cpdef Py_ssize_t write(self, list out, object data) except -1
    cpdef Py_ssize_t write_whole(self, list out, object pieces, Py_ssize_t length) except -2
    cpdef long long begin_file(self, list out, long long size) except -1
    cpdef end_file(self, list out)
    cpdef end(self, list out)
    cpdef bint full(self) except -1
    cpdef bint delimits(self) except -1

cdef class ContentLengthWriter(NoBodyWriter):
    cdef public long long remaining

    @cython.locals(n=Py_ssize_t, remaining="long long")
    cpdef Py_ssize_t write(self, list out, object data) except -1

cdef class ChunkedWriter(NoBodyWriter):
    pass

cdef class CloseDelimitedWriter(NoBodyWriter):
    pass

cdef class StreamWriter(NoBodyWriter):
    cdef public bint ended

cdef NoBodyWriter NO_BODY, CHUNKED, CLOSE_DELIMITED

cdef long long _date_second  # 64 bits everywhere: no 2038 on 32-bit Linux
cdef bytes _date_line

cpdef bytes date_line()

cdef tuple _status(object status)

cdef int _ORDINARY, _CONTENT_LENGTH, _CONNECTION, _DATE, _SERVER, _HOP_BY_HOP, _UPGRADE
cdef dict _SPECIAL, _NAME_CACHE
cdef frozenset _UNCACHED

cdef int _name_kind(object name) except -1
cdef tuple _field(object item)

cdef bytes _CHUNKED_LINE, _CLOSE_LINE, _KEEP_ALIVE_LINE, _UPGRADE_LINE

@cython.locals(status_cache=dict, entry=tuple, code=int, status_line=bytes, parts=list, field_cache=dict,
               has_date=bint, has_server=bint, upgrade=bint, line=bytes, kind=int, writer=NoBodyWriter)
cpdef tuple build_head(object status, object headers, int minor, bint is_head, bint keep_alive,
                       object body_length, bytes server_line)

cdef _not_a_list(object headers)
cdef _hop_by_hop(object name)

cdef dict _INTERIM_LINES

@cython.locals(fields=list, kind=int)
cpdef list informational_fields(object headers)

@cython.locals(status_line=bytes, parts=list)
cpdef bytes informational_head(int code, list fields)

cdef dict _FIELD2_CACHE
cdef long long _date_field_second
cdef tuple _date_field
cdef list _STATUS_FIELDS
cdef bytes _server_field_line
cdef tuple _server_field

@cython.locals(entry=tuple, code=int, fields=list, cache=dict, has_date=bint, has_server=bint, field=tuple,
               kind=int, writer=ContentLengthWriter, second="long long")
cpdef tuple build_fields(object status, object headers, bint is_head, object body_length, bytes server_line)
@cython.locals(line=bytes, kind=int, colon=Py_ssize_t, entry=tuple)
cdef tuple _field2(object item)

@cython.locals(writer=ContentLengthWriter)
cdef NoBodyWriter _body_writer(list parts, int code, bint is_head, int minor, object content_length,
                               object body_length)

cpdef bytes chunk_size_line(Py_ssize_t n)

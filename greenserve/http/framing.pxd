# Cython declarations for framing.py (pure-Python mode; see parser.pxd and greenserve/_accel.py).
# The caches stay module attributes (tests look into them); the Date cache is C state.
cimport cython
from greenserve.http._chttp cimport Clock as _CClock

cdef object formatdate
cdef _CClock _CLOCK

# NO_BODY, LENGTH, CHUNKED, CLOSE_DELIMITED stay module attributes; wsgi.pxd types its copies.

cdef long long _date_second  # 64 bits everywhere: no 2038 on 32-bit Linux
cdef bytes _date_line

cpdef bytes date_line()

cdef tuple _status(object status)

cdef int _ORDINARY, _CONTENT_LENGTH, _CONNECTION, _DATE, _SERVER, _HOP_BY_HOP, _UPGRADE
cdef dict _SPECIAL, _NAME_CACHE

cdef int _name_kind(object name) except -1
cdef tuple _field(object item)

cdef bytes _CHUNKED_LINE, _CLOSE_LINE, _KEEP_ALIVE_LINE, _UPGRADE_LINE

@cython.locals(status_cache=dict, entry=tuple, code=int, status_line=bytes, parts=list, field_cache=dict,
               has_date=bint, has_server=bint, upgrade=bint, line=bytes, kind=int,
               framing=int)
cpdef tuple build_head(object status, object headers, int minor, bint is_head, bint keep_alive,
                       object body_length, bytes server_line)

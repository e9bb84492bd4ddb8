# Cython declarations for validation.py (pure-Python mode: validation.py stays plain, runnable
# Python). Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# Every request's head goes through request_head: its names and values are typed bytes (a first
# byte read by index, compares by length and memcmp), its helpers C functions, and the connection
# calls it at C level (connection.pxd cimports it). CONNECTION_SPECIFIC stays a module attribute
# (connection.py imports it).
cimport cython

cdef object _NOT_NAME, _NOT_VALUE, _NOT_TOKEN, _NOT_TARGET, _NOT_HOST, _NOT_DIGIT
cdef dict _VALID_FIELDS
cdef Py_ssize_t _VALID_FIELDS_MAX

cdef _check_field(bytes name, bytes value)

cdef _content_length(bytes value, previous)

@cython.locals(cookies=Py_ssize_t, valid=dict, field=tuple, name=bytes, value=bytes, host=bytes)
cdef tuple _regular_fields(list fields)

cdef list _join_cookies(list fields)

cdef bint _allowed(tuple field, outside) except -1

@cython.locals(method_field=tuple, scheme_field=tuple, authority_field=tuple, path_field=tuple, count=Py_ssize_t,
               field=tuple, name=bytes, twice=bint, fields=list, host=bytes, method=bytes, scheme=bytes,
               authority=bytes, path=bytes)
cpdef tuple request_head(list headers)

@cython.locals(name=bytes, value=bytes)
cpdef trailers(headers)

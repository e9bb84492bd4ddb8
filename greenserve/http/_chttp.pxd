# The compiled build's byte work for http/ (see _chttp.pyx): the parser and framing cimport
# these classes, so their methods are C calls (final classes: no lookup for a Python override);
# cpdef, so that tests can hold them to _pyhttp's from Python.
cimport cython

from greenserve.http.head cimport HeadFacts, Limits, Request

@cython.final
cdef class HeadScanner:
    cpdef Py_ssize_t find_end(self, bytearray buf, Py_ssize_t start)
    cpdef Request scan(self, bytearray buf, Py_ssize_t end, Limits limits, HeadFacts facts)
    cpdef int consume(self, bytearray buf, Py_ssize_t n) except -1
    cpdef int append(self, bytearray buf, bytearray source, Py_ssize_t n) except -1
    cpdef object chunk_size(self, bytearray buf)

@cython.final
cdef class Clock:
    cpdef long long now_second(self)

@cython.final
cdef class Joiner:
    cpdef bytes join(self, list pieces)

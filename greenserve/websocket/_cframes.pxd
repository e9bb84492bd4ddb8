# The compiled build's masking (see _cframes.pyx): frames cimports the class, so mask is a C
# call (a final class: no lookup for a Python override); cpdef, so that tests can hold it to
# frames._PyMasker from Python.
cimport cython

@cython.final
cdef class Masker:
    cpdef bytes mask(self, object payload, object key)

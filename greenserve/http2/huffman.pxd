# Cython declarations for huffman.py (pure-Python mode: huffman.py stays plain, runnable Python).
# Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# The tables stay bytes/tuple objects (indexing a typed bytes object with a C integer is a
# C-level read); the bit accumulator is a C integer.
cimport cython

cdef tuple _CODES
cdef bytes _LENGTHS
cdef bytes _NEXT, _SYMBOL, _FLAGS, _ACCEPTING
cdef int _EMIT, _FAIL

@cython.locals(bits=Py_ssize_t, byte=cython.uchar)
cpdef Py_ssize_t encoded_length(bytes data) except -1

@cython.locals(out=bytearray, acc=cython.ulonglong, bits=int, length=int, byte=cython.uchar)
cpdef bytes encode(bytes data)

@cython.locals(out=bytearray, state=int, index=int, flags=int, byte=cython.uchar)
cpdef bytes decode(bytes data)

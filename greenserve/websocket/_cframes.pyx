# cython: language_level=3
"""The compiled build's byte work for websocket/: masking (RFC 6455 §5.3), in C.

Never imported by the pure-Python build, which uses ``frames._PyMasker`` (the same XOR, as one
operation on two big integers); tests/websocket/test_frames_builds_agree.py holds the two to
each other. Every client frame's payload goes through here once: eight bytes at a time (the key
repeated twice: a word is a whole number of keys, so the key lines up again at each word), the
last few one by one, into a new ``bytes`` object.
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint64_t
from libc.string cimport memcpy


@cython.final
cdef class Masker:
    """``mask(payload, key)``: the payload XOR the 4-byte key repeated (stateless)."""

    cpdef bytes mask(self, object payload, object key):
        cdef Py_buffer view
        cdef unsigned char key4[4]
        cdef uint64_t key8, word
        cdef const unsigned char *source
        cdef unsigned char *target
        cdef Py_ssize_t n, i = 0
        cdef bytes result
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
        n = view.len
        if n == 4:
            memcpy(key4, view.buf, 4)
        PyBuffer_Release(&view)
        if n != 4:
            raise ValueError("a masking key is 4 bytes, not %d" % n)
        memcpy(&key8, key4, 4)
        memcpy((<unsigned char *>&key8) + 4, key4, 4)
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            n = view.len
            result = PyBytes_FromStringAndSize(NULL, n)
            source = <const unsigned char *>view.buf
            target = <unsigned char *>PyBytes_AS_STRING(result)
            # memcpy to and from a word: unaligned access the compiler turns into plain loads
            # and stores (and vectorizes), with no undefined behaviour.
            while i + 8 <= n:
                memcpy(&word, source + i, 8)
                word ^= key8
                memcpy(target + i, &word, 8)
                i += 8
            while i < n:
                target[i] = source[i] ^ key4[i & 3]
                i += 1
        finally:
            PyBuffer_Release(&view)
        return result

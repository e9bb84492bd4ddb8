# cython: language_level=3
"""The compiled build's byte work for websocket/: masking (RFC 6455 §5.3), in C.

Never imported by the pure-Python build, which uses ``frames._PyMasker`` (the same XOR, as one
operation on two big integers); tests/websocket/test_frames_builds_agree.py holds the two to
each other. Every client frame's payload goes through here once: eight bytes at a time (the key
repeated twice: a word is a whole number of keys, so the key lines up again at each word), the
last few one by one, into a new ``bytes`` object. ``unmask`` reads a whole frame's key and
payload in the parser's buffer in place: no memoryview and no key object per frame (they were
two thirds of the compiled parser's time per 16-byte message).
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.stdint cimport uint64_t
from libc.string cimport memcpy


cdef bytes _xor(const unsigned char *source, Py_ssize_t n, const unsigned char *key4):
    """n bytes at source XOR the 4-byte key repeated, as a new bytes object."""
    cdef bytes result = PyBytes_FromStringAndSize(NULL, n)
    cdef unsigned char *target = <unsigned char *>PyBytes_AS_STRING(result)
    cdef uint64_t key8, word
    cdef Py_ssize_t i = 0
    memcpy(&key8, key4, 4)
    memcpy((<unsigned char *>&key8) + 4, key4, 4)
    # memcpy to and from a word: unaligned access the compiler turns into plain loads and
    # stores (and vectorizes), with no undefined behaviour.
    while i + 8 <= n:
        memcpy(&word, source + i, 8)
        word ^= key8
        memcpy(target + i, &word, 8)
        i += 8
    while i < n:
        target[i] = source[i] ^ key4[i & 3]
        i += 1
    return result


@cython.final
cdef class Masker:
    """``mask(payload, key)``: the payload XOR the 4-byte key repeated (stateless)."""

    cpdef bytes unmask(self, bytearray buf, Py_ssize_t start, Py_ssize_t end):
        """The payload ``buf[start:end]`` unmasked with the key in the 4 bytes before it."""
        cdef const unsigned char *p = <const unsigned char *>PyByteArray_AS_STRING(buf)
        if start < 4 or end < start or end > PyByteArray_GET_SIZE(buf):
            raise IndexError("no masked payload at buf[%d:%d]" % (start, end))
        return _xor(p + start, end - start, p + start - 4)

    cpdef bytes mask(self, object payload, object key):
        cdef Py_buffer view
        cdef unsigned char key4[4]
        cdef Py_ssize_t n
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
        n = view.len
        if n == 4:
            memcpy(key4, view.buf, 4)
        PyBuffer_Release(&view)
        if n != 4:
            raise ValueError("a masking key is 4 bytes, not %d" % n)
        PyObject_GetBuffer(payload, &view, PyBUF_SIMPLE)
        try:
            return _xor(<const unsigned char *>view.buf, view.len, key4)
        finally:
            PyBuffer_Release(&view)

# Cython declarations for frames.py (pure-Python mode: frames.py stays plain, runnable Python).
# Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# Lengths, offsets and ids are C integers; the frame constants stay module attributes (the
# connection and the tests import them), their typed twins are private.
cimport cython

cdef Py_ssize_t _PREFACE_LENGTH, _HEADER_LENGTH, _SMALL
cdef object _HEADER

cdef class FrameReader:
    cdef public Py_ssize_t max_frame_size
    cdef bytes _data
    cdef Py_ssize_t _pos
    cdef list _pending
    cdef Py_ssize_t _pending_size
    cdef bytearray _small
    cdef bint _preface

    cpdef feed(self, data)

    cpdef Py_ssize_t buffered(self)

    cdef bint _available(self, Py_ssize_t n) except -1

    @cython.locals(data=bytes, pos=Py_ssize_t, length=Py_ssize_t, high=cython.ulong, stream_id=cython.ulong)
    cpdef object next_frame(self)

    @cython.locals(have=Py_ssize_t, start=Py_ssize_t, got=bytes)
    cdef bint _read_preface(self) except -1

@cython.locals(pad=int)
cdef bytes _unpadded(int flags, bytes payload, str name)

cpdef bytes data_payload(int flags, bytes payload)

cpdef tuple headers_payload(int flags, bytes payload)

cpdef long priority_payload(bytes payload) except -1

@cython.locals(high=cython.ulong)
cpdef long uint31(bytes payload) except -1

@cython.locals(high=cython.ulong)
cpdef unsigned long uint32(bytes payload) except? 0xFFFFFFFF

@cython.locals(settings=list, pos=Py_ssize_t)
cpdef list settings_payload(bytes payload)

cpdef tuple goaway_payload(bytes payload)

cpdef bytes frame_header(Py_ssize_t length, int frame_type, int flags, unsigned long stream_id)

cpdef bytes frame(int frame_type, int flags, unsigned long stream_id, bytes payload)

@cython.locals(length=Py_ssize_t, pos=Py_ssize_t, size=Py_ssize_t, last=bint)
cpdef headers_frames(unsigned long stream_id, bytes block, bint end_stream, Py_ssize_t max_frame_size, list out)

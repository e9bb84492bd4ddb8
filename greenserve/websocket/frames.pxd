# Cython declarations for frames.py (pure-Python mode: frames.py stays plain, runnable Python).
# Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# The public opcodes stay Python ints (module attributes); lengths are C integers, a 64-bit
# length computed in a long long (its top bit is refused first, so it fits).
cimport cython

from greenserve.websocket._cframes cimport Masker as _CMasker

cdef _CMasker _MASKER
cdef int _FIN, _RSV1, _RSV2_RSV3, _OPCODE, _MASKED, _LENGTH
cdef Py_ssize_t _MAX_FRAME_PAYLOAD
cdef int _HEADER, _PAYLOAD, _CLOSED

@cython.locals(i=int)
cdef long long _extended_length(bytearray buf, long long length) except -1

cdef class Message:
    cdef public object data

cdef class Ping:
    cdef public object payload

cdef class Pong:
    cdef public object payload

cdef class Close:
    cdef public object code
    cdef public object reason

cdef class FrameParser:
    cdef public Py_ssize_t max_message_size
    cdef public object inflater
    cdef bytearray _buf
    cdef int _state
    cdef bint _eof
    cdef object _error
    cdef int _opcode
    cdef bint _fin
    cdef bytes _key
    cdef Py_ssize_t _remaining
    cdef int _message_opcode
    cdef bint _compressed
    cdef Py_ssize_t _message_size
    cdef list _parts
    cdef bint _decoding
    cdef object _decoder

    cpdef receive_data(self, data)

    cpdef object next_event(self)

    @cython.locals(state=int)
    cdef object _next_event(self)

    @cython.locals(buf=bytearray, size=Py_ssize_t, first=int, second=int, opcode=int, fin=bint,
                   length=cython.longlong, header=Py_ssize_t, message_size=Py_ssize_t,
                   limit=Py_ssize_t, end=Py_ssize_t, payload=bytes)
    cdef object _read_header(self)

    @cython.locals(buf=bytearray, size=Py_ssize_t, remaining=Py_ssize_t, key=bytes, payload=bytes)
    cdef object _read_payload(self)

    cdef object _need_data(self)

    cdef int _check_control_frame(self, int opcode, int first, int second) except -1

    cdef int _check_data_frame(self, int opcode, int first) except -1

    @cython.locals(message_opcode=int, text=str)
    cdef object _frame(self, int opcode, bint fin, bytes payload)

    cdef int _decode(self, data, bint final) except -1

    cdef int _end_message(self) except -1

    @cython.locals(n=Py_ssize_t)
    cdef object _close(self, bytes payload)

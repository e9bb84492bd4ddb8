# Cython declarations for hpack.py (pure-Python mode: hpack.py stays plain, runnable Python).
# Compiled by setup.py when Cython and a C compiler are available; see greenserve/_accel.py.
# Positions, sizes and integers are C integers (an HPACK integer is refused past 35 bits, so
# it fits a long long); the tables are Python objects. STATIC_TABLE stays a module attribute,
# _STATIC is the typed copy.
cimport cython

from greenserve.http2.huffman cimport decode as huffman_decode, encode as huffman_encode
from greenserve.http2.huffman cimport encoded_length as huffman_length

cdef tuple _STATIC
cdef Py_ssize_t _STATIC_LENGTH, _FIRST_DYNAMIC, _OVERHEAD, _MAX_INTEGER_SHIFT
cdef dict _STATIC_INDEX, _STATIC_NAME_INDEX
cdef frozenset _NOT_INDEXED

@cython.locals(limit=cython.longlong)
cpdef encode_integer(long long value, int prefix_bits, int first, bytearray out)

@cython.locals(length=Py_ssize_t, coded=Py_ssize_t)
cdef _encode_string(bytes data, bytearray out)

cdef class Decoder:
    cdef public Py_ssize_t max_allowed_table_size
    cdef public Py_ssize_t max_table_size
    cdef public Py_ssize_t table_size
    cdef public Py_ssize_t max_header_list_size
    cdef public object never_indexed
    cdef list _entries
    cdef Py_ssize_t _first
    cdef bint _size_update_required
    cdef bytes _block
    cdef Py_ssize_t _pos
    cdef Py_ssize_t _end

    cpdef set_max_allowed_table_size(self, Py_ssize_t size)

    cpdef list entries(self)

    @cython.locals(headers=list, size=Py_ssize_t, limit=Py_ssize_t, at_start=bint, byte=int, entry=tuple)
    cpdef list decode(self, bytes block)

    @cython.locals(block=bytes, pos=Py_ssize_t, mask=cython.longlong, value=cython.longlong, shift=int, byte=int)
    cdef long long _integer(self, int prefix_bits) except -1

    @cython.locals(huffman=int, length=cython.longlong, start=Py_ssize_t)
    cdef bytes _string(self)

    @cython.locals(index=cython.longlong, name=bytes)
    cdef tuple _literal(self, int prefix_bits)

    @cython.locals(entries=list, back=cython.longlong)
    cdef tuple _entry(self, long long index)

    @cython.locals(size=Py_ssize_t)
    cdef int _insert(self, tuple entry) except -1

    cdef int _resize(self, long long size) except -1

    @cython.locals(entries=list, first=Py_ssize_t, entry=tuple)
    cdef int _evict(self, Py_ssize_t room) except -1

cdef class Encoder:
    cdef public Py_ssize_t table_size_limit
    cdef public Py_ssize_t max_table_size
    cdef public Py_ssize_t table_size
    cdef list _entries
    cdef Py_ssize_t _first
    cdef Py_ssize_t _base
    cdef dict _full
    cdef dict _names
    cdef bint _update_pending
    cdef Py_ssize_t _update_min
    cdef Py_ssize_t _changes
    cdef tuple _last_headers
    cdef bytes _last_block

    cpdef set_max_table_size(self, Py_ssize_t size)

    @cython.locals(out=bytearray, last=tuple, index=Py_ssize_t, changes=Py_ssize_t, block=bytes)
    cpdef bytes encode(self, headers)

    @cython.locals(key=tuple, index=object, number=object, name_index=Py_ssize_t, size=Py_ssize_t, indexing=bint)
    cdef int _field(self, bytes name, bytes value, bint sensitive, bytearray out) except -1

    cdef Py_ssize_t _index(self, Py_ssize_t number)

    @cython.locals(number=Py_ssize_t)
    cdef int _insert(self, tuple key, Py_ssize_t size) except -1

    @cython.locals(entries=list, first=Py_ssize_t, key=tuple, number=Py_ssize_t)
    cdef int _evict(self, Py_ssize_t room) except -1

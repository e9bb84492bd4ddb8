# The compiled build's system calls (see _csys.pyx): connection and wsgi cimport the class, so
# its methods are C calls.
cdef class SysCalls:
    cdef double monotonic(self)
    cdef bint owns_descriptor(self, object sock) except -1
    cdef Py_ssize_t recv(self, object sock, bytearray buffer) except -2
    cdef Py_ssize_t send(self, object sock, bytes data) except -2
    cdef Py_ssize_t send2(self, object sock, bytes head, bytes body) except -2
    cdef bytes take(self, bytearray buffer, Py_ssize_t n)
    cdef void no_delay(self, object sock)
    cdef dict roomy_copy(self, dict source, Py_ssize_t room)

# Cython declarations for pool.py (pure-Python mode): a connection's greenlet is taken and given
# back once per connection, on the accept path. IDLE stays a Python global (tests change it).
cdef object get_hub, getcurrent, GreenletExit, greenlet

cdef class ConnectionPool:
    cdef public object size
    cdef public Py_ssize_t busy
    cdef public Py_ssize_t keep
    cdef public list _idle
    cdef list _waiting
    cdef public object hub
    cdef public object loop

    cpdef bint full(self)
    cpdef start(self, func, tuple args)
    cpdef occupy(self)
    cpdef vacate(self)
    cdef _release(self)

# Cython declarations for stats.py (pure-Python mode): the observer interface's per-request method,
# which the compiled connection calls in C; the master's events stay Python methods.
cimport cython


cdef dict _METHOD_INDEX
cdef Py_ssize_t _OTHER

cdef class Sink:
    cpdef request(self, int status, method, double duration, Py_ssize_t received, Py_ssize_t sent)
    cpdef http2_request(self)


cdef class WorkerStats(Sink):
    cdef public list requests
    cdef public list durations
    cdef public double duration_sum
    cdef public long long received
    cdef public long long sent
    cdef public long long loop_blocked
    cdef public double loop_lag
    cdef public long long http2_requests

    @cython.locals(klass=int, index=Py_ssize_t, bucket=Py_ssize_t, bound=double)
    cpdef request(self, int status, method, double duration, Py_ssize_t received, Py_ssize_t sent)


cdef class Sinks(Sink):
    cdef public tuple sinks

    cpdef request(self, int status, method, double duration, Py_ssize_t received, Py_ssize_t sent)
    cpdef http2_request(self)

# Cython declarations for stats.py (pure-Python mode): the observer interface's per-request method,
# which the compiled connection calls in C; the master's events stay Python methods.
cimport cython


cdef dict _METHOD_INDEX
cdef Py_ssize_t _OTHER

cdef class Sink:
    cpdef request(self, int status, method, double duration, Py_ssize_t received, Py_ssize_t sent)
    cpdef http2_request(self)
    cpdef static_request(self)
    cpdef queued(self, double seconds, int shed)
    cpdef loop_delay(self, double seconds)


cdef class WorkerStats(Sink):
    cdef public list requests
    cdef public list durations
    cdef public double duration_sum
    cdef public long long received
    cdef public long long sent
    cdef public long long loop_blocked
    cdef public double loop_lag
    cdef public long long http2_requests
    cdef public long long static_requests
    cdef public list shed
    cdef public list queue_times
    cdef public double queue_time_sum
    cdef public list loop_delays
    cdef public double loop_delay_sum

    @cython.locals(klass=int, index=Py_ssize_t, bucket=Py_ssize_t, bound=double)
    cpdef request(self, int status, method, double duration, Py_ssize_t received, Py_ssize_t sent)
    cpdef queued(self, double seconds, int shed)
    cpdef loop_delay(self, double seconds)


@cython.locals(index=Py_ssize_t, bound=double)
cdef Py_ssize_t _bucket(double seconds)


cdef class Sinks(Sink):
    cdef public tuple sinks

    cpdef request(self, int status, method, double duration, Py_ssize_t received, Py_ssize_t sent)
    cpdef http2_request(self)
    cpdef static_request(self)
    cpdef queued(self, double seconds, int shed)
    cpdef loop_delay(self, double seconds)

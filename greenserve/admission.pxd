# Cython declarations for admission.py (pure-Python mode; see greenserve/_accel.py): the check the
# responder makes before each application call is a C call on C doubles (wsgi.pxd cimports it).
cimport cython

from greenserve._csys cimport SysCalls as _CSysCalls
from greenserve.observe.stats cimport Sink

cdef _CSysCalls _SYS
cdef bint _C_CLOCK
cdef object monotonic, wall_clock, sys, _sleep, deque, Waiter
cdef int ADMITTED, SHED_OVERLOAD, SHED_LATE, QUEUED
cdef double TICK, TURN_SHARE, INTERVAL, TARGETS, CALM, QUEUE_SHARE, WORK_FACTOR, WORK_WEIGHT, WARN_EVERY, _NEVER

cdef class Admission:
    cdef public object server
    cdef public Sink stats
    cdef public object loop
    cdef public object clock
    cdef public double target
    cdef public double max_queue_time
    cdef public frozenset health_paths
    cdef public object trusted
    cdef public double began
    cdef public object checker
    cdef public double turn
    cdef public bint over
    cdef public double over_since
    cdef public double last_delay
    cdef public double work
    cdef public double lag
    cdef public object ticker
    cdef public bint ticking
    cdef public double due
    cdef public Py_ssize_t seen
    cdef public double warned_at
    cdef public Py_ssize_t shed_queue
    cdef public Py_ssize_t shed_late
    cdef public double longest
    cdef public bint shedding
    cdef public double last_shed
    cdef public object defer
    cdef public object wait_turn
    cdef public object runq
    cdef public object runner
    cdef public double ran_turn
    cdef public object runq_since
    cdef public double marked

    cdef double _now(self) except? -1.0
    cdef double _target(self)
    cdef Py_ssize_t _waiting(self)
    cdef double _interval(self, double target)
    cdef _begin_shedding(self, double now)
    cdef _learn(self, double took)
    cdef _take_turn(self, double since)
    cdef _arm(self)

    @cython.locals(now=double, began=double, delay=double, queued=double, waited=double, target=double,
                   stamped=bint, decision=int, stats=Sink)
    cpdef object admit(self, dict environ, dict conn_environ)

    @cython.locals(waiting=Py_ssize_t)
    cdef int _decide(self, double now, double delay, double queued, double target) except -1

    @cython.locals(now=double, target=double, count=Py_ssize_t, started=Py_ssize_t, since=double)
    cpdef _run_next(self)

    @cython.locals(waited=double)
    cdef double _proxy_queue(self, str start, dict conn_environ) except? -2.0

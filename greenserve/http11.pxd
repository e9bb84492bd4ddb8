# Cython declarations for http11.py (pure-Python mode; see http/parser.pxd and greenserve/_accel.py).
# The protocol holds the connection, the parser and the responder as typed references: the
# calls of a request's path between them are C calls.
cimport cython

from greenserve.connection cimport Connection, clock
from greenserve.http.head cimport Request
from greenserve.http.parser cimport RequestParser
from greenserve.http.framing cimport build_head, informational_head
from greenserve.wsgi cimport ConnectionIO, Outcome, Responder
from greenserve.observe.stats cimport Sink

cdef object monotonic, errors, RequestTimeout, _timeout_error, HandOver

cdef class Http11Protocol(ConnectionIO):
    cdef readonly Connection connection
    cdef readonly object server
    cdef readonly RequestParser parser
    cdef readonly Responder responder
    cdef Outcome outcome
    cdef double keepalive
    cdef double header_timeout
    cdef double body_timeout
    cdef double request_timeout
    cdef bytearray recv_buffer
    cdef object recv_view

    @cython.locals(connection=Connection, parser=RequestParser, responder=Responder, outcome=Outcome,
                   observed=bint, stats=Sink, access_log=object, started=double, keep=bint)
    cdef _serve(self)

    @cython.locals(connection=Connection, parser=RequestParser, deadline=double, at_boundary=bint,
                   remaining=double, received=Py_ssize_t, timeout=double)
    cdef bint _receive_head(self) except -1

    @cython.locals(parser=RequestParser, connection=Connection, received=Py_ssize_t)
    cpdef bytes read_body(self, Py_ssize_t max_data, bint flush=*)
    cpdef flush(self)
    cpdef flush_soon(self)
    cpdef flush_if_blocked(self)
    cpdef send_file(self, int fileno, object offset, object count)
    cpdef Py_ssize_t queue_error(self, exc, bint access_log=*) except -1
    cpdef informational(self, int status, list headers)
    cpdef tuple response_head(self, object status, object headers, Request request, bint keep_alive,
                              object body_length, bytes server_line)

cpdef expire_request_of(ConnectionIO io, Connection connection, double request_timeout, double now)

@cython.locals(outcome=Outcome, elapsed=double, status=int)
cpdef observe_request(Responder responder, double started, access_log, Sink stats, method)

cpdef Py_ssize_t queue_error_response(ConnectionIO io, Connection connection, environ, exc, bint access_log=*) except -1

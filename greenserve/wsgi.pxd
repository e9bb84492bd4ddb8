# Cython declarations for wsgi.py (pure-Python mode; see http/parser.pxd and greenserve/_accel.py).
# FileWrapper stays an ordinary class: applications construct it and it sets attributes freely.
cimport cython

from greenserve._csys cimport SysCalls as _CSysCalls
from greenserve.admission cimport Admission
from greenserve.http.head cimport Request
from greenserve.http.framing cimport informational_fields, NoBodyWriter
from greenserve.static cimport Static, Answer

cdef _CSysCalls _SYS
cdef object os, RETRY_AFTER, unquote_to_bytes, GreenletExit, errors, ResponseError, CloseDelimitedWriter, get_hub
cdef bytes CONTINUE_100

cdef tuple _NOT_APPLICATION_ERRORS
cdef Py_ssize_t _HEADER_KEY_CACHE_MAX, _FILE_PIECE, _POLL_EVERY
cdef dict _ENVIRON_KEYS

cdef str _environ_key(str lname)

cpdef dict roomy_copy(dict environ)
cpdef dict connection_environ(dict base, address)

cdef class EmptyInput:
    pass

cdef object EMPTY_INPUT

cdef class Input:
    cdef Responder _responder
    cdef bytes _buffer
    cdef bint _eof

    cdef bytes _fill(self, Py_ssize_t size)

cdef object _as_bytes(object data)
cdef _not_a_list(object headers)

# The I/O contract a Responder is given (http11.Http11Protocol implements it); declared here so
# that the protocols' .pxd cimport this module, not the reverse.
cdef class ConnectionIO:
    cdef public list out
    cdef public bint closing
    cdef public bint can_sendfile
    cdef public object sock
    cdef public double request_deadline

    cpdef bytes read_body(self, Py_ssize_t max_data, bint flush=*)
    cpdef flush(self)
    cpdef flush_soon(self)
    cpdef flush_if_blocked(self)
    cpdef send_file(self, int fileno, object offset, object count)
    cpdef Py_ssize_t queue_error(self, exc, bint access_log=*) except -1
    cpdef tuple response_head(self, object status, object headers, Request request, bint keep_alive,
                              object body_length, bytes server_line)
    cpdef informational(self, int status, list headers)

cdef class Outcome:
    cdef public bint taken_over
    cdef public bint body_done
    cdef public bint started
    cdef public int status_code
    cdef public Py_ssize_t body_sent
    cdef public object environ
    cdef public object headers

cdef class ConnectionSetup:
    cdef readonly double keepalive
    cdef readonly bint keep_alive
    cdef readonly double header_timeout
    cdef readonly double body_timeout
    cdef readonly double send_timeout
    cdef readonly double request_timeout
    cdef readonly object limits
    cdef readonly object ssl_context
    cdef readonly object proxy_protocol
    cdef readonly bytearray recv_buffer
    cdef readonly object proxy
    cdef readonly bytes server_line
    cdef readonly str root_path
    cdef readonly Py_ssize_t drain_limit
    cdef readonly object error_log
    cdef readonly bint sendfile
    cdef readonly object choose_protocol
    cdef readonly object sticky
    cdef readonly Admission admission
    cdef readonly Static static

cdef class Responder:
    cdef public Outcome outcome
    cdef public ConnectionIO connection
    cdef public list out
    cdef public object application
    cdef public dict conn_environ
    cdef public object proxy
    cdef public bytes server_line
    cdef public str root_path
    cdef public Py_ssize_t drain_limit
    cdef public object error_log
    cdef public bint persistent  # keepalive > 0: a response may leave the connection open
    cdef public object start_response
    cdef public object write
    cdef public Request request
    cdef public object status
    cdef public NoBodyWriter writer
    cdef public bint response_keep_alive
    cdef public Py_ssize_t body_received
    cdef public bint drain_failed
    cdef public object body_error
    cdef public bint continue_sent
    cdef public object websocket
    cdef public object early_hints
    cdef public Admission admission
    cdef public Static static

    cdef _take(self, ConnectionSetup setup)
    @cython.locals(outcome=Outcome)
    cpdef release(self)
    cpdef close(self)
    cpdef bytes read_body(self, Py_ssize_t size)

    @cython.locals(n=Py_ssize_t, writer=NoBodyWriter)
    cpdef _write(self, data)

    @cython.locals(has_body=bint, upgrade=bint, outcome=Outcome, whole=bint, static=Static)
    cpdef bint respond(self, Request request) except -1

    @cython.locals(environ=dict, path=str, root_path=str, keys=dict, lname=str, value=str, size=Py_ssize_t,
                   key=str)
    cdef dict _environ(self, Request request, bint has_body)

    cdef bint _keep_alive(self) except -1
    @cython.locals(code=int)
    cdef _start(self, object body_length)
    cdef _switch_protocols(self)

    @cython.locals(length=Py_ssize_t, sent=Py_ssize_t)
    cdef bint _send_result(self, object result) except -1

    @cython.locals(writer=NoBodyWriter)
    cdef _send_file(self, fileno, offset, size)
    @cython.locals(answer=Answer)
    cdef bint _static(self, dict environ) except -1
    @cython.locals(writer=NoBodyWriter, data=bytes)
    cdef _read_file(self, fileno, offset, size)
    cdef _end_body(self)

    @cython.locals(writer=NoBodyWriter)
    cdef bint _finish(self, bint whole) except -1

    @cython.locals(budget=Py_ssize_t)
    cdef bint _drain(self) except -1
    cdef bint _drain_first(self) except -1
    cdef _send_soon(self)

    cdef bint _app_failed(self, exc) except -1
    cdef bint _timed_out(self, exc) except -1
    cdef bint _shed(self, reason) except -1
    cdef _answer_error(self, int status)

# Cython declarations for http2_protocol.py (pure-Python mode; see http11.pxd and greenserve/_accel.py).
# The protocol, its streams, the connection and each stream's responder are typed references:
# a request's path between them (the codec's events, the responder's ConnectionIO calls, the
# output queued on the connection) is C calls and struct fields, not attribute lookups by name.
cimport cython

from greenserve.connection cimport Connection, clock
from greenserve.http.head cimport Limits, Request
from greenserve.http2.connection cimport H2Connection
# The events of every request, as their C types (the .py imports them by these names without the _).
from greenserve.http2.events cimport RequestReceived as _RequestReceived, DataReceived as _DataReceived
from greenserve.http2.events cimport StreamEnded as _StreamEnded
from greenserve.http.framing cimport NoBodyWriter, build_fields
from greenserve.wsgi cimport ConnectionIO, ConnectionSetup, Outcome, Responder
from greenserve.pool cimport ConnectionPool

cdef object _socket, getcurrent, Event, GreenletExit, errors, CONTINUE_100, Http11Protocol
cdef object CLOSED, DRAINING, GOING_AWAY, OPEN, ErrorCode, LocalProtocolError
cdef object ConnectionTerminated, DataReceived, RequestReceived, RequestRejected, SettingsChanged
cdef object StreamEnded, StreamReset, WindowUpdated, SETTINGS_INITIAL_WINDOW_SIZE, PREFACE
cdef object RequestTimeout, _timeout_error
cdef frozenset _FORWARDED
cdef dict _NAMES, _METHODS
cdef Py_ssize_t _NAMES_MAX
cdef double _GOAWAY_GRACE, _BUSY_WAIT
cdef Py_ssize_t _HIGH_WATER, _CHUNK, _SPARE

cdef class Stream

cdef class Http2Protocol:
    cdef public Connection connection
    cdef public object server
    cdef public ConnectionSetup setup
    cdef public H2Connection codec
    cdef public object environ
    cdef public dict streams
    cdef public object limits
    cdef public list room_waiters
    cdef public Py_ssize_t queued
    cdef public bint closing
    cdef public bint closed
    cdef public double goaway_at
    cdef public double idle_since
    cdef public bint preface_done
    cdef public bint peer_going_away
    cdef public double request_timeout
    cdef public double body_timeout
    cdef public double send_timeout
    cdef public double min_send_rate
    cdef public long long sent
    cdef public double keepalive
    cdef public list spare
    cdef public ConnectionPool pool
    cdef public bint observed
    cdef public bint inline_ok
    cdef public Stream pending
    cdef public Stream inline
    cdef public bint ran_inline
    cdef public object reader_done
    cdef public object reader_error
    cdef object _promote_soon

    @cython.locals(stream=Stream)
    cdef _receive(self, data)
    @cython.locals(pool=ConnectionPool)
    cdef _run_inline(self, Stream stream)
    @cython.locals(pool=ConnectionPool)
    cpdef _promote(self)
    cdef _join_reader(self)
    @cython.locals(pool=ConnectionPool)
    cdef _spawn(self, Stream stream)
    @cython.locals(connection=Connection, wait_first=bint, tls=bint)
    cpdef _loop(self)
    cdef _handle(self, event)
    cdef bint _finished(self)
    @cython.locals(connection=Connection, now=double, wait=double)
    cdef double _wait_time(self)
    @cython.locals(codec=H2Connection)
    cdef bint _timed_out(self)
    @cython.locals(connection=Connection, data=bytes)
    cdef queue(self, bint send)
    @cython.locals(connection=Connection)
    cdef bint backed_up(self)
    @cython.locals(stream=Stream)
    cdef _release_room(self)
    @cython.locals(stream=Stream, connection=Connection, pool=ConnectionPool)
    cdef _on_request(self, _RequestReceived event)
    @cython.locals(stream=Stream)
    cdef _on_data(self, _DataReceived event)
    @cython.locals(stream=Stream)
    cdef _on_end(self, _StreamEnded event)
    @cython.locals(stream=Stream)
    cdef _on_reset(self, event)
    @cython.locals(stream=Stream)
    cdef _on_window(self, event)
    @cython.locals(stream=Stream)
    cdef _on_settings(self, event)
    cdef _on_rejected(self, event)
    @cython.locals(stream=Stream)
    cdef _on_terminated(self, event)
    @cython.locals(codec=H2Connection)
    cdef _refuse(self, stream_id, exc)
    cdef _log_refusal(self, int status, Py_ssize_t sent, why)
    @cython.locals(streams=dict, connection=Connection, codec=H2Connection)
    cdef stream_done(self, Stream stream)
    @cython.locals(outcome=Outcome, elapsed=double, status=int)
    cdef observe(self, Stream stream, double started)

cdef class Stream(ConnectionIO):
    cdef public Http2Protocol protocol
    cdef public H2Connection codec
    cdef public object stream_id
    cdef public Request request
    cdef public Responder responder
    cdef public list inbound
    cdef public Py_ssize_t received
    cdef public bint remote_ended
    cdef public object reset_code
    cdef public bint ended
    cdef public object body_error
    cdef public object event
    cdef public object greenlet
    cdef public bint running
    cdef public bint cancelled
    cdef public long long sent
    cdef public double slow_since
    cdef public long long slow_mark
    cdef public long long slow_mark_connection

    cdef begin(self, stream_id, Request request, bint end_stream)
    @cython.locals(protocol=Http2Protocol)
    cpdef run(self)
    @cython.locals(observed=bint, started=double)
    cdef _respond(self)
    @cython.locals(responder=Responder, writer=NoBodyWriter)
    cdef _finish(self)
    cpdef kill(self)
    cdef signal(self)
    cdef bint _wait(self, double timeout) except -1
    cdef _gone(self)
    cdef received_data(self, data)
    @cython.locals(inbound=list)
    cpdef bytes read_body(self, Py_ssize_t max_data, bint flush=*)
    cpdef tuple response_head(self, object status, object headers, Request request, bint keep_alive,
                              object body_length, bytes server_line)
    cpdef informational(self, int status, list headers)
    cpdef flush(self)
    cpdef flush_soon(self)
    cpdef flush_if_blocked(self)
    cpdef send_file(self, int fileno, object offset, object count)
    cpdef Py_ssize_t queue_error(self, exc, bint access_log=*) except -1
    @cython.locals(responder=Responder, writer=NoBodyWriter)
    cdef bint _complete(self)
    @cython.locals(out=list, pieces=list, last=Py_ssize_t, index=Py_ssize_t, final=bint, codec=H2Connection)
    cdef _send(self, bint end)
    @cython.locals(protocol=Http2Protocol, length=Py_ssize_t, position=Py_ssize_t, window=Py_ssize_t,
                   size=Py_ssize_t, codec=H2Connection)
    cdef _data(self, piece, bint end)
    cdef bint _own_mistake(self) except -1
    @cython.locals(protocol=Http2Protocol)
    cdef _wait_for_room(self)
    @cython.locals(protocol=Http2Protocol, codec=H2Connection, send_timeout=double, now=double,
                   closed_until=double, span=double, sent=cython.longlong, moved=cython.longlong, shared=bint)
    cdef _wait_for_window(self)
    cdef _start_span(self, double now)
    cdef _too_slow(self, why)

cpdef _run_stream(Stream stream)
@cython.locals(connection=Connection, stream=Stream)
cpdef _read_for(Http2Protocol protocol)

@cython.locals(method=str, target=str, fields=list, max_size=Py_ssize_t, headers=list, hosts=int, forwarded=bint,
               expect_continue=bint, raw=bytes, authority=str, name=bytes, value=bytes, lname=str, text=str, path=str, query=str,
               request=Request)
cpdef Request request_for(_RequestReceived event, Limits limits)

# Cython declarations for connection.py (pure-Python mode; see http/parser.pxd and
# greenserve/_accel.py). Attributes the server's sweeper and graceful stop read, and what a
# protocol reads and keeps up to date (docs/architecture.md, "The protocol seam"), are public;
# the methods a protocol calls are cpdef: C calls from a compiled protocol (http11.pxd cimports
# Connection), Python methods for any other.
cimport cython

from greenserve._csys cimport SysCalls as _CSysCalls
from greenserve.http._chttp cimport Joiner as _CJoiner
from greenserve.wsgi cimport ConnectionSetup, connection_environ

cdef object errno, os, sys, _socket, monotonic, getcurrent, errors, ConcurrentObjectUseError, client_cert_environ
cdef object GreenletExit, _greenlet, _greenlet_switch
cdef object ProxyHeaderParser, ProxyProtocolError
cdef _CSysCalls _SYS
cdef _CJoiner _JOINER
cdef tuple _TCP_FAMILIES
cdef Py_ssize_t _JOIN_LIMIT, _GATHER_MIN
cdef int _MSG_MORE
cdef object _timeout_error
cdef object _SSLWantRead, _SSLWantWrite, _SSLZeroReturn, _SSLEOF, _SSLError
cdef double _LINGER_SECONDS
cdef Py_ssize_t _LINGER_BYTES
cdef frozenset _PEER_GONE
cdef bint _C_CLOCK
cdef object GeventSocket, _GEVENT_RAW_SOCKET
cdef tuple _GEVENT_SOCKET_SLOTS
cdef bint _SOCKET_LAYOUT_KNOWN

cpdef double clock()

cdef class Connection

cpdef serve_connection(server, sock, address)
@cython.locals(connection=Connection)
cpdef serve_received(server, sock, address, dict peer_environ, bytes early)
cdef _serve_and_close(Connection connection, server, sock, bint received)

cdef class Connection:
    cdef public object server
    cdef readonly ConnectionSetup setup
    cdef public object sock
    cdef public object address
    cdef public object environ
    cdef public bytes early
    cdef public object protocol
    cdef public list out
    cdef public bint closing
    cdef public double keepalive
    cdef public double header_timeout
    cdef public double send_timeout
    cdef public double request_deadline
    cdef public bint idle
    cdef public object greenlet
    cdef public bint done
    cdef public Py_ssize_t requests
    cdef public bint linger
    cdef public bint evicted
    cdef public bint killed
    cdef public double deadline
    cdef public object waiter
    cdef public double head_deadline
    cdef readonly bytearray recv_buffer
    cdef readonly bint direct_io
    cdef bint _flush_pending
    cdef object _raw
    cdef object _hub_switch
    cdef object _to_hub
    cdef object _switch
    cdef object _read_event
    cdef object _write_event
    cdef public bint duplex
    cdef readonly bint sending
    cdef bint _woken
    cdef object _tls
    cdef bint _wake_pending

    # A C call from serve_connection: the greenlet's C stack, which gevent copies out at every
    # switch, holds no Python call layer for it (the protocol's serve() is the one).
    cpdef take_over(self, greenlet)
    cpdef bint flush_scheduled(self)
    cpdef bytes take(self, Py_ssize_t n)
    cpdef run(self, bint received=*)
    @cython.locals(received=Py_ssize_t, exact=bint)
    cdef bint _read_proxy_header(self) except -1
    cdef _proxy_refused(self, why, bint misconfigured)
    cdef bint _tls_handshake(self) except -1
    cdef _take_tls(self, tls)
    cdef _own_waits(self, hub)
    cpdef bint close_plain(self) except -1
    cdef _handshake_failed(self, why)
    cdef object _read_watcher(self)
    cdef object _write_watcher(self)

    @cython.locals(received=Py_ssize_t)
    cpdef Py_ssize_t receive(self, double timeout, bint wait_first=*) except -2
    @cython.locals(received=Py_ssize_t)
    cpdef Py_ssize_t receive_body(self, double timeout) except -2

    @cython.locals(own=bint)
    cdef _wait_for(self, watcher, double timeout)
    @cython.locals(received=Py_ssize_t)
    cpdef Py_ssize_t receive_for_application(self) except -1
    cdef Py_ssize_t _recv_generic(self, double timeout) except -2
    cdef Py_ssize_t _recv_tls(self, double timeout, bint wait_first) except -2
    cpdef Py_ssize_t receive_pending(self) except -1

    @cython.locals(out=list, n=Py_ssize_t, total=Py_ssize_t, head=bytes, body=bytes)
    cpdef flush(self)

    cpdef flush_if_blocked(self)
    cpdef flush_at_end_of_turn(self)
    cpdef send_soon(self)
    cpdef wake(self)
    @cython.locals(waiter=object)
    cdef _wake_reader(self)

    @cython.locals(sent=Py_ssize_t)
    cdef _send(self, data)
    cdef _flush_more(self)

    cdef _send_generic(self, data)
    @cython.locals(sent=Py_ssize_t)
    cdef _send_tls(self, data)
    cdef Py_ssize_t _write_tls_from_hub(self, data) except -2
    @cython.locals(sent=Py_ssize_t)
    cdef _send_two(self, bytes head, bytes body)

    @cython.locals(sockfd=int, sent=Py_ssize_t)
    cpdef send_file(self, int fileno, object offset, object count)

    @cython.locals(deadline=double, dropped=Py_ssize_t, remaining=double, received=Py_ssize_t)
    cdef _lingering_close(self)

    cpdef expire_request(self, double now)
    cpdef bint is_sending(self) except -1
    cpdef shutdown(self)
    cdef _going_away(self)
    cdef double _quiet_since(self)
    @cython.locals(eligible=double)
    cpdef double make_room(self, double now, double grace) except -2.0
    cpdef str peer(self)

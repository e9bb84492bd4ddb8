# cython: language_level=3
"""The compiled build's system calls: recv(2)/send(2) on a socket's descriptor, the monotonic
clock, a presized dict, and a worker's parent-death signal.

Never imported by the pure-Python build: there ``connection`` uses the socket's own methods and
``time.monotonic()``, and ``wsgi`` an ordinary dict copy (see ``greenserve._accel``).
"""

import os
from _socket import socket as _SystemSocket  # the C type under every socket object, gevent's too

from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING
from libc.errno cimport errno as c_errno, EAGAIN, EINTR
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from greenserve.http import errors

cdef extern from "errno.h" nogil:
    int EWOULDBLOCK

cdef extern from "sys/socket.h" nogil:
    ssize_t c_recv "recv" (int fd, void *buf, size_t n, int flags)
    ssize_t c_send "send" (int fd, const void *buf, size_t n, int flags)
    int c_setsockopt "setsockopt" (int fd, int level, int name, const void *value, unsigned int size)
    int MSG_NOSIGNAL

cdef extern from "netinet/in.h" nogil:
    int IPPROTO_TCP

cdef extern from "netinet/tcp.h" nogil:
    int TCP_NODELAY

cdef extern from "Python.h":
    dict _PyDict_NewPresized(Py_ssize_t minused)

# The descriptor field of CPython's socket object (Modules/socketmodule.h: PySocketSockObject
# starts with PyObject_HEAD, then SOCKET_T sock_fd, an int on POSIX). owns_descriptor checks it
# against fileno() before anything relies on it.
cdef extern from *:
    """
    typedef struct { PyObject_HEAD int sock_fd; } greenserve_socket_head;
    #define greenserve_sock_fd(o) (((greenserve_socket_head *)(o))->sock_fd)
    """
    int _sock_fd "greenserve_sock_fd" (object sock)

# prctl(2) is Linux's; elsewhere the call fails with ENOSYS and the caller's heartbeat check remains.
cdef extern from *:
    """
    #ifdef __linux__
    #include <sys/prctl.h>
    static int greenserve_parent_death_signal(int signum) { return prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0); }
    #else
    #include <errno.h>
    static int greenserve_parent_death_signal(int signum) { errno = ENOSYS; return -1; }
    #endif
    """
    int _parent_death_signal "greenserve_parent_death_signal" (int signum)


cdef bint _interrupted() except -1:
    """After a failed recv(2)/send(2): True to retry (EINTR), False when it would block (-1 is
    the answer), and for any other errno the peer is gone (ECONNRESET, EPIPE, EBADF after a
    close): ClientDisconnected."""
    cdef int err = c_errno
    if err == EINTR:
        return True
    if err == EAGAIN or err == EWOULDBLOCK:
        return False
    raise errors.ClientDisconnected(OSError(err, os.strerror(err)))


cdef class SysCalls:
    cdef double monotonic(self):
        """CLOCK_MONOTONIC without a call through Python or a float object. The same clock as
        time.monotonic() on Linux only (on macOS CPython reads mach_absolute_time(), which stops
        during sleep): the caller uses it there only."""
        cdef timespec ts
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return ts.tv_sec + ts.tv_nsec * 1e-9

    cdef bint owns_descriptor(self, object sock) except -1:
        """May recv/send below be used on ``sock``? Only for CPython's own socket type, whose C
        struct they read the descriptor from, and only if that struct is laid out as expected
        (a different layout disables the direct calls instead of misreading memory)."""
        return isinstance(sock, _SystemSocket) and _sock_fd(sock) == sock.fileno()

    cdef Py_ssize_t recv(self, object sock, bytearray buffer) except -2:
        """recv(2) into ``buffer``: the number of bytes received, or -1 when it would block.

        Unlike ``socket.recv_into`` it parses no arguments and does not release and retake the
        GIL around a call that cannot block (the socket is non-blocking): callgrind counted
        ~1,300 instructions per request for the GIL alone. The descriptor is read from the
        socket object at each call: as cheap as a cached number, and -1 (EBADF) once the socket
        is closed, never another connection's descriptor that reused the number.
        """
        cdef Py_ssize_t received
        while True:
            received = c_recv(_sock_fd(sock), PyByteArray_AS_STRING(buffer), len(buffer), 0)
            if received >= 0 or not _interrupted():
                return received

    cdef Py_ssize_t send(self, object sock, bytes data) except -2:
        """send(2) of ``data``: the number of bytes sent, or -1 when it would block. MSG_NOSIGNAL:
        a peer that is gone is an EPIPE here, never a SIGPIPE, whatever the process's signals."""
        cdef Py_ssize_t sent
        while True:
            sent = c_send(_sock_fd(sock), PyBytes_AS_STRING(data), len(data), MSG_NOSIGNAL)
            if sent >= 0 or not _interrupted():
                return sent

    cdef void no_delay(self, object sock):
        """setsockopt(TCP_NODELAY, 1) on the descriptor, for a TCP socket: what
        ``sock.setsockopt(IPPROTO_TCP, TCP_NODELAY, 1)`` does without the method lookup and the
        argument parsing (~1,500 instructions a connection). A failure changes nothing: the
        socket sends as it would have (the caller ignores setsockopt's errors either way)."""
        cdef int one = 1
        c_setsockopt(_sock_fd(sock), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one))

    cdef dict roomy_copy(self, dict source, Py_ssize_t room):
        """A copy of ``source`` presized for ``room`` more keys; copies of it keep its table
        size, so those keys go in without the dict growing."""
        cdef dict roomy = _PyDict_NewPresized(len(source) + room)
        # Item by item: update() into an empty dict would clone the source's smaller table.
        for key, value in source.items():
            roomy[key] = value
        return roomy


def parent_death_signal(int signum):
    """prctl(PR_SET_PDEATHSIG, signum): the kernel sends this process ``signum`` when its parent
    dies. True when set. (The pure build does the same through ctypes, which costs each worker
    ~0.4 MB of RSS: process.arbiter._die_with.)"""
    return _parent_death_signal(signum) == 0

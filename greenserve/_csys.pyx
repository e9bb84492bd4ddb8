# cython: language_level=3
"""The compiled build's system calls: recv(2)/send(2) on a socket's descriptor, accept4(2) on a
TCP listener, the monotonic clock, a presized dict, and a worker's parent-death signal.

Never imported by the pure-Python build: there ``connection`` uses the socket's own methods and
``time.monotonic()``, and ``wsgi`` an ordinary dict copy (see ``greenserve._accel``).
"""

import os
from _socket import socket as _SystemSocket  # the C type under every socket object, gevent's too

from cpython.bytearray cimport PyByteArray_AS_STRING
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.errno cimport errno as c_errno, EAGAIN, EINTR
from posix.time cimport clock_gettime, timespec, CLOCK_MONOTONIC

from greenserve.http import errors

cdef extern from "errno.h" nogil:
    int EWOULDBLOCK

cdef extern from "sys/socket.h" nogil:
    ssize_t c_recv "recv" (int fd, void *buf, size_t n, int flags)
    ssize_t c_send "send" (int fd, const void *buf, size_t n, int flags)
    ssize_t c_send2 "greenserve_send2" (int fd, const void *a, size_t na, const void *b, size_t nb)
    int c_setsockopt "setsockopt" (int fd, int level, int name, const void *value, unsigned int size)
    int MSG_NOSIGNAL

# sendmsg(2) of two buffers (a response's head and its body) without joining them.
cdef extern from *:
    """
    #include <sys/socket.h>
    #include <sys/uio.h>
    static ssize_t greenserve_send2(int fd, const void *a, size_t na, const void *b, size_t nb) {
        struct iovec iov[2];
        struct msghdr msg = {0};
        iov[0].iov_base = (void *)a; iov[0].iov_len = na;
        iov[1].iov_base = (void *)b; iov[1].iov_len = nb;
        msg.msg_iov = iov; msg.msg_iovlen = 2;
        return sendmsg(fd, &msg, MSG_NOSIGNAL);
    }
    """

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


# accept4(2) with the accepted socket non-blocking and close-on-exec from the start, and a TCP
# peer's address formatted as CPython's socket module gives it (makesockaddr: inet_ntop's text,
# the port, and for IPv6 the flow label and scope id). IPv4's dotted quad is written here:
# glibc's inet_ntop formats it through sprintf, ~1,700 instructions a connection (callgrind).
cdef extern from *:
    """
    #include <errno.h>
    #include <sys/socket.h>
    #include <netinet/in.h>
    #include <arpa/inet.h>
    #ifdef __linux__
    #define GREENSERVE_HAVE_ACCEPT4 1
    static int greenserve_accept(int listener, int *family, char *host, int *port,
                                 unsigned int *flowinfo, unsigned int *scope_id) {
        struct sockaddr_storage addr;
        socklen_t size = sizeof(addr);
        int fd = accept4(listener, (struct sockaddr *)&addr, &size, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return -1;
        *family = addr.ss_family;
        if (addr.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&addr;
            const unsigned char *b = (const unsigned char *)&a->sin_addr.s_addr;
            char *p = host;
            for (int i = 0; i < 4; i++) {
                unsigned int v = b[i];
                if (v >= 100) { *p++ = (char)('0' + v / 100); v %= 100; *p++ = (char)('0' + v / 10); }
                else if (v >= 10) *p++ = (char)('0' + v / 10);
                *p++ = (char)('0' + v % 10);
                if (i < 3) *p++ = '.';
            }
            *p = 0;
            *port = ntohs(a->sin_port);
        } else if (addr.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&addr;
            if (inet_ntop(AF_INET6, &a->sin6_addr, host, INET6_ADDRSTRLEN) == NULL)
                host[0] = 0;
            *port = ntohs(a->sin6_port);
            *flowinfo = ntohl(a->sin6_flowinfo);
            *scope_id = a->sin6_scope_id;
        }
        return fd;
    }
    #else
    #define GREENSERVE_HAVE_ACCEPT4 0
    static int greenserve_accept(int listener, int *family, char *host, int *port,
                                 unsigned int *flowinfo, unsigned int *scope_id) {
        errno = ENOSYS;
        return -1;
    }
    #endif
    """
    bint HAVE_ACCEPT4 "GREENSERVE_HAVE_ACCEPT4"
    int _accept "greenserve_accept" (int listener, int *family, char *host, int *port,
                                     unsigned int *flowinfo, unsigned int *scope_id)
    int AF_INET
    int AF_INET6
    int SOCK_STREAM
    int INET6_ADDRSTRLEN

cdef extern from "Python.h":
    int PyErr_CheckSignals() except -1


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

    cdef Py_ssize_t send2(self, object sock, bytes head, bytes body) except -2:
        """sendmsg(2) of ``head`` then ``body``, as send() of the two joined, without the join:
        a body of a few KiB is not copied into a new buffer (malloc, copy, free) only for the
        kernel to copy it again."""
        cdef Py_ssize_t sent
        while True:
            sent = c_send2(_sock_fd(sock), PyBytes_AS_STRING(head), len(head), PyBytes_AS_STRING(body), len(body))
            if sent >= 0 or not _interrupted():
                return sent

    cdef bytes take(self, bytearray buffer, Py_ssize_t n):
        """The first ``n`` bytes of ``buffer`` as bytes: one copy, without the memoryview slice
        and the bytes() call (~1,200 instructions an HTTP/2 read) it takes in Python."""
        return PyBytes_FromStringAndSize(PyByteArray_AS_STRING(buffer), n)

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


cdef class Acceptor:
    """accept(2) for a TCP listener: ``accept()`` gives ``(descriptor, address)``, or None when
    no connection is waiting.

    What the listener's own ``_accept()`` gives, with the descriptor already non-blocking (so
    no ``ioctl(FIONBIO)`` after it) and the address made without a call through Python. The
    caller makes the socket object with ``SOCK_NONBLOCK`` in its type, which tells CPython it
    is non-blocking already.
    """

    cdef object listener

    def __cinit__(self, listener):
        self.listener = listener

    def accept(self):
        cdef char host[64]
        cdef int family = 0, port = 0, fd, err
        cdef unsigned int flowinfo = 0, scope_id = 0
        while True:
            # The descriptor read at each call: -1 (EBADF, an OSError as CPython raises) once
            # the listener is closed.
            fd = _accept(_sock_fd(self.listener), &family, host, &port, &flowinfo, &scope_id)
            if fd >= 0:
                break
            err = c_errno
            if err == EINTR:
                PyErr_CheckSignals()  # a handler's exception propagates, as in CPython (PEP 475)
                continue
            if err == EAGAIN or err == EWOULDBLOCK:
                return None
            raise OSError(err, os.strerror(err))  # the subclass for err, as CPython's accept raises
        try:
            if family == AF_INET:
                return fd, (host.decode("ascii"), port)
            if family == AF_INET6:
                return fd, (host.decode("ascii"), port, flowinfo, scope_id)
            raise OSError("accepted a socket of address family %d on a TCP listener" % family)
        except BaseException:
            os.close(fd)  # (no memory for the address, or not TCP: acceptor_for() rules that out)
            raise


def acceptor_for(listener):
    """An Acceptor's ``accept`` for ``listener`` (CPython's socket object under gevent's), or None
    where it does not apply: not Linux, not TCP over IPv4 or IPv6, or a socket object whose C
    struct is not laid out as expected."""
    if not HAVE_ACCEPT4 or not isinstance(listener, _SystemSocket) or _sock_fd(listener) != listener.fileno():
        return None
    if listener.family not in (AF_INET, AF_INET6) or listener.type != SOCK_STREAM:
        return None
    return Acceptor(listener).accept


def parent_death_signal(int signum):
    """prctl(PR_SET_PDEATHSIG, signum): the kernel sends this process ``signum`` when its parent
    dies. True when set. (The pure build does the same through ctypes, which costs each worker
    ~0.4 MB of RSS: process.arbiter._die_with.)"""
    return _parent_death_signal(signum) == 0

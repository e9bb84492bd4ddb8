"""--sticky in a worker: which worker owns a client, and a connection handed to its owner with what was read of it.

Sessions held in a worker's memory (Socket.IO's, Engine.IO's long polling) need every request
of one client to reach the same worker: a long-polling client sends a new HTTP request for each
poll, on a new connection as often as not. The owner of a client is the slot its address hashes
to (``owner``: a CRC-32 of REMOTE_ADDR, the address the application sees, over the generation's
slot count); a slot is the worker's place in its generation (``process.slots``), which the
worker that replaces it takes over.

Where the decision is made:

- when a connection starts (``Place.elsewhere``, from ``Connection.run``), by its peer's address
  or its PROXY header's, before anything of HTTP is read: the accepting worker keeps it or sends
  its descriptor to the owner, with what the PROXY header said and the bytes that followed it;
- at each request that carries a trusted proxy's X-Forwarded-For (``StickyProxyHeaders``, which
  takes the place of ``proxy.ProxyHeaders``): the address it names decides. Behind nginx one
  upstream connection carries many clients' requests, so a connection may move at any request
  boundary: the request's head and every byte after it travel with the descriptor
  (``Http11Protocol._hand_over``), before its application is called.

A message on a slot's socket is one SCM_RIGHTS descriptor and a marshal of ``(version, listener
index, address, peer environ keys, bytes read)``. The receiving worker serves the descriptor as
if it had accepted it (``WSGIServer.take_handed_over``, ``connection.serve_received``), on the
listener of the same index: the workers' listeners are the same list.

When a slot's socket cannot take a hand-over (its queue is full: its worker is dead, restarting
or far behind; or the message is too large), the connection is served where it is, with one
warning line, and that slot is skipped for ``_SKIP_SECONDS``: a request served by a worker
without the client's session costs that client a reconnection at most, and every other request
(plain HTTP beside the sessions) is answered. A 503 instead would refuse plain HTTP too.
"""

import array
import marshal
import zlib
from time import monotonic

import _socket  # (the C module: the hand-over sockets are ours, read only when the hub says so)

from greenserve.connection import HandOver
from greenserve.proxy import ProxyHeaders

_VERSION = 1
# The largest message: a request head within the default limits, and what was read after it.
# A larger one is not handed over (served where it is).
_MAX_MESSAGE = 256 * 1024
# A slot that refused a hand-over is skipped this long (its clients are served where they land).
_SKIP_SECONDS = 1.0
# The warning about a refused hand-over is said at most this often (with the count since).
_WARNING_INTERVAL = 10.0
# The connection's own environ keys that came from its peer or its PROXY header.
PEER_KEYS = ("REMOTE_ADDR", "REMOTE_PORT", "SERVER_NAME", "SERVER_PORT", "wsgi.url_scheme")
_FD_SIZE = array.array("i").itemsize
# Room for a few descriptors: a message should carry one; any more are closed, not leaked.
_ANCILLARY = _socket.CMSG_SPACE(4 * _FD_SIZE)
_MSG_CMSG_CLOEXEC = getattr(_socket, "MSG_CMSG_CLOEXEC", 0)
# Fibonacci hashing's multiplier (2**32 / the golden ratio): spreads CRC-32's bits over the top
# ones, which pick the slot, so that neighbouring addresses (10.0.0.1, 10.0.0.2) land anywhere.
_GOLDEN = 0x9E3779B1


def owner(remote_addr, count):
    """The slot (0 to ``count`` - 1) that owns the client at ``remote_addr`` (REMOTE_ADDR: "" for a
    unix-socket peer). Stable across processes and restarts, unlike ``hash()``, which Python
    salts per process. An IPv4-mapped IPv6 address is its IPv4 one (a dual-stack listener
    reports ::ffff:192.0.2.1 where an IPv4 one reports 192.0.2.1)."""
    if count == 1:
        return 0
    if remote_addr.startswith("::ffff:") and "." in remote_addr:
        remote_addr = remote_addr[7:]
    mixed = (zlib.crc32(remote_addr.encode("latin-1", "replace")) * _GOLDEN) & 0xFFFFFFFF
    return (mixed * count) >> 32


class Handoff:
    """A worker's hand-overs: its slot of its generation's table (``process.slots.WorkerSlot``),
    a sending socket per slot, its receiving one, and the servers whose connections it takes."""

    def __init__(self, worker_slot, error_log):
        self.slot = worker_slot.slot
        self.count = worker_slot.count
        self.error_log = error_log
        self._senders = [_unix_socket(fd) for fd in worker_slot.send]
        self._receiver = _unix_socket(worker_slot.receive)
        self._servers = {}  # listener index -> server
        self._skip_until = [0.0] * self.count
        self._receiving = None  # the greenlet that reads the receiving socket, once started
        self._warned = 0.0
        self._unsaid = 0  # refusals since the last warning
        # Counted for the tests and the cost measurements (docs/performance.md).
        self.sent = 0
        self.received = 0
        self.refused = 0

    def place(self, server, index):
        """The sticky.Place of ``server``, the worker's listener ``index`` (the same in every worker)."""
        self._servers[index] = server
        return Place(self, index)

    def owner_of(self, remote_addr):
        """The slot to serve ``remote_addr``: its owner, or this worker's while the owner's slot is skipped."""
        slot = owner(remote_addr, self.count)
        if slot != self.slot and self._skip_until[slot] and monotonic() < self._skip_until[slot]:
            return self.slot
        return slot

    def send(self, connection, index, slot, data, environ):
        """Send the connection's descriptor to ``slot`` with ``data`` (what was read of it and not
        answered) and its peer's environ keys; True when sent. False: served here (said once
        in a while), and ``slot`` skipped for _SKIP_SECONDS."""
        peer = {key: environ[key] for key in PEER_KEYS if key in environ}
        address = connection.address
        message = marshal.dumps((_VERSION, index, address, peer, bytes(data)))
        if len(message) > _MAX_MESSAGE:
            self._refused(slot, "%d bytes read of it, more than a hand-over carries" % len(data), False)
            return False
        fds = array.array("i", [connection.sock.fileno()])
        try:
            self._senders[slot].sendmsg([message], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        except BlockingIOError:
            self._refused(slot, "its queue is full (the worker is restarting, or far behind)", True)
            return False
        except OSError as exc:
            self._refused(slot, str(exc), True)
            return False
        self.sent += 1
        return True

    def _refused(self, slot, why, skip):
        self.refused += 1
        if skip:
            self._skip_until[slot] = monotonic() + _SKIP_SECONDS
        now = monotonic()
        if now - self._warned < _WARNING_INTERVAL:
            self._unsaid += 1
            return
        more = " (and %d more since the last such line)" % self._unsaid if self._unsaid else ""
        self._warned, self._unsaid = now, 0
        self.error_log.warning(
            "--sticky: a connection for the worker in slot %d was served by the worker in slot %d instead: "
            "%s%s" % (slot, self.slot, why, more))

    # --- receiving ---

    def start(self):
        """Read the hand-overs sent to this worker's slot (once, whichever server starts first)."""
        if self._receiving is None and self.count > 1:
            import gevent

            self._receiving = gevent.spawn(self._receive)

    def stop(self):
        """Stop reading (a stop began): what is sent to the slot from now on queues for the
        worker that takes it over (a replacement), or dies with the table."""
        receiving, self._receiving = self._receiving, None
        if receiving is not None:
            receiving.kill(block=False)

    def _receive(self):
        from gevent import get_hub

        hub = get_hub()
        watcher = hub.loop.io(self._receiver.fileno(), 1)
        buffer = bytearray(_MAX_MESSAGE)
        try:
            while True:
                # Wait first, then read one: the loop is level-triggered, so a queue of several
                # wakes us again at once, and a lone hand-over (the usual) costs no read that
                # fails with EAGAIN (a system call and an exception each).
                hub.wait(watcher)
                self._wait_for_room(hub)
                try:
                    size, ancillary, flags, _ = self._receiver.recvmsg_into([buffer], _ANCILLARY, _MSG_CMSG_CLOEXEC)
                except (BlockingIOError, InterruptedError):
                    continue  # (another process holding the slot took it: a reload's overlap)
                self._take(buffer, size, _descriptors(ancillary), flags)
        finally:
            watcher.close()

    def _wait_for_room(self, hub):
        """Read no more hand-overs while the pool is full: they wait in the slot's queue, as
        clients wait in the listen backlog (a full queue turns the senders' away)."""
        import gevent
        from gevent.event import Event

        for server in self._servers.values():
            while server.full():
                pool = getattr(server, "pool", None)
                if pool is None or not hasattr(pool, "when_free"):
                    gevent.sleep(0.05)  # (a pool of gevent's: no call when a slot frees)
                    continue
                room = Event()
                pool.when_free(lambda _pool: room.set())
                room.wait()

    def _take(self, buffer, size, fds, flags):
        if len(fds) != 1 or flags & (_socket.MSG_TRUNC | _socket.MSG_CTRUNC):
            for fd in fds:
                _close(fd)
            self.error_log.error("--sticky: a malformed hand-over (%d descriptors, flags %#x) was dropped" % (len(fds), flags))
            return
        try:
            with memoryview(buffer) as view:
                version, index, address, peer, early = marshal.loads(view[:size])
            server = self._servers[index] if version == _VERSION else None
        except (ValueError, EOFError, TypeError, KeyError):
            server = None
        if server is None:
            _close(fds[0])
            self.error_log.error("--sticky: a hand-over this worker cannot read was dropped (another version?)")
            return
        self.received += 1
        server.take_handed_over(fds[0], address, peer, early)


class Place:
    """--sticky for one server of a worker (``server.sticky``, read by each connection as
    ``setup.sticky``): the decision at a connection's start, and the sending of its connections."""

    __slots__ = ("handoff", "index")

    def __init__(self, handoff, index):
        self.handoff = handoff
        self.index = index

    @property
    def slot(self):
        return self.handoff.slot

    def elsewhere(self, connection):
        """At the connection's start (after its PROXY header): True when it was handed to the
        worker that owns its peer's address (this worker is done with it); False: serve it."""
        address = connection.address
        handoff = self.handoff
        slot = handoff.owner_of(address[0] if isinstance(address, tuple) else "")
        if slot == handoff.slot:
            return False
        return handoff.send(connection, self.index, slot, connection.early, connection.environ)

    def hand_over(self, connection, slot, data, environ):
        """Hand ``connection`` to ``slot`` at a request (``Http11Protocol._hand_over``): True when sent."""
        return self.handoff.send(connection, self.index, slot, data, environ)

    def start(self):
        self.handoff.start()

    def stop(self):
        self.handoff.stop()


class StickyProxyHeaders(ProxyHeaders):
    """``proxy.ProxyHeaders`` under --sticky: the client a trusted proxy names decides the owner.

    The responder calls ``rewrite`` only for a request that carries an X-Forwarded-* field (the
    parser flags it): a request without pays nothing more, and was placed by its connection's
    address when the connection started. When the client's address (REMOTE_ADDR once rewritten)
    is another worker's, ``connection.HandOver`` is raised: the application is not called here.
    """

    def __init__(self, trusted, place):
        ProxyHeaders.__init__(self, trusted)
        self.place = place

    def rewrite(self, environ):
        ProxyHeaders.rewrite(self, environ)
        handoff = self.place.handoff
        slot = handoff.owner_of(environ.get("REMOTE_ADDR", ""))
        if slot != handoff.slot:
            raise HandOver(self.place, slot)


def _unix_socket(fd):
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_SEQPACKET, 0, fd)
    sock.setblocking(False)  # (already: the master made them so; this says it to Python)
    return sock


def _descriptors(ancillary):
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % _FD_SIZE])
    return list(fds)


def _close(fd):
    import os

    try:
        os.close(fd)
    except OSError:
        pass

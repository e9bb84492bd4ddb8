"""--sticky: the hand-over sockets of a generation of workers, one per slot, made by the master before it forks.

A slot is a worker's place in its generation (0 to N-1): the worker that replaces one (a crash, a
kill -9, --max-requests) takes over its slot, and with it the clients that hash to it
(``sticky.owner``). Each slot is a unix SEQPACKET socket pair: every worker of the generation
sends on the slot's first socket, the worker holding the slot receives on the second. The master
keeps both ends open for as long as a worker uses the table, so what is sent to a slot whose
worker is dead or still booting queues in the kernel, and its replacement reads it: nothing
sent is lost. SEQPACKET rather than a datagram pair: the same message boundaries and descriptor
passing, and no short datagram queue (net.unix.max_dgram_qlen); its queue is bounded by the
sending socket's buffer (``_SEND_BUFFER``).

Nothing of HTTP here: the descriptors are numbers the master never reads from. The workers'
side (what a message holds, the sending and receiving) is ``greenserve.sticky``.
"""

import os

import _socket  # (the C module: a gevent-patched socket.socketpair would make a hub in the master)

# Asked for each slot's sending socket (the kernel caps it at net.core.wmem_max): about 1,300 hand-overs
# of a few hundred bytes each queue for a slot whose worker is restarting (the default 208 KiB: 278).
_SEND_BUFFER = 1 << 20


class SlotTable:
    """The hand-over sockets of one generation's ``count`` slots: ``send[k]`` and ``receive[k]``
    are the descriptors of slot k's pair. Made in the master; every worker inherits them."""

    def __init__(self, count):
        self.count = count
        self.send = []
        self.receive = []
        kind = _socket.SOCK_SEQPACKET | _socket.SOCK_NONBLOCK | _socket.SOCK_CLOEXEC
        try:
            for _ in range(count):
                sender, receiver = _socket.socketpair(_socket.AF_UNIX, kind)
                try:
                    sender.setsockopt(_socket.SOL_SOCKET, _socket.SO_SNDBUF, _SEND_BUFFER)
                except OSError:
                    pass  # the default buffer: fewer hand-overs queue
                self.send.append(sender.detach())
                self.receive.append(receiver.detach())
        except BaseException:
            self.close()
            raise

    def for_worker(self, slot):
        """What the worker holding ``slot`` keeps (in the worker, after the fork): the senders of
        every slot and its own receiver; the other receivers are closed in it."""
        for index, fd in enumerate(self.receive):
            if index != slot:
                _close(fd)
        return WorkerSlot(slot, self.count, list(self.send), self.receive[slot])

    def close(self):
        """Close every descriptor of the table (in the master once no worker uses it; in a
        worker of another generation)."""
        for fd in self.send + self.receive:
            _close(fd)
        self.send = []
        self.receive = []


class WorkerSlot:
    """A worker's part of its generation's table: its ``slot``, the slot ``count``, the sending
    descriptor of every slot (``send``) and its own receiving one (``receive``). ``handoff`` is
    the worker's ``sticky.Handoff`` over them, made by the first server that serves it."""

    __slots__ = ("slot", "count", "send", "receive", "handoff")

    def __init__(self, slot, count, send, receive):
        self.slot = slot
        self.count = count
        self.send = send
        self.receive = receive
        self.handoff = None


def _close(fd):
    try:
        os.close(fd)
    except OSError:
        pass

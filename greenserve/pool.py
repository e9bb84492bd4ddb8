"""The connections' greenlets: at most ``size`` at once, and each reused for a later connection.

What gevent's ``Pool(size)`` does for a server (bound the connections, pause accepting while
full, wake it when a slot frees), without its cost per connection. ``Pool.spawn`` makes a
``gevent.Greenlet`` for every connection: the spawning stack captured (10 frames, with their line
numbers), a link to discard it, a semaphore acquired and released, a hub callback to report its
result, and a new greenlet whose Python frames need a fresh 16 KiB data stack, mapped and
unmapped (mmap(2), munmap(2)) with each connection. Here a connection ends by parking its
greenlet, which the next accepted connection takes: nothing is made or freed per connection, and
nothing is captured. ``bench/accept.py`` measures the difference (docs/performance.md).

A reused greenlet is a thread of a thread pool (waitress, gunicorn's gthread): it serves one
connection at a time, one after the other. Each connection starts in an empty
``contextvars`` context, as a new greenlet would; what an application stores per greenlet
(``gevent.local``, or ``threading.local`` once patched) may still be there for a later
connection, as thread-locals are on a thread pool. At most ``IDLE`` greenlets wait parked; a
greenlet that finds that many already waiting ends.
"""

from gevent import get_hub, getcurrent
from greenlet import GreenletExit, greenlet

# Parked greenlets kept for the next connections. Each holds its C stack slice and its Python
# data stack (about 8 KiB touched); a burst of connections beyond this many makes new ones.
IDLE = 128


class ConnectionPool:
    """Run ``func(*args)`` for each connection in a greenlet of the pool (``spawn``).

    ``size``: the most connections served at once (None: no bound). ``reuse=False``: a new
    greenlet for every connection (the reuse_greenlets setting). ``full()`` says whether
    the bound is reached; the server stops accepting then and asks to be called back
    (``when_free``) when a connection ends.
    """

    def __init__(self, size=None, reuse=True):
        if size is not None and size < 1:
            raise ValueError("a connection pool needs room for at least one connection, not %r" % (size,))
        self.size = size
        self.busy = 0
        self.keep = IDLE if reuse else 0  # the most greenlets parked at once
        self._idle = []  # parked greenlets, each waiting in _run for its next connection
        self._waiting = []  # callbacks to call (in the hub) when a slot frees
        self.hub = None
        self.loop = None  # the hub's loop, once the first greenlet is spawned

    def __len__(self):
        return self.busy

    def full(self):
        return self.size is not None and self.busy >= self.size

    def free_count(self):
        if self.size is None:
            return 1
        return max(0, self.size - self.busy)

    def when_free(self, callback):
        """Call ``callback(self)`` in the hub once, when the next connection ends."""
        if callback not in self._waiting:
            self._waiting.append(callback)

    def unlink(self, callback):
        """Forget a callback given to ``when_free``."""
        if callback in self._waiting:
            self._waiting.remove(callback)

    def rawlink(self, callback):
        # What gevent's StreamServer asks of a pool's semaphore: ``rawlink(callback)`` when it
        # finds the pool full, to be called when a slot frees, and ``unlink`` when it closes.
        self.when_free(callback)

    @property
    def _semaphore(self):
        return self

    def spawn(self, func, *args):
        """Serve ``func(*args)`` in a parked greenlet, or a new one; it starts at the loop's next turn."""
        return self.start(func, args)

    def start(self, func, args):
        """``spawn(func, *args)`` for a compiled caller (an HTTP/2 stream a request): a C call,
        not a bound method's with its arguments packed again (callgrind: 1,200 instructions)."""
        hub = self.hub
        if hub is None:
            hub = self.hub = get_hub()
            self.loop = hub.loop
        self.busy += 1
        idle = self._idle
        runner = None
        while idle:
            runner = idle.pop()
            if not runner.dead:
                break
            runner = None
        if runner is None:
            runner = greenlet(self._run, hub)
        self.loop.run_callback(runner.switch, func, args)
        return runner

    def occupy(self):
        """Count one more greenlet's work in a greenlet already counted (an HTTP/2 stream run by
        its connection's greenlet: http2_protocol's _run_inline), until ``vacate``."""
        self.busy += 1

    def vacate(self):
        """The end of what ``occupy`` counted: a slot is free (a paused accept loop resumes)."""
        self._release()

    def _run(self, func, args):
        hub = self.hub
        me = getcurrent()
        idle = self._idle
        while True:
            try:
                func(*args)
            except GreenletExit:  # killed (a stop that ran out of time): this greenlet ends
                self._release()
                return
            except BaseException:
                self._release()
                raise  # the hub reports it, as it does for any greenlet's
            func = args = None
            self._release()
            if len(idle) >= self.keep:
                return
            # A new connection starts in an empty context, as in a new greenlet.
            me.gr_context = None
            idle.append(me)
            try:
                func, args = hub.switch()
            except BaseException:
                # Thrown in while parked: aimed at the connection it served (a gevent.Timeout
                # its application started and never cancelled), or at this greenlet being
                # collected. Not for the next connection: this greenlet ends.
                if me in idle:
                    idle.remove(me)
                return

    def _release(self):
        self.busy -= 1
        waiting = self._waiting
        if waiting:
            self._waiting = []
            loop = self.loop
            for callback in waiting:
                loop.run_callback(callback, self)

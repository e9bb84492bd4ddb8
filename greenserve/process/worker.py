"""One worker process: gevent made safe after the fork, patched, its servers started, a heartbeat from its event loop, and stops on signals.

The order is the point (each step needs the one before):

1. ``gevent.reinit()`` when gevent was imported before the fork (``--preload``, or an embedding
   script): the loop, its file descriptors and the resolver's threads are renewed for this
   process instead of being shared with the master.
2. loop and resolver choices (``gevent.config``), before anything creates the hub;
3. monkey-patching, before the application is imported, so its ``socket``, ``ssl``,
   ``time.sleep``, DNS and ``threading`` are gevent's (``process.patching``);
4. privileges dropped (``--user``/``--group``), after the master bound the ports;
5. ``boot()`` imports the application and returns the servers; they start; the master hears
   ``READY``; a timer on the event loop writes a heartbeat (a thread would go on beating while
   the loop is stuck, which is exactly what the master must notice).

Signals in a worker: TERM stops gracefully (in-flight requests finish, up to the graceful
timeout), QUIT closes everything now, USR1 reopens log files, INT is ignored (a Ctrl-C reaches
the whole process group; the master decides what it means).
"""

import os
import signal
import sys

from greenserve.process import arbiter


class WorkerOptions:
    """What a worker needs besides its boot function; defaults do nothing special."""

    def __init__(self, patch="all", resolver=None, loop=None, user=None, group=None, graceful_timeout=30.0,
                 timeout=30.0, max_requests=0, max_requests_jitter=0, max_blocking_time=None, log=None,
                 reopen_logs=None):
        self.patch = patch
        self.resolver = resolver
        self.loop = loop
        self.user = user
        self.group = group
        self.graceful_timeout = graceful_timeout
        self.timeout = timeout
        self.max_requests = max_requests
        self.max_requests_jitter = max_requests_jitter
        self.max_blocking_time = max_blocking_time
        self.log = log
        self.reopen_logs = reopen_logs


def prepare_gevent(options):
    """Steps 1-3 of the module docstring; returns the patching state (for reports)."""
    from greenserve.process import patching

    if "gevent" in sys.modules:
        import gevent

        gevent.reinit()
    hub_exists = False
    if "gevent" in sys.modules:
        hub_exists = patching._hub_exists()
    if (options.resolver or options.loop) and not hub_exists:
        patching.configure_gevent(resolver=options.resolver, loop=options.loop)
    if options.max_blocking_time and not hub_exists:
        import gevent

        gevent.config.monitor_thread = True
        gevent.config.max_blocking_time = options.max_blocking_time
    return patching.apply(options.patch)


def serve(heartbeat_fd, boot, options):
    """The body of a worker: returns its exit code. ``boot()`` returns the servers to run."""
    prepare_gevent(options)
    if options.user is not None or options.group is not None:
        from greenserve.process.daemon import drop_privileges

        drop_privileges(options.user, options.group)
    servers = boot()

    import gevent
    from gevent.event import Event

    log = options.log
    stop_how = []
    stopped = Event()

    def on_stop(how):
        if not stop_how:
            stop_how.append(how)
        elif how == "fast":
            stop_how[:] = ["fast"]
        stopped.set()
        if how == "fast":
            for server in servers:
                gevent.spawn(server.stop, 0)

    def on_reopen():
        if options.reopen_logs is not None:
            options.reopen_logs()
            if log is not None:
                # Said, so that whoever rotated the files knows when this worker has let go of
                # the old ones (lines it wrote just before may still be there).
                log.info("worker pid %d: log files reopened" % os.getpid())

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    gevent.signal_handler(signal.SIGTERM, on_stop, "graceful")
    gevent.signal_handler(signal.SIGQUIT, on_stop, "fast")
    gevent.signal_handler(signal.SIGUSR1, on_reopen)
    if options.max_blocking_time:
        _report_blocking(log, options.max_blocking_time)

    for server in servers:
        server.start()
    limit = arbiter.jittered(options.max_requests, options.max_requests_jitter)
    hub = gevent.get_hub()
    beat = _Heartbeat(heartbeat_fd, servers, limit, log, lambda: on_stop("graceful"))
    interval = 1.0
    if options.timeout:
        interval = max(0.05, min(1.0, options.timeout / 4.0))
    timer = hub.loop.timer(interval, interval)
    timer.start(beat)
    beat.send(arbiter.READY)

    stopped.wait()
    if stop_how[0] == "graceful":
        gevent.joinall([gevent.spawn(server.stop, options.graceful_timeout) for server in servers])
    else:
        gevent.joinall([gevent.spawn(server.stop, 0) for server in servers], timeout=5)
    timer.stop()
    try:
        os.close(heartbeat_fd)
    except OSError:
        pass
    return 0


class _Heartbeat:
    """Called by a timer on the worker's event loop: proves the loop runs, and recycles the
    worker gracefully after ``limit`` requests (``--max-requests``)."""

    def __init__(self, fd, servers, limit, log, stop):
        self.fd = fd
        self.servers = servers
        self.limit = limit
        self.log = log
        self.stop = stop
        self.recycling = False

    def __call__(self):
        self.send(arbiter.HEARTBEAT)
        if self.limit and not self.recycling:
            served = sum(getattr(server, "requests_served", 0) for server in self.servers)
            if served >= self.limit:
                self.recycling = True
                self.send(arbiter.RECYCLING)  # so the master logs the exit as planned, not as a crash
                if self.log is not None:
                    self.log.info("served %d requests (--max-requests): restarting this worker" % served)
                self.stop()

    def send(self, data):
        try:
            os.write(self.fd, data)
        except BlockingIOError:
            pass  # the master has not read the last beats yet: it knows we are alive
        except OSError:
            pass  # the master is gone; the next signal or the parent-death check ends us


def _report_blocking(log, max_blocking_time):
    """Log gevent's monitor-thread reports of a blocked loop as one warning with the stack."""
    from gevent import events

    def subscriber(event):
        if isinstance(event, events.EventLoopBlocked):
            text = "".join(line if line.endswith("\n") else line + "\n" for line in event.info)
            if log is not None:
                log.warning(
                    "the event loop was blocked for more than %.3g s (--max-blocking-time) by %r:\n%s"
                    % (max_blocking_time, event.greenlet, text.rstrip("\n"))
                )

    events.subscribers.append(subscriber)

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
timeout), QUIT closes everything now, USR1 reopens log files, INT stops nothing (a Ctrl-C reaches
the whole process group; the master decides what it means) but runs the worker_int hook if set.
ABRT, the master's for an event loop that went silent, writes every thread's stack to the error
log and ends the worker (``dump_stacks_to``), after the worker_abort hook when one is set.

Server hooks (``process.hooks``): post_fork runs after step 3, so what it starts (threads,
sockets) is patched and cooperates; post_worker_init after step 5's import; worker_int on QUIT
and INT; worker_abort on SIGABRT; worker_exit on the way out, and after a graceful stop the
process's atexit handlers, as a normal interpreter exit would run them (the arbiter ends a
worker with ``os._exit``, which runs none: OpenTelemetry's BatchSpanProcessor, for one, flushes
its last spans from one). The master hears when each of worker_int, worker_abort and
worker_exit starts and returns (``call_stop_hook``).
"""

import os
import signal
import sys
from time import monotonic

from greenserve.observe.stats import worker_stats
from greenserve.process import arbiter


def prepare_gevent(config):
    """Steps 1-3 of the module docstring, as ``config`` (``settings.Config``) asks; returns the
    patching state (for reports)."""
    from greenserve.process import patching

    if "gevent" in sys.modules:
        import gevent

        gevent.reinit()
    hub_exists = False
    if "gevent" in sys.modules:
        hub_exists = patching._hub_exists()
    if (config.resolver or config.loop) and not hub_exists:
        patching.configure_gevent(resolver=config.resolver, loop=config.loop)
    if config.max_blocking_time and not hub_exists:
        patching.configure_monitor(config.max_blocking_time)
    return patching.apply(patching.spec_of(config))


def serve(heartbeat_fd, boot, config, log=None, reopen_logs=None, warn_late_patching=False, hooks=None):
    """The body of a worker: returns its exit code. ``boot()`` returns the servers to run.

    ``config`` is the ``settings.Config`` the master runs with; ``log`` has info/warning/error;
    ``reopen_logs()`` runs on SIGUSR1. ``warn_late_patching``: log what was imported before
    patching (every worker of a start patches after the same imports, the master's, inherited
    at fork, so the master asks only its first). ``hooks``: the server hooks
    (``process.hooks.Hooks``, with this worker's in ``hooks.worker``).
    """
    stop_how = []
    try:
        _serve(heartbeat_fd, boot, config, log, reopen_logs, warn_late_patching, hooks, stop_how)
    finally:
        if hooks is not None:
            hooks.worker.alive = False
            call_stop_hook(heartbeat_fd, hooks, "worker_exit", hooks.server, hooks.worker)
    try:
        os.close(heartbeat_fd)  # (not before worker_exit: the master must hear it enter the hook)
    except OSError:
        pass
    if stop_how == ["graceful"]:
        run_exit_handlers()
    return 0


def run_exit_handlers():
    """After a graceful stop: the atexit handlers, as a normal exit of the interpreter runs them
    (logging's flush among them). The hub still runs, so a handler that joins a patched thread
    (a greenlet) or sends on a socket gets it done. An exception in one is printed and the next
    runs, as at interpreter exit. Not after a fast stop or SIGABRT: those are meant to be quick."""
    import atexit

    atexit._run_exitfuncs()


def call_stop_hook(heartbeat_fd, hooks, name, *args):
    """Run the worker hook ``name`` (worker_exit, worker_int, worker_abort: those run as the worker
    stops), having told the master it enters it, and then that it returned.

    These run when the heartbeat has stopped with the servers, or from a signal handler while
    the loop is blocked: one that does not return (an unpatched sleep, a flush to a dead
    collector) is ended by the master, whose line then names the hook instead of blaming the
    event loop (``arbiter.Arbiter._check_heartbeats``)."""
    if not callable(hooks[name]):  # unset, or a string that never resolved (call_worker skips it)
        return
    arbiter.tell_hook(heartbeat_fd, name)
    try:
        hooks.call_worker(name, *args)
    finally:
        arbiter.tell_hook(heartbeat_fd, None)


def install_abort_handler(hooks, heartbeat_fd):
    """SIGABRT runs the worker_abort hook, if one is set, then the worker exits 1 (as gunicorn's,
    and without the core file of SIGABRT's default action).

    A Python-level handler, not gevent's: the master sends SIGABRT to a worker whose event loop is
    blocked, which would never run a handler of the loop's; Python runs this one between two
    bytecodes of whatever blocks (or when a blocking system call is interrupted). faulthandler's
    dump comes first (``dump_stacks_to``, called after this): it chains to the handler it finds
    when it is enabled, so one enabled earlier (PYTHONFAULTHANDLER, -X faulthandler, a post_fork
    hook) is turned off here, or this handler would replace its dump.
    """
    import faulthandler

    def on_abort(signum, frame):
        if hooks is not None and hooks.worker is not None:
            hooks.worker.alive = False
            hooks.worker.aborted = True
            call_stop_hook(heartbeat_fd, hooks, "worker_abort", hooks.worker)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    faulthandler.disable()
    signal.signal(signal.SIGABRT, on_abort)


def _serve(heartbeat_fd, boot, config, log, reopen_logs, warn_late_patching, hooks, stop_how):
    """serve()'s body: booted, its signals handled, its servers started with a heartbeat, then stopped."""
    master_pid = os.getppid()  # the arbiter checked it is the master's, after the fork
    servers = _boot(heartbeat_fd, boot, config, log, warn_late_patching, hooks)

    import gevent  # only now: after the gevent order of _boot

    stop = _Stop(servers, stop_how, master_pid, log)
    _handle_signals(stop, heartbeat_fd, hooks, reopen_logs, log)
    # After every Python-level signal handler of the worker's (see dump_stacks_to).
    dump_stacks_to(log)
    hub = gevent.get_hub()
    # --metrics-bind: the worker's stats.WorkerStats, which the process model gave its servers
    # (alone, or beside --statsd-host's sink).
    stats = worker_stats(next((server.stats for server in servers if getattr(server, "stats", None) is not None), None))
    if config.max_blocking_time:
        _report_blocking(log, config.max_blocking_time, hub, stats)
    limit = _worker_init(config, hooks, log)

    for server in servers:
        server.start()
    interval = 1.0
    if config.timeout:
        interval = max(0.05, min(1.0, config.timeout / 4.0))
    beat = _Heartbeat(heartbeat_fd, servers, limit, config.max_requests, log, lambda: stop("graceful"), master_pid,
                      stats, interval)
    timer = hub.loop.timer(interval, interval)
    timer.start(beat)
    # The first report goes with READY: the master's metrics show this worker from the start.
    beat.send(arbiter.READY + (stats.report(servers) or b"" if stats is not None else b""))

    stop.stopped.wait()
    if stop_how[0] == "graceful":
        gevent.joinall([gevent.spawn(server.stop, config.graceful_timeout) for server in servers])
    else:
        gevent.joinall([gevent.spawn(server.stop, 0) for server in servers], timeout=5)
    timer.stop()
    if stats is not None:
        # What this worker counted since its last report: nothing is lost by a normal stop.
        report = stats.report(servers)
        if report is not None:
            beat.send(report)


def _boot(heartbeat_fd, boot, config, log, warn_late_patching, hooks):
    """Steps 1-5 of the module docstring up to the servers ``boot()`` returns (not started)."""
    state = prepare_gevent(config)
    if warn_late_patching and log is not None:
        from greenserve.process.patching import late_patching_warning

        # Before the application is imported: said even when that import then fails.
        warning = late_patching_warning(state)
        if warning:
            log.warning(warning)
    if hooks is not None:
        hooks.resolve_worker_hooks()  # after patching: see process.hooks
        hooks.call_boot("post_fork", hooks.server, hooks.worker)
    install_abort_handler(hooks, heartbeat_fd)
    if config.user is not None or config.group is not None:
        from greenserve.process.daemon import drop_privileges

        drop_privileges(config.user, config.group)
    return boot()


class _Stop:
    """A stop asked for: ``how`` (a list the caller reads) holds the first way, "graceful" or
    "fast", and a fast one after a graceful one replaces it; ``stopped`` is set for the worker's
    main greenlet. A fast stop stops the servers at once."""

    def __init__(self, servers, how, master_pid, log):
        from gevent.event import Event

        self.servers = servers
        self.how = how
        self.master_pid = master_pid
        self.log = log
        self.stopped = Event()

    def __call__(self, how):
        import gevent

        if not self.how:
            self.how.append(how)
            if os.getppid() != self.master_pid and self.log is not None:
                # The kernel's parent-death signal, or the heartbeat's check.
                self.log.warning(
                    "worker pid %d: the master (pid %d) is gone: stopping gracefully" % (os.getpid(), self.master_pid)
                )
        elif how == "fast":
            self.how[:] = ["fast"]
        self.stopped.set()
        if how == "fast":
            for server in self.servers:
                gevent.spawn(server.stop, 0)


def _handle_signals(stop, heartbeat_fd, hooks, reopen_logs, log):
    """The worker's signals (module docstring): TERM and QUIT ``stop()`` it, USR1 reopens the
    logs, INT runs the worker_int hook if one is set and is ignored otherwise."""
    import gevent

    def on_reopen():
        if reopen_logs is not None:
            reopen_logs()
            dump_stacks_to(log)  # the old file's descriptor is closed: its number may be reused
            if log is not None:
                # Said, so that whoever rotated the files knows when this worker has let go of
                # the old ones (lines it wrote just before may still be there).
                log.info("worker pid %d: log files reopened" % os.getpid())

    def on_quit():
        if hooks is not None:
            hooks.worker.alive = False
            call_stop_hook(heartbeat_fd, hooks, "worker_int", hooks.worker)
        stop("fast")

    if hooks is not None and hooks["worker_int"] is not None:
        # Ctrl-C: the hook runs (a stack dump, say); stopping stays the master's decision.
        gevent.signal_handler(signal.SIGINT, call_stop_hook, heartbeat_fd, hooks, "worker_int", hooks.worker)
    else:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    gevent.signal_handler(signal.SIGTERM, stop, "graceful")
    gevent.signal_handler(signal.SIGQUIT, on_quit)
    gevent.signal_handler(signal.SIGUSR1, on_reopen)


def _worker_init(config, hooks, log):
    """The request limit (--max-requests and its jitter) as the post_worker_init hook left it,
    having run that hook, if there are hooks."""
    limit = arbiter.jittered(config.max_requests, config.max_requests_jitter)
    if hooks is not None:
        # gunicorn's worker.max_requests: the limit with its jitter, sys.maxsize for none; a
        # post_worker_init may change it (gunicorn.conf.py files add a jitter of their own).
        hooks.worker.max_requests = limit or sys.maxsize
        # After the stop handlers, as in gunicorn: from here a TERM is a graceful stop (and runs
        # worker_exit); before them it ends the worker at once, with nothing in flight.
        hooks.call_boot("post_worker_init", hooks.worker)
        hooks.worker.booted = True
        limit = _hook_limit(hooks.worker.max_requests, limit, log)
    return limit


def dump_stacks_to(log):
    """Have SIGABRT (the master's, for a silent event loop) and fatal signals (SIGSEGV in a C
    extension, ...) write every thread's stack to the error log before the worker dies.

    faulthandler writes from the signal handler itself, so the stack is had even while the loop
    spins in code that never returns to the interpreter, where no Python handler can run. It
    writes to a descriptor: the error log's file (``log.stream``), else standard error; call
    again after the log files are reopened. After the dump faulthandler puts back the handler it
    found when first enabled and raises the signal again: a Python-level SIGABRT handler (one
    that runs a worker_abort hook and exits) chains after the dump only if it was installed
    before this is first called; installed after, it would replace the dump.
    """
    import faulthandler

    stream = getattr(log, "stream", None)
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # a logging.Logger, a StringIO: no descriptor
        stream = sys.stderr
    try:
        faulthandler.enable(stream, all_threads=True)
    except (AttributeError, OSError, RuntimeError, ValueError) as exc:
        if log is not None:
            log.warning("worker pid %d: no stack dump on SIGABRT (faulthandler: %s)" % (os.getpid(), exc))


def _hook_limit(value, limit, log):
    """The request limit after post_worker_init: what the hook left in worker.max_requests."""
    try:
        value = int(value)
    except (TypeError, ValueError):
        log.error("worker pid %d: post_worker_init set worker.max_requests to %r, not a number: kept %d"
                  % (os.getpid(), value, limit))
        return limit
    return 0 if value >= sys.maxsize or value <= 0 else value


class _Heartbeat:
    """Called by a timer on the worker's event loop: proves the loop runs, asks the master to
    recycle the worker after ``limit`` requests (``--max-requests``, ``max_requests`` before
    its jitter), and stops it gracefully when its master is gone (where the kernel's parent-death
    signal is not to be had: see ``arbiter._die_with``).

    A worker that reached its limit serves on: the master forks its replacement and sends it
    SIGTERM once that one serves (``arbiter.Arbiter._recycle``), so that a single worker's
    restart leaves no moment without one accepting."""

    def __init__(self, fd, servers, limit, max_requests, log, stop, master_pid, stats=None, interval=1.0):
        self.fd = fd
        self.stats = stats  # stats.WorkerStats (--metrics-bind): a report rides on each beat
        self.interval = interval
        self.due = 0.0  # when this timer should run next (for the loop's lag)
        self.servers = servers
        self.limit = limit
        self.max_requests = max_requests
        self.log = log
        self.stop = stop
        self.master_pid = master_pid
        self.asked = False  # for a replacement (--max-requests)

    def __call__(self):
        if os.getppid() != self.master_pid:
            self.stop()  # (it says why; a second call does nothing)
            return
        stats = self.stats
        if stats is None:
            self.send(arbiter.HEARTBEAT)
        else:
            now = monotonic()
            if self.due:
                stats.loop_lag = max(stats.loop_lag, now - self.due)
            self.due = now + self.interval
            # One write: the beat and the snapshot (below PIPE_BUF: it arrives whole).
            self.send(arbiter.HEARTBEAT + (stats.report(self.servers) or b""))
        if self.limit and not self.asked:
            served = sum(getattr(server, "requests_served", 0) for server in self.servers)
            if served >= self.limit:
                self.asked = self.send(arbiter.RECYCLING)  # (not sent: asked again at the next beat)
                if self.asked and self.log is not None:
                    self.log.info(
                        "worker pid %d served %d requests (%s): starting its replacement; it stops once that "
                        "one serves" % (os.getpid(), served, "--max-requests %d" % self.max_requests if self.max_requests
                                        else "the limit post_worker_init set, %d" % self.limit)
                    )

    def send(self, data):
        """Write ``data`` to the master; False if it could not be."""
        try:
            os.write(self.fd, data)
        except BlockingIOError:
            return False  # the master has not read the last beats yet: it knows we are alive
        except OSError:
            return False  # the master is gone; the next signal or the parent-death check ends us
        return True


def _report_blocking(log, max_blocking_time, hub, stats=None):
    """Log each time the event loop is blocked (gevent's monitor thread) as one compact warning.

    gevent's monitor checks every ``max_blocking_time`` and reports at each check while the loop
    stays blocked, so one request that blocks for 1 s with a threshold of 0.1 s is several
    reports; each is a dump of every thread and greenlet (about 50 lines), which gevent also
    prints to stderr. Here one blocking is one warning: the first report is logged, later ones
    are dropped until the loop runs again (a callback it runs as soon as it gets control), and
    gevent's printed copy is turned off.
    """
    import gevent
    from gevent import events

    gevent.config.print_blocking_reports = False
    reported = []  # non-empty from a report until the loop runs again

    def loop_ran():
        del reported[:]

    def subscriber(event):
        if not isinstance(event, events.EventLoopBlocked) or reported:
            return
        reported.append(event)
        if stats is not None:
            stats.loop_blocked += 1
        hub.loop.run_callback_threadsafe(loop_ran)
        if log is not None:
            log.warning("the event loop was blocked for more than %.3g s (--max-blocking-time)%s"
                        % (max_blocking_time, _blocked_stack(event, hub)))

    events.subscribers.append(subscriber)


# The innermost frames of a blocked stack that the warning shows: where it blocked, and the
# application's calls leading there. Deeper stacks (a framework's middleware) are cut at the
# outer end, with a count.
_BLOCKED_FRAMES = 16


def _blocked_stack(event, hub):
    """The end of the warning: the stack of what blocked, from gevent's report, innermost call last.

    Frames of gevent and greenserve before the first frame of other code (the greenlet's start,
    the connection loop) are left out: they are the same in every report.
    """
    import re

    import gevent

    stack = ""
    for index, line in enumerate(event.info[:-1]):
        if isinstance(line, str) and line.startswith("Blocked Stack"):
            stack = event.info[index + 1]
            break
    frames = [frame.rstrip("\n") for frame in re.split(r'(?m)^(?=  File ")', stack or "") if frame.strip()]
    if not frames:
        return " by %r (gevent's report has no stack)" % (event.greenlet,)
    package = os.path.dirname(os.path.dirname(__file__))  # greenserve/, spelled as its frames are
    ours = tuple('  File "%s%s' % (directory, os.sep) for directory in (os.path.dirname(gevent.__file__), package))
    first = 0
    while first < len(frames) - 1 and frames[first].startswith(ours):
        first += 1
    shown = frames[first:][-_BLOCKED_FRAMES:]
    left_out = len(frames) - first - len(shown)
    return "; %s blocked it, innermost call last%s:\n%s" % (
        "the event loop's own greenlet (a callback)" if event.greenlet is hub else "a greenlet",
        " (%d outer frames left out)" % left_out if left_out else "",
        "\n".join(shown))

"""The pre-fork master: owns the listeners, forks the workers, watches their event loops, and turns
signals into graceful stops, reloads and resizes. It never handles a request.

Nothing here imports gevent or anything of HTTP. The master must not own a gevent hub when it
forks (the children would share its loop's file descriptors and resolver threads), so it waits
with the *original* ``select.select``, captured when this module is imported -- before the CLI
monkey-patches anything, even with ``--preload``.

Signals follow gunicorn's conventions, so operators' habits carry over:

  TERM, INT   graceful stop: workers stop accepting, finish in-flight requests (up to the graceful
              timeout), exit; the master exits 0 when all are gone. A second one: close now.
  QUIT        fast stop: workers close every connection now.
  HUP         graceful reload: new workers (with freshly imported code) start first; the old ones
              are told to stop only once as many new ones are serving. No request is refused.
  TTIN, TTOU  one worker more, one fewer.
  USR1        reopen log files (after logrotate moved them); forwarded to the workers.
  USR2, WINCH binary upgrade (process.upgrade): a new master of the new code on the same sockets;
              WINCH stops the old master's workers, which HUP starts again (a rollback).

Each worker holds the write end of a pipe to the master and writes a byte to it from a timer on
its event loop (``process.worker``): a worker whose loop is blocked -- CPU-bound code, a blocking
call gevent did not patch -- stops writing, and after ``timeout`` seconds the master sends it
SIGABRT, on which the worker writes every thread's stack to the error log (faulthandler), then
SIGKILL ``ABORT_GRACE`` seconds later if it is still there, and starts another. A thread could
not prove this: it keeps running while the loop is stuck.
The same pipe carries the few other things a worker tells the master: that it serves (READY),
that it asks to be recycled (RECYCLING, --max-requests), why it cannot start (FAILED and a
line, which a --daemon launcher prints), and which hook it is in as it stops (HOOK): a
worker_exit, worker_int or worker_abort hook gets the graceful timeout, and one that does not
return is ended with a line naming it.

A worker is recycled (--max-requests, --max-worker-memory, --max-worker-lifetime) the way a
reload replaces a generation, one worker at a time: it leaves the current generation, so the
master forks its replacement, and it goes on serving until the generation has as many workers
serving as it should; only then is it told to stop gracefully. Capacity never dips, and a
replacement that cannot start leaves the old worker serving. The master reads each worker's
memory and age about once a second, from its loop: nothing is added to a request's path.
"""

import errno
import os
import select
import signal
import sys
import time

from greenserve.process.slots import SlotTable

# The originals, whatever monkey-patching happens after this import (see the module docstring).
_select = select.select
_signal = signal.signal
_monotonic = time.monotonic
_fork = getattr(os, "_original_fork", None) or os.fork

EXIT_USAGE = 2  # the worker printed a one-line usage error (an import string that does not resolve)
EXIT_BOOT_ERROR = 3  # the application raised while loading: the worker printed its traceback

HEARTBEAT = b"."
READY = b"R"
RECYCLING = b"M"  # the worker served --max-requests: it asks for a replacement, and serves on
FAILED = b"E"  # followed by one line, the last thing a worker says: why it cannot start
HOOK = b"H"  # then the hook it enters as it stops (worker_exit, ...), or nothing once it returned; a newline

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

# A worker sent SIGABRT for a silent event loop has this long to exit before SIGKILL. Its stack
# dump is written from the signal handler itself (faulthandler: milliseconds, even while the
# loop spins); the rest is for a Python-level SIGABRT handler, which runs only once the blocked
# code returns to the interpreter, and its clean-up (a worker_abort hook flushing a log or a
# trace exporter). Two seconds covers that, and keeps a stuck worker from holding its slot
# much past --timeout (gunicorn's SIGKILL follows its SIGABRT at its next check, about 1 s).
ABORT_GRACE = 2.0

class StopMaster(Exception):
    """Raised by a callback of the master's (a server hook) to stop it: the message is one line
    for the user, said once, and the master exits with EXIT_USAGE."""

# What the command's master does with a stop signal once its loop has ended (Arbiter.ends_process).
_STOPS = (signal.SIGTERM, signal.SIGQUIT)


def _stopping_already(signum, frame):
    """TERM or QUIT to a master whose workers are gone: its stop is done but for the teardown.
    A Python handler, not SIG_IGN, which what on_exit starts would inherit through exec."""
_HANDLED = ("SIGTERM", "SIGINT", "SIGQUIT", "SIGHUP", "SIGTTIN", "SIGTTOU", "SIGUSR1", "SIGUSR2", "SIGWINCH", "SIGCHLD")
# Boot failures in a row back the restarts off: 0.1 s, 0.2 s, ... up to this.
_MAX_BACKOFF = 10.0
# Before any worker has served, this many boot failures in a row stop the master (about 3 s of
# backoff). Once one has served, failures are retried forever: a database down during a reload
# should not take the server with it.
_GIVE_UP_AFTER = 5
# How often the master reads each worker's memory and age (--max-worker-memory, --max-worker-lifetime):
# a leak grows over minutes, and the reads cost the master 10 us per worker, more for one near its
# limit (see worker_memory).
_LIMIT_CHECK_INTERVAL = 1.0
_MiB = 1024 * 1024


class Worker:
    """What the master knows of one worker process."""

    __slots__ = (
        "pid", "number", "generation", "pipe", "started", "last_beat", "ready", "signalled", "planned", "failure",
        "retire_at",
        "aborted",
        "hook_worker",
        "exit_reason",
        "hook",
        "hook_entered",
        "slot",
        "table",
        "reopen_pending",
    )

    def __init__(self, pid, number, generation, pipe, now):
        self.pid = pid
        self.number = number
        self.generation = generation
        self.pipe = pipe  # read end of the heartbeat pipe
        self.started = now
        self.last_beat = now
        self.ready = False
        self.signalled = None  # the stop signal sent, if any
        self.planned = None  # why its exit is expected (logged at INFO), if it is
        self.failure = None  # the line it said (tell_master) before exiting, if any
        self.retire_at = None  # when --max-worker-lifetime (with its jitter) recycles it
        self.aborted = 0.0  # when it was sent SIGABRT for a silent event loop, if it was
        self.hook_worker = None  # the process.hooks.Worker its hooks are given
        self.exit_reason = None  # why the master ended it, one of metrics.EXIT_REASONS, if it did
        self.hook = None  # the hook it said it entered as it stops, until it says it returned
        self.hook_entered = 0.0
        self.slot = None  # --sticky: its place in its generation's SlotTable (``table``)
        self.table = None
        self.reopen_pending = False  # USR1 came while it booted: it is sent once it serves


class Arbiter:
    """Run copies of ``worker_main`` in forked children until a signal says stop.

    ``worker_main(heartbeat_fd)`` runs in each child and returns its exit code; it must write
    ``READY`` to the fd once it serves and ``HEARTBEAT`` regularly after (``process.worker``
    does both). ``config`` (``settings.Config``) says how many workers, and the ``timeout`` and
    ``graceful_timeout``. ``log`` has ``info``/``warning``/``error`` methods. ``on_ready()``
    runs once, when the first worker serves. ``reopen_logs()`` runs on SIGUSR1. ``on_reload()``
    runs on SIGHUP, before the new generation is forked, so that what it renews reaches them;
    when it returns False the reload is called off (it said why). ``on_stop()`` runs once, when
    a stop (graceful or fast) begins, before the workers are told.
    ``close_in_child`` lists descriptors (ints, or objects whose ``fileno()`` is read at each
    fork, -1 once closed) that the workers must not keep open. ``hooks`` (``process.hooks.Hooks``)
    runs pre_fork, child_exit and nworkers_changed; a worker finds its own in ``hooks.worker``.
    Any callback may raise ``StopMaster`` to stop the master with one line.
    ``observer`` (``observe.stats.Sink``: --metrics-bind's ``MasterMetrics``, --statsd-host's
    ``StatsdSink``, or both) is told each worker event: what a worker wrote, a worker reaped, each
    turn of this loop (the worker count; an endpoint's sockets are served from here), a fork and
    the end. ``systemd`` (a
    ``process.systemd.Notifier``, under NOTIFY_SOCKET) is told when the workers serve, a reload
    begins and ends, a stop begins, and pinged for the watchdog from this loop.
    """

    def __init__(self, worker_main, config, log=None, on_ready=None, reopen_logs=None, close_in_child=(),
                 on_reload=None, hooks=None, on_stop=None, observer=None):
        self.worker_main = worker_main
        self.observer = observer  # observe.stats.Sink (--metrics-bind, --statsd-host), or None
        self.systemd = None  # systemd.Notifier (NOTIFY_SOCKET): sd_notify's messages
        self.upgrade = None  # process.upgrade.Upgrade (the command's): USR2, WINCH, its new master reaped
        # The command's master (the process ends after run()): a TERM or QUIT that comes while it
        # tears down (on_exit, the pidfile) changes nothing, instead of killing it with SIG_DFL
        # and turning a clean exit 0 into "killed by SIGTERM". (INT, Ctrl-C, still interrupts a
        # teardown that hangs.)
        self.ends_process = False
        self.reload_pending = False  # systemd was told RELOADING=1: READY=1 once the generation serves
        self.resized_by = "SIGTTOU"  # what the last resize came from (resize's ``why``)
        # listeners.ListenQueueCheck of the listeners whose queues the master holds (Linux), or None.
        self.listen_check = None
        self.hooks = hooks
        self.target = config.worker_count()
        self.configure(config)
        self.log = log
        self.on_ready = on_ready
        self.reopen_logs = reopen_logs
        self.on_reload = on_reload
        self.next_limit_check = 0.0
        self.on_stop = on_stop
        self.close_in_child = tuple(close_in_child)
        self.workers = {}  # pid -> Worker
        self.generation = 0
        self.stopping = None  # None, "graceful" or "fast"
        self.stop_deadline = 0.0
        self.announced = False
        self.boot_failures = 0
        self.next_spawn = 0.0
        self.exit_code = 0
        self.failure = None  # when a worker's one-line error stopped the master: that line
        self._signals = []
        self._wake_r = self._wake_w = -1
        self._numbers = set()
        # Workers forked so far. A worker reads its inherited copy, so 0 there means "the first
        # of this start" (what is the same in every worker is said by that one only).
        self.forked = 0
        # --sticky (read once, at start): the current generation's hand-over sockets
        # (process.slots.SlotTable), and every table a live worker still uses.
        self.sticky = config.sticky
        self.table = None
        self.tables = []
        # In a worker: its slot of its generation's table (process.slots.WorkerSlot), or None.
        self.worker_slot = None

    def configure(self, config):
        """Take the worker count, timeouts and recycling limits of ``config``: at start, and from
        settings read again on SIGHUP (a count changed by TTIN/TTOU is replaced, as in gunicorn)."""
        self.set_target(config.worker_count())
        self.timeout = config.timeout
        self.graceful_timeout = config.graceful_timeout
        self.reload_on_change = config.reload  # a SIGHUP comes with the next edit (process.reloader)
        self.max_memory = config.max_worker_memory
        self.max_memory_hard = config.max_worker_memory_hard
        self.lifetime = config.max_worker_lifetime
        self.lifetime_jitter = config.max_worker_lifetime_jitter

    # --- the loop ---

    def run(self):
        """Serve until stopped; return the exit code for the master process."""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        previous = {}
        for name in _HANDLED:
            signum = getattr(signal, name)
            previous[signum] = _signal(signum, self._on_signal)
        if (self.max_memory or self.max_memory_hard) and worker_memory(os.getpid()) is None:
            self._warning(
                "--max-worker-memory: this system has no /proc/PID/smaps_rollup or statm (Linux): "
                "the workers' memory is not checked"
            )
            self.max_memory = self.max_memory_hard = 0
        if self.systemd is not None:
            self.systemd.start(self.log)
        try:
            while True:
                try:
                    self._spawn_missing()
                    self._wait(self._next_timeout())
                    self._ping_watchdog()
                    self._handle_signals()
                    self._reap()
                    self._check_heartbeats()
                    if self.stopping is not None:
                        if not self.workers:
                            return self.exit_code
                        self._enforce_stop_deadline()
                    else:
                        self._check_limits()
                        self._check_listen_queues()
                        # TTOU first: a worker it retires no longer counts as serving when
                        # _retire_old_generation decides whether the outgoing ones may stop.
                        self._retire_extra()
                        self._retire_old_generation()
                except StopMaster as exc:
                    self.refuse(str(exc))
        finally:
            for signum, handler in previous.items():
                if handler is None:
                    handler = signal.SIG_DFL
                if self.ends_process and signum in _STOPS:
                    handler = _stopping_already
                try:
                    _signal(signum, handler)
                except (OSError, ValueError):
                    pass
            for worker in self.workers.values():
                os.close(worker.pipe)
            for table in self.tables:
                table.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def refuse(self, message):
        """Stop with a one-line error (standard error, and the --daemon launcher) and EXIT_USAGE."""
        self.failure = "greenserve: error: %s" % message
        sys.stderr.write(self.failure + "\n")
        sys.stderr.flush()
        self.exit_code = EXIT_USAGE
        self._stop("fast")

    def set_target(self, count):
        """Keep ``count`` workers from now on (TTIN, TTOU, a reload's new count); runs nworkers_changed."""
        old, self.target = self.target, count
        if count != old and self.hooks is not None:
            self.hooks.call_master("nworkers_changed", self.hooks.server, count, old)

    def _on_signal(self, signum, frame):
        # Only queue it: the loop acts on it, outside any half-done step of its own.
        self._signals.append(signum)
        try:
            os.write(self._wake_w, b"!")
        except OSError:
            pass  # the pipe is full: the loop is awake anyway

    def _next_timeout(self):
        timeout = 1.0
        if self.timeout:
            timeout = min(timeout, self.timeout / 4.0)
        if self.next_spawn:
            timeout = max(0.0, min(timeout, self.next_spawn - _monotonic()))
        if self.systemd is not None:
            due = self.systemd.due_in(_monotonic())
            if due is not None:
                timeout = min(timeout, due)
        return timeout

    def _wait(self, timeout):
        fds = [self._wake_r] + [worker.pipe for worker in self.workers.values()]
        writers = []
        observer = self.observer
        if observer is not None:
            fds += observer.readers()
            writers = observer.writers()
        try:
            readable, writable, _ = _select(fds, writers, [], timeout)
        except InterruptedError:
            return
        except OSError as exc:
            if exc.errno == errno.EINTR:
                return
            raise
        for fd in readable:
            if fd == self._wake_r:
                _drain(fd)
                continue
            worker = self._by_pipe(fd)
            if worker is not None:
                # Stamped when read, not when select returned: what an earlier worker's message
                # ran here (when_ready, on the first READY) may have taken seconds, and the beats
                # read after it are as fresh as the read.
                self._heard(worker, _drain(fd), _monotonic())
        if observer is not None:
            observer.turn(_monotonic(), len(self.workers), readable, writable)

    def _heard(self, worker, data, now):
        if not data:
            return
        worker.last_beat = now
        data, failed, line = data.partition(FAILED)  # the line may hold any byte: read nothing in it
        if HOOK in data:
            data = _take_hook_lines(worker, data, now)
        if self.observer is not None:
            # Its snapshots hold none of the one-byte codes (see observe.stats.WorkerStats.report).
            self.observer.worker_heard(worker.pid, data)
        if failed:
            worker.failure = line.split(b"\n", 1)[0].decode("utf-8", "replace")
        if READY in data and not worker.ready:
            self._worker_ready(worker)
        if RECYCLING in data:
            # The worker said its count and the limit in its own log line.
            self._recycle(worker, "recycled after --max-requests", "max_requests")

    def _by_pipe(self, fd):
        for worker in self.workers.values():
            if worker.pipe == fd:
                return worker
        return None

    def _worker_ready(self, worker):
        worker.ready = True
        if worker.reopen_pending:
            worker.reopen_pending = False
            self._kill(worker, signal.SIGUSR1)
        self.boot_failures = 0
        if not self.announced:
            self.announced = True
            if self.systemd is not None:
                # Before on_ready, where a --daemon launcher is let go: systemd must have the
                # daemon's MAINPID before the process it started (the launcher) exits.
                self.systemd.ready("serving: the first of %d worker(s) is up" % self.target)
            if self.on_ready is not None:
                self.on_ready()

    def _ping_watchdog(self):
        # From the loop itself: a master stuck anywhere in it stops pinging (WatchdogSec=).
        if self.systemd is not None:
            self.systemd.watchdog(_monotonic())

    # --- signals ---

    def _handle_signals(self):
        while self._signals:
            signum = self._signals.pop(0)
            name = signal.Signals(signum).name
            if signum in (signal.SIGTERM, signal.SIGINT):
                if self.stopping is None:
                    self._info(
                        "%s: stopping gracefully (up to %.0f s for in-flight requests)" % (name, self.graceful_timeout)
                    )
                    self._stop("graceful")
                else:
                    self._info("%s again: closing every connection now" % name)
                    self._stop("fast")
            elif signum == signal.SIGQUIT:
                self._info("SIGQUIT: closing every connection now")
                self._stop("fast")
            elif signum == signal.SIGHUP and self.stopping is None:
                if self.upgrade is not None:
                    self.upgrade.before_reload(self)  # the workers WINCH stopped, started again
                self._tell_systemd_reloading()
                if self.on_reload is not None and self.on_reload() is False:
                    if self.systemd is not None and self.announced:
                        # Or systemctl reload would wait out its timeout for a reload that is not coming.
                        self.systemd.ready("serving: the reload was refused (the error log says why)")
                        self.reload_pending = False
                    continue
                self.generation += 1
                # A reload is a new attempt: the new generation starts now, not after the backoff
                # of workers that could not boot (a broken edit under --reload, a bad deploy).
                self.boot_failures = 0
                self.next_spawn = 0.0
                self._info("SIGHUP: reloading: starting %d new worker(s); the old ones stop once they serve" % self.target)
            elif signum == signal.SIGTTIN and self.stopping is None:
                self.resize(self.target + 1, "SIGTTIN")
            elif signum == signal.SIGTTOU and self.stopping is None:
                self.resize(max(1, self.target - 1), "SIGTTOU")
            elif signum == signal.SIGUSR1:
                if self.reopen_logs is not None:
                    self.reopen_logs()
                self._info("SIGUSR1: log files reopened")
                for worker in list(self.workers.values()):
                    if worker.ready:
                        self._kill(worker, signal.SIGUSR1)
                    else:
                        # Its handler is set just before it serves: until then USR1's default
                        # action would end it (a reopen just after a reload killed the new workers).
                        worker.reopen_pending = True
            elif signum in (signal.SIGUSR2, signal.SIGWINCH) and self.stopping is None:
                if self.upgrade is not None:
                    self.upgrade.on_signal(self, signum)
                elif signum == signal.SIGUSR2:
                    self._warning("SIGUSR2 ignored: only the greenserve command re-executes itself (a binary upgrade)")
            # SIGCHLD only wakes the loop: _reap() runs next.

    def resize(self, count, why):
        """``count`` workers from now on, for ``why`` (SIGTTIN, SIGTTOU, the control socket's
        worker add and remove), said in one line."""
        self._info("%s: %d worker(s)" % (why, count))
        self.resized_by = why.partition(":")[0]  # the line of each worker it retires names it too
        self._resize(count)

    def _resize(self, count):
        """TTIN, TTOU: ``count`` workers from now on. With --sticky the slot count is the hash's
        modulus, which every worker must agree on: a new generation of ``count`` workers, with
        a table of ``count`` slots, replaces them all, as a reload does (docs/deployment.md)."""
        if self.sticky and count != self.target:
            self._info("--sticky: %d slots instead of %d: a new generation of %d worker(s) replaces the "
                       "running ones, which stop once it serves (their clients reconnect)" % (count, self.target, count))
            for worker in self.workers.values():
                if worker.generation == self.generation and worker.planned is None:
                    worker.planned = "--sticky: a generation of %d worker(s) serves in its place" % count
                    worker.exit_reason = "reload" if count > self.target else "scale_down"
            self.generation += 1
            self.boot_failures = 0
            self.next_spawn = 0.0
        self.set_target(count)

    def _tell_systemd_reloading(self):
        # Not before the first READY=1: to systemd the service is still starting.
        if self.systemd is not None and self.announced:
            self.systemd.reloading("reloading: the old workers serve until the new ones do")
            self.reload_pending = True

    def _stop(self, how):
        if self.stopping is None and self.systemd is not None:
            self.systemd.stopping("stopping gracefully" if how == "graceful" else "stopping: closing every connection now")
        if self.stopping is None and self.on_stop is not None:
            self.on_stop()
        self.stopping = how
        self.stop_deadline = _monotonic() + self.graceful_timeout + 5.0
        signum = signal.SIGTERM if how == "graceful" else signal.SIGQUIT
        for worker in list(self.workers.values()):
            if worker.signalled != signum:
                worker.signalled = signum
                self._kill(worker, signum)

    def _enforce_stop_deadline(self):
        if _monotonic() < self.stop_deadline:
            return
        for worker in list(self.workers.values()):
            self._warning("worker %d (pid %d) did not stop in time%s: killing it" % (
                worker.number, worker.pid, "" if worker.hook is None else " (its %s hook did not return)" % worker.hook))
            self._kill(worker, signal.SIGKILL)
        self.stop_deadline = _monotonic() + 5.0

    # --- workers ---

    def _spawn_missing(self):
        if self.stopping is not None:
            return
        current = [w for w in self.workers.values() if w.generation == self.generation]
        missing = self.target - len(current)
        if missing <= 0:
            return
        now = _monotonic()
        if now < self.next_spawn:
            return
        self.next_spawn = 0.0
        for _ in range(missing):
            self._spawn(now)

    def _spawn(self, now):
        number = 1
        while number in self._numbers:
            number += 1
        hook_worker = self.hooks.new_worker(number, self.forked + 1) if self.hooks is not None else None
        table, slot = self._slot() if self.sticky else (None, None)
        read_fd, write_fd = os.pipe()
        master_pid = os.getpid()

        def child():
            os.close(read_fd)
            for fd in [self._wake_r, self._wake_w] + [w.pipe for w in self.workers.values()]:
                os.close(fd)
            for item in self.close_in_child:
                # Read now, not when the Arbiter was made: a descriptor closed since then
                # (-1) may have had its number reused by one the child needs.
                fd = item if isinstance(item, int) else item.fileno()
                if fd >= 0:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            if self.observer is not None:
                self.observer.forked()
            if self.systemd is not None:
                self.systemd.close()
            if table is not None:
                for other in self.tables:
                    if other is not table:
                        other.close()
                self.worker_slot = table.for_worker(slot)
            if not _die_with(master_pid):
                return 0  # the master is gone: nothing to serve for
            os.environ["GREENSERVE_WORKER"] = str(number)
            if hook_worker is not None:
                hook_worker.pid = os.getpid()
                self.hooks.worker = hook_worker
            return self.worker_main(write_fd)

        pid = fork_child(child)
        os.close(write_fd)
        os.set_blocking(read_fd, False)
        self.forked += 1
        self._numbers.add(number)
        worker = self.workers[pid] = Worker(pid, number, self.generation, read_fd, now)
        worker.table, worker.slot = table, slot
        if self.lifetime:
            import random  # with --max-worker-lifetime only: not in every master's RSS

            worker.retire_at = now + self.lifetime + random.uniform(0, self.lifetime_jitter)
        if hook_worker is not None:
            hook_worker.pid = pid
            worker.hook_worker = hook_worker

    def _slot(self):
        """--sticky: the current generation's table, made when the generation needs one of
        another size (the first, TTIN, TTOU, a reload that changed the count), and the lowest
        slot of it that no worker of the generation holds: a replacement takes over the slot of
        the worker it replaces, and the clients hashed to it."""
        if self.table is None or self.table.count != self.target:
            self.table = SlotTable(self.target)
            self.tables.append(self.table)
        held = {w.slot for w in self.workers.values() if w.generation == self.generation and w.table is self.table}
        return self.table, min(set(range(self.table.count)) - held)

    def _release_table(self, table):
        """A worker of ``table`` is gone: the table closes once no live worker uses it and no
        generation will (the current one's stays: its replacements read what queued meanwhile)."""
        if table is self.table or any(w.table is table for w in self.workers.values()):
            return
        table.close()
        self.tables.remove(table)

    def _reap(self):
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self.workers.pop(pid, None)
            if worker is None:
                if self.upgrade is not None:
                    self.upgrade.reaped(self, pid, status)  # the new master of a USR2
                continue
            self._numbers.discard(worker.number)
            if worker.table is not None:
                self._release_table(worker.table)
            self._heard(worker, _drain(worker.pipe), _monotonic())  # its last words, if not read yet
            os.close(worker.pipe)
            self._worker_exited(worker, status)
            if self.observer is not None:
                self.observer.worker_exited(worker.pid, self._exit_reason(worker))
            if worker.hook_worker is not None:
                # Every death, however it came (kill -9, the OOM killer): prometheus_client's
                # mark_process_dead(worker.pid) needs exactly that.
                worker.hook_worker.alive = False
                worker.hook_worker.exit_code = os.waitstatus_to_exitcode(status)
                self.hooks.call_master("child_exit", self.hooks.server, worker.hook_worker)

    def _worker_exited(self, worker, status):
        code = os.waitstatus_to_exitcode(status)
        if self.stopping is not None or worker.signalled is not None:
            # The master ended it. Killed by the very signal it was sent is a clean end too: it
            # had not installed its handlers yet, so it had not started serving either.
            clean = code == 0 or (worker.signalled is not None and code == -worker.signalled)
            if (worker.signalled == signal.SIGKILL or worker.aborted
                    or (self.stopping is not None and code == -signal.SIGKILL)):
                pass  # said when the kill was decided (a blocked loop, the stop deadline)
            elif not clean and (self.stopping is not None or worker.planned):
                self._warning("worker %d (pid %d) %s" % (worker.number, worker.pid, _describe(code)))
            elif clean and self.stopping is None and worker.planned:
                self._info("worker %d (pid %d) stopped: %s" % (worker.number, worker.pid, worker.planned))
            return
        if code == 0 and worker.planned:
            # Not an error: it was on its way out (its replacement is already started).
            self._info("worker %d (pid %d) stopped: %s" % (worker.number, worker.pid, worker.planned))
            return
        if not worker.ready:
            if not self.announced and code == EXIT_USAGE:
                # It printed its one-line error (e.g. the application's import string does
                # not resolve): nothing would make the next worker do better.
                self.exit_code = EXIT_USAGE
                self.failure = worker.failure
                self._stop("fast")
                return
            if not self.announced and code == EXIT_BOOT_ERROR:
                # Its own line when it said one (a server hook that raised), else the usual cause.
                sys.stderr.write((worker.failure or
                    "greenserve: error: the application failed to load in the worker (see the traceback above)") + "\n"
                )
                self.exit_code = EXIT_BOOT_ERROR
                self._stop("fast")
                return
            if self.announced and code == EXIT_BOOT_ERROR and self.reload_on_change:
                # --reload: an edit that does not import. Starting it again would print the same
                # traceback every few seconds; the next change's SIGHUP starts a new generation.
                self.next_spawn = float("inf")
                self._error(
                    "worker %d (pid %d) could not load the application (the traceback above); the previous "
                    "workers serve until the next change (--reload)" % (worker.number, worker.pid)
                )
                return
            self.boot_failures += 1
            if not self.announced and self.boot_failures >= _GIVE_UP_AFTER:
                # Not one worker has ever served: whatever kills them at boot is not passing
                # (and a daemon's launcher is waiting for an answer).
                sys.stderr.write(
                    "greenserve: error: %d workers in a row exited before serving (the last one %s): giving up\n"
                    % (self.boot_failures, _describe(code))
                )
                self.exit_code = EXIT_BOOT_ERROR
                self._stop("fast")
                return
            delay = min(_MAX_BACKOFF, 0.1 * 2 ** (self.boot_failures - 1))
            self.next_spawn = _monotonic() + delay
            self._error(
                "worker %d (pid %d) %s before it served; starting another in %.1f s"
                % (worker.number, worker.pid, _describe(code), delay)
            )
            return
        self._error("worker %d (pid %d) %s; starting another" % (worker.number, worker.pid, _describe(code)))

    def _exit_reason(self, worker):
        if worker.exit_reason is not None:
            return worker.exit_reason
        if self.stopping is not None:
            return "stop"
        return "crash" if worker.ready else "boot_failure"

    def _check_heartbeats(self):
        now = _monotonic()
        for worker in list(self.workers.values()):
            if worker.signalled == signal.SIGKILL:
                continue
            if worker.aborted:  # (even if a reload has since turned the timeout off)
                if now - worker.aborted > ABORT_GRACE:
                    self._error(
                        "worker %d (pid %d) %s %.0f s after SIGABRT: killing it (SIGKILL)"
                        % (worker.number, worker.pid, "still runs" if worker.hook is None
                           else "is still in its %s hook" % worker.hook, ABORT_GRACE)
                    )
                    worker.signalled = signal.SIGKILL
                    self._kill(worker, signal.SIGKILL)
                continue
            why = self._overdue(worker, now)
            if why is not None:
                # The loop reads the pipes only in _wait, and this check runs straight after the
                # steps before it: one that kept the master busy (a when_ready hook that sleeps
                # 3 s, a stalled master) leaves what the workers wrote meanwhile unread (measured:
                # 6 beats in the pipe, the worker judged silent for 3.0 s with --timeout 2). The
                # master's busy time must not count against a worker: it is overdue only if what
                # its pipe holds says so too.
                self._heard(worker, _drain(worker.pipe), now)
                why = self._overdue(worker, now)
            if why is not None:
                self._error(
                    "worker %d (pid %d): %s Sent SIGABRT: its stack follows in the error log; SIGKILL in %.0f s if "
                    "it has not exited" % (worker.number, worker.pid, why, ABORT_GRACE)
                )
                worker.aborted = now
                worker.exit_reason = "timeout"
                worker.signalled = signal.SIGABRT
                self._kill(worker, signal.SIGABRT)

    def _overdue(self, worker, now):
        """Why ``worker`` is to be sent SIGABRT now (a sentence), or None."""
        if worker.hook is not None:
            # A hook it runs as it stops beats no more (its servers and heartbeat have stopped,
            # or a signal handler runs it in a blocked loop): the hook, not the loop, gets the
            # graceful timeout, and the line names it.
            if now - worker.hook_entered > self.graceful_timeout:
                return "the %s hook did not return within the graceful timeout (%.0f s)." % (
                    worker.hook, self.graceful_timeout)
            return None
        silent = now - worker.last_beat
        if self.timeout and silent > self.timeout:
            return ("its event loop gave no sign of life for %.1f s (timeout %.0f s): blocked by CPU-bound or "
                    "unpatched blocking code?" % (silent, self.timeout))
        return None

    def _check_limits(self):
        """Recycle the workers past --max-worker-memory or --max-worker-lifetime; kill those past
        --max-worker-memory-hard. About once a second: the loop wakes at least that often."""
        if not (self.max_memory or self.max_memory_hard or self.lifetime):
            return
        now = _monotonic()
        if now < self.next_limit_check:
            return
        self.next_limit_check = now + _LIMIT_CHECK_INTERVAL
        for worker in list(self.workers.values()):
            if worker.signalled is not None:
                continue
            # Not one already on its way out, nor one still booting: a replacement would be no
            # better off (and an application that needs more than the limit just to start would
            # have its workers replaced in a loop).
            recyclable = worker.generation == self.generation and worker.ready
            limits = [self.max_memory_hard] + ([self.max_memory] if recyclable else [])
            limits = [limit for limit in limits if limit]
            if limits:
                used = worker_memory(worker.pid, within=min(limits) * _MiB)
                if used is None:
                    continue  # it has just exited: _reap() says how
                if self.max_memory_hard and used > self.max_memory_hard * _MiB:
                    self._error(
                        "worker %d (pid %d) uses %d MiB (--max-worker-memory-hard %d): killing it (SIGKILL); "
                        "starting another" % (worker.number, worker.pid, used // _MiB, self.max_memory_hard)
                    )
                    worker.signalled = signal.SIGKILL
                    worker.exit_reason = "memory_hard"
                    self._kill(worker, signal.SIGKILL)
                    continue
                if recyclable and self.max_memory and used > self.max_memory * _MiB:
                    self._info(
                        "worker %d (pid %d) uses %d MiB (--max-worker-memory %d): starting its replacement; "
                        "it stops once that one serves" % (worker.number, worker.pid, used // _MiB, self.max_memory)
                    )
                    self._recycle(worker, "recycled: it used %d MiB (--max-worker-memory %d)"
                                  % (used // _MiB, self.max_memory), "memory")
                    continue
            if recyclable and worker.retire_at is not None and now >= worker.retire_at:
                self._info(
                    "worker %d (pid %d) has run %.0f s (--max-worker-lifetime %g%s): starting its replacement; "
                    "it stops once that one serves"
                    % (worker.number, worker.pid, now - worker.started, self.lifetime,
                       " plus %.2f s of its jitter" % (worker.retire_at - worker.started - self.lifetime)
                       if self.lifetime_jitter else "")
                )
                self._recycle(worker, "recycled after --max-worker-lifetime", "lifetime")

    def _recycle(self, worker, why, reason):
        """Replace ``worker`` as a reload replaces a generation: it leaves the current one, so
        _spawn_missing forks its replacement, and serves on until _retire_old_generation finds the
        current generation serving in full. Once only: a worker on its way out stays so."""
        if worker.generation != self.generation or worker.signalled is not None:
            return
        worker.generation = None
        worker.planned = why
        worker.exit_reason = reason

    def _retire_old_generation(self):
        # Workers of the current generation that serve and are not stopping (a TTOU'd one has
        # stopped accepting: it does not count).
        ready = sum(1 for w in self.workers.values()
                    if w.generation == self.generation and w.ready and w.signalled is None)
        if ready < self.target:
            return
        if self.reload_pending:
            self.reload_pending = False
            self.systemd.ready("serving: reloaded, %d new worker(s)" % self.target)
        for worker in list(self.workers.values()):
            if worker.generation != self.generation and worker.signalled is None:
                worker.signalled = signal.SIGTERM
                if worker.planned is None:
                    worker.planned = "reloaded (SIGHUP): a worker of the new generation serves in its place"
                    worker.exit_reason = "reload"
                self._kill(worker, signal.SIGTERM)

    def _retire_extra(self):
        current = [w for w in self.workers.values() if w.generation == self.generation and w.signalled is None]
        extra = len(current) - self.target
        if extra <= 0:
            return
        for worker in sorted(current, key=lambda w: w.started)[:extra]:
            worker.signalled = signal.SIGTERM
            worker.planned = "one worker fewer (%s)" % self.resized_by
            worker.exit_reason = "scale_down"
            self._kill(worker, signal.SIGTERM)

    def _kill(self, worker, signum):
        try:
            os.kill(worker.pid, signum)
        except ProcessLookupError:
            pass

    # --- logging ---

    def _info(self, message):
        if self.log is not None:
            self.log.info(message)

    def _check_listen_queues(self):
        """Warn when a listen queue overflows (listeners.ListenQueueCheck; about once a second)."""
        if self.listen_check is not None:
            message = self.listen_check.check(_monotonic())
            if message is not None:
                self._warning(message)

    def _warning(self, message):
        if self.log is not None:
            self.log.warning(message)

    def _error(self, message):
        if self.log is not None:
            self.log.error(message)


def fork_child(main):
    """Fork; the child runs ``main()`` and exits with the code it returns, never returning here.

    An exception in the child is its traceback and exit code 1 (SystemExit: its code); the
    child leaves with os._exit, so that nothing of the master's (atexit handlers, buffered
    output, the arbiter's finally clauses) runs twice. Returns the child's pid.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    # A signal sent to the new child before it has put back the default handlers would run the
    # master's (a copy that queues it where nobody looks): a TERM right after the fork (a stop
    # as a replacement starts) would be lost, and the worker would serve on. Blocked until
    # then, it stays pending and takes its default action.
    handled = [getattr(signal, name) for name in _HANDLED]
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, handled)
    pid = _fork()
    if pid != 0:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return pid
    code = 1
    try:
        for signum in handled:
            _signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        code = main()
    except SystemExit as exc:
        code = exc.code
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)


def _die_with(master_pid):
    """Have the kernel send this worker SIGTERM (a graceful stop) when its master dies, however
    it dies: a master killed with SIGKILL or by the OOM killer cannot tell its workers, and
    orphans would go on serving an old version (Linux: PR_SET_PDEATHSIG). Elsewhere the worker's
    heartbeat notices the new parent (process.worker). False if the master is gone already."""
    if sys.platform.startswith("linux"):
        _parent_death_signal(signal.SIGTERM)  # if there is no prctl to be had, the heartbeat's check remains
    # The master may have died between fork() and prctl(): then nothing will signal us.
    return os.getppid() == master_pid


def _parent_death_signal(signum):
    """prctl(PR_SET_PDEATHSIG, signum); True when set. The compiled build calls it in C (_csys);
    the pure one through ctypes, which is ~0.4 MB of each worker's RSS."""
    from greenserve._accel import compiled

    if compiled():
        from greenserve._csys import parent_death_signal

        return parent_death_signal(signum)
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def tell_master(fd, line):
    """In a worker that cannot start, before it exits with EXIT_USAGE: its one-line error, for
    the master (which has no terminal with --daemon, but whose launcher does)."""
    try:
        # One write far below PIPE_BUF arrives whole, after any beat written before it.
        os.write(fd, FAILED + line.encode("utf-8", "replace")[:1024] + b"\n")
    except OSError:
        pass  # the master is gone: nobody to tell


def tell_hook(fd, name):
    """In a worker: that it enters the hook ``name`` as it stops (None: that the hook returned),
    so that the master gives the hook the graceful timeout and names it if it does not return."""
    try:
        os.write(fd, HOOK + (name.encode("ascii") if name else b"") + b"\n")  # whole: far below PIPE_BUF
    except OSError:
        pass  # the master is gone: nobody to tell


def _take_hook_lines(worker, data, now):
    """``data`` without its HOOK lines (tell_hook), the last of which says which hook ``worker`` is in."""
    kept = []
    while True:
        before, found, after = data.partition(HOOK)
        kept.append(before)
        if not found:
            return b"".join(kept)
        name, _, data = after.partition(b"\n")
        worker.hook = name.decode("ascii", "replace") or None
        worker.hook_entered = now


def _drain(fd):
    data = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except BlockingIOError:
            return data
        except OSError:
            return data
        if not chunk:
            return data
        data += chunk


def worker_memory(pid, within=0):
    """The memory process ``pid`` holds that no other process shares, in bytes (its USS); None
    if it cannot be read (the process is gone, or the system has no /proc).

    Not its RSS: RSS counts every page the process maps, shared or not, so with --preload each
    worker would be charged the whole application the master imported, and a limit would have
    to sit above that. Not its PSS either: PSS splits shared pages among the processes sharing
    them, so a worker's count would change when another worker starts or stops. The private
    pages are what a leak grows, what the worker's exit gives back, and they grow too when the
    worker writes to pages it shares with the master (copy-on-write: that memory is real).

    /proc/PID/smaps_rollup (Linux 4.14) sums them, but the kernel walks the page tables for it:
    about 9 ms per GiB resident (measured), against 10 us for /proc/PID/statm's resident size.
    The private pages are part of the resident ones, so a resident size not above ``within``
    (bytes) is returned as it is: no limit is reached, and the walk is saved. Without
    smaps_rollup (before Linux 4.14, or not readable by the master), statm's resident less its
    file-backed pages (anonymous memory, which counts copy-on-write pages still shared with the
    master) is the nearest.
    """
    try:
        with open("/proc/%d/statm" % pid, "rb") as f:
            fields = f.read().split()
        page = os.sysconf("SC_PAGE_SIZE")
        resident, shared = int(fields[1]) * page, int(fields[2]) * page
    except (OSError, ValueError, IndexError):
        return None
    if resident <= within:
        return resident
    try:
        with open("/proc/%d/smaps_rollup" % pid, "rb") as f:
            return sum(int(line.split()[1]) for line in f if line.startswith(b"Private_")) * 1024
    except (OSError, ValueError, IndexError):  # (also: not ours to read, as statm is to anyone)
        return resident - shared


def _describe(code):
    if code < 0:
        try:
            return "was killed by %s" % signal.Signals(-code).name
        except ValueError:
            return "was killed by signal %d" % -code
    return "exited with code %d" % code


def jittered(max_requests, jitter):
    """The request count after which one worker restarts: max_requests plus up to jitter more."""
    if not max_requests:
        return 0
    if not jitter:
        return max_requests
    import random  # with --max-requests-jitter only: not in every master's RSS

    return max_requests + random.randint(0, jitter)

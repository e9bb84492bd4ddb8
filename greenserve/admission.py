"""Overload control: past its capacity a worker answers new requests 503 at once, and serves the rest at capacity.

Without it, every request is admitted: under more load than one worker's CPU can serve, all its
greenlets share that CPU and every request becomes slow together, until clients time out and
the worker spends its time on answers nobody waits for (issue 40: at 3x capacity, 2 % of
capacity answered within a second). With it, a request that would wait too long is told so in
microseconds, without calling the application, and those admitted are served at the speed of
an unloaded worker.

**The signal.** Waiting on I/O costs a greenlet nothing, so a count of requests in progress says
nothing of load (5,000 requests waiting on a database are no load); what saturates a gevent
worker is its one CPU, and it shows in the event loop. Each turn of gevent's loop polls for what
is ready, then runs every ready greenlet one after the other. A request's **queue delay** is the
time from the poll that found it (``loop.now()``, which libev and libuv set right after the
poll) to its application's start: the CPU the greenlets run before it in that turn took. The
time its head waited before that poll is the previous turn's length, which the **loop lag**
shows: a timer armed every ``TICK`` seconds while requests arrive, and how late it runs. A
trusted proxy's ``X-Request-Start`` adds the time the request waited before greenserve
(``proxy_queue``).

**The control law** (CoDel's, for a loop instead of a packet queue), in two states. A burst is
a good queue: a page's twenty requests arriving at once wait for each other once, and are all
served. A standing queue is a bad one: turn after turn the loop finds more than it can run
within the target. **Serving**: every request is admitted until one's queue delay passes the
target while the queue has stood past it for ``INTERVAL`` (100 ms, CoDel's: every turn since had
a request past it; a turn without one, or with no request at all, drains it). That request is
shed and **shedding** begins: each turn of the loop starts one admitted application, after the
turn's other requests are decided; an admitted request that finds this turn's taken waits in a
queue of its own (``runq``, first in, first out), one of which a timer starts at each next turn.
A new request is admitted while that queue holds less than ``QUEUE_SHARE`` of the target in
work, and answered 503 at once (~30 us) otherwise. So a turn is one application's CPU and the
503s of what arrived meanwhile: a 503 waits at most about one request's work for its turn's
poll, and the CPU runs admitted work nearly all the time (goodput at capacity), the queue never
empty. Shedding ends after ``CALM`` (a second) without a shed. The loop lag (a 10 ms timer's
lateness) is reported (``loop_delay``).

The target is ``queue_target`` (20 ms), or ``WORK_FACTOR`` times the loop time an admitted
request takes before it lets go (measured, a moving average) when that is longer: a
view that needs 50 ms of CPU is not shed because a second one waited for the first. Whatever
the loop's state, a request stamped by a trusted proxy whose whole queue time (the proxy's
included) passed ``max_queue_time`` is shed: its client has likely given up. (Without a stamp the
loop's own wait is the law's alone: ten requests blocking the loop half a second each, a burst,
are served.) The health-check paths are always
answered. Measured choices and their numbers: docs/performance.md, "Overload".

This module is on the connection's floor: the responder calls ``admit`` before each application
call (``wsgi.Responder.respond``), the server makes one ``Admission`` per server when
``overload_control`` is on (the default), and it tells the observers through ``stats.Sink``.
"""

import sys
from time import monotonic
from time import time as wall_clock

from collections import deque

from gevent import sleep as _sleep
from gevent.hub import Waiter

from greenserve._accel import compiled

if compiled():
    from greenserve._csys import SysCalls

    _SYS = SysCalls()  # the C clock
else:
    _SYS = None
# The C clock only where CPython's monotonic() reads the same one (see connection.clock).
_C_CLOCK = _SYS is not None and sys.platform.startswith("linux")

# What stats.Sink.queued is told of a request: admitted, or shed for which reason.
ADMITTED = 0
SHED_OVERLOAD = 1  # it waited in the loop past the target while the queue stood
SHED_LATE = 2  # stamped by a trusted proxy, it queued past max_queue_time in all
# Retry-After (RFC 9110 §10.2.3) of a shed request: a second, past the bursts a target covers.
RETRY_AFTER = "1"
# The loop lag timer's period while requests arrive; it stops with them (no wake-ups when idle).
TICK = 0.01
# How long the queue must have stood past the target, every turn, before requests are shed:
# CoDel's interval. A burst shorter than this is served whole; at 3x capacity, the requests
# admitted while it runs are the only ones that wait long (about 1 % of a 20 s overload's).
INTERVAL = 0.1
# Shedding ends when this many seconds shed nothing: an overload near capacity would otherwise
# stop and start it every few turns, and each start lets a queue stand for INTERVAL first
# (measured at 1.5x capacity: p99 of the 200s 120-130 ms in the seconds it flapped, 33 ms in those
# it held).
CALM = 1.0
# While shedding, admitted requests wait for a turn of their own while the ones already waiting
# hold less than this share of the target in work: the 200s then wait at most about half the
# target more than at capacity. (Before it, a bucket admitted 5 ms of work a turn: turns of two
# 2 ms requests, and the 503s of a 3x overload waited for them: p99 19-22 ms.)
QUEUE_SHARE = 0.5
# The interval is at least this many targets: where the target grew with slow views (below),
# their bursts are longer too (measured: ten requests that each block the loop 0.5 s, a burst a
# test of the command sends, had three shed with a fixed 100 ms).
TARGETS = 5.0
# The target is at least this many times the loop time an admitted request takes (see above).
WORK_FACTOR = 4.0
# The moving average's weight for each new measure of that time (about the last 20 requests).
WORK_WEIGHT = 0.05
# While shedding, one warning per this many seconds: how many, and why.
WARN_EVERY = 10.0
_NEVER = -1e300  # (a time long before any other)


def _defer():
    """Let the loop run what is ready before going on (gevent.sleep(0): a callback)."""
    _sleep(0)


def request_start(value):
    """Seconds since the epoch from an ``X-Request-Start`` value, or None if it is not one.

    Proxies write it in several units: nginx ``t=${msec}`` (seconds, with milliseconds as a
    fraction), Heroku's router milliseconds, Apache's ``%t`` and New Relic microseconds (with
    ``t=``), HAProxy whatever its rule writes. The unit is told by the magnitude: any of them for
    a time after 1973 is above 1e11 unless it is in seconds."""
    text = value.strip()
    if text[:2] in ("t=", "T="):
        text = text[2:]
    try:
        number = float(text)
    except ValueError:
        return None
    if not number > 0.0 or number == float("inf"):
        return None
    while number > 1e11:
        number /= 1000.0
    return number


class Admission:
    """One server's overload control (see the module docstring): ``admit`` before each
    application call; None admits, a reason (str) sheds."""

    # The fields admission.pxd declares, as slots in the pure build too.
    __slots__ = (
        "server", "stats", "loop", "clock", "target", "max_queue_time", "health_paths", "trusted", "began", "checker",
        "turn", "over", "over_since", "last_delay", "work", "lag", "ticker", "ticking", "due", "seen", "warned_at",
        "shed_queue", "shed_late", "longest", "shedding", "last_shed", "defer", "wait_turn", "runq", "runner",
        "ran_turn",
    )

    def __init__(self, server, loop, target, max_queue_time, health_paths, trusted, clock=None):
        self.server = server  # for its error_log, on the warning's path
        self.stats = getattr(server, "stats", None)  # a stats.Sink or None; the server's setter renews it
        self.loop = loop
        self.clock = clock  # a test's own clock, or None: monotonic's
        self.target = target
        self.max_queue_time = max_queue_time
        self.health_paths = frozenset(health_paths)
        self.trusted = trusted  # proxy.TrustedProxies whose X-Request-Start counts, or None
        # When this turn of the loop began (its poll returned): its check watcher's time.
        self.began = 0.0
        self.checker = None
        # The control's state: the turn of the loop the last request came in (its start), whether
        # a request of this turn waited past the target, since when requests have (every turn
        # since had one: the queue stands once that is INTERVAL ago), and the queue delay of this
        # turn's last request if it was admitted (-1).
        self.turn = 0.0
        self.over = False
        self.over_since = _NEVER
        self.last_delay = -1.0
        # Shedding (the queue stood past the target for INTERVAL), and when the last was shed.
        self.shedding = False
        self.last_shed = _NEVER
        self.defer = _defer  # (a test's own)
        self.wait_turn = self._wait_turn  # (a test's own)
        # While shedding: the admitted requests waiting for a turn of their own (Waiters), the
        # timer that starts one at each turn, and the turn (its ``began``) that started one last.
        self.runq = deque()
        self.runner = None
        self.ran_turn = _NEVER
        self.work = 0.0  # loop seconds an admitted request takes before it lets go (moving average)
        # The loop lag: its timer, made at the first request, runs while requests arrive.
        self.lag = 0.0
        self.ticker = None
        self.ticking = False
        self.due = 0.0
        self.seen = 0  # requests since the last tick
        # The warning: what was shed since the last one.
        self.warned_at = _NEVER
        self.shed_queue = 0
        self.shed_late = 0
        self.longest = 0.0

    def _now(self):
        if self.clock is not None:
            return self.clock()
        if _C_CLOCK:
            return _SYS.monotonic()
        return monotonic()

    def admit(self, environ, conn_environ):
        """None: call the application. Otherwise the reason the request is shed, for the access
        log (the responder answers 503). ``conn_environ``: the connection's own keys, whose
        REMOTE_ADDR (before a proxy's X-Forwarded-For) says whether X-Request-Start is trusted."""
        if not self.ticking:
            self._start_ticking()
        now = self._now()
        began = self.began
        delay = now - began
        if began != self.turn:
            self.turn = began
            self.last_delay = -1.0
        elif self.last_delay >= 0.0:
            # From the previous admitted request of this turn to this one: what it cost the loop.
            if self.work:
                self.work += (delay - self.last_delay - self.work) * WORK_WEIGHT
            else:
                self.work = delay - self.last_delay
        self.seen += 1
        queued = delay
        stamped = False  # a trusted proxy said when it received the request
        start = environ.get("HTTP_X_REQUEST_START")
        if start is not None and self.trusted is not None:
            waited = self._proxy_queue(start, conn_environ)
            if waited >= 0.0:
                stamped = True
                queued += waited
        target = self.target
        if self.work * WORK_FACTOR > target:
            target = self.work * WORK_FACTOR
        shed = ADMITTED
        if self.shedding:
            shed = self._budget(environ, queued, target, stamped)
        elif queued > target:
            shed = self._shed(environ, now, delay, queued, target, stamped)
        stats = self.stats
        if stats is not None:
            stats.queued(queued, shed)
        if shed == ADMITTED:
            if not self.shedding:
                self.last_delay = delay
                return None
            self.last_delay = -1.0
            self._take_turn()
            return None
        self.last_delay = -1.0
        self.last_shed = now
        if shed == SHED_LATE:
            reason = "queued %.0f ms > max_queue_time %.0f ms" % (queued * 1e3, self.max_queue_time * 1e3)
        else:
            reason = "overload: queued %.1f ms > target %.1f ms" % (delay * 1e3, target * 1e3)
        if queued > self.longest:
            self.longest = queued
        if now - self.warned_at >= WARN_EVERY:
            self._warn(now, target)
        return reason

    def _shed(self, environ, now, delay, queued, target, stamped):
        """A request queued past the target: shed it (SHED_*), or ADMITTED."""
        # The turn is over the target whoever waited; the health path is answered anyway.
        standing = False
        if delay > target:
            self.over = True
            if self.over_since == _NEVER:
                self.over_since = now
            # (A slow view's queue stands only when it has for as many of its targets.)
            standing = now - self.over_since >= (INTERVAL if INTERVAL > target * TARGETS else target * TARGETS)
        if environ.get("PATH_INFO") in self.health_paths:
            return ADMITTED
        if stamped and queued > self.max_queue_time:
            self.shed_late += 1
            return SHED_LATE
        if standing:
            # The queue stands: shedding starts, and lasts until CALM seconds shed nothing.
            self.shedding = True
            self.shed_queue += 1
            return SHED_OVERLOAD
        return ADMITTED

    def _budget(self, environ, queued, target, stamped):
        """While shedding: shed a request that waited past the target already; admit one while
        the requests waiting for a turn of their own (and the one this turn runs) hold at most
        QUEUE_SHARE of the target in work; shed at once otherwise. The queue's wait is the
        loop's own measure: one request's work a turn."""
        if environ.get("PATH_INFO") in self.health_paths:
            return ADMITTED
        if stamped and queued > self.max_queue_time:
            self.shed_late += 1
            return SHED_LATE
        if queued > target:
            # It waited past the target already (the turn shedding began in, or a proxy's queue):
            # CoDel's drop in its dropping state.
            self.shed_queue += 1
            return SHED_OVERLOAD
        waiting = len(self.runq)
        if self.ran_turn == self.began:
            waiting += 1
        if waiting > 0 and (self.work <= 0.0 or waiting * self.work > target * QUEUE_SHARE):
            self.shed_queue += 1
            return SHED_OVERLOAD
        return ADMITTED

    def _take_turn(self):
        """While shedding, an admitted request: the turn's first runs in it, after the turn's
        other requests are decided (a gevent callback after them: their 503s go out before its
        CPU is spent); the others wait for a turn of their own."""
        if self.ran_turn != self.began and not self.runq:
            self.ran_turn = self.began
            self.defer()
            return
        self.wait_turn()

    def _wait_turn(self):
        """Wait in ``runq`` until the runner gives this request a turn (or its greenlet is killed:
        a fast stop)."""
        waiter = Waiter()
        self.runq.append(waiter)
        self._arm()
        try:
            waiter.get()
        finally:
            if self.runq and waiter in self.runq:
                self.runq.remove(waiter)

    def _run_next(self):
        """The runner, in the hub, as a turn begins (timers run before what the poll found): the
        first waiting request gets this turn, a gevent callback after the turn's decisions; the
        timer runs again at the next turn while others wait."""
        if not self.runq:
            return
        waiter = self.runq.popleft()
        self.ran_turn = self.began
        self.loop.run_callback(waiter.switch, None)
        if self.runq:
            self._arm()

    def _arm(self):
        """The runner runs at the next turn (a timer due now: the poll does not wait)."""
        if self.runner is None:
            self.runner = self.loop.timer(0.0)
        if not self.runner.active:
            self.runner.start(self._run_next)

    def _proxy_queue(self, start, conn_environ):
        """Seconds since a trusted proxy received the request (its X-Request-Start, ``start``),
        0 if its clock is ahead of ours; -1 if the peer is not trusted or the value not a time."""
        if conn_environ.get("REMOTE_ADDR") not in self.trusted:
            return -1.0
        at = request_start(start)
        if at is None:
            return -1.0
        waited = wall_clock() - at
        return waited if waited > 0.0 else 0.0

    def _warn(self, now, target):
        """One line while shedding, at most every WARN_EVERY seconds: how many, and why."""
        first = now - self.warned_at > 2 * WARN_EVERY
        since = "since the last warning" if not first else "just now"
        why = []
        if self.shed_queue:
            why.append("%d waited in the event loop past the target of %.0f ms (the CPU is saturated; "
                       "%.1f ms of loop time per request)" % (self.shed_queue, target * 1e3, self.work * 1e3))
        if self.shed_late:
            why.append("%d had queued past max_queue_time (%.0f ms), a proxy's X-Request-Start included"
                       % (self.shed_late, self.max_queue_time * 1e3))
        self.server.error_log.warning(
            "overload: %d request(s) answered 503 %s, the longest queued %.0f ms: %s. Requests admitted "
            "are served at capacity; add --workers or machines to serve more (docs/production.md, "
            "\"Overload\"; --no-overload-control turns this off)"
            % (self.shed_queue + self.shed_late, since, self.longest * 1e3, "; ".join(why))
        )
        self.warned_at = now
        self.shed_queue = self.shed_late = 0
        self.longest = 0.0

    # --- the loop lag ---

    def _start_ticking(self):
        """The first request after a quiet spell: the loop's watchers start (this is the turn's
        first request as far as they know)."""
        ticker = self.ticker
        if ticker is None:
            ticker = self.ticker = self.loop.timer(TICK, TICK)
            self.checker = self.loop.check()
        self.ticking = True
        self.over = False
        self.over_since = _NEVER
        # libev and libuv time a timer from the loop's idea of now, which is the turn's poll (or
        # a gevent.sleep since): made current, the first tick is due TICK from this clock's now.
        self.loop.update_now()
        self.began = self._now()
        self.due = self.began + TICK
        ticker.start(self._tick)
        self.checker.start(self._turn)

    def _turn(self):
        """The check watcher, in the hub, right after each poll (libev runs check watchers before
        what the poll found): the turn's start. loop.now() is no such mark: gevent.sleep moves it.

        A turn with no request past the target (or with no request at all: nothing was waiting
        at its poll) drains the queue: the streak of turns over the target ends."""
        now = self._now()
        if not self.over:
            self.over_since = _NEVER
        self.over = False
        if self.ran_turn == self.began and self.runq:
            # The turn that ended ran one waiting request and went straight on to this one (the
            # poll did not wait: the runner was due): its length is one admitted request's loop
            # time, the 503s and the responses finished meanwhile included.
            self.work += (now - self.began - self.work) * WORK_WEIGHT
        if self.shedding and now - self.last_shed >= CALM:
            self.shedding = False  # a whole second shed nothing: the overload is over
            self.over_since = _NEVER
        self.began = now

    def _tick(self):
        """The timer, in the hub: how late it ran is the loop lag; it stops when no request came
        since its last run, so an idle worker is not woken."""
        now = self._now()
        lag = now - self.due
        if lag < 0.0:
            lag = 0.0
        self.lag = lag
        if self.stats is not None:
            self.stats.loop_delay(lag)
        # A repeating timer is due again a period after it was due, or at once if that has passed.
        self.due += TICK
        if self.due < now:
            self.due = now
        if not self.seen and not self.runq:
            self.ticker.stop()
            self.checker.stop()
            self.ticking = False
            self.lag = 0.0
        self.seen = 0

    def close(self):
        while self.runq:  # (none wait once the server's connections are gone; said for safety)
            self.loop.run_callback(self.runq.popleft().switch, None)
        if self.runner is not None:
            self.runner.stop()
            self.runner.close()
            self.runner = None
        if self.ticker is not None:
            for watcher in (self.ticker, self.checker):
                watcher.stop()
                watcher.close()
            self.ticker = self.checker = None
        self.ticking = False

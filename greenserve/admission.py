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
served. A standing queue is a bad one: request after request waits past the target. **Serving**:
a turn runs admitted requests at once while it is younger than ``TURN_SHARE`` of the target;
after that, and while any wait, a request waits for a turn of its own in a queue (``runq``, first
in, first out), from which a timer starts the next ones at each turn, as many as fill that share.
So a turn is short, and whatever arrives is decided within about one request's work of its poll.
Every request is admitted until the ones the runner starts have waited past the target for
``INTERVAL`` (100 ms, CoDel's: each turn since started one past it; a turn that started none, or
ran nothing, drains it), or until the queue holds the interval's worth of work: then
**shedding** begins. Each turn of the loop starts one admitted application, after the turn's
other requests are decided; a new request is admitted while the work waiting ahead of it is less
than ``QUEUE_SHARE`` of the target, and answered 503 at once (~30 us) otherwise. So a turn is one
application's CPU and the 503s of what arrived meanwhile: a 503 waits at most about one
request's work for its turn's poll, and the CPU runs admitted work nearly all the time (goodput
at capacity), the queue never empty. Shedding ends after ``CALM`` (a second) without a shed. The
loop lag (a 10 ms timer's lateness) is reported (``loop_delay``).

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
QUEUED = 3  # (admitted, to wait for a turn of its own first; told as ADMITTED)
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
# hold less than this share of the target in work: the 200s then wait at most about a quarter of
# the target more than at capacity, and the CPU still always has one waiting. (Half, measured the
# same hour: the same goodput, and the first second after a 1.5x overload a p99 of 29 ms against
# 26 ms, the requests it holds when the overload ends. Before it, a bucket admitted 5 ms of work
# a turn: turns of two 2 ms requests, and the 503s of a 3x overload waited for them: p99 19-22 ms.)
QUEUE_SHARE = 0.25
# While serving, a turn runs admitted requests at once while it is younger than this share of the
# target (5 ms of the default 20): a turn then lasts about that and one request, so what arrives
# meanwhile is decided (and a 503 sent) that soon after, at the onset of an overload too. (Before
# it, the turn that found the queue standing ran past the target: the 503s of an overload's first
# second had a p99 of 61 ms, against 5 ms over its 20 s.) A hello-world turn of 100 keep-alive
# requests (3 ms) runs whole.
TURN_SHARE = 0.25
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
        "ran_turn", "runq_since", "marked",
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
        self.runq_since = deque()  # when each came in (its turn's start), in the same order
        self.runner = None
        self.ran_turn = _NEVER
        self.marked = 0.0  # when the request the runner started before the next let go
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
        """None: call the application (at once, or after a wait for a turn of its own). Otherwise
        the reason the request is shed, for the access log (the responder answers 503).
        ``conn_environ``: the connection's own keys, whose REMOTE_ADDR (before a proxy's
        X-Forwarded-For) says whether X-Request-Start is trusted."""
        if not self.ticking:
            self._start_ticking()
        now = self._now()
        began = self.began
        delay = now - began
        if began != self.turn:
            self.turn = began
            self.last_delay = -1.0
        elif self.last_delay >= 0.0:
            # From the previous request this turn ran at once to this one: what it cost the loop.
            self._learn(delay - self.last_delay)
        self.seen += 1
        queued = delay
        stamped = False  # a trusted proxy said when it received the request
        start = environ.get("HTTP_X_REQUEST_START")
        if start is not None and self.trusted is not None:
            waited = self._proxy_queue(start, conn_environ)
            if waited >= 0.0:
                stamped = True
                queued += waited
        target = self._target()
        if stamped and queued > self.max_queue_time:
            decision = SHED_LATE
        else:
            decision = self._decide(now, delay, queued, target)
        # The health paths are always answered at once; looked up only for a request that would
        # not run at once anyway (most requests pay nothing for them).
        if decision != ADMITTED and environ.get("PATH_INFO") in self.health_paths:
            decision = ADMITTED
        stats = self.stats
        if decision == ADMITTED:
            self.last_delay = delay
            if stats is not None:
                stats.queued(queued, ADMITTED)
            return None
        self.last_delay = -1.0
        if decision == QUEUED:
            self._take_turn(began)
            if stats is not None:
                stats.queued(queued + self._now() - now, ADMITTED)
            return None
        if stats is not None:
            stats.queued(queued, decision)
        self.last_shed = now
        if decision == SHED_LATE:
            self.shed_late += 1
            reason = "queued %.0f ms > max_queue_time %.0f ms" % (queued * 1e3, self.max_queue_time * 1e3)
        elif queued > target:
            self.shed_queue += 1
            reason = "overload: queued %.1f ms > target %.1f ms" % (queued * 1e3, target * 1e3)
        else:
            self.shed_queue += 1
            reason = "overload: queued %.1f ms, %.1f ms of work waiting ahead (target %.1f ms)" % (
                queued * 1e3, self._waiting() * self.work * 1e3, target * 1e3)
        if queued > self.longest:
            self.longest = queued
        if now - self.warned_at >= WARN_EVERY:
            self._warn(now, target)
        return reason

    def _target(self):
        """The queue delay a request may wait: ``target``, or WORK_FACTOR times the loop time a
        request takes when that is longer."""
        if self.work * WORK_FACTOR > self.target:
            return self.work * WORK_FACTOR
        return self.target

    def _waiting(self):
        """The admitted requests that wait to run: those in ``runq`` and the one this turn runs
        after its decisions (while shedding) or the runner started."""
        if self.ran_turn == self.began:
            return len(self.runq) + 1
        return len(self.runq)

    def _decide(self, now, delay, queued, target):
        """ADMITTED (run now), QUEUED (admitted, to wait for a turn) or SHED_OVERLOAD.

        **Serving**: a request runs at once while its turn is younger than TURN_SHARE of the
        target and no admitted request waits in the queue; otherwise it waits for a turn of its own behind
        those that do (first in, first out). So a turn of the loop never runs more than about
        that much CPU before its poll, and a request is decided (and a 503 sent) within it of
        arriving, never after a long turn. A queue that holds the interval's worth of work
        stands by definition: the request that finds it is shed and shedding begins (the runner
        begins it too, when requests have waited past the target for the interval).

        **Shedding**: one that waited past the target already is shed (CoDel's drop); one is
        admitted while the work waiting ahead of it is at most QUEUE_SHARE of the target (each
        turn runs one), and shed at once otherwise."""
        waiting = self._waiting()
        if self.shedding:
            if queued > target or (waiting > 0 and (self.work <= 0.0 or waiting * self.work > target * QUEUE_SHARE)):
                return SHED_OVERLOAD
            return QUEUED
        # (Only those in the queue count here, not the ones the runner started this turn: a
        # connection's next pipelined request, parsed when the one the runner gave this turn let
        # go, runs on within the turn's share instead of waiting a turn each: 100 pipelined
        # requests in one write went out in 19 sends, not 5 at most, in the pure build.)
        if not self.runq and delay <= target * TURN_SHARE:
            return ADMITTED
        if self.work > 0.0 and waiting * self.work > self._interval(target):
            self._begin_shedding(now)
            return SHED_OVERLOAD
        return QUEUED

    def _interval(self, target):
        """How long a queue past the target must stand before shedding begins: INTERVAL, or as
        many targets as it holds of the default one when the target grew with slow views."""
        if INTERVAL > target * TARGETS:
            return INTERVAL
        return target * TARGETS

    def _begin_shedding(self, now):
        self.shedding = True
        self.last_shed = now  # (CALM counts from here even if nothing is shed)

    def _take_turn(self, since):
        """An admitted request that is not to run at once: while shedding, the turn's first runs
        in it, after the turn's other requests are decided (a gevent callback after them: their
        503s go out before its CPU is spent); the others wait for a turn of their own. ``since``:
        the start of the turn it came in."""
        if self.shedding and self.ran_turn != self.began and not self.runq:
            self.ran_turn = self.began
            self.defer()
            return
        self.wait_turn(since)

    def _wait_turn(self, since):
        """Wait in ``runq`` until the runner gives this request a turn (or its greenlet is killed:
        a fast stop)."""
        waiter = Waiter()
        self.runq.append(waiter)
        self.runq_since.append(since)
        self._arm()
        try:
            waiter.get()
        finally:
            if self.runq and waiter in self.runq:
                at = self.runq.index(waiter)
                del self.runq[at]
                del self.runq_since[at]

    def _run_next(self):
        """The runner, in the hub, as a turn begins (timers run before what the poll found): the
        first waiting requests get this turn, gevent callbacks after the turn's decisions. While
        shedding that is one; while serving, as many as fill TURN_SHARE of the target in work (a
        burst queued behind a long turn drains at the loop's full rate). How long each waited
        is the control's measure: past the target for the interval, the queue stands and
        shedding begins. The timer runs again at the next turn while others wait."""
        if not self.runq:
            return
        now = self._now()
        target = self._target()
        count = 1
        if not self.shedding and self.work > 0.0:
            count = int(target * TURN_SHARE / self.work)
            if count < 1:
                count = 1
        self.ran_turn = self.began
        started = 0
        # Each one's own loop time is measured between marks around it (callbacks run in order:
        # a mark runs when the request before it has let go): not the turn's length, which
        # holds the decisions on what arrived meanwhile too (with a hundred keep-alive clients
        # of a 20 us view, that made 2 ms of "work" a request, a queue too long, and a cascade of
        # 503s under a closed loop that never exceeded the worker).
        self.loop.run_callback(self._mark_start)
        while self.runq and started < count:
            waiter = self.runq.popleft()
            since = self.runq_since.popleft()
            # (It starts after the ones this turn runs before it.)
            if now + started * self.work - since > target:
                self.over = True
                if self.over_since == _NEVER:
                    self.over_since = now
                elif not self.shedding and now - self.over_since >= self._interval(target):
                    self._begin_shedding(now)
                    count = 1
            started += 1
            self.loop.run_callback(waiter.switch, None)
            self.loop.run_callback(self._mark_ran)
        if self.runq:
            self._arm()

    def _mark_start(self):
        self.marked = self._now()

    def _mark_ran(self):
        """A request the runner started has let go of the loop: its loop time counts toward the
        work estimate (admitted requests run at once give theirs in ``admit``)."""
        now = self._now()
        self._learn(now - self.marked)
        self.marked = now

    def _learn(self, took):
        """One admitted request's loop time, into the moving average ``work``. A sample counts
        for at most WORK_FACTOR times the average: one slow request among cheap ones (a 30 ms
        view among 20 us ones) moved it 75 times over, and the queue behind it looked 100 ms
        long, shed, and the 503s answered at once brought a closed loop's requests back faster
        (wrk -c100: 128,818 503s of 141,836 in 4 s). Slower views are learnt within about 50
        requests still (15 % a request)."""
        work = self.work
        if work <= 0.0:
            self.work = took
            return
        if took > work * WORK_FACTOR:
            took = work * WORK_FACTOR
        self.work = work + (took - work) * WORK_WEIGHT

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
        self.runq_since.clear()
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

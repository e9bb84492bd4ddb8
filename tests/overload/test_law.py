"""Overload control's law (greenserve/admission.py), on a clock and a loop the test moves.

Each case is a sequence of turns of the event loop: a turn begins (the check watcher's mark,
right after the poll), then requests reach their application start at given times. What is
asserted is which are shed: a burst passing the target once is served whole, a queue standing
turn after turn is cut at the target, slow views are not shed for waiting for each other, the
health path is never shed, and a trusted proxy's X-Request-Start counts.
"""

import io
import time

import pytest

from greenserve.admission import Admission, request_start
from greenserve.observe.errorlog import ErrorLog
from greenserve.observe.stats import WorkerStats
from greenserve.proxy import TrustedProxies

TARGET = 0.02


class Watcher:
    def __init__(self):
        self.active = False

    def start(self, callback, *args):
        self.active = True

    def stop(self):
        self.active = False

    def close(self):
        pass


class Loop:
    def __init__(self, clock):
        self.clock = clock

    def now(self):
        return self.clock.now

    def update_now(self):
        pass

    def timer(self, after, repeat=0.0):
        return Watcher()

    def run_callback(self, function, *args):
        function(*args)

    def check(self):
        return Watcher()


class Clock:
    now = 1000.0

    def __init__(self):
        self.deferred = []
        self.cost = 0.0  # the work of the request being decided, if admitted
        self.later = 0.0  # the work this turn runs after its decisions

    def __call__(self):
        return self.now


class Waiting:
    """A request waiting for a turn of its own (admission's runq): given one, its work runs in
    that turn after the turn's decisions."""

    def __init__(self, clock, cost):
        self.clock, self.cost = clock, cost

    def switch(self, _):
        self.clock.later += self.cost


class Server:
    def __init__(self):
        self.errors = io.StringIO()
        self.error_log = ErrorLog(self.errors, "info")
        self.stats = WorkerStats()


def control(target=TARGET, max_queue_time=1.0, health=(), trusted=("127.0.0.1",)):
    clock = Clock()
    server = Server()
    admission = Admission(server, Loop(clock), target, max_queue_time, health,
                          TrustedProxies(list(trusted)), clock=clock)
    # While shedding, an admitted request yields to the loop before its application: turn()
    # moves the test's clock for its work at the end of the turn, after the others' decisions.
    admission.defer = lambda: clock.deferred.append(True)
    # One that finds its turn taken waits in the runq; the runner gives it a later turn.
    admission.wait_turn = lambda: admission.runq.append(Waiting(clock, clock.cost))
    return admission, clock, server


def turn(admission, clock, at, costs, path="/", headers=None, peer="127.0.0.1"):
    """A turn beginning at ``at``: one request after another, each taking ``cost`` seconds of the
    loop before the next one starts. Returns which were shed (True) in order. While shedding, the
    turn first gives one waiting request its turn (the runner), whose work runs after the turn's
    decisions with that of the one request admitted to run in this turn."""
    clock.now = at
    admission._turn()
    clock.later = 0.0
    admission._run_next()
    shed = []
    for cost in costs:
        environ = {"PATH_INFO": path}
        environ.update(headers or {})
        del clock.deferred[:]
        clock.cost = cost[0] if isinstance(cost, tuple) else cost
        waiting = len(admission.runq)
        shed.append(admission.admit(environ, {"REMOTE_ADDR": peer}) is not None)
        if isinstance(cost, tuple):  # (its work if admitted, if shed)
            cost = cost[1] if shed[-1] else cost[0]
        if clock.deferred:
            clock.later += cost
        elif len(admission.runq) == waiting:  # (not queued for a later turn)
            clock.now += cost
    clock.now += clock.later
    return shed


def test_a_burst_once_is_served_whole():
    admission, clock, _ = control()
    # Twenty requests found by one poll, 5 ms each: the last waits 95 ms, but the queue does not
    # stand: the turns before it were within the target.
    assert turn(admission, clock, 1000.0, [0.001]) == [False]
    assert turn(admission, clock, 1001.0, [0.005] * 20) == [False] * 20
    # Quiet again: the next turn has no one waiting past the target.
    assert turn(admission, clock, 1001.2, [0.005] * 3) == [False] * 3


def test_a_standing_queue_is_cut_at_the_target():
    admission, clock, server = control()
    # Twenty 6 ms requests a turn, turn after turn. The target is 24 ms (four times the 6 ms a
    # request takes): the sixth of each turn waits past it. The first turn is a burst (the queue
    # has stood 84 ms, under INTERVAL): served whole.
    assert not any(turn(admission, clock, 1000.0, [0.006] * 20))
    assert not admission.shedding
    # The next turn starts where it ended: past the target again, and the queue has now stood
    # past it for more than INTERVAL (100 ms since the first request past it): the requests
    # that start within the target are served, those after it are shed, and shedding begins.
    shed = turn(admission, clock, clock.now, [(0.006, 0.00003)] * 20)
    assert shed == [False] * 5 + [True] * 15
    assert admission.shedding
    assert server.stats.shed == [15, 0]
    warning = server.errors.getvalue()
    assert warning.count("overload:") == 1 and "past the target of 24 ms" in warning
    # While shedding, each turn starts one admitted application, after the turn's decisions; one
    # admitted that finds the turn taken waits for a turn of its own while those waiting hold at
    # most half the target in work (two of 6 ms), and the rest is shed at once. The warning is
    # not repeated within WARN_EVERY.
    shed = turn(admission, clock, clock.now, [(0.006, 0.00003)] * 20)
    assert shed[:2] == [False, False] and all(shed[3:])
    for _ in range(3):
        # A turn: the runner gives one waiting request its turn; one new one takes its place.
        assert turn(admission, clock, clock.now, [(0.006, 0.00003)] * 20) == [False] + [True] * 19
        assert 1 <= len(admission.runq) <= 2
    assert server.errors.getvalue().count("overload:") == 1


def test_while_shedding_requests_are_admitted_at_the_loops_rate():
    admission, clock, server = control()
    turn(admission, clock, 1000.0, [0.002] * 60)
    turn(admission, clock, clock.now, [0.002] * 11 + [0.00003] * 30)
    assert admission.shedding
    # Turn after turn, twice as many arriving as the loop can run: one admitted request (2 ms)
    # runs a turn, the rest shed at once; the loop runs admitted work nearly all the time, and
    # those waiting for a turn hold at most half the target in work.
    admitted = 0
    start = clock.now
    for _ in range(100):
        admitted += turn(admission, clock, clock.now, [(0.002, 0.00003)] * 2).count(False)
        assert len(admission.runq) * 0.002 <= TARGET / 2
    assert 95 <= admitted <= 105
    assert 100 * 0.002 / (clock.now - start) > 0.95


def test_while_shedding_a_503_waits_for_one_request_at_most():
    # A turn runs one admitted application, after the decisions of the requests its poll found:
    # a request waits for its answer at most one request's work (its turn's poll) and the 503s
    # before it, never for a turn of several applications.
    admission, clock, server = control()
    turn(admission, clock, 1000.0, [0.002] * 60)
    turn(admission, clock, clock.now, [0.002] * 11 + [0.00003] * 30)
    assert admission.shedding
    delays = []

    class Recording(WorkerStats):
        def queued(self, seconds, shed):
            delays.append(seconds)

    admission.stats = Recording()
    # The first turn fills the queue of those waiting for a turn (half the target: five); then
    # each turn admits one in place of the one it runs.
    assert turn(admission, clock, clock.now, [(0.002, 0.00003)] * 10).count(False) == 6
    for _ in range(50):
        begun = clock.now
        shed = turn(admission, clock, clock.now, [(0.002, 0.00003)] * 10)
        assert shed.count(False) <= 1
        assert clock.now - begun < 0.002 + 10 * 0.00003 + 1e-9  # the turn: one application and its 503s
    assert max(delays) <= 10 * 0.00003 + 1e-9


def test_shedding_ends_after_a_calm_second():
    admission, clock, _ = control()
    turn(admission, clock, 1000.0, [0.002] * 60)
    turn(admission, clock, clock.now, [0.002] * 11 + [0.00003] * 30)
    assert admission.shedding
    # The load falls under capacity: one request a turn, 10 ms apart, none shed. Shedding holds
    # for CALM (a second) without a shed, then ends.
    for _ in range(90):
        assert turn(admission, clock, clock.now + 0.008, [0.002]) == [False]
    assert admission.shedding
    for _ in range(12):
        assert turn(admission, clock, clock.now + 0.008, [0.002]) == [False]
    assert not admission.shedding
    # Back to bursts being served whole.
    assert not any(turn(admission, clock, clock.now + 0.01, [0.002] * 20))


def test_a_burst_shorter_than_the_interval_is_served_whole_over_several_turns():
    admission, clock, _ = control()
    # 3 turns of 6 requests of 5 ms: each turn passes the target by 5 ms, 90 ms in all.
    for _ in range(3):
        assert not any(turn(admission, clock, clock.now, [0.005] * 6))


def test_shed_requests_cost_the_loop_nothing_in_the_estimate():
    admission, clock, _ = control()
    turn(admission, clock, 1000.0, [0.002] * 60)  # past the target from 22 ms on
    # The next turn: 11 within the target (2 ms each), then 30 shed at 30 us each.
    shed = turn(admission, clock, clock.now, [0.002] * 11 + [0.00003] * 30)
    assert shed == [False] * 11 + [True] * 30
    # The loop time a request takes is learnt from admitted ones only: 2 ms, not the 30 us
    # of a 503.
    assert admission.work == pytest.approx(0.002, rel=0.05)


def test_slow_views_are_not_shed_for_waiting_for_each_other():
    admission, clock, _ = control()
    at = 1000.0
    # 50 ms of CPU a request, three found by each poll: each waits up to 100 ms behind the
    # others, turn after turn. The target grows to WORK_FACTOR times the work: none is shed.
    for _ in range(20):
        assert turn(admission, clock, at, [0.05] * 3) == [False] * 3
        at = clock.now
    assert admission.work == pytest.approx(0.05, rel=0.05)  # the target: 4 times that
    # Ten at once, turn after turn, is a standing queue even for them, once it has stood for as
    # many of their targets (5 x 200 ms) as a light view's interval holds of its own.
    shed = [turn(admission, clock, clock.now if n else at, [0.05] * 10) for n in range(4)]
    assert not any(shed[0] + shed[1]) and any(shed[2] + shed[3])


def test_a_turn_with_no_request_drains_the_queue():
    admission, clock, _ = control()
    turn(admission, clock, 1000.0, [0.005] * 20)
    # A poll that found no request: nothing was waiting. The next burst is served whole.
    turn(admission, clock, clock.now + 0.001, [])
    assert not any(turn(admission, clock, clock.now + 0.01, [0.005] * 20))


def test_bursts_with_idle_time_between_are_served_whole():
    # 50 connections every 50 ms, 0.5 ms of loop time each: 25 ms a burst, half the CPU. Each
    # burst passes the target, but the loop drains between them.
    admission, clock, _ = control()
    at = 1000.0
    for _ in range(20):
        assert not any(turn(admission, clock, at, [0.0005] * 50))
        turn(admission, clock, clock.now, [])  # the idle poll that follows
        at += 0.05


def test_a_turn_under_the_target_drains_the_queue():
    admission, clock, _ = control()
    turn(admission, clock, 1000.0, [0.005] * 20)
    turn(admission, clock, clock.now, [0.001] * 3)
    assert not any(turn(admission, clock, clock.now, [0.005] * 20))


def test_the_health_path_is_never_shed():
    admission, clock, _ = control(health=["/healthz"])
    turn(admission, clock, 1000.0, [0.005] * 20)
    assert turn(admission, clock, clock.now, [0.005] * 20, path="/healthz") == [False] * 20
    assert turn(admission, clock, clock.now, [0.005] * 20)[-1] is True


def test_x_request_start_from_a_trusted_proxy_counts():
    admission, clock, server = control()
    old = "t=%.3f" % (time.time() - 5.0)  # nginx's t=${msec}: waited 5 s before greenserve
    headers = {"HTTP_X_REQUEST_START": old}
    reason = None
    clock.now = 1000.0
    admission._turn()
    reason = admission.admit(dict(headers, PATH_INFO="/"), {"REMOTE_ADDR": "127.0.0.1"})
    assert reason is not None and "max_queue_time" in reason
    assert server.stats.shed == [0, 1]
    # From a peer outside forwarded_allow_ips the header is the client's word: not counted.
    assert admission.admit(dict(headers, PATH_INFO="/"), {"REMOTE_ADDR": "192.0.2.7"}) is None
    # A recent start is within max_queue_time.
    fresh = {"HTTP_X_REQUEST_START": "t=%.3f" % (time.time() - 0.05), "PATH_INFO": "/"}
    assert admission.admit(fresh, {"REMOTE_ADDR": "127.0.0.1"}) is None
    # The health path is answered whatever it waited.
    assert admission.admit(dict(headers, PATH_INFO="/healthz"), {"REMOTE_ADDR": "127.0.0.1"}) is not None
    admission.health_paths = frozenset(["/healthz"])
    assert admission.admit(dict(headers, PATH_INFO="/healthz"), {"REMOTE_ADDR": "127.0.0.1"}) is None


def test_the_queue_time_histogram_counts_every_checked_request():
    admission, clock, server = control()
    turn(admission, clock, 1000.0, [0.004] * 10)
    assert sum(server.stats.queue_times) == 10
    assert server.stats.queue_time_sum == pytest.approx(sum(0.004 * i for i in range(10)))


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("t=1700000000.123", 1700000000.123),  # nginx t=${msec}
        ("1700000000123", 1700000000.123),  # Heroku's router: milliseconds
        ("t=1700000000123456", 1700000000.123456),  # Apache %t, New Relic: microseconds
        ("t=1700000000123456789", 1700000000.123456789),  # nanoseconds
        ("  t=1700000000 ", 1700000000.0),
    ],
)
def test_x_request_start_units(value, seconds):
    assert request_start(value) == pytest.approx(seconds, abs=1e-6)


@pytest.mark.parametrize("value", ["", "t=", "yesterday", "t=-5", "nan", "inf", "t=0"])
def test_x_request_start_garbage_is_ignored(value):
    assert request_start(value) is None

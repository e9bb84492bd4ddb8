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

    def timer(self, after, repeat):
        return Watcher()

    def check(self):
        return Watcher()


class Clock:
    now = 1000.0

    def __init__(self):
        self.deferred = []

    def __call__(self):
        return self.now


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
    return admission, clock, server


def turn(admission, clock, at, costs, path="/", headers=None, peer="127.0.0.1"):
    """A turn beginning at ``at``: one request after another, each taking ``cost`` seconds of the
    loop before the next one starts. Returns which were shed (True) in order."""
    clock.now = at
    admission._turn()
    shed = []
    later = 0.0  # the work of the requests that yielded first (while shedding)
    for cost in costs:
        environ = {"PATH_INFO": path}
        environ.update(headers or {})
        del clock.deferred[:]
        shed.append(admission.admit(environ, {"REMOTE_ADDR": peer}) is not None)
        if isinstance(cost, tuple):  # (its work if admitted, if shed)
            cost = cost[1] if shed[-1] else cost[0]
        if clock.deferred:
            later += cost
        else:
            clock.now += cost
    clock.now += later
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
    # While shedding, requests are admitted at the rate the loop runs them (one 6 ms request per
    # 6 ms that passed) and the rest is shed at once; the warning is not repeated within
    # WARN_EVERY.
    for _ in range(3):
        clock.now += 0.006
        assert turn(admission, clock, clock.now, [0.006] + [0.00003] * 19) == [False] + [True] * 19
    assert server.errors.getvalue().count("overload:") == 1


def test_while_shedding_requests_are_admitted_at_the_loops_rate():
    admission, clock, _ = control()
    turn(admission, clock, 1000.0, [0.002] * 60)
    turn(admission, clock, clock.now, [0.002] * 11 + [0.00003] * 30)
    assert admission.shedding
    # Shedding: the bucket fills with the time that passes, up to 5 ms (TURN_BUDGET), and each
    # admitted request takes its 2 ms of work from it. After 10 ms of quiet, two fit: each yields
    # to the loop before its application, so that the turn's 503s go out first.
    clock.now += 0.01
    assert turn(admission, clock, clock.now, [0.002] + [0.002] + [0.00003] * 8) == [False] * 2 + [True] * 8
    # Turn after turn, twice as many arriving as it can run: the loop's rate is kept, about one
    # 2 ms request per 2 ms that passed, the loop busy with admitted work nearly all the time.
    admitted = 0
    start = clock.now
    for _ in range(100):
        admitted += turn(admission, clock, clock.now, [(0.002, 0.00003)] * 2).count(False)
    assert 0.9 < admitted * 0.002 / (clock.now - start) <= 1.0


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

"""The observer interface (``Sink``), and a worker's counters (``WorkerStats``).

``Sink`` is what the server's parts call to tell its observers (``--metrics-bind``,
``--statsd-host``) what happens; one interface, two callers:

- per request, in a worker: the connection calls ``server.stats.request(status, method,
  duration, received, sent)`` once per answered request, behind a test it makes once per
  connection: ``server.stats`` is None when neither ``--metrics-bind`` nor ``--statsd-host`` is
  set, and then nothing here runs per request;
- per worker event, in the master: the arbiter calls its ``observer`` (None when both are off)
  with what a worker wrote on its heartbeat pipe (``worker_heard``), each worker reaped
  (``worker_exited``), each turn of its loop (``turn``: the worker count, and the descriptors of
  an observer that serves, from ``readers``/``writers``), in each new worker (``forked``) and at
  the end (``close``).

Every method but ``request`` does nothing here: an observer overrides what it observes.

- ``WorkerStats`` (``--metrics-bind``, in a worker): the counters, and ``report()``, the snapshot
  line written on the heartbeat pipe once per beat (``process.worker``): ``STATS`` and numbers in
  the layout below, which ``metrics.MasterMetrics`` reads in the master (``worker_heard``). One
  write below PIPE_BUF reaches the master whole and uninterleaved, and the line holds only
  digits, ``.``, ``e``, ``-``, ``+`` and spaces, none of the arbiter's one-byte codes.
- ``statsd.StatsdSink`` (``--statsd-host``, in a worker and in the master), a ``Sink`` in plain
  Python; ``metrics.MasterMetrics`` (``--metrics-bind``, in the master), another.
- ``Sinks``: both on; with one on, ``server.stats`` (or the arbiter's observer) is that sink itself.

Compiled with the hot path (``stats.pxd``): ``Sink.request`` is a C method the compiled
connection calls directly, with a C double and C integers, so a request with metrics on pays for
no Python call or boxed number here (measured: a plain-Python ``request`` cost 8 % of keep-alive
hello's rate, docs/performance.md). Gauges (connections by state, pool use) are not kept per
request: ``report()`` reads them from what the servers already hold. The master's events are
plain Python calls: a few a second.
"""

from time import monotonic

STATS = b"S"  # the heartbeat pipe's code for a snapshot line (see process.arbiter)
_PIPE_BUF = 4096  # POSIX guarantees at least 512; Linux's is 4096, and a report is ~1 KiB at most

# Request methods counted by name; any other (an extension method, or garbage a client sent) is
# "other": a label's values must stay few, and a client must not be able to add series.
METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "other")
_METHOD_INDEX = {name: index for index, name in enumerate(METHODS)}
_OTHER = len(METHODS) - 1
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
# Prometheus client libraries' default buckets (seconds): dashboards built for them fit.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Queue time and loop lag (overload control, greenserve/admission.py): milliseconds matter there.
DELAY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
# Why a request was shed (stats.Sink.queued's ``shed``, admission's codes 1 and 2).
SHED_REASONS = ("overload", "queue_time")

# The snapshot's layout: counters first (summed over workers, dead ones included), then gauges.
REQUESTS = 0
DURATIONS = REQUESTS + len(METHODS) * len(STATUS_CLASSES)  # per bucket, +Inf last (not cumulative)
DURATION_SUM = DURATIONS + len(BUCKETS) + 1
RECEIVED = DURATION_SUM + 1
SENT = RECEIVED + 1
LOOP_BLOCKED = SENT + 1
POOL_FULL = LOOP_BLOCKED + 1
ACCEPT_PAUSED = POOL_FULL + 1
HTTP2_REQUESTS = ACCEPT_PAUSED + 1
STATIC_REQUESTS = HTTP2_REQUESTS + 1
SHED = STATIC_REQUESTS + 1  # per reason (SHED_REASONS)
QUEUE_TIMES = SHED + len(SHED_REASONS)  # per bucket of DELAY_BUCKETS, +Inf last (not cumulative)
QUEUE_TIME_SUM = QUEUE_TIMES + len(DELAY_BUCKETS) + 1
LOOP_DELAYS = QUEUE_TIME_SUM + 1  # the same
LOOP_DELAY_SUM = LOOP_DELAYS + len(DELAY_BUCKETS) + 1
COUNTERS = LOOP_DELAY_SUM + 1  # fields [0, COUNTERS) only grow
ACTIVE = COUNTERS
IDLE = ACTIVE + 1
HEADER = IDLE + 1
IN_USE = HEADER + 1
LIMIT = IN_USE + 1
LOOP_LAG = LIMIT + 1
FIELDS = LOOP_LAG + 1


class Sink:
    """The observer interface (see the module docstring): ``server.stats`` in a worker, the
    arbiter's ``observer`` in the master. Each method does nothing here."""

    # --- per request, in a worker: the connection ---

    def request(self, status, method, duration, received, sent):
        """One request answered: its status (499: the client left first), its method (str, or
        None when the server refused the head), seconds from its head to its end, and its body
        bytes in and out."""

    def http2_request(self):
        """The request ``request`` was just told of came over HTTP/2 (one stream): counted apart,
        by a call of its own, so that HTTP/1.1's requests pay nothing for it."""

    def static_request(self):
        """A request is answered by --static (greenserve.static), without the application: told
        by the static files' path alone, so other requests pay nothing for it; its ``request``
        comes as any request's."""

    def queued(self, seconds, shed):
        """Overload control checked a request (admission.Admission.admit): the seconds it
        queued before its application would start (the loop's, and a trusted proxy's), and
        ``shed``: 0 admitted, else the reason it was answered 503 (1 + its index in
        SHED_REASONS). Only with overload control on."""

    def loop_delay(self, seconds):
        """How late overload control's timer ran (every admission.TICK while requests arrive)."""

    # --- per worker event, in the master: the arbiter ---

    def worker_heard(self, pid, data):
        """What worker ``pid`` wrote on its heartbeat pipe (bytes: beats, and any report)."""

    def worker_exited(self, pid, reason):
        """Worker ``pid`` was reaped; ``reason`` is one of ``metrics.EXIT_REASONS``."""

    def turn(self, now, workers, readable, writable):
        """One turn of the arbiter's loop, at monotonic ``now``, with ``workers`` workers; the
        descriptors of ``readers()`` and ``writers()`` that select found ready. Never blocks."""

    def readers(self):
        """The descriptors the arbiter's loop waits to read for this observer."""
        return []

    def writers(self):
        """The descriptors the arbiter's loop waits to write for this observer."""
        return []

    def forked(self):
        """In a new worker, before it serves: what the master's observer holds is closed there."""

    def close(self):
        """The master stops."""


class WorkerStats(Sink):
    """One worker's counters, shared by its servers (``server.stats``); see the module docstring."""

    def __init__(self):
        self.requests = [0] * (len(METHODS) * len(STATUS_CLASSES))
        self.durations = [0] * (len(BUCKETS) + 1)
        self.duration_sum = 0.0
        self.received = 0  # request body bytes
        self.sent = 0  # response body bytes
        self.loop_blocked = 0  # times gevent's monitor found the loop blocked (--max-blocking-time)
        self.loop_lag = 0.0  # the longest a heartbeat was late since the last report
        self.http2_requests = 0  # of those counted in ``requests``, the ones over HTTP/2
        self.static_requests = 0  # of those, the ones --static answered
        self.shed = [0] * len(SHED_REASONS)  # requests answered 503 by overload control
        self.queue_times = [0] * (len(DELAY_BUCKETS) + 1)
        self.queue_time_sum = 0.0
        self.loop_delays = [0] * (len(DELAY_BUCKETS) + 1)
        self.loop_delay_sum = 0.0

    def request(self, status, method, duration, received, sent):
        klass = status // 100 - 1
        if not 0 <= klass <= 4:
            klass = 4  # (start_response lets a 6xx-9xx through; count it with the server errors)
        index = _METHOD_INDEX.get(method, _OTHER) * 5 + klass
        self.requests[index] += 1
        # The first bucket whose bound is not below the duration (bisect_left's answer, without
        # its call: most requests end in the first bucket or two, compared as C doubles).
        bucket = 0
        for bound in BUCKETS:
            if duration <= bound:
                break
            bucket += 1
        self.durations[bucket] += 1
        self.duration_sum += duration
        self.received += received
        self.sent += sent

    def http2_request(self):
        self.http2_requests += 1

    def static_request(self):
        self.static_requests += 1

    def queued(self, seconds, shed):
        if shed:
            self.shed[shed - 1] += 1
        self.queue_times[_bucket(seconds)] += 1
        self.queue_time_sum += seconds

    def loop_delay(self, seconds):
        self.loop_delays[_bucket(seconds)] += 1
        self.loop_delay_sum += seconds

    def report(self, servers):
        """The snapshot line for the master: the counters, then the gauges read from ``servers``."""
        active = idle = header = 0
        in_use = limit = 0
        pool_full = paused = 0.0
        pools = []
        now = monotonic()
        for server in servers:
            pool_full += getattr(server, "pool_full", 0)  # (server.WSGIServer's, counted when the pool fills)
            if hasattr(server, "paused_seconds"):
                paused += server.paused_seconds(now)
            for connection in getattr(server, "connections", ()):
                if connection.head_deadline != 0.0:
                    header += 1  # no request yet, or its head is still arriving
                elif connection.idle:
                    idle += 1  # between requests (keep-alive)
                else:
                    active += 1
            pool = getattr(server, "pool", None)
            if pool is not None and all(pool is not seen for seen in pools):
                pools.append(pool)  # the command's listeners share one pool per worker
                in_use += len(pool)
                limit += pool.size or 0
        values = self.requests + self.durations + [
            self.duration_sum, self.received, self.sent, self.loop_blocked, pool_full, paused, self.http2_requests,
            self.static_requests,
        ] + self.shed + self.queue_times + [self.queue_time_sum] + self.loop_delays + [self.loop_delay_sum] + [
            active, idle, header, in_use, limit, self.loop_lag,
        ]
        self.loop_lag = 0.0
        line = STATS + " ".join([repr(value) for value in values]).encode("ascii") + b"\n"
        # A write above PIPE_BUF may be split and interleaved with a beat; by its layout a
        # snapshot is far below (64 numbers), so this only guards the layout's future.
        return line if len(line) < _PIPE_BUF else None


def _bucket(seconds):
    """The index of the first of DELAY_BUCKETS not below ``seconds`` (len: +Inf)."""
    index = 0
    for bound in DELAY_BUCKETS:
        if seconds <= bound:
            break
        index += 1
    return index


class Sinks(Sink):
    """Both observers on (--metrics-bind and --statsd-host): each called in turn. With one on,
    ``server.stats`` (the arbiter's observer) is that sink itself, and a request pays for no
    extra call."""

    def __init__(self, *sinks):
        self.sinks = sinks

    def request(self, status, method, duration, received, sent):
        for sink in self.sinks:
            sink.request(status, method, duration, received, sent)

    def http2_request(self):
        for sink in self.sinks:
            sink.http2_request()

    def static_request(self):
        for sink in self.sinks:
            sink.static_request()

    def queued(self, seconds, shed):
        for sink in self.sinks:
            sink.queued(seconds, shed)

    def loop_delay(self, seconds):
        for sink in self.sinks:
            sink.loop_delay(seconds)

    def worker_heard(self, pid, data):
        for sink in self.sinks:
            sink.worker_heard(pid, data)

    def worker_exited(self, pid, reason):
        for sink in self.sinks:
            sink.worker_exited(pid, reason)

    def turn(self, now, workers, readable, writable):
        for sink in self.sinks:
            sink.turn(now, workers, readable, writable)

    def readers(self):
        return [fd for sink in self.sinks for fd in sink.readers()]

    def writers(self):
        return [fd for sink in self.sinks for fd in sink.writers()]

    def forked(self):
        for sink in self.sinks:
            sink.forked()

    def close(self):
        for sink in self.sinks:
            sink.close()


def combine(*sinks):
    """What ``server.stats`` (the arbiter's observer) is given: None, the one sink on, or a
    ``Sinks`` of them."""
    sinks = [sink for sink in sinks if sink is not None]
    if len(sinks) > 1:
        return Sinks(*sinks)
    return sinks[0] if sinks else None


def worker_stats(sink):
    """The ``WorkerStats`` that ``server.stats`` is or holds (--metrics-bind), or None."""
    for one in getattr(sink, "sinks", (sink,)):
        if isinstance(one, WorkerStats):
            return one
    return None

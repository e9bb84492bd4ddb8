"""statsd and dogstatsd (``--statsd-host``): each request as statsd lines, under gunicorn's names.

Two users, one per process role:

- ``StatsdSink.request``, in a worker: an observer of each request (``stats.Sink``, beside
  ``stats.WorkerStats``; ``stats.Sinks`` when both are on). A request only adds to
  counters and appends its duration; the lines are written once per turn of the event loop, from
  a callback the first request of the turn schedules (gevent's ``loop.run_callback``), packed into
  as few datagrams as fit below ``PAYLOAD``. Counters are summed over the turn (statsd adds them
  anyway); each duration is its own timer line, so the server's percentiles stay exact.
- ``StatsdSink.turn``, in the master: the worker count as a gauge, at most once a second
  from the arbiter's loop (gunicorn sends it at each of its loop's turns), and with
  --enable-backlog-metric the listen backlog in the same datagram: the connections waiting in
  the kernel's accept queues of the master's listeners (``listeners.listen_queue``, one
  getsockopt each), summed as gunicorn's arbiter sums them. No request pays for it.

The names are gunicorn's (gunicorn/instrument/statsd.py and its arbiter), with its prefix rule: a
dashboard or alert built on a gunicorn's statsd metrics reads greenserve's unchanged.

The socket is a non-blocking datagram socket made from ``_socket`` (gevent does not patch it):
a datagram that cannot be sent now (no receiver, a full buffer) is dropped and counted, never
waited for, and no error reaches a request. The first error is logged, then at most one line a
minute, with the count of datagrams lost.
"""

import _socket
import errno
import socket
from time import monotonic

from greenserve.listeners import listen_queue, split_host_port
from greenserve.observe.stats import SHED_REASONS, Sink

# gunicorn's metric names.
REQUESTS = "gunicorn.requests"  # counter
DURATION = "gunicorn.request.duration"  # timer, milliseconds
STATUS = "gunicorn.request.status.%d"  # counter per status code
WORKERS = "gunicorn.workers"  # gauge, from the master
# A histogram, as gunicorn 24.1's arbiter sends it (not a gauge): a statsd server turns it into the
# same series (.max, .avg, ... per flush) that a dashboard built on gunicorn's reads.
BACKLOG = "gunicorn.backlog"  # histogram, from the master, with --enable-backlog-metric
# greenserve's own, outside gunicorn's names: of the requests counted in gunicorn.requests, the
# ones that came over HTTP/2 (a line only in a turn that had some).
HTTP2_REQUESTS = "greenserve.http2.requests"  # counter
STATIC_REQUESTS = "greenserve.static.requests"  # counter: of the requests, those --static answered
# Overload control's (greenserve/admission.py), with it on: requests answered 503 without calling
# the application, by why (stats.SHED_REASONS); each request's queue time, and how late the loop
# ran its timer (sampled every 10 ms while requests arrive), as timers in milliseconds.
SHED = "greenserve.requests.shed.%s"  # counter
QUEUE_TIME = "greenserve.request.queue_time"  # timer, milliseconds
LOOP_DELAY = "greenserve.loop.delay"  # timer, milliseconds

DEFAULT_PORT = 8125  # statsd's (and gunicorn's, for a host without one)
# The largest datagram sent: 1500 (Ethernet's MTU) less IPv6's 40 and UDP's 8 header bytes, less
# room for a tunnel; datadog's clients use the same. Larger datagrams are fragmented, and one lost
# fragment loses them whole.
PAYLOAD = 1432
_LOG_EVERY = 60.0  # seconds between two lines about send errors


def parse_address(value):
    """``HOST:PORT``, ``[IPV6]:PORT``, ``HOST`` (port 8125) or ``unix:PATH`` -> (family, address),
    the address as ``socket.connect`` and ``sendto`` take it (host not resolved). ValueError."""
    text = value.strip()
    if text.startswith("unix:"):
        path = text[5:]
        if not path:
            raise ValueError("unix: needs a path (unix:/run/statsd.sock)")
        return (socket.AF_UNIX, path)
    host, port = split_host_port(text)
    port = port or str(DEFAULT_PORT)
    if not host:
        raise ValueError("no host in %r (expected HOST:PORT or unix:PATH)" % text)
    if not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError("invalid port in %r" % text)
    return (socket.AF_INET6 if ":" in host else socket.AF_INET, (host, int(port)))


def resolve(value):
    """The address to send to: the host resolved once (in the master, at start). ValueError."""
    family, address = parse_address(value)
    if family == socket.AF_UNIX:
        return family, address
    try:
        found = socket.getaddrinfo(address[0], address[1], family, socket.SOCK_DGRAM)
    except (OSError, UnicodeError) as exc:
        raise ValueError("cannot resolve %s: %s" % (address[0], getattr(exc, "strerror", None) or exc)) from None
    return found[0][0], found[0][4]


def normalize_prefix(value):
    """gunicorn's rule: a prefix given ends with exactly one dot (``app`` and ``app.`` -> ``app.``)."""
    prefix = value.rstrip(".")
    return prefix + "." if prefix else ""


def check_tags(value):
    """dogstatsd tags as gunicorn takes them, ``key:value,key2:value2``. ValueError."""
    try:
        value.encode("ascii")
    except UnicodeError:
        raise ValueError("dogstatsd tags must be ASCII, got %r" % value) from None
    if any(char in value for char in "|\n\r") or value != value.strip():
        raise ValueError("dogstatsd tags are tag,tag,...: no '|', line break or surrounding spaces, got %r" % value)
    return value


class StatsdSink(Sink):
    """Lines for a statsd server at ``address`` (from ``resolve``); see the module docstring.

    ``schedule(callback)`` runs ``callback`` once at the end of this loop turn (in a worker,
    ``hub.loop.run_callback``); the master passes None and sends its gauge at once."""

    def __init__(self, address, prefix="", tags="", schedule=None, log=None):
        family, self.address = address
        self.sock = _socket.socket(family, _socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.connected = False
        if family != socket.AF_UNIX:
            # Connected: the kernel reports an unreachable port (ECONNREFUSED) on a later send,
            # which is counted; a unix path is sent to by name, so a receiver restarted later is found.
            self.sock.connect(self.address)
            self.connected = True
        self.prefix = normalize_prefix(prefix)
        self.suffix = "|#" + tags if tags else ""
        self.schedule = schedule
        self.log = log
        # Counters of this turn, and each request's duration (seconds).
        self.requests = 0
        self.http2_requests = 0
        self.static_requests = 0
        self.statuses = {}
        self.durations = []
        self.shed = [0] * len(SHED_REASONS)
        self.queue_times = []
        self.loop_delays = []
        self.scheduled = False
        self.lost = 0  # datagrams not sent (an error), since the last line about it
        self.logged = None  # when the last line about errors was written
        self.workers_due = 0.0
        # In the master with --enable-backlog-metric: the listeners whose queues are summed.
        self.listeners = ()

    def request(self, status, method, duration, received, sent):
        """One request answered (see stats.Sink.request)."""
        self.requests += 1
        self.statuses[status] = self.statuses.get(status, 0) + 1
        self.durations.append(duration)
        if not self.scheduled:
            self.scheduled = True
            self.schedule(self.flush)

    def http2_request(self):
        """The request just told of came over HTTP/2 (see stats.Sink.http2_request)."""
        self.http2_requests += 1

    def static_request(self):
        """--static answered the request (see stats.Sink.static_request)."""
        self.static_requests += 1

    def queued(self, seconds, shed):
        """Overload control checked a request (see stats.Sink.queued)."""
        if shed:
            self.shed[shed - 1] += 1
        self.queue_times.append(seconds)
        if not self.scheduled:
            self.scheduled = True
            self.schedule(self.flush)

    def loop_delay(self, seconds):
        """How late overload control's timer ran (see stats.Sink.loop_delay). Kept for the next
        turn that answers a request, which sends it: the timer runs every 10 ms while requests
        arrive, and a datagram of its own each time would be a hundred a second to statsd (a unix
        datagram socket's queue filled and dropped the requests' lines with them)."""
        self.loop_delays.append(seconds)

    def lines(self):
        """This turn's lines (str), and the counters emptied."""
        prefix, suffix = self.prefix, self.suffix
        # (A turn with no request answered yet may flush overload control's timers alone.)
        out = ["%s%s:%d|c%s" % (prefix, REQUESTS, self.requests, suffix)] if self.requests else []
        for status, count in self.statuses.items():
            out.append("%s%s:%d|c%s" % (prefix, STATUS % status, count, suffix))
        timer = prefix + DURATION + ":%.3f|ms" + suffix
        out.extend([timer % (duration * 1000.0) for duration in self.durations])
        if self.http2_requests:
            out.append("%s%s:%d|c%s" % (prefix, HTTP2_REQUESTS, self.http2_requests, suffix))
            self.http2_requests = 0
        if self.static_requests:
            out.append("%s%s:%d|c%s" % (prefix, STATIC_REQUESTS, self.static_requests, suffix))
            self.static_requests = 0
        for index, count in enumerate(self.shed):
            if count:
                out.append("%s%s:%d|c%s" % (prefix, SHED % SHED_REASONS[index], count, suffix))
                self.shed[index] = 0
        for name, values in ((QUEUE_TIME, self.queue_times), (LOOP_DELAY, self.loop_delays)):
            if values:
                timer = prefix + name + ":%.3f|ms" + suffix
                out.extend([timer % (value * 1000.0) for value in values])
                del values[:]
        self.requests = 0
        self.statuses = {}
        self.durations = []
        return out

    def flush(self):
        """The loop callback: this turn's lines, sent. Never raises (a loop callback's exception
        would be printed by the hub for every turn)."""
        self.scheduled = False
        try:
            self.send(self.lines())
        except Exception as exc:  # a bug here must not take the worker's loop with it
            self._failed(exc)

    def turn(self, now, workers, readable, writable):
        """In the master, from each turn of its loop: the worker count, and the backlog when
        asked for (``listeners``), at most once a second."""
        if now >= self.workers_due:
            self.workers_due = now + 1.0
            lines = ["%s%s:%d|g%s" % (self.prefix, WORKERS, workers, self.suffix)]
            queues = [queue[0] for queue in map(listen_queue, self.listeners) if queue is not None]
            if queues:
                lines.append("%s%s:%d|h%s" % (self.prefix, BACKLOG, sum(queues), self.suffix))
            self.send(lines)

    def send(self, lines):
        for datagram in pack(lines):
            try:
                if self.connected:
                    self.sock.send(datagram)
                else:
                    self.sock.sendto(datagram, self.address)
            except OSError as exc:
                self._failed(exc)

    def _failed(self, exc):
        self.lost += 1
        now = monotonic()
        if self.logged is not None and now - self.logged < _LOG_EVERY:
            return
        self.logged = now
        if self.log is not None:
            why = errno.errorcode.get(getattr(exc, "errno", None) or 0) or type(exc).__name__
            self.log.warning(
                "statsd: cannot send to %s (%s: %s): %d datagram(s) lost; said at most once a minute"
                % (_describe(self.address), why, getattr(exc, "strerror", None) or exc, self.lost)
            )
        self.lost = 0

    def forked(self):
        self.sock.close()  # (the worker makes its own)

    def close(self):
        self.sock.close()


def pack(lines):
    """``lines`` joined by newlines into datagrams (bytes) of at most PAYLOAD bytes each; a line
    longer than that alone (the server may still take it)."""
    datagrams = []
    current = []
    size = 0
    for line in lines:
        data = line.encode("ascii")
        if current and size + 1 + len(data) > PAYLOAD:
            datagrams.append(b"\n".join(current))
            current = []
            size = 0
        size += len(data) + (1 if current else 0)
        current.append(data)
    if current:
        datagrams.append(b"\n".join(current))
    return datagrams


def _describe(address):
    if isinstance(address, tuple):
        return "[%s]:%d" % address[:2] if ":" in address[0] else "%s:%d" % address[:2]
    return "unix:" + address

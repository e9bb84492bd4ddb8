"""Metrics (``--metrics-bind``): each worker's counters, its reports to the master, and the master's ``GET /metrics``.

The master's side. A worker counts in ``stats`` (``WorkerStats``, the per-request seam, compiled
with the hot path) and writes a snapshot line on its heartbeat pipe once per beat; here:

- ``MasterMetrics``, the arbiter's observer (``stats.Sink``): the last snapshot of each worker,
  the counters of workers that have exited (folded in when the arbiter reaps them, so no counter
  goes backwards), the worker exits by reason, and a tiny HTTP/1.0 responder run from the
  arbiter's own select loop: a scrape never waits on a worker, and the master never imports gevent.

Beside them, the listen queue gauges (``render_listen_queues``). The master's once-a-second look
at its queues (``ListenQueueCheck``, which warns of an overflow with or without --metrics-bind
and counts it for the exposition) and ``listen_queue``, the one reader of a listener's queue,
live in ``listeners``: the master runs that check always, and this module (with the compiled
``stats`` under it) would be ~0.3 MB of its RSS.

What a worker served after its last report is lost if it is killed (kill -9, the OOM killer, a
blocked loop's SIGKILL): at most one heartbeat interval of its requests (1 s, or timeout/4). A
worker that stops normally sends a last report on its way out.
"""

import errno
import os

from greenserve.http.errors import error_response
from greenserve.http.grammar import TCHAR
from greenserve.listeners import close_all, listen_queue, listener_name as _listener_name
from greenserve.observe.stats import Sink
from greenserve.observe.stats import (  # the snapshot's layout, written by stats.WorkerStats.report
    ACCEPT_PAUSED, ACTIVE, BUCKETS, COUNTERS, DURATION_SUM, DURATIONS, FIELDS, HEADER, HTTP2_REQUESTS, IDLE, IN_USE,
    LIMIT, LOOP_BLOCKED, LOOP_LAG, METHODS, POOL_FULL, RECEIVED, REQUESTS, SENT, STATS, STATUS_CLASSES,
    DELAY_BUCKETS, LOOP_DELAY_SUM, LOOP_DELAYS, QUEUE_TIME_SUM, QUEUE_TIMES, SHED, SHED_REASONS, STATIC_REQUESTS,
)


def parse_report(line):
    """The numbers of one snapshot line (without STATS and the newline); None if malformed."""
    try:
        values = [float(field) for field in line.split()]
    except ValueError:
        return None
    return values if len(values) == FIELDS else None


def last_report(data):
    """The last complete snapshot in what the master read from a worker's pipe, or None."""
    end = data.rfind(b"\n")
    while end >= 0:
        start = data.rfind(STATS, 0, end)
        if start < 0:
            return None
        values = parse_report(data[start + 1:end])
        if values is not None:
            return values
        end = data.rfind(b"\n", 0, start)
    return None


# Why a worker ended, as the arbiter knows it (greenserve_worker_exits_total's reason label).
EXIT_REASONS = (
    "max_requests", "memory", "memory_hard", "lifetime", "timeout", "reload", "scale_down", "stop",
    "boot_failure", "crash",
)


class MasterMetrics(Sink):
    """The master's side: per-worker snapshots, what exited workers counted, exits by reason,
    and the ``/metrics`` endpoint on ``sock`` (a bound, listening, non-blocking socket)."""

    def __init__(self, sock):
        self.sock = sock
        self.unix_path = None  # the socket file to remove at the end, for unix:PATH
        self.reports = {}  # pid -> the last snapshot (a list of FIELDS numbers)
        self.dead = [0.0] * COUNTERS  # the counters of workers that have exited
        self.exits = dict.fromkeys(EXIT_REASONS, 0)
        self.clients = {}  # fd -> _Client
        self.listeners = []  # the master's listening sockets whose accept queue is shown (Linux)
        self.multiproc_dir = None  # --prometheus-multiproc-dir: the application's metrics
        self.arbiter = None  # set by the master: the arbiter whose workers it shows (and whose log it uses)

    # --- from the arbiter (stats.Sink's master events) ---

    def worker_heard(self, pid, data):
        values = last_report(data)
        if values is not None:
            self.reports[pid] = values

    def worker_exited(self, pid, reason):
        """Fold the exited worker's last counters into the totals, so that no sum goes down."""
        values = self.reports.pop(pid, None)
        if values is not None:
            dead = self.dead
            for index in range(COUNTERS):
                dead[index] += values[index]
        self.exits[reason] = self.exits.get(reason, 0) + 1
        if self.multiproc_dir is not None:
            # Its live gauges (livesum, liveall, ...) leave the sums; its counters stay.
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, self.multiproc_dir)

    def readers(self):
        return [self.sock.fileno()] + [fd for fd, client in self.clients.items() if client.out is None]

    def writers(self):
        return [fd for fd, client in self.clients.items() if client.out is not None]

    def turn(self, now, workers, readable, writable):
        """One turn of the arbiter's loop: accept, read, answer, write, expire. Never blocks."""
        if self.sock.fileno() in readable:
            self._accept(now)
        for fd in list(self.clients):
            client = self.clients[fd]
            if fd in readable and client.out is None:
                self._read(client)
            elif fd in writable and client.out is not None:
                self._write(client)
            elif now > client.deadline:
                self._close(client)

    def forked(self):
        """In a new worker: none of these descriptors may stay open there (a scrape in progress
        would not see its connection close while a worker held a copy)."""
        for client in self.clients.values():
            client.sock.close()
        self.clients = {}
        self.sock.close()

    def close(self):
        """The master stops: the endpoint closed, and its unix socket file (unix:PATH) removed."""
        self.forked()
        if self.unix_path is not None:
            close_all((), [self.unix_path])

    # --- the HTTP/1.0 responder ---

    def _accept(self, now):
        for _ in range(16):
            try:
                sock, _address = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return  # the next wake-up tries again
                if exc.errno == errno.ECONNABORTED:
                    continue
                raise
            sock.setblocking(False)
            self.clients[sock.fileno()] = _Client(sock, now + _CLIENT_TIMEOUT)

    def _read(self, client):
        try:
            data = client.sock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(client)
            return
        client.head += data
        try:
            request_line = _request_line(client.head)
        except ValueError as exc:
            self._answer(client, b"GET", *error_response(400, str(exc)))
            return
        if request_line is None or (b"\r\n\r\n" not in client.head and b"\n\n" not in client.head):
            if len(client.head) > _HEAD_LIMIT:
                self._close(client)
            return
        method, target = request_line
        target = target.split(b"?", 1)[0]
        if method not in (b"GET", b"HEAD"):
            status, headers, body = error_response(405, "the metrics are at GET /metrics")
            headers.append(("Allow", "GET, HEAD"))
        elif target != b"/metrics":
            status, headers, body = error_response(404, "the metrics are at /metrics")
        else:
            try:
                body = self.exposition()
                status, headers = "200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))]
            except Exception as exc:  # (a corrupt prometheus_client file): the master serves on
                why = "the metrics could not be rendered: %s: %s" % (type(exc).__name__, exc)
                log = getattr(self.arbiter, "log", None)
                if log is not None:
                    log.error("GET /metrics: " + why)
                status, headers, body = error_response(500, why)  # (for the operator's scraper: ours to tell)
        self._answer(client, method, status, headers, body)

    def _answer(self, client, method, status, headers, body):
        head = "HTTP/1.0 %s\r\n%sConnection: close\r\n\r\n" % (
            status, "".join("%s: %s\r\n" % header for header in headers))
        head = head.encode("latin-1")
        client.out = head if method == b"HEAD" else head + body
        self._write(client)

    def _write(self, client):
        try:
            sent = client.sock.send(client.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(client)
            return
        client.out = client.out[sent:]
        if not client.out:
            self._close(client)

    def _close(self, client):
        self.clients.pop(client.sock.fileno(), None)
        client.sock.close()

    # --- the exposition ---

    def totals(self):
        """The counters summed over live and exited workers, and the gauges over live ones."""
        totals = list(self.dead) + [0.0] * (FIELDS - COUNTERS)
        for values in self.reports.values():
            for index in range(FIELDS):
                totals[index] += values[index]
        return totals

    def exposition(self, now=None):
        """The Prometheus text format (0.0.4) of everything, as bytes."""
        workers = list(self.arbiter.workers.values()) if self.arbiter is not None else []
        if now is None:
            from greenserve.process.arbiter import _monotonic

            now = _monotonic()
        text = render(self.totals(), self.exits, workers, self.reports, now) + render_listen_queues(self.listeners)
        check = getattr(self.arbiter, "listen_check", None)
        if check is not None and check.listeners:
            text += (
                "# HELP greenserve_listen_overflows_total Connections the kernel dropped because a listen "
                "queue was full while greenserve's had some waiting (TcpExt ListenOverflows).\n"
                "# TYPE greenserve_listen_overflows_total counter\n"
                "greenserve_listen_overflows_total %d\n" % check.overflows
            )
        text = text.encode("utf-8")
        if self.multiproc_dir is not None:
            text += application_metrics(self.multiproc_dir)
        return text


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_CLIENT_TIMEOUT = 5.0  # a scraper that sends no request in this long is closed
_HEAD_LIMIT = 8192


def _request_line(head):
    """``(method, target)`` of the request line ``head`` starts with; None while it is still coming;
    ValueError (its message the 400's detail) as soon as the bytes cannot be an HTTP/1.x request.

    Waiting for the end of a head that never comes held such a connection for _CLIENT_TIMEOUT (5 s):
    a TLS ClientHello (its first byte, 0x16, is no method's), or an HTTP/0.9 line (``GET /``),
    after which a client sends nothing more.
    """
    end = head.find(b"\n")
    line = head if end < 0 else head[:end].rstrip(b"\r")
    method, space, rest = line.partition(b" ")
    if method.translate(None, TCHAR) or (space and not method):
        raise ValueError("not an HTTP request (TLS? this endpoint is plain HTTP: GET /metrics HTTP/1.1)")
    if end < 0:
        if len(head) > _HEAD_LIMIT:
            raise ValueError("no request line in %d bytes" % _HEAD_LIMIT)
        return None
    target, space, version = rest.partition(b" ")
    if not space or not version.startswith(b"HTTP/1."):
        raise ValueError("not an HTTP/1.x request line (HTTP/0.9 is not served: GET /metrics HTTP/1.1)")
    return method, target


class _Client:
    __slots__ = ("sock", "deadline", "head", "out")

    def __init__(self, sock, deadline):
        self.sock = sock
        self.deadline = deadline
        self.head = b""
        self.out = None  # the answer, once the request is read


def _number(value):
    if value == int(value) and abs(value) < 1e15:
        return "%d" % value
    return repr(float(value))


def _histogram(out, name, bounds, totals, first, total):
    """A histogram's lines from its per-bucket counts at ``first`` (+Inf last) and its sum."""
    cumulative = 0.0
    for index, bound in enumerate(bounds + (float("inf"),)):
        cumulative += totals[first + index]
        out.append('greenserve_%s_bucket{le="%s"} %s\n'
                   % (name, "+Inf" if index == len(bounds) else repr(bound), _number(cumulative)))
    out.append("greenserve_%s_sum %s\n" % (name, repr(float(totals[total]))))
    out.append("greenserve_%s_count %s\n" % (name, _number(cumulative)))


def render(totals, exits, workers, reports, now):
    """The exposition text: ``totals`` (see MasterMetrics.totals), ``exits`` by reason,
    ``workers`` (the arbiter's Worker records: number, pid, last_beat), ``reports`` by pid."""
    out = []

    def family(name, kind, help_text):
        out.append("# HELP greenserve_%s %s\n# TYPE greenserve_%s %s\n" % (name, help_text, name, kind))

    family("requests_total", "counter", "Requests answered, by method and status class.")
    for m, method in enumerate(METHODS):
        for c, klass in enumerate(STATUS_CLASSES):
            count = totals[REQUESTS + m * 5 + c]
            if count:
                out.append('greenserve_requests_total{method="%s",status="%s"} %s\n' % (method, klass, _number(count)))
    family("request_duration_seconds", "histogram",
           "Seconds from a request's head to the end of its response.")
    _histogram(out, "request_duration_seconds", BUCKETS, totals, DURATIONS, DURATION_SUM)
    family("requests_shed_total", "counter",
           "Requests overload control answered 503 without calling the application, by why: overload "
           "(they waited in a saturated event loop past the target), queue_time (past max_queue_time).")
    for index, reason in enumerate(SHED_REASONS):
        out.append('greenserve_requests_shed_total{reason="%s"} %s\n' % (reason, _number(totals[SHED + index])))
    family("queue_time_seconds", "histogram",
           "Seconds each request queued before its application started: in the worker's event loop, "
           "and since a trusted proxy's X-Request-Start (with overload control on).")
    _histogram(out, "queue_time_seconds", DELAY_BUCKETS, totals, QUEUE_TIMES, QUEUE_TIME_SUM)
    family("loop_delay_seconds", "histogram",
           "How late a timer ran in the workers' event loops, sampled every 10 ms while requests "
           "arrive (with overload control on): the CPU's queue.")
    _histogram(out, "loop_delay_seconds", DELAY_BUCKETS, totals, LOOP_DELAYS, LOOP_DELAY_SUM)
    family("request_body_bytes_total", "counter", "Request body bytes received.")
    out.append("greenserve_request_body_bytes_total %s\n" % _number(totals[RECEIVED]))
    family("response_body_bytes_total", "counter", "Response body bytes sent.")
    out.append("greenserve_response_body_bytes_total %s\n" % _number(totals[SENT]))
    family("loop_blocked_total", "counter",
           "Times a worker's event loop was found blocked longer than --max-blocking-time (counted only with it).")
    out.append("greenserve_loop_blocked_total %s\n" % _number(totals[LOOP_BLOCKED]))
    family("pool_full_total", "counter",
           "Times a worker's connection pool (--worker-connections) was full and it stopped accepting.")
    out.append("greenserve_pool_full_total %s\n" % _number(totals[POOL_FULL]))
    family("accept_paused_seconds_total", "counter",
           "Seconds workers did not accept because their pool was full (new clients waited in the backlog).")
    out.append("greenserve_accept_paused_seconds_total %s\n" % repr(float(totals[ACCEPT_PAUSED])))
    family("http2_requests_total", "counter",
           "Requests answered over HTTP/2 (one per stream), of those in greenserve_requests_total.")
    out.append("greenserve_http2_requests_total %s\n" % _number(totals[HTTP2_REQUESTS]))
    family("static_requests_total", "counter",
           "Requests answered by --static from its directories (without the application), of those in "
           "greenserve_requests_total.")
    out.append("greenserve_static_requests_total %s\n" % _number(totals[STATIC_REQUESTS]))
    family("connections", "gauge",
           "Open connections: active (a request in progress), idle (keep-alive, between requests), "
           "header (its request head not complete yet).")
    for state, index in (("active", ACTIVE), ("idle", IDLE), ("header", HEADER)):
        out.append('greenserve_connections{state="%s"} %s\n' % (state, _number(totals[index])))
    per_worker = (
        ("worker_connections", "Connection slots of each worker (--worker-connections).", LIMIT),
        ("worker_connections_in_use", "Connection slots in use, per worker.", IN_USE),
        ("loop_lag_seconds", "How late a worker's heartbeat timer ran (the longest since its last report).",
         LOOP_LAG),
    )
    workers = sorted(workers, key=lambda w: w.number)
    for name, help_text, index in per_worker:
        family(name, "gauge", help_text)
        for worker in workers:
            values = reports.get(worker.pid)
            if values is not None:
                out.append('greenserve_%s{worker="%d"} %s\n' % (name, worker.number, _number(values[index])))
    family("heartbeat_age_seconds", "gauge", "Seconds since the master last heard from each worker.")
    for worker in workers:
        out.append('greenserve_heartbeat_age_seconds{worker="%d"} %.3f\n'
                   % (worker.number, max(0.0, now - worker.last_beat)))
    family("workers", "gauge", "Worker processes running.")
    out.append("greenserve_workers %d\n" % len(workers))
    family("worker_exits_total", "counter", "Workers that ended, by why.")
    for reason in sorted(exits):
        out.append('greenserve_worker_exits_total{reason="%s"} %d\n' % (reason, exits[reason]))
    return "".join(out)


def render_listen_queues(listeners):
    """The listen queue gauges of ``listeners`` (empty where none can be read)."""
    queues = []
    for sock in listeners:
        queue = listen_queue(sock)
        if queue is not None:
            queues.append((_listener_name(sock), queue))
    if not queues:
        return ""
    out = [
        "# HELP greenserve_listen_queue Connections the kernel has completed that no worker has accepted yet.\n",
        "# TYPE greenserve_listen_queue gauge\n",
    ]
    out.extend('greenserve_listen_queue{listener="%s"} %d\n' % (name, queue[0]) for name, queue in queues)
    out.append("# HELP greenserve_listen_queue_limit The most connections the kernel queues (--backlog, capped by somaxconn).\n")
    out.append("# TYPE greenserve_listen_queue_limit gauge\n")
    out.extend('greenserve_listen_queue_limit{listener="%s"} %d\n' % (name, queue[1]) for name, queue in queues)
    return "".join(out)


def prepare_multiprocess_dir(path):
    """--prometheus-multiproc-dir, in the master before any worker (or --preload's import): the
    directory made if missing and emptied of prometheus_client's files (a previous run's would
    be summed in), and PROMETHEUS_MULTIPROC_DIR set for the workers, which inherit it. Only .db
    files are removed: a directory given by mistake loses nothing else. ValueError: one line."""
    import glob
    from importlib.util import find_spec

    if find_spec("prometheus_client") is None:  # the workers need it; the master merges with it
        raise ValueError("needs prometheus_client (pip install prometheus_client)")
    try:
        os.makedirs(path, exist_ok=True)
        for name in glob.glob(os.path.join(glob.escape(path), "*.db")):
            os.unlink(name)
    except OSError as exc:
        raise ValueError(exc.strerror or str(exc)) from None
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = path


def application_metrics(path):
    """The application's metrics of every worker (prometheus_client's multiprocess collector),
    in the text format. Read at each scrape: a few ms for a few workers' files."""
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path)
    return generate_latest(registry)

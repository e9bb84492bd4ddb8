"""Parser micro-benchmark: requests parsed per second by greenserve's HTTP/1.1 parser and its peers.

    python bench/parser.py                                # 5 repeats of 1 s per parser and group
    python bench/parser.py --repeats 3 --seconds 0.5      # quicker, noisier
    python bench/parser.py --cpu 0 --markdown bench/results/parser.md --json bench/results/parser.json
    python bench/parser.py --parsers compiled,h11,h11-fresh

Parsers (``--parsers``; the first four run by default):

  compiled    greenserve.http.parser, the Cython build (GREENSERVE_PURE_PYTHON unset)
  pure        greenserve.http.parser, the plain-Python build (GREENSERVE_PURE_PYTHON=1)
  httptools   httptools.HttpRequestParser (llhttp, C) with a small callback object
  h11         h11.Connection(h11.SERVER), one per connection, a minimal response sent after each
              request so that start_next_cycle() may begin the next (h11 needs one)
  h11-fresh   h11 as its own benchmark drives it: a fresh Connection per request, no response.
              It cannot follow pipelined requests, so it skips that group. Shows what the minimal
              response costs the h11 row.

The corpus is bench/corpus/requests.py: a fixed list of connections in four groups (browser,
api, chunked, pipelined), each connection being the reads a server would get. Every parser gets
the same reads, through its own ordinary API: a new parser per connection, one feed per read,
every event drained after each read, every request consumed to its end (head, body, end of
message). Before timing, each parser's output for every connection is checked against the
corpus (method, target, number of header fields, body); while timing, the requests, header
fields and body bytes it yields are counted and checked after every measurement. A parser that
yields anything else is reported as invalid and not measured further. A parser that cannot run
(not installed; greenserve's compiled parser missing or older than its source) is skipped, with
the reason in the report.

Every parser runs in a subprocess of this script (``--worker``), started fresh for each repeat:
the greenserve build is chosen per process, and all parsers run alike. Within a repeat, each
group is measured for ``--seconds`` per parser, cut into slices of about ``--slice`` seconds that
the parsers take in turn (the order rotating from slice to slice), so that noise from the rest of
a shared machine falls on all of them alike; a repeat's rate is its requests ÷ its time, over all
its slices. The table gives medians over the repeats; "all" is the whole corpus (every request
counted once: total requests ÷ the sum of each group's time per pass); the ratios are medians of
per-repeat ratios, each pairing measurements interleaved in time. The garbage collector stays on,
as in a server.
"""

import argparse
import datetime
import gc
import json
import os
import platform
import select
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.corpus.requests import GROUPS  # noqa: E402
from bench.lib import ROOT, machine, report  # noqa: E402

GROUP_NAMES = tuple(GROUPS)

# The project's targets (the parser issue): (numerator, denominator, minimum ratio).
TARGETS = [
    ("compiled", "httptools", 0.7),
    ("compiled", "h11", 20.0),
    ("pure", "h11", 3.0),
]


class Skip(Exception):
    """This parser, or this group for this parser, cannot run here; the message says why."""


class Invalid(Exception):
    """A parser yielded something other than what the corpus holds."""


# --------------------------------------------------------------------------------------------
# The parsers. Each is a row of PARSERS, whose adapter gives ``info`` (versions, build),
# ``collect(conn)`` (every request of one connection as (method, target, header count, body),
# for the check before timing) and ``make_pass(conns)`` (a function that parses the given
# connections once and returns the numbers of requests, header fields and body bytes it got).
# The parsers that hand out events (greenserve's, h11) differ only in a few names, so each is
# described by a Pull row and driven by the one pair of loops below: ``collect`` and the pass
# drive a parser the same way, and the pass only counts instead of keeping. httptools calls back
# instead, so its adapter is its callback object.


class Pull:
    """How to drive a parser that is fed bytes and then asked for events until it needs more.

    ``new()`` makes a parser for a connection; ``feed(parser, data)`` and ``next_event(parser)``
    are its two calls. An event ``is need_data``, or is of type ``head`` (a request head with
    ``method``, ``target`` and ``headers``), or of type ``body`` (``body_of(event)`` its bytes, the
    event itself when None), or is the end of a request (``end``: the object itself, or its type).
    ``after_end(parser)``, if given, is what the parser needs before the next request; ``fresh``
    asks for a new parser per request instead, and ``pending(parser)`` says whether bytes of a
    next request are left in it (a fresh parser would lose them).
    """

    def __init__(self, new, feed, next_event, need_data, head, body, end, body_of=None, after_end=None,
                 fresh=False, pending=None):
        self.new, self.feed, self.next_event = new, feed, next_event
        self.need_data, self.head, self.body, self.end = need_data, head, body, end
        self.body_of, self.after_end, self.fresh, self.pending = body_of, after_end, fresh, pending


def _text(value):
    return value.decode("latin-1") if type(value) is bytes else value


def pull_collect(spec, conn):
    """Every request of one connection, as (method, target, header count, body)."""
    out = []
    parser = head = body = None
    for data in conn.reads:
        if parser is None:
            parser = spec.new()
        spec.feed(parser, data)
        while True:
            ev = spec.next_event(parser)
            t = type(ev)
            if ev is spec.need_data:
                break
            if t is spec.body:
                body.append(ev if spec.body_of is None else spec.body_of(ev))
            elif t is spec.head:
                head, body = ev, []
            elif ev is spec.end or t is spec.end:
                out.append((_text(head.method), _text(head.target), len(head.headers), b"".join(body)))
                if spec.fresh:
                    if spec.pending(parser):
                        raise Skip("a fresh parser per request cannot follow pipelined requests")
                    parser = None
                    break
                if spec.after_end is not None:
                    spec.after_end(parser)
            else:
                raise Invalid("unexpected event %r" % (ev,))
    return out


def pull_pass(spec, conns):
    """A function that parses `conns` once: (requests, header fields, body bytes).

    The timed loop: everything it needs is bound to a local first, and it keeps nothing.
    """
    reads_list = [c.reads for c in conns]
    new, feed, next_event, NEED_DATA = spec.new, spec.feed, spec.next_event, spec.need_data
    HEAD, BODY, END, body_of, after_end, fresh = spec.head, spec.body, spec.end, spec.body_of, spec.after_end, spec.fresh

    def one_pass():
        requests = headers = body = 0
        for reads in reads_list:
            parser = None
            for data in reads:
                if parser is None:
                    parser = new()
                feed(parser, data)
                while True:
                    ev = next_event(parser)
                    if ev is NEED_DATA:
                        break
                    t = type(ev)
                    if t is BODY:
                        body += len(ev if body_of is None else body_of(ev))
                    elif t is HEAD:
                        headers += len(ev.headers)
                    elif ev is END or t is END:
                        requests += 1
                        if fresh:
                            parser = None
                            break
                        if after_end is not None:
                            after_end(parser)
                    else:
                        raise Invalid("unexpected event %r" % (ev,))
        return requests, headers, body

    return one_pass


def pulled(info, spec):
    """A Pull row as an adapter's (info, collect, make_pass)."""
    return info, lambda conn: pull_collect(spec, conn), lambda conns: pull_pass(spec, conns)


PARSER_NAME = "greenserve.http.parser"


def _source_digest():
    import hashlib

    with open(os.path.join(ROOT, "greenserve", "http", "parser.py"), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()[:12]


def _load_compiled_parser(_accel):
    """Make sure ``greenserve.http.parser`` is its compiled build, or raise Skip saying why.

    greenserve's import hook runs the whole hot path as pure Python when any one of its compiled
    modules is older than its source (a working tree being edited). The parser's own build
    depends on nothing else (its .pxd cimports nothing), so when it is fresh it is loaded
    directly, and the report says so; when it is stale, or missing, it is not measured.
    """
    from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader
    from importlib.util import module_from_spec, spec_from_file_location

    if _accel.pure_python_requested():
        raise Skip("%s is set" % _accel.PURE_PYTHON_ENV)
    base = os.path.join(ROOT, "greenserve", "http", "parser")
    binary = next((base + s for s in EXTENSION_SUFFIXES if os.path.exists(base + s)), None)
    if binary is None:
        raise Skip("no compiled build of greenserve/http/parser.py (build it with: pip install -e .)")
    for source in (base + ".py", base + ".pxd"):
        if os.path.exists(source) and os.path.getmtime(source) > os.path.getmtime(binary):
            raise Skip(
                "the compiled parser is older than %s (rebuild with: pip install -e .)" % os.path.relpath(source, ROOT)
            )
    finder = getattr(_accel, "_finder", None)
    try:
        if not finder.decided:
            finder._decide()
        via_hook = not finder.pure
    except AttributeError:
        via_hook = False
    if via_hook:
        return "greenserve's import hook"
    spec = spec_from_file_location(PARSER_NAME, binary, loader=ExtensionFileLoader(PARSER_NAME, binary))
    module = module_from_spec(spec)
    sys.modules[PARSER_NAME] = module
    spec.loader.exec_module(module)
    return (
        "loaded directly: greenserve's import hook would run the whole hot path as pure Python here (%s)"
        % _accel.why_pure()
    )


def _greenserve(expected_build):
    import greenserve
    from greenserve import _accel

    loaded = None
    if expected_build == "compiled":
        loaded = _load_compiled_parser(_accel)
    build = _accel.module_build(PARSER_NAME)
    if build != expected_build:
        raise Skip("greenserve's parser runs %s in this process, not %s" % (build, expected_build))
    from greenserve.http import parser as gp

    RequestParser, Limits, Request = gp.RequestParser, gp.Limits, gp.Request
    NEED_DATA, END_OF_MESSAGE = gp.NEED_DATA, gp.END_OF_MESSAGE
    limits = Limits()
    info = {
        "version": greenserve.__version__,
        "build": build,
        "module": os.path.relpath(gp.__file__, ROOT),
        "parser_py_sha256": _source_digest(),
    }
    if loaded:
        info["compiled_parser"] = loaded

    return pulled(info, Pull(
        new=lambda: RequestParser(limits), feed=RequestParser.feed, next_event=RequestParser.next_event,
        need_data=NEED_DATA, head=Request, body=bytes, end=END_OF_MESSAGE,
    ))


def _httptools():
    try:
        import httptools
    except ImportError as exc:
        raise Skip("httptools cannot be imported (pip install httptools): %s" % exc)
    HttpRequestParser = httptools.HttpRequestParser

    class Handler:
        """What a server keeps of each request (as uvicorn's httptools protocol does)."""

        __slots__ = (
            "parser", "url", "headers", "method", "version", "keep_alive", "requests", "nheaders", "body_bytes",
        )

        def __init__(self):
            self.requests = self.nheaders = self.body_bytes = 0

        def on_message_begin(self):
            self.url = b""
            self.headers = []

        def on_url(self, url):
            self.url += url

        def on_header(self, name, value):
            self.headers.append((name.lower(), value))

        def on_headers_complete(self):
            parser = self.parser
            self.method = parser.get_method()
            self.version = parser.get_http_version()
            self.keep_alive = parser.should_keep_alive()

        def on_body(self, body):
            self.body_bytes += len(body)

        def on_message_complete(self):
            self.requests += 1
            self.nheaders += len(self.headers)

    class Recorder(Handler):
        __slots__ = ("body", "out")

        def on_message_begin(self):
            Handler.on_message_begin(self)
            self.body = []

        def on_body(self, body):
            self.body.append(body)

        def on_message_complete(self):
            method, url = self.method.decode("latin-1"), self.url.decode("latin-1")
            self.out.append((method, url, len(self.headers), b"".join(self.body)))

    def collect(conn):
        handler = Recorder()
        handler.out = []
        handler.parser = p = HttpRequestParser(handler)
        for data in conn.reads:
            p.feed_data(data)
        return handler.out

    def make_pass(conns):
        reads_list = [c.reads for c in conns]

        def one_pass():
            requests = headers = body = 0
            for reads in reads_list:
                handler = Handler()
                handler.parser = p = HttpRequestParser(handler)
                for data in reads:
                    p.feed_data(data)
                requests += handler.requests
                headers += handler.nheaders
                body += handler.body_bytes
            return requests, headers, body

        return one_pass

    return {"version": httptools.__version__}, collect, make_pass


def _h11(fresh):
    try:
        import h11
    except ImportError as exc:
        raise Skip("h11 cannot be imported (pip install h11): %s" % exc)
    Connection, SERVER, NEED_DATA = h11.Connection, h11.SERVER, h11.NEED_DATA
    Request, Data, EndOfMessage = h11.Request, h11.Data, h11.EndOfMessage
    # The smallest response that lets the connection go on (keep-alive, empty body). Events are
    # immutable, so one object serves every request.
    RESPONSE = h11.Response(status_code=200, headers=[(b"content-length", b"0")])
    END = EndOfMessage()
    info = {"version": h11.__version__, "mode": "fresh Connection per request, no response" if fresh else
            "one Connection per connection; Response(200, content-length: 0) + EndOfMessage sent, "
            "then start_next_cycle(), after each request"}

    def respond(c):
        c.send(RESPONSE)
        c.send(END)
        c.start_next_cycle()

    return pulled(info, Pull(
        new=lambda: Connection(SERVER), feed=Connection.receive_data, next_event=Connection.next_event,
        need_data=NEED_DATA, head=Request, body=Data, end=EndOfMessage, body_of=lambda ev: ev.data,
        after_end=None if fresh else respond, fresh=fresh, pending=lambda c: c.trailing_data[0],
    ))


PURE_ENV = "GREENSERVE_PURE_PYTHON"  # greenserve._accel.PURE_PYTHON_ENV, without importing greenserve here


class Parser:
    def __init__(self, name, label, env, adapter, default=True):
        self.name = name
        self.label = label
        self.env = env  # environment changes for its worker (None: remove the variable)
        self.adapter = adapter
        self.default = default


PARSERS = [
    Parser("compiled", "greenserve compiled", {PURE_ENV: None}, lambda: _greenserve("compiled")),
    Parser("pure", "greenserve pure Python", {PURE_ENV: "1"}, lambda: _greenserve("pure Python")),
    Parser("httptools", "httptools (llhttp)", {}, _httptools),
    Parser("h11", "h11", {}, lambda: _h11(False)),
    Parser("h11-fresh", "h11, fresh Connection per request", {}, lambda: _h11(True), default=False),
]
BY_NAME = {p.name: p for p in PARSERS}


# --------------------------------------------------------------------------------------------
# The worker: one parser, every group, one repeat; prints one JSON object on stdout.


def expected_of(conn):
    return [(r.method, r.target, r.nheaders, r.body) for r in conn.requests]


def totals_of(conns):
    reqs = [r for c in conns for r in c.requests]
    return len(reqs), sum(r.nheaders for r in reqs), sum(len(r.body) for r in reqs)


def check(collect, conn):
    try:
        got = collect(conn)
    except (Skip, Invalid):
        raise
    except Exception as exc:
        raise Invalid("%s: %s: %s" % (conn.name, type(exc).__name__, exc))
    want = expected_of(conn)
    if got != want:
        for i, (g, w) in enumerate(zip(got, want)):
            if g != w:
                raise Invalid("%s, request %d: got %r, expected %r" % (conn.name, i, _short(g), _short(w)))
        raise Invalid("%s: got %d requests, expected %d" % (conn.name, len(got), len(want)))


def _short(t):
    return tuple(x[:40] if isinstance(x, (bytes, str)) else x for x in t)


class Bench:
    """One group's timed loop in a worker: warmed up once, then run slice after slice."""

    def __init__(self, one_pass, expected):
        self.one_pass = one_pass
        self.expected = expected  # (requests, header fields, body bytes) per pass
        self.batch = 0  # passes between two reads of the clock; set by the warm-up

    def warm_up(self, seconds):
        """Run for ``seconds`` untimed; size the batch run between two reads of the clock (about 5 ms)."""
        n = 0
        t0 = time.perf_counter()
        while True:
            self.one_pass()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
        self.batch = max(1, int(0.005 * n / elapsed))

    def run(self, seconds):
        """Parse the group's connections over and over for about ``seconds``; return (passes, elapsed)."""
        one_pass, batch, clock = self.one_pass, self.batch, time.perf_counter
        passes = requests = headers = body = 0
        t0 = clock()
        while True:
            for _ in range(batch):
                r, h, b = one_pass()
                requests += r
                headers += h
                body += b
            passes += batch
            elapsed = clock() - t0
            if elapsed >= seconds:
                break
        got = (requests, headers, body)
        want = tuple(x * passes for x in self.expected)
        if got != want:
            raise Invalid(
                "timed loop yielded (requests, header fields, body bytes) = %r, expected %r" % (got, want)
            )
        return passes, elapsed


def _reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def worker(name, groups, warmup):
    """One parser in its own process, driven over stdin/stdout, one JSON object per line.

    It first checks the parser's output for every connection of every group against the corpus
    and replies with its status and versions. Then, for each ``{"group": G, "seconds": S}`` read,
    it parses group G for about S seconds (warming up first, the first time) and replies with the
    passes made and the time taken, or with ``"status": "invalid"``.
    """
    parser = BY_NAME[name]
    benches = {}
    hello = {"parser": name, "skipped_groups": {}}
    try:
        info, collect, make_pass = parser.adapter()
        hello["info"] = info
        for group in groups:
            conns = GROUPS[group]
            try:
                for conn in conns:
                    check(collect, conn)
            except Skip as exc:
                hello["skipped_groups"][group] = str(exc)
                continue
            benches[group] = Bench(make_pass(conns), totals_of(conns))
        hello["status"] = "ok"
    except Skip as exc:
        hello.update(status="skipped", reason=str(exc))
    except Invalid as exc:
        hello.update(status="invalid", reason=str(exc))
    except Exception as exc:
        hello.update(status="failed", reason="%s: %s" % (type(exc).__name__, exc))
    _reply(hello)
    if hello["status"] != "ok":
        return
    for line in sys.stdin:
        command = json.loads(line)
        bench = benches[command["group"]]
        try:
            if not bench.batch:
                bench.warm_up(warmup)
            gc.collect()
            passes, elapsed = bench.run(command["seconds"])
        except Invalid as exc:
            _reply({"status": "invalid", "reason": str(exc)})
            return
        except Exception as exc:
            _reply({"status": "failed", "reason": "%s: %s" % (type(exc).__name__, exc)})
            return
        _reply({"status": "ok", "passes": passes, "elapsed": elapsed, "requests": passes * bench.expected[0]})


# --------------------------------------------------------------------------------------------
# The parent: runs the workers, summarizes, reports.


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, parser, args, groups):
        self.name = parser.name
        env = dict(os.environ)
        for key, value in parser.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        argv = [sys.executable, os.path.abspath(__file__), "--worker", parser.name,
                "--groups", ",".join(groups), "--warmup", repr(args.warmup)]
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, bufsize=1)

    def _stderr_tail(self):
        self.stderr.seek(0)
        lines = self.stderr.read().strip().splitlines()
        return lines[-1] if lines else "(nothing on stderr)"

    def read(self, timeout):
        """The worker's next reply, or a failure saying why there is none."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else None
        if not line:
            why = "no reply within %d s" % timeout if not ready else "worker exited %s" % self.proc.poll()
            return {"status": "failed", "reason": "%s: %s" % (why, self._stderr_tail())}
        try:
            return json.loads(line)
        except ValueError:
            return {"status": "failed", "reason": "unreadable reply %r" % line[:200]}

    def measure(self, group, seconds):
        try:
            self.proc.stdin.write(json.dumps({"group": group, "seconds": seconds}) + "\n")
            self.proc.stdin.flush()
        except OSError as exc:
            return {"status": "failed", "reason": "worker gone (%s): %s" % (exc, self._stderr_tail())}
        return self.read(timeout=30 + 20 * seconds)

    def stop(self):
        """End the worker (by its PID, through its own process handle): EOF, then kill after 5 s."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.stderr.close()


def run_repeat(index, names, args, groups):
    """One repeat: a fresh worker per parser; each group measured in short slices, taken by every
    parser in turn (rotating order), so that noise from the rest of the machine falls on all alike.
    Returns {parser: result}."""
    workers = {name: Worker(BY_NAME[name], args, groups) for name in names}
    results = {}
    try:
        for name, w in workers.items():
            hello = w.read(timeout=60)
            hello.setdefault("skipped_groups", {})
            hello["groups"] = {}
            results[name] = hello
        slices = max(1, int(round(args.seconds / args.slice)))
        for group in groups:
            taking = [
                n for n in names if results[n]["status"] == "ok" and group not in results[n]["skipped_groups"]
            ]
            totals = {n: [0, 0.0, 0] for n in taking}  # passes, seconds, requests
            for k in range(slices):
                shift = (index + k) % len(taking) if taking else 0
                for name in taking[shift:] + taking[:shift]:
                    if results[name]["status"] != "ok":
                        continue
                    reply = workers[name].measure(group, args.seconds / slices)
                    if reply["status"] != "ok":
                        why = "group %s: %s" % (group, reply["reason"])
                        results[name].update(status=reply["status"], reason=why)
                        continue
                    t = totals[name]
                    t[0] += reply["passes"]
                    t[1] += reply["elapsed"]
                    t[2] += reply["requests"]
            for name, (passes, elapsed, requests) in totals.items():
                if results[name]["status"] == "ok":
                    results[name]["groups"][group] = {
                        "passes": passes,
                        "seconds": elapsed,
                        "requests": requests,
                        "rate": requests / elapsed,
                    }
    finally:
        for w in workers.values():
            w.stop()
    return results


def overall_rate(groups_result, groups):
    """Requests per second over the whole corpus: total requests ÷ the sum of each group's time per pass."""
    if any(g not in groups_result for g in groups):
        return None
    total = sum(totals_of(GROUPS[g])[0] for g in groups)
    return total / sum(totals_of(GROUPS[g])[0] / groups_result[g]["rate"] for g in groups)


def summarize(runs, names, groups):
    """runs: a list (one per repeat) of {parser: worker result}. Returns medians and paired ratios."""
    cols = list(groups) + ["all"]
    per_repeat = []  # [{parser: {col: rate}}]
    for repeat in runs:
        rates = {}
        for name, result in repeat.items():
            if result.get("status") != "ok":
                continue
            r = {g: result["groups"][g]["rate"] for g in groups if g in result["groups"]}
            r["all"] = overall_rate(result["groups"], groups)
            rates[name] = r
        per_repeat.append(rates)
    rates = {n: {c: report.median([rep.get(n, {}).get(c) for rep in per_repeat]) for c in cols} for n in names}
    ratios = {}
    for num, den, _ in TARGETS:
        ratios[(num, den)] = {
            c: report.median(
                [rep[num][c] / rep[den][c] for rep in per_repeat
                 if rep.get(num, {}).get(c) and rep.get(den, {}).get(c)]
            )
            for c in cols
        }
    return cols, rates, ratios, per_repeat


def fmt_rate(v):
    if v is None:
        return "n/a"
    return "{:,.0f}".format(v)


def fmt_ratio(v):
    if v is None:
        return "n/a"
    return "%.2f×" % v if v < 10 else "%.1f×" % v


def markdown_table(header, rows):
    """The name left-aligned, every other column right-aligned."""
    return report.markdown_table(header, rows, align="l" + "r" * (len(header) - 1))


def environment(args, pinned):
    generated = (machine.read(os.path.join(ROOT, "greenserve", "http", "parser.c")) or "").split("\n", 1)[0]
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(["python", os.path.relpath(os.path.abspath(__file__), os.getcwd())] + args.argv),
        "cpu_model": machine.cpu_model(),
        "cpu_count": os.cpu_count(),
        "kernel": platform.release(),
        "python": "%s (%s)" % (platform.python_version(), platform.python_implementation()),
        "versions": machine.versions(("greenserve", "httptools", "h11", "Cython")),
        # The Cython that generated the in-place build's parser.c (its first line says so).
        "parser_c": generated.strip("/* ") if generated.startswith("/* Generated by Cython") else None,
        "greenserve_commit": machine.greenserve_commit(),
        "parser_py_changed": bool(
            machine.first_line(["git", "--no-optional-locks", "status", "--porcelain", "greenserve/http/parser.py"])
        ),
        "pinning": "CPU %d (os.sched_setaffinity, inherited by the workers)" % args.cpu if pinned else "none",
        "loadavg_at_start": machine.loadavg(),
        "repeats": args.repeats,
        "seconds": args.seconds,
        "slice": args.seconds / max(1, int(round(args.seconds / args.slice))),
        "warmup": args.warmup,
    }


def corpus_rows(groups):
    rows = []
    for g in groups:
        conns = GROUPS[g]
        reqs = [r for c in conns for r in c.requests]
        heads = [r.raw.index(b"\r\n\r\n") + 4 for r in reqs]
        rows.append([
            g, len(conns), sum(len(c.reads) for c in conns), len(reqs),
            "%d-%d (mean %d)" % (min(heads), max(heads), sum(heads) / len(heads)),
            sum(len(r.body) for r in reqs),
            ", ".join(c.name for c in conns),
        ])
    return rows


def markdown_report(meta, names, groups, cols, rates, ratios, results):
    v = meta["versions"]
    first_ok = {}
    for repeat in results:
        for name, result in repeat.items():
            if result.get("status") == "ok" and name not in first_ok:
                first_ok[name] = result
    gs = first_ok.get("compiled", first_ok.get("pure", {})).get("info", {})
    compiled_info = first_ok.get("compiled", {}).get("info", {})
    lines = [
        "# greenserve parser micro-benchmark, %s" % meta["date"],
        "",
        "- Command: `%s`" % meta["command"],
        "- Machine: %s, %s CPUs; Linux %s; Python %s; load average at start %s"
        % (meta["cpu_model"], meta["cpu_count"], meta["kernel"], meta["python"], meta["loadavg_at_start"]),
        "- greenserve %s (%s%s); compiled build: %s; Cython installed: %s"
        % (v.get("greenserve") or gs.get("version"), meta["greenserve_commit"],
           ", greenserve/http/parser.py changed since the commit" if meta["parser_py_changed"] else "",
           "%s, %s" % (compiled_info["module"], meta["parser_c"] or "generator unknown") if compiled_info else "not run",
           v.get("Cython")),
        "- httptools %s (llhttp); h11 %s" % tuple(
            first_ok[n]["info"]["version"] if n in first_ok else "%s installed, not measured" % (v.get(n) or "not")
            for n in ("httptools", "h11")),
        "- Pinning: %s; %d repeat(s) of %.2g s per parser and group, in slices of %.2g s taken by the "
        "parsers in turn (rotating order); a fresh process per parser and repeat; %.2g s of warm-up"
        % (meta["pinning"], meta["repeats"], meta["seconds"], meta["slice"], meta["warmup"]),
        "",
        "Requests per second, median over the repeats (higher is better). *all* is the whole corpus, "
        "every request counted once. Ratios are medians of per-repeat ratios.",
        "",
        markdown_table(
            ["parser"] + cols + ["µs/request (all)", "runs"],
            [[BY_NAME[n].label] + [fmt_rate(rates[n][c]) for c in cols]
             + ["%.2f" % (1e6 / rates[n]["all"]) if rates[n]["all"] else "n/a",
                "%d/%d" % (sum(1 for rep in results if rep.get(n, {}).get("status") == "ok"), meta["repeats"]),
             ]
             for n in names],
        ),
        "",
    ]
    ratio_rows = []
    for num, den, target in TARGETS:
        if num not in names or den not in names:
            continue
        r = ratios[(num, den)]
        met = "n/a" if r["all"] is None else ("yes" if r["all"] >= target else "no")
        row = ["%s ÷ %s" % (num, den), "≥ %g×" % target] + [fmt_ratio(r[c]) for c in cols] + [met]
        ratio_rows.append(row)
    if ratio_rows:
        lines += [markdown_table(["ratio", "target"] + cols + ["met (all)"], ratio_rows), ""]
    for name in names:
        statuses = {}
        for i, repeat in enumerate(results):
            res = repeat.get(name)
            if res and res.get("status") != "ok":
                statuses.setdefault("%s: %s" % (res["status"], res.get("reason")), []).append(i + 1)
            if res:
                for g, why in res.get("skipped_groups", {}).items():
                    statuses.setdefault("group %s skipped: %s" % (g, why), []).append(i + 1)
        for text, repeats in statuses.items():
            which = ", ".join(map(str, repeats))
            lines.append("- **%s** %s (repeat %s)" % (BY_NAME[name].label, text, which))
    if "h11" in names and "h11" in first_ok:
        lines.append("- h11: %s" % first_ok["h11"]["info"]["mode"])
    for name in ("compiled", "pure"):
        if name not in names:
            continue
        infos = [rep[name]["info"] for rep in results if rep.get(name, {}).get("status") == "ok"]
        notes = sorted(
            {i["compiled_parser"] for i in infos if i.get("compiled_parser", "").startswith("loaded directly")}
        )
        for note in notes:
            lines.append("- %s: the compiled parser was %s" % (BY_NAME[name].label, note))
    digests = sorted({rep[n]["info"]["parser_py_sha256"] for rep in results for n in ("compiled", "pure")
                      if rep.get(n, {}).get("status") == "ok"})
    if len(digests) > 1:
        lines.append("- **greenserve/http/parser.py changed during the run** (sha256 %s): the greenserve rows "
                     "mix measurements of different sources" % ", ".join(digests))
    lines += [
        "",
        "Corpus (bench/corpus/requests.py): every parser gets the same reads, a new parser per connection.",
        "",
        markdown_table(
            ["group", "connections", "reads", "requests", "head bytes", "body bytes", "connections (names)"],
            corpus_rows(groups),
        ),
    ]
    return "\n".join(lines) + "\n"


def parse_args(argv):
    p = argparse.ArgumentParser(description="HTTP/1.1 request parser micro-benchmark (see the docstring)")
    p.add_argument("--repeats", type=int, default=5, help="measurements per parser and group (default 5)")
    p.add_argument("--seconds", type=float, default=1.0, help="seconds per measurement (default 1)")
    p.add_argument("--parsers", default=",".join(x.name for x in PARSERS if x.default),
                   help="comma-separated, from: %s" % ", ".join(BY_NAME))
    p.add_argument(
        "--groups", default=",".join(GROUP_NAMES), help="comma-separated, from: %s" % ", ".join(GROUP_NAMES)
    )
    p.add_argument("--slice", type=float, default=0.1,
                   help="seconds per slice: each measurement is cut into slices that the parsers take in turn "
                   "(default 0.1)")
    p.add_argument("--warmup", type=float, default=0.2,
                   help="seconds of untimed parsing per parser, group and repeat, before the first slice (default 0.2)")
    p.add_argument("--cpu", type=int, default=None, help="pin this script and its workers to this CPU")
    p.add_argument("--markdown", metavar="FILE", help="also write the Markdown report to FILE")
    p.add_argument("--json", metavar="FILE", help="write every measurement and the metadata to FILE")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.argv = list(argv)
    args.parser_names = [n.strip() for n in args.parsers.split(",") if n.strip()]
    args.group_names = [g.strip() for g in args.groups.split(",") if g.strip()]
    for n in args.parser_names:
        if n not in BY_NAME:
            p.error("unknown parser %r (known: %s)" % (n, ", ".join(BY_NAME)))
    for g in args.group_names:
        if g not in GROUPS:
            p.error("unknown group %r (known: %s)" % (g, ", ".join(GROUP_NAMES)))
    if args.repeats < 1 or args.seconds <= 0:
        p.error("--repeats must be at least 1 and --seconds above 0")
    return args


def progress(message):
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.worker:
        worker(args.worker, args.group_names, args.warmup)
        return 0
    pinned = False
    if args.cpu is not None:
        if hasattr(os, "sched_setaffinity"):
            try:
                os.sched_setaffinity(0, {args.cpu})
                pinned = True
            except OSError as exc:
                progress("cannot pin to CPU %d (%s): not pinned" % (args.cpu, exc))
        else:
            progress("os.sched_setaffinity is not available here: not pinned")
    meta = environment(args, pinned)
    names, groups = args.parser_names, args.group_names
    estimate = len(names) * len(groups) * args.repeats * (args.seconds + args.warmup) * 1.05 + args.repeats * 0.5
    progress("about %.0f s: %d parser(s) x %d group(s) x %d repeat(s) x (%.2g s + %.2g s of warm-up)"
             % (estimate, len(names), len(groups), args.repeats, args.seconds, args.warmup))
    results = []
    active = list(names)
    for repeat in range(args.repeats):
        runs = run_repeat(repeat, active, args, groups)
        for name in names:
            result = runs.get(name)
            if result is None:
                continue
            if result["status"] == "ok":
                done = ", ".join("%s %s" % (g, fmt_rate(r["rate"])) for g, r in result["groups"].items())
                progress("repeat %d/%d  %-10s %s req/s" % (repeat + 1, args.repeats, name, done))
            else:
                why = "%s: %s" % (result["status"], result.get("reason"))
                progress("repeat %d/%d  %-10s %s" % (repeat + 1, args.repeats, name, why))
        results.append(runs)
        # A parser that yields wrong results, or whose worker fails, is not run again; one that is
        # skipped (not installed, a stale build) costs nothing to try again.
        active = [n for n in active if runs[n]["status"] in ("ok", "skipped")]
    cols, rates, ratios, per_repeat = summarize(results, names, groups)
    text = markdown_report(meta, names, groups, cols, rates, ratios, results)
    sys.stdout.write(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.json:
        report.write_json(args.json, {
            "meta": meta,
            "medians": rates,
            "ratios": {"%s/%s" % k: v for k, v in ratios.items()},
            "per_repeat_rates": per_repeat,
            "runs": results,
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())

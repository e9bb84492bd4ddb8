"""Access log lines in gunicorn's format language, built only when access logging is on.

The format is read once, when the log is set up: which atoms it names, and for each a small
function computing it. Per request only those run, into a dict the format string is applied to
(one C-level ``%``), so a short format costs little, and a server without an access log pays
nothing at all (the connection never calls in here). The timestamp is formatted at most once a
second, and a stream is flushed once per event-loop iteration rather than once per line: lines
still reach a pipe within milliseconds, and a burst of requests costs one write, not one each.
"""

import os
import sys
import time


def _time_atom():
    """``[23/Nov/2026:12:00:00 +0000]``, formatted at most once a second."""
    now = int(time.time())
    if now != _time_cache[0]:
        _time_cache[0] = now
        _time_cache[1] = time.strftime("[%d/%b/%Y:%H:%M:%S %z]", time.localtime(now))
    return _time_cache[1]


_time_cache = [-1, ""]


def _request_line(environ):
    method = environ.get("REQUEST_METHOD")
    if method is None:
        return "-"
    return "%s %s %s" % (method, environ.get("RAW_URI", ""), environ.get("SERVER_PROTOCOL", ""))


def _response_header(name):
    lname = name.lower()

    def atom(environ, status, length, duration, headers):
        for header, value in headers or ():
            if header.lower() == lname:
                return value
        return "-"

    return atom


# atom -> function(environ, status, length, duration, headers) returning its text.
_ATOMS = {
    "h": lambda e, s, n, d, hd: e.get("REMOTE_ADDR") or "-",
    "l": lambda e, s, n, d, hd: "-",
    "u": lambda e, s, n, d, hd: e.get("REMOTE_USER") or "-",
    "t": lambda e, s, n, d, hd: _time_atom(),
    "r": lambda e, s, n, d, hd: _request_line(e),
    "m": lambda e, s, n, d, hd: e.get("REQUEST_METHOD", "-"),
    "U": lambda e, s, n, d, hd: e.get("PATH_INFO", "-"),
    "q": lambda e, s, n, d, hd: e.get("QUERY_STRING", ""),
    "H": lambda e, s, n, d, hd: e.get("SERVER_PROTOCOL", "-"),
    "s": lambda e, s, n, d, hd: str(s),
    "B": lambda e, s, n, d, hd: str(n),
    "b": lambda e, s, n, d, hd: str(n) if n else "-",
    "f": lambda e, s, n, d, hd: e.get("HTTP_REFERER", "-"),
    "a": lambda e, s, n, d, hd: e.get("HTTP_USER_AGENT", "-"),
    "T": lambda e, s, n, d, hd: str(int(d)),
    "M": lambda e, s, n, d, hd: str(int(d * 1000)),
    "D": lambda e, s, n, d, hd: str(int(d * 1000000)),
    "L": lambda e, s, n, d, hd: "%.6f" % d,
    "p": lambda e, s, n, d, hd: "<%d>" % os.getpid(),
}


def _atom(key):
    """The function computing one atom of the format (gunicorn's names), or None for an unknown one."""
    atom = _ATOMS.get(key)
    if atom is not None:
        return atom
    if key.startswith("{"):
        name, _, kind = key[1:].rpartition("}")
        if kind == "i":
            environ_key = "HTTP_" + name.upper().replace("-", "_")
            return lambda e, s, n, d, hd: e.get(environ_key, "-")
        if kind == "o":
            return _response_header(name)
        if kind == "e":
            return lambda e, s, n, d, hd: str(e.get(name, "-"))
    return None


KNOWN_ATOMS = " ".join(_ATOMS) + ", {name}i (a request header), {name}o (a response header), {key}e (an environ key)"


class _KeyRecorder(dict):
    """Applied to the format once: records the atoms it names."""

    def __missing__(self, key):
        self[key] = "-"
        return "-"


def compile_format(fmt):
    """The format's atoms, each with the function computing it; ValueError for a format that is
    not one (a typo would otherwise print "-" in every line, unnoticed)."""
    keys = _KeyRecorder()
    try:
        fmt % keys  # validates the format, up front, and names its atoms
    except (ValueError, TypeError, KeyError) as exc:
        raise ValueError("%r is not a format: %s (atoms are written %%(h)s)" % (fmt, exc)) from None
    atoms = tuple((key, _atom(key)) for key in keys)
    unknown = ["%%(%s)s" % key for key, atom in atoms if atom is None]
    if unknown:
        raise ValueError("unknown atom %s; the atoms are %s" % (", ".join(unknown), KNOWN_ATOMS))
    return atoms


class AccessLog:
    """Formats one line per request and hands it to ``sink`` (a callable taking the line)."""

    def __init__(self, sink, fmt):
        self.sink = sink
        self.format = fmt
        self.atoms = compile_format(fmt)

    def log(self, environ, status, length, duration, headers):
        try:
            values = {key: atom(environ, status, length, duration, headers) for key, atom in self.atoms}
            self.sink(marked(self.format % values, environ))
        except (OSError, ValueError):
            pass  # a full disk must not fail requests


def marked(line, environ):
    """The line of a request overload control shed (answered 503 without calling the
    application) ends with ``shed="REASON"``, whatever the format: a 503 of the application's
    own and one of the server's under load need different fixes. A static file's (--static,
    served without the application) ends with `` static``."""
    shed = environ.get("greenserve.shed")
    if shed is None:
        if "greenserve.static" in environ:
            return line + " static"
        return line
    return '%s shed="%s"' % (line, shed)


def for_pywsgi_log(log, fmt):
    """An AccessLog for WSGIServer's ``log`` argument (gevent.pywsgi semantics), or None."""
    if log is None:
        return None
    if log == "default":
        log = sys.stderr
    if not hasattr(log, "write") and hasattr(log, "log"):
        logger = log
        return AccessLog(lambda line: logger.log(20, line), fmt)
    return AccessLog(_stream_sink(log), fmt)


def for_target(target, fmt):
    """An AccessLog for the CLI's --access-log: None (off), '-' (stdout) or a file path."""
    if target is None:
        return None
    if target == "-":
        return AccessLog(_stream_sink(sys.stdout), fmt)
    sink = _stream_sink(open(target, "a", buffering=1, encoding="utf-8"))
    sink.path = target
    log = AccessLog(sink, fmt)
    log.reopen = sink.reopen
    return log


class _StreamSink:
    """Writes lines to a stream and flushes it once per event-loop iteration.

    Not per line: that is a write syscall per request. Not left to the stream either: behind a
    pipe (Docker, systemd, supervisord) stdout is block-buffered, and lines that wait for 8 KB
    to pile up are late, and lost on SIGKILL. A hub callback runs after the greenlets the
    current iteration woke, so every line is out a few milliseconds after its request at most.
    Outside a gevent hub (no loop to ask), each line is flushed at once.
    """

    path = None  # the file written to, when it is one: reopen() opens it again

    def __init__(self, stream):
        self.stream = stream
        self.write = stream.write
        self.flush = getattr(stream, "flush", None)
        self.pending = False

    def reopen(self):
        """Open the log file again (SIGUSR1, after logrotate moved it away)."""
        if self.path is None:
            return
        old = self.stream
        self.stream = open(self.path, "a", buffering=1, encoding="utf-8")
        self.write = self.stream.write
        self.flush = self.stream.flush
        try:
            old.close()
        except OSError:
            pass

    def __call__(self, line):
        self.write(line + "\n")
        if self.flush is None or self.pending:
            return
        try:
            from gevent import get_hub

            loop = get_hub().loop
        except Exception:  # no gevent hub in this thread
            self.flush()
            return
        self.pending = True
        loop.run_callback(self._flush)

    def _flush(self):
        self.pending = False
        try:
            self.flush()
        except (OSError, ValueError):
            pass  # a full disk, a closed stream: never fail the server over its log


def _stream_sink(stream):
    return _StreamSink(stream)

"""Access log lines in gunicorn's format language, built only when access logging is on.

The format is parsed once; per request, only the atoms it names are computed (through a
mapping whose ``__getitem__`` computes on demand), so a short format costs little and a
server without an access log pays nothing at all (the connection never calls in here).
"""

import os
import sys
import time


class _Atoms:
    """The values of one request's atoms, computed when the format asks for them."""

    __slots__ = ("environ", "status", "length", "duration", "headers")

    def __init__(self, environ, status, length, duration, headers):
        self.environ = environ
        self.status = status
        self.length = length
        self.duration = duration
        self.headers = headers

    def __getitem__(self, key):
        environ = self.environ
        if key == "h":
            return environ.get("REMOTE_ADDR") or "-"
        if key == "l":
            return "-"
        if key == "u":
            return environ.get("REMOTE_USER") or "-"
        if key == "t":
            return time.strftime("[%d/%b/%Y:%H:%M:%S %z]")
        if key == "r":
            method = environ.get("REQUEST_METHOD")
            if method is None:
                return "-"
            return "%s %s %s" % (method, environ.get("RAW_URI", ""), environ.get("SERVER_PROTOCOL", ""))
        if key == "m":
            return environ.get("REQUEST_METHOD", "-")
        if key == "U":
            return environ.get("PATH_INFO", "-")
        if key == "q":
            return environ.get("QUERY_STRING", "")
        if key == "H":
            return environ.get("SERVER_PROTOCOL", "-")
        if key == "s":
            return str(self.status)
        if key == "B":
            return str(self.length)
        if key == "b":
            return str(self.length) if self.length else "-"
        if key == "f":
            return environ.get("HTTP_REFERER", "-")
        if key == "a":
            return environ.get("HTTP_USER_AGENT", "-")
        if key == "T":
            return str(int(self.duration))
        if key == "M":
            return str(int(self.duration * 1000))
        if key == "D":
            return str(int(self.duration * 1000000))
        if key == "L":
            return "%.6f" % self.duration
        if key == "p":
            return "<%d>" % os.getpid()
        if key.startswith("{"):
            name, _, kind = key[1:].rpartition("}")
            if kind == "i":
                return environ.get("HTTP_" + name.upper().replace("-", "_"), "-")
            if kind == "o":
                lname = name.lower()
                for header, value in self.headers or ():
                    if header.lower() == lname:
                        return value
                return "-"
            if kind == "e":
                return str(environ.get(name, "-"))
        return "-"


class AccessLog:
    """Formats one line per request and hands it to ``sink`` (a callable taking the line)."""

    def __init__(self, sink, fmt):
        self.sink = sink
        # %({Name}i)s -> %({Name}i)s stays a mapping key; validate the format once, up front.
        self.format = fmt
        try:
            fmt % _Atoms({}, 200, 0, 0.0, [])
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError("invalid access_log_format %r: %s" % (fmt, exc)) from None

    def log(self, environ, status, length, duration, headers):
        try:
            line = self.format % _Atoms(environ, status, length, duration, headers)
            self.sink(line)
        except (OSError, ValueError):
            pass  # a full disk must not fail requests


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
    return AccessLog(_stream_sink(open(target, "a", buffering=1, encoding="utf-8")), fmt)


def _stream_sink(stream):
    # Flushed per line: behind a pipe (Docker, systemd, supervisord) stdout is block-buffered,
    # and lines that wait for 8 KB to pile up are late, and lost on SIGKILL.
    write = stream.write
    flush = getattr(stream, "flush", None)

    def sink(line):
        write(line + "\n")
        if flush is not None:
            flush()

    return sink

"""The error log: greenserve's own messages and application tracebacks, and ``wsgi.errors``.

gevent.pywsgi compatibility decides the targets: ``'default'`` is standard error, ``None`` is
silence, an object with ``write`` is a stream, an object with ``log`` (a ``logging.Logger``) is
logged to. Messages below the configured level cost one comparison.
"""

import logging
import os
import sys
import time
import traceback

_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
_NAMES = {10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR", 50: "CRITICAL"}


class _NullStream:
    def write(self, data):
        pass

    def writelines(self, lines):
        pass

    def flush(self):
        pass


class _LoggerStream:
    """``wsgi.errors`` over a logging.Logger: each written line becomes one ERROR record."""

    def __init__(self, logger):
        self.logger = logger

    def write(self, data):
        data = data.rstrip("\n")
        if data:
            self.logger.error(data)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        pass


class ErrorLog:
    def __init__(self, target="default", level="info"):
        self.level = _LEVELS[level] if isinstance(level, str) else int(level)
        self.logger = None
        if target == "default":
            target = sys.stderr
        if target is None:
            self.stream = _NullStream()
            self.level = 100
        elif not hasattr(target, "write") and hasattr(target, "log"):
            self.logger = target
            self.stream = _LoggerStream(target)
        else:
            self.stream = target
        self.debug_enabled = self.level <= 10

    def _emit(self, level, message, exc=None):
        if level < self.level:
            return
        if self.logger is not None:
            self.logger.log(level, message, exc_info=exc)
            return
        stamp = time.strftime("%Y-%m-%d %H:%M:%S %z")
        text = "[%s] [%d] [%s] %s\n" % (stamp, os.getpid(), _NAMES.get(level, level), message)
        if exc is not None:
            text += "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            self.stream.write(text)
            flush = getattr(self.stream, "flush", None)
            if flush is not None:
                flush()
        except (OSError, ValueError):
            pass  # a closed or broken log stream must not take a connection down

    path = None  # the file written to, when it is one: reopen() opens it again

    def reopen(self):
        """Open the log file again (SIGUSR1, after logrotate moved it away)."""
        if self.path is None:
            return
        old = self.stream
        self.stream = open(self.path, "a", buffering=1, encoding="utf-8")
        try:
            old.close()
        except OSError:
            pass

    def debug(self, message):
        if self.debug_enabled:
            self._emit(10, message)

    def info(self, message):
        self._emit(20, message)

    def warning(self, message):
        self._emit(30, message)

    def error(self, message):
        self._emit(40, message)

    def exception(self, message, exc):
        self._emit(40, message, exc)


def for_target(target, level):
    """An ErrorLog for the CLI's --error-log: '-' is standard error, anything else a file path."""
    if target in (None, "-"):
        return ErrorLog(sys.stderr, level)
    log = ErrorLog(open(target, "a", buffering=1, encoding="utf-8"), level)
    log.path = target
    return log


logging.getLogger("greenserve").addHandler(logging.NullHandler())

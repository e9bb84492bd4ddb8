"""The error log: greenserve's own messages and application tracebacks, and ``wsgi.errors``.

gevent.pywsgi compatibility decides the targets: ``'default'`` is standard error, ``None`` is
silence, an object with ``write`` is a stream, an object with ``log`` (a ``logging.Logger``) is
logged to. Messages below the configured level cost one comparison.
"""

import os
import sys
import time

# Neither logging nor traceback is imported here at start: the master writes its lines with
# this module, and the two (with threading, string and weakref under logging) would add
# ~0.8 MB to its RSS for what a logger target or a traceback needs, each imported when used.

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


class _CurrentStream:
    """``wsgi.errors`` of an error log written to a file: each call goes to the file the log has
    now. SIGUSR1 opens the file again (``reopen``) and closes the old one, and the environ of
    every connection is made from the server's, made at start: holding the stream itself, an
    application writing to wsgi.errors after a log rotation met a closed file."""

    __slots__ = ("_log",)

    def __init__(self, log):
        self._log = log

    def write(self, data):
        return self._log.stream.write(data)

    def writelines(self, lines):
        self._log.stream.writelines(lines)

    def flush(self):
        self._log.stream.flush()

    def __getattr__(self, name):  # fileno, encoding, ...: the current file's
        return getattr(self._log.stream, name)


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
            library_logger()
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
            import traceback

            text += "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        try:
            self.stream.write(text)
            flush = getattr(self.stream, "flush", None)
            if flush is not None:
                flush()
        except (OSError, ValueError):
            pass  # a closed or broken log stream must not take a connection down

    path = None  # the file written to, when it is one: reopen() opens it again

    def errors_stream(self):
        """What ``environ["wsgi.errors"]`` is: the stream, or for a file that reopen() replaces,
        one that always writes to the current file."""
        return self.stream if self.path is None else _CurrentStream(self)

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


_library_logger_done = False


def library_logger():
    """A library's convention: a NullHandler on the "greenserve" logger, so that records of its
    loggers are not printed by logging's last resort when the application configured none.
    Set where greenserve first logs through logging (a Logger target, logconfig), not at import."""
    global _library_logger_done
    if not _library_logger_done:
        import logging

        logging.getLogger("greenserve").addHandler(logging.NullHandler())
        _library_logger_done = True

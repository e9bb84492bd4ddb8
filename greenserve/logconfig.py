"""The logs through the standard library's ``logging``: --log-config, syslog, structured access records.

Off by default, and then never imported: the error log and the access log write their lines
straight to their files (errorlog.py, accesslog.py). With --log-config the error log is the
logger ``greenserve.error`` and the access log ``greenserve.access`` (gunicorn's
``gunicorn.error`` and ``gunicorn.access``), and the file's handlers decide where their records
go. With syslog (--syslog-addr) the error log goes to syslog besides --error-log.

The configuration is applied once, in the master, and the workers inherit it through fork. What
they cannot inherit is a handler's socket: made in the master before gevent patched anything, a
SysLogHandler's or SocketHandler's socket is a blocking one in the worker (a syslog that does not
read stops the whole event loop), and a TCP connection shared by every process interleaves their
messages. So each worker makes those sockets anew once it is patched (:func:`renew_sockets`);
gevent's patching replaces the handlers' locks itself.
"""

import json
import logging
import logging.config
import logging.handlers
import os
import socket
import sys

from greenserve.accesslog import AccessLog
from greenserve.errorlog import ErrorLog, library_logger

library_logger()

ERROR_LOGGER = "greenserve.error"
ACCESS_LOGGER = "greenserve.access"


class LogConfigError(ValueError):
    """A --log-config or syslog setting that does not work: the message is one line."""


def access_fields(environ, status, length, duration):
    """An access record's fields, by name: the attributes every ``greenserve.access`` LogRecord
    carries (``record.status``...), so a JSON formatter writes them without a format of its own.
    The one place their names are defined (docs/production.md lists them)."""
    return {
        "remote_addr": environ.get("REMOTE_ADDR"),
        "remote_user": environ.get("REMOTE_USER"),
        "method": environ.get("REQUEST_METHOD"),
        "path": environ.get("PATH_INFO"),
        "query": environ.get("QUERY_STRING", ""),
        "protocol": environ.get("SERVER_PROTOCOL"),
        "status": status,
        "bytes": length,
        "duration": duration,  # seconds, a float
        "referer": environ.get("HTTP_REFERER"),
        "user_agent": environ.get("HTTP_USER_AGENT"),
    }


class LoggingAccessLog(AccessLog):
    """The access log as ``greenserve.access`` INFO records: the formatted line is the message
    (``%(message)s``), and :func:`access_fields` are the record's attributes."""

    def __init__(self, logger, fmt):
        AccessLog.__init__(self, None, fmt)
        self.logger = logger

    def log(self, environ, status, length, duration, headers):
        try:
            values = {key: atom(environ, status, length, duration, headers) for key, atom in self.atoms}
            self.logger.info(self.format % values, extra=access_fields(environ, status, length, duration))
        except (OSError, ValueError):
            pass  # a full disk must not fail requests


def configure(config):
    """Apply the logging settings in this process (the master); returns (error_log, access_log).

    Raises LogConfigError, one line naming the file and what is wrong with it.
    """
    error_logger = logging.getLogger(ERROR_LOGGER)
    access_logger = logging.getLogger(ACCESS_LOGGER)
    # Before the file, as gunicorn does: the file may set other levels.
    error_logger.setLevel(config.log_level.upper())
    access_logger.setLevel(logging.INFO)
    if config.log_config is not None:
        _apply_file(config.log_config)
        # Only when its records go somewhere: otherwise none is made, and requests cost nothing.
        if access_logger.isEnabledFor(logging.INFO) and access_logger.hasHandlers():
            access_log = LoggingAccessLog(access_logger, config.access_log_format)
        else:
            access_log = None
    else:
        access_log = None  # syslog alone: the access log stays --access-log's file
    if config.syslog_on():
        if config.log_config is None:
            # greenserve's own error lines go on to --error-log, besides syslog.
            error_logger.propagate = False
            error_logger.addHandler(_error_log_handler(config.error_log))
        error_logger.addHandler(syslog_handler(config))
    error_log = ErrorLog(error_logger, error_logger.getEffectiveLevel())
    error_log.reopen = reopen_files
    if access_log is not None:
        access_log.reopen = reopen_files
    return error_log, access_log


def _apply_file(source):
    """dictConfig from a dict (gunicorn's logconfig_dict) or a JSON file, fileConfig from an ini file."""
    where = "--log-config" if isinstance(source, dict) else "--log-config %s" % source
    try:
        if isinstance(source, dict):
            _dict_config(source)
            return
        with open(source, encoding="utf-8") as file:
            text = file.read()
        # By content, whatever the extension: gunicorn's logconfig_json and logconfig are both
        # this one setting.
        if text.lstrip().startswith("{"):
            try:
                settings = json.loads(text)
            except ValueError as exc:
                raise LogConfigError("not valid JSON: %s" % exc) from None
            _dict_config(settings)
        else:
            # Loggers made before (greenserve's, the application's) keep working, as in gunicorn.
            logging.config.fileConfig(source, disable_existing_loggers=False)
    except LogConfigError as exc:
        raise LogConfigError("%s: %s" % (where, exc)) from None
    except OSError as exc:
        raise LogConfigError("%s: %s" % (where, exc.strerror or exc)) from None
    except Exception as exc:  # configparser's, dictConfig's ValueError, a handler's import
        message = str(exc).replace("\n", " ") or type(exc).__name__
        if isinstance(exc, KeyError):  # fileConfig's missing section or option
            message = "missing %s (a fileConfig ini needs [loggers], [handlers], [formatters])" % exc
        raise LogConfigError("%s: %s" % (where, message)) from None


def _dict_config(settings):
    if not isinstance(settings, dict):
        raise LogConfigError("expected a dictConfig dictionary, got %s" % type(settings).__name__)
    settings = dict(settings)
    settings.setdefault("version", 1)
    # Loggers made before (greenserve's, the application's) keep working, as in gunicorn.
    settings.setdefault("disable_existing_loggers", False)
    logging.config.dictConfig(settings)


def _error_log_handler(target):
    if target in (None, "-"):
        handler = logging.StreamHandler(sys.stderr)
    else:
        try:
            handler = logging.FileHandler(target, encoding="utf-8")  # reopened by reopen_files()
        except OSError as exc:
            raise LogConfigError("--error-log %s: %s" % (target, exc.strerror)) from None
    # The line errorlog.ErrorLog writes.
    handler.setFormatter(logging.Formatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S %z"))
    return handler


# gunicorn's syslog_addr default on Linux; a unix socket on the BSDs and macOS.
DEFAULT_SYSLOG_ADDR = "udp://localhost:514"


def parse_syslog_addr(text):
    """'udp://HOST:PORT', 'tcp://HOST:PORT' or 'unix:///dev/log' (also unix:PATH, and
    unix://PATH#dgram|#stream as gunicorn writes them) -> (address, socktype or None)."""
    if text.startswith("unix:"):
        path = text[5:]
        path = path[2:] if path.startswith("//") else path
        path, _, kind = path.partition("#")
        if not path:
            raise ValueError("no socket path in %r" % text)
        kinds = {"": None, "dgram": socket.SOCK_DGRAM, "stream": socket.SOCK_STREAM}
        if kind not in kinds:
            raise ValueError("%r: the socket type after # is dgram or stream" % text)
        return path, kinds[kind]
    scheme, sep, rest = text.partition("://")
    if not sep or scheme not in ("udp", "tcp"):
        raise ValueError("expected udp://HOST:PORT, tcp://HOST:PORT or unix:///dev/log, got %r" % text)
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("expected %s://HOST:PORT, got %r" % (scheme, text))
    return (host.strip("[]"), int(port)), socket.SOCK_DGRAM if scheme == "udp" else socket.SOCK_STREAM


def syslog_handler(config):
    address, socktype = parse_syslog_addr(config.syslog_addr or DEFAULT_SYSLOG_ADDR)
    facility = logging.handlers.SysLogHandler.facility_names[config.syslog_facility]
    try:
        handler = logging.handlers.SysLogHandler(address, facility, socktype)
    except OSError as exc:
        raise LogConfigError("--syslog-addr %s: %s" % (config.syslog_addr or DEFAULT_SYSLOG_ADDR, exc.strerror or exc)) from None
    # RFC 3164's TAG[PID]: the prefix names the program in syslog's files (gunicorn's syslog_prefix).
    prefix = config.syslog_prefix or "greenserve"
    handler.setFormatter(logging.Formatter("%s[%%(process)d]: [%%(levelname)s] %%(message)s" % prefix))
    return handler


def _handlers():
    loggers = [logging.getLogger()]
    loggers += [logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)]
    seen = set()
    for logger in loggers:
        for handler in logger.handlers:
            if id(handler) not in seen:
                seen.add(id(handler))
                yield handler


def renew_sockets():
    """In a worker, once gevent patched it: the logging handlers' sockets made anew (see the module's docstring)."""
    for handler in _handlers():
        handler.acquire()
        try:
            if isinstance(handler, logging.handlers.SysLogHandler):
                if handler.socket is not None:
                    handler.socket.close()
                    handler.socket = None  # emit() tries again if the line below fails
                handler.createSocket()
            elif isinstance(handler, logging.handlers.SocketHandler) and handler.sock is not None:
                handler.sock.close()
                handler.sock = None  # made again, by the patched socket module, at the next record
        except OSError:
            pass  # the next record says it (logging's handleError)
        finally:
            handler.release()


def reopen_files():
    """SIGUSR1: the FileHandlers of the configuration open their files again (after logrotate)."""
    for handler in _handlers():
        if isinstance(handler, logging.FileHandler) and not isinstance(handler, logging.handlers.WatchedFileHandler):
            handler.acquire()
            try:
                if handler.stream is not None:
                    handler.stream.close()
                handler.stream = handler._open()
            except OSError:
                pass
            finally:
                handler.release()


def capture_output(error_log):
    """--capture-output: this process's descriptors 1 and 2 become the error log's file (or
    standard error for '-'), inherited by the workers, so a view's print() lands in the error log."""
    sys.stdout.flush()
    sys.stderr.flush()
    if error_log in (None, "-"):
        os.dup2(2, 1)
    else:
        fd = os.open(error_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.dup2(fd, 1)
            os.dup2(fd, 2)
        finally:
            os.close(fd)
    # Line by line: into a file, stdout would otherwise hold 8 KB before anything shows.
    sys.stdout.reconfigure(line_buffering=True)

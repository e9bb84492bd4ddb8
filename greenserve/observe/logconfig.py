"""The logs through the standard library's ``logging``: --log-config, syslog, structured access records.

Off by default, and then never imported: the error log and the access log write their lines
straight to their files (errorlog.py, accesslog.py). With --log-config the error log is the
logger ``greenserve.error`` and the access log ``greenserve.access``, and the file's handlers
decide where their records go. A configuration written for gunicorn (gunicorn.conf.py's
``logconfig_dict``) names gunicorn's loggers, ``gunicorn.error`` and ``gunicorn.access``: then
greenserve's logs are those loggers, and a dictionary is completed with gunicorn's defaults
(its ``console`` and ``error_console`` handlers), as gunicorn completes it. A log the file gives
no handler (none of its own, none of a parent it propagates to) stays --error-log's or
--access-log's file, as gunicorn's do; one the file disables or silences is said at start.
With syslog (--syslog-addr) the error log goes to syslog besides --error-log.

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

from greenserve.observe.accesslog import AccessLog, marked
from greenserve.observe.errorlog import ErrorLog, library_logger

library_logger()

ERROR_LOGGER = "greenserve.error"
ACCESS_LOGGER = "greenserve.access"
# gunicorn's names of the same two logs, which configurations written for it configure.
GUNICORN_LOGGERS = {ERROR_LOGGER: "gunicorn.error", ACCESS_LOGGER: "gunicorn.access"}

# gunicorn's glogging.CONFIG_DEFAULTS (27.0), which it updates with a logconfig_dict (one level
# deep: a dict's "loggers" replaces these loggers, its "handlers" these handlers).
GUNICORN_DICT_DEFAULTS = {
    "version": 1,
    "disable_existing_loggers": False,
    "root": {"level": "INFO", "handlers": ["console"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["error_console"], "propagate": True, "qualname": "gunicorn.error"},
        "gunicorn.access": {"level": "INFO", "handlers": ["console"], "propagate": True, "qualname": "gunicorn.access"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "generic", "stream": "ext://sys.stdout"},
        "error_console": {"class": "logging.StreamHandler", "formatter": "generic", "stream": "ext://sys.stderr"},
    },
    "formatters": {
        "generic": {"format": "%(asctime)s [%(process)d] [%(levelname)s] %(message)s",
                    "datefmt": "[%Y-%m-%d %H:%M:%S %z]", "class": "logging.Formatter"},
    },
}


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
        "shed": environ.get("greenserve.shed"),  # overload control's reason, for a 503 it answered
        "static": "greenserve.static" in environ,  # a --static file, served without the application
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
            self.logger.info(marked(self.format % values, environ), extra=access_fields(environ, status, length, duration))
        except (OSError, ValueError):
            pass  # a full disk must not fail requests


def configure(config):
    """Apply the logging settings in this process (the master); returns ``(error_log,
    access_log, warnings)``: a log is None where it stays its file's (the file configured no
    handler for it), ``warnings`` one line each for a log the file leaves with nowhere to go.

    Raises LogConfigError, one line naming the file and what is wrong with it.
    """
    _set_levels(config.log_level)  # before the file: a level the file sets wins, as in gunicorn
    names = _apply_file(config.log_config) if config.log_config is not None else set()
    error_logger = logging.getLogger(_logger_name(ERROR_LOGGER, names))
    access_logger = logging.getLogger(_logger_name(ACCESS_LOGGER, names))
    warnings = []
    error_log = access_log = None
    if config.log_config is not None:
        silenced = _silenced(error_logger)
        if silenced:
            warnings.append(
                "--log-config %s greenserve's error log, the logger %s: it goes to --error-log %s instead; "
                "give that logger a handler and a level to send it elsewhere" % (silenced, error_logger.name, config.error_log)
            )
        elif _reaches_handler(error_logger):
            error_log = ErrorLog(error_logger, error_logger.getEffectiveLevel())
            if config.error_log != "-" and not config.capture_output:
                warnings.append(_unused_flag("--error-log", config.error_log, error_logger))
        # Only when its records go somewhere: otherwise none is made, and requests cost nothing.
        if access_logger.isEnabledFor(logging.INFO) and _reaches_handler(access_logger):
            access_log = LoggingAccessLog(access_logger, config.access_log_format)
            access_log.reopen = reopen_files
            if config.access_log is not None:
                warnings.append(_unused_flag("--access-log", config.access_log, access_logger))
    if config.syslog_on():
        if error_log is None:
            # greenserve's own error lines go on to --error-log, besides syslog.
            error_logger.propagate = False
            error_logger.addHandler(_error_log_handler(config.error_log))
            error_log = ErrorLog(error_logger, error_logger.getEffectiveLevel())
        error_logger.addHandler(syslog_handler(config))
    if error_log is not None:
        error_log.reopen = reopen_files
    return error_log, access_log, warnings


def _unused_flag(flag, value, logger):
    return "%s %s not used with --log-config: the file's handlers for the logger %s decide where it goes" % (
        flag, value, logger.name)


def _logger_name(name, configured):
    """greenserve's name for one of its logs, or gunicorn's when the file configures that one
    (or its parent) and not greenserve's."""
    gunicorn_name = GUNICORN_LOGGERS[name]
    if name in configured or "greenserve" in configured:
        return name
    if gunicorn_name in configured or "gunicorn" in configured:
        return gunicorn_name
    return name


def _reaches_handler(logger):
    """Whether a record of ``logger`` reaches a handler that writes it somewhere (the library's
    NullHandler on "greenserve" does not count)."""
    while logger is not None:
        if any(not isinstance(handler, logging.NullHandler) for handler in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


def _silenced(logger):
    """How the configuration silences one of greenserve's logs (a reason), or None."""
    if logger.disabled:
        return "disables (disable_existing_loggers, without configuring it)"
    if not logger.isEnabledFor(logging.ERROR):
        return "sets a level above ERROR on"
    if logger.handlers and not _reaches_handler(logger):
        return "gives only a NullHandler to"
    return None


def _apply_file(source):
    """dictConfig from a dict (gunicorn's logconfig_dict) or a JSON file, fileConfig from an ini
    file; returns the names of the loggers it configures ("root" among them)."""
    where = "--log-config" if isinstance(source, dict) else "--log-config %s" % source
    try:
        if isinstance(source, dict):
            return _dict_config(source)
        with open(source, encoding="utf-8") as file:
            text = file.read()
        # By content, whatever the extension: gunicorn's logconfig_json and logconfig are both
        # this one setting.
        if text.lstrip().startswith("{"):
            try:
                settings = json.loads(text)
            except ValueError as exc:
                raise LogConfigError("not valid JSON: %s" % exc) from None
            return _dict_config(settings)
        # Loggers made before (greenserve's, the application's) keep working, as in gunicorn.
        logging.config.fileConfig(source, disable_existing_loggers=False)
        return _ini_loggers(source)
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
    loggers = settings.get("loggers") or {}
    names = set(loggers) | ({"root"} if "root" in settings else set())
    if any(name == "gunicorn" or name.startswith("gunicorn.") for name in names):
        # Written for gunicorn: completed with its defaults, as gunicorn completes it.
        merged = dict(GUNICORN_DICT_DEFAULTS)
        merged.update(settings)
        settings = merged
        names |= set(settings.get("loggers") or {}) | {"root"}
    settings = dict(settings)
    settings.setdefault("version", 1)
    # Loggers made before (greenserve's, the application's) keep working, as in gunicorn.
    settings.setdefault("disable_existing_loggers", False)
    logging.config.dictConfig(settings)
    return names


def _set_levels(level):
    """--log-level on greenserve's logs, by both names; the access logs at INFO."""
    for name in (ERROR_LOGGER, GUNICORN_LOGGERS[ERROR_LOGGER]):
        logging.getLogger(name).setLevel(level.upper())
    for name in (ACCESS_LOGGER, GUNICORN_LOGGERS[ACCESS_LOGGER]):
        logging.getLogger(name).setLevel(logging.INFO)


def _ini_loggers(path):
    """The loggers a fileConfig ini configures: [loggers] keys=, each one's qualname."""
    import configparser

    parser = configparser.ConfigParser(interpolation=None)
    parser.read(path, encoding="utf-8")
    keys = [key.strip() for key in parser.get("loggers", "keys", fallback="").split(",") if key.strip()]
    return {"root" if key == "root" else parser.get("logger_" + key, "qualname", fallback=key) for key in keys}


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

"""The one table of settings: the CLI flags, the Python API's defaults and docs/settings.md come from it.

Each row says a setting's name, its flags, its type (a converter that validates), its default,
its section and its help. ``Config(**values)`` validates keyword values against the table and
rejects unknown names; ``entry/cli.py`` builds its argument parser from the rows; ``render_markdown()``
writes the reference tables of the settings page, whose last part (the config file, gunicorn's
names) is entry/configfile.py's (``python -m greenserve.entry.configfile > docs/settings.md``
writes the page, from the module above both; a test checks that the committed page matches, so the docs cannot drift from the code).

The table sits above the modules whose values it checks (listeners, http/grammar.py, accesslog,
proxy, logconfig, statsd, process/hooks.py, process/reloader.py): it imports them, they never
import it, and a default they need too is a constant of theirs that a row reads. Above it are only
server.py, entry/ and the package face (docs/architecture.md; tests/test_architecture.py).
"""

import os

from greenserve.http.grammar import (
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_HEADER_COUNT,
    DEFAULT_MAX_HEADER_SIZE,
    DEFAULT_MAX_REQUEST_LINE,
)
from greenserve.listeners import UNIX_SOCKET_MODE, bind_spec
from greenserve.process.control import DEFAULT_MODE as CONTROL_SOCKET_MODE


class SettingError(ValueError):
    """A setting's value is invalid, or settings that cannot go together are; the message says which.

    ``setting`` and ``reason`` are set for one invalid value (the command says ``--flag: reason``).
    """

    def __init__(self, message, setting=None, reason=None):
        ValueError.__init__(self, message)
        self.setting = setting
        self.reason = reason


# --- converters: take a str (from the CLI) or a Python value (from the API), return the value ---


def _integer(value):
    """An int, or its text as gunicorn reads it (``int(text, 0)``: "0x400", "0o22" too)."""
    if isinstance(value, bool):
        raise ValueError("expected an integer, got %r" % (value,))
    try:
        return int(value)
    except (TypeError, ValueError):
        pass
    try:
        return int(value.strip(), 0)
    except (AttributeError, ValueError):
        raise ValueError("expected an integer, got %r" % (value,)) from None


def _int_at_least(minimum, maximum=None):
    def convert(value):
        number = _integer(value)
        if number < minimum:
            raise ValueError("must be at least %d, got %d" % (minimum, number))
        if maximum is not None and number > maximum:
            raise ValueError("must be at most %d, got %d" % (maximum, number))
        return number

    if maximum is not None:
        convert.type_name = "integer %d-%d" % (minimum, maximum)
    else:
        convert.type_name = "integer" if minimum <= 0 else "integer >= %d" % minimum
    return convert


def _seconds(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number of seconds, got %r" % (value,)) from None
    if number <= 0 or number != number:
        raise ValueError("must be a positive number of seconds, got %r" % (value,))
    return number


_seconds.type_name = "seconds"


# gunicorn's 0 for a request limit is "no limit" (its largest: 8190-byte lines, 32768 fields);
# ours is the largest a request may have here, one value per limit. The gunicorn worker class
# (entry/gunicorn.py) reads the same table.
UNLIMITED = {
    "limit_request_line": 65536,
    "limit_request_fields": 32768,
    "limit_request_field_size": 65536,
}


def _request_limit(name, minimum):
    at_least = _int_at_least(minimum)

    def convert(value):
        number = _integer(value)
        return UNLIMITED[name] if number == 0 else at_least(number)

    convert.type_name = "integer >= %d, or 0" % minimum
    return convert


def _text(value):
    if not isinstance(value, str):
        raise ValueError("expected a string, got %r" % (value,))
    return value


_text.type_name = "string"


def _access_log_format(value):
    # Checked whether or not the access log is on: a typo found when it is turned on, in
    # production, is found too late.
    from greenserve.observe.accesslog import compile_format

    compile_format(_text(value))
    return value


_access_log_format.type_name = "string"


def _header_value(value):
    value = _text(value)
    # A field value: printable latin-1, spaces and tabs (RFC 9110 §5.5), nothing that could
    # break the response head.
    if not all(char == "\t" or " " <= char <= "~" or "\xa0" <= char <= "\xff" for char in value):
        raise ValueError("must be printable latin-1 text, got %r" % value)
    return value


_header_value.type_name = "string"


def _optional_path(value):
    if value is None:
        return None
    return _text(value)


_optional_path.type_name = "path"


def _root_path(value):
    value = _text(value).rstrip("/")
    if value and not value.startswith("/"):
        raise ValueError("must start with '/', got %r" % value)
    return value


_root_path.type_name = "URL path"


def _optional_name(value):
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # a uid or gid, as gunicorn's config files give them
    return None if value is None else _text(value)


_optional_name.type_name = "name or id"


def _proc_name(value):
    if value is None:
        return None
    value = _text(value)
    # A NUL would end the title early in /proc/PID/cmdline; an empty name reads as a mistake.
    if not value or "\0" in value:
        raise ValueError("expected a non-empty name without NUL characters, got %r" % (value,))
    return value


_proc_name.type_name = "name"


class OctalMode(int):
    """A file mode or umask: an int that prints as chmod writes it (0660)."""

    def __str__(self):
        return "0%03o" % self

    def __repr__(self):
        return "0o%03o" % self


def _octal_mode(value):
    """0660, 660 or 0o660 (octal, as chmod and umask take it), or an int from the API (0o660)."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str):
        digits = value.strip().lower()
        digits = digits[2:] if digits.startswith("0o") else digits
        if not digits or digits.strip("01234567"):
            raise ValueError("expected octal digits, such as 0660 or 0027, got %r" % (value,))
        number = int(digits, 8)
    else:
        raise ValueError("expected octal digits, such as 0660 or 0027, got %r" % (value,))
    if not 0 <= number <= 0o777:
        raise ValueError("must be 0000 to 0777 (read, write, execute for owner, group, others), got %r" % (value,))
    return OctalMode(number)


_octal_mode.type_name = "octal mode"


def _optional_octal_mode(value):
    return None if value is None else _octal_mode(value)


_optional_octal_mode.type_name = "octal mode"


def _log_level(value):
    levels = ("debug", "info", "warning", "error", "critical")
    value = _text(value).lower()
    if value not in levels:
        raise ValueError("must be one of %s, got %r" % (", ".join(levels), value))
    return value


_log_level.type_name = "level"


def _log_config(value):
    """A file path, or (from a config file, as gunicorn's logconfig_dict) the dictConfig dict."""
    if isinstance(value, dict):
        return value
    return _text(value)


_log_config.type_name = "path"


def _optional_address(check):
    """An optional address, checked (ValueError) by ``check``, which imports its feature's module
    only when an address is given: the module stays unimported while the feature is off."""
    def convert(value):
        if value is None:
            return None
        check(_text(value))
        return value

    convert.type_name = "address"
    return convert


def _check_syslog_addr(text):
    from greenserve.observe.logconfig import parse_syslog_addr

    parse_syslog_addr(text)


_syslog_addr = _optional_address(_check_syslog_addr)


def _syslog_facility(value):
    from logging.handlers import SysLogHandler

    value = _text(value).lower()
    if value not in SysLogHandler.facility_names:
        raise ValueError("must be one of %s, got %r" % (", ".join(sorted(SysLogHandler.facility_names)), value))
    return value


_syslog_facility.type_name = "facility"


def _static_mounts(value):
    from greenserve.static import mount_list

    return mount_list(value)


_static_mounts.type_name = "mounts"


def _bind_list(value):
    if isinstance(value, str):
        value = [value]
    value = list(value)
    for item in value:
        bind_spec(item)
    return value


_bind_list.type_name = "address"


def _metrics_address(value):
    if value is None:
        return None
    spec = bind_spec(value)
    if spec[0] == "fd":
        raise ValueError("expected HOST:PORT or unix:PATH, got %r (an inherited socket is for --bind)" % (value,))
    return value


_metrics_address.type_name = "address"


def _check_statsd_address(text):
    from greenserve.observe.statsd import parse_address

    parse_address(text)


_statsd_address = _optional_address(_check_statsd_address)


def _statsd_prefix(value):
    from greenserve.observe.statsd import normalize_prefix

    return normalize_prefix(_text(value))


_statsd_prefix.type_name = "string"


def _dogstatsd_tags(value):
    from greenserve.observe.statsd import check_tags

    return check_tags(_text(value))


_dogstatsd_tags.type_name = "string"


class Setting:
    """One row of the table.

    A class with __slots__, not a dataclass: the master imports this module, and dataclasses
    imports inspect (with ast, dis and tokenize), ~0.9 MB of the master's RSS.
    """

    __slots__ = ("name", "section", "default", "convert", "help", "flags", "metavar", "cli", "api", "repeat",
                 "boolean", "restart", "extra")

    def __init__(self, name, section, default, convert, help, flags=(), metavar=None, cli=True, api=True,
                 repeat=False, boolean=False, restart=False, extra=None):
        self.name = name
        self.section = section
        self.default = default
        self.convert = convert
        self.help = help
        self.flags = flags
        self.metavar = metavar
        self.cli = cli  # offered as a command-line flag
        self.api = api  # accepted by WSGIServer(...) / serve(...)
        self.repeat = repeat  # the flag may be given several times (a list)
        self.boolean = boolean  # a --flag / --no-flag pair
        # Read by the master once, at start (the sockets, the accounts, the logs): a new value from
        # the config file on SIGHUP is not applied but named as needing a restart.
        self.restart = restart
        self.extra = {} if extra is None else extra

    def __repr__(self):
        return "Setting(%r)" % self.name

    @property
    def type_name(self):
        return "boolean" if self.boolean else getattr(self.convert, "type_name", "value")


def _address_list(value):
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",")]
    value = [str(item).strip() for item in value if str(item).strip()]
    from greenserve.proxy import TrustedProxies

    TrustedProxies(value)  # ValueError naming a bad entry
    return value


_address_list.type_name = "addresses"


def _bool(value):
    if isinstance(value, bool):
        return value
    # gunicorn's validate_bool: the words true and false, in any case, as a config file or
    # GUNICORN_CMD_ARGS writes them (capture_output = "True").
    word = value.strip().lower() if isinstance(value, str) else None
    if word in ("true", "false"):
        return word == "true"
    raise ValueError("expected True or False, got %r" % (value,))


_bool.type_name = "boolean"

def _proxy_protocol(value):
    """True or False; from a gunicorn.conf.py also gunicorn's words: off, or v1, v2, auto (on:
    both versions are recognised, whichever a connection starts with)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        word = value.strip().lower()
        if word in ("off", "false", "no", "0"):
            return False
        if word in ("on", "true", "yes", "1", "auto", "v1", "v2"):
            return True
    raise ValueError("expected True or False (or gunicorn's off, v1, v2 or auto), got %r" % (value,))


_proxy_protocol.type_name = "boolean"


def _optional_seconds(value):
    return None if value is None else _seconds(value)


_optional_seconds.type_name = "seconds"


def _timeout_seconds(value):
    """Seconds, where 0 turns the check off."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError("expected a number of seconds, got %r" % (value,)) from None
    if number < 0 or number != number:
        raise ValueError("must be 0 (off) or a positive number of seconds, got %r" % (value,))
    return number


_timeout_seconds.type_name = "seconds"


def _choice(*choices):
    def convert(value):
        if value is None:
            return None
        value = _text(value).lower()
        if value not in choices:
            raise ValueError("must be one of %s, got %r" % (", ".join(choices), value))
        return value

    convert.type_name = "|".join(choices)
    return convert


# Python's ssl.CERT_NONE, CERT_OPTIONAL, CERT_REQUIRED: the ints gunicorn's cert_reqs takes.
CERT_REQS = ("none", "optional", "required")


def _cert_reqs(value):
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(CERT_REQS):
        return CERT_REQS[value]
    text = _text(value).strip().lower() if isinstance(value, str) else None
    if text is not None and text.isdigit() and int(text) < len(CERT_REQS):
        return CERT_REQS[int(text)]
    if text not in CERT_REQS:
        raise ValueError("must be none, optional or required (or gunicorn's 0, 1, 2), got %r" % (value,))
    return text


_cert_reqs.type_name = "none|optional|required"


def _tls_version(value):
    text = "%.1f" % value if isinstance(value, float) else _text(value).strip()
    if text not in ("1.2", "1.3"):
        raise ValueError("must be 1.2 or 1.3, got %r" % (value,))
    return text


_tls_version.type_name = "1.2|1.3"


def _path_list(value):
    if isinstance(value, str):
        value = [value]
    return [_text(item) for item in value]


_path_list.type_name = "paths"


def _health_paths(value):
    if isinstance(value, str):
        value = [item.strip() for item in value.split(",")]
    paths = [_text(item) for item in value]
    for path in paths:
        if not path.startswith("/") or any(char in path for char in "?# \t"):
            raise ValueError("a health path is a URL path such as /healthz (no query), got %r" % path)
    return paths


_health_paths.type_name = "paths"


def _environment_list(value):
    """gunicorn's raw_env: a list of 'KEY=VALUE' (a single string is one entry)."""
    if isinstance(value, str):
        value = [value]
    try:
        entries = [_text(item) for item in value]
    except TypeError:
        raise ValueError("expected a list of 'KEY=VALUE' strings, got %r" % (value,)) from None
    for entry in entries:
        key, sep, _ = entry.partition("=")
        if not sep or not key or "\0" in entry:
            raise ValueError("%r is not KEY=VALUE" % (entry,))
    return entries


_environment_list.type_name = "KEY=VALUE"


def _patch_spec(value):
    text = _text(value).strip().lower()
    if not text:
        raise ValueError("expected all, none or a comma-separated list of modules")
    return text  # checked against the installed gevent by process.patching.parse_patch_spec


_patch_spec.type_name = "modules"


# HTTP/2's names, as gunicorn's http_protocols says them, and what each is offered as by ALPN
# (tls.set_alpn).
HTTP_PROTOCOLS = ("h1", "h2")


def _http_protocols(value):
    """gunicorn's http_protocols: h1 and h2, comma-separated, the preferred first; empty: h1."""
    if isinstance(value, str):
        value = value.split(",")
    try:
        protocols = [_text(item).strip().lower() for item in value]
    except TypeError:
        raise ValueError("expected h1, h2 or h2,h1, got %r" % (value,)) from None
    protocols = [protocol for protocol in protocols if protocol] or ["h1"]
    for protocol in protocols:
        if protocol not in HTTP_PROTOCOLS:
            raise ValueError("%r is no protocol here: h1 (HTTP/1.1) or h2 (HTTP/2)" % protocol)
    if len(set(protocols)) != len(protocols):
        raise ValueError("a protocol is named twice in %r" % ",".join(protocols))
    return protocols


_http_protocols.type_name = "h1,h2"

# gunicorn's other values of http2_cleartext, refused with what to use instead.
_H2C_UPGRADE = (
    "h2c by Upgrade is not offered (RFC 9113 deprecates it, and a proxy that passes an upgraded "
    "connection on is a request-smuggling path): use prior-knowledge for a trusted proxy that "
    "speaks h2c, or h2 over TLS"
)


def _http2_cleartext(value):
    """off or prior-knowledge; gunicorn's True and False are prior-knowledge and off."""
    if isinstance(value, bool):
        return "prior-knowledge" if value else "off"
    text = _text(value).strip().lower()
    if text in ("off", "prior-knowledge"):
        return text
    if text in ("upgrade", "both"):
        raise ValueError("%s: %s" % (text, _H2C_UPGRADE))
    raise ValueError("must be off or prior-knowledge, got %r" % (value,))


_http2_cleartext.type_name = "off|prior-knowledge"


def _protocol(value):
    """gunicorn's --protocol: http, or uwsgi (nginx's uwsgi_pass)."""
    text = _text(value).strip().lower()
    if text not in ("http", "uwsgi"):
        raise ValueError("must be http or uwsgi (nginx's uwsgi_pass), got %r" % (value,))
    return text


_protocol.type_name = "http|uwsgi"

# gunicorn's 0 for http2_max_header_list_size ("unlimited"): the largest list taken here.
HTTP2_UNLIMITED_HEADER_LIST = 1 << 20


def _http2_header_list(value):
    number = _integer(value)
    if number == 0:
        return HTTP2_UNLIMITED_HEADER_LIST
    if not 1 <= number <= 2**32 - 1:
        raise ValueError("must be 1 to 4294967295, or 0, got %d" % number)
    return number


_http2_header_list.type_name = "integer >= 1, or 0"


MiB = 1024 * 1024

SETTINGS = [
    # --- listening ---
    Setting(
        "bind", "Listening", ["127.0.0.1:8000"], _bind_list,
        "Address to listen on: HOST:PORT, [IPV6]:PORT, unix:PATH or fd://N (an inherited "
        "listening socket). Repeat the flag to listen on several.",
        flags=("-b", "--bind"), metavar="ADDRESS", repeat=True, api=False, restart=True,
    ),
    Setting(
        "backlog", "Listening", 2048, _int_at_least(1, 65535),
        "Most connections the kernel queues while waiting for the server to accept them "
        "(also bounded by net.core.somaxconn).",
        metavar="INT", api=False, restart=True,
    ),
    Setting(
        "reuse_port", "Listening", False, _bool,
        "Give each worker its own listening socket on the same address (SO_REUSEPORT, "
        "HOST:PORT addresses only): the kernel spreads new connections evenly across workers "
        "instead of letting whichever wakes first take them. Linux 3.9 or later.",
        api=False, boolean=True, restart=True,
    ),
    Setting(
        "unix_socket_mode", "Listening", OctalMode(UNIX_SOCKET_MODE), _octal_mode,
        "Permissions of the unix: socket files greenserve makes, set before it listens. "
        "Connecting needs write permission: the default lets the socket's owner and group in "
        "(nginx's workers need the group: --unix-socket-group www-data), 0666 lets every local "
        "user in. The --umask does not change it.",
        metavar="MODE", api=False, restart=True,
    ),
    Setting(
        "unix_socket_group", "Listening", None, _optional_name,
        "Group (name or gid) of the unix: socket files, so that a proxy in it may connect "
        "(www-data for Debian's nginx). Default: the master's group. Only root, or a member of "
        "the group, may give a file to it.",
        metavar="GROUP", api=False, restart=True,
    ),
    Setting(
        "worker_connections", "Listening", 10000, _int_at_least(1),
        "Most simultaneous connections one process serves; further clients wait in the "
        "backlog. The Python API's `spawn=N` sets the same bound.",
        metavar="INT", api=False,
    ),
    Setting(
        "reuse_greenlets", "Listening", True, _bool,
        "Hand a finished connection's greenlet to the next connection, as a thread pool reuses "
        "its threads, instead of making a new greenlet for each (a quarter of the instructions "
        "of a one-request connection). Each connection starts in an empty contextvars context; "
        "greenlet-local values (gevent.local, patched threading.local) may remain, as "
        "thread-locals do, and a gevent.Timeout left running can interrupt a later connection of "
        "the same greenlet. --no-reuse-greenlets: a new greenlet per connection.",
        boolean=True,
    ),
    # --- process model ---
    Setting(
        "workers", "Processes", 1, _int_at_least(0),
        "Worker processes, each serving every listener with its own event loop; a master "
        "process forks and watches them. 0: one per CPU.",
        flags=("-w", "--workers"), metavar="INT", api=False,
    ),
    Setting(
        "sticky", "Processes", False, _bool,
        "Serve each client by one worker: the worker that owns its address (a stable hash of "
        "REMOTE_ADDR as the application sees it, after the PROXY header and a trusted "
        "X-Forwarded-For, over the workers' slots). A worker that gets another's client hands "
        "the connection over, with what it read of it, through a unix socket the master made. "
        "For Socket.IO and other sessions held in a worker's memory (long polling). Plain HTTP "
        "over TCP: not with TLS or HTTP/2, nor the gunicorn worker class. See docs/deployment.md.",
        api=False, boolean=True, restart=True,
    ),
    Setting(
        "timeout", "Processes", 30.0, _timeout_seconds,
        "A worker whose event loop gives no sign of life (a heartbeat from a loop timer) for "
        "this many seconds -- blocked by CPU-bound or unpatched blocking code -- is killed and "
        "replaced. 0: never.",
        flags=("-t", "--timeout"), metavar="SECONDS", api=False,
    ),
    Setting(
        "max_requests", "Processes", 0, _int_at_least(0),
        "Recycle a worker after it served this many requests (a bound on slow leaks): it asks "
        "the master for a replacement and serves on until that one serves, then stops "
        "gracefully. 0: never.",
        metavar="INT", api=False,
    ),
    Setting(
        "max_requests_jitter", "Processes", 0, _int_at_least(0),
        "Add up to this many requests, at random per worker, to --max-requests, so the "
        "workers do not all restart at once.",
        metavar="INT", api=False,
    ),
    Setting(
        "max_worker_memory", "Processes", 0, _int_at_least(0),
        "Recycle a worker whose own memory (USS: resident pages no other process shares, from "
        "/proc/PID/smaps_rollup; Linux only) exceeds this many MiB: a replacement starts, and "
        "the worker stops gracefully once that one serves. The master checks about once a "
        "second. 0: never.",
        metavar="MIB", api=False,
    ),
    Setting(
        "max_worker_memory_hard", "Processes", 0, _int_at_least(0),
        "Kill a worker (SIGKILL, at once: its requests in flight fail) whose own memory exceeds "
        "this many MiB, and start another; a limit for growth too fast for --max-worker-memory's "
        "graceful recycling. Must be above --max-worker-memory. 0: never.",
        metavar="MIB", api=False,
    ),
    Setting(
        "max_worker_lifetime", "Processes", 0.0, _timeout_seconds,
        "Recycle a worker after it has run this many seconds, replacement first as for "
        "--max-worker-memory. 0: never.",
        metavar="SECONDS", api=False,
    ),
    Setting(
        "max_worker_lifetime_jitter", "Processes", 0.0, _timeout_seconds,
        "Add up to this many seconds, at random per worker, to --max-worker-lifetime, so the "
        "workers do not all restart at once.",
        metavar="SECONDS", api=False,
    ),
    Setting(
        "max_blocking_time", "Processes", None, _optional_seconds,
        "Log one warning, with the stack of the code that blocked it, each time a worker's "
        "event loop is blocked this long (gevent's monitor thread). Off by default.",
        metavar="SECONDS", api=False,
    ),
    Setting(
        "preload", "Processes", False, _bool,
        "Import the application in the master, before forking (shared copy-on-write memory, "
        "import errors at once); gevent is patched before that import and reinitialized in "
        "each worker. SIGHUP then restarts workers but cannot load new code.",
        api=False, boolean=True, restart=True,
    ),
    Setting(
        "daemon", "Processes", False, _bool,
        "Detach into the background (double fork, new session, chdir /, standard streams to "
        "/dev/null or the log files) after binding, before anything of gevent exists.",
        api=False, boolean=True, restart=True,
    ),
    Setting(
        "pid", "Processes", None, _optional_path,
        "Write the master's pid to this file (atomically); refuse to start when it names a "
        "running process; remove it on exit.",
        metavar="FILE", api=False, restart=True,
    ),
    Setting(
        "proc_name", "Processes", None, _proc_name,
        "The name in the process titles that ps, top and /proc/PID/cmdline show: `greenserve: "
        "master [NAME]` and `greenserve: worker [NAME]` (gunicorn's proc_name, by which "
        "monitoring such as Datadog's gunicorn check finds the master). Default: the "
        "application's MODULE:APP. Titles need setproctitle (pip install setproctitle); "
        "without it the processes keep their command line.",
        flags=("-n", "--name"), metavar="NAME", api=False,
    ),
    Setting(
        "user", "Processes", None, _optional_name,
        "Run the workers as this user (name or uid), after the master bound the ports.",
        metavar="USER", api=False, restart=True,
    ),
    Setting(
        "group", "Processes", None, _optional_name,
        "Run the workers as this group (name or gid); default: the user's primary group.",
        metavar="GROUP", api=False, restart=True,
    ),
    Setting(
        "umask", "Processes", None, _optional_octal_mode,
        "File mode creation mask of the master and the workers, set at start: it applies to "
        "the log files, and to the files the application creates, e.g. 0027. Default: the one "
        "greenserve was started with; 0022 with --daemon.",
        metavar="MASK", api=False, restart=True,
    ),
    # --- limits ---
    Setting(
        "limit_request_line", "Limits", DEFAULT_MAX_REQUEST_LINE, _request_limit("limit_request_line", 16),
        "Longest request line (method, target, version) in bytes; longer gets 414. 0 (gunicorn's "
        "no limit): 65536.",
        metavar="BYTES",
    ),
    Setting(
        "limit_request_fields", "Limits", DEFAULT_MAX_HEADER_COUNT, _request_limit("limit_request_fields", 1),
        "Most header fields in a request (and trailer fields in a chunked body); more gets 431. "
        "0 (gunicorn's no limit): 32768.",
        metavar="INT",
    ),
    Setting(
        "limit_request_field_size", "Limits", DEFAULT_MAX_HEADER_SIZE, _request_limit("limit_request_field_size", 16),
        "Longest header field line in bytes (name, colon and value); longer gets 431. 0 "
        "(gunicorn's no limit): 65536.",
        metavar="BYTES",
    ),
    Setting(
        "limit_request_body", "Limits", DEFAULT_MAX_BODY, _int_at_least(0),
        "Largest request body in bytes, Content-Length or chunked; larger gets 413. 0: no limit.",
        metavar="BYTES",
    ),
    Setting(
        "drain_limit", "Limits", 1 * MiB, _int_at_least(0),
        "When the application answers without reading the whole request body, up to this many "
        "unread bytes are read and dropped to keep the connection; with more left, the "
        "connection is closed after the response instead.",
        metavar="BYTES",
    ),
    # --- timeouts ---
    Setting(
        "keepalive", "Timeouts", 5.0, _timeout_seconds,
        "Seconds an idle keep-alive connection waits for its next request before it is closed. "
        "0: no keep-alive (every response says Connection: close, as gunicorn's keepalive = 0).",
        metavar="SECONDS",
    ),
    Setting(
        "header_timeout", "Timeouts", 10.0, _seconds,
        "Seconds a client has to send a complete request head, counted from the connection's "
        "start or the first byte of the request (slowloris protection); then 408 and close. "
        "Also bounds the TLS handshake.",
        metavar="SECONDS",
    ),
    Setting(
        "body_timeout", "Timeouts", 30.0, _seconds,
        "Seconds to wait for the next piece of a request body while the application reads it; "
        "then the read fails and the connection closes.",
        metavar="SECONDS",
    ),
    Setting(
        "send_timeout", "Timeouts", 30.0, _seconds,
        "Seconds a client may take to accept more response bytes before the connection is "
        "dropped (a client that stops reading cannot hold a connection forever).",
        metavar="SECONDS",
    ),
    Setting(
        "graceful_timeout", "Timeouts", 30.0, _timeout_seconds,
        "On stop (SIGTERM, SIGINT, `server.stop()`), seconds in-flight requests have to "
        "finish before their connections are closed. 0: none (as gunicorn's 0: cut at once).",
        metavar="SECONDS",
    ),
    Setting(
        "request_timeout", "Timeouts", 0.0, _timeout_seconds,
        "Seconds an application has to start its response (the head: status and headers). A "
        "request still waiting then (a database read, an outbound call, a sleep) is interrupted "
        "where it waits by `greenserve.RequestTimeout`, a BaseException that `except Exception` "
        "does not catch; the error log gets its stack, the client a 504 and a closed connection. "
        "A response whose head went out (a stream) is not cut, nor are upgrades (WebSockets). "
        "Code that never yields is the liveness `timeout`'s to stop. 0: off.",
        metavar="SECONDS",
    ),
    # --- overload (greenserve/admission.py; docs/production.md, "Overload") ---
    Setting(
        "overload_control", "Overload", True, _bool,
        "Past a worker's capacity, answer new requests 503 Service Unavailable at once (with "
        "Retry-After: 1, and Connection: close on HTTP/1.1; an HTTP/2 stream ends alone), without "
        "calling the application, instead of slowing every request until all time out. A request "
        "is shed when it waited in the event loop past the queue_target turn after turn (the CPU "
        "is saturated: waiting on I/O is no load), or, stamped by a trusted proxy, queued past "
        "max_queue_time in all; requests already running finish. --no-overload-control: every "
        "request is admitted.",
        boolean=True,
    ),
    Setting(
        "queue_target", "Overload", 0.02, _seconds,
        "Seconds a request may wait in a worker's event loop for the CPU, behind other requests, "
        "before its application starts, while the worker is saturated; a burst that passes it "
        "once is served. The target used is at least 4 times the loop time a request takes "
        "(measured), so that slow views are not shed for waiting for each other.",
        metavar="SECONDS",
    ),
    Setting(
        "max_queue_time", "Overload", 1.0, _seconds,
        "Seconds a request stamped by a trusted proxy (forwarded_allow_ips) may have queued in "
        "all before its application starts, from the time its X-Request-Start header says the "
        "proxy received it (nginx t=${msec}, Heroku's milliseconds, microseconds with t=); one "
        "that queued longer is shed whatever the worker's load: its client has likely given up.",
        metavar="SECONDS",
    ),
    Setting(
        "health_path", "Overload", [], _health_paths,
        "A URL path that overload control never sheds (a load balancer's or Kubernetes' health "
        "check, /healthz): its requests always reach the application. Repeat the flag for several.",
        metavar="PATH", repeat=True,
    ),
    # --- WebSockets (the built-in environ["wsgi.websocket"]; docs/websockets.md) ---
    Setting(
        "websocket_max_message_size", "WebSockets", 16 * MiB, _int_at_least(0),
        "Largest WebSocket message in bytes that the built-in WebSocket (`environ[\"wsgi.websocket\"]`) "
        "accepts, summed over its fragments (after decompression with permessage-deflate). A "
        "larger one closes the WebSocket with 1009 (message too big), as soon as a frame "
        "header announces it. 0: no limit.",
        metavar="BYTES",
    ),
    Setting(
        "websocket_ping_interval", "WebSockets", 0.0, _timeout_seconds,
        "Seconds between keepalive pings on each open built-in WebSocket; a peer from which "
        "nothing (not even the Pong) arrives for a whole interval after a ping is closed with "
        "1011. Set it below the idle timeout of proxies in front (nginx's proxy_read_timeout, "
        "60 s) to keep idle WebSockets open through them. 0: off.",
        metavar="SECONDS",
    ),
    Setting(
        "websocket_per_message_deflate", "WebSockets", False, _bool,
        "Accept permessage-deflate (RFC 7692) from the clients of the built-in WebSocket that "
        "offer it (browsers do), without context takeover: messages of 128 bytes or more are "
        "compressed, at zlib's fastest level, and no zlib state is kept per WebSocket. Off by "
        "default: it trades CPU per message for bandwidth, and gevent-websocket, which apps "
        "move from, never compressed.",
        boolean=True,
    ),
    # --- behind a proxy ---
    Setting(
        "proxy_headers", "Behind a proxy", True, _bool,
        "Trust X-Forwarded-For and X-Forwarded-Proto (also X-Forwarded-Ssl, X-Forwarded-Protocol) "
        "from peers in forwarded_allow_ips and from unix-socket peers: REMOTE_ADDR becomes the "
        "client's address and wsgi.url_scheme the client's scheme. Anyone else's are ignored.",
        boolean=True,
    ),
    Setting(
        "forwarded_allow_ips", "Behind a proxy", ["127.0.0.1", "::1"], _address_list,
        "Addresses and networks (10.0.0.0/8) of the proxies whose forwarding headers count, "
        "comma-separated; * for any peer (only when nothing else can reach the server).",
        metavar="ADDRESSES",
    ),
    Setting(
        "proxy_protocol", "Behind a proxy", False, _proxy_protocol,
        "Every connection starts with a PROXY protocol header (v1 or v2, as HAProxy's send-proxy "
        "and cloud TCP load balancers send it), from a peer in forwarded_allow_ips or a "
        "unix-socket peer; any other connection, or one without a valid header, is closed. "
        "REMOTE_ADDR and REMOTE_PORT are then the client's, SERVER_NAME and SERVER_PORT the "
        "address it connected to, and a v2 header's TLS flag sets wsgi.url_scheme. See "
        "docs/deployment.md.",
        boolean=True,
    ),
    Setting(
        "protocol", "Behind a proxy", "http", _protocol,
        "What the listeners speak: http (HTTP/1.1, and HTTP/2 as --http-protocols says), or uwsgi, "
        "the binary protocol of nginx's uwsgi_pass (include uwsgi_params): one request a "
        "connection, its vars the environ, answered in HTTP/1.x, from peers in "
        "--uwsgi-allow-from only. See docs/deployment.md, \"Behind nginx with uwsgi_pass\".",
        metavar="PROTOCOL",
    ),
    Setting(
        "uwsgi_allow_ips", "Behind a proxy", ["127.0.0.1", "::1"], _address_list,
        "With --protocol uwsgi: the addresses and networks (10.0.0.0/8) that may send uwsgi "
        "requests, comma-separated; * for any peer. Anyone else's connection is closed with one "
        "log line. Unix-socket peers are always served.",
        flags=("--uwsgi-allow-from",), metavar="ADDRESSES",
    ),
    # --- HTTP and WSGI ---
    Setting(
        "server_header", "HTTP and WSGI", "greenserve", _header_value,
        "Value of the Server response header; an empty string sends none. An application's own "
        "Server header wins.",
        metavar="TEXT",
    ),
    Setting(
        "root_path", "HTTP and WSGI", "", _root_path,
        "SCRIPT_NAME: the URL prefix the application is mounted under (e.g. /app behind a proxy). "
        "A request path starting with it has it moved from PATH_INFO to SCRIPT_NAME.",
        metavar="PATH",
    ),
    Setting(
        "sendfile", "HTTP and WSGI", True, _bool,
        "Send wsgi.file_wrapper's files with the sendfile system call over plain HTTP (TLS always "
        "reads and sends). --no-sendfile, or SENDFILE=0 in the environment as gunicorn reads it, "
        "turns it off (for file systems where sendfile misbehaves, such as some VirtualBox shares).",
        boolean=True,
    ),
    # --- static files (docs/static.md) ---
    Setting(
        "static", "Static files", [], _static_mounts,
        "Serve the files of DIRECTORY under URL_PREFIX from the server itself, before the "
        "application (GET and HEAD; other methods 405; a miss under the prefix is greenserve's "
        "404, not the application's): ETag, ranges, 304s, precompressed .br/.gz, sendfile. "
        "Repeat the flag for several; relative to --chdir. From Python or a config file also a "
        "dict {\"/static\": \"./static\"}. See docs/static.md.",
        metavar="URL_PREFIX=DIRECTORY", repeat=True,
    ),
    Setting(
        "static_max_age", "Static files", 60, _int_at_least(0),
        "Cache-Control max-age, in seconds, of the static files whose names carry no content "
        "hash (0: no-cache, browsers revalidate each time). Hashed names (app.3f2a9c.js, "
        "Django's ManifestStaticFilesStorage, Vite's index-BfN2s0Kd.js) get a year and immutable.",
        metavar="SECONDS",
    ),
    Setting(
        "static_index", "Static files", False, _bool,
        "Answer a static directory's URL (ending in /) with its index.html; off: 404.",
        boolean=True,
    ),
    Setting(
        "static_follow_symlinks", "Static files", False, _bool,
        "Serve static files through symlinks that lead outside their directory (off: only "
        "links that stay inside it are followed).",
        boolean=True,
    ),
    # --- HTTP/2 (gunicorn's names; docs/http2.md, "Serving HTTP/2") ---
    Setting(
        "http_protocols", "HTTP/2", ["h1"], _http_protocols,
        "The HTTP versions served, comma-separated, the preferred first: h1 (HTTP/1.1 and 1.0), h2 "
        "(HTTP/2). Over TLS, h2 is offered by ALPN (h2,h1: clients that speak HTTP/2 get it, the "
        "others HTTP/1.1); without TLS it needs --http2-cleartext prior-knowledge, and h2 alone is "
        "HTTP/2 only there (a trusted peer that does not send the preface gets GOAWAY). Each HTTP/2 "
        "request (stream) runs in a greenlet of its own, beside the others of its connection. "
        "See docs/http2.md.",
        metavar="PROTOCOLS",
    ),
    Setting(
        "http2_cleartext", "HTTP/2", "off", _http2_cleartext,
        "HTTP/2 without TLS (h2c), for a trusted proxy that speaks it to its backends (HAProxy's "
        "proto h2, Envoy): off, or prior-knowledge: a connection from a peer in forwarded_allow_ips "
        "(or a unix-socket peer, or one behind a PROXY header) that opens with HTTP/2's preface is "
        "served HTTP/2; anything else, HTTP/1.1 as usual (a proxy's health checks). gunicorn's "
        "upgrade and both are refused: h2c by Upgrade is deprecated (RFC 9113) and a "
        "request-smuggling path through proxies. Needs h2 in --http-protocols; TLS listeners "
        "ignore it (ALPN decides).",
        metavar="MODE",
    ),
    Setting(
        "http2_max_concurrent_streams", "HTTP/2", 100, _int_at_least(1, 2**31 - 1),
        "Most requests (streams) open at once on one HTTP/2 connection, announced to the client; "
        "one more is refused with REFUSED_STREAM (the client may retry it) and the connection "
        "goes on. Streams count against --worker-connections too.",
        metavar="INT",
    ),
    Setting(
        "http2_initial_window_size", "HTTP/2", 65535, _int_at_least(1, 2**31 - 1),
        "Bytes of one request body an HTTP/2 client may send before the application reads them "
        "(the stream's flow-control window); wsgi.input gives them back as it reads.",
        metavar="BYTES",
    ),
    Setting(
        "http2_max_frame_size", "HTTP/2", 16384, _int_at_least(16384, 16777215),
        "Largest HTTP/2 frame payload accepted, in bytes; a larger frame ends the connection "
        "(FRAME_SIZE_ERROR) from its 9-byte header, before its payload is read.",
        metavar="BYTES",
    ),
    Setting(
        "http2_max_header_list_size", "HTTP/2", 65536, _http2_header_list,
        "Largest request header list after HPACK decompression, in bytes (name, value and 32 "
        "per field), announced to the client; a larger one is answered 431 and the connection "
        "goes on (HPACK bombs end here). 0 (gunicorn's no limit): 1 MiB.",
        metavar="BYTES",
    ),
    Setting(
        "http2_min_send_rate", "HTTP/2", 1024, _int_at_least(0, 2**31 - 1),
        "Bytes a second an HTTP/2 client must let a response through once its flow-control window "
        "has closed, judged over spans of --send-timeout (on the stream, or on the connection when "
        "streams share its window); slower, and that stream alone is reset (RST_STREAM CANCEL) with "
        "one INFO line, so a window opened a byte a second holds no response for ever. A stream whose "
        "window never closes is not measured. 0: only a window closed for all of --send-timeout "
        "resets. See docs/http2.md.",
        metavar="BYTES",
    ),
    # --- logging ---
    Setting(
        "access_log", "Logging", None, _optional_path,
        "Where to write one line per request: a file path, or '-' for standard output. Off by "
        "default (as in gunicorn).",
        metavar="FILE", api=False, restart=True,
    ),
    Setting(
        "access_log_format", "Logging",
        '%(h)s %(l)s %(u)s %(t)s "%(r)s" %(s)s %(b)s "%(f)s" "%(a)s"', _access_log_format,
        "Access log line format, with gunicorn's atoms: h remote address, l '-', u user, t time, "
        "r request line, m method, U path, q query, H protocol, s status, B/b response body "
        "bytes, f referer, a user agent, T/M/D/L request time in s/ms/us/decimal s, p pid, "
        "{name}i request header, {name}o response header, {key}e environ. The default is the "
        "Apache combined format. An unknown atom is refused, even while the access log is off.",
        metavar="FORMAT", restart=True,
    ),
    Setting(
        "error_log", "Logging", "-", _text,
        "Where the server's own messages and application tracebacks go: a file path, or '-' for "
        "standard error.",
        metavar="FILE", api=False, restart=True,
    ),
    Setting(
        "log_level", "Logging", "info", _log_level,
        "Least severe error-log messages written: debug, info, warning, error or critical.",
        metavar="LEVEL", restart=True,
    ),
    Setting(
        "log_config", "Logging", None, _log_config,
        "A logging configuration file: a dictConfig in JSON, or a fileConfig ini (told apart by "
        "the content). The error log is then the logger greenserve.error and the access log "
        "greenserve.access (whenever that logger has a handler: --access-log is not needed), and "
        "the file's handlers decide where their records go; each access record carries the "
        "request's fields as attributes (remote_addr, method, path, status, bytes, duration, "
        "...) for a JSON formatter. A config file may give the dictConfig dict itself "
        "(gunicorn's logconfig_dict). See docs/production.md.",
        metavar="FILE", api=False, restart=True,
    ),
    Setting(
        "syslog", "Logging", False, _bool,
        "Send the error log to syslog too, at --syslog-addr (default udp://localhost:514).",
        api=False, boolean=True, restart=True,
    ),
    Setting(
        "syslog_addr", "Logging", None, _syslog_addr,
        "Where syslog listens, which turns --syslog on: udp://HOST:PORT, tcp://HOST:PORT or "
        "unix:///dev/log (a local syslog's socket).",
        metavar="ADDRESS", api=False, restart=True,
    ),
    Setting(
        "syslog_facility", "Logging", "user", _syslog_facility,
        "The syslog facility of the error log's messages: user, daemon, local0 ... local7, ...",
        metavar="FACILITY", api=False, restart=True,
    ),
    Setting(
        "syslog_prefix", "Logging", None, _optional_name,
        "The program name syslog files the messages under (RFC 3164's TAG). Default: greenserve.",
        metavar="NAME", api=False, restart=True,
    ),
    Setting(
        "capture_output", "Logging", False, _bool,
        "What the master and the workers write to standard output and error (a view's print(), "
        "a library's warnings) goes to the --error-log file, line by line; with --error-log '-', "
        "standard output goes to standard error.",
        api=False, boolean=True, restart=True,
    ),
    # --- TLS ---
    Setting(
        "certfile", "TLS", None, _optional_path,
        "PEM certificate (chain) file: serve HTTPS. Needs --keyfile unless the file holds the key.",
        metavar="FILE", api=False, restart=True,
    ),
    Setting(
        "keyfile", "TLS", None, _optional_path,
        "PEM private key file for --certfile.",
        metavar="FILE", api=False, restart=True,
    ),
    Setting(
        "ca_certs", "TLS", None, _optional_path,
        "PEM file of the CA certificates that client certificates must be signed by (with "
        "--cert-reqs optional or required). Read again on SIGHUP, as --certfile and --keyfile are.",
        metavar="FILE", api=False,
    ),
    Setting(
        "cert_reqs", "TLS", "none", _cert_reqs,
        "Client certificates: none (not asked for), optional (asked for; a client without one is "
        "served, one with a certificate --ca-certs does not vouch for is refused) or required (a "
        "client without a valid one is refused at the handshake). gunicorn's 0, 1, 2 are accepted. "
        "A client's certificate is in the environ as SSL_CLIENT_CERT, SSL_CLIENT_S_DN, ... (mod_ssl's names).",
        metavar="MODE", api=False,
    ),
    Setting(
        "ciphers", "TLS", None, _optional_name,
        "OpenSSL cipher list for TLS 1.2, e.g. ECDHE+AESGCM:ECDHE+CHACHA20 (TLS 1.3's suites are "
        "all strong and not set by it). Default: Python's, which has no weak ciphers.",
        metavar="CIPHERS", api=False,
    ),
    Setting(
        "tls_min_version", "TLS", "1.2", _tls_version,
        "Oldest TLS version accepted: 1.2 (Mozilla's intermediate profile and Python's default: every "
        "client of the last ten years) or 1.3 (modern clients only).",
        metavar="VERSION", api=False,
    ),
    # --- application (CLI only) ---
    Setting(
        "chdir", "Application", None, _optional_path,
        "Change to this directory before importing the application (it is put first on sys.path).",
        metavar="DIR", api=False, restart=True,
    ),
    Setting(
        "raw_env", "Application", [], _environment_list,
        "Environment variables set in the master before anything else runs (hooks, --preload, "
        "the application), and so in every worker: KEY=VALUE, gunicorn's -e/--env. Repeat the "
        "flag for several.",
        flags=("-e", "--raw-env", "--env"), metavar="KEY=VALUE", repeat=True, api=False,
    ),
    Setting(
        "patch", "Application", "all", _patch_spec,
        "What gevent monkey-patches in each worker before the application is imported: all "
        "(patch_all), none, or modules, e.g. socket,ssl,time (see docs/patching.md).",
        metavar="MODULES", api=False,
    ),
    Setting(
        "resolver", "Application", None, _choice("thread", "ares", "dnspython", "block"),
        "gevent's DNS resolver in the workers (gevent's default: thread). ares (c-ares) is the "
        "one built for use across fork.",
        metavar="NAME", api=False,
    ),
    Setting(
        "loop", "Application", None, _choice("libev", "libuv"),
        "gevent's event loop implementation in the workers (gevent's default: libev).",
        metavar="NAME", api=False,
    ),
    Setting(
        "monkey_patch", "Application", True, _bool,
        "Apply gevent's monkey-patching (--patch) before importing the application, so that its "
        "time.sleep, sockets, ssl, DNS and threading cooperate. --no-monkey-patch is --patch "
        "none: the standard library is left alone.",
        api=False, boolean=True,
    ),
    # --- development ---
    Setting(
        "reload", "Development", False, _bool,
        "Start new workers when a .py file under --reload-dir (default: the current directory, "
        "after --chdir) or a --reload-extra-file changes, as SIGHUP does: the old ones serve "
        "until the new ones do, so an edit that does not import leaves the last good code "
        "serving. For development; watches with watchfiles (pip install watchfiles), "
        "else polls the files every second, with a warning. Not with --preload or --daemon.",
        api=False, restart=True, boolean=True,
    ),
    Setting(
        "reload_dir", "Development", [], _path_list,
        "A directory --reload watches (recursively) instead of the current one. Repeat the flag "
        "to watch several.",
        metavar="DIR", repeat=True, api=False, restart=True,
    ),
    Setting(
        "reload_extra_file", "Development", [], _path_list,
        "A file --reload watches besides the .py files, whatever its kind (a template, a "
        "settings file). Repeat the flag for several.",
        metavar="FILE", repeat=True, api=False, restart=True,
    ),
    # --- the control socket (process/control.py) ---
    Setting(
        "control_socket", "Control", None, _optional_path,
        "The master's control socket, which gunicorn's own client drives: gunicornc -s PATH -c "
        "'show workers' (show all|workers|config|stats|listeners, worker add N|remove N|kill PID, "
        "reload, reopen, shutdown [graceful|quick]; docs/production.md, Control socket). Default, "
        "as gunicorn 27's: $XDG_RUNTIME_DIR/gunicorn.ctl when that directory exists, else "
        "~/.gunicorn/gunicorn.ctl, where gunicornc looks; there a master that finds another "
        "listening says so and runs without one, where a PATH given is refused. Resolved before "
        "--chdir and --daemon.",
        metavar="PATH", api=False, restart=True,
    ),
    Setting(
        "control_socket_mode", "Control", OctalMode(CONTROL_SOCKET_MODE), _octal_mode,
        "Permissions of the control socket file: 0600 lets only its owner (and root) in, 0660 its "
        "group too. The master also reads each client's uid (SO_PEERCRED) and refuses one this "
        "mode does not admit.",
        metavar="MODE", api=False, restart=True,
    ),
    Setting(
        "control_socket_disable", "Control", False, _bool,
        "No control socket: gunicornc cannot reach this master (signals still do).",
        flags=("--no-control-socket",), api=False, restart=True, boolean=True,
    ),
    # --- monitoring ---
    Setting(
        "metrics_bind", "Monitoring", None, _metrics_address,
        "Serve GET /metrics in the Prometheus text format at this address (HOST:PORT or "
        "unix:PATH), from the master: one scrape sees every worker and never waits on one. "
        "The metrics are listed in docs/production.md (Monitoring). Off by default.",
        metavar="ADDRESS", api=False, restart=True,
    ),
    Setting(
        "prometheus_multiproc_dir", "Monitoring", None, _optional_path,
        "The application's own prometheus_client metrics, from every worker, in --metrics-bind's "
        "/metrics: this directory is emptied of its .db files at start and given to the workers "
        "as PROMETHEUS_MULTIPROC_DIR, each worker that ends is marked dead (kill -9 included), "
        "and each scrape merges the files (prometheus_client's multiprocess mode). Needs "
        "--metrics-bind and prometheus_client.",
        metavar="DIR", api=False, restart=True,
    ),
    Setting(
        "statsd_host", "Monitoring", None, _statsd_address,
        "Send statsd lines to this address (HOST:PORT, HOST for port 8125, or unix:PATH for a "
        "unix datagram socket): per request gunicorn.requests, gunicorn.request.status.NNN and "
        "gunicorn.request.duration (ms), and gunicorn.workers from the master, gunicorn's names so "
        "its dashboards carry over. Batched into one datagram per event-loop turn; a send error "
        "never reaches a request. Off by default. See docs/production.md (Monitoring).",
        metavar="ADDRESS", api=False, restart=True,
    ),
    Setting(
        "statsd_prefix", "Monitoring", "", _statsd_prefix,
        "Put before every statsd metric name, with a dot between (gunicorn's rule): "
        "--statsd-prefix web gives web.gunicorn.requests.",
        metavar="PREFIX", api=False, restart=True,
    ),
    Setting(
        "dogstatsd_tags", "Monitoring", "", _dogstatsd_tags,
        "dogstatsd tags added to every statsd line as |#TAGS, comma-separated "
        "(env:prod,service:web), for Datadog's agent.",
        metavar="TAGS", api=False, restart=True,
    ),
    Setting(
        "enable_backlog_metric", "Monitoring", False, _bool,
        "Send the listen backlog to statsd once a second, as gunicorn 24.1 does: gunicorn.backlog, "
        "the connections waiting in the kernel's accept queues of all listeners (Linux), as a "
        "histogram (|h) like gunicorn's. Read by the master, never on a request's path. Off by "
        "default, as in gunicorn: a metric more is a series more at a paying statsd service. "
        "--metrics-bind's /metrics has it always, per listener (greenserve_listen_queue).",
        api=False, restart=True, boolean=True,
    ),
]


def _hook_rows():
    """The "Server hooks" rows, from process.hooks.HOOKS (what each is given, where and when it runs)."""
    from greenserve.process import hooks

    return [
        Setting(
            hook.name, "Server hooks", None, hooks.converter(hook.name),
            "%s(%s): %s. A callable, or 'module:function' (imported %s). See docs/hooks.md."
            % (hook.name, ", ".join(hook.arguments), hook.when,
               "in the master at start" if hook.where == "master" else "in each worker, after patching"),
            metavar="MODULE:FUNCTION", api=False,
        )
        for hook in hooks.HOOKS
    ]


SETTINGS.extend(_hook_rows())

SETTINGS_BY_NAME = {setting.name: setting for setting in SETTINGS}

_RELOAD_CONFLICTS = {
    "preload": "the master would hold the code it imported, and a reload could not renew it; leave --preload out "
    "in development",
    "daemon": "--reload is for development in a terminal, which --daemon leaves; run in the foreground",
}


class Config:
    """Validated values for every setting; unknown names are refused (waitress's habit).

    Every front door (the command, ``serve()`` and ``WSGIServer``, the paste runner, ``run()``,
    the gunicorn worker class) makes one and calls :meth:`check`; the master, the workers and
    the servers read their settings from it, so a setting's default is said in its row alone.
    """

    def __init__(self, **values):
        for setting in SETTINGS:
            object.__setattr__(self, setting.name, setting.default)
        self.update(**values)

    def update(self, **values):
        for name, value in values.items():
            setting = SETTINGS_BY_NAME.get(name)
            if setting is None:
                raise TypeError("unknown setting %r (see docs/settings.md)" % name)
            try:
                value = setting.convert(value) if value is not None or setting.default is not None else None
            except ValueError as exc:
                raise SettingError("%s: %s" % (name, exc), setting=name, reason=str(exc)) from None
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        self.update(**{name: value})

    def replace(self, **values):
        """A copy with ``values`` changed (validated)."""
        copy = Config.__new__(Config)
        copy.__dict__.update(self.__dict__)
        copy.update(**values)
        return copy

    def as_dict(self):
        return {setting.name: getattr(self, setting.name) for setting in SETTINGS}

    def worker_count(self):
        """``workers``, where 0 is one per CPU."""
        return self.workers or os.cpu_count() or 1

    def syslog_on(self):
        return self.syslog or self.syslog_addr is not None

    def logs_through_logging(self):
        """Whether the error log (and with --log-config the access log) goes through ``logging``
        (greenserve.observe.logconfig), rather than straight to its file."""
        return self.log_config is not None or self.syslog_on()

    def bind_specs(self):
        """``bind`` as listener specs (see :func:`parse_bind`)."""
        return [bind_spec(text) for text in self.bind]

    def check(self, systemd_sockets=0, tls=None):
        """Refuse settings that cannot go together, with a SettingError of one line.

        ``systemd_sockets``: how many listening sockets systemd passed (socket activation), which
        replace ``bind``. ``tls``: whether the server serves TLS (the Python API's TLS keywords
        are no settings); None: as ``certfile`` says. The rules between settings live here and
        nowhere else.
        """
        if self.keyfile is not None and self.certfile is None:
            raise SettingError("--keyfile needs --certfile")
        self._check_http2(self.certfile is not None if tls is None else tls)
        if self.protocol == "uwsgi":
            self._check_uwsgi()
        if self.prometheus_multiproc_dir is not None and self.metrics_bind is None:
            raise SettingError(
                "--prometheus-multiproc-dir merges the application's metrics into the master's /metrics: "
                "it needs --metrics-bind ADDRESS"
            )
        for name in ("ca_certs", "ciphers"):
            if getattr(self, name) is not None and self.certfile is None:
                raise SettingError("--%s is a TLS setting: it needs --certfile (and --keyfile)" % name.replace("_", "-"))
        if self.cert_reqs != "none" and self.certfile is None:
            raise SettingError("--cert-reqs %s asks clients for certificates over TLS: it needs --certfile" % self.cert_reqs)
        if self.cert_reqs != "none" and self.ca_certs is None:
            raise SettingError(
                "--cert-reqs %s needs --ca-certs FILE: the CA certificates the clients' certificates are checked against"
                % self.cert_reqs
            )
        if self.reload:
            # The master would hold the preloaded code, which a reload cannot renew; a daemon
            # has no terminal for the tracebacks of a broken edit. --reload is for a terminal.
            for name in ("preload", "daemon"):
                if getattr(self, name):
                    raise SettingError(
                        "--reload cannot be used with --%s: %s" % (name, _RELOAD_CONFLICTS[name])
                    )
        else:
            for name in ("reload_dir", "reload_extra_file"):
                if getattr(self, name):
                    raise SettingError("--%s needs --reload" % name.replace("_", "-"))
        if self.sticky:
            self._check_sticky(self.certfile is not None if tls is None else tls)
        if self.max_worker_memory_hard and self.max_worker_memory_hard <= self.max_worker_memory:
            raise SettingError(
                "--max-worker-memory-hard (%d MiB) must be above --max-worker-memory (%d MiB): the hard "
                "limit is for what the graceful one cannot catch" % (self.max_worker_memory_hard, self.max_worker_memory)
            )
        if self.reuse_port and systemd_sockets:
            raise SettingError("--reuse-port cannot be used with systemd socket activation: systemd owns the sockets")
        if self.reuse_port:
            for text, spec in zip(self.bind, self.bind_specs()):
                if spec[0] != "tcp":
                    raise SettingError(
                        "--reuse-port works only with HOST:PORT addresses, not %s (it is one socket the workers share)"
                        % text
                    )

    def _check_uwsgi(self):
        # nginx's uwsgi module speaks neither HTTP/2 nor a client's address we could own a worker by.
        if "h2" in self.http_protocols:
            raise SettingError("--protocol uwsgi cannot be used with h2 in --http-protocols: a uwsgi "
                               "connection carries one request from nginx's uwsgi_pass")
        if self.sticky:
            raise SettingError("--protocol uwsgi cannot be used with --sticky: every connection comes "
                               "from the front-end, whose address owns no client")

    def _check_sticky(self, tls):
        # A TLS session's state (keys, sequence numbers) lives in the worker's memory, not in the
        # descriptor: a connection handed over after its handshake could not be read by another
        # worker. HTTP/2 carries many clients' requests on one connection, which no one worker owns.
        if tls:
            raise SettingError(
                "--sticky cannot be used with TLS (--certfile): a TLS session cannot move to another worker "
                "with its socket; end TLS in a proxy in front (nginx, HAProxy: docs/deployment.md)"
            )
        if "h2" in self.http_protocols:
            raise SettingError(
                "--sticky cannot be used with h2 in --http-protocols: one HTTP/2 connection carries many "
                "clients' requests, which no one worker owns"
            )

    def _check_http2(self, tls):
        if "h2" in self.http_protocols and not tls and self.http2_cleartext == "off":
            raise SettingError(
                "--http-protocols %s: HTTP/2 is chosen by ALPN in the TLS handshake, so it needs TLS (as in "
                "gunicorn): give --certfile and --keyfile, or --http2-cleartext prior-knowledge to serve "
                "h2c to a trusted proxy" % ",".join(self.http_protocols)
            )
        if self.http2_cleartext != "off" and "h2" not in self.http_protocols:
            raise SettingError(
                "--http2-cleartext %s serves HTTP/2: add h2 to --http-protocols (h2,h1)" % self.http2_cleartext
            )

    def warnings(self):
        """Settings that go together but probably not as meant: one line each, for the startup log."""
        warnings = []
        if self.http2_cleartext != "off" and self.certfile is not None:
            warnings.append(
                "--http2-cleartext with --certfile does nothing: over TLS, ALPN chooses HTTP/2; leave it out"
            )
        if self.ca_certs is not None and self.cert_reqs == "none":
            warnings.append(
                "--ca-certs without --cert-reqs: no client is asked for a certificate; "
                "add --cert-reqs optional or required, or leave --ca-certs out"
            )
        if self.reuse_port and self.worker_count() == 1:
            warnings.append(
                "--reuse-port with one worker: nothing to balance, and while that worker restarts "
                "(a crash, --max-worker-memory-hard) new connections are refused; use two or more workers, or leave it off"
            )
        if self.sticky and self.worker_count() == 1:
            warnings.append("--sticky with one worker does nothing: every client is that worker's")
        if self.enable_backlog_metric and self.statsd_host is None:
            warnings.append(
                "--enable-backlog-metric without --statsd-host does nothing: it sends gunicorn.backlog to statsd "
                "(the listen queue is in --metrics-bind's /metrics always)"
            )
        elif self.enable_backlog_metric and self.reuse_port:
            warnings.append(
                "--enable-backlog-metric with --reuse-port sends no gunicorn.backlog: each worker's socket has "
                "a queue of its own, which the master cannot read"
            )
        if self.reload:
            from greenserve.process.reloader import watchfiles_missing

            polling = watchfiles_missing()
            if polling:
                warnings.append(polling)
        if self.max_worker_lifetime_jitter and not self.max_worker_lifetime:
            warnings.append("--max-worker-lifetime-jitter without --max-worker-lifetime does nothing")
        if self.proxy_protocol and "*" in self.forwarded_allow_ips:
            warnings.append(
                "--proxy-protocol with --forwarded-allow-ips '*': any client that reaches this port can "
                "claim any address in a PROXY header; list the load balancers' addresses instead"
            )
        return warnings


def parse_bind(text):
    """Parse one bind address (see the ``bind`` setting); raise SettingError when invalid."""
    try:
        return bind_spec(text)
    except ValueError as exc:
        raise SettingError("bind: %s" % exc) from None


def cli_flags(setting):
    if setting.flags:
        return setting.flags
    return ("--" + setting.name.replace("_", "-"),)


def render_markdown():
    """docs/settings.md's reference tables, generated from SETTINGS. The page ends with the config
    file's part, from gunicorn's names: ``entry.configfile.settings_page()`` is the whole page."""
    out = [
        "# Settings reference",
        "",
        "<!-- Generated from greenserve/settings.py by `python -m greenserve.entry.configfile`. "
        "Do not edit by hand: tests/test_settings.py fails when this page and the table differ. -->",
        "",
        "Every setting has one name, used as a keyword of `greenserve.WSGIServer(...)` and "
        "`greenserve.serve(...)` (where the *API* column says yes) and, with dashes, as a "
        "command-line flag of `greenserve`.",
        "",
    ]
    sections = []
    for setting in SETTINGS:
        if setting.section not in sections:
            sections.append(setting.section)
    for section in sections:
        out.append("## %s" % section)
        out.append("")
        out.append("| setting | flag | type | default | API | meaning |")
        out.append("|---|---|---|---|---|---|")
        for setting in SETTINGS:
            if setting.section != section:
                continue
            if setting.boolean and setting.flags:
                flag = " ".join("`%s`" % f for f in setting.flags)  # gunicorn's spelling: one flag, on
            elif setting.boolean:
                flag = "`--%s` / `--no-%s`" % ((setting.name.replace("_", "-"),) * 2)
            else:
                flag = " ".join("`%s %s`" % (f, setting.metavar or "VALUE") for f in cli_flags(setting))
                if setting.repeat:
                    flag += " (repeatable)"
            default = setting.default
            if isinstance(default, list):
                default = ", ".join(default)
            default = "`%s`" % (default,) if default not in (None, "") else "*(none)*"
            default = default.replace("|", "\\|")
            out.append(
                "| `%s` | %s | %s | %s | %s | %s |"
                % (
                    setting.name,
                    flag,
                    setting.type_name.replace("|", "\\|"),  # (none|optional|required: a cell, not three)
                    default,
                    "yes" if setting.api else "no",
                    setting.help.replace("|", "\\|"),
                )
            )
        out.append("")
    return "\n".join(out)


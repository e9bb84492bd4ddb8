"""Where the settings come from: the table's defaults, the environment gunicorn reads (PORT,
WEB_CONCURRENCY, FORWARDED_ALLOW_IPS, SENDFILE), the config file (``-c``), GREENSERVE_CMD_ARGS and
the flags -- in that order, each overriding the ones before.

The order is gunicorn's, so that a gunicorn deployment moves over unchanged: there those
variables are the *defaults* of bind, workers, forwarded_allow_ips and sendfile (a config file's
``bind`` wins over PORT), GUNICORN_CMD_ARGS overrides the file, and the command line overrides
everything.

The config file is Python, executed as gunicorn executes its ``gunicorn.conf.py``; its
module-level names set settings, by our names or gunicorn's (GUNICORN_ALIASES, below). A name
that is no setting is ignored, as gunicorn ignores it (real files hold their own helpers:
``workers_per_core_str``, ``log_dir``, a function; and pre-19 or misspelt names: ``keep_alive``,
``access_logfile``), but not silently: one warning names them all, with a did-you-mean where a
name is close to a setting, so a typo is seen without failing a deploy. ``greenserve check``
refuses a file with such a typo (``strict``). What is not a setting by construction is skipped
without a word: names starting with ``_``, modules (``import os``) and what the file imported
(``from os import environ``).

A ``Loader`` holds the inputs (the file's path, the flags, the environment) and loads them
again on SIGHUP (``reload()``); ``render()`` is ``--print-config``: every setting, its value
and where it came from.
"""

import os
import sys
import types

from greenserve.settings import SETTINGS, SETTINGS_BY_NAME, Config, SettingError, cli_flags, render_markdown

# The environment variable of extra flags (gunicorn's GUNICORN_CMD_ARGS).
CMD_ARGS_VARIABLE = "GREENSERVE_CMD_ARGS"

# The file read when neither -c nor GREENSERVE_CMD_ARGS names one: gunicorn reads it so
# (gunicorn.config.get_default_config_file), from the directory the command was typed in, before
# any chdir; a migrating deployment that relies on it keeps its settings.
DEFAULT_FILE = "gunicorn.conf.py"


def default_file():
    """``gunicorn.conf.py`` when the current directory holds one, else None."""
    return DEFAULT_FILE if os.path.isfile(DEFAULT_FILE) else None


# gunicorn's settings (gunicorn.config.KNOWN_SETTINGS, 27.0), so that a gunicorn.conf.py loads
# with `greenserve -c`. tests/entry/test_config_file.py compares these names with the installed
# gunicorn's, so the lists cannot drift. A name that is also a setting of ours (the server hooks,
# --reload and the TLS options share gunicorn's names) is ours, whichever list holds it here.
#
# gunicorn's name -> the setting of ours with the same meaning:
GUNICORN_ALIASES = {
    "access_log_format": "access_log_format",
    "accesslog": "access_log",
    "backlog": "backlog",
    "bind": "bind",
    "capture_output": "capture_output",
    "ca_certs": "ca_certs",
    "cert_reqs": "cert_reqs",
    "certfile": "certfile",
    "chdir": "chdir",
    "child_exit": "child_exit",
    "control_socket": "control_socket",
    "control_socket_disable": "control_socket_disable",
    "control_socket_mode": "control_socket_mode",
    "ciphers": "ciphers",
    "daemon": "daemon",
    "errorlog": "error_log",
    "forwarded_allow_ips": "forwarded_allow_ips",
    "graceful_timeout": "graceful_timeout",
    "group": "group",
    "http_protocols": "http_protocols",
    "http2_cleartext": "http2_cleartext",
    "http2_initial_window_size": "http2_initial_window_size",
    "http2_max_concurrent_streams": "http2_max_concurrent_streams",
    "http2_max_frame_size": "http2_max_frame_size",
    "http2_max_header_list_size": "http2_max_header_list_size",
    "keepalive": "keepalive",
    "keyfile": "keyfile",
    "limit_request_field_size": "limit_request_field_size",
    "limit_request_fields": "limit_request_fields",
    "limit_request_line": "limit_request_line",
    "logconfig": "log_config",
    "logconfig_dict": "log_config",
    "logconfig_json": "log_config",
    "loglevel": "log_level",
    "max_requests": "max_requests",
    "max_requests_jitter": "max_requests_jitter",
    "nworkers_changed": "nworkers_changed",
    "on_exit": "on_exit",
    "on_reload": "on_reload",
    "on_starting": "on_starting",
    "pidfile": "pid",
    "post_fork": "post_fork",
    "post_request": "post_request",
    "post_worker_init": "post_worker_init",
    "pre_exec": "pre_exec",
    "pre_fork": "pre_fork",
    "pre_request": "pre_request",
    "preload_app": "preload",
    "proc_name": "proc_name",
    "proxy_allow_ips": "forwarded_allow_ips",
    "protocol": "protocol",
    "proxy_protocol": "proxy_protocol",
    "reload": "reload",
    "reload_extra_files": "reload_extra_file",
    "reuse_port": "reuse_port",
    "root_path": "root_path",
    "raw_env": "raw_env",
    "sendfile": "sendfile",
    "syslog": "syslog",
    "syslog_addr": "syslog_addr",
    "syslog_facility": "syslog_facility",
    "syslog_prefix": "syslog_prefix",
    "ssl_context": "ssl_context",
    "statsd_host": "statsd_host",
    "statsd_prefix": "statsd_prefix",
    "dogstatsd_tags": "dogstatsd_tags",
    "enable_backlog_metric": "enable_backlog_metric",
    "timeout": "timeout",
    "umask": "umask",
    "user": "user",
    "uwsgi_allow_ips": "uwsgi_allow_ips",
    "websocket_max_message_size": "websocket_max_message_size",
    "when_ready": "when_ready",
    "worker_abort": "worker_abort",
    "worker_connections": "worker_connections",
    "worker_exit": "worker_exit",
    "worker_int": "worker_int",
    "workers": "workers",
}
# gunicorn's name for the application: the MODULE:APP argument, which wins over it.
GUNICORN_APP = "wsgi_app"
# gunicorn's name -> why it means nothing to greenserve, in a few words (said in the one warning
# that lists the ones a config file sets):
_ASGI = "WSGI only"
_DIRTY = "no dirty arbiters"
_STRICT = "the parser is strict"
_LOGGING = "the logs through logging: --log-config"
GUNICORN_UNUSED = {
    "config": "the config file itself: -c",
    "worker_class": "greenserve is the gevent worker",
    "threads": "greenlets, not threads: worker_connections",
    "reload_engine": "--reload uses watchfiles (inotify on Linux) when installed, else polls",
    "spew": "use a debugger",
    "check_config": "greenserve check",
    "print_config": "--print-config",
    "worker_tmp_dir": "heartbeats go through a pipe",
    "initgroups": "supplementary groups are cleared",
    "tmp_upload_dir": "unused by gunicorn too",
    "secure_scheme_headers": "fixed: X-Forwarded-Proto, -Ssl, -Protocol (proxy_headers)",
    "disable_redirect_access_to_syslog": "the access log reaches syslog through --log-config",
    "logger_class": _LOGGING,
    "enable_stdio_inheritance": "standard streams are kept, or /dev/null with --daemon",
    "default_proc_name": "gunicorn sets it itself: proc_name defaults to MODULE:APP",
    "pythonpath": "use PYTHONPATH",
    "paste": "pserve with egg:greenserve",
    "raw_paste_global_conf": "pserve with egg:greenserve",
    "ssl_version": "TLS 1.2 or later",
    "suppress_ragged_eofs": "always",
    "do_handshake_on_connect": "the handshake runs in the connection's greenlet",
    "permit_obsolete_folding": _STRICT,
    "strip_header_spaces": _STRICT,
    "permit_unconventional_http_method": _STRICT,
    "permit_unconventional_http_version": _STRICT,
    "casefold_http_method": _STRICT,
    "forwarder_headers": "SCRIPT_NAME is root_path",
    "header_map": "header names with _ are dropped",
    "asgi_loop": _ASGI,
    "asgi_lifespan": _ASGI,
    "asgi_disconnect_grace_period": _ASGI,
    "http_parser": "greenserve's own parser",
    "dirty_apps": _DIRTY,
    "dirty_workers": _DIRTY,
    "dirty_timeout": _DIRTY,
    "dirty_threads": _DIRTY,
    "dirty_graceful_timeout": _DIRTY,
    "on_dirty_starting": _DIRTY,
    "dirty_post_fork": _DIRTY,
    "dirty_worker_init": _DIRTY,
    "dirty_worker_exit": _DIRTY,
}


def setting_for_name(name):
    """The setting a config file's ``name`` sets: ours by name, else gunicorn's spelling of one; or None."""
    if name in SETTINGS_BY_NAME:
        return SETTINGS_BY_NAME[name]
    alias = GUNICORN_ALIASES.get(name)
    return SETTINGS_BY_NAME[alias] if alias is not None else None



def _long_flag(name):
    """The flag a setting's error names: its long one, as typed (--name for proc_name)."""
    return cli_flags(SETTINGS_BY_NAME[name])[-1]


DEFAULT = "default"
FLAG = "flag"


class ConfigError(SettingError):
    """The configuration cannot be loaded; the message is one line that names the place."""


class Loaded:
    """One load's result: the ``Config``, where each value came from (name -> text), the
    warnings to say at start (one line each: gunicorn settings that mean nothing here, names that
    are no setting), the ``wsgi_app`` the file names (or None), and the names the file set that
    gunicorn knows but greenserve does not use, with their values (``{name: value}``: a hook's
    ``server.cfg`` reads them as gunicorn's Config would)."""

    def __init__(self, config, sources, warnings, app, typos=(), gunicorn_values=None):
        self.config = config
        self.sources = sources
        self.warnings = warnings
        self.app = app
        self.typos = list(typos)  # ignored names close to a setting: what `greenserve check` refuses
        self.gunicorn_values = gunicorn_values or {}


# Settings naming files that the command makes absolute at start (entry.startup.paths).
FILE_SETTINGS = ("certfile", "keyfile", "ca_certs")


class Loader:
    """The inputs of a run's settings, loaded (and, on SIGHUP, loaded again) in precedence order.

    ``path``: the config file, or None. ``flags``: ``{name: value}`` given on the command line or
    as keywords, applied last (said as ``flag_source``; their errors as ``--name: reason`` when
    ``flag_prefix`` is ``"--"``). ``cmd_args``: ``{name: value}`` from GREENSERVE_CMD_ARGS.
    ``environ``: where PORT and WEB_CONCURRENCY are looked up (None: not at all).
    """

    def __init__(self, path=None, flags=None, cmd_args=None, environ=None, flag_source=FLAG, flag_prefix="--"):
        # Absolute now: --chdir moves the master before the file is read again on SIGHUP.
        self.path = os.path.abspath(path) if path else None
        self.launched_in = os.getcwd()  # what relative file settings are relative to (entry.startup.paths)
        self.shown_path = path
        self.flags = dict(flags or {})
        self.cmd_args = dict(cmd_args or {})
        self.environ = environ
        self.flag_source = flag_source
        self.flag_prefix = flag_prefix
        self.first = None  # the first load's Config, as loaded: what a reload compares with
        self.gunicorn_values = {}

    def load(self):
        """Every layer applied; a ConfigError (one line) for the first bad value or name."""
        config = Config()
        sources = {setting.name: DEFAULT for setting in SETTINGS}

        def apply(name, value, source, describe):
            try:
                config.update(**{name: value})
            except SettingError as exc:
                raise ConfigError("%s: %s" % (describe, exc.reason or exc)) from None
            sources[name] = source

        environ = self.environ if self.environ is not None else {}
        for name, variable, value in _environment_defaults(environ):
            apply(name, value, "env " + variable, "%s=%r" % (variable, environ[variable]))
        warnings, typos, app, gunicorn_values = [], [], None, {}
        if self.path is not None:
            found = read_file(self.path, self.shown_path)
            for name, value, line, written in found.settings:
                where = "%s:%d" % (self.shown_path, line)
                spelled = written if written == name else "%s (%s)" % (written, name)
                value, note = _as_gunicorn_reads(name, value)
                if note:
                    warnings.append("%s: %s %s" % (where, written, note))
                apply(name, value, "file " + where, "%s: %s" % (where, spelled))
            warnings.extend(found.notes)
            app, gunicorn_values = found.app, found.unused
            if found.unused:
                warnings.append("%s: gunicorn settings that mean nothing to greenserve, ignored: %s" % (
                    self.shown_path, ", ".join("%s (%s)" % (name, GUNICORN_UNUSED[name]) for name in found.unused)
                ))
            if found.ignored:
                warnings.append(_ignored_text(self.shown_path, found.ignored))
                typos = [name for _, name, close in found.ignored if close]
        for name, value in self.cmd_args.items():
            apply(name, value, "env " + CMD_ARGS_VARIABLE, "%s: %s" % (CMD_ARGS_VARIABLE, _long_flag(name)))
        for name, value in self.flags.items():
            apply(name, value, self.flag_source, _long_flag(name) if self.flag_prefix == "--" else self.flag_prefix + name)
        note = _reuse_port_as_gunicorn_reads(config, sources)
        if note:
            warnings.append(note)
        self._check_as_gunicorn(config, sources)
        if self.first is None:
            self.first = config.replace(**self._absolute(config))
        self.gunicorn_values = gunicorn_values  # the last load's: what hooks' cfg reads (gunicorn_cfg.hook_view)
        return Loaded(config, sources, warnings, app, typos, gunicorn_values)

    def _check_as_gunicorn(self, config, sources):
        """What gunicorn's validators refuse as the configuration loads (a directory to change
        to, an account), refused here too: a typo is one line before anything runs."""
        if config.chdir is not None and not os.path.isdir(os.path.join(self.launched_in, config.chdir)):
            raise ConfigError("%s: can't chdir to %r: no such directory" % (self._where(sources, "chdir"), config.chdir))
        if config.user is not None or config.group is not None:
            from greenserve.process import daemon

            try:
                daemon.resolve_ids(config.user, config.group)
            except ValueError as exc:
                name = "user" if config.user is not None and "user" in str(exc) else "group"
                raise ConfigError("%s: %s" % (self._where(sources, name), exc)) from None

    def _where(self, sources, name):
        """Where ``name``'s value came from, as ``_where`` says it; a keyword as it was typed (``user``)."""
        if sources[name] == self.flag_source and self.flag_prefix != "--":
            return self.flag_prefix + name
        return _where(sources[name], name)

    def _absolute(self, config):
        """The file settings made absolute as at start: relative to where the command was typed,
        not to --chdir's directory or a daemon's /, where the master is when it reads again."""
        return {
            name: os.path.join(self.launched_in, getattr(config, name))
            for name in FILE_SETTINGS if getattr(config, name) is not None
        }

    def reload(self, running):
        """On SIGHUP: the settings loaded again, as ``(config, warnings)``.

        What the master read once at start (the ``restart`` rows: sockets, accounts, logs)
        keeps its running value in the new config; a change to it is named in one warning as
        needing a restart. Raises ConfigError (one line) when the file no longer loads or the
        new settings do not go together.
        """
        from greenserve.process import patching

        loaded = self.load()
        fresh = loaded.config
        fresh.update(**self._absolute(fresh))
        if fresh.static:
            # From --chdir's directory, as at start (startup's directory step); a directory gone
            # cancels the reload (a SettingsError, a ValueError), and the workers serve on.
            from greenserve.static import check_directories

            base = os.path.join(self.launched_in, fresh.chdir) if fresh.chdir else self.launched_in
            fresh.update(static=check_directories(fresh.static, base))
        fresh.check()
        patching.spec_of(fresh)  # a module gevent cannot patch: ValueError now, as at start
        kept = {setting.name: getattr(running, setting.name) for setting in SETTINGS if setting.restart}
        changed = [
            setting.name for setting in SETTINGS
            if setting.restart and getattr(fresh, setting.name) != getattr(self.first, setting.name)
        ]
        warnings = list(loaded.warnings)
        if changed:
            warnings.append(
                "SIGHUP: %s changed, but the master applies %s only at start: restart greenserve for %s"
                % (", ".join(changed), "it" if len(changed) == 1 else "them", "it" if len(changed) == 1 else "them")
            )
        return fresh.replace(**kept), warnings


def _where(source, name):
    """Where a setting's value came from, as a message names it: ``conf.py:3: chdir``,
    ``--chdir``, ``env GREENSERVE_CMD_ARGS: --chdir``."""
    flag = _long_flag(name)
    if source.startswith("file "):
        return "%s: %s" % (source[5:], name)
    return flag if source in (FLAG, DEFAULT) else "%s: %s" % (source, flag)


_LOG_LEVELS = ("debug", "info", "warning", "error", "critical")


def _as_gunicorn_reads(name, value):
    """A file's value as gunicorn means it, where greenserve's table would refuse it: ``(value,
    note)``, the note (or None) saying what was read. gunicorn takes any text as loglevel and
    logs at info for a word it does not know (``loglevel = "warn"``)."""
    if name == "log_level" and isinstance(value, str) and value.strip().lower() not in _LOG_LEVELS:
        return "info", ("= %r is no level gunicorn knows: it logs at info, and so does greenserve; "
                        "write one of %s" % (value, ", ".join(_LOG_LEVELS)))
    return value, None


def _reuse_port_as_gunicorn_reads(config, sources):
    """A file's ``reuse_port = True`` beside a ``unix:`` (or ``fd://``) bind, read as gunicorn
    reads it: off, and the warning to say (or None). gunicorn sets SO_REUSEPORT on its TCP
    sockets only and ignores the option on the others; greenserve's --reuse-port gives each
    worker a TCP socket of its own, which a unix socket cannot be, so the file's option is
    dropped and every bind is the master's socket that the workers share, as in gunicorn. Typed
    as the flag (greenserve's own ask), the combination stays an error (Config.check)."""
    if not config.reuse_port or not sources["reuse_port"].startswith("file "):
        return None
    others = [text for text, spec in zip(config.bind, config.bind_specs()) if spec[0] != "tcp"]
    if not others:
        return None
    config.update(reuse_port=False)
    return ("%s = True with %s: ignored, as gunicorn ignores it on a socket that is not TCP; the workers "
            "share the master's sockets. Leave reuse_port out (or bind HOST:PORT addresses only)"
            % (_where(sources["reuse_port"], "reuse_port"), ", ".join(others)))


def _environment_defaults(environ):
    """``(setting, variable, value)`` for each variable gunicorn reads as a setting's default."""
    # gunicorn: "If the PORT environment variable is defined, the default is ['0.0.0.0:$PORT']".
    if "PORT" in environ:
        yield "bind", "PORT", "0.0.0.0:%s" % environ["PORT"]
    if "WEB_CONCURRENCY" in environ:
        yield "workers", "WEB_CONCURRENCY", environ["WEB_CONCURRENCY"]
    # gunicorn's ForwardedAllowIPS default is os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1").
    if "FORWARDED_ALLOW_IPS" in environ:
        yield "forwarded_allow_ips", "FORWARDED_ALLOW_IPS", environ["FORWARDED_ALLOW_IPS"]
    # gunicorn's Config.sendfile: with no sendfile setting, SENDFILE in y, 1, yes, true turns it
    # on and any other value off.
    if "SENDFILE" in environ:
        yield "sendfile", "SENDFILE", environ["SENDFILE"].strip().lower() in ("y", "1", "yes", "true")


class FileSettings:
    """What a config file says: ``settings``, ``(name, value, line, name as written)`` for each
    setting it sets, in the file's order; ``unused``: ``{gunicorn name: value}`` for the gunicorn
    settings it sets that mean nothing here; ``ignored``: ``(line, name, close setting or None)``
    for each name that is no setting, in the file's order; ``app``: its ``wsgi_app``, or None."""

    def __init__(self, settings, unused, ignored, app, notes=()):
        self.settings = settings
        self.unused = unused
        self.ignored = ignored
        self.app = app
        self.notes = list(notes)  # warnings about how the file is read


def read_file(path, shown_path=None):
    """Execute a config file; return its ``FileSettings``.

    Raises ConfigError, one line naming the file and line, for a file that cannot be read or
    run, a setting set twice under two names, or a value that is not a ``wsgi_app``.
    """
    import ast  # with -c only: not in the RSS of a master started without a config file

    shown = shown_path or path
    try:
        with open(path, "rb") as config_file:
            source = config_file.read()
    except OSError as exc:
        raise ConfigError("-c %s: %s" % (shown, exc.strerror)) from None
    try:
        code = compile(source, path, "exec")
        tree = ast.parse(source, path)
    except SyntaxError as exc:
        raise ConfigError("%s:%s: syntax error: %s" % (shown, exc.lineno, exc.msg)) from None
    except ValueError as exc:  # null bytes
        raise ConfigError("%s: %s" % (shown, exc)) from None
    # As gunicorn does: a module named __config__ in sys.modules (dataclasses and pickle look a
    # class's module up there, also when a hook runs later), with __file__ for paths relative
    # to the file.
    module = types.ModuleType("__config__")
    module.__file__ = path
    sys.modules["__config__"] = module
    try:
        if _bound_once_each(tree):
            exec(code, module.__dict__)
            ran = {}  # the text's one binding of each name is the one that ran
        else:
            ran = _run_recording_stores(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        sys.modules.pop("__config__", None)
        raise ConfigError("%s:%s: %s" % (shown, _failing_line(exc, path), _exception_text(exc))) from None
    lines, imported, star_line = _bindings(tree)
    settings, unused, ignored, notes = [], {}, [], []
    by_setting = {}
    app = None
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        line = ran.get(name) or lines.get(name, star_line or 1)
        setting = setting_for_name(name)
        if setting is not None:
            if setting.name in by_setting and {name, by_setting[setting.name][0]} == _TRUST_LISTS:
                note = _merge_trust_lists(settings, setting.name, name, value, line, shown)
                if note:
                    notes.append(note)
                continue
            if setting.name in by_setting:
                other, other_line = by_setting[setting.name]
                raise ConfigError(
                    "%s:%d: %s and %s (line %d) are the same setting, %s: keep one"
                    % (shown, max(line, other_line), name, other, min(line, other_line), setting.name)
                )
            by_setting[setting.name] = (name, line)
            settings.append((setting.name, value, line, name))
        elif name == GUNICORN_APP:
            if not isinstance(value, str):
                raise ConfigError("%s:%d: %s: expected 'module:app', got %r" % (shown, line, name, value))
            app = value
        elif name in GUNICORN_UNUSED:
            unused[name] = value
        elif name in imported or (name not in lines and _defined_elsewhere(value)):
            continue  # imported into the file (a star import brings no line of its own)
        else:
            ignored.append((line, name, _close_setting(name)))
    settings.sort(key=lambda item: item[2])
    ignored.sort()
    own = _own_names_gunicorn_ignores(settings, unused, shown)
    return FileSettings(settings, unused, ignored, app, notes + ([own] if own else []))


# gunicorn 27 keeps two lists of trusted peers: forwarded_allow_ips for the forwarding headers,
# proxy_allow_ips for the PROXY protocol. greenserve trusts one list of front ends for both.
_TRUST_LISTS = {"forwarded_allow_ips", "proxy_allow_ips"}


def _addresses(value):
    items = value.split(",") if isinstance(value, str) else list(value)
    return [str(item).strip() for item in items if str(item).strip()]


def _merge_trust_lists(settings, setting_name, name, value, line, shown):
    """A file that sets both of gunicorn's lists: one list of both, and a note of what that means."""
    index = next(i for i, item in enumerate(settings) if item[0] == setting_name)
    _, first_value, first_line, first_name = settings[index]
    merged = _addresses(first_value) + [item for item in _addresses(value) if item not in _addresses(first_value)]
    settings[index] = (setting_name, merged, min(first_line, line), first_name)
    if merged == _addresses(first_value) == _addresses(value):
        return None
    return ("%s:%d: %s and %s (line %d) are one list in greenserve, trusted for the forwarding headers and the "
            "PROXY protocol both: %s" % (shown, line, name, first_name, first_line, ",".join(merged)))


def _own_names_gunicorn_ignores(settings, unused, shown):
    """In a file written for gunicorn, greenserve's own names of settings that gunicorn does not
    know (``preload``, ``pid``): gunicorn ignores them, greenserve applies them; one note."""
    written = {item[3] for item in settings}
    for_gunicorn = bool(unused) or any(
        name in GUNICORN_ALIASES and name not in SETTINGS_BY_NAME for name in written
    ) or os.path.basename(shown).startswith("gunicorn")
    if not for_gunicorn:
        return None
    theirs = {ours: name for name, ours in GUNICORN_ALIASES.items() if name != ours}
    own = [
        "%s (line %d%s)" % (written_name, line, "; gunicorn's name: %s" % theirs[name] if name in theirs else "")
        for name, _, line, written_name in settings
        if written_name == name and name not in GUNICORN_ALIASES
    ]
    if not own:
        return None
    return "%s: greenserve's own names, which gunicorn ignores and greenserve applies: %s" % (shown, ", ".join(own))


# Names gunicorn's releases before 19 (or its docs' readers) wrote, and what they are now:
# closer than a string distance can tell (``debug`` was --spew and --reload's ancestor).
_OLD_NAMES = {
    "debug": "reload",
    "access_logfile": "accesslog",
    "error_logfile": "errorlog",
    "logfile": "errorlog",
    "keep_alive": "keepalive",
    "worker_timeout": "timeout",
}


def _close_setting(name):
    """The setting a name that is no setting was probably meant to be, or None."""
    if name in _OLD_NAMES:
        return _OLD_NAMES[name]
    import difflib  # only for a name that is no setting: not in the master's RSS otherwise

    known = sorted(set(SETTINGS_BY_NAME) | set(GUNICORN_ALIASES) | set(GUNICORN_UNUSED))
    close = difflib.get_close_matches(name.lower(), known, n=1, cutoff=0.8)
    return close[0] if close else None


def _ignored_text(shown, ignored):
    """The one warning for a file's names that are no setting: the likely typos first, each with
    its line and what it is close to, then the file's own names."""
    typos = ["%s (line %d: did you mean %s?)" % (name, line, close) for line, name, close in ignored if close]
    own = [name for _, name, close in ignored if not close]
    parts = []
    if typos:
        parts.append(", ".join(typos))
    if own:
        parts.append("the file's own names: %s" % ", ".join(own))
    return "%s: names that are no setting, ignored as gunicorn ignores them: %s" % (shown, "; ".join(parts))


def _defined_elsewhere(value):
    return isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", None) != "__config__"


def _bindings(tree):
    """The module-level names the file binds: ``({name: line of its last binding}, names bound
    only by import statements, line of a star import or None)``. Function and class bodies bind
    nothing at module level, so they are not entered."""
    import ast

    lines, imported, assigned = {}, set(), set()
    star_line = None

    def visit(node):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            nonlocal star_line
            for alias in node.names:
                if alias.name == "*":
                    star_line = star_line or node.lineno
                    continue
                name = alias.asname or alias.name.split(".")[0]
                lines[name] = node.lineno
                imported.add(name)
            return
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            lines[node.name] = node.lineno
            assigned.add(node.name)
            for decorator in node.decorator_list:
                visit(decorator)
            return
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            return
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            lines[node.id] = node.lineno
            assigned.add(node.id)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return lines, imported - assigned, star_line


_SIMPLE_STATEMENTS = ("Assign", "AnnAssign", "AugAssign", "Import", "ImportFrom", "FunctionDef",
                      "AsyncFunctionDef", "ClassDef", "Expr", "Pass")


def _bound_once_each(tree):
    """Whether the text alone tells which line bound each name: every module-level statement is
    a simple one (no ``if``, loop, ``try`` or ``with``: each runs, or the file fails) and no name
    is bound twice. Most files are so, and run without the tracing of ``_run_recording_stores``."""
    import ast

    seen = set()
    for statement in tree.body:
        if type(statement).__name__ not in _SIMPLE_STATEMENTS:
            return False
        if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [statement.name]
        elif isinstance(statement, (ast.Import, ast.ImportFrom)):
            names = [alias.asname or alias.name.split(".")[0] for alias in statement.names]
        else:
            names = [node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)]
        for name in names:
            if name in seen:
                return False
            seen.add(name)
    return True


def _run_recording_stores(code, namespace):
    """``exec(code, namespace)``, and ``{name: line}``: for each module-level name, the line of
    the assignment that bound it last *as the file ran*.

    What the file's text says cannot tell: ``workers = 3`` on line 7 and ``workers = 5`` on line
    45 in a branch that did not run leave 3, set on line 7; a loop or an ``if``/``else`` is the
    same question. So the execution is watched, at the instruction that binds the name: with
    ``sys.settrace``, opcode events in the file's module frame alone (every other frame, the
    modules it imports, is left untraced), each STORE_NAME noted with its line before it runs.
    A name bound some other way (``globals()[...]`` in a function, a star import) is not seen
    here; the caller falls back to the text's last binding. The cost: a trace call per
    instruction of the file's own and per function called while it runs (what it imports
    included: measured ~0.1 s more for a file importing Django), once at start and at each
    SIGHUP, and only for a file whose text cannot tell (``_bound_once_each``); a tracer already
    set (a debugger, coverage) is put back after."""
    import dis

    instructions = [instruction for instruction in dis.get_instructions(code) if instruction.opname == "STORE_NAME"]
    stores = {instruction.offset: instruction.argval for instruction in instructions}
    if hasattr(sys, "monitoring"):
        # Python 3.12+: settrace's opcode events never reach an exec'd module frame there (seen
        # on 3.12.1 and 3.13.0: nothing recorded, every line the text's last); PEP 669's
        # per-code events do, and cost nothing outside this code object.
        lines = {instruction.offset: instruction.positions.lineno for instruction in instructions}
        return _run_monitoring_stores(code, namespace, stores, lines)
    ran = {}

    def in_file(frame, event, arg):
        if event == "opcode":
            name = stores.get(frame.f_lasti)
            if name is not None:
                ran[name] = frame.f_lineno
        return in_file

    def on_call(frame, event, arg):
        if frame.f_code is not code:
            return None
        frame.f_trace_opcodes = True
        return in_file

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        exec(code, namespace)
    finally:
        sys.settrace(previous)
    return ran


def _run_monitoring_stores(code, namespace, stores, lines):
    """``_run_recording_stores`` with sys.monitoring (Python 3.12+): an INSTRUCTION event on
    ``code`` alone, each STORE_NAME noted with its line. A tool id taken by others (a debugger,
    a profiler, coverage) leaves the file run unwatched: the caller falls back to the text."""
    monitoring = sys.monitoring
    for tool in range(6):  # the ids sys.monitoring gives tools other than its named ones too
        try:
            monitoring.use_tool_id(tool, "greenserve config file")
        except ValueError:
            continue
        break
    else:
        exec(code, namespace)
        return {}
    ran = {}

    def on_instruction(instruction_code, offset):
        name = stores.get(offset)
        if name is not None and instruction_code is code:
            ran[name] = lines[offset]
        return None

    monitoring.register_callback(tool, monitoring.events.INSTRUCTION, on_instruction)
    monitoring.set_local_events(tool, code, monitoring.events.INSTRUCTION)
    try:
        exec(code, namespace)
    finally:
        monitoring.set_local_events(tool, code, 0)
        monitoring.register_callback(tool, monitoring.events.INSTRUCTION, None)
        monitoring.free_tool_id(tool)
    return ran


def _failing_line(exc, path):
    """The line of the config file the exception came through last (it may have been raised in
    a module the file imported)."""
    line = "?"
    frame = exc.__traceback__
    while frame is not None:
        if frame.tb_frame.f_code.co_filename == path:
            line = frame.tb_lineno
        frame = frame.tb_next
    return line


def _exception_text(exc):
    if isinstance(exc, SystemExit):
        return "the file called sys.exit(%r)" % (exc.code,)
    text = str(exc).splitlines()[0] if str(exc) else ""
    return "%s: %s" % (type(exc).__name__, text) if text else type(exc).__name__


def render(loaded):
    """``--print-config``: one line per setting, ``name = value  # where it came from``, aligned.

    Each line is Python (the value is its repr), so the output is itself a config file that
    ``-c`` loads; a program reads it by splitting each line at the first `` = `` and at the last
    ``  # ``. A function (a server hook) prints as gunicorn prints it, ``<name()>``, on a line
    commented out (``# post_fork = <post_fork()>  # file conf.py:12``): a function cannot be
    written as a value, and its repr would hold an address that changes from run to run.
    """
    config, sources = loaded.config, loaded.sources
    names = [setting.name for setting in SETTINGS]
    values = {name: _value_text(getattr(config, name)) for name in names}
    name_width = max(len(name) for name in names)
    value_width = max([len(value) for value in values.values() if len(value) <= 32] or [0])
    out = ["# NAME = VALUE  # where it came from: %s, file FILE:LINE, env VARIABLE or %s" % (DEFAULT, FLAG)]
    for name in names:
        line = "%-*s = %-*s  # %s" % (name_width, name, value_width, values[name], sources[name])
        out.append("# " + line if values[name].startswith("<") else line)
    return "\n".join(out) + "\n"


def _value_text(value):
    if callable(value) and not isinstance(value, type):
        return "<%s()>" % getattr(value, "__qualname__", type(value).__name__)
    return repr(value)


def settings_page():
    """docs/settings.md (``python -m greenserve.entry.configfile``): the table's reference, then the
    config file's and the environment's part. (Here, not in settings.py: the page needs both, and
    settings.py must import nothing of the entry floor above it.)"""
    return render_markdown() + "\n" + "\n".join(_render_config_file())


def _render_config_file():
    """The config file's and the environment's part of docs/settings.md, from the same tables."""
    out = [
        "## The config file and the environment",
        "",
        "`greenserve -c FILE` (and `greenserve.run(..., config=FILE)`) executes FILE as Python, as gunicorn "
        "executes its `gunicorn.conf.py`, and each module-level name sets the setting of that name, "
        "for example `workers = 4` or `bind = [\"0.0.0.0:8000\", \"unix:/run/app.sock\"]`. Values are "
        "Python values, checked as the flags' are. Names starting with `_`, modules (`import os`) "
        "and what the file imports (`from os import environ`) are not settings. gunicorn's "
        "spellings are accepted (the table below), so a `gunicorn.conf.py` loads as it is. Without "
        "`-c`, the command reads `./gunicorn.conf.py` when the directory it is typed in holds one, "
        "as gunicorn does, and one INFO line at start says so. A "
        "name that is neither greenserve's nor gunicorn's stops the start with one line naming "
        "the file and line (`greenserve: error: conf.py:3: unknown setting 'worker' (did you mean "
        "workers?)`); so does a file that raises or does not parse, and a bad value. The gunicorn "
        "settings that mean nothing here are listed in one warning, and ignored. The file runs in "
        "the master before gevent patches anything, like gunicorn's: let it import what it needs "
        "to compute settings (`os`, `multiprocessing`), not the application.",
        "",
        "Where each setting comes from, each overriding the ones before (gunicorn's order):",
        "",
        "1. the defaults above;",
        "2. `PORT` and `WEB_CONCURRENCY` in the environment, when set: the defaults of `bind` "
        "(`0.0.0.0:$PORT`) and `workers`, as in gunicorn (so a config file's `bind` wins over "
        "`PORT`);",
        "3. the config file (`-c FILE`, on the command line or in `%s`);" % CMD_ARGS_VARIABLE,
        "4. `%s`: flags, split as a shell would (gunicorn's `GUNICORN_CMD_ARGS`), e.g. "
        "`%s=\"--workers 4 --timeout 60\"`;" % (CMD_ARGS_VARIABLE, CMD_ARGS_VARIABLE),
        "5. the command line's flags (`greenserve.run()`'s keywords).",
        "",
        "`greenserve --print-config [options] [MODULE:APP]` prints every setting, its value and "
        "where it came from, and exits 0 without binding or importing the application. Each line "
        "is `name = value  # source`, aligned, with the value as Python writes it and the source "
        "one of `default`, `file FILE:LINE`, `env PORT`, `env WEB_CONCURRENCY`, `env %s` and "
        "`flag`; so the output is itself a config file `-c` loads. A server hook set to a function "
        "prints as gunicorn prints it, `<post_fork()>`, on a line commented out (a function cannot "
        "be written as a value)." % CMD_ARGS_VARIABLE,
        "",
        "On `SIGHUP` the master reads the file again (the flags and the environment do not change "
        "under it), and the new workers run with the new settings: the worker count, timeouts, "
        "limits, patching, everything a worker reads. What the master read once at start keeps its "
        "value, and a change to it is named in one warning as needing a restart: %s. A file that "
        "no longer loads is one ERROR line, and nothing is reloaded: the running workers keep "
        "serving (as nginx does with a broken configuration; a new generation of code with settings "
        "nobody deployed together would be worse), and one more `SIGHUP` once the file is fixed "
        "reloads both." % ", ".join("`%s`" % setting.name for setting in SETTINGS if setting.restart),
        "",
        "### gunicorn's names",
        "",
        "| gunicorn | greenserve |",
        "|---|---|",
    ]
    for name, ours in sorted(GUNICORN_ALIASES.items()):
        out.append("| `%s` | %s |" % (name, "the same" if name == ours else "`%s`" % ours))
    out.append("| `%s` | the application, when no `MODULE:APP` argument is given |" % GUNICORN_APP)
    out.extend(["", "gunicorn settings with no meaning in greenserve, and why:", ""])
    reasons = {}
    for name, reason in GUNICORN_UNUSED.items():
        reasons.setdefault(reason, []).append(name)
    for reason, names in reasons.items():
        out.append("- %s: %s." % (", ".join("`%s`" % name for name in names), reason))
    out.append("")
    return out


if __name__ == "__main__":
    import sys

    sys.stdout.write(settings_page())

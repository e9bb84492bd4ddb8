"""Where the settings come from: the table's defaults, PORT and WEB_CONCURRENCY, the config file
(``-c``), GREENSERVE_CMD_ARGS and the flags -- in that order, each overriding the ones before.

The order is gunicorn's, so that a gunicorn deployment moves over unchanged: there PORT and
WEB_CONCURRENCY are the *defaults* of bind and workers (a config file's ``bind`` wins over PORT),
GUNICORN_CMD_ARGS overrides the file, and the command line overrides everything.

The config file is Python, executed as gunicorn executes its ``gunicorn.conf.py``; its
module-level names set settings, by our names or gunicorn's (settings.GUNICORN_ALIASES). Unlike
gunicorn, which ignores names it does not know (so ``workers = 4`` misspelled ``worker = 4``
silently does nothing), an unknown name is refused with its file and line. What is not a
setting by construction is skipped: names starting with ``_``, modules (``import os``) and what
the file imported (``from os import environ``).

A ``Loader`` holds the inputs (the file's path, the flags, the environment) and loads them
again on SIGHUP (``reload()``); ``render()`` is ``--print-config``: every setting, its value
and where it came from.
"""

import os
import sys
import types

from greenserve.settings import (
    GUNICORN_ALIASES,
    GUNICORN_APP,
    GUNICORN_UNUSED,
    SETTINGS,
    SETTINGS_BY_NAME,
    Config,
    SettingError,
    cli_flags,
    setting_for_name,
)

CMD_ARGS_VARIABLE = "GREENSERVE_CMD_ARGS"


def _long_flag(name):
    """The flag a setting's error names: its long one, as typed (--name for proc_name)."""
    return cli_flags(SETTINGS_BY_NAME[name])[-1]
DEFAULT = "default"
FLAG = "flag"


class ConfigError(SettingError):
    """The configuration cannot be loaded; the message is one line that names the place."""


class Loaded:
    """One load's result: the ``Config``, where each value came from (name -> text), the
    warning about gunicorn settings that mean nothing here (or None), and the ``wsgi_app`` the
    file names (or None)."""

    def __init__(self, config, sources, unused_warning, app):
        self.config = config
        self.sources = sources
        self.unused_warning = unused_warning
        self.app = app


# Settings naming files that the command makes absolute at start (entry.cli._prepare).
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
        self.launched_in = os.getcwd()  # what relative file settings are relative to (entry.cli._prepare)
        self.shown_path = path
        self.flags = dict(flags or {})
        self.cmd_args = dict(cmd_args or {})
        self.environ = environ
        self.flag_source = flag_source
        self.flag_prefix = flag_prefix
        self.first = None  # the first load's Config, as loaded: what a reload compares with

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
        # gunicorn: "If the PORT environment variable is defined, the default is ['0.0.0.0:$PORT']".
        if "PORT" in environ:
            apply("bind", "0.0.0.0:%s" % environ["PORT"], "env PORT", "PORT=%r" % environ["PORT"])
        if "WEB_CONCURRENCY" in environ:
            value = environ["WEB_CONCURRENCY"]
            apply("workers", value, "env WEB_CONCURRENCY", "WEB_CONCURRENCY=%r" % value)
        unused_warning = app = None
        if self.path is not None:
            settings, unused, app = read_file(self.path, self.shown_path)
            for name, value, line, written in settings:
                where = "%s:%d" % (self.shown_path, line)
                spelled = written if written == name else "%s (%s)" % (written, name)
                apply(name, value, "file " + where, "%s: %s" % (where, spelled))
            if unused:
                unused_warning = "%s: gunicorn settings that mean nothing to greenserve, ignored: %s" % (
                    self.shown_path, ", ".join("%s (%s)" % (name, GUNICORN_UNUSED[name]) for name in unused)
                )
        for name, value in self.cmd_args.items():
            apply(name, value, "env " + CMD_ARGS_VARIABLE, "%s: %s" % (CMD_ARGS_VARIABLE, _long_flag(name)))
        for name, value in self.flags.items():
            apply(name, value, self.flag_source, _long_flag(name) if self.flag_prefix == "--" else self.flag_prefix + name)
        if self.first is None:
            self.first = config.replace(**self._absolute(config))
        return Loaded(config, sources, unused_warning, app)

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
        fresh.check()
        patching.spec_of(fresh)  # a module gevent cannot patch: ValueError now, as at start
        kept = {setting.name: getattr(running, setting.name) for setting in SETTINGS if setting.restart}
        changed = [
            setting.name for setting in SETTINGS
            if setting.restart and getattr(fresh, setting.name) != getattr(self.first, setting.name)
        ]
        warnings = [loaded.unused_warning] if loaded.unused_warning else []
        if changed:
            warnings.append(
                "SIGHUP: %s changed, but the master applies %s only at start: restart greenserve for %s"
                % (", ".join(changed), "it" if len(changed) == 1 else "them", "it" if len(changed) == 1 else "them")
            )
        return fresh.replace(**kept), warnings


def read_file(path, shown_path=None):
    """Execute a config file; return ``(settings, unused, app)``.

    ``settings``: ``(name, value, line, name as written)`` for each setting it sets, in the
    file's order; ``unused``: the gunicorn names it sets that mean nothing here; ``app``: its
    ``wsgi_app``, or None. Raises ConfigError, one line naming the file and line, for a file
    that cannot be read or run, or an unknown name.
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
        exec(code, module.__dict__)
    except (Exception, SystemExit) as exc:
        sys.modules.pop("__config__", None)
        raise ConfigError("%s:%s: %s" % (shown, _failing_line(exc, path), _exception_text(exc))) from None
    lines, imported, star_line = _bindings(tree)
    settings, unused, unknown = [], [], []
    by_setting = {}
    app = None
    for name, value in vars(module).items():
        if name.startswith("_") or isinstance(value, types.ModuleType):
            continue
        line = lines.get(name, star_line or 1)
        setting = setting_for_name(name)
        if setting is not None:
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
            unused.append(name)
        elif name in imported or (name not in lines and _defined_elsewhere(value)):
            continue  # imported into the file (a star import brings no line of its own)
        else:
            unknown.append((line, name, value))
    if unknown:
        line, name, value = min(unknown, key=lambda item: item[0])
        raise ConfigError("%s:%d: %s" % (shown, line, _unknown_text(name, value)))
    settings.sort(key=lambda item: item[2])
    return settings, unused, app


def _unknown_text(name, value):
    known = sorted(set(SETTINGS_BY_NAME) | set(GUNICORN_ALIASES) | set(GUNICORN_UNUSED) | {GUNICORN_APP})
    import difflib  # a mistake's path: not in the master's RSS

    close = difflib.get_close_matches(name, known, n=3, cutoff=0.7)
    text = "unknown setting %r" % name
    if close:
        return text + " (did you mean %s?)" % " or ".join(close)
    if isinstance(value, (types.FunctionType, type)) or name.isupper():
        # A function or a CONSTANT is most likely the file's own helper, not a misspelt setting.
        return text + " (a helper of the file's own? start its name with _; settings: docs/settings.md)"
    return text + " (see docs/settings.md)"


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

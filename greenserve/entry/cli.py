"""The ``greenserve`` command: flags from the settings table, friendly errors, patch then import then serve.

Order matters with gevent: this module imports nothing of gevent, ssl or the application at
import time. ``main()`` parses the command line, applies gevent's monkey-patching (unless
``--no-monkey-patch``), and only then imports the server and the application, so that the
application's ``socket``, ``ssl``, ``time.sleep``, DNS and ``threading`` are cooperative.
The settings come from the flags, GREENSERVE_CMD_ARGS, the ``-c`` file, PORT and
WEB_CONCURRENCY, layered by ``entry.configfile``.

Every mistake a user can make (a bad flag, an import string that does not resolve, an app that
is not callable, a port in use) ends in one line on stderr and exit code 2. An application that
raises while it loads ends in its traceback (from its own frames on), one line, and exit code 3.
"""

import argparse
import importlib
import os
import shlex
import sys

from greenserve._version import __version__
from greenserve.entry import configfile
from greenserve.settings import SETTINGS, SettingError, cli_flags

EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake of the user's: printed as one line, exit code 2."""


class BootError(Exception):
    """The application raised while loading; its traceback is printed already. Exit code 3."""


# gunicorn's flags that greenserve spells differently or does not have, for people who move a
# command line over: greenserve's flag, or what to do instead.
_WORKER_CLASS = (
    "greenserve is itself the gevent worker; to keep gunicorn, run it with "
    "-k greenserve.workers.GreenserveWorker (docs/gunicorn.md)"
)
GUNICORN_FLAGS = {
    "--keep-alive": "--keepalive",
    "--access-logfile": "--access-log",
    "--access-logformat": "--access-log-format",
    "--error-logfile": "--error-log",
    "--log-file": "--error-log",
    "--limit-request-field_size": "--limit-request-field-size",
    "--proxy-allow-from": "--forwarded-allow-ips",  # one list of trusted proxies, for both
    "-k": _WORKER_CLASS,
    "--worker-class": _WORKER_CLASS,
    "--threads": "a worker serves its connections on greenlets, not threads: --worker-connections says how many",
    "--worker-tmp-dir": "workers prove they are alive through a pipe, not a file",
    "--paste": "serve a PasteDeploy .ini with 'use = egg:greenserve' in [server:main] and pserve (docs/migrating.md)",
}


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, told the terminal's width.

    Left to find it, HelpFormatter imports shutil for get_terminal_size(), and argparse makes
    one at every add_argument: shutil (with bz2, lzma and zlib) would be ~0.6 MB of the
    master's RSS, held for as long as it serves. The width is found by shutil's rule.
    """

    def __init__(self, prog):
        super().__init__(prog, width=_terminal_columns() - 2)


def _terminal_columns():
    """shutil.get_terminal_size().columns: $COLUMNS, else standard output's terminal, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", 0))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        # argparse prints the whole usage block; one line says it better.
        raise UsageError("%s (see greenserve --help)" % message)

    def parse_args(self, args=None, namespace=None):
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            flags = [extra for extra in extras if extra.startswith("-") and extra != "-"]
            if flags:
                raise UsageError(self.unknown_flag(flags[0].partition("=")[0]))
            self.error("unrecognized arguments: %s" % " ".join(extras))
        return args

    def unknown_flag(self, flag):
        """One line for a flag greenserve does not have: gunicorn's spelling, or the closest of ours."""
        known = sorted(self._option_string_actions)
        instead = GUNICORN_FLAGS.get(flag)
        if instead in known:
            return "unknown flag %s (gunicorn's spelling): use %s" % (flag, instead)
        if instead is not None:
            return "unknown flag %s (gunicorn's; greenserve has no such flag): %s" % (flag, instead)
        import difflib  # a mistake's path: not in the master's RSS

        close = difflib.get_close_matches(flag, known, n=3, cutoff=0.75)
        if close:
            return "unknown flag %s: did you mean %s? (see greenserve --help)" % (flag, " or ".join(close))
        return "unknown flag %s (see greenserve --help)" % flag


def build_parser():
    parser = _Parser(
        prog="greenserve",
        formatter_class=_HelpFormatter,
        usage="%(prog)s [options] MODULE:APP\n       %(prog)s check [options] MODULE:APP\n"
        "       %(prog)s --print-config [options] [MODULE:APP]",
        description="Serve a WSGI application with greenserve, a fast, strict HTTP/1.1 server on gevent. "
        "'greenserve check' (the same as --check-config) patches and imports the application as a worker "
        "would, prints what is and is not cooperative and any warning, and exits without serving.",
        epilog="Settings reference: docs/settings.md. Examples: greenserve --bind 127.0.0.1:8000 myapp:app; "
        "greenserve check myapp:app",
    )
    parser.add_argument(
        "app",
        nargs="?",
        metavar="MODULE:APP",
        help="the WSGI application: 'module:name', 'module:factory()' (called to make the app), "
        "or 'module' (looks for 'application', then 'app').",
    )
    parser.add_argument(
        "--version", action="store_true", help="print the version and the hot path's build (compiled or pure Python), and exit"
    )
    parser.add_argument(
        "--check-config",
        action="store_true",
        help="check the settings, patch, load the application (binding nothing), say what would run, "
        "and exit: 0 when it all works",
    )
    parser.add_argument(
        "-c",
        "--config",
        metavar="FILE",
        help="a Python file whose module-level names set settings, by the names of docs/settings.md "
        "or gunicorn's (a gunicorn.conf.py loads as it is); read again on SIGHUP. Precedence: "
        "defaults, PORT and WEB_CONCURRENCY, this file, %s, flags" % configfile.CMD_ARGS_VARIABLE,
    )
    parser.add_argument(
        "--print-config",
        action="store_true",
        help="print every setting, its value and where it came from (one per line), and exit "
        "without binding or importing the application",
    )
    groups = {}
    for setting in SETTINGS:
        if not setting.cli:
            continue
        group = groups.get(setting.section)
        if group is None:
            group = groups[setting.section] = parser.add_argument_group(setting.section)
        help_text = setting.help
        if setting.boolean:
            group.add_argument(
                "--" + setting.name.replace("_", "-"),
                dest=setting.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help_text + " (default: %s)" % ("on" if setting.default else "off"),
            )
            continue
        if setting.default not in (None, "", []):
            default = setting.default
            if isinstance(default, list):
                default = ", ".join(default)
            help_text += " (default: %s)" % (default,)
        group.add_argument(
            *cli_flags(setting),
            dest=setting.name,
            metavar=setting.metavar or "VALUE",
            action="append" if setting.repeat else "store",
            default=None,
            help=help_text.replace("%", "%%"),
        )
    return parser


def version_text():
    try:
        import gevent
        import greenlet

        versions = "gevent %s, greenlet %s" % (gevent.__version__, greenlet.__version__)
    except ImportError:
        versions = "gevent not installed"
    return "greenserve %s (%s, Python %s, %s)" % (__version__, versions, sys.version.split()[0], build_text())


def build_text():
    """Which build of the hot path runs, as --version says it: 'compiled hot path', 'pure Python: why'
    or 'hot path not importable: why'. Imports the hot path (unlike the master's startup line):
    --version exits at once, and a broken installation is what it is asked to show."""
    from greenserve import _accel

    try:
        build = _accel.build()
    except ImportError as exc:  # gevent missing: the hot path cannot even be imported
        return "hot path not importable: %s" % exc
    if build == "compiled":
        return "compiled hot path"
    if build == "pure Python":
        return "pure Python: %s" % _accel.why_pure()
    return build


def settings_given(args):
    """``{name: value}`` of the settings' flags present in parsed ``args`` (not yet validated)."""
    return {
        setting.name: getattr(args, setting.name)
        for setting in SETTINGS
        if setting.cli and getattr(args, setting.name, None) is not None
    }


def env_args(parser, environ):
    """GREENSERVE_CMD_ARGS, shell-split and parsed as flags (gunicorn's GUNICORN_CMD_ARGS)."""
    text = environ.get(configfile.CMD_ARGS_VARIABLE)
    if text is None:
        return parser.parse_args([])
    try:
        parsed = parser.parse_args(shlex.split(text))
    except (UsageError, ValueError) as exc:  # ValueError: shlex's "No closing quotation"
        raise UsageError("%s: %s" % (configfile.CMD_ARGS_VARIABLE, exc)) from None
    if parsed.app:
        raise UsageError(
            "%s holds flags only, not the application %r: give it on the command line"
            % (configfile.CMD_ARGS_VARIABLE, parsed.app)
        )
    return parsed


def loader_from_args(args, environ_args, environ):
    """The Loader of this command's settings: its flags, GREENSERVE_CMD_ARGS, -c, PORT, WEB_CONCURRENCY."""
    return configfile.Loader(
        path=args.config or environ_args.config,
        flags=settings_given(args),
        cmd_args=settings_given(environ_args),
        environ=environ,
    )


def load_app(spec):
    """Import 'module:name', 'module:factory()' or 'module'; return the WSGI callable."""
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise UsageError("no module in %r: expected MODULE:APP" % spec)
    if module_name.startswith("."):
        raise UsageError("%r: relative module names are not supported; use --chdir and a module name" % spec)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only "this import string does not resolve" is a usage error; a missing module
        # imported *by* the application is its bug, and its traceback says where.
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UsageError(
                "cannot import %r: no module named %r (current directory: %s)" % (module_name, exc.name, os.getcwd())
            ) from None
        raise
    call = None  # (args, kwargs) of a factory call
    if "(" in attribute:
        attribute, call = _factory_call(spec, attribute)
    names = [attribute] if attribute else ["application", "app"]
    for name in names:
        target = module
        try:
            for part in name.split("."):
                target = getattr(target, part)
        except AttributeError:
            continue
        break
    else:
        raise UsageError("module %r has no attribute %s" % (module_name, " or ".join(repr(n) for n in names)))
    if call is not None:
        if not callable(target):
            raise UsageError("%s:%s is not callable, so it cannot be a factory" % (module_name, name))
        target = target(*call[0], **call[1])
    if not callable(target):
        raise UsageError(
            "%s:%s is a %s, not a WSGI application (a callable)" % (module_name, name, type(target).__name__)
        )
    return target


def _factory_call(spec, text):
    """'create_app("production", debug=False)' -> ('create_app', (args, kwargs)): an app factory
    called with literal arguments, as gunicorn 20.1+ accepts them (its util.import_app)."""
    import ast

    try:
        expression = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise UsageError("%r: cannot read %r as a name or a call of a factory with literal arguments" % (spec, text)) from None
    if not isinstance(expression, ast.Call):
        raise UsageError("%r: expected MODULE:NAME or MODULE:FACTORY(ARGUMENTS)" % spec)
    parts = []
    function = expression.func
    while isinstance(function, ast.Attribute):
        parts.append(function.attr)
        function = function.value
    if not isinstance(function, ast.Name):
        raise UsageError("%r: the factory must be named (module:factory(...) or module:object.factory(...))" % spec)
    parts.append(function.id)
    try:
        args = tuple(ast.literal_eval(arg) for arg in expression.args)
        kwargs = {keyword.arg: ast.literal_eval(keyword.value) for keyword in expression.keywords}
    except ValueError:
        raise UsageError(
            "%r: a factory's arguments must be literals (strings, numbers, True/False/None, lists, dicts), "
            "as gunicorn requires" % spec
        ) from None
    if None in kwargs:
        raise UsageError("%r: **arguments are not literals" % spec)
    return ".".join(reversed(parts)), (args, kwargs)


def load_app_or_fail(spec):
    """load_app(), with an exception of the application's own turned into its traceback and a BootError."""
    try:
        return load_app(spec)
    except UsageError:
        raise
    except (Exception, SystemExit):
        print_app_traceback()
        raise BootError("the application failed to load (see the traceback above)") from None


def print_app_traceback(exc=None):
    """The traceback of ``exc`` (default: the exception being handled), from the application's first frame on.

    The frames before it (greenserve's and importlib's, the same for every application) only
    push the ones that say what went wrong up the screen. A SyntaxError has no frame of the
    application's: what is left is the file, line and caret that Python prints for it.
    """
    import traceback

    if exc is None:
        exc = sys.exc_info()[1]
    frames = exc.__traceback__
    while frames is not None and _is_loader_frame(frames.tb_frame.f_code.co_filename):
        frames = frames.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, frames)))
    sys.stderr.flush()


_LOADER_DIRECTORIES = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # greenserve/
    os.path.dirname(importlib.__file__) + os.sep,
)


def _is_loader_frame(filename):
    return filename.startswith("<frozen importlib") or os.path.abspath(filename).startswith(_LOADER_DIRECTORIES)


def main(argv=None):
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except UsageError as exc:
        sys.stderr.write("greenserve: error: %s\n" % exc)
        return EXIT_USAGE
    except BootError as exc:
        from greenserve.process.arbiter import EXIT_BOOT_ERROR  # a worker's exit code for the same failure

        sys.stderr.write("greenserve: error: %s\n" % exc)
        return EXIT_BOOT_ERROR
    except KeyboardInterrupt:
        return 0


def _main(argv):
    if argv[:1] == ["check"]:
        # `greenserve check MODULE:APP`: the words people reach for; the flag is the same thing.
        argv = ["--check-config"] + argv[1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version:
        sys.stdout.write(version_text() + "\n")
        return 0
    environ = dict(os.environ)
    environ_args = env_args(parser, environ)
    print_config = args.print_config or environ_args.print_config
    loader = loader_from_args(args, environ_args, environ)
    from greenserve import listeners

    try:
        loaded = loader.load()
        config = loaded.config
        config.check(systemd_sockets=listeners.systemd_socket_count())
    except SettingError as exc:
        raise UsageError(str(exc)) from None
    if print_config:
        for warning in loaded.warnings:
            sys.stderr.write("greenserve: warning: %s\n" % warning)
        sys.stdout.write(configfile.render(loaded))
        return 0
    app_spec = args.app or loaded.app
    if not app_spec:
        raise UsageError("the application is missing: greenserve [options] MODULE:APP")
    from greenserve.entry.gunicorn_cfg import hook_view
    from greenserve.process.master import set_environment

    set_environment(config)  # before the hooks are imported, as gunicorn's Arbiter.setup
    logs, certificate, hooks = _prepare(config, hook_view(loader, app_spec))
    for warning in loaded.warnings:
        logs[0].warning(warning)
    if args.check_config or environ_args.check_config:
        if loaded.typos:
            # The strict reading: a name close to a setting is most likely a typo that the
            # server ignores (gunicorn would too); the check is where it stops a deploy.
            raise UsageError(
                "%s: %s: not settings, and close to one (see the warning above); fix or rename them"
                % (loader.shown_path, ", ".join(loaded.typos))
            )
        return _check_config(app_spec, config)
    _check_accounts(config)
    pid_file = _pid_file(config)
    sockets, unix_paths, notes = _listen(config, bind_given=loaded.sources["bind"] != configfile.DEFAULT)
    if config.capture_output:
        from greenserve.observe.logconfig import capture_output

        capture_output(config.error_log)  # from here: after the command's own usage errors
    try:
        if config.prometheus_multiproc_dir is not None:
            from greenserve.observe.metrics import prepare_multiprocess_dir

            # Before --preload's import: prometheus_client picks its mode when imported.
            try:
                prepare_multiprocess_dir(config.prometheus_multiproc_dir)
            except ValueError as exc:
                raise UsageError("--prometheus-multiproc-dir %s: %s" % (config.prometheus_multiproc_dir, exc)) from None
        # Before --preload's import: the application must not find systemd's socket in its environment.
        from greenserve.process.master import systemd_notifier

        systemd = systemd_notifier()
        application = None
        if config.preload:
            from greenserve.process import patching

            late = patching.late_patching_warning(patching.apply(patching.spec_of(config)), preload="greenserve")
            if late:
                logs[0].warning(late)  # now: said even when the import below fails
            application = load_app_or_fail(app_spec)
        readiness = _daemonize(config) if config.daemon else None
    except BaseException:
        listeners.close_all(sockets, unix_paths)
        raise
    code = 1
    failure = None
    try:
        if pid_file is not None:
            from greenserve.process import daemon

            try:
                pid_file.create()
            except daemon.PidFileError as exc:
                raise UsageError(str(exc)) from None
        code, failure = _run_master(
            app_spec, application, sockets, config, logs, certificate, readiness, notes, hooks,
            # Without a file nothing can change under a running master (flags, environment).
            reread=loader.reload if loader.path is not None else None, systemd=systemd,
        )
        return code
    except UsageError as exc:
        code, failure = EXIT_USAGE, "greenserve: error: %s" % exc
        raise
    finally:
        listeners.close_all(sockets, unix_paths)
        if pid_file is not None:
            pid_file.remove()
        if readiness is not None:
            # Said last, once the daemon cleaned up: the launcher's caller may start again at
            # once. A no-op when a worker has served (readiness.ready() was said).
            readiness.failed(code, failure or _daemon_failure(code, config.error_log))


def _prepare(config, view=None):
    """What every run needs before it serves or checks: the files found, the directory changed,
    the logs open, gevent's choices made, the master's hooks imported, the certificate loaded.
    Returns (logs, certificate, hooks): the certificate a tls.ServerCertificate, or None without
    --certfile. ``view``: what the hooks' ``cfg`` is made of the Config (gunicorn_cfg.hook_view)."""
    for path_setting in configfile.FILE_SETTINGS:
        path = getattr(config, path_setting)
        if path is not None:
            if not os.path.isfile(path):
                raise UsageError("--%s: no such file: %s" % (path_setting.replace("_", "-"), path))
            # Relative to where the command was typed, not to --chdir.
            config.update(**{path_setting: os.path.abspath(path)})
    if isinstance(config.log_config, str):  # not gunicorn's logconfig_dict, a dict
        config.update(log_config=os.path.abspath(config.log_config))
    # --reload's paths too: relative to where the command was typed.
    for directory in config.reload_dir:
        if not os.path.isdir(directory):
            raise UsageError("--reload-dir: no such directory: %s" % directory)
    config.update(
        reload_dir=[os.path.abspath(path) for path in config.reload_dir],
        reload_extra_file=[os.path.abspath(path) for path in config.reload_extra_file],
    )
    if config.chdir:
        try:
            os.chdir(config.chdir)
        except OSError as exc:
            raise UsageError("--chdir %s: %s" % (config.chdir, exc.strerror)) from None
    # Like gunicorn: the current directory is importable.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    if config.umask is not None:
        os.umask(config.umask)  # before the log files are made; the workers inherit it
    error_log, access_log, warnings = _open_logs(config)
    logs = (error_log, access_log)
    for warning in warnings:
        error_log.warning(warning)

    # Validated here, so that a bad choice is one line now, not a failure in every worker.
    from greenserve.process import patching

    try:
        patching.spec_of(config)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        patching.configure_gevent(resolver=config.resolver, loop=config.loop)
    except (ValueError, RuntimeError) as exc:
        raise UsageError(str(exc)) from None
    from greenserve.process.hooks import HookError, Hooks

    try:
        hooks = Hooks(config, logs[0], view)  # after --chdir: its modules are found where the application's are
    except HookError as exc:
        raise UsageError(str(exc)) from None
    certificate = _load_certificate(config, hooks) if config.certfile else None
    return logs, certificate, hooks


def _check_config(spec, config):
    """``greenserve check``: patched and imported as a worker would, so the report is what a worker will see."""
    from greenserve.process import patching

    if config.max_blocking_time:
        patching.configure_monitor(config.max_blocking_time)
    patch = patching.spec_of(config)
    patch_state = patching.apply(patch)
    application = load_app_or_fail(spec)
    out = sys.stdout
    out.write(version_text() + "\n")
    out.write("application: %s -> %r\n" % (spec, application))
    out.write("bind: %s\n" % ", ".join(config.bind))
    out.write("gevent monkey-patching: %s\n" % patching.patch_text(patch))
    out.write("workers: %d\n" % config.worker_count())
    out.write(patching.format_report(patching.report(patch_state)) + "\n")
    out.write("configuration OK\n")
    return 0


def _check_accounts(config):
    """The user, group and socket group named: a typo is one line now, not a worker boot loop."""
    from greenserve import listeners

    if config.user is not None or config.group is not None:
        from greenserve.process import daemon  # here: not in the RSS of a master without --user

        try:
            daemon.resolve_ids(config.user, config.group)
        except ValueError as exc:
            raise UsageError("--user/--group: %s" % exc) from None
    if config.unix_socket_group is not None:
        try:
            listeners.unix_socket_gid(config.unix_socket_group)  # whatever --bind says
        except listeners.ListenerError as exc:
            raise UsageError(str(exc)) from None


def _pid_file(config):
    """The --pid file to write, or None; refused when it names a running process."""
    if not config.pid:
        return None
    from greenserve.process import daemon

    pid_file = daemon.PidFile(config.pid)
    running = daemon.read_pid(pid_file.path)
    if running is not None and running != os.getpid() and daemon.is_running(running):
        raise UsageError("--pid %s names a running process (pid %d): is greenserve already running?" % (config.pid, running))
    return pid_file


def _listen(config, bind_given):
    """The listening sockets, the unix socket files made, and the notes for the startup log.

    Bound before the application is imported: "address already in use" should not wait for a
    slow import. systemd's sockets (socket activation) replace --bind, as in gunicorn.
    """
    from greenserve import listeners

    notes = []
    note = _raise_open_file_limit(config.worker_connections)
    if note:
        notes.append(("warning", note))
    notes.extend(("warning", warning) for warning in config.warnings())
    try:
        sockets = listeners.systemd_listen_fds()
        if sockets:
            notes.append((
                "info",
                "serving the %d socket(s) systemd passed (LISTEN_FDS)%s"
                % (len(sockets), "; --bind %s ignored" % " ".join(config.bind) if bind_given else ""),
            ))
            return sockets, [], notes
        sockets, unix_paths, warnings = listeners.bind_all(config)
    except listeners.ListenerError as exc:
        raise UsageError(str(exc)) from None
    notes.extend(("warning", warning) for warning in warnings)
    return sockets, unix_paths, notes


def _daemonize(config):
    """--daemon: detach, and return the launcher's readiness pipe (process.daemon)."""
    from greenserve.process import daemon

    error_log_path = config.error_log if config.error_log not in (None, "-") else os.devnull
    try:
        # wait=True: the command returns once a worker serves, with 0, or with the error's
        # exit code when the application cannot start, as it does without --daemon.
        return daemon.daemonize(
            chdir=os.getcwd() if config.chdir else "/",
            stdout=error_log_path,
            stderr=error_log_path,
            wait=True,
            # The daemon's own umask (0022) unless --umask set one: the daemon keeps it.
            **({"umask": config.umask} if config.umask is not None else {}),
        )
    except daemon.DaemonError as exc:
        raise UsageError(str(exc)) from None


def _open_logs(config):
    """The error and access logs, and the warnings to say about them; or a UsageError naming the
    path or format that does not work."""
    from greenserve.observe import errorlog

    error_log = access_log = None
    warnings = []
    if config.logs_through_logging():
        from greenserve.observe import logconfig

        try:
            error_log, access_log, warnings = logconfig.configure(config)
        except logconfig.LogConfigError as exc:
            raise UsageError(str(exc)) from None
    # What --log-config left without a handler stays --error-log's and --access-log's file,
    # as gunicorn's logs do.
    if error_log is None:
        try:
            error_log = errorlog.for_target(config.error_log, config.log_level)
        except OSError as exc:
            raise UsageError("--error-log %s: %s" % (config.error_log, exc.strerror)) from None
    if access_log is None and config.access_log is not None:
        access_log = _file_access_log(config)
    return error_log, access_log, warnings


def _file_access_log(config):
    from greenserve.observe import accesslog  # only then: compiled, ~0.15 MB of the master's RSS

    try:
        return accesslog.for_target(config.access_log, config.access_log_format)
    except OSError as exc:
        raise UsageError("--access-log %s: %s" % (config.access_log, exc.strerror)) from None
    except ValueError as exc:
        raise UsageError("--access-log-format: %s" % exc) from None


def _load_certificate(config, hooks):
    """The master's ServerCertificate (process.master renews it on SIGHUP), or a UsageError.

    The context is made from the TLS settings, or by the ssl_context hook, which is given
    gunicorn's arguments (the config, and a factory of the default context); on SIGHUP the hook
    runs again with the files read anew.
    """
    import ssl

    from greenserve import tls

    def factory(config):
        # Decided at each call: a SIGHUP may read a config file that adds or removes the hook.
        if hooks["ssl_context"] is None:
            return tls.default_ssl_context(config)
        context = _starting_hook(hooks, "ssl_context", config, lambda: tls.default_ssl_context(config))
        if not isinstance(context, ssl.SSLContext):
            raise UsageError("--ssl-context: the hook returned %s, not an ssl.SSLContext" % type(context).__name__)
        return context

    try:
        return tls.ServerCertificate(config, factory=factory)
    except tls.TLSError as exc:
        raise UsageError(str(exc)) from None


# Descriptors a worker holds besides its connections: listeners, logs, the heartbeat pipe, the
# loop's own, and what the application opens (files, database and outbound connections).
_SPARE_FILES = 256


def _raise_open_file_limit(worker_connections):
    """Raise the soft RLIMIT_NOFILE so that a worker can hold worker_connections sockets.

    Many systems start processes at 1,024 open files, so a worker at the default 1,000
    connections would fail with "Too many open files" on its application's first file. The hard
    limit is the administrator's: greenserve never goes above it and says so when it is too low.
    Workers inherit the limit. Returns a warning, or None.
    """
    import resource

    wanted = worker_connections + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return None
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            target = soft
    if target < wanted:
        return (
            "the open-file limit is %d (hard limit %s): a worker cannot hold %d connections; "
            "raise it (ulimit -n, or LimitNOFILE= in a systemd unit) or lower --worker-connections"
            % (target, "unlimited" if hard == resource.RLIM_INFINITY else hard, worker_connections)
        )
    return None


def _daemon_failure(code, error_log):
    """What the launcher of a daemon that never served prints."""
    if code == 0:
        return "greenserve: error: the daemon was stopped (by a signal) before it served"
    if error_log in (None, "-"):
        where = "run the same command without --daemon, or with --error-log FILE, to see why"
    else:
        where = "%s says why" % os.path.abspath(error_log)
    return "greenserve: error: the daemon stopped before it served (exit code %d): %s" % (code, where)


def _run_master(spec, application, sockets, config, logs, certificate, readiness=None, notes=(), hooks=None,
                reread=None, systemd=None):
    """Fork the workers and watch them (process.master) until a signal stops the master.

    Returns the exit code, and the one-line error of the worker that stopped the master, if one did.
    """
    from greenserve.process.arbiter import EXIT_BOOT_ERROR
    from greenserve.process.master import Master

    def boot(served):
        # In a worker, after gevent's reinit and patching (process.worker): import, then serve.
        if config.logs_through_logging():
            from greenserve.observe.logconfig import renew_sockets

            renew_sockets()  # made by the patched socket module (see greenserve.observe.logconfig)
        app = application
        if app is None:
            try:
                app = master.hooks.server.app.callable = load_app(spec)
            except UsageError as exc:
                master.refuse(exc)
            except BaseException:
                print_app_traceback()
                raise SystemExit(EXIT_BOOT_ERROR) from None
        # The context as it was when this worker was forked: renewed by SIGHUP for the next generation.
        ssl_context = certificate.context if certificate is not None else None
        # pre_request/post_request: the application wrapped once, and only when one is set.
        # master.config: after a SIGHUP, the settings read again from the config file.
        from greenserve.request_hooks import wrap_application

        app = wrap_application(app, master.hooks)
        return _make_servers(app, served, master.config, logs, ssl_context)

    master = Master(
        config, sockets, boot, logs[0], reopen_logs=lambda: _reopen_logs(logs), notes=notes, readiness=readiness,
        certificate=certificate, preloaded=application is not None, hooks=hooks, reread=reread, default_name=spec,
        systemd=systemd,
    )
    server = master.hooks.server
    server.app.app_uri, server.app.callable, server.app._load = spec, application, load_app
    server.pidfile = config.pid
    from greenserve.process.hooks import HookRaised

    try:
        return master.run(), master.failure
    except HookRaised as exc:  # on_starting raised: the start fails, as gunicorn's does
        print_app_traceback(exc.__cause__)
        raise BootError(str(exc)) from None


def _starting_hook(hooks, name, *args):
    """A hook that runs at start; one that raises ends the start with its traceback (exit 3)."""
    from greenserve.process.arbiter import StopMaster
    from greenserve.process.hooks import HookRaised

    try:
        return hooks.call_starting(name, *args)
    except HookRaised as exc:
        print_app_traceback(exc.__cause__)
        raise BootError(str(exc)) from None
    except StopMaster as exc:  # it created a gevent hub
        raise UsageError(str(exc)) from None


def _make_servers(application, listeners, config, logs, ssl_context):
    from greenserve.pool import ConnectionPool
    from greenserve.server import WSGIServer

    error_log, access_log = logs
    ssl_args = {"ssl_context": ssl_context} if ssl_context is not None else {}
    # One per worker, shared by its listeners.
    pool = ConnectionPool(config.worker_connections, config.reuse_greenlets)
    return [
        WSGIServer(listener, application, spawn=pool, log=access_log, error_log=error_log, config=config, **ssl_args)
        for listener in listeners
    ]


def _reopen_logs(logs):
    for log in logs:
        reopen = getattr(log, "reopen", None)
        if reopen is not None:
            reopen()

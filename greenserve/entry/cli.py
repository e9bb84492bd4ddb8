"""The ``greenserve`` command: flags from the settings table, friendly errors, patch then import then serve.

Order matters with gevent: this module imports nothing of gevent, ssl or the application at
import time. ``main()`` parses the command line, applies gevent's monkey-patching (unless
``--no-monkey-patch``), and only then imports the server and the application, so that the
application's ``socket``, ``ssl``, ``time.sleep``, DNS and ``threading`` are cooperative.
The settings come from the flags, GREENSERVE_CMD_ARGS, the ``-c`` file, PORT and
WEB_CONCURRENCY, layered by ``entry.configfile``; from the Config to the master the command walks
the pre-flight every front door takes (``entry.startup``), then does what only it does:
``--print-config``, ``greenserve check``, ``--preload`` and ``--daemon``.

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
from greenserve.entry.startup import BootError, Startup, StartupError, print_app_traceback, refusals
from greenserve.settings import SETTINGS, SettingError, cli_flags

EXIT_USAGE = 2


class UsageError(Exception):
    """A mistake of the user's: printed as one line, exit code 2."""


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


# What --help shows first, after what greenserve is: the commands a newcomer starts with
# (docs/quickstart.md walks through them). Every option follows, by section.
QUICK_START = """Start with:
  greenserve myapp:app                      # myapp.py's app on 127.0.0.1:8000
  greenserve -w 4 -b 0.0.0.0:8000 myapp:app # four workers, on every interface
  greenserve -c gunicorn.conf.py myapp:app  # settings from a file
  greenserve check myapp:app                # import it, report what blocks
  greenserve --reload myapp:app             # development: reload on each edit"""

# What ``greenserve`` alone says (on stderr, exit code 2): where to start, not an error.
BARE_USAGE = ("usage: greenserve [options] MODULE:APP (for example: greenserve myapp:app)\n"
              "greenserve --help for all options\n")


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, told the terminal's width; a block of the description or epilog
    that starts indented (QUICK_START's commands) keeps its lines.

    Left to find it, HelpFormatter imports shutil for get_terminal_size(), and argparse makes
    one at every add_argument: shutil (with bz2, lzma and zlib) would be ~0.6 MB of the
    master's RSS, held for as long as it serves. The width is found by shutil's rule.
    """

    def __init__(self, prog):
        super().__init__(prog, width=_terminal_columns() - 2)

    def _fill_text(self, text, width, indent):
        return "\n\n".join(
            block if "\n  " in block else super(_HelpFormatter, self)._fill_text(block, width, indent)
            for block in text.split("\n\n"))


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
        description="Serve a WSGI application with greenserve, a fast, strict HTTP/1.1 and HTTP/2 server on gevent "
        "(HTTP/2 over TLS by ALPN, h2c from a trusted proxy: --http-protocols h2,h1). "
        "'greenserve check' (the same as --check-config) patches and imports the application as a worker "
        "would, prints what is and is not cooperative and any warning, and exits without serving."
        "\n\n" + QUICK_START + "\n\nEvery option, by section (docs/settings.md says the same, with the"
        " config file's names):",
        epilog="Walk-through: docs/quickstart.md. Going to production: docs/production.md.",
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
        "or gunicorn's (a gunicorn.conf.py loads as it is; without -c, ./gunicorn.conf.py if there is one, "
        "as gunicorn reads it); read again on SIGHUP. Precedence: "
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
        if setting.boolean and setting.flags:  # gunicorn's spelling: one flag that turns it on (--no-control-socket)
            group.add_argument(*setting.flags, dest=setting.name, action="store_true", default=None, help=help_text)
            continue
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
    """The version line: greenserve's, gevent's and Python's versions, the build of the hot path and
    where the package was imported from (a source checkout can hide the installed build)."""
    from greenserve import _accel

    try:
        import gevent
        import greenlet

        versions = "gevent %s, greenlet %s" % (gevent.__version__, greenlet.__version__)
    except ImportError:
        versions = "gevent not installed"
    return "greenserve %s (%s, Python %s, %s) from %s" % (
        __version__, versions, sys.version.split()[0], build_text(), _accel.location())


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
        path=args.config or environ_args.config or configfile.default_file(),
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
    from greenserve.process import upgrade

    # First: the environment as it was given, before raw_env or systemd's variables change it.
    launch, old_master = upgrade.remember()
    if not argv and not os.environ.get(configfile.CMD_ARGS_VARIABLE) and configfile.default_file() is None:
        sys.stderr.write(BARE_USAGE)  # nothing to serve, nothing asked: where to start
        return EXIT_USAGE
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
    loader = loader_from_args(args, environ_args, environ)
    try:
        loaded = loader.load()
    except SettingError as exc:
        raise UsageError(str(exc)) from None
    start = Startup(loaded.config, loaded, access_log=True)
    if loader.path is not None and not (args.config or environ_args.config):
        start.notes.append(("info", "read ./%s (gunicorn's default config file, read without -c, as gunicorn "
                            "reads it); -c FILE names another" % configfile.DEFAULT_FILE))
    _walk(start, "check")
    if args.print_config or environ_args.print_config:
        for warning in loaded.warnings:
            sys.stderr.write("greenserve: warning: %s\n" % warning)
        sys.stdout.write(configfile.render(loaded))
        return 0
    app_spec = args.app or loaded.app
    if not app_spec:
        raise UsageError("the application is missing: greenserve [options] MODULE:APP (see greenserve --help)")
    from greenserve.entry.gunicorn_cfg import hook_view

    start.view = hook_view(loader, app_spec)
    _walk(start, "loader_warnings")
    if args.check_config or environ_args.check_config:
        if loaded.typos:
            # The strict reading: a name close to a setting is most likely a typo that the
            # server ignores (gunicorn would too); the check is where it stops a deploy.
            raise UsageError(
                "%s: %s: not settings, and close to one (see the warning above); fix or rename them"
                % (loader.shown_path, ", ".join(loaded.typos))
            )
        return _check_config(app_spec, start.config, loader.shown_path)
    _walk(start)
    # Without a file nothing can change under a running master (flags, environment).
    return _serve(start, app_spec, reread=loader.reload if loader.path is not None else None,
                  upgrade=upgrade.Upgrade(launch, start.sockets, start.pid_file, start.error_log, old_master))


def _walk(start, last=None):
    """The pre-flight (entry.startup) through the step ``last``; a refusal is a usage error."""
    try:
        start.through(last)
    except refusals() as exc:
        raise UsageError(str(exc)) from None


def _serve(start, app_spec, reread, upgrade):
    """After the pre-flight: --preload's import, --daemon, the pid file, then the master until it stops.

    ``upgrade`` (``process.upgrade.Upgrade``): SIGUSR2's binary upgrade. A new master does not
    --daemon: it stays its old master's child, which learns so of its end (as gunicorn's)."""
    config = start.config
    try:
        application = None
        if config.preload:
            from greenserve.process import patching

            late = patching.late_patching_warning(patching.apply(patching.spec_of(config)), preload="greenserve")
            if late:
                start.error_log.warning(late)  # now: said even when the import below fails
            application = load_app_or_fail(app_spec)
        readiness = _daemonize(config) if config.daemon and upgrade.old_master is None else None
    except BaseException:
        start.close()
        raise
    code = 1
    failure = None
    try:
        try:
            start.write_pid()
        except StartupError as exc:
            raise UsageError(str(exc)) from None
        code, failure = _run_master(app_spec, application, start, readiness, reread, upgrade)
        return code
    except UsageError as exc:
        code, failure = EXIT_USAGE, "greenserve: error: %s" % exc
        raise
    finally:
        if upgrade.shares_listeners():
            start.unix_paths = []  # the other master serves on them
        start.close()
        if readiness is not None:
            # Said last, once the daemon cleaned up: the launcher's caller may start again at
            # once. A no-op when a worker has served (readiness.ready() was said).
            readiness.failed(code, failure or _daemon_failure(code, config.error_log))


def _check_config(spec, config, config_file=None):
    """``greenserve check``: patched and imported as a worker would, so the report is what a worker will see.
    ``config_file``: the file the settings were read from, as given (or found: ./gunicorn.conf.py)."""
    from greenserve.process import patching

    if config.max_blocking_time:
        patching.configure_monitor(config.max_blocking_time)
    patch = patching.spec_of(config)
    patch_state = patching.apply(patch)
    application = load_app_or_fail(spec)
    out = sys.stdout
    out.write(version_text() + "\n")
    out.write("application: %s -> %r\n" % (spec, application))
    if config_file is not None:
        out.write("config file: %s\n" % config_file)
    out.write("bind: %s\n" % ", ".join(config.bind))
    out.write("gevent monkey-patching: %s\n" % patching.patch_text(patch))
    out.write("workers: %d\n" % config.worker_count())
    out.write(patching.format_report(patching.report(patch_state)) + "\n")
    out.write("configuration OK\n")
    return 0


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


def _daemon_failure(code, error_log):
    """What the launcher of a daemon that never served prints."""
    if code == 0:
        return "greenserve: error: the daemon was stopped (by a signal) before it served"
    if error_log in (None, "-"):
        where = "run the same command without --daemon, or with --error-log FILE, to see why"
    else:
        where = "%s says why" % os.path.abspath(error_log)
    return "greenserve: error: the daemon stopped before it served (exit code %d): %s" % (code, where)


def _run_master(spec, application, start, readiness=None, reread=None, upgrade=None):
    """Fork the workers and watch them (process.master) until a signal stops the master.

    Returns the exit code, and the one-line error of the worker that stopped the master, if one did.
    """
    from greenserve.process.arbiter import EXIT_BOOT_ERROR
    from greenserve.process.master import Master

    config, logs, certificate = start.config, start.logs, start.certificate

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
        config, start.sockets, boot, logs[0], reopen_logs=start.reopen_logs, notes=start.notes, readiness=readiness,
        certificate=certificate, preloaded=application is not None, hooks=start.hooks, reread=reread,
        default_name=spec, systemd=start.systemd,
    )
    master.arbiter.ends_process = True  # (the command exits with run()'s code)
    server = master.hooks.server
    server.app.app_uri, server.app.callable, server.app._load = spec, application, load_app
    if upgrade is not None:
        master.arbiter.upgrade = upgrade
        upgrade.pre_exec = lambda: master.hooks.call_master("pre_exec", server)
        if master.arbiter.systemd is not None:
            master.arbiter.systemd.predecessor = upgrade.predecessor
    from greenserve.process.hooks import HookRaised

    try:
        return master.run(), master.failure
    except HookRaised as exc:  # on_starting raised: the start fails, as gunicorn's does
        print_app_traceback(exc.__cause__)
        raise BootError(str(exc)) from None


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

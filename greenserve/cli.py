"""The ``greenserve`` command: flags from the settings table, friendly errors, patch then import then serve.

Order matters with gevent: this module imports nothing of gevent, ssl or the application at
import time. ``main()`` parses the command line, applies gevent's monkey-patching (unless
``--no-monkey-patch``), and only then imports the server and the application, so that the
application's ``socket``, ``ssl``, ``time.sleep``, DNS and ``threading`` are cooperative.

Every mistake a user can make (a bad flag, an import string that does not resolve, an app that
is not callable, a port in use) ends in one line on stderr and exit code 2. An application that
raises while it loads ends in its traceback (from its own frames on), one line, and exit code 3.
"""

import argparse
import difflib
import importlib
import os
import sys

from greenserve import __version__
from greenserve.settings import SETTINGS, SettingError, cli_flags, parse_bind

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
_CONFIG_FILE = "greenserve has no configuration file: its settings are flags (docs/settings.md)"
GUNICORN_FLAGS = {
    "--keep-alive": "--keepalive",
    "--access-logfile": "--access-log",
    "--access-logformat": "--access-log-format",
    "--error-logfile": "--error-log",
    "--log-file": "--error-log",
    "--limit-request-field_size": "--limit-request-field-size",
    "-k": _WORKER_CLASS,
    "--worker-class": _WORKER_CLASS,
    "--threads": "a worker serves its connections on greenlets, not threads: --worker-connections says how many",
    "-c": _CONFIG_FILE,
    "--config": _CONFIG_FILE,
    "--reload": "greenserve does not watch the code for changes: send SIGHUP to reload it",
    "--worker-tmp-dir": "workers prove they are alive through a pipe, not a file",
    "--proxy-protocol": "greenserve does not speak the PROXY protocol",
    "--paste": "serve a PasteDeploy .ini with 'use = egg:greenserve' in [server:main] and pserve (docs/migrating.md)",
}


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
        close = difflib.get_close_matches(flag, known, n=3, cutoff=0.75)
        if close:
            return "unknown flag %s: did you mean %s? (see greenserve --help)" % (flag, " or ".join(close))
        return "unknown flag %s (see greenserve --help)" % flag


def build_parser():
    parser = _Parser(
        prog="greenserve",
        usage="%(prog)s [options] MODULE:APP\n       %(prog)s check [options] MODULE:APP",
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
    """Which build of the hot path runs, as --version says it: 'compiled hot path' or 'pure Python: why'."""
    build = hot_path()
    if build == "compiled":
        return "compiled hot path"
    if build.startswith("not importable"):
        return "hot path " + build
    return build


def hot_path():
    """Which build of the hot path runs, as the startup line says it after 'hot path: ':
    'compiled', 'pure Python: why', or 'not importable: why'."""
    from greenserve import _accel

    try:
        build = _accel.build()
    except ImportError as exc:  # gevent missing: the hot path cannot even be imported
        return "not importable: %s" % exc
    if build == "pure Python":
        return "pure Python: %s" % _accel.why_pure()
    return build


def settings_from_args(args):
    """Validate the flags given into a dict of setting values (defaults for the rest)."""
    values = {}
    for setting in SETTINGS:
        if not setting.cli:
            continue
        value = getattr(args, setting.name)
        if value is None:
            value = setting.default
        try:
            value = setting.convert(value) if value is not None else None
        except ValueError as exc:
            raise UsageError("--%s: %s" % (setting.name.replace("_", "-"), exc)) from None
        values[setting.name] = value
    return values


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
    call = False
    if attribute.endswith("()"):
        attribute = attribute[:-2]
        call = True
    elif "(" in attribute:
        raise UsageError("%r: factory arguments are not supported; use 'module:factory()'" % spec)
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
    if call:
        if not callable(target):
            raise UsageError("%s:%s is not callable, so it cannot be a factory" % (module_name, name))
        target = target()
    if not callable(target):
        raise UsageError(
            "%s:%s is a %s, not a WSGI application (a callable)" % (module_name, name, type(target).__name__)
        )
    return target


def load_app_or_fail(spec):
    """load_app(), with an exception of the application's own turned into its traceback and a BootError."""
    try:
        return load_app(spec)
    except UsageError:
        raise
    except (Exception, SystemExit):
        print_app_traceback()
        raise BootError("the application failed to load (see the traceback above)") from None


def print_app_traceback():
    """The traceback of the exception being handled, from the application's first frame on.

    The frames before it (greenserve's and importlib's, the same for every application) only
    push the ones that say what went wrong up the screen. A SyntaxError has no frame of the
    application's: what is left is the file, line and caret that Python prints for it.
    """
    import traceback

    exc = sys.exc_info()[1]
    frames = exc.__traceback__
    while frames is not None and _is_loader_frame(frames.tb_frame.f_code.co_filename):
        frames = frames.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, frames)))
    sys.stderr.flush()


_LOADER_DIRECTORIES = (os.path.dirname(os.path.abspath(__file__)) + os.sep, os.path.dirname(importlib.__file__) + os.sep)


def _is_loader_frame(filename):
    return filename.startswith("<frozen importlib") or os.path.abspath(filename).startswith(_LOADER_DIRECTORIES)


def make_listener(spec, backlog, reuse_port=False, unix_mode=None, unix_group=None):
    """A bound socket for a parsed bind address (``greenserve.listeners``); UsageError when it cannot be had."""
    from greenserve import listeners

    try:
        return listeners.make_listener(spec, backlog, reuse_port, unix_mode, unix_group)
    except listeners.ListenerError as exc:
        raise UsageError(str(exc)) from None


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
    if not args.app:
        raise UsageError("the application is missing: greenserve [options] MODULE:APP")
    settings = settings_from_args(args)
    specs = []
    for text in settings["bind"]:
        try:
            specs.append(parse_bind(text))
        except SettingError as exc:
            raise UsageError(str(exc)) from None
    if settings["keyfile"] is not None and settings["certfile"] is None:
        raise UsageError("--keyfile needs --certfile")
    for path_setting in ("certfile", "keyfile"):
        path = settings[path_setting]
        if path is not None:
            if not os.path.isfile(path):
                raise UsageError("--%s: no such file: %s" % (path_setting, path))
            # Relative to where the command was typed, not to --chdir.
            settings[path_setting] = os.path.abspath(path)

    if settings["chdir"]:
        try:
            os.chdir(settings["chdir"])
        except OSError as exc:
            raise UsageError("--chdir %s: %s" % (settings["chdir"], exc.strerror)) from None
    # Like gunicorn: the current directory is importable.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    if settings["umask"] is not None:
        os.umask(settings["umask"])  # before the log files are made; the workers inherit it
    logs = _open_logs(settings)

    # Validated here, so that a bad choice is one line now, not a failure in every worker.
    from greenserve.process import patching

    try:
        patch = patching.parse_patch_spec(settings["patch"]) if settings["monkey_patch"] else "none"
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    try:
        patching.configure_gevent(resolver=settings["resolver"], loop=settings["loop"])
    except (ValueError, RuntimeError) as exc:
        raise UsageError(str(exc)) from None
    ssl_context = _load_certificate(settings) if settings["certfile"] else None

    if args.check_config:
        # Patched and imported as a worker would: the report is what a worker will see.
        if settings["max_blocking_time"]:
            patching.configure_monitor(settings["max_blocking_time"])
        patch_state = patching.apply(patch)
        application = load_app_or_fail(args.app)
        out = sys.stdout
        out.write(version_text() + "\n")
        out.write("application: %s -> %r\n" % (args.app, application))
        out.write("bind: %s\n" % ", ".join(settings["bind"]))
        out.write("gevent monkey-patching: %s\n" % patch_text(patch))
        out.write("workers: %d\n" % _worker_count(settings))
        out.write(patching.format_report(patching.report(patch_state)) + "\n")
        out.write("configuration OK\n")
        return 0

    from greenserve import listeners as listening
    from greenserve.process import daemon

    if settings["user"] is not None or settings["group"] is not None:
        try:
            daemon.resolve_ids(settings["user"], settings["group"])  # a typo is one line now, not a worker boot loop
        except ValueError as exc:
            raise UsageError("--user/--group: %s" % exc) from None
    if settings["unix_socket_group"] is not None:
        try:
            listening.unix_socket_gid(settings["unix_socket_group"])  # a typo is one line, whatever --bind says
        except listening.ListenerError as exc:
            raise UsageError(str(exc)) from None
    pid_file = None
    if settings["pid"]:
        pid_file = daemon.PidFile(settings["pid"])
        running = daemon.read_pid(pid_file.path)
        if running is not None and running != os.getpid() and daemon.is_running(running):
            raise UsageError("--pid %s names a running process (pid %d): is greenserve already running?" % (settings["pid"], running))

    # Bind before importing the app: "address already in use" should not wait for a slow import.
    listeners = _systemd_sockets(args, settings)
    notes = []
    note = _raise_open_file_limit(settings["worker_connections"])
    if note:
        notes.append(("warning", note))
    if settings["reuse_port"] and _worker_count(settings) == 1:
        notes.append((
            "warning",
            "--reuse-port with one worker: nothing to balance, and while that worker restarts "
            "(--max-requests, a crash) new connections are refused; use two or more workers, or leave it off",
        ))
    if listeners:
        specs = []  # systemd's sockets replace --bind, as in gunicorn
        notes.append((
            "info",
            "serving the %d socket(s) systemd passed (LISTEN_FDS)%s"
            % (len(listeners), "; --bind %s ignored" % " ".join(args.bind) if args.bind else ""),
        ))
    unix_paths = []  # only the socket files we made: one found in use belongs to another server
    try:
        for spec in specs:
            listeners.append(make_listener(
                spec, settings["backlog"], settings["reuse_port"],
                settings["unix_socket_mode"], settings["unix_socket_group"],
            ))
            if spec[0] == "unix":
                unix_paths.append(spec[1])
                note = listening.unix_socket_warning(spec, settings["unix_socket_mode"], settings["unix_socket_group"])
                if note:
                    notes.append(("warning", note))
        application = None
        if settings["preload"]:
            late = patching.late_patching_warning(patching.apply(patch), preload="greenserve")
            if late:
                logs[0].warning(late)  # now: said even when the import below fails
            application = load_app_or_fail(args.app)
    except BaseException:
        _close_listeners(listeners, unix_paths)
        raise
    readiness = None
    if settings["daemon"]:
        error_log_path = settings["error_log"] if settings["error_log"] not in (None, "-") else os.devnull
        try:
            # wait=True: the command returns once a worker serves, with 0, or with the error's
            # exit code when the application cannot start, as it does without --daemon.
            readiness = daemon.daemonize(
                chdir=os.getcwd() if settings["chdir"] else "/",
                stdout=error_log_path,
                stderr=error_log_path,
                wait=True,
                # The daemon's own umask (0022) unless --umask set one: the daemon keeps it.
                **({"umask": settings["umask"]} if settings["umask"] is not None else {}),
            )
        except daemon.DaemonError as exc:
            _close_listeners(listeners, unix_paths)
            raise UsageError(str(exc)) from None
    code = 1
    failure = None
    try:
        if pid_file is not None:
            try:
                pid_file.create()
            except daemon.PidFileError as exc:
                raise UsageError(str(exc)) from None
        code, failure = _run_master(args.app, application, listeners, settings, patch, logs, ssl_context, readiness, notes)
        return code
    except UsageError as exc:
        code, failure = EXIT_USAGE, "greenserve: error: %s" % exc
        raise
    finally:
        _close_listeners(listeners, unix_paths)
        if pid_file is not None:
            pid_file.remove()
        if readiness is not None:
            # Said last, once the daemon cleaned up: the launcher's caller may start again at
            # once. A no-op when a worker has served (readiness.ready() was said).
            readiness.failed(code, failure or _daemon_failure(code, settings["error_log"]))


def _systemd_sockets(args, settings):
    """The sockets of systemd socket activation (LISTEN_FDS for our pid), or []."""
    from greenserve import listeners

    try:
        sockets = listeners.systemd_listen_fds()
    except listeners.ListenerError as exc:
        raise UsageError(str(exc)) from None
    if sockets and settings["reuse_port"]:
        for sock in sockets:
            sock.detach()
        raise UsageError("--reuse-port cannot be used with systemd socket activation: systemd owns the sockets")
    return sockets


def patch_text(patch):
    """How the startup log and --check-config name a patch spec."""
    if patch == "all":
        return "all (patch_all)"
    if patch == "none":
        return "off (--no-monkey-patch)"
    return "%s (--patch)" % ", ".join(patch)


def _worker_count(settings):
    return settings["workers"] or os.cpu_count() or 1


def _open_logs(settings):
    """The error and access logs, or a UsageError naming the path or format that does not work."""
    from greenserve import accesslog, errorlog

    try:
        error_log = errorlog.for_target(settings["error_log"], settings["log_level"])
    except OSError as exc:
        raise UsageError("--error-log %s: %s" % (settings["error_log"], exc.strerror)) from None
    try:
        access_log = accesslog.for_target(settings["access_log"], settings["access_log_format"])
    except OSError as exc:
        raise UsageError("--access-log %s: %s" % (settings["access_log"], exc.strerror)) from None
    except ValueError as exc:
        raise UsageError("--access-log-format: %s" % exc) from None
    return error_log, access_log


def _load_certificate(settings):
    from greenserve.server import make_ssl_context

    certfile, keyfile = settings["certfile"], settings["keyfile"]
    try:
        return make_ssl_context({"certfile": certfile, "keyfile": keyfile})
    except (OSError, ValueError) as exc:
        # OpenSSL's own words ("[SSL] PEM lib (_ssl.c:3926)") do not say which file lacks what.
        raise UsageError(_certificate_problem(certfile, keyfile) or (
            "cannot load the certificate %s%s: %s" % (certfile, " with key %s" % keyfile if keyfile else "", exc)
        )) from None


def _certificate_problem(certfile, keyfile):
    """What is missing from the PEM files, in words, or None when both hold what they should."""
    def pem(path):
        try:
            with open(path, "rb") as pem_file:
                return pem_file.read(1 << 20)
        except OSError:
            return b""

    if b"-----BEGIN CERTIFICATE-----" not in pem(certfile):
        return "--certfile %s holds no PEM certificate (a -----BEGIN CERTIFICATE----- block)" % certfile
    if keyfile is None and b"PRIVATE KEY-----" not in pem(certfile):
        return "the certificate file %s holds no private key: give --keyfile KEYFILE" % certfile
    if keyfile is not None and b"PRIVATE KEY-----" not in pem(keyfile):
        return "--keyfile %s holds no PEM private key (a -----BEGIN PRIVATE KEY----- block)" % keyfile
    return None


def _close_listeners(listeners, unix_paths):
    for listener in listeners:
        listener.close()
    for path in unix_paths:
        try:
            os.unlink(path)
        except OSError:
            pass


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


def _run_master(spec, application, listeners, settings, patch, logs, ssl_context, readiness=None, notes=()):
    """Fork the workers and watch them (process.arbiter) until a signal stops the master.

    Returns the exit code, and the one-line error of the worker that stopped the master, if one did.
    """
    from greenserve import listeners as listening
    from greenserve.process import arbiter, worker

    error_log, access_log = logs
    workers = _worker_count(settings)
    options = worker.WorkerOptions(
        patch=patch,
        resolver=settings["resolver"],
        loop=settings["loop"],
        user=settings["user"],
        group=settings["group"],
        graceful_timeout=settings["graceful_timeout"],
        timeout=settings["timeout"],
        max_requests=settings["max_requests"],
        max_requests_jitter=settings["max_requests_jitter"],
        max_blocking_time=settings["max_blocking_time"],
        log=error_log,
        reopen_logs=lambda: _reopen_logs(logs),
    )

    reuse_port = settings["reuse_port"]
    served = []  # this worker's listeners: the master's, or with --reuse-port its own
    heartbeat = []  # this worker's pipe to the master

    def refuse(message):
        # In a worker: the one-line error on its standard error (the terminal, or the error log
        # of a daemon), and to the master, whose --daemon launcher prints it.
        line = "greenserve: error: %s" % message
        sys.stderr.write(line + "\n")
        arbiter.tell_master(heartbeat[0], line)
        raise SystemExit(arbiter.EXIT_USAGE) from None

    def worker_main(heartbeat_fd):
        # With --preload the master said it, having patched before the import.
        options.warn_late_patching = application is None and master.forked == 0
        heartbeat[:] = [heartbeat_fd]
        served[:] = listeners
        if reuse_port:
            # Before worker.serve() drops privileges (see listeners.worker_listener).
            try:
                served[:] = [listening.worker_listener(sock, settings["backlog"]) for sock in listeners]
            except OSError as exc:
                refuse("--reuse-port: a worker cannot listen: %s" % listening.reason(exc))
            for sock in listeners:
                sock.close()  # the master's placeholder: the master keeps its own copy
        return worker.serve(heartbeat_fd, boot, options)

    def boot():
        # In the worker, after gevent's reinit and patching (process.worker): import, then serve.
        app = application
        if app is None:
            try:
                app = load_app(spec)
            except UsageError as exc:
                refuse(exc)
            except BaseException:
                print_app_traceback()
                raise SystemExit(arbiter.EXIT_BOOT_ERROR) from None
        servers = _make_servers(app, served, settings, logs, ssl_context)
        for server in servers:
            server.private_queue = reuse_port
        from greenserve.process.patching import library_warnings

        for _subject, sentence in library_warnings():
            error_log.warning("worker pid %d: %s" % (os.getpid(), sentence))
        return servers

    def on_ready():
        ssl = ssl_context is not None
        for level, note in notes:
            getattr(error_log, level)(note)
        for listener in listeners:
            error_log.info(
                "greenserve %s listening on %s%s"
                % (__version__, listening.url(listener, ssl), " (a socket per worker: --reuse-port)" if reuse_port else "")
            )
        error_log.info(
            "master pid %d, %d worker(s); gevent monkey-patching: %s; hot path: %s"
            % (os.getpid(), workers, patch_text(patch), hot_path())
        )
        if readiness is not None:
            readiness.ready()

    master = arbiter.Arbiter(
        worker_main,
        workers=workers,
        timeout=settings["timeout"],
        graceful_timeout=settings["graceful_timeout"],
        log=error_log,
        on_ready=on_ready,
        reopen_logs=lambda: _reopen_logs(logs),
        close_in_child=[readiness] if readiness is not None else (),
    )
    code = master.run()
    if code == 0:
        error_log.info("stopped")
    return code, master.failure


def _make_servers(application, listeners, settings, logs, ssl_context):
    from gevent.pool import Pool

    from greenserve.server import WSGIServer
    from greenserve.settings import SETTINGS_BY_NAME

    error_log, access_log = logs
    api_settings = {name: value for name, value in settings.items() if SETTINGS_BY_NAME[name].api}
    ssl_args = {"ssl_context": ssl_context} if ssl_context is not None else {}
    pool = Pool(settings["worker_connections"])
    # PEP 3333: true when another process may serve the same application. Decided by the
    # worker count at start: a master started with one worker and grown by TTIN still says False.
    environ = {"wsgi.multiprocess": _worker_count(settings) > 1}
    return [
        WSGIServer(
            listener, application, spawn=pool, log=access_log, error_log=error_log, environ=environ,
            **ssl_args, **api_settings
        )
        for listener in listeners
    ]


def _reopen_logs(logs):
    for log in logs:
        reopen = getattr(log, "reopen", None)
        if reopen is not None:
            reopen()

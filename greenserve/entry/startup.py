"""The one pre-flight of a start: the steps from a loaded Config to process.master, in order, for every front door.

The ``greenserve`` command (``entry.cli``), ``greenserve.run()`` (``entry.run``, and through it
the PasteDeploy runner's ``workers``) and the PasteDeploy runner's one process (``entry.paste``)
each make a ``Startup`` of their Config and walk its steps, so that the same settings get the
same checks, in the same order, and the same one-line refusals:

 1. check           settings that cannot go together (``Config.check``), told of systemd's sockets
 2. environment     ``raw_env`` set, before the hooks, ``--preload`` and the application run
 3. paths           the files and directories named exist; made absolute (not relative to --chdir)
 4. directory       ``--chdir``; the current directory first on ``sys.path``; ``--static``'s
                    directories exist, made absolute (relative to --chdir)
 5. umask           before the log files are made; the workers inherit it
 6. logs            the error log (syslog, ``--log-config``), and the command's access log
 7. gevent          ``--patch``, ``--resolver`` and ``--loop`` checked and chosen
 8. hooks           the master's server hooks imported (after --chdir, where the app's modules are)
 9. certificate     the command's TLS context, from the settings or the ssl_context hook
10. loader_warnings what the config loader had to say
    (``greenserve check`` stops here: it binds and forks nothing)
11. accounts        ``--user``, ``--group`` and ``--unix-socket-group`` exist
12. pid_file        ``--pid`` names no running process
13. open_files      the soft open-file limit raised for ``--worker-connections``
14. warnings        settings that go together but probably not as meant
15. listen          an old master's sockets (SIGUSR2), systemd's, or ``--bind``'s
16. capture_output  standard output and error into the error log
17. prometheus      ``--prometheus-multiproc-dir`` emptied, before an import of prometheus_client
18. systemd         NOTIFY_SOCKET taken out of the environment (of the workers, of --preload's import)

A front door skips only a step that means nothing there (``RUN``, ``ONE_PROCESS``); what it
does after the walk (the command's --preload and --daemon) is its own. Each step is a no-op
when the Config does not ask for it.

A refusal is one line: a ``StartupError`` (a ``SettingError``, naming the setting), or the
``ListenerError`` or ``HookError`` of the listeners and the hooks (``refusals()``); the
command prints it after ``greenserve: error:`` and exits 2, ``run()`` raises it, the paste
runner says it as its other mistakes. A hook or an application that raised is its traceback
and a ``BootError`` (the command's exit code 3). A failed step closes what the walk bound.
"""

import importlib
import os
import sys

from greenserve.entry import configfile
from greenserve.settings import SettingError


class StartupError(SettingError):
    """A start refused before anything runs: one line, the command's (``setting``/``reason``:
    the setting it is about and why, when it is one setting's)."""


class BootError(Exception):
    """A hook or the application raised while the start ran; its traceback is printed already.
    The command exits 3."""


def refusals():
    """The exceptions a walk refuses a start with: one line each, nothing started."""
    from greenserve.listeners import ListenerError
    from greenserve.process.hooks import HookError

    return (SettingError, ListenerError, HookError)


def _refused(setting, reason, shown=None):
    """A StartupError said as the command says it: ``--flag[ VALUE]: reason``."""
    flag = "--" + setting.replace("_", "-")
    return StartupError("%s: %s" % (flag if shown is None else "%s %s" % (flag, shown), reason),
                        setting=setting, reason=reason)


# --- the steps, in order ---------------------------------------------------------------------------


def check(start):
    """Settings that cannot go together; systemd's sockets (socket activation) replace --bind."""
    from greenserve import listeners

    start.config.check(systemd_sockets=listeners.systemd_socket_count())


def environment(start):
    """raw_env, in this process's environment: the hooks, --preload and every worker see it."""
    from greenserve.process.master import set_environment

    set_environment(start.config)  # before the hooks are imported, as gunicorn's Arbiter.setup


def paths(start):
    """The files and directories the settings name exist, and are absolute: relative to where the
    start was typed, not to --chdir's directory (or a daemon's /, where SIGHUP reads again)."""
    config = start.config
    for name in configfile.FILE_SETTINGS:
        path = getattr(config, name)
        if path is not None:
            if not os.path.isfile(path):
                raise _refused(name, "no such file: %s" % path)
            config.update(**{name: os.path.abspath(path)})
    if config.control_socket is not None:
        config.update(control_socket=os.path.abspath(config.control_socket))
    if isinstance(config.log_config, str):  # not gunicorn's logconfig_dict, a dict
        config.update(log_config=os.path.abspath(config.log_config))
    for directory in config.reload_dir:
        if not os.path.isdir(directory):
            raise _refused("reload_dir", "no such directory: %s" % directory)
    config.update(
        reload_dir=[os.path.abspath(path) for path in config.reload_dir],
        reload_extra_file=[os.path.abspath(path) for path in config.reload_extra_file],
    )


def directory(start):
    """--chdir, then the current directory first on sys.path (like gunicorn: it is importable)."""
    config = start.config
    if config.chdir:
        try:
            os.chdir(config.chdir)
        except OSError as exc:
            raise _refused("chdir", exc.strerror, shown=config.chdir) from None
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    if config.static:
        # Relative to --chdir's directory (where the application's files are), made absolute
        # for the workers (a daemon's are in /).
        from greenserve.static import SettingsError, check_directories

        try:
            config.update(static=check_directories(config.static))
        except SettingsError as exc:
            raise StartupError(str(exc), setting="static", reason=str(exc)) from None


def umask(start):
    """--umask, before the log files are made; the workers inherit it."""
    if start.config.umask is not None:
        os.umask(start.config.umask)


def logs(start):
    """The error log (through ``logging`` with syslog or --log-config) and, for a front door whose
    servers write it, the access log; unless the front door brought its own log (run(log=...))."""
    if start.logs[0] is not None:
        return
    from greenserve.observe import errorlog

    config = start.config
    error_log = access_log = None
    said = []
    if config.logs_through_logging():
        from greenserve.observe import logconfig

        try:
            error_log, access_log, said = logconfig.configure(config)
        except logconfig.LogConfigError as exc:
            raise StartupError(str(exc)) from None
    # What --log-config left without a handler stays --error-log's and --access-log's file,
    # as gunicorn's logs do.
    if error_log is None:
        try:
            error_log = errorlog.for_target(config.error_log, config.log_level)
        except OSError as exc:
            raise _refused("error_log", exc.strerror, shown=config.error_log) from None
    if access_log is None and config.access_log is not None and start.access_log:
        access_log = _file_access_log(config)
    start.logs = (error_log, access_log)
    start.opened_logs = True
    for warning in said:
        error_log.warning(warning)


def gevent(start):
    """--patch, --resolver and --loop: a bad choice is one line now, not a failure in every worker."""
    from greenserve.process import patching

    config = start.config
    try:
        patching.spec_of(config)
    except ValueError as exc:
        raise StartupError(str(exc), setting="patch") from None
    try:
        patching.configure_gevent(resolver=config.resolver, loop=config.loop)
    except (ValueError, RuntimeError) as exc:
        raise StartupError(str(exc)) from None


def hooks(start):
    """The server hooks; after --chdir, so that their modules are found where the application's are."""
    from greenserve.process.hooks import Hooks

    start.hooks = Hooks(start.config, start.logs[0], start.view)  # HookError: a string that does not resolve


def certificate(start):
    """The command's TLS context (``tls.ServerCertificate``, renewed by process.master on SIGHUP).

    Made from the TLS settings, or by the ssl_context hook, which is given gunicorn's arguments
    (the config, and a factory of the default context); on SIGHUP the hook runs again with the
    files read anew.
    """
    if not start.config.certfile:
        return
    import ssl

    from greenserve import tls

    hooks = start.hooks

    def factory(config):
        # Decided at each call: a SIGHUP may read a config file that adds or removes the hook.
        if hooks["ssl_context"] is None:
            return tls.default_ssl_context(config)
        context = _starting_hook(hooks, "ssl_context", config, lambda: tls.default_ssl_context(config))
        if not isinstance(context, ssl.SSLContext):
            raise _refused("ssl_context", "the hook returned %s, not an ssl.SSLContext" % type(context).__name__)
        return context

    try:
        start.certificate = tls.ServerCertificate(start.config, factory=factory)
    except tls.TLSError as exc:
        raise StartupError(str(exc)) from None


def loader_warnings(start):
    """What the config loader warned of (gunicorn settings that mean nothing here, ...)."""
    if start.loaded is not None:
        for warning in start.loaded.warnings:
            start.logs[0].warning(warning)


def accounts(start):
    """The user, group and socket group named: a typo is one line now, not a worker boot loop."""
    config = start.config
    if config.user is not None or config.group is not None:
        from greenserve.process import daemon  # here: not in the RSS of a master without --user

        try:
            daemon.resolve_ids(config.user, config.group)
        except ValueError as exc:
            setting = "user" if config.user is not None and "user" in str(exc) else "group"
            raise StartupError("--user/--group: %s" % exc, setting=setting, reason=str(exc)) from None
    if config.unix_socket_group is not None:
        from greenserve import listeners

        listeners.unix_socket_gid(config.unix_socket_group)  # whatever --bind says; ListenerError


def pid_file(start):
    """The --pid file to write once the master runs; refused when it names a running process."""
    config = start.config
    if not config.pid:
        return
    from greenserve.process import daemon

    start.pid_file = daemon.PidFile(config.pid)
    running = daemon.read_pid(start.pid_file.path)
    if running is not None and running != os.getpid() and daemon.is_running(running):
        raise StartupError("--pid %s names a running process (pid %d): is greenserve already running?"
                           % (config.pid, running), setting="pid")


def open_files(start):
    """The soft open-file limit, raised so that a worker can hold --worker-connections sockets."""
    note = raise_open_file_limit(start.config.worker_connections)
    if note:
        start.notes.append(("warning", note))


def warnings(start):
    """Settings that go together but probably not as meant, said with the startup lines."""
    start.notes.extend(("warning", warning) for warning in start.config.warnings())


def listen(start):
    """The listening sockets: bound before the application is imported ("address already in use"
    should not wait for a slow import). The old master's sockets (a binary upgrade) and systemd's
    replace --bind, as in gunicorn."""
    from greenserve import listeners

    config = start.config
    sockets = listeners.upgrade_listen_fds()
    if sockets:
        # A new master of a binary upgrade (process.upgrade): the old master's sockets, its
        # unix socket files included (removed by whichever master is the last to stop).
        start.notes.append(("info", "serving the %d socket(s) of the old master (SIGUSR2: a binary upgrade)"
                            % len(sockets)))
        start.sockets = sockets
        # (A unix socket's name is its path, a str; Linux's abstract names are bytes, TCP's a tuple.)
        start.unix_paths = [name for name in (sock.getsockname() for sock in sockets) if isinstance(name, str) and name]
        return
    sockets = listeners.systemd_listen_fds()
    if sockets:
        bind_given = start.loaded is None or start.loaded.sources["bind"] != configfile.DEFAULT
        start.notes.append((
            "info",
            "serving the %d socket(s) systemd passed (LISTEN_FDS)%s"
            % (len(sockets), "; --bind %s ignored" % " ".join(config.bind) if bind_given else ""),
        ))
        start.sockets = sockets
        return
    start.sockets, start.unix_paths, said = listeners.bind_all(config)
    start.notes.extend(("warning", warning) for warning in said)


def capture_output(start):
    """--capture-output: from here (after the start's own refusals) print() lands in the error log."""
    if start.config.capture_output:
        from greenserve.observe import logconfig

        logconfig.capture_output(start.config.error_log)


def prometheus(start):
    """--prometheus-multiproc-dir emptied: before --preload's import, as prometheus_client picks its
    mode when imported."""
    path = start.config.prometheus_multiproc_dir
    if path is not None:
        from greenserve.observe.metrics import prepare_multiprocess_dir

        try:
            prepare_multiprocess_dir(path)
        except ValueError as exc:
            raise _refused("prometheus_multiproc_dir", str(exc), shown=path) from None


def systemd(start):
    """NOTIFY_SOCKET, taken out of the environment before --preload's import and the forks."""
    from greenserve.process.master import systemd_notifier

    start.systemd = systemd_notifier()


STEPS = (
    check, environment, paths, directory, umask, logs, gevent, hooks, certificate, loader_warnings,
    accounts, pid_file, open_files, warnings, listen, capture_output, prometheus, systemd,
)
STEP_NAMES = tuple(step.__name__ for step in STEPS)

# What a front door leaves out. run(): the factory's server makes its own TLS context.
RUN = ("certificate",)
# A server in this process, no master (the paste runner's one process): the checks and the limit.
ONE_PROCESS = tuple(name for name in STEP_NAMES if name not in ("check", "accounts", "open_files", "warnings"))


class Startup:
    """One start: its Config, what the steps made of it, and how far the walk has come.

    ``loaded``: the config loader's ``Loaded`` (its warnings; where ``bind`` came from), if the
    Config came from one. ``log``: the front door's own error log (else the ``logs`` step opens
    the settings'). ``access_log``: whether the front door's servers write the settings' access
    log (the command's do). ``skip``: the names of the steps this front door leaves out.
    ``view``: what the hooks' ``cfg`` is made of the Config (``gunicorn_cfg.hook_view``).
    """

    def __init__(self, config, loaded=None, log=None, access_log=False, skip=(), view=None):
        self.config = config
        self.loaded = loaded
        self.access_log = access_log
        self.skip = frozenset(skip)
        self.view = view
        self.logs = (log, None)  # (error log, access log)
        self.opened_logs = False  # by the logs step: SIGUSR1 reopens them
        self.hooks = None
        self.certificate = None  # a tls.ServerCertificate (the command with --certfile)
        self.pid_file = None  # a daemon.PidFile, written by write_pid()
        self.notes = []  # (level, line), said once a worker serves
        self.sockets, self.unix_paths = [], []
        self.systemd = None
        self._next = 0

    @property
    def error_log(self):
        return self.logs[0]

    def through(self, last=None):
        """Take the steps from where the walk stopped through the one named ``last`` (default:
        to the end). A step that fails closes what the walk bound, and its exception propagates."""
        end = len(STEPS) if last is None else STEP_NAMES.index(last) + 1
        while self._next < end:
            step = STEPS[self._next]
            self._next += 1
            if step.__name__ in self.skip:
                continue
            try:
                step(self)
            except BaseException:
                self.close()
                raise

    def write_pid(self):
        """The --pid file, written with this process's pid (after --daemon detached: the daemon's)."""
        if self.pid_file is None:
            return
        from greenserve.process import daemon

        try:
            self.pid_file.create()
        except daemon.PidFileError as exc:
            raise StartupError(str(exc), setting="pid") from None

    def reopen_logs(self):
        """SIGUSR1: the log files the logs step opened, reopened (logrotate moved them)."""
        for log in self.logs:
            reopen = getattr(log, "reopen", None)
            if reopen is not None:
                reopen()

    def close(self):
        """The listening sockets closed, the unix socket files and the pid file removed."""
        from greenserve import listeners

        listeners.close_all(self.sockets, self.unix_paths)
        if self.pid_file is not None:
            self.pid_file.remove()


def _file_access_log(config):
    from greenserve.observe import accesslog  # only then: compiled, ~0.15 MB of the master's RSS

    try:
        return accesslog.for_target(config.access_log, config.access_log_format)
    except OSError as exc:
        raise _refused("access_log", exc.strerror, shown=config.access_log) from None
    except ValueError as exc:
        raise _refused("access_log_format", str(exc)) from None


def _starting_hook(hooks, name, *args):
    """A hook that runs at start; one that raises ends the start with its traceback (BootError)."""
    from greenserve.process.arbiter import StopMaster
    from greenserve.process.hooks import HookRaised

    try:
        return hooks.call_starting(name, *args)
    except HookRaised as exc:
        print_app_traceback(exc.__cause__)
        raise BootError(str(exc)) from None
    except StopMaster as exc:  # it created a gevent hub
        raise StartupError(str(exc)) from None


# Descriptors a worker holds besides its connections: listeners, logs, the heartbeat pipe, the
# loop's own, and what the application opens (files, database and outbound connections).
_SPARE_FILES = 256


def raise_open_file_limit(worker_connections):
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

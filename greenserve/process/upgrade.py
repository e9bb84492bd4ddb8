"""Binary upgrade on SIGUSR2: the master starts a new master of the new code, which serves on the same listening sockets.

As gunicorn's and nginx's (gunicorn's docs, "Upgrading to a new binary on the fly"):

  kill -USR2 $(cat app.pid)           the master forks and re-executes the command it was started
                                      with (the same argv, environment and directory: a fresh
                                      interpreter, so the new greenserve, the new packages, the
                                      new application), handing it the listening sockets; its pid
                                      file becomes app.pid.oldbin, the new master writes app.pid.
                                      Both masters' workers accept from the same sockets: no
                                      connection is refused.
  kill -WINCH $(cat app.pid.oldbin)   the old master's workers stop gracefully; it stays, idle.
  kill -TERM $(cat app.pid.oldbin)    it ends: the upgrade is done.
  or, to roll back: kill -HUP $(cat app.pid.oldbin) (its workers again), then kill -QUIT
  $(cat app.pid): the new master ends, and the old one, which reaps it, takes app.pid back.

The sockets go as descriptors in ``listeners.UPGRADE_FDS`` (gunicorn's GUNICORN_FD), the old
master's pid in ``OLD_MASTER`` (gunicorn's GUNICORN_PID); the new master does not --daemon (it
stays the old one's child, so that the old one learns of its end) and takes the sockets
through ``listeners.upgrade_listen_fds`` (the home of inherited descriptors) instead of binding.

One upgrade at a time: a USR2 while this master's new master runs, or to a new master whose old
one still runs, is refused with one line. A new master that cannot start (its code does not
import, its settings are refused) exits; the old master reaps it, says so, takes its pid file
back and serves on (its workers started again if WINCH had stopped them).

Only the ``greenserve`` command re-executes itself: it calls ``remember()`` first thing, before
its settings (raw_env) or systemd's variables change the environment. Under systemd see
``process.systemd`` (MAINPID=, NotifyAccess=all) and docs/production.md.
"""

import os
import signal
import sys

from greenserve import listeners
from greenserve.process import arbiter as arbiter_module

# The old master's pid, in the new master's environment (taken out at its start).
OLD_MASTER = "GREENSERVE_UPGRADE_FROM"
# A prefix: GREENSERVE_UPGRADE_FD_METRICS=N is another socket the old master hands on by name
# (hand_on, take): --metrics-bind's, which the new master could not bind while the old one holds it.
HANDED = "GREENSERVE_UPGRADE_FD_"
OLDBIN = ".oldbin"  # the old master's pid file: PIDFILE.oldbin, as nginx's and gunicorn's docs
# What the new master must not take from the environment it is given: systemd's socket
# activation is for the process systemd started (its sockets come in UPGRADE_FDS), and
# WATCHDOG_PID names the old master (the new one pings the watchdog from its loop too).
_NOT_INHERITED = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "WATCHDOG_PID", OLD_MASTER, listeners.UPGRADE_FDS)


class Launch:
    """How the command was started: what a new master is executed with; in a new master, the
    sockets its old master handed on by name (``handed``: name -> descriptor)."""

    def __init__(self, argv, cwd, environ, handed=None):
        self.argv = argv
        self.cwd = cwd
        self.environ = environ
        self.handed = handed or {}


def remember(environ=None):
    """At the command's start: ``(Launch, the old master's pid or None)``. The pid (this is a new
    master) and the sockets' variables are left out of the Launch; the pid and the named sockets
    are taken out of the environment, so that neither the application nor a later USR2 sees them."""
    environ = os.environ if environ is None else environ
    text = environ.pop(OLD_MASTER, "")
    handed = {}
    for name in [name for name in environ if name.startswith(HANDED)]:
        fd = environ.pop(name)
        if fd.isdigit():
            handed[name[len(HANDED):].lower()] = int(fd)
    launch = Launch(list(sys.orig_argv), _start_directory(environ),
                    {k: v for k, v in environ.items() if k not in _NOT_INHERITED}, handed)
    return launch, int(text) if text.isdigit() else None


def _start_directory(environ):
    """The directory the command was started in, as the shell named it: $PWD when it is the same
    directory as getcwd()'s (as gunicorn's util.getcwd). A deploy that points a symlink
    (/srv/app/current) at each new release must have the new master start in the new release,
    not in the old one that getcwd() resolved the link to. None if there is none (removed)."""
    try:
        cwd = os.getcwd()
    except OSError:
        return None
    shown = environ.get("PWD")
    if shown:
        try:
            here, there = os.stat(cwd), os.stat(shown)
        except OSError:
            return cwd
        if (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino):
            return shown
    return cwd


class Upgrade:
    """A master's part in binary upgrades: it starts a new master on SIGUSR2, parks its workers
    on SIGWINCH, and reaps its new master (``child``); or, as a new master, it knows its old
    master (``old_master``) while that one lives.

    ``sockets``: the master's listening sockets; ``pid_file``: its ``daemon.PidFile``, or None;
    ``log``: the error log; ``pre_exec()``: runs in the forked child before it executes (the
    pre_exec hook).
    """

    def __init__(self, launch, sockets, pid_file, log, old_master=None, pre_exec=None):
        self.launch = launch
        self.sockets = sockets
        self.pid_file = pid_file
        self.log = log
        self.old_master = old_master
        self.pre_exec = pre_exec
        self.child = None  # the new master this one started, until it is reaped
        self.extra = {}  # name -> a socket of the master's own to hand on too (hand_on)
        self.keep_files = []
        self.parked = None  # the worker count before SIGWINCH stopped them, until HUP or a rollback
        self.said_winch = False

    def predecessor(self):
        """The old master's pid while it lives (this is its new master: its child), else None."""
        if self.old_master is not None and os.getppid() != self.old_master:
            self.old_master = None  # it ended: the new master is adopted (by init, or a subreaper)
        return self.old_master

    def hand_on(self, name, sock, keep_file=None):
        """Hand ``sock`` (a listening socket of the master's own, --metrics-bind's) to a new master
        too, which takes it by ``name`` instead of binding its address (held by this one).
        ``keep_file()`` runs when this master ends while another serves the socket: its unix
        socket file is that one's to remove."""
        self.extra[name] = sock
        if keep_file is not None:
            self.keep_files.append(keep_file)

    def ending(self):
        """This master is about to close its sockets: another master serving them keeps their files."""
        if self.shares_listeners():
            for keep_file in self.keep_files:
                keep_file()

    def take(self, name, spec):
        """In a new master: the socket its old master handed on as ``name`` (a ``_socket.socket``,
        not inherited further), or None: none was, or it is not at ``spec``'s address (a
        listeners.bind_spec: the setting changed), and the new master binds its own."""
        fd = self.launch.handed.pop(name, None)
        if fd is None:
            return None
        import _socket

        try:
            sock = _socket.socket(fileno=fd)
        except OSError as exc:
            self.log.warning("the old master's %s socket (descriptor %d) cannot be used: %s; binding it anew"
                             % (name, fd, exc.strerror))
            return None
        if not _at(sock, spec):
            sock.close()  # the old master still serves it; this one binds the new address
            return None
        os.set_inheritable(fd, False)
        sock.setblocking(False)
        return sock

    def close_untaken(self):
        """In a new master, once it has taken what it uses: the old master's other sockets closed
        (a setting the new settings dropped), or connections would wait on them for ever."""
        while self.launch.handed:
            _, fd = self.launch.handed.popitem()
            try:
                os.close(fd)
            except OSError:
                pass

    def shares_listeners(self):
        """Another master serves the same sockets (and unix socket files): leave them to it."""
        return self.child is not None or self.predecessor() is not None

    def on_signal(self, arbiter, signum):
        if signum == signal.SIGUSR2:
            self.begin(arbiter)
        else:
            self.park(arbiter)

    # --- the old master ---

    def begin(self, arbiter):
        """SIGUSR2: fork and execute the new master, unless an upgrade is in progress."""
        refusal = self._refusal()
        if refusal is not None:
            self.log.warning("SIGUSR2 ignored: %s" % refusal)
            return
        oldbin = None
        if self.pid_file is not None:
            from greenserve.process.daemon import PidFileError  # (imported already: there is a pid file)

            path, oldbin = self.pid_file.path, self.pid_file.path + OLDBIN
            try:
                self.pid_file.rename(oldbin)
            except PidFileError as exc:
                self.log.warning("SIGUSR2 ignored: %s" % exc)
                return
        try:
            self.child = arbiter_module.fork_child(self._execute)
        except OSError as exc:
            self.log.error("SIGUSR2: cannot fork the new master: %s; this master serves on" % exc.strerror)
            self._take_pid_file_back()
            return
        if arbiter.systemd is not None:
            arbiter.systemd.hand_over()
        self.log.info(
            "SIGUSR2: upgrading: the new master (pid %d) starts with the listening sockets%s; then "
            "kill -WINCH %d stops this master's workers, kill -TERM %d ends it (or QUIT the new one to roll back)"
            % (self.child, "; it writes %s, this one's pid is in %s" % (path, oldbin) if oldbin else "",
               os.getpid(), os.getpid())
        )

    def _refusal(self):
        if self.child is not None:
            return ("an upgrade is in progress: the new master (pid %d) runs; end it (TERM: a rollback) or "
                    "this master (WINCH, then TERM) first" % self.child)
        old_master = self.predecessor()
        if old_master is not None:
            return ("this is the new master of an upgrade, and the old master (pid %d) still runs: "
                    "end it first (kill -TERM %d)" % (old_master, old_master))
        if self.pid_file is not None:
            from greenserve.process import daemon

            oldbin = self.pid_file.path + OLDBIN
            try:
                pid = daemon.read_pid(oldbin)
            except (OSError, ValueError):  # unreadable, or no pid in it: no master to wait for
                pid = None
            if pid is not None and pid != os.getpid() and daemon.is_running(pid):
                return "%s names a running master (pid %d): an upgrade is in progress; end it first" % (oldbin, pid)
        return None

    def _execute(self):
        """In the forked child: the command again, with the sockets; returns only if it fails."""
        environ = dict(self.launch.environ)
        fds = [sock.fileno() for sock in self.sockets]
        for fd in fds:
            os.set_inheritable(fd, True)
        environ[listeners.UPGRADE_FDS] = ",".join(str(fd) for fd in fds)
        for name, sock in self.extra.items():
            if sock.fileno() >= 0:
                os.set_inheritable(sock.fileno(), True)
                environ[HANDED + name.upper()] = str(sock.fileno())
        environ[OLD_MASTER] = str(os.getppid())
        if self.pre_exec is not None:
            self.pre_exec()
        try:
            if self.launch.cwd is not None:
                os.chdir(self.launch.cwd)
            os.execve(sys.executable, self.launch.argv, environ)
        except OSError as exc:
            sys.stderr.write("greenserve: error: SIGUSR2: cannot execute %s in %s: %s\n"
                             % (sys.executable, self.launch.cwd, exc.strerror))
        return 1

    def park(self, arbiter):
        """SIGWINCH: this master's workers stop gracefully, while its new master serves; it stays
        (HUP starts them again: a rollback). A terminal's resize sends SIGWINCH too: without a new
        master it is ignored."""
        if self.child is None:
            if not self.said_winch:
                self.said_winch = True
                self.log.info("SIGWINCH ignored: no new master runs (SIGUSR2 starts one); a terminal's "
                              "resize sends it too")
            return
        if self.parked is None:
            self.parked = arbiter.target
        self.log.info("SIGWINCH: this master's workers stop gracefully; the new master (pid %d) serves. "
                      "kill -TERM %d ends this master; kill -HUP %d starts its workers again"
                      % (self.child, os.getpid(), os.getpid()))
        for worker in list(arbiter.workers.values()):
            if worker.signalled is None:
                worker.signalled = signal.SIGTERM
                worker.planned = "SIGWINCH: the new master (pid %d) serves in its place" % self.child
                worker.exit_reason = "scale_down"
                arbiter._kill(worker, signal.SIGTERM)
        arbiter.set_target(0)

    def before_reload(self, arbiter):
        """SIGHUP: the workers that SIGWINCH stopped are started again (the reload's new generation)."""
        if self.parked is not None:
            arbiter.set_target(self.parked)
            self.parked = None

    def reaped(self, arbiter, pid, status):
        """A child that is no worker was reaped: if it is the new master, this one is on its own again."""
        if pid != self.child:
            return
        self.child = None
        code = os.waitstatus_to_exitcode(status)
        if code == 0:
            how = "stopped"
        else:
            how = "%s (its log above says why)" % arbiter_module._describe(code)
        restarted = ""
        if self.parked is not None and arbiter.stopping is None:
            restarted = "; its %d worker(s) start again" % self.parked
            self.before_reload(arbiter)
            arbiter.next_spawn = 0.0
        taken = self._take_pid_file_back()
        (self.log.error if code else self.log.info)(
            "the new master (pid %d) %s: the upgrade is over, this master (pid %d) serves on%s%s"
            % (pid, how, os.getpid(), restarted, "; %s is its pid file again" % taken if taken else "")
        )
        if arbiter.systemd is not None and arbiter.stopping is None:
            arbiter.systemd.take_back("serving: the new master exited, the old one serves on")

    def _take_pid_file_back(self):
        """PIDFILE.oldbin back to PIDFILE; the path, or None (no pid file, or it cannot be moved: said)."""
        if self.pid_file is None or not self.pid_file.path.endswith(OLDBIN):
            return None
        from greenserve.process.daemon import PidFileError

        path = self.pid_file.path[: -len(OLDBIN)]
        try:
            self.pid_file.rename(path)
        except PidFileError as exc:
            self.log.warning("%s; kill -TERM %d still stops this master" % (exc, os.getpid()))
            return None
        return path


def _at(sock, spec):
    """Is ``sock`` bound where the bind spec ``spec`` says (its port, or its unix path)?"""
    address = sock.getsockname()
    if spec[0] == "unix":
        return address == spec[1]
    return spec[0] == "tcp" and isinstance(address, tuple) and spec[2] in (0, address[1])

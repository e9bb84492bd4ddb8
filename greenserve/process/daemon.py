"""Leaving the terminal behind: daemonizing, pid files and dropping root, in an order safe for gevent.

Nothing of gevent is imported here at import time: the ``greenserve`` command daemonizes before
gevent exists, and importing gevent first would give the daemon a hub (and threads) made in
another process. When gevent *is* already there, ``daemonize()`` calls ``gevent.reinit()``.
"""

import fcntl
import grp
import os
import pwd
import sys

__all__ = [
    "DaemonError", "PidFileError", "PidFile", "Readiness", "daemonize", "drop_privileges", "read_pid", "resolve_ids",
]


class DaemonError(RuntimeError):
    """Something the user asked for cannot be done (a missing directory, an unwritable file).

    The message is one line, fit to print after ``greenserve: error:``.
    """


class PidFileError(DaemonError):
    """The pid file cannot be read or written, or names a process that is still running."""


def daemonize(chdir="/", umask=0o022, stdin=os.devnull, stdout=os.devnull, stderr=os.devnull, wait=False):
    """Detach from the terminal and carry on as a daemon; the caller's process exits with 0.

    Step by step: flush ``sys.stdout``/``sys.stderr``; fork, the parent exits; ``os.setsid()``
    (a new session with no controlling terminal); fork again, the first child exits; in the
    daemon (the grandchild), ``gevent.reinit()`` if gevent is imported, ``os.chdir(chdir)``
    unless ``chdir`` is None, ``os.umask(umask)``, and file descriptors 0, 1 and 2 pointed at
    ``stdin`` (read) and ``stdout``/``stderr`` (appended to, created with mode 0o640 less the
    umask; the same path for both shares one descriptor). Returns None, in the daemon only.

    The directory and the three files are checked and opened *before* the first fork, so a
    mistake raises :class:`DaemonError` in the process that called this, while its standard
    error is still the terminal, instead of killing a daemon nobody watches. Relative paths are
    relative to the directory the caller is in, not to ``chdir``.

    greenserve's CLI calls this before anything of gevent exists. If you run your own gevent
    server, you may call it at any time, even after gevent's hub and its threads were made:
    a forked child's event loop, resolver and threadpool do not work until ``gevent.reinit()``
    has run, and this function runs it (it does nothing when there is no hub). Other threads
    do not survive a fork; daemonize before starting any.

    With ``wait=True`` the caller's process does not exit at once: it waits for the daemon to
    say how starting went, and this function returns a :class:`Readiness` (in the daemon) to say
    it with. ``readiness.ready()`` makes the launcher exit 0; ``readiness.failed(code, message)``
    makes it print the message on its standard error (still the terminal) and exit with
    ``code``; a daemon that exits before either makes it exit 1. A shell script, an init script
    or systemd's ``Type=forking`` then learns from the exit status whether the daemon serves.
    """
    if chdir is not None and not (os.path.isdir(chdir) and os.access(chdir, os.X_OK)):
        raise DaemonError("cannot change directory to %s: not a directory we can enter" % chdir)
    fds = _open_std_fds(stdin, stdout, stderr, umask)

    # Whatever sits in Python's buffers now is copied into the daemon, which would write it to
    # its log file instead of where the caller printed it (and twice, if a parent left through
    # sys.exit; os._exit below skips its flush).
    _flush_std_streams()
    status_r = status_w = -1
    if wait:
        status_r, status_w = os.pipe()

    # setsid() fails for a process group leader, which the caller may be (a shell job is); a
    # forked child never is.
    if os.fork() != 0:
        if wait:
            os.close(status_w)
            os._exit(_await_daemon(status_r))
        os._exit(0)
    os.setsid()
    # The session leader could get a controlling terminal back by opening a tty; its child,
    # not a session leader, never can.
    if os.fork() != 0:
        os._exit(0)

    if "gevent" in sys.modules:
        # As soon as possible after the fork, as gevent asks: the loop's fds (epoll, the
        # wake-up pipe) and the threadpool and resolver threads belong to the old process.
        import gevent

        gevent.reinit()

    if chdir is not None:
        # So the daemon keeps no directory busy (an unmount, a deleted release directory).
        os.chdir(chdir)
    os.umask(umask)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds):
        os.close(fd)
    if wait:
        os.close(status_r)
        return Readiness(status_w)
    return None


class Readiness:
    """How a daemon started with ``daemonize(wait=True)`` tells its launcher how starting went.

    Say it once: the first of ``ready()``, ``failed()`` or ``close()`` closes the pipe, and the
    others then do nothing. ``fileno()`` is the pipe's descriptor, which processes the daemon
    forks should close (or the launcher would wait for them too, if the daemon died first).
    """

    def __init__(self, fd):
        self._fd = fd

    def fileno(self):
        return self._fd

    def ready(self):
        """The daemon serves: the launcher exits 0."""
        self._send(_READY)

    def failed(self, code, message=""):
        """The daemon cannot serve: the launcher prints ``message`` (one line, as it is) and exits
        with ``code`` (1 to 255)."""
        code = code if isinstance(code, int) and 0 < code < 256 else 1
        self._send(b"%s%d %s" % (_FAILED, code, " ".join(message.split()).encode("utf-8", "replace")))

    def close(self):
        """Say nothing: the launcher exits 1, as if the daemon had died."""
        self._send(b"")

    def _send(self, data):
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            if data:
                os.write(fd, data)  # far below PIPE_BUF: written whole or not at all
        except OSError:
            pass  # the launcher is gone (killed, or its terminal closed): nobody to tell
        finally:
            os.close(fd)


_READY = b"R"
_FAILED = b"E"


def _await_daemon(fd):
    """In the launcher: the exit status the daemon asked for (1 if it exited without a word)."""
    # One read: the daemon says everything in one write() of less than PIPE_BUF, which arrives
    # whole. Not reading to the end of the pipe: a child the daemon forked without closing the
    # pipe would keep it open long after the daemon spoke.
    data = os.read(fd, 4096)  # EOF (b"") when the daemon exited without a word
    if data == _READY:
        return 0
    if data.startswith(_FAILED):
        code, _, message = data[1:].partition(b" ")
        if message:
            _say(message.decode("utf-8", "replace"))
        return int(code) if code.isdigit() and 0 < int(code) < 256 else 1
    _say("greenserve: error: the daemon exited before it was ready (its error log says why)")
    return 1


def _say(line):
    try:
        os.write(2, (line + "\n").encode("utf-8", "replace"))
    except OSError:
        pass


def _open_std_fds(stdin, stdout, stderr, umask):
    """Open what will become fds 0, 1 and 2; each descriptor returned is 3 or higher."""
    opened = {}  # (absolute path, writing) -> fd: stdout and stderr to one file share one offset
    fds = []
    old_umask = os.umask(umask)  # log files created now get the daemon's umask
    try:
        for role, path, writing in (("stdin", stdin, False), ("stdout", stdout, True), ("stderr", stderr, True)):
            key = (os.path.abspath(path), writing)
            if key not in opened:
                if not writing:
                    flags = os.O_RDONLY
                elif os.path.abspath(path) == os.path.abspath(os.devnull):
                    flags = os.O_WRONLY  # never O_CREAT: a missing /dev/null is not ours to make
                else:
                    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
                try:
                    opened[key] = _open_above_stdio(path, flags, 0o640)
                except OSError as exc:
                    raise DaemonError("cannot open %s file %s: %s" % (role, path, exc.strerror)) from None
            fds.append(opened[key])
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        raise
    finally:
        os.umask(old_umask)
    return fds


def _open_above_stdio(path, flags, mode):
    # A process started with 0, 1 or 2 closed (some supervisors do that) gets one of them back
    # from open(); dup2() onto the others would then close a file we still need.
    fd = os.open(path, flags, mode)
    if fd > 2:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def _flush_std_streams():
    for stream in (sys.stdout, sys.stderr):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            # A closed stream or a reader gone away (``greenserve ... | head``): that output has
            # nowhere to go, and daemonizing must not fail over it.
            pass


def read_pid(path):
    """The pid held in the pid file at ``path``, or None when the file is missing or holds no pid."""
    try:
        with open(path, "rb") as pid_file:
            text = pid_file.read().strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    # isdigit(), not int() alone: int() also takes "+5", " 5 " and "1_000".
    if not text.isdigit():
        return None
    pid = int(text)
    return pid if pid > 0 else None


def is_running(pid):
    """Is there a process with this pid (ours or anyone's)?"""
    # pid must be > 0: kill(0, sig) signals our own process group and kill(-n, sig) another.
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, it is only someone else's
    except OverflowError:
        return False  # larger than any pid the kernel hands out
    return True


class PidFile:
    """A pid file written whole or not at all, and removed only by the process it names.

    Make it before ``daemonize()`` (a relative path is resolved now, before the daemon changes
    directory to "/") and ``create()`` it after (the daemon's pid is not the caller's). As a
    context manager, it is created on entry and removed on exit.
    """

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.pid = None
        self._creator = None

    def create(self, pid=None):
        """Write ``pid`` (default: ours), refusing when the file names another running process.

        A stale file (its process is gone, or it holds no pid) is replaced without a word.
        """
        if pid is None:
            pid = os.getpid()
        try:
            existing = read_pid(self.path)
        except OSError as exc:
            raise PidFileError("cannot read pid file %s: %s" % (self.path, exc.strerror)) from None
        if existing is not None and existing not in (pid, os.getpid()) and is_running(existing):
            raise PidFileError(
                "pid file %s names a running process (pid %d): is greenserve already running?"
                % (self.path, existing)
            )
        _write_atomically(self.path, b"%d\n" % pid)
        self.pid = pid
        self._creator = os.getpid()

    def remove(self):
        """Delete the file if it still holds the pid we wrote; say whether it was deleted.

        A file holding another pid is left alone: a new master may have replaced it (a reload,
        or a second start after this one was thought dead). A forked child of the process that
        created it (a worker) never deletes it, so a worker's exit cannot take the master's file.
        """
        if self.pid is None or os.getpid() != self._creator:
            return False
        try:
            if read_pid(self.path) != self.pid:
                return False
            os.unlink(self.path)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise PidFileError("cannot remove pid file %s: %s" % (self.path, exc.strerror)) from None
        return True

    def rename(self, path):
        """Move the file to ``path`` (a binary upgrade's ``PIDFILE.oldbin``, and back), atomically;
        from then on ``remove()`` removes it there. PidFileError when it cannot be moved."""
        path = os.path.abspath(path)
        try:
            os.replace(self.path, path)
        except OSError as exc:
            raise PidFileError("cannot rename pid file %s to %s: %s" % (self.path, path, exc.strerror)) from None
        self.path = path

    def __enter__(self):
        self.create()
        return self

    def __exit__(self, *exc_info):
        self.remove()


def _write_atomically(path, data):
    # A reader (a monitoring script, `kill $(cat ...)`) sees the old file or the new one, never
    # an empty or half-written one: write a temporary file beside it, then rename over it.
    directory, name = os.path.split(path)
    # A unique name made here rather than by tempfile.mkstemp: importing tempfile costs the
    # master ~0.7 MB of RSS, and a lazy import can fail once privileges are dropped (--user
    # nobody may not read the Python installation's directory).
    temporary = os.path.join(directory, ".%s.%d.%s.tmp" % (name, os.getpid(), os.urandom(6).hex()))
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise PidFileError("cannot write pid file %s: %s" % (path, exc.strerror)) from None
    try:
        with os.fdopen(fd, "wb") as temporary_file:
            temporary_file.write(data)
            temporary_file.flush()
            # Without fsync, a crash soon after the rename can leave an empty file behind it.
            os.fsync(temporary_file.fileno())
            # Made 0o600 (the umask cannot widen it); a pid file is for others to read (monitoring, scripts).
            os.fchmod(temporary_file.fileno(), 0o644)
        os.replace(temporary, path)
    except OSError as exc:
        try:
            os.unlink(temporary)
        except OSError:
            pass  # the error worth reporting is the one below
        raise PidFileError("cannot write pid file %s: %s" % (path, exc.strerror)) from None


def drop_privileges(user=None, group=None):
    """Become ``user`` and ``group`` (names or numeric ids) for good; return ``(uid, gid)``.

    ``group`` defaults to the user's primary group, or to the current group when no user is
    given. Supplementary groups are cleared, then the group and the user set, in that order
    (once the user is set, the group can no longer be changed). Call it after binding ports
    below 1024 and opening files that only root may open. Not running as root, asking for the
    ids we already have does nothing.
    """
    uid, gid = resolve_ids(user, group)
    running_as_root = os.geteuid() == 0
    if not running_as_root and uid == os.getuid() == os.geteuid() and gid == os.getgid() == os.getegid():
        return uid, gid
    try:
        # Cleared first: root's supplementary groups (often including "root") would otherwise
        # survive setgid() and setuid() and keep their file access.
        os.setgroups([])
    except PermissionError:
        if running_as_root:
            raise
        # Not root: we cannot clear them, and setgid()/setuid() below decide whether we may switch.
    try:
        os.setgid(gid)
        os.setuid(uid)
    except PermissionError:
        raise PermissionError(
            "cannot switch to uid %d, gid %d: only root can (running as uid %d)" % (uid, gid, os.geteuid())
        ) from None
    return uid, gid


def resolve_ids(user=None, group=None):
    """The ``(uid, gid)`` that ``drop_privileges(user, group)`` would switch to, switching nothing.

    Raises ValueError for an unknown name, so a command can refuse a typo before it forks.
    """
    if user is None:
        uid, primary_gid = os.getuid(), os.getgid()
    else:
        uid, primary_gid = _resolve_user(user)
    gid = primary_gid if group is None else _resolve_group(group)
    if gid is None:
        raise ValueError("user %r has no entry in the password database: give a group too" % (user,))
    return uid, gid


def _resolve_user(user):
    """(uid, primary gid) for a user name or id; the gid is None for an id with no passwd entry."""
    uid = _as_id(user, "user")
    try:
        entry = pwd.getpwnam(user) if uid is None else pwd.getpwuid(uid)
    except KeyError:
        if uid is None:
            raise ValueError("unknown user %r" % (user,)) from None
        return uid, None  # a bare uid is fine (containers often have no passwd entry for it)
    return entry.pw_uid, entry.pw_gid


def _resolve_group(group):
    gid = _as_id(group, "group")
    if gid is not None:
        return gid
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError("unknown group %r" % (group,)) from None


def _as_id(value, kind):
    """The numeric id in ``value`` (an int or a string of digits), or None for a name."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError("%s must be a name or a numeric id, not %r" % (kind, value))
    if isinstance(value, int):
        if value < 0:
            raise ValueError("%s id must be 0 or more, not %d" % (kind, value))
        return value
    return int(value) if value.isascii() and value.isdigit() else None

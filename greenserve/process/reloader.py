"""``--reload``: a new generation of workers when a source file of the application changes (development).

The workers import the application, not the master, so the master cannot ask Python which files
it is made of: it watches directories instead (the current directory after ``--chdir`` unless
``--reload-dir`` says others, as uvicorn does) for changed ``.py`` files, and the
``--reload-extra-file`` files whatever their kind (gunicorn's reload_extra_files: templates,
.env). A change is a SIGHUP: the arbiter starts new workers, which import the code afresh, and
retires the old ones once the new ones serve. An edit that does not import (a syntax error)
leaves the old workers serving: the new ones print the traceback and are retried until a fixed
edit comes, whose SIGHUP starts a generation that boots.

The watching is watchfiles' (Rust notify: inotify on Linux, FSEvents, kqueue; what uvicorn uses).
Without watchfiles installed it is polling, as gunicorn falls back to when inotify is missing:
the same files (the ``.py`` files under the directories, watchfiles' ignored directories left
out, and the extra files) are stat'ed every ``POLL_INTERVAL``, and a changed size or mtime is a
change. That costs a directory walk a second in the watcher process (~10 ms for 2,000 files),
nothing in the master or the workers; one warning at start says so (``POLLING``). Either way
the watching runs in a small child process of the master, not in a thread of it. The master forks
workers: a fork copies only the forking thread, so a lock that another thread (watchfiles' notify
thread, a thread writing a log line) holds at that moment stays locked forever in the child, and
Python 3.12 warns on every fork of a multi-threaded process for that reason. A child process
leaves the master single-threaded, and tells it of a change in the one way the master already
listens to, SIGHUP; the child logs the change itself, as a worker logs its own lines.
"""

import os
import signal

from greenserve.process.arbiter import _die_with, fork_child

POLLING = (
    "--reload: watchfiles is not installed, so the files are polled every second instead of watched "
    "(inotify): pip install watchfiles for that"
)
# gunicorn's polling reloader looks once a second too.
POLL_INTERVAL = 1.0
# watchfiles' DefaultFilter.ignore_dirs and PythonFilter's extensions: polling watches the files
# that watchfiles would.
_IGNORED_DIRECTORIES = frozenset((
    "__pycache__", ".git", ".hg", ".svn", ".tox", ".venv", ".idea", "node_modules", ".mypy_cache",
    ".pytest_cache", ".hypothesis",
))
_PYTHON_EXTENSIONS = (".py", ".pyx", ".pyd")
# A burst of writes (an editor's save, a git checkout) is one reload: the files are stat'ed again
# this long after a change until nothing more changed, as watchfiles waits 50 ms after a write.
_SETTLE = 0.05


def watchfiles_missing():
    """None when watchfiles can be imported, else the warning that --reload polls (``POLLING``)."""
    import importlib

    try:
        importlib.import_module("watchfiles")  # loads its extension; starts no thread
    except ImportError:
        return POLLING
    return None


def watched(config, cwd):
    """(directories, extra files) that --reload watches, as absolute paths."""
    directories = [os.path.abspath(os.path.join(cwd, path)) for path in config.reload_dir] or [cwd]
    files = [os.path.abspath(os.path.join(cwd, path)) for path in config.reload_extra_file]
    return directories, files


class Watcher:
    """The watcher child process: ``start()`` forks it, ``stop()`` ends it."""

    def __init__(self, config, listeners, log):
        self.directories, self.files = watched(config, os.getcwd())
        self.listeners = listeners
        self.log = log
        self.pid = None
        self._pidfd = None

    def start(self):
        master_pid = os.getpid()
        pid = fork_child(lambda: self._watch(master_pid))
        self.pid = pid
        # The master's loop reaps every child (waitpid(-1)): a pidfd cannot name another process
        # once this one is reaped and its pid reused, where os.kill(pid) could.
        try:
            self._pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):
            self._pidfd = None
        return self

    def stop(self):
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGTERM)
            elif self.pid is not None:
                os.kill(self.pid, signal.SIGTERM)
        except (ProcessLookupError, OSError):
            pass  # gone already (and reaped by the master's loop)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass

    def _watch(self, master_pid):
        # Ctrl-C reaches the whole process group: the master stops, and stops this process.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for sock in self.listeners:
            sock.close()  # held open here, a port would outlive the master
        if not _die_with(master_pid):
            return 0
        try:
            import watchfiles
        except ImportError:
            watchfiles = None
        if watchfiles is not None:
            how, changes = "watching", self._watched_changes(watchfiles)
        else:  # the first look taken before the line is said: an edit right after it is seen
            first = _snapshot(self.directories, self.files)
            how, changes = "polling every %g s" % POLL_INTERVAL, self._polled_changes(first)
        self.log.info(
            "--reload: %s %s for changed .py files%s"
            % (how, ", ".join(self.directories), "".join(", and %s" % path for path in self.files))
        )
        for names in changes:
            self.log.info("--reload: %s changed: reloading" % ", ".join(names))
            try:
                os.kill(master_pid, signal.SIGHUP)
            except ProcessLookupError:
                return 0
        return 0

    def _watched_changes(self, watchfiles):
        """The names that changed together, a list per burst, from watchfiles (inotify)."""
        files = frozenset(self.files)
        python_files = watchfiles.PythonFilter()

        def wanted(change, path):
            return path in files or python_files(change, path)

        roots = list(self.directories)
        roots += [directory for directory in {os.path.dirname(path) for path in files}
                  if not any(_inside(directory, root) for root in roots)]
        # watchfiles yields a burst of writes (an editor's save, a git checkout) as one set, 50 ms
        # after its last write: one reload.
        for changes in watchfiles.watch(*roots, watch_filter=wanted, raise_interrupt=False):
            yield sorted({os.path.relpath(path) for _change, path in changes})

    def _polled_changes(self, before):
        """The same, from a look at every file each POLL_INTERVAL after the first, ``before`` (no watchfiles)."""
        import time

        while True:
            time.sleep(POLL_INTERVAL)
            now = _snapshot(self.directories, self.files)
            if now == before:
                continue
            changed = set(_changed(before, now))
            while True:
                time.sleep(_SETTLE)
                settled = _snapshot(self.directories, self.files)
                if settled == now:
                    break
                changed.update(_changed(now, settled))
                now = settled
            before = now
            yield sorted(os.path.relpath(path) for path in changed)


def _snapshot(directories, files):
    """{path: (mtime in ns, size)} of the .py files under ``directories`` and of ``files``."""
    seen = {}
    for root in directories:
        for directory, subdirectories, names in os.walk(root):
            subdirectories[:] = [name for name in subdirectories if name not in _IGNORED_DIRECTORIES]
            for name in names:
                if name.endswith(_PYTHON_EXTENSIONS):
                    _stat(seen, os.path.join(directory, name))
    for path in files:
        _stat(seen, path)
    return seen


def _stat(seen, path):
    try:
        status = os.stat(path)
    except OSError:
        return  # removed between the listing and the look (or never made): its absence is the change
    seen[path] = (status.st_mtime_ns, status.st_size)


def _changed(before, after):
    return [path for path in before.keys() | after.keys() if before.get(path) != after.get(path)]


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

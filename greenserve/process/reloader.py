"""``--reload``: a new generation of workers when a source file of the application changes (development).

The workers import the application, not the master, so the master cannot ask Python which files
it is made of: it watches directories instead (the current directory after ``--chdir`` unless
``--reload-dir`` says others, as uvicorn does) for changed ``.py`` files, and the
``--reload-extra-file`` files whatever their kind (gunicorn's reload_extra_files: templates,
.env). A change is a SIGHUP: the arbiter starts new workers, which import the code afresh, and
retires the old ones once the new ones serve. An edit that does not import (a syntax error)
leaves the old workers serving: the new ones print the traceback and are retried until a fixed
edit comes, whose SIGHUP starts a generation that boots.

The watching is watchfiles' (Rust notify: inotify on Linux, FSEvents, kqueue; what uvicorn uses),
and it runs in a small child process of the master, not in a thread of it. The master forks
workers: a fork copies only the forking thread, so a lock that another thread (watchfiles' notify
thread, a thread writing a log line) holds at that moment stays locked forever in the child, and
Python 3.12 warns on every fork of a multi-threaded process for that reason. A child process
leaves the master single-threaded, and tells it of a change in the one way the master already
listens to, SIGHUP; the child logs the change itself, as a worker logs its own lines.
"""

import os
import signal

from greenserve.process.arbiter import _die_with, fork_child

MISSING = "--reload needs the watchfiles package: pip install 'greenserve[reload]'"


def check_available():
    """None when watchfiles can be imported, else the one-line reason (the command's error)."""
    import importlib

    try:
        importlib.import_module("watchfiles")  # loads its extension; starts no thread
    except ImportError:
        return MISSING
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
        import watchfiles

        files = frozenset(self.files)
        python_files = watchfiles.PythonFilter()

        def wanted(change, path):
            return path in files or python_files(change, path)

        roots = list(self.directories)
        roots += [directory for directory in {os.path.dirname(path) for path in files}
                  if not any(_inside(directory, root) for root in roots)]
        self.log.info(
            "--reload: watching %s for changed .py files%s"
            % (", ".join(roots), "".join(", and %s" % path for path in self.files))
        )
        # watchfiles yields a burst of writes (an editor's save, a git checkout) as one set, 50 ms
        # after its last write: one reload.
        for changes in watchfiles.watch(*roots, watch_filter=wanted, raise_interrupt=False):
            names = sorted({os.path.relpath(path) for _change, path in changes})
            self.log.info("--reload: %s changed: reloading" % ", ".join(names))
            try:
                os.kill(master_pid, signal.SIGHUP)
            except ProcessLookupError:
                return 0
        return 0


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)

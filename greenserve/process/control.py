"""The master's control socket, spoken as gunicorn 27's: its own client, ``gunicornc``, drives greenserve unchanged.

The wire protocol is gunicorn's (gunicorn/ctl/protocol.py): each message is a 4-byte big-endian
length and that many bytes of JSON. A request is ``{"id": 1, "command": "show workers",
"args": []}``; the answer ``{"id": 1, "status": "ok", "data": {...}}`` or ``{"id": 1, "status":
"error", "error": "..."}``. Each answer's data has the keys of gunicorn's (ctl/handlers.py), so
that ``gunicornc -j`` and scripts written for it read the same; greenserve adds what gunicorn has
no key for (a worker's requests, in flight and shed by overload control, from --metrics-bind's
snapshots) and never removes one.

The commands map onto what the arbiter already does for a signal: ``worker add N`` / ``worker
remove N`` are TTIN/TTOU by N (``Arbiter.resize``), ``reload`` is HUP, ``reopen`` USR1,
``shutdown`` TERM (``graceful``) or QUIT (``quick``: gunicorn sends INT, its fast stop, which is
greenserve's graceful one), each sent to the master itself so that the arbiter's one path for it
runs, after the answer went out.

The socket is served from the arbiter's loop, as --metrics-bind is (``observe.stats.Sink``):
non-blocking accepts and reads in the loop's own select, never a thread (gunicorn's runs an
asyncio loop in a thread that it must stop around each fork). A client cannot hold the master:
a message over ``MAX_MESSAGE`` bytes, JSON that is no request, or a message not complete within
``MESSAGE_DEADLINE`` gets one error answer and the connection closed; an idle connection is
closed after ``IDLE_TIMEOUT`` (gunicorn's: ``gunicornc``'s interactive mode waits on a person);
one whose answer is not read in ``MESSAGE_DEADLINE`` is closed. Who may connect is the file's
mode (0600: its owner); the master also reads the peer's uid (SO_PEERCRED, Linux) and answers
an error to one the configured mode does not admit, should the file's mode have been widened.
The file is looked at once a second (a stat), and made again when it is gone: a rolled-back
binary upgrade's new master removed it.
"""

import _socket
import errno
import json
import os
import signal
import stat
import sys
import time

DEFAULT_NAME = "gunicorn.ctl"  # gunicornc's default socket's name: it finds ours where it looks for gunicorn's
DEFAULT_MODE = 0o600
MAX_MESSAGE = 64 * 1024  # a command is a few words; gunicorn's 16 MiB would let a client make the master buffer that
MESSAGE_DEADLINE = 5.0  # seconds for a begun message to arrive whole, and for an answer to be read
IDLE_TIMEOUT = 300.0  # seconds a connection may wait between messages (gunicorn's)
MAX_CLIENTS = 16  # connections at once; one more is answered an error and closed
FILE_CHECK_INTERVAL = 1.0  # seconds between looks at the socket file (a stat: ~1 us)
_JSON_TYPES = (str, int, float, bool, list, dict, type(None))

COMMANDS = {
    "show all": "Show all processes (arbiter, web workers, dirty workers)",
    "show workers": "List HTTP workers with their status",
    "show dirty": "List dirty workers and apps (greenserve has none)",
    "show config": "Show current effective configuration",
    "show stats": "Show server statistics",
    "show listeners": "Show bound sockets",
    "worker add [N]": "Spawn N workers (default 1)",
    "worker remove [N]": "Remove N workers (default 1)",
    "worker kill <PID>": "Gracefully terminate specific worker",
    "dirty add [N]": "Spawn N dirty workers (greenserve has none: an error)",
    "dirty remove [N]": "Remove N dirty workers (greenserve has none: an error)",
    "reload": "Graceful reload (HUP)",
    "reopen": "Reopen log files (USR1)",
    "shutdown [graceful|quick]": "Shutdown server (TERM/QUIT)",
    "help": "Show this help message",
}

# gunicorn's "show config" keys (ctl/handlers.py), each with the Config attribute that holds it
# here, or a function of the Config for those greenserve spells otherwise or has not.
_CONFIG_KEYS = (
    ("bind", "bind"), ("workers", lambda config: config.worker_count()), ("worker_class", lambda config: "greenserve"),
    ("threads", lambda config: 1), ("timeout", "timeout"), ("graceful_timeout", "graceful_timeout"),
    ("keepalive", "keepalive"), ("max_requests", "max_requests"), ("max_requests_jitter", "max_requests_jitter"),
    ("worker_connections", "worker_connections"), ("preload_app", "preload"), ("daemon", "daemon"),
    ("pidfile", "pid"), ("proc_name", "proc_name"), ("reload", "reload"),
    # greenserve has no dirty workers: the keys say so as gunicorn's do when it runs none.
    ("dirty_workers", lambda config: 0), ("dirty_apps", lambda config: []), ("dirty_timeout", lambda config: None),
    ("control_socket", None), ("control_socket_disable", "control_socket_disable"),
)


class ControlError(Exception):
    """The control socket cannot be made: one line, the start's refusal."""


def default_path(environ=None):
    """gunicorn's default (config.py's _get_default_control_socket), so that ``gunicornc`` with no
    ``-s`` finds the master: $XDG_RUNTIME_DIR/gunicorn.ctl when that directory exists, else
    ~/.gunicorn/gunicorn.ctl."""
    environ = os.environ if environ is None else environ
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return os.path.join(runtime, DEFAULT_NAME)
    return os.path.join(os.path.expanduser("~"), ".gunicorn", DEFAULT_NAME)


def resolve(path):
    """The socket's absolute path (None: the default), read before --chdir and --daemon move the
    current directory, as the other paths a start names."""
    return os.path.abspath(path if path is not None else default_path())


def bind(path, mode):
    """A listening, non-blocking unix socket at ``path`` with ``mode``, its directory made (0700)
    when missing; listeners.py's unix socket, stale file replaced and one in use refused
    (``ControlError``), but for this master's parent's: USR2's new master takes the path over
    from the old one, as gunicorn's does."""
    from greenserve import listeners

    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        try:
            os.makedirs(directory, mode=0o700)
        except OSError as exc:
            raise ControlError("cannot make its directory %s: %s" % (directory, exc.strerror)) from None
    if _parent_listens(path):
        os.unlink(path)
    try:
        return listeners.make_listener(("unix", path), MAX_CLIENTS, False, mode)
    except listeners.ListenerError as exc:
        raise ControlError("%s: is another master running? Stop it, or give this one another path "
                           "(or --no-control-socket)" % exc) from None


def _parent_listens(path):
    """Whether this master's parent (the old master of a USR2 upgrade) listens at ``path``."""
    try:
        if not stat.S_ISSOCK(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    probe = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
        return _peer(probe)[0] == os.getppid()
    except OSError:
        return False
    finally:
        probe.close()


def _peer(sock):
    """(pid, uid, gid) of a unix socket's peer (SO_PEERCRED, Linux), or (0, None, None) elsewhere."""
    option = getattr(_socket, "SO_PEERCRED", None)
    if option is None:
        return (0, None, None)
    raw = sock.getsockopt(_socket.SOL_SOCKET, option, 12)  # struct ucred: int pid, uid, gid
    return tuple(int.from_bytes(raw[i:i + 4], sys.byteorder, signed=True) for i in (0, 4, 8))


def _encode(message):
    payload = json.dumps(message).encode("utf-8")
    return len(payload).to_bytes(4, "big") + payload


def _error(request_id, text):
    return {"id": request_id, "status": "error", "error": text}


class _Client:
    __slots__ = ("sock", "inbox", "out", "deadline", "closing", "refusal")

    def __init__(self, sock, now):
        self.sock = sock
        self.inbox = b""
        self.out = b""
        self.deadline = now + IDLE_TIMEOUT
        self.closing = False  # close once ``out`` is sent
        self.refusal = None  # the error its first request is answered, and it closed, if it may not drive the master


class ControlSocket:
    """The control socket, served from the arbiter's loop: its ``observer`` (``observe.stats.Sink``'s
    master side; not a subclass, for a plain master imports nothing of observe/).

    ``sock`` is ``bind``'s; ``arbiter`` the master's; ``config`` the running Config (the master
    sets it again after a reload); ``listeners`` the master's listening sockets; ``metrics`` the
    ``observe.metrics.MasterMetrics`` of --metrics-bind, whose worker snapshots add the request
    counts to the answers, or None."""

    def __init__(self, sock, path, mode, arbiter, config, listeners=(), metrics=None, log=None):
        self.sock = sock
        self.log = log
        self.path = path
        self.mode = mode
        self.inode = _inode(path)  # the file this master made, and removes at the end
        self.arbiter = arbiter
        self.config = config
        self.listeners = list(listeners)
        self.metrics = metrics
        self.clients = {}  # fd -> _Client
        self.started = time.time()
        self.ended = 0  # workers the master stopped (gunicorn's workers_killed)
        self.uid = os.geteuid()
        self.gid = os.stat(path).st_gid
        self.next_check = 0.0
        self.missing = False  # the file was gone at the last check

    # --- the arbiter's loop (observe.stats.Sink) ---

    def readers(self):
        return [self.sock.fileno()] + [fd for fd, client in self.clients.items() if not client.out]

    def writers(self):
        return [fd for fd, client in self.clients.items() if client.out]

    def worker_heard(self, pid, data):
        pass

    def worker_exited(self, pid, reason):
        if reason not in ("crash", "boot_failure"):
            self.ended += 1

    def turn(self, now, workers, readable, writable):
        """Accept, read, answer, write, expire; never blocks."""
        if now >= self.next_check:
            self.next_check = now + FILE_CHECK_INTERVAL
            self._check_file()
        if self.sock.fileno() in readable:
            self._accept(now)
        for fd in list(self.clients):
            client = self.clients[fd]
            if fd in writable and client.out:
                self._write(client, now)
            elif fd in readable and not client.out:
                self._read(client, now)
            elif now > client.deadline:
                if client.inbox and not client.out:
                    self._answer(client, _error(0, "incomplete message after %.0f s" % MESSAGE_DEADLINE), now, True)
                else:
                    self._close(client)

    def forked(self):
        """In a new worker: it holds none of the master's control descriptors."""
        for client in self.clients.values():
            client.sock.close()
        self.clients = {}
        self.sock.close()

    def close(self):
        """The master stops: answers still unsent get one try, and the socket file goes, unless
        another master (USR2's new one) has made its own at the path since."""
        for client in list(self.clients.values()):
            if client.out:
                try:
                    client.sock.send(client.out)
                except OSError:
                    pass
        self.forked()
        if self.inode is not None and _inode(self.path) == self.inode:
            try:
                os.unlink(self.path)
            except OSError:
                pass

    def _check_file(self):
        """Make the socket again where its file was removed: after a rolled-back binary upgrade
        (the new master took the path over, and removed its file as it stopped), or a clean-up
        of /run. Gone at two checks in a row: a new master takes the path over (unlink, bind) in
        microseconds. A file of another master's (an upgrade's new one) is left alone."""
        current = _inode(self.path)
        if current is not None or not self.missing:
            self.missing = current is None
            return
        try:
            sock = bind(self.path, self.mode)
        except ControlError as exc:
            if self.log is not None:
                self.log.warning("control socket: its file %s is gone, and %s" % (self.path, exc))
            self.next_check += IDLE_TIMEOUT  # not every second
            return
        self.sock.close()
        self.sock, self.inode, self.missing = sock, _inode(self.path), False
        if self.log is not None:
            self.log.info("control socket: %s was removed: listening there again" % self.path)

    # --- connections ---

    def _accept(self, now):
        for _ in range(MAX_CLIENTS):
            try:
                fd, _address = self.sock._accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM, errno.ECONNABORTED):
                    return  # the next turn tries again
                raise
            sock = _socket.socket(fileno=fd)
            sock.setblocking(False)
            client = _Client(sock, now)
            self.clients[sock.fileno()] = client
            # Answered at its first request: one answered at once would be closed before the
            # client wrote it, and gunicornc would say "Broken pipe" instead of why.
            client.refusal = self._refusal(sock)
            if client.refusal is None and len(self.clients) > MAX_CLIENTS:
                client.refusal = "too many control connections (%d): try again" % MAX_CLIENTS
            if client.refusal is not None:
                client.deadline = now + MESSAGE_DEADLINE

    def _refusal(self, sock):
        """Why the peer of ``sock`` may not drive the master, or None: root, this master's user,
        and whom the configured mode admits (its group by gid, others)."""
        try:
            pid, uid, gid = _peer(sock)
        except OSError:
            return None
        if uid is None or uid in (0, self.uid) or self.mode & 0o006:
            return None
        if self.mode & 0o060 and gid == self.gid:
            return None
        if self.log is not None:
            self.log.warning(
                "control socket: refused pid %d (uid %d): only its owner (uid %d) may connect (--control-socket-mode %04o)"
                % (pid, uid, self.uid, self.mode))
        return "permission denied: uid %d is not the control socket's owner (uid %d)" % (uid, self.uid)

    def _read(self, client, now):
        try:
            data = client.sock.recv(MAX_MESSAGE + 4)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._close(client)
            return
        client.inbox += data
        self._next_message(client, now)

    def _next_message(self, client, now):
        """Answer the first whole message of ``client``'s inbox, if one is there (one at a time:
        a client reads an answer before the next request is read)."""
        inbox = client.inbox
        if client.refusal is not None:
            self._answer(client, _error(0, client.refusal), now, True)
            return
        if len(inbox) < 4:
            client.deadline = now + (MESSAGE_DEADLINE if inbox else IDLE_TIMEOUT)
            return
        length = int.from_bytes(inbox[:4], "big")
        if length > MAX_MESSAGE:
            self._answer(client, _error(0, "a message of %d bytes: the limit is %d (gunicornc's protocol: a 4-byte "
                                           "length, then JSON)" % (length, MAX_MESSAGE)), now, True)
            return
        if len(inbox) < 4 + length:
            client.deadline = now + MESSAGE_DEADLINE
            return
        payload, client.inbox = inbox[4:4 + length], inbox[4 + length:]
        try:
            request = json.loads(payload.decode("utf-8"))
        except ValueError as exc:  # (UnicodeDecodeError too)
            self._answer(client, _error(0, "not a JSON request: %s" % exc), now, True)
            return
        if not isinstance(request, dict) or not isinstance(request.get("command", ""), str) \
                or not isinstance(request.get("args", []), list):
            self._answer(client, _error(0, 'not a request: expected {"id": 1, "command": "show workers", '
                                           '"args": []}'), now, True)
            return
        request_id = request.get("id", 0)
        answer, then = self.dispatch(request_id, request.get("command", ""), request.get("args", []))
        self._answer(client, answer, now, False)
        if then is not None:
            then()  # a signal to the master itself: after its answer went out

    def _answer(self, client, message, now, close):
        client.out += _encode(message)
        client.closing = client.closing or close
        client.deadline = now + MESSAGE_DEADLINE
        self._write(client, now)

    def _write(self, client, now):
        try:
            sent = client.sock.send(client.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(client)
            return
        client.out = client.out[sent:]
        if client.out:
            return
        if client.closing:
            self._close(client)
            return
        client.deadline = now + IDLE_TIMEOUT
        if client.inbox:
            self._next_message(client, now)

    def _close(self, client):
        self.clients.pop(client.sock.fileno(), None)
        client.sock.close()

    # --- the commands ---

    def dispatch(self, request_id, command, args):
        """The answer to one request, and what to do once it is sent (or None): gunicorn's
        parsing (ctl/server.py), its error texts, its answers' keys."""
        import shlex

        try:
            parts = shlex.split(command.strip()) + [str(arg) for arg in args]
        except ValueError as exc:
            return _error(request_id, "Invalid argument: %s" % exc), None
        if not parts:
            return _error(request_id, "Empty command"), None
        try:
            data, then = self._run(parts[0].lower(), parts[1:])
        except ValueError as exc:
            return _error(request_id, "Invalid argument: %s" % exc), None
        return {"id": request_id, "status": "ok", "data": data}, then

    def _run(self, name, rest):
        if name == "show":
            if not rest:
                raise ValueError("Missing show target (all|workers|dirty|config|stats|listeners)")
            shows = {"all": self.show_all, "workers": self.show_workers, "dirty": _show_dirty,
                     "config": self.show_config, "stats": self.show_stats, "listeners": self.show_listeners}
            show = shows.get(rest[0].lower())
            if show is None:
                raise ValueError("Unknown show target: %s" % rest[0])
            return show(), None
        if name == "worker":
            return self._worker(rest)
        if name == "dirty":
            return {"success": False, "error": "Dirty arbiter not running"}, None
        if name in ("reload", "reopen", "shutdown"):
            return self._signal(name, rest)
        if name == "help":
            return {"commands": dict(COMMANDS)}, None
        raise ValueError("Unknown command: %s" % name)

    def _worker(self, rest):
        if not rest:
            raise ValueError("Missing worker action (add|remove|kill)")
        action, values = rest[0].lower(), rest[1:]
        if action == "kill":
            if not values:
                raise ValueError("Missing PID for worker kill")
            return self.worker_kill(int(values[0])), None
        if action not in ("add", "remove"):
            raise ValueError("Unknown worker action: %s" % action)
        count = max(1, int(values[0])) if values else 1
        arbiter = self.arbiter
        if arbiter.stopping is not None:
            raise ValueError("the master is stopping")
        previous = arbiter.target
        total = previous + count if action == "add" else max(1, previous - count)
        arbiter.resize(total, "control socket: worker %s %d" % (action, count))
        if action == "add":
            return {"added": count, "previous": previous, "total": total}, None
        return {"removed": previous - total, "previous": previous, "total": total}, None

    def worker_kill(self, pid):
        """Stop worker ``pid`` gracefully (SIGTERM); the arbiter starts its replacement."""
        worker = self.arbiter.workers.get(pid)
        if worker is None:
            return {"success": False, "error": "Worker %d not found" % pid}
        if worker.signalled is None:
            worker.signalled = signal.SIGTERM
            worker.planned = "stopped by the control socket (worker kill)"
            worker.exit_reason = "stop"
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # it has just exited: the arbiter reaps it, and starts another
        return {"success": True, "killed": pid}

    def _signal(self, name, rest):
        if name == "reload":
            return {"status": "reloading"}, _to_master(signal.SIGHUP)
        if name == "reopen":
            return {"status": "reopening"}, _to_master(signal.SIGUSR1)
        mode = rest[0].lower() if rest else "graceful"
        if mode not in ("graceful", "quick"):
            raise ValueError("shutdown %s: graceful (TERM) or quick (QUIT)" % mode)
        return ({"status": "shutting_down", "mode": mode},
                _to_master(signal.SIGTERM if mode == "graceful" else signal.SIGQUIT))

    # --- the answers ---

    def _reports(self):
        """pid -> the last --metrics-bind snapshot of each worker (empty without it)."""
        return self.metrics.reports if self.metrics is not None else {}

    def _worker_rows(self):
        now = time.monotonic()
        reports = self._reports()
        rows = []
        for pid, worker in self.arbiter.workers.items():
            hook_worker = worker.hook_worker
            row = {
                "pid": pid,
                "age": hook_worker.age if hook_worker is not None else worker.number,
                "booted": worker.ready,
                "aborted": bool(worker.aborted),
                "last_heartbeat": round(now - worker.last_beat, 2),
                # greenserve's: its place (GREENSERVE_WORKER), and what its snapshot counts
                "number": worker.number,
            }
            row.update(_counts(reports.get(pid), self.metrics is not None))
            rows.append(row)
        rows.sort(key=lambda row: row["age"])
        return rows

    def show_workers(self):
        rows = self._worker_rows()
        return {"workers": rows, "count": len(rows)}

    def show_all(self):
        rows = []
        for row in self._worker_rows():
            row = dict(row, type="web")
            del row["aborted"]  # (not in gunicorn's "show all")
            rows.append(row)
        return {
            "arbiter": {"pid": os.getpid(), "type": "arbiter", "role": "master"},
            "web_workers": rows, "web_worker_count": len(rows),
            "dirty_arbiter": None, "dirty_workers": [], "dirty_worker_count": 0,
        }

    def show_stats(self):
        arbiter = self.arbiter
        answer = {
            "uptime": round(time.time() - self.started, 2),
            "pid": os.getpid(),
            "workers_current": len(arbiter.workers),
            "workers_target": arbiter.target,
            "workers_spawned": arbiter.forked,
            "workers_killed": self.ended,
            "reloads": arbiter.generation,
            "dirty_arbiter_pid": None,
        }
        totals = None
        if self.metrics is not None:
            from greenserve.observe import stats  # (imported by --metrics-bind's metrics already)

            totals = list(self.metrics.dead[:stats.COUNTERS]) + [0.0] * (stats.FIELDS - stats.COUNTERS)
            for values in self._reports().values():
                for index, value in enumerate(values):
                    totals[index] += value
        answer.update(_counts(totals, self.metrics is not None))
        return answer

    def show_config(self):
        config = self.config
        answer = {}
        for key, source in _CONFIG_KEYS:
            if source is None:
                value = self.path
            elif callable(source):
                value = source(config)
            else:
                value = getattr(config, source)
            if type(value) not in _JSON_TYPES:  # (an OctalMode, a path object)
                value = str(value)
            answer[key] = value
        answer["control_socket_mode"] = "%04o" % self.mode
        return answer

    def show_listeners(self):
        from greenserve import listeners

        rows = []
        for sock in self.listeners:
            if sock.fileno() < 0:
                continue  # closed: the master is stopping
            family = {_socket.AF_UNIX: "unix", _socket.AF_INET: "tcp", _socket.AF_INET6: "tcp6"}.get(sock.family, "unknown")
            rows.append({"address": listeners.url(sock), "fd": sock.fileno(), "type": family})
        return {"listeners": rows, "count": len(rows)}


def _show_dirty():
    return {"enabled": False, "pid": None, "workers": [], "apps": []}


def _counts(values, on):
    """greenserve's keys from a --metrics-bind snapshot: requests answered, in flight, shed by
    overload control (None each without --metrics-bind, or before the worker's first snapshot)."""
    if not on or values is None:
        return {"requests": None, "in_flight": None, "shed": None}
    from greenserve.observe import stats  # (imported by --metrics-bind's metrics already)

    requests = values[stats.REQUESTS:stats.DURATIONS]
    shed = values[stats.SHED:stats.QUEUE_TIMES]
    return {"requests": int(sum(requests)), "in_flight": int(values[stats.ACTIVE]), "shed": int(sum(shed))}


def _to_master(signum):
    pid = os.getpid()
    return lambda: os.kill(pid, signum)


def _inode(path):
    try:
        info = os.stat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino)

"""sd_notify(3) without libsystemd: the master tells systemd (Type=notify, Type=notify-reload) that it serves, reloads and stops, and that its loop is alive (WatchdogSec=).

systemd starts a Type=notify service with ``NOTIFY_SOCKET`` in its environment: the address of
a unix datagram socket (a path, or ``@name`` for an abstract one) to which the service sends
newline-separated ``KEY=VALUE`` lines. Until ``READY=1`` arrives the unit is "activating", and
``systemctl start`` (and every unit ordered after it) waits; with ``Type=forking`` or ``simple``
systemd can only guess. The master sends:

- ``READY=1``, ``MAINPID=`` and ``STATUS=`` once the first worker serves (just before the
  when_ready hook runs and a --daemon launcher returns), and again after a reload;
- ``RELOADING=1`` and ``MONOTONIC_USEC=`` on SIGHUP, then ``READY=1`` once the new generation of
  workers serves in full (systemd 253's Type=notify-reload needs both, and the clock reading);
- ``STOPPING=1`` when a stop begins;
- ``WATCHDOG=1`` every half of ``WATCHDOG_USEC`` from the master's loop (WatchdogSec=), unless
  ``WATCHDOG_PID`` names another process: a master whose loop is stuck stops pinging, and
  systemd kills and restarts the service.

In a binary upgrade (SIGUSR2, ``process.upgrade``) the new master is not the process systemd
started (gunicorn #2856): its READY=1 carries ``MAINPID=`` with its own pid, which systemd
takes from a process other than the main one only with ``NotifyAccess=all``. The old master
then says nothing but its watchdog pings (its STOPPING=1 would stop the unit), and a new master
stopped while the old one serves (a rollback) hands ``MAINPID=`` back instead of STOPPING=1.

The three variables are taken out of the environment at start, as sd_notify(unset_environment=1)
and sd_watchdog_enabled(1) do: the workers, and what the application runs, would otherwise
think the socket theirs and tell systemd that a process it does not watch is ready or alive.

Nothing here is imported without ``NOTIFY_SOCKET`` (``process.master.systemd_notifier``); the
socket is ``_socket``'s, as the listeners' are (the master does without the socket module's
~0.4 MB). A socket that cannot be reached is one warning, never a failure: the server serves
whether or not its supervisor listens.
"""

import _socket
import os
import time

VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


def from_environ(environ=None):
    """The Notifier of ``environ``'s (``os.environ``'s) NOTIFY_SOCKET, or None when it is unset
    or empty; the three variables are taken out of ``environ`` (see the module docstring)."""
    environ = os.environ if environ is None else environ
    values = {name: environ.pop(name, None) for name in VARIABLES}
    if not values["NOTIFY_SOCKET"]:
        return None
    return Notifier(values["NOTIFY_SOCKET"], values["WATCHDOG_USEC"], values["WATCHDOG_PID"])


def parse_address(text):
    """NOTIFY_SOCKET's address as ``sendto`` takes it (bytes); ValueError for what systemd's
    sd_notify refuses too (a relative path) or greenserve cannot reach (systemd 254's vsock:)."""
    if text.startswith("/"):
        return os.fsencode(text)
    if text.startswith("@"):
        return b"\0" + os.fsencode(text[1:])  # Linux's abstract namespace: a leading NUL
    raise ValueError("not a socket path (/...) or an abstract socket name (@...)")


class Notifier:
    """The master's end of NOTIFY_SOCKET: a non-blocking datagram socket (systemd's queue being
    full must not stall the master), the watchdog's schedule, and one warning at most."""

    def __init__(self, address, watchdog_usec=None, watchdog_pid=None):
        self.text = address  # as the environment gave it, for the warning
        self.problems = []  # lines to say at start: what of the environment cannot be used
        try:
            self.address = parse_address(address)
        except ValueError as exc:
            self.address = None
            self.problems.append("NOTIFY_SOCKET=%s: %s: systemd is not told that greenserve serves" % (address, exc))
        self.watchdog_usec = watchdog_usec
        self.watchdog_pid = watchdog_pid
        self.interval = 0.0  # seconds between WATCHDOG=1; 0: no watchdog
        self.next_ping = 0.0
        self.sock = None
        self.log = None
        self.warned = False
        # A binary upgrade (process.upgrade): False while a new master may be the unit's main
        # pid; ``predecessor``, in a new master, returns its old master's pid while that one lives.
        self.main = True
        self.predecessor = None

    def start(self, log):
        """In the master, as its loop starts (after --daemon: the pid is the one systemd is told)."""
        self.log = log
        self.interval = self._watchdog_interval()
        for line in self.problems:
            self._warn(line)
        if self.address is None:
            return
        try:
            self.sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_DGRAM | _socket.SOCK_CLOEXEC)
            self.sock.setblocking(False)
        except OSError as exc:
            self._failed(exc)

    def _watchdog_interval(self):
        """Half of WATCHDOG_USEC, as sd_watchdog_enabled(3) advises; 0 when it is not for us."""
        if self.watchdog_usec is None:
            return 0.0
        try:
            usec = int(self.watchdog_usec)
            pid = int(self.watchdog_pid) if self.watchdog_pid is not None else None
        except ValueError:
            self.problems.append("WATCHDOG_USEC=%s, WATCHDOG_PID=%s: not numbers: systemd's watchdog is not pinged"
                                 % (self.watchdog_usec, self.watchdog_pid))
            return 0.0
        if usec <= 0 or (pid is not None and pid != os.getpid()):
            return 0.0  # (another process's watchdog: a --daemon's launcher was the one started)
        return usec / 2e6

    def ready(self, status):
        if self.main:
            self._send("READY=1\nMAINPID=%d\nSTATUS=%s" % (os.getpid(), status))

    def hand_over(self):
        """In an old master, once it started a new one (SIGUSR2): the new one says MAINPID= and
        READY=1 when it serves; this one's STOPPING=1 would stop the whole unit, so it says
        nothing more but the watchdog's pings (any process of the unit may: NotifyAccess=all)."""
        self.main = False

    def take_back(self, status):
        """In an old master whose new master exited (a rollback, or a failed start): the main pid again."""
        self.main = True
        self.ready(status)

    def reloading(self, status):
        if not self.main:
            return
        # systemd >= 253 takes a reload's start only with the time it began, on its own clock.
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self._send("RELOADING=1\nMONOTONIC_USEC=%d\nSTATUS=%s" % (usec, status))

    def stopping(self, status):
        if not self.main:
            return
        old_master = self.predecessor() if self.predecessor is not None else None
        if old_master is not None:
            # A new master stopped while its old one serves (a rollback): the unit goes on, and
            # its main pid is the old master's again.
            self._send("MAINPID=%d\nSTATUS=rolled back: the old master serves" % old_master)
            return
        self._send("STOPPING=1\nSTATUS=%s" % status)

    def watchdog(self, now):
        """WATCHDOG=1 when it is due (``now``: the master's monotonic clock)."""
        if self.interval and now >= self.next_ping:
            self.next_ping = now + self.interval
            self._send("WATCHDOG=1")

    def due_in(self, now):
        """Seconds until the next WATCHDOG=1, or None without a watchdog."""
        if not self.interval:
            return None
        return max(0.0, self.next_ping - now)

    def close(self):
        """In a worker: the master's socket is not its to use."""
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def _send(self, message):
        if self.sock is None:
            return
        try:
            self.sock.sendto(message.encode("utf-8", "replace"), self.address)
        except OSError as exc:
            self._failed(exc)

    def _failed(self, exc):
        self._warn("NOTIFY_SOCKET=%s: cannot tell systemd (%s); greenserve serves on without it"
                   % (self.text, exc.strerror or exc))

    def _warn(self, line):
        # Once: a socket that cannot be reached now will not be at every watchdog ping either.
        if not self.warned and self.log is not None:
            self.warned = True
            self.log.warning(line)

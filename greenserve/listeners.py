"""Listening sockets: bound from a ``bind`` spec, inherited (``fd://N``, systemd socket activation),
or one per worker with ``SO_REUSEPORT``.

The master makes them before it forks, so every worker inherits the same sockets and the kernel
hands each new connection to whichever worker accepts first. With ``--reuse-port`` the master
only *binds* (no ``listen()``: a socket that never listens is never handed a connection, but it
holds the port and shows a clash at once), and each worker opens its own listening socket on the
same address; the kernel then spreads connections evenly across the workers' queues.

A unix socket file gets ``--unix-socket-mode`` and ``--unix-socket-group`` before it listens:
nothing can connect to it with other permissions than those asked for.

Nothing here imports gevent: the sockets are plain ones, made before any patching. Nor the
``socket`` module: the master binds with the C type under it (``_socket.socket``), since the
module's enums and what it imports (``selectors``, ``array``, ``math``) are ~0.4 MB of the
master's RSS, which needs none of them (issue 22: a master of at most 12 MB). A worker turns its
listeners into ``socket.socket`` objects with :func:`adopt` before any server sees them.
"""

import _socket
import errno
import os
import stat
import sys

__all__ = [
    "ListenerError", "adopt", "bind_all", "bind_spec", "close_all", "make_listener", "split_host_port",
    "systemd_listen_fds", "systemd_socket_count", "unix_socket_gid", "unix_socket_warning", "upgrade_listen_fds", "url",
    "worker_listener",
]

# sd_listen_fds(3): systemd passes its sockets from descriptor 3 on.
SD_LISTEN_FDS_START = 3

# The mode of a unix: socket file when none is asked for (the unix_socket_mode setting's default,
# which the settings table reads from here): its owner and group may connect.
UNIX_SOCKET_MODE = 0o660


def split_host_port(text):
    """'HOST:PORT', '[IPV6]:PORT' or 'HOST' -> (host, port as written, '' when none). ValueError."""
    if text.startswith("["):
        host, sep, port = text[1:].partition("]")
        if not sep or (port and not port.startswith(":")):
            raise ValueError("invalid IPv6 address %r (expected [HOST]:PORT)" % text)
        return host, port[1:]
    if text.count(":") > 1:
        raise ValueError("IPv6 addresses need brackets: [%s]:PORT" % text)
    host, _, port = text.partition(":")
    return host, port


def bind_spec(text):
    """'HOST:PORT', '[::1]:PORT', ':PORT', 'PORT', 'unix:/path' or 'fd://N' -> a listener spec
    (the ``bind`` setting's addresses): ``("tcp", host, port)``, ``("unix", path)`` or
    ``("fd", number)``. ValueError."""
    if not isinstance(text, str) or not text:
        raise ValueError("bind address must be a non-empty string, got %r" % (text,))
    if text.startswith("unix:"):
        # As gunicorn's util.parse_address reads it: unix:/run/app.sock and unix:///run/app.sock
        # are /run/app.sock; unix://tmp/app.sock is tmp/app.sock, relative to the directory.
        path = text[7:] if text.startswith("unix://") else text[5:]
        if not path:
            raise ValueError("unix socket path missing in %r" % text)
        return ("unix", path)
    if text.startswith("tcp://"):
        text = text[6:]  # gunicorn's explicit spelling of HOST:PORT
    if text.startswith("fd://"):
        number = text[5:]
        if not number.isdigit():
            raise ValueError("invalid file descriptor in %r" % text)
        return ("fd", int(number))
    if text.isdigit():
        host, port = "", text
    elif ":" not in text and not text.startswith("["):
        host, port = text, "8000"
    else:
        host, port = split_host_port(text)
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError("invalid port in %r" % text)
    return ("tcp", host or "0.0.0.0", int(port))


class ListenerError(ValueError):
    """A socket cannot be had; the message is one line, fit to print after ``greenserve: error:``."""


def make_listener(spec, backlog, reuse_port=False, unix_mode=None, unix_group=None):
    """A listening socket for a parsed bind spec (:func:`bind_spec`), non-blocking.

    With ``reuse_port``, a TCP spec gives a socket bound with ``SO_REUSEPORT`` but *not*
    listening: each worker makes its own from it with :func:`worker_listener`. A unix socket
    file gets ``unix_mode`` (default: ``UNIX_SOCKET_MODE``, the setting's default) and, when given, the
    group ``unix_group`` (a name or a gid).
    """
    kind = spec[0]  # (Config.check() refused reuse_port for any other kind than tcp)
    if kind == "fd":
        return _inherited(spec[1], "fd://%d" % spec[1])
    if kind == "unix":
        if unix_mode is None:
            unix_mode = UNIX_SOCKET_MODE
        return _unix(spec[1], backlog, unix_mode, unix_group)
    return _tcp(spec[1], spec[2], backlog, reuse_port)


def bind_all(config):
    """Listening sockets for every address of ``config.bind``, as a master needs them.

    Returns ``(sockets, unix_paths, warnings)``: the unix socket files made (the master removes
    them when it stops; a file found in use belongs to another server and is never ours) and the
    warnings about who may connect to them. Raises ListenerError, having closed what it bound.
    """
    sockets, unix_paths, warnings = [], [], []
    try:
        for spec in config.bind_specs():
            sockets.append(make_listener(
                spec, config.backlog, config.reuse_port, config.unix_socket_mode, config.unix_socket_group
            ))
            if spec[0] == "unix":
                unix_paths.append(spec[1])
                warning = unix_socket_warning(spec, config.unix_socket_mode, config.unix_socket_group)
                if warning:
                    warnings.append(warning)
    except BaseException:
        close_all(sockets, unix_paths)
        raise
    return sockets, unix_paths, warnings


def adopt(sock):
    """A listener of this module's as a ``socket.socket`` (what servers, gevent's included, take),
    the same descriptor; in a worker, or wherever ``socket`` is imported anyway."""
    import socket as socket_module

    if isinstance(sock, socket_module.socket):
        return sock
    # Its mode too (non-blocking): a new socket.socket would take socket.getdefaulttimeout(), and
    # a listener that blocks in accept() stalls the loop that polls it (the master's metrics).
    timeout = sock.gettimeout()
    adopted = socket_module.socket(sock.family, sock.type, sock.proto, sock.detach())
    adopted.settimeout(timeout)
    return adopted


def close_all(sockets, unix_paths=()):
    """Close a master's listening sockets and remove the unix socket files it made."""
    for sock in sockets:
        sock.close()
    for path in unix_paths:
        try:
            os.unlink(path)
        except OSError:
            pass


def _inherited(fd, shown, listening=True):
    try:
        sock = _socket.socket(fileno=fd)
    except (OSError, ValueError) as exc:
        raise ListenerError("%s is not a usable socket: %s" % (shown, reason(exc))) from None
    if sock.type != _socket.SOCK_STREAM:
        sock.detach()  # not ours to close: say what is wrong and leave it as we found it
        raise ListenerError("%s is not a stream (TCP or unix) socket" % shown)
    if listening and not sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_ACCEPTCONN):
        sock.detach()
        raise ListenerError("%s is not listening: pass a socket that is bound and listening" % shown)
    sock.setblocking(False)
    # Passed down to us, but not to the programs the application runs.
    os.set_inheritable(fd, False)
    return sock


def _unix(path, backlog, mode, group):
    gid = -1 if group is None else unix_socket_gid(group)  # -1: chown leaves the group alone
    if os.path.exists(path):
        if not stat.S_ISSOCK(os.stat(path).st_mode):
            raise ListenerError("unix:%s exists and is not a socket" % path)
        probe = _socket.socket(_socket.AF_UNIX)
        try:
            probe.connect(path)
        except OSError:
            try:
                os.unlink(path)  # a stale socket file from a server that is gone
            except OSError as exc:
                raise ListenerError("cannot remove the stale socket unix:%s: %s" % (path, reason(exc))) from None
        else:
            raise ListenerError("unix:%s is in use by another server" % path)
        finally:
            probe.close()
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    # bind() makes the file 0777 less the umask (0755 under the usual 022). Made with no
    # permissions at all, it is never more open than asked; and clients can connect only once
    # it listens, after chown and chmod.
    umask = os.umask(0o777)
    try:
        sock.bind(path)
    except (OSError, ValueError) as exc:
        sock.close()
        raise ListenerError("cannot listen on unix:%s: %s" % (path, reason(exc))) from None
    finally:
        os.umask(umask)
    try:
        if not path.startswith("\0"):  # Linux's abstract names are no files: anyone may connect
            os.chown(path, -1, gid)
            os.chmod(path, mode)
    except OSError as exc:
        sock.close()
        os.unlink(path)  # just made: ours
        if exc.errno == errno.EPERM:
            raise ListenerError(
                "cannot give unix:%s to group %s: only root, or a member of that group, may "
                "(--unix-socket-group)" % (path, group)
            ) from None
        raise ListenerError("cannot set the permissions of unix:%s: %s" % (path, reason(exc))) from None
    sock.listen(backlog)
    sock.setblocking(False)
    return sock


def unix_socket_gid(group):
    """The gid of ``group`` (a name, or a gid as an int or digits); ListenerError when unknown."""
    from greenserve.process.daemon import resolve_ids

    try:
        return resolve_ids(group=group)[1]
    except ValueError as exc:
        raise ListenerError("--unix-socket-group: %s" % exc) from None


def unix_socket_warning(spec, mode, group=None):
    """A warning when the unix socket of ``spec`` will let in no one but its owner, else None.

    Connecting to a unix socket needs write permission on its file; a proxy running as
    another user (Debian's nginx workers run as www-data) would get "Permission denied".
    """
    if spec[0] != "unix":
        return None
    if group is not None and not mode & 0o020:
        return (
            "unix:%s: --unix-socket-group %s lets no one in, since the mode %s has no group write "
            "permission and connecting needs it: use --unix-socket-mode 0660" % (spec[1], group, "%04o" % mode)
        )
    if not mode & 0o022:
        return (
            "unix:%s: only its owner can connect (mode %s): a proxy running as another user gets "
            "'Permission denied' (nginx: 502); let its group in, e.g. --unix-socket-mode 0660 "
            "--unix-socket-group www-data" % (spec[1], "%04o" % mode)
        )
    return None


def _tcp(host, port, backlog, reuse_port):
    # An ASCII host goes as bytes: given str, getaddrinfo imports the idna codec (with stringprep
    # and unicodedata, ~0.4 MB of the master's RSS) to encode what ASCII already is.
    name = host.encode("ascii") if host.isascii() else host
    try:
        infos = _socket.getaddrinfo(name, port, 0, _socket.SOCK_STREAM, 0, _socket.AI_PASSIVE)
    except _socket.gaierror as exc:
        raise ListenerError("cannot resolve bind address %r: %s" % (host, exc.strerror)) from None
    family, socktype, proto, _, address = infos[0]
    shown = "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)
    if reuse_port and not hasattr(_socket, "SO_REUSEPORT"):
        raise ListenerError("--reuse-port: this system has no SO_REUSEPORT")
    if reuse_port:
        # Sockets that all set SO_REUSEPORT share a port without a word, so a second greenserve
        # on the same address would quietly take half the connections. A probe without it fails
        # on any socket listening there (ours from an earlier start included).
        address = _probe(family, socktype, proto, address, shown)
    sock = _socket.socket(family, socktype, proto)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        if reuse_port:
            # Before bind(): set after it, the option does not make the port shareable.
            sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEPORT, 1)
        sock.bind(address)
        if not reuse_port:
            sock.listen(backlog)
    except (OSError, OverflowError) as exc:
        sock.close()
        if getattr(exc, "errno", None) == errno.EADDRINUSE:
            raise ListenerError("cannot listen on %s: address already in use" % shown) from None
        raise ListenerError("cannot listen on %s: %s" % (shown, reason(exc))) from None
    sock.setblocking(False)
    return sock


def _probe(family, socktype, proto, address, shown):
    """Bind (no listen) without SO_REUSEPORT to see whether the address is free; return it with
    the port the kernel chose, for ``:0``."""
    probe = _socket.socket(family, socktype, proto)
    try:
        probe.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)  # TIME_WAIT leftovers are no clash
        probe.bind(address)
        return probe.getsockname()
    except (OSError, OverflowError) as exc:
        if getattr(exc, "errno", None) == errno.EADDRINUSE:
            raise ListenerError("cannot listen on %s: address already in use" % shown) from None
        raise ListenerError("cannot listen on %s: %s" % (shown, reason(exc))) from None
    finally:
        probe.close()


def worker_listener(master_socket, backlog):
    """In a worker, with ``--reuse-port``: a listening socket of its own on the master's address.

    The address is the one the master's socket got, so ``:0`` (any free port) gives every
    worker the same port. Made before the worker drops privileges: the kernel lets sockets
    share a port only when the same user made them, and a port below 1024 needs root anyway.
    """
    sock = _socket.socket(master_socket.family, master_socket.type, master_socket.proto)
    try:
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEPORT, 1)
        sock.bind(master_socket.getsockname())
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def systemd_socket_count(environ=None):
    """How many listening sockets systemd passed us (see :func:`systemd_listen_fds`), without taking them."""
    environ = os.environ if environ is None else environ
    pid_text, count_text = environ.get("LISTEN_PID", ""), environ.get("LISTEN_FDS", "")
    if pid_text.isdigit() and count_text.isdigit() and int(pid_text) == os.getpid():
        return int(count_text)
    return 0


def systemd_listen_fds(environ=None):
    """The listening sockets systemd passed us (socket activation), as sockets; [] when none.

    Follows sd_listen_fds(3): ``LISTEN_PID`` must be our pid (the variables may have been
    inherited from a parent they were meant for), ``LISTEN_FDS`` counts descriptors from 3 on.
    The variables are removed from the environment either way, so that the application's own
    subprocesses do not take the sockets for theirs.
    """
    environ = os.environ if environ is None else environ
    pid_text = environ.pop("LISTEN_PID", None)
    count_text = environ.pop("LISTEN_FDS", None)
    environ.pop("LISTEN_FDNAMES", None)
    if pid_text is None or count_text is None:
        return []
    if not (pid_text.isdigit() and count_text.isdigit()):
        raise ListenerError(
            "systemd socket activation: LISTEN_PID=%r and LISTEN_FDS=%r must be numbers" % (pid_text, count_text)
        )
    if int(pid_text) != os.getpid():
        return []
    fds = range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + int(count_text))
    sockets = []
    try:
        for fd in fds:
            sockets.append(_inherited(fd, "systemd socket %d (LISTEN_FDS)" % fd))
    except ListenerError:
        for sock in sockets:
            sock.detach()
        raise
    return sockets


# The sockets an old master hands its new one on SIGUSR2 (process.upgrade): their descriptors,
# comma-separated, as gunicorn's GUNICORN_FD.
UPGRADE_FDS = "GREENSERVE_LISTEN_FDS"


def upgrade_listen_fds(environ=None):
    """The sockets the old master passed in a binary upgrade (SIGUSR2), as sockets; [] when none.

    The variable is removed from the environment, as systemd's are. A socket may be bound and
    not listening: with --reuse-port the old master's are placeholders that hold the address
    for the workers' own (worker_listener).
    """
    environ = os.environ if environ is None else environ
    text = environ.pop(UPGRADE_FDS, None)
    if not text:
        return []
    numbers = text.split(",")
    if not all(number.isdigit() for number in numbers):
        raise ListenerError("%s=%s: not a list of descriptors" % (UPGRADE_FDS, text))
    sockets = []
    try:
        for number in numbers:
            sockets.append(_inherited(int(number), "the old master's socket %s (%s)" % (number, UPGRADE_FDS),
                                      listening=False))
    except ListenerError:
        for sock in sockets:
            sock.detach()
        raise
    return sockets


def reason(exc):
    """An OSError's words (its strerror), for one-line messages."""
    return getattr(exc, "strerror", None) or str(exc)


def listening_line(sock, ssl=False, detail=""):
    """The INFO line saying where greenserve listens, the command's (one per listener) and
    ``serve()``'s: ``greenserve 0.1.0 listening on http://127.0.0.1:8000``, then ``detail``."""
    from greenserve._version import __version__

    return "greenserve %s listening on %s%s" % (__version__, url(sock, ssl), detail)


def url(sock, ssl=False):
    """Where a listening socket serves, as people type it: ``http://127.0.0.1:8000``,
    ``https://[::1]:8443``, ``unix:/run/app.sock`` (for the log lines saying where we listen)."""
    address = sock.getsockname()
    if isinstance(address, tuple):
        host = address[0]
        if ":" in host:
            host = "[%s]" % host
        return "%s://%s:%d" % ("https" if ssl else "http", host, address[1])
    return "unix:%s" % address


# --- the listen queue: read by the master (ListenQueueCheck), the metrics and a worker's pool-full warning


# struct tcp_info (<linux/tcp.h>): eight one-byte fields, then u32 rto, ato, snd_mss, rcv_mss,
# unacked, sacked. For a listening socket the kernel puts its accept queue's length in
# tcpi_unacked and the queue's limit (the backlog) in tcpi_sacked (tcp_get_info): bytes 24 to
# 32, in the machine's byte order. (Read with int.from_bytes: the struct module is not otherwise
# in the master.)
_TCP_INFO_UNACKED = 24
_TCP_INFO_SIZE = 32


def listen_queue(sock):
    """(connections waiting to be accepted, the most the kernel queues) for a listening TCP or
    unix stream socket, or None (not Linux, another kind, closed). One getsockopt for TCP, one
    netlink round trip for unix: cheap enough for each scrape."""
    if not sys.platform.startswith("linux") or sock.fileno() < 0:
        return None
    if sock.family == _socket.AF_UNIX:
        return _unix_listen_queue(sock)
    if sock.family not in (_socket.AF_INET, _socket.AF_INET6):
        return None
    try:
        info = sock.getsockopt(_socket.IPPROTO_TCP, _socket.TCP_INFO, _TCP_INFO_SIZE)
    except OSError:
        return None
    if len(info) < _TCP_INFO_SIZE:
        return None
    waiting = int.from_bytes(info[_TCP_INFO_UNACKED : _TCP_INFO_UNACKED + 4], sys.byteorder)
    limit = int.from_bytes(info[_TCP_INFO_UNACKED + 4 : _TCP_INFO_SIZE], sys.byteorder)
    return waiting, limit


# A unix socket has no TCP_INFO, and /proc/net/unix shows no queue: its queue is what `ss -xl`
# reads, the sock_diag netlink interface (linux/sock_diag.h, linux/unix_diag.h). One request for
# one socket, by its inode: struct nlmsghdr (len, SOCK_DIAG_BY_FAMILY, NLM_F_REQUEST, seq, pid),
# then struct unix_diag_req (AF_UNIX, protocol 0, pad, states, inode, UDIAG_SHOW_RQLEN, the cookie
# "none"). The answer's UNIX_DIAG_RQLEN attribute, for a listening socket: the connections not yet
# accepted (its receive queue's length) and its backlog (sk_max_ack_backlog).
_NETLINK_SOCK_DIAG = 4
_SOCK_DIAG_BY_FAMILY = 20
_NLM_F_REQUEST = 1
_NLMSG_ERROR = 2
_UDIAG_SHOW_RQLEN = 0x10
_UNIX_DIAG_RQLEN = 4
_NLMSG_HEADER = 16
_UNIX_DIAG_MSG = 16


def _u32(value):
    return value.to_bytes(4, sys.byteorder)


def _unix_listen_queue(sock):
    try:
        inode = os.fstat(sock.fileno()).st_ino
        request = (bytes((_socket.AF_UNIX, 0, 0, 0)) + _u32(0xFFFFFFFF) + _u32(inode) + _u32(_UDIAG_SHOW_RQLEN)
                   + _u32(0xFFFFFFFF) * 2)
        header = (_u32(_NLMSG_HEADER + len(request)) + _SOCK_DIAG_BY_FAMILY.to_bytes(2, sys.byteorder)
                  + _NLM_F_REQUEST.to_bytes(2, sys.byteorder) + _u32(1) + _u32(0))
        diag = _socket.socket(_socket.AF_NETLINK, _socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
        try:
            diag.settimeout(1.0)  # the kernel answers at once; never hang the master on it
            diag.sendto(header + request, (0, 0))
            answer = diag.recv(8192)
        finally:
            diag.close()
    except (OSError, AttributeError):  # no netlink (not Linux, a sandbox), no unix_diag module
        return None

    def field(offset, size=4):
        return int.from_bytes(answer[offset : offset + size], sys.byteorder)

    length = min(field(0), len(answer))
    if length < _NLMSG_HEADER + _UNIX_DIAG_MSG or field(4, 2) == _NLMSG_ERROR:
        return None
    offset = _NLMSG_HEADER + _UNIX_DIAG_MSG
    while offset + 4 <= length:  # the attributes: u16 length, u16 type, the value, padded to 4
        size, kind = field(offset, 2), field(offset + 2, 2)
        if size < 4:
            return None
        if kind == _UNIX_DIAG_RQLEN and size >= 12:
            return field(offset + 4), field(offset + 8)
        offset += (size + 3) & ~3
    return None


def listen_overflows(path="/proc/net/netstat"):
    """The kernel's count of connections dropped because a listen queue was full (TcpExt
    ListenOverflows, for this network namespace, every socket in it), or None (not Linux)."""
    try:
        with open(path, "rb") as stream:
            lines = stream.read().split(b"\n")
    except OSError:
        return None
    # Pairs of lines: "TcpExt: Name Name ..." then "TcpExt: 1 2 ...".
    for names, values in zip(lines, lines[1:]):
        if names.startswith(b"TcpExt:") and values.startswith(b"TcpExt:"):
            names, values = names.split(), values.split()
            if b"ListenOverflows" in names and len(values) == len(names):
                try:
                    return int(values[names.index(b"ListenOverflows")])
                except ValueError:
                    return None
    return None


def listener_name(sock):
    address = sock.getsockname()
    if not isinstance(address, tuple):
        return "unix:%s" % address
    host, port = address[:2]
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


class ListenQueueCheck:
    """The master's look at its listen queues, about once a second while it serves: a queue at
    its limit, or connections the kernel dropped (ListenOverflows) while one of ours had some
    waiting, is one WARNING (at most once a minute) and counted (``overflows``).

    The cost: one getsockopt(TCP_INFO) per TCP listener, one netlink request per unix one, and
    one read of /proc/net/netstat (~3 KiB) a second, in the master only. ListenOverflows counts drops of every socket in the
    network namespace; drops are blamed on greenserve only when one of its queues was non-empty
    at the check, so a full queue of another program is not reported as ours."""

    INTERVAL = 1.0
    # A queue that stays full would say it every second; once a minute is enough to be seen,
    # and greenserve_listen_overflows_total counts every drop.
    WARNING_INTERVAL = 60.0

    def __init__(self, listeners, netstat="/proc/net/netstat"):
        self.listeners = [sock for sock in listeners if listen_queue(sock) is not None]
        self.netstat = netstat
        self.overflows = 0  # drops counted against our queues (greenserve_listen_overflows_total)
        self.next_check = 0.0
        self.warned = None
        self.last_drops = listen_overflows(netstat) if self.listeners else None

    def check(self, now):
        """The warning to log now, or None. Does nothing until INTERVAL has passed."""
        if not self.listeners or now < self.next_check:
            return None
        self.next_check = now + self.INTERVAL
        queues = []
        for sock in self.listeners:
            queue = listen_queue(sock)
            if queue is not None:
                queues.append((sock, queue[0], queue[1]))
        drops = listen_overflows(self.netstat)
        dropped = 0
        # ListenOverflows counts TCP's drops: a unix queue with some waiting is no sign that they were ours.
        tcp_waiting = any(waiting for sock, waiting, _ in queues if sock.family != _socket.AF_UNIX)
        if drops is not None and self.last_drops is not None and tcp_waiting:
            dropped = max(0, drops - self.last_drops)
        self.last_drops = drops
        self.overflows += dropped
        full = [(sock, waiting, limit) for sock, waiting, limit in queues if waiting and waiting >= limit]
        if not (full or dropped):
            return None
        if self.warned is not None and now - self.warned < self.WARNING_INTERVAL:
            return None
        self.warned = now
        said = []
        for sock, waiting, limit in full or [q for q in queues if q[1]]:
            said.append("%s has %d connection(s) waiting to be accepted, its limit %d" % (listener_name(sock), waiting, limit))
        if dropped:
            said.append("the kernel dropped %d connection attempt(s) since the last check (TcpExt ListenOverflows)" % dropped)
        return (
            "listen queue overflow: %s. The workers do not accept fast enough: clients wait, "
            "retry their SYN or fail. Raise --backlog (the kernel caps it at net.core.somaxconn: "
            "raise that too), add --workers, or raise --worker-connections" % "; ".join(said)
        )

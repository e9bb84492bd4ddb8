"""The servers under test: one row per peer, and their processes, started here and stopped here by PID.

A server is started by its launcher in bench/servers/ (``python bench/servers/NAME.py PORT
[ARGS]``), pinned with ``taskset`` to the server CPU, on a fresh port, in a session of its own,
with its output going to its log. It counts as up once ``GET /`` answers 200. It is stopped with
SIGTERM, then SIGKILL after a grace period, and so is every process it left behind (gunicorn's
or granian's worker), each only while its PID still names the process that was seen.

To add a peer: write its launcher in bench/servers/ (it serves ``bench.apps:app``, or the app
``BENCH_APP`` names, on 127.0.0.1:PORT until signalled) and add its row to SERVERS.
"""

import datetime
import importlib.util
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

from bench.lib import BENCH, HOST, LOGS, ROOT, machine


class Server:
    """A peer: its launcher, the modules it needs, the distributions the report names."""

    def __init__(self, name, launcher, requires, packages, description, env=None, backlog=2048,
                 binaries=(), greenlets=False):
        self.name = name
        self.launcher = os.path.join(BENCH, "servers", launcher)
        self.requires = requires  # modules that must import for the server to run
        self.packages = packages  # distributions whose versions the report gives
        self.description = description
        self.env = env  # extra environment variables for the launcher
        self.backlog = backlog  # the listen backlog its launcher asks for
        self.binaries = binaries  # programs that must be installed (on PATH or in /usr/sbin)
        self.greenlets = greenlets  # it runs the app in gevent greenlets: a wait there is gevent.sleep

    def missing(self):
        """The reason this server cannot run here, or None."""
        for binary in self.binaries:
            if machine.program(binary) is None:
                return "%s is not installed (apt-get install %s)" % (binary, binary)
        for module in self.requires:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError) as e:  # a parent package failed to import
                return "module %r cannot be imported: %s: %s" % (module, type(e).__name__, e)
            if not found:
                return "module %r cannot be imported (not installed?)" % module
        return None

    def argv(self, ctx, port, extra=()):
        """The command that starts it on `port`, pinned to the server CPU."""
        return ctx.pinned(ctx.server_cpu, [sys.executable, self.launcher, str(port)] + list(extra))

    def start(self, ctx, log, extra=(), label=None, env=None, ready_path="/", ready=None):
        """Start it on a fresh port and wait until ``GET ready_path`` answers 200: (proc, port, argv, failure).

        `env` adds variables to the launcher's environment, after the row's own (BENCH_APP).
        `ready` (proc, port) -> bool replaces the ``GET`` for a server that answers no HTTP/1.1
        request in the clear (a TLS or HTTP/2-only one: bench/h2peers.py); it returns within 20 s.
        failure is None when the server is up; otherwise it says why, and the process has
        already been stopped.
        """
        port = free_port()
        argv = self.argv(ctx, port, extra)
        log.write("\n=== %s %s%s\n" % (datetime.datetime.now().isoformat(timespec="seconds"),
                                      label + ": " if label else "", shlex.join(argv)))
        log.flush()
        added = dict(self.env or {}, **(env or {}))
        if env:
            log.write("    environment: %s\n" % " ".join("%s=%s" % item for item in sorted(added.items())))
            log.flush()
        proc = spawn(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                     env=dict(os.environ, **added) if added else None)
        if ready(proc, port) if ready else wait_ready(proc, port, path=ready_path):
            return proc, port, argv, None
        rc = proc.poll()
        stop_process(proc)
        why = ("exited with status %s" % rc if rc is not None else
               "was not ready within 20 s" if ready else "did not answer GET %s within 20 s" % ready_path)
        return None, port, argv, "server %s (see %s)" % (why, os.path.relpath(log.name, ROOT))


SERVERS = [
    Server(
        "greenserve",
        "greenserve_server.py",
        ["gevent", "greenserve"],
        ["greenserve"],
        "greenserve.WSGIServer(..., log=None, backlog=2048, spawn=10000), the build installed "
        "in the working tree (compiled when `pip install -e .` could compile it)",
        greenlets=True,
    ),
    Server(
        "greenserve-pure",
        "greenserve_server.py",
        ["gevent", "greenserve"],
        ["greenserve"],
        "the same, with GREENSERVE_PURE_PYTHON=1: the hot path as plain Python",
        env={"GREENSERVE_PURE_PYTHON": "1"},
        greenlets=True,
    ),
    Server(
        "greenserve-metrics",
        "greenserve_server.py",
        ["gevent", "greenserve"],
        ["greenserve"],
        "the same, with the metrics seam on (each request counted by method, status, duration and "
        "bytes, as --metrics-bind does in a worker)",
        env={"GREENSERVE_BENCH_METRICS": "1"},
        greenlets=True,
    ),
    Server(
        "greenserve-cli",
        "greenserve_cli_server.py",
        ["gevent", "greenserve"],
        ["greenserve"],
        "greenserve --workers 1 --worker-connections 10000 --backlog 2048 bench.apps:app: the "
        "command with its defaults (a master and one worker)",
        greenlets=True,
    ),
    Server(
        "pywsgi",
        "pywsgi_server.py",
        ["gevent", "gevent.pywsgi"],
        ["gevent"],
        "gevent.pywsgi.WSGIServer(..., log=None, backlog=2048), as shipped",
        greenlets=True,
    ),
    Server(
        "bare",
        "bare_server.py",
        ["gevent"],
        ["gevent"],
        "bare gevent StreamServer loop answering canned bytes with the gevent socket's recv and "
        "sendall (bench/bare_gevent.py)",
    ),
    Server(
        "bare-raw",
        "bare_raw_server.py",
        ["gevent"],
        ["gevent"],
        "the same canned loop over the non-blocking socket and its read watcher, as greenserve reads "
        "and writes (bench/bare_gevent.py handle_raw): gevent's own cost per request, interpreted",
    ),
    Server(
        "bare-compiled",
        "bare_compiled_server.py",
        ["gevent", "Cython"],
        ["gevent", "Cython"],
        "bare-raw's loop compiled by Cython (built once into bench/results/): no bytecode on the "
        "path, gevent's loop, greenlet switches and the kernel alone: the floor under a gevent server",
    ),
    Server(
        "gunicorn",
        "gunicorn_server.py",
        ["gunicorn", "gevent"],
        ["gunicorn"],
        "gunicorn -k gevent -w 1 --worker-connections 10000 --backlog 2048 (master + 1 worker)",
        greenlets=True,
    ),
    Server(
        "waitress",
        "waitress_server.py",
        ["waitress"],
        ["waitress"],
        "waitress.serve(..., threads=4), otherwise its defaults (connection_limit=100)",
        backlog=1024,
    ),
    Server(
        "paste",
        "paste_server.py",
        ["paste.httpserver"],
        ["Paste"],
        "paste.httpserver.serve(..., use_threadpool=True, threadpool_workers=10), otherwise its "
        "defaults (HTTP/1.0: a connection per request; request_queue_size=5)",
        backlog=5,
    ),
    Server(
        "bjoern",
        "bjoern_server.py",
        ["bjoern", "_bjoern"],
        ["bjoern"],
        "bjoern.run(app, host, port, listen_backlog=2048): C on libev, one thread",
    ),
    Server(
        "meinheld",
        "meinheld_server.py",
        ["meinheld.server"],
        ["meinheld"],
        "meinheld.server.listen(...); run(app), with set_keepalive(10) (its default 0 closes every "
        "connection), no access logger, set_backlog(2048): C on picoev",
    ),
    Server(
        "granian",
        "granian_server.py",
        ["granian", "granian._granian"],
        ["granian"],
        "granian --interface wsgi --workers 1 --runtime-mode st --runtime-threads 1 "
        "--blocking-threads 1 --runtime-blocking-threads 1 --backlog 2048 --http 1 "
        "(Rust; a main process + 1 worker; in flask-wait, granian's default of 1,024 blocking threads)",
    ),
    Server(
        "nginx",
        "nginx_server.py",
        [],
        [],
        "nginx `return 200` with the same bodies, worker_processes 1, backlog=2048, no access log, "
        "keepalive_requests unlimited (C; a master + 1 worker, as www-data when run as root): the "
        "reference for one core, not a WSGI server",
        binaries=("nginx",),
    ),
]

# The command with two workers, without and with --sticky (docs/performance.md, "--sticky"). The
# load comes from 127.0.0.1 alone, one client to --sticky: one worker serves it all, and what the
# other worker accepts is handed to it (the worst case).
_AFTER_CLI = [row.name for row in SERVERS].index("greenserve-cli") + 1
SERVERS[_AFTER_CLI:_AFTER_CLI] = [
    Server(name, "greenserve_cli_server.py", ["gevent", "greenserve"], ["greenserve"], text, env=env, greenlets=True)
    for name, env, text in (
        ("greenserve-cli-2", {"GREENSERVE_BENCH_WORKERS": "2"},
         "greenserve-cli with --workers 2: the row greenserve-sticky is compared with"),
        ("greenserve-sticky", {"GREENSERVE_BENCH_WORKERS": "2", "GREENSERVE_BENCH_STICKY": "1"},
         "greenserve-cli-2 with --sticky: every connection served by the worker that owns its client; "
         "the load's one address makes it the worst case (one worker serves all, half is handed to it)"),
    )
]
BY_NAME = {s.name: s for s in SERVERS}
# The canned-bytes loops: they answer only the scenarios that name a canned response (hello, page).
CANNED = ("bare", "bare-raw", "bare-compiled")


def available(server_list):
    """({name: why it is skipped}, [the servers that can run]); exits when none can."""
    skipped, servers = {}, []
    for server in server_list:
        reason = server.missing()
        if reason:
            skipped[server.name] = reason
            print("skipping %s: %s" % (server.name, reason), flush=True)
        else:
            servers.append(server)
    if not servers:
        sys.exit("no server can run")
    return skipped, servers


def open_log(name, mode="a"):
    """bench/results/logs/NAME.log (git-ignored): a server's or a client's output."""
    os.makedirs(LOGS, exist_ok=True)
    return open(os.path.join(LOGS, name + ".log"), mode)


# --------------------------------------------------------------------------------------------
# Processes: started here, stopped here, by PID


LIVE = {}  # pid -> Popen of every process started here and still running, for stop_all()


def spawn(argv, **popen):
    """Popen(argv) in the working tree, registered for stop_all()."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    proc = subprocess.Popen(argv, cwd=ROOT, **popen)
    LIVE[proc.pid] = proc
    return proc


def stop_process(proc, grace=5.0):
    """SIGTERM proc (and, after it, whatever descendants it left), SIGKILL after `grace` s."""
    children = machine.descendants(proc.pid)
    if proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    deadline = time.monotonic() + grace
    for pid, started in children:
        # Only a process that is still the one we saw (same PID, same start time).
        while machine.start_time(pid) == started and time.monotonic() < deadline:
            time.sleep(0.05)
        if machine.start_time(pid) == started:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    LIVE.pop(proc.pid, None)


def stop_all(logs=None):
    """Stop every process still running (by PID), then close the log files if given."""
    for proc in list(LIVE.values()):
        stop_process(proc, grace=2.0)
    for log in (logs or {}).values():
        log.close()


def note_exit(proc, result):
    """Marks `result` failed when the server `proc` exited during its load; returns result."""
    if proc.poll() is not None:
        result["server_exited"] = proc.returncode
        result["failure"] = "server exited with status %s during the load" % proc.returncode
    return result


def stop_and_rest(proc, pause):
    """The end of every run, whatever happened: the server (if it started) stopped by PID with its
    children, then `pause` seconds of rest before the next one."""
    if proc is not None:
        stop_process(proc)
    time.sleep(pause)


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_ready(proc, port, timeout=20.0, path="/"):
    """True once the server answers GET `path` with 200; False if it exits or times out."""
    deadline = time.monotonic() + timeout
    request = b"GET %s HTTP/1.1\r\nHost: %s:%d\r\nConnection: close\r\n\r\n" % (
        path.encode(), HOST.encode(), port)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection((HOST, port), timeout=2.0) as s:
                s.sendall(request)
                head = s.recv(64)
            if head.startswith(b"HTTP/1.") and head[9:12] == b"200":
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


NGINX_CONF = """\
worker_processes 1;
worker_rlimit_nofile 65536;
daemon off;
{user}
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 20000; multi_accept off; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
{http}    keepalive_requests 1000000000;
    keepalive_timeout 600s;
    server_tokens off;
    server {{
        listen {host}:{port} backlog=2048;
{locations}    }}
}}
"""


def nginx_conf(directory, host, port, locations, http=""):
    """An nginx.conf for the benchmarks' nginx: one worker (pinned like every server, by the
    launcher's affinity, which nginx inherits), as Debian's www-data when run as root, no access
    log, its files in ``directory``, the same backlog as the others, and keep-alive as long as
    the others keep it (nginx's default keepalive_requests of 1,000 would close every thousandth
    connection under wrk). ``locations`` and ``http`` (the http block's own directives) are
    lines of text, each ending with a newline."""
    user = "user www-data;" if os.geteuid() == 0 else ""
    return NGINX_CONF.format(dir=directory, user=user, host=host, port=port, http=http, locations=locations)

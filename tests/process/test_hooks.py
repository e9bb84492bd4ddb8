"""Server hooks with real processes and signals: each hook writes a line with its pid to a file,
and the tests read when and where each ran.

Each test starts `python -m greenserve` in its own session, on loopback, every wait bounded, and
stops it by PID.
"""

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import free_port, greenserve_command, subprocess_env, wait_until
from tests.entry.test_cli import certificate  # noqa: F401 (a fixture)
from tests.process.test_master import Master

HOOKAPP = '''
import atexit
import os
import sys
import time

from gevent import monkey

_blocking_sleep = monkey.get_original("time", "sleep")
LOG = os.environ["HOOK_LOG"]


def line(*words):
    # One write of one line in append mode: lines of several processes do not mix.
    with open(LOG, "a") as log:
        log.write(" ".join(str(word) for word in words) + "\\n")


atexit.register(lambda: line("atexit", os.getpid()))


class Body:
    def __init__(self, data):
        self.data = data

    def __iter__(self):
        return iter([self.data])

    def close(self):
        line("body_closed", os.getpid())


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/hold":
        _blocking_sleep(float(environ["QUERY_STRING"] or "5"))  # blocks the worker's event loop
    body = ("%d %s" % (os.getpid(), path)).encode()
    start_response("201 Created", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return Body(body)


def on_starting(server):
    line("on_starting", os.getpid(), server.pid, server.num_workers)


def when_ready(server):
    line("when_ready", os.getpid(), sorted(server.workers) != [])


def pre_fork(server, worker):
    line("pre_fork", os.getpid(), worker.pid, worker.number, worker.age)


def post_fork(server, worker):
    line("post_fork", os.getpid(), worker.pid, worker.ppid, monkey.is_module_patched("socket"))


def post_worker_init(worker):
    line("post_worker_init", os.getpid(), worker.pid)


def worker_int(worker):
    line("worker_int", os.getpid(), worker.alive)


def worker_abort(worker):
    line("worker_abort", os.getpid())


def worker_exit(server, worker):
    line("worker_exit", os.getpid(), worker.pid)


def child_exit(server, worker):
    line("child_exit", os.getpid(), worker.pid, worker.exit_code)
    server.log.info("child_exit: worker %s is gone", worker.pid)  # gunicorn's log calls work


def nworkers_changed(server, new_value, old_value):
    line("nworkers_changed", os.getpid(), new_value, old_value)


def on_reload(server):
    line("on_reload", os.getpid())


def on_exit(server):
    line("on_exit", os.getpid())


def pre_request(worker, req):
    line("pre_request", os.getpid(), worker.pid, req.method, req.path, req.query, req.uri, req.version,
         dict(req.headers).get("X-TEST"))


def post_request(worker, req, environ, resp):
    line("post_request", os.getpid(), req.path, resp.status_code, dict(resp.headers).get("Content-Type"),
         environ["PATH_INFO"])


def post_request_two(worker, req):
    line("post_request_two", os.getpid(), req.path)


def raises(*args):
    raise RuntimeError("a hook that raises")


def hangs_blocking(*args):
    _blocking_sleep(60)


def hangs_patched(*args):
    time.sleep(60)  # the loop runs; the worker's servers and heartbeat have stopped, or are stopping


def one_argument(server):
    pass


def makes_a_hub(*args):
    import gevent

    gevent.sleep(0)


def slow_on_exit(server):
    line("on_exit", os.getpid())
    time.sleep(2)


def makes_an_idle_hub(*args):
    # What importing Django under a patched threading does (asgiref's ThreadPoolExecutor): a hub
    # made, never run.
    import gevent

    gevent.get_hub()
'''

ALL_HOOKS = (
    "on_starting", "when_ready", "pre_fork", "post_fork", "post_worker_init", "worker_int", "worker_abort",
    "worker_exit", "child_exit", "nworkers_changed", "on_reload", "on_exit", "pre_request", "post_request",
)


def hook_flags(*names, module="hookapp"):
    flags = []
    for name in names:
        flags += ["--" + name.replace("_", "-"), "%s:%s" % (module, name)]
    return flags


class Started(Master):
    """test_master's Master, serving ``module:app`` from ``source`` (hookapp) with HOOK_LOG set and
    ``env``; ``named(hook)`` reads the lines hooks wrote, without the hook's name."""

    def __init__(self, tmp_path, *args, module="hookapp", source=HOOKAPP, env=None):
        (tmp_path / ("%s.py" % module)).write_text(textwrap.dedent(source))
        self.dir = tmp_path
        self.hook_log = tmp_path / "hooks.log"
        self.hook_log.write_text("")
        self.log = tmp_path / "error.log"
        self.port = free_port()
        self.process = subprocess.Popen(
            greenserve_command("--bind", "127.0.0.1:%d" % self.port, "--chdir", str(tmp_path), *args, module + ":app"),
            cwd=str(tmp_path), env=subprocess_env(HOOK_LOG=str(self.hook_log), **(env or {})),
            stdout=subprocess.DEVNULL, stderr=open(self.log, "w"), start_new_session=True,
        )

    def lines(self):
        return [line.split() for line in self.hook_log.read_text().splitlines()]

    def named(self, name):
        return [line[1:] for line in self.lines() if line[0] == name]

    def get(self, path="/", headers=None):
        request = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), headers=headers or {})
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.read().decode()


@pytest.fixture
def start(tmp_path):
    started = []

    def start(*args, **kwargs):
        server = Started(tmp_path, *args, **kwargs)
        started.append(server)
        return server.wait_ready()

    yield start
    for server in started:
        if server.process.poll() is None:
            os.killpg(server.process.pid, signal.SIGKILL)
            server.process.wait(timeout=5)


def run_to_end(tmp_path, *args):
    """The command run to its end (it does not start): its exit code and standard error."""
    (tmp_path / "hookapp.py").write_text(textwrap.dedent(HOOKAPP))
    result = subprocess.run(
        greenserve_command("--bind", "127.0.0.1:%d" % free_port(), "--chdir", str(tmp_path), *args, "hookapp:app"),
        cwd=str(tmp_path), env=subprocess_env(HOOK_LOG=str(tmp_path / "hooks.log")),
        capture_output=True, text=True, timeout=60,
    )
    return result.returncode, result.stderr


def test_each_hook_runs_at_its_time_in_its_process(start):
    server = start("--workers", "2", *hook_flags(*ALL_HOOKS))
    master = str(server.process.pid)
    wait_until(lambda: len(server.named("post_worker_init")) == 2, 10, "two workers booted")
    first = server.worker_pids()
    assert server.get("/a?b=1", headers={"X-Test": "yes"}).split()[1] == "/a"
    wait_until(lambda: server.named("post_request"), 10, "post_request")

    server.process.send_signal(signal.SIGTTIN)
    wait_until(lambda: len(server.worker_pids()) == 3, 10, "a third worker")
    server.process.send_signal(signal.SIGTTOU)
    wait_until(lambda: len(server.named("child_exit")) == 1, 10, "the extra worker's child_exit")
    server.process.send_signal(signal.SIGHUP)
    wait_until(lambda: len(server.named("child_exit")) == 3, 20, "the old generation retired")
    before_stop = server.worker_pids()
    assert server.stop() == 0

    lines = server.lines()
    names = [line[0] for line in lines]
    # The master's hooks, in the master.
    for name in ("on_starting", "when_ready", "pre_fork", "child_exit", "nworkers_changed", "on_reload", "on_exit"):
        assert {line[0] for line in server.named(name)} == {master}, name
    assert server.named("on_starting") == [[master, master, "2"]]
    # on_exit last, but for the master's atexit handlers: its exit is an interpreter's exit.
    assert names[0] == "on_starting" and names[-2:] == ["on_exit", "atexit"] and lines[-1][1] == master
    assert server.named("nworkers_changed") == [[master, "2", "None"], [master, "3", "2"], [master, "2", "3"]]
    # pre_fork before each fork, with no pid yet; post_fork in the child, after patching, before the app.
    forks = server.named("pre_fork")
    assert len(forks) == len(server.named("post_fork")) == 5  # 2 + TTIN + 2 for HUP
    assert all(fork[1] == "None" for fork in forks) and [fork[3] for fork in forks] == ["1", "2", "3", "4", "5"]
    for post_fork in server.named("post_fork"):
        pid, worker_pid, ppid, socket_patched = post_fork
        assert pid == worker_pid != master and ppid == master and socket_patched == "True"
    assert {line[0] for line in server.named("post_worker_init")} == {line[0] for line in server.named("post_fork")}
    # when_ready once, after the first worker serves.
    assert names.count("when_ready") == 1
    assert names.index("when_ready") > names.index("post_worker_init")
    # The request's hooks, in the worker that served it; post_request after the body was closed.
    (pre,) = server.named("pre_request")
    assert pre[0] == pre[1] and int(pre[0]) in first
    assert pre[2:] == ["GET", "/a", "b=1", "/a?b=1", "(1,", "1)", "yes"]
    assert server.named("post_request") == [[pre[0], "/a", "201", "text/plain", "/a"]]
    assert names.index("body_closed") < names.index("post_request")
    # HUP: on_reload before the new generation is forked.
    assert names.index("on_reload") < len(names) - 1 - names[::-1].index("pre_fork")
    # Every worker's exit: worker_exit in it, then child_exit in the master with its pid.
    exits = {int(line[0]) for line in server.named("worker_exit")}
    assert exits == {int(line[0]) for line in server.named("post_fork")}
    assert {int(line[1]) for line in server.named("child_exit")} == exits
    assert set(before_stop) <= exits
    assert all(line[2] == "0" for line in server.named("child_exit"))


def test_child_exit_runs_after_kill_9_of_a_worker(start):
    server = start("--workers", "2", *hook_flags("child_exit", "worker_exit"))
    wait_until(lambda: len(server.worker_pids()) == 2, 10, "two workers")
    victim = server.worker_pids()[0]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: server.named("child_exit"), 10, "child_exit")
    assert server.named("child_exit") == [[str(server.process.pid), str(victim), "-9"]]
    assert server.named("worker_exit") == []  # killed: nothing ran in it
    assert "child_exit: worker %d is gone" % victim in server.log_text()
    wait_until(lambda: len(server.worker_pids()) == 2, 10, "a replacement")
    assert server.stop() == 0


@pytest.mark.parametrize("how", ["SIGTERM", "max-requests", "SIGQUIT"])
def test_worker_exit_then_atexit_on_a_graceful_exit_only(start, how):
    extra = ["--max-requests", "3"] if how == "max-requests" else []
    server = start("--workers", "1", *extra, *hook_flags("post_fork", "worker_exit", "worker_int"))
    wait_until(lambda: server.named("post_fork"), 10, "a worker")
    (first,) = server.worker_pids()
    if how == "max-requests":
        for _ in range(5):
            server.get()
        wait_until(lambda: first not in server.worker_pids() and server.worker_pids(), 15, "a recycled worker")
        assert server.stop() == 0
    else:
        server.process.send_signal(getattr(signal, how))
        assert server.stop() == 0  # (a TERM after QUIT changes nothing: the stop is fast already)
    ended = [line for line in server.lines() if line[0] in ("worker_exit", "atexit", "worker_int") and line[1] == str(first)]
    if how == "SIGQUIT":
        # A fast stop: worker_int, worker_exit, and none of the atexit handlers.
        assert [line[0] for line in ended] == ["worker_int", "worker_exit"]
    else:
        assert [line[0] for line in ended] == ["worker_exit", "atexit"]


@pytest.mark.parametrize("faulthandler_on", [False, True], ids=["plain", "PYTHONFAULTHANDLER"])
def test_worker_abort_runs_on_sigabrt_even_in_a_blocked_worker(start, faulthandler_on):
    # With faulthandler already on when the worker starts (PYTHONFAULTHANDLER=1, -X faulthandler),
    # the hook's handler must not take the place of the stack dump.
    server = start("--workers", "1", "--timeout", "30", *hook_flags("worker_abort", "child_exit"),
                   env={"PYTHONFAULTHANDLER": "1"} if faulthandler_on else None)
    (worker,) = server.worker_pids()
    threading.Thread(target=lambda: _ignore_errors(server.get, "/hold?20"), daemon=True).start()
    time.sleep(0.5)  # the request is in, the loop blocked
    os.kill(worker, signal.SIGABRT)
    wait_until(lambda: server.named("child_exit"), 10, "the worker's death")
    assert server.named("worker_abort") == [[str(worker)]]
    assert server.named("child_exit") == [[str(server.process.pid), str(worker), "1"]]
    assert "Fatal Python error: Aborted" in server.log_text()  # faulthandler's dump, then the hook
    assert server.stop() == 0


def test_a_slow_when_ready_hook_does_not_count_against_the_workers(start, tmp_path):
    # The master sleeps 3 s in when_ready, past --timeout 2: its workers beat all along, into
    # their pipes, and none of that is silence (a found fault: it sent SIGABRT to the idle worker).
    (tmp_path / "conf.py").write_text(textwrap.dedent('''
        import time

        workers = 1
        timeout = 2


        def when_ready(server):
            time.sleep(3)
    '''))
    server = start("-c", str(tmp_path / "conf.py"))
    wait_until(lambda: server.worker_pids(), 10, "a worker")
    (worker,) = server.worker_pids()
    served = set()
    end = time.monotonic() + 5  # the hook's 3 s, then the master's first checks after it
    while time.monotonic() < end:
        served.add(int(server.get("/").split()[0]))
        time.sleep(0.2)
    assert served == {worker} and server.worker_pids() == [worker]
    log = server.log_text()
    assert "no sign of life" not in log and "SIGABRT" not in log, log
    assert server.stop() == 0


@pytest.mark.parametrize("hook, how, signum", [
    ("worker_exit", "blocking", signal.SIGTERM),
    ("worker_exit", "patched", signal.SIGTERM),
    ("worker_int", "blocking", signal.SIGQUIT),
])
def test_a_stop_hook_that_does_not_return_is_ended_with_a_line_naming_it(start, hook, how, signum):
    # Not "its event loop gave no sign of life ... CPU-bound or unpatched blocking code?": the
    # worker told the master which hook it entered, and the hook gets the graceful timeout.
    server = start("--workers", "1", "--timeout", "2", "--graceful-timeout", "3",
                   "--%s" % hook.replace("_", "-"), "hookapp:hangs_%s" % how)
    (worker,) = server.worker_pids()
    began = time.monotonic()
    server.process.send_signal(signum)
    assert server.process.wait(timeout=20) == 0
    assert time.monotonic() - began < 3 + 2 + 3  # the hook's time, SIGABRT's grace, the checks' interval
    log = server.log_text()
    errors = [line for line in log.splitlines() if "[ERROR]" in line or "[WARNING]" in line]
    assert len(errors) == 1 and errors[0].endswith(
        "worker 1 (pid %d): the %s hook did not return within the graceful timeout (3 s). Sent SIGABRT: its "
        "stack follows in the error log; SIGKILL in 2 s if it has not exited" % (worker, hook)), log
    assert "no sign of life" not in log and "Fatal Python error: Aborted" in log


def _ignore_errors(function, *args):
    try:
        function(*args)
    except OSError:
        pass


@pytest.mark.parametrize("hook", ["on_starting", "pre_fork", "nworkers_changed"])
def test_a_master_hook_that_creates_a_hub_stops_the_start_with_one_line(tmp_path, hook):
    code, stderr = run_to_end(tmp_path, "--workers", "2", "--%s" % hook.replace("_", "-"), "hookapp:makes_a_hub")
    assert code == 2, stderr
    errors = [line for line in stderr.splitlines() if "greenserve: error:" in line]
    assert errors == [
        "greenserve: error: the %s hook created a gevent hub in the master (it slept, spawned or did I/O with "
        "gevent): the workers would share it; do that in post_fork" % hook
    ], stderr
    assert "Traceback" not in stderr


def test_a_master_hook_may_make_a_hub_it_never_runs(start):
    # Each worker's gevent.reinit() renews the loop of a hub that never ran: nothing to share.
    server = start("--workers", "2", "--when-ready", "hookapp:makes_an_idle_hub")
    assert server.get("/").endswith(" /")  # hookapp's answer: "PID PATH"
    assert server.stop() == 0


def test_an_on_exit_hook_may_create_a_hub(start):
    # Nothing is forked after on_exit: a hub it makes (an HTTP call under --preload, say) harms
    # no worker, and the master ends as it would without it.
    server = start("--workers", "1", "--on-exit", "hookapp:makes_a_hub")
    assert server.stop() == 0
    log = server.log_text()
    assert "Traceback" not in log and "stopped" in log, log


@pytest.mark.parametrize("stop", ["SIGQUIT", "SIGTERM"])
def test_a_stop_signal_while_the_master_tears_down_changes_nothing(start, stop):
    # An init system's TERM that comes after a QUIT, once the workers are gone and on_exit runs:
    # the stop goes on and ends 0 (it was SIG_DFL there, a found fault: "killed by SIGTERM",
    # -15, in README's test run under -n 3). INT (Ctrl-C) may still interrupt a hung teardown.
    server = start("--workers", "1", "--on-exit", "hookapp:slow_on_exit")
    server.process.send_signal(signal.SIGQUIT)
    wait_until(lambda: server.named("on_exit"), 15, "on_exit")
    server.process.send_signal(getattr(signal, stop))
    assert server.process.wait(timeout=15) == 0, server.log_text()
    assert "stopped" in server.log_text()


@pytest.mark.parametrize("flag, value, message", [
    ("--on-starting", "nosuchmodule_zz:f",
     "greenserve: error: --on-starting nosuchmodule_zz:f: no module named 'nosuchmodule_zz'"),
    ("--child-exit", "hookapp:nosuch", "greenserve: error: --child-exit hookapp:nosuch: module 'hookapp' has no attribute 'nosuch'"),
    ("--child-exit", "hookapp:one_argument",
     "greenserve: error: --child-exit hookapp:one_argument: child_exit must accept 2 arguments (server, worker), "
     "as in gunicorn; one_argument does not"),
    ("--post-fork", "nosuchmodule_zz:f", "greenserve: error: --post-fork nosuchmodule_zz:f: no module named 'nosuchmodule_zz'"),
    ("--post-request", "hookapp:one_argument",
     "greenserve: error: --post-request hookapp:one_argument: post_request must accept 2, 3 or 4 arguments "
     "(worker, req, environ, resp), as in gunicorn; one_argument does not"),
    ("--on-exit", "hookapp", "greenserve: error: --on-exit: expected 'module:function', got 'hookapp'"),
], ids=["master-module", "master-attribute", "master-arity", "worker-module", "worker-arity", "not-an-import-string"])
def test_a_hook_that_does_not_resolve_is_one_line_and_exit_2(tmp_path, flag, value, message):
    code, stderr = run_to_end(tmp_path, "--workers", "2", flag, value)
    assert code == 2, stderr
    # One line (a worker hook's: one per worker that tried, each the same line, as for an
    # application's import string that does not resolve).
    errors = [line for line in stderr.splitlines() if "error:" in line]
    assert errors and all(line.startswith(message) for line in errors), stderr
    assert "Traceback" not in stderr


def test_hooks_that_raise(start, tmp_path):
    # While serving: logged with the traceback, and the server goes on.
    server = start("--workers", "1", "--post-request", "hookapp:raises", "--child-exit", "hookapp:raises")
    (worker,) = server.worker_pids()
    assert server.get("/x").split()[1] == "/x"
    os.kill(worker, signal.SIGKILL)
    wait_until(lambda: len(server.worker_pids()) == 1 and server.worker_pids() != [worker], 10, "a replacement")
    assert server.get("/y").split()[1] == "/y"
    assert server.stop() == 0
    log = server.log.read_text()
    assert "the post_request hook raised" in log and "the child_exit hook raised" in log
    assert log.count("RuntimeError: a hook that raises") == 4  # two requests, two worker deaths
    # Before a worker serves: it cannot start, and the start fails as for an application that raises.
    code, stderr = run_to_end(tmp_path, "--workers", "1", "--post-fork", "hookapp:raises")
    assert code == 3, stderr
    assert "RuntimeError: a hook that raises" in stderr
    assert "greenserve: error: the post_fork hook raised in the worker (see the traceback above)" in stderr.splitlines()
    code, stderr = run_to_end(tmp_path, "--on-starting", "hookapp:raises")
    assert code == 3, stderr
    assert stderr.splitlines()[-1] == "greenserve: error: the on_starting hook raised (see the traceback above)"
    assert "hooks.py" not in stderr  # the traceback starts in the hook's own frames


def test_a_pre_request_hook_that_raises_is_a_500_and_one_error_line_naming_it(start):
    server = start("--workers", "1", "--pre-request", "hookapp:raises")
    (worker,) = server.worker_pids()
    with pytest.raises(urllib.error.HTTPError) as answer:
        server.get("/x?y")
    assert answer.value.code == 500 and answer.value.read() == b"Internal Server Error\n"
    assert server.stop() == 0
    log = server.log_text()
    errors = [line for line in log.splitlines() if "[ERROR]" in line]
    assert errors == [errors[0]] and errors[0].endswith(
        "worker pid %d: the pre_request hook raised (GET /x?y): answered 500" % worker), log
    assert log.count("RuntimeError: a hook that raises") == 1 and "Error handling request" not in log


def test_pre_and_post_request_with_gunicorns_two_argument_post_request(start):
    server = start("--workers", "1", "--pre-request", "hookapp:pre_request", "--post-request", "hookapp:post_request_two")
    for path in ("/one", "/two?x"):
        server.get(path)
    wait_until(lambda: len(server.named("post_request_two")) == 2, 10, "two post_request")
    assert [line[3] for line in server.named("pre_request")] == ["/one", "/two"]
    assert [line[1] for line in server.named("post_request_two")] == ["/one", "/two"]
    assert server.stop() == 0


OTEL = '''
import json
import os

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter


def post_fork(server, worker):
    # A file per worker; a batch delay far longer than the test, so that what arrives was
    # flushed by the BatchSpanProcessor's shutdown, an atexit handler, at the worker's exit.
    out = open(os.path.join(os.environ["SPANS_DIR"], "%d.jsonl" % worker.pid), "a")
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: json.dumps(dict(span.attributes)) + "\\n")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600000))
    trace.set_tracer_provider(provider)


def app(environ, start_response):
    with trace.get_tracer("otelapp").start_as_current_span("request") as span:
        span.set_attribute("id", environ["QUERY_STRING"])
        span.set_attribute("pid", os.getpid())
    body = ("%d" % os.getpid()).encode()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]
'''


def test_opentelemetry_set_up_in_post_fork_exports_every_span_of_every_worker(start, tmp_path):
    pytest.importorskip("opentelemetry.sdk.trace", reason="the OpenTelemetry SDK is not installed")
    spans_dir = tmp_path / "spans"
    spans_dir.mkdir()
    server = start("--workers", "4", "--max-requests", "15", "--timeout", "10", "--post-fork", "otelapp:post_fork",
                   module="otelapp", source=OTEL, env={"SPANS_DIR": str(spans_dir)})
    served = {}  # request id -> the pid that served it
    lock = threading.Lock()

    def client(first):
        for number in range(first, first + 250):
            if len(served) >= 120 and len(set(served.values())) >= 6:
                return  # enough: some workers were recycled, and their replacements served
            time.sleep(0.02)  # the heartbeat (every second) counts the requests and recycles
            try:
                pid = int(server.get("/?r%d" % number).split()[0])
            except OSError:
                continue  # a refused connection during a recycle is not what this test is about
            with lock:
                served["r%d" % number] = pid

    clients = [threading.Thread(target=client, args=(first,)) for first in range(0, 1000, 250)]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join(60)
    assert server.stop() == 0

    pids = set(served.values())
    assert len(served) >= 120, "too few requests served: %d" % len(served)
    assert len(pids) > 4, "no worker was recycled by --max-requests: %s" % pids
    exported = {}
    for path in spans_dir.iterdir():
        for line in path.read_text().splitlines():
            span = json.loads(line)
            exported[span["id"]] = span["pid"]
    missing = sorted(set(served) - set(exported))
    assert not missing, "%d spans never arrived, e.g. %s (workers %s)" % (
        len(missing), missing[:5], sorted({served[name] for name in missing}))
    assert all(exported[name] == pid for name, pid in served.items())


RUN_HOOKS = '''
import os
import sys

import greenserve
from greenserve import WSGIServer

LOG = sys.argv[1]


def line(*words):
    with open(LOG, "a") as log:
        log.write(" ".join(str(word) for word in words) + "\\n")


def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [str(os.getpid()).encode()]


def pre_request(worker, req):
    pass


try:
    greenserve.run(lambda listener: WSGIServer(listener, app, log=None), pre_request=pre_request)
except ValueError as exc:
    line("refused", str(exc).split(":")[0])
sys.exit(greenserve.run(
    lambda listener: WSGIServer(listener, app, log=None), bind="127.0.0.1:%d", workers=2,
    on_starting=lambda server: line("on_starting", os.getpid()),
    post_fork=lambda server, worker: line("post_fork", os.getpid(), worker.ppid),
    post_worker_init=lambda worker: line("post_worker_init", os.getpid()),
    worker_exit="hookapp:worker_exit",
    child_exit=lambda server, worker: line("child_exit", os.getpid(), worker.pid),
    on_exit=lambda server: line("on_exit", os.getpid()),
))
'''


def test_run_takes_the_hooks_as_keywords(tmp_path):
    port = free_port()
    (tmp_path / "hookapp.py").write_text(textwrap.dedent(HOOKAPP))
    (tmp_path / "run_hooks.py").write_text(RUN_HOOKS % port)
    hook_log = tmp_path / "hooks.log"
    log = tmp_path / "error.log"
    process = subprocess.Popen(
        [sys.executable, "run_hooks.py", str(hook_log)], cwd=str(tmp_path),
        env=subprocess_env(HOOK_LOG=str(hook_log)), stdout=subprocess.DEVNULL, stderr=open(log, "w"),
        start_new_session=True,
    )
    try:
        # Both serving: a worker still booting when TERM comes ends at once, without worker_exit.
        wait_until(lambda: hook_log.exists() and hook_log.read_text().count("post_worker_init") == 2, 20, "two workers")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, log.read_text()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    lines = [line.split() for line in hook_log.read_text().splitlines()]
    master = str(process.pid)
    assert lines[0] == ["refused", "pre_request"]
    assert lines[1] == ["on_starting", master] and lines[-1] == ["on_exit", master]
    workers = {line[1] for line in lines if line[0] == "post_fork"}
    assert len(workers) == 2 and all(line[2] == master for line in lines if line[0] == "post_fork")
    assert {line[1] for line in lines if line[0] == "worker_exit"} == workers  # the string, resolved in the worker
    assert {line[2] for line in lines if line[0] == "child_exit"} == workers


SSL_HOOKS = '''
import os
import ssl


def ssl_context(config, default_ssl_context_factory):
    context = default_ssl_context_factory()
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    with open(os.environ["HOOK_LOG"], "a") as log:
        log.write("ssl_context %d %s\\n" % (os.getpid(), os.path.basename(config.certfile)))
    return context


def not_a_context(config, default_ssl_context_factory):
    return "context"
'''


def test_ssl_context_makes_the_tls_context_from_the_default_one(start, tmp_path, certificate):
    cert, key = certificate
    (tmp_path / "sslhooks.py").write_text(SSL_HOOKS)
    server = start("--certfile", cert, "--keyfile", key, "--ssl-context", "sslhooks:ssl_context")
    client = ssl.create_default_context(cafile=cert)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with client.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.version() == "TLSv1.2"  # the hook's cap; the default context would say TLSv1.3
    assert server.named("ssl_context") == [[str(server.process.pid), "cert.pem"]]
    assert server.stop() == 0
    code, stderr = run_to_end(tmp_path, "--certfile", cert, "--keyfile", key, "--ssl-context", "sslhooks:not_a_context")
    assert (code, stderr) == (2, "greenserve: error: --ssl-context: the hook returned str, not an ssl.SSLContext\n")

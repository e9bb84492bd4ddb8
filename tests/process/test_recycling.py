"""Recycling workers by memory, age and request count, with real `greenserve` processes on loopback.

A recycled worker's replacement starts first; the old worker serves until the replacement does,
then drains. The tests watch the master's children from /proc while requests keep coming, and
read the error log the master writes to a file. Every wait is bounded.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from greenserve.settings import Config, SettingError
from tests.conftest import KeepAliveFetch, Load, children_of, greenserve_command, subprocess_env, wait_until

APP = '''
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HELD = []  # what /grow allocated: it stays, as a leak does

if os.path.exists(os.path.join(HERE, "ballast")):
    BALLAST = b"x" * (200 * 1024 * 1024)  # with --preload: in the master, shared copy-on-write

if os.path.exists(os.path.join(HERE, "slow-import")):
    time.sleep(float(open(os.path.join(HERE, "slow-import")).read()))  # a worker that takes long to boot


def app(environ, start_response):
    if environ["PATH_INFO"] == "/grow":
        # 50 MiB per step, written (b"x" * n fills it), so that the pages are resident and private.
        HELD.append(b"x" * (int(environ["QUERY_STRING"] or "1") * 50 * 1024 * 1024))
    body = str(os.getpid()).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''

MiB = 1024 * 1024


@pytest.fixture
def recycling(cli_server, tmp_path):
    """start(*flags) -> a served CLIServer of the app above, with ``log()``, ``workers()``, ``get()``."""
    (tmp_path / "recycleapp.py").write_text(APP)
    log = tmp_path / "error.log"

    def start(*flags):
        server = cli_server("--chdir", str(tmp_path), "--error-log", str(log), *flags, "recycleapp:app")
        server.log = log.read_text
        server.workers = lambda: sorted(children_of(server.process.pid))
        server.get = lambda path="/": _get(server.port, path)
        wait_until(lambda: "listening on" in server.log(), 20, "the first worker to serve")
        return server

    return start


def _get(port, path="/", timeout=10):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=timeout) as response:
        return response.read().decode()


class Children:
    """Samples a master's children every 20 ms in a thread, while the ``with`` block runs."""

    def __init__(self, pid):
        self.pid = pid
        self.samples = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self):
        while not self._stop.is_set():
            self.samples.append(frozenset(children_of(self.pid)))
            time.sleep(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc_info):
        self._stop.set()
        self._thread.join(5)


def test_a_worker_over_max_worker_memory_is_replaced_before_it_stops_under_load(recycling):
    server = recycling("--workers", "2", "--max-worker-memory", "150")
    wait_until(lambda: len(server.workers()) == 2, 10, "two workers")
    with Children(server.process.pid) as children, Load(KeepAliveFetch("127.0.0.1", server.port), threads=4) as load:
        grown = int(server.get("/grow?4"))  # 200 MiB more, in whichever worker took it
        wait_until(lambda: "(pid %d) stopped: recycled" % grown in server.log(), 20, "the grown worker to stop")
        wait_until(lambda: len(server.workers()) == 2, 10, "two workers again")
        time.sleep(0.3)
    log = server.log()
    assert re.search(
        r"\[INFO\] worker \d \(pid %d\) uses 2\d\d MiB \(--max-worker-memory 150\): starting its replacement; "
        r"it stops once that one serves\n" % grown, log), log
    assert re.search(r"\[INFO\] worker \d \(pid %d\) stopped: recycled: it used 2\d\d MiB \(--max-worker-memory 150\)\n"
                     % grown, log), log
    # The replacement ran beside the grown worker and the other one: three workers at once.
    assert any(grown in sample and len(sample) == 3 for sample in children.samples), children.samples[-20:]
    assert max(len(sample) for sample in children.samples) == 3  # one replacement, not two
    assert grown not in server.workers()
    assert load.failures == [], load.failures[:5]
    assert len(load.served) > 50
    assert "[ERROR]" not in log and "[WARNING]" not in log, log


def test_with_preload_the_memory_shared_with_the_master_is_not_the_workers_own(recycling, tmp_path):
    # 200 MiB imported by the master: each worker's RSS is above the limit from its start, its
    # USS is not. Counting RSS would recycle every worker as soon as it served, in a loop.
    (tmp_path / "ballast").write_text("")
    server = recycling("--workers", "2", "--preload", "--max-worker-memory", "150")
    wait_until(lambda: len(server.workers()) == 2, 10, "two workers")
    first = server.workers()
    resident = [int(open("/proc/%d/statm" % pid).read().split()[1]) * os.sysconf("SC_PAGE_SIZE") for pid in first]
    assert min(resident) > 200 * MiB, resident
    time.sleep(2.5)  # two checks at least
    assert server.workers() == first
    assert "starting its replacement" not in server.log()
    grown = int(server.get("/grow?4"))  # its own now
    wait_until(lambda: "(pid %d) stopped: recycled" % grown in server.log(), 20, "the grown worker to stop")


def test_ttou_while_a_worker_is_recycled_retires_another_and_the_recycled_one_serves_on(recycling, tmp_path):
    # The recycled worker is no longer counted (its replacement is): TTOU retires one that is,
    # and the recycled one serves until its replacement does.
    server = recycling("--workers", "2", "--max-worker-memory", "150")
    wait_until(lambda: len(server.workers()) == 2, 10, "two workers")
    (tmp_path / "slow-import").write_text("3")  # for the replacement
    both = server.workers()
    grown = int(server.get("/grow?4"))
    other = [pid for pid in both if pid != grown][0]
    wait_until(lambda: len(server.workers()) == 3, 10, "the replacement to be forked")
    server.process.send_signal(signal.SIGTTOU)
    wait_until(lambda: "(pid %d) stopped: one worker fewer (SIGTTOU)" % other in server.log(), 10, "TTOU's worker to stop")
    assert grown in server.workers()
    assert {int(server.get()) for _ in range(5)} == {grown}  # the replacement is still booting
    wait_until(lambda: "(pid %d) stopped: recycled" % grown in server.log(), 15, "the grown worker to stop")
    wait_until(lambda: len(server.workers()) == 1, 10, "one worker")
    assert not set(server.workers()) & set(both)
    assert int(server.get()) not in both


def test_a_worker_over_the_hard_memory_limit_is_killed_at_once_and_replaced(recycling):
    server = recycling("--workers", "1", "--max-worker-memory-hard", "150")
    first = server.workers()
    grown = int(server.get("/grow?4"))
    assert [grown] == first
    wait_until(lambda: server.workers() and grown not in server.workers(), 10, "the worker to be killed")
    assert int(server.get()) != grown  # its replacement serves
    log = server.log()
    assert re.search(
        r"\[ERROR\] worker 1 \(pid %d\) uses 2\d\d MiB \(--max-worker-memory-hard 150\): killing it \(SIGKILL\); "
        r"starting another\n" % grown, log), log
    assert "stopped: " not in log  # no graceful stop: it was killed


def test_max_worker_lifetime_with_jitter_recycles_workers_at_different_times_and_fails_no_request(recycling):
    server = recycling("--workers", "2", "--max-worker-lifetime", "2", "--max-worker-lifetime-jitter", "2")
    wait_until(lambda: len(server.workers()) == 2, 10, "two workers")
    first = set(server.workers())
    with Load(KeepAliveFetch("127.0.0.1", server.port), threads=4) as load:
        wait_until(lambda: not first & set(server.workers()), 20, "both first workers recycled")
        wait_until(lambda: server.log().count("stopped: recycled after --max-worker-lifetime") >= 3, 20,
                   "three recycled workers")
        time.sleep(0.3)
    log = server.log()
    jitters = re.findall(r"\(--max-worker-lifetime 2 plus (\d+\.\d+) s of its jitter\): starting its replacement", log)
    assert len(jitters) >= 3, log
    assert len(set(jitters)) > 1, jitters  # each worker drew its own
    assert all(0 <= float(jitter) <= 2 for jitter in jitters), jitters
    assert load.failures == [], load.failures[:5]
    assert "[ERROR]" not in log and "[WARNING]" not in log, log


def test_max_requests_the_only_worker_serves_until_its_replacement_does(recycling, tmp_path):
    # With one worker, a worker that stopped itself at --max-requests left nobody accepting while
    # its replacement imported the application: here that import takes 3 s, and a request
    # arriving then waited for it. Now the old worker serves until the replacement does.
    server = recycling("--workers", "1", "--max-requests", "10")
    (tmp_path / "slow-import").write_text("3")  # for the replacement
    first = server.workers()
    answers = []  # (children before the request, the pid that answered, seconds it took)
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        before = frozenset(server.workers())
        began = time.monotonic()
        pid = int(server.get())
        answers.append((before, pid, time.monotonic() - began))
        if pid not in first:
            break
        time.sleep(0.02)
    assert answers[-1][1] not in first, "not recycled in 25 s: %s" % server.log()
    # The old worker answered while its replacement was booting beside it.
    assert any(pid in first and len(before) == 2 for before, pid, _ in answers), answers
    assert max(len(before) for before, _, _ in answers) == 2  # one replacement, not two
    slowest = max(took for _, _, took in answers)
    assert slowest < 2.5, "a request waited %.1f s for the replacement's boot" % slowest
    wait_until(lambda: server.workers() == [answers[-1][1]], 10, "the old worker to stop")
    # Gone from the process table before the master has reaped it and said so: wait for the line.
    stopped = "[INFO] worker 1 (pid %d) stopped: recycled after --max-requests\n" % first[0]
    wait_until(lambda: stopped in server.log(), 10, "the master's line on the old worker's exit")
    log = server.log()
    assert re.search(r"\[INFO\] worker pid %d served \d+ requests \(--max-requests 10\): starting its replacement; "
                     r"it stops once that one serves\n" % first[0], log), log


def test_a_replacement_that_cannot_boot_leaves_the_old_worker_serving(recycling, tmp_path):
    server = recycling("--workers", "1", "--max-requests", "5")
    (tmp_path / "slow-import").write_text("not a number")  # the replacement's import raises
    first = server.workers()
    for _ in range(8):
        server.get()
    wait_until(lambda: "before it served; starting another" in server.log(), 15, "a failed replacement")
    wait_until(lambda: server.log().count("before it served; starting another") >= 2, 15, "a second failed replacement")
    assert [int(server.get()) for _ in range(5)] == first * 5
    (tmp_path / "slow-import").unlink()
    wait_until(lambda: server.workers() and first[0] not in server.workers(), 30, "the old worker to stop")
    assert int(server.get()) not in first


def test_the_hard_memory_limit_must_be_above_the_graceful_one(tmp_path):
    with pytest.raises(SettingError, match=r"--max-worker-memory-hard \(100 MiB\) must be above --max-worker-memory"):
        Config(max_worker_memory=200, max_worker_memory_hard=100).check()
    Config(max_worker_memory_hard=100).check()  # alone, it is a limit of its own
    result = subprocess.run(
        greenserve_command("--max-worker-memory", "200", "--max-worker-memory-hard", "200", "x:app"),
        env=subprocess_env(), capture_output=True, text=True, timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("greenserve: error: --max-worker-memory-hard (200 MiB) must be above"), result.stderr


def test_recycling_settings_reach_greenserve_run(tmp_path):
    # greenserve.run() takes the table's settings by name, as the command's flags.
    script = tmp_path / "embedded.py"
    script.write_text('''
import os, sys
from gevent.server import StreamServer
import greenserve

HELD = []

def handle(sock, address):
    HELD.append(b"x" * (200 * 1024 * 1024))
    sock.sendall(str(os.getpid()).encode())

sys.exit(greenserve.run(lambda listener: StreamServer(listener, handle), bind=sys.argv[1], workers=1,
                        max_worker_memory=150, max_worker_lifetime=600))
''')
    import socket

    from tests.conftest import free_port

    port = free_port()
    log = open(tmp_path / "run.log", "w")
    process = subprocess.Popen([sys.executable, str(script), "127.0.0.1:%d" % port], env=subprocess_env(),
                               stdout=subprocess.DEVNULL, stderr=log)
    try:
        wait_until(lambda: "listening on" in (tmp_path / "run.log").read_text(), 20, "run() to serve")
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            grown = int(sock.recv(100))
        wait_until(lambda: "(pid %d) stopped: recycled" % grown in (tmp_path / "run.log").read_text(), 20,
                   "the grown worker to be recycled")
        assert "(--max-worker-memory 150): starting its replacement" in (tmp_path / "run.log").read_text()
    finally:
        process.terminate()
        process.wait(20)
        log.close()
    assert process.returncode == 0, (tmp_path / "run.log").read_text()

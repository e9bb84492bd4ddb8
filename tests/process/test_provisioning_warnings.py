"""The under-provisioning warnings, end to end: a full connection pool with clients waiting in the
backlog (said by the worker), and an overflowing listen queue (said by the master), each one
WARNING with its numbers and the setting to change, and counted in the metrics.

Each test starts `python -m greenserve` in a subprocess (tests/process/test_master.py's Master)
and stops it by PID.
"""

import os
import re
import socket
import sys
import threading
import time

import pytest

from tests.conftest import free_port, wait_until
from tests.process import test_master
from tests.process.test_metrics_master import samples, scrape_text

master = test_master.master  # the fixture: a master started in its own session, killed at the end

POOL_FULL = re.compile(
    r"WARNING.*connection pool full: 10/10 connections in use, (\d+) client\(s\) waiting in the listen "
    r"backlog, accepting paused for \d+\.\d s; .*raise --worker-connections .* or add --workers"
)


def _concurrent_gets(m, path, count):
    """``count`` requests at once, each on its own connection: their answers (or exceptions)."""
    answers = [None] * count

    def get(index):
        try:
            answers[index] = m.get(path, timeout=20)
        except Exception as exc:  # (shown by the assertion)
            answers[index] = exc

    threads = [threading.Thread(target=get, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return answers


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the number waiting is read with TCP_INFO (Linux)")
def test_slow_clients_past_worker_connections_are_answered_late_and_the_warning_says_why(master):
    # The reported case: --worker-connections 10 and 20 slow clients; all were answered, 10 of
    # them two seconds late, and nothing said why.
    m = master("--workers", "1", "--worker-connections", "10")
    answers = _concurrent_gets(m, "/sleep?2", 20)
    assert all(isinstance(answer, str) and "/sleep" in answer for answer in answers), answers
    text = m.log_text()
    found = POOL_FULL.search(text)
    assert found, text
    assert 1 <= int(found.group(1)) <= 10, found.group(0)
    assert text.count("connection pool full") == 1, text  # once a minute at most
    assert m.stop() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the number waiting is read with TCP_INFO (Linux)")
def test_a_full_pool_with_nobody_waiting_says_nothing(master):
    m = master("--workers", "1", "--worker-connections", "10", "--keepalive", "30")
    answers = _concurrent_gets(m, "/sleep?1.5", 10)  # exactly the pool: nobody waits
    assert all(isinstance(answer, str) for answer in answers), answers
    assert "WARNING" not in m.log_text(), m.log_text()  # a full pool is no alarm while nobody waits
    assert m.stop() == 0


def test_a_full_pool_is_counted_in_the_metrics(master):
    mport = free_port()
    m = master("--workers", "1", "--worker-connections", "10", "--metrics-bind", "127.0.0.1:%d" % mport)
    before = samples(scrape_text(mport))
    assert before["greenserve_pool_full_total"] == 0
    assert before["greenserve_accept_paused_seconds_total"] == 0
    answers = _concurrent_gets(m, "/sleep?2", 20)
    assert all(isinstance(answer, str) for answer in answers), answers

    def counted():
        found = samples(scrape_text(mport))
        # Ten clients waited about two seconds for slots: accepting was paused about that long.
        return found["greenserve_pool_full_total"] >= 1 and found["greenserve_accept_paused_seconds_total"] >= 0.5

    wait_until(counted, 10, "the full pool in the metrics")
    assert m.stop() == 0


@pytest.mark.skipif(not sys.platform.startswith("linux") or not os.path.exists("/proc/net/netstat"),
                    reason="the listen queue is read with TCP_INFO and /proc/net/netstat (Linux)")
def test_an_overflowing_listen_queue_is_one_warning_with_the_settings_to_change(master):
    mport = free_port()
    m = master("--workers", "1", "--backlog", "1", "--metrics-bind", "127.0.0.1:%d" % mport)
    held = threading.Thread(target=m.get, args=("/hold?4",), kwargs={"timeout": 20})
    held.start()  # the one worker's loop blocked for 4 s: nothing is accepted
    waiting = []
    try:
        time.sleep(0.5)  # (the hold accepted and running)
        for _ in range(12):
            sock = socket.socket()
            sock.setblocking(False)
            try:
                sock.connect(("127.0.0.1", m.port))
            except BlockingIOError:
                pass  # completes in the listen queue, or its SYN is dropped when the queue is full
            waiting.append(sock)
        wait_until(lambda: "listen queue overflow" in m.log_text(), 8, "the overflow warning")
    finally:
        held.join(30)
        for sock in waiting:
            sock.close()
    text = m.log_text()
    line = next(line for line in text.splitlines() if "listen queue overflow" in line)
    assert "WARNING" in line
    assert re.search(r"127\.0\.0\.1:%d has \d+ connection\(s\) waiting to be accepted, its limit 1" % m.port, line), line
    for setting in ("--backlog", "net.core.somaxconn", "--workers", "--worker-connections"):
        assert setting in line, line
    assert text.count("listen queue overflow") == 1, text  # once a minute at most
    assert samples(scrape_text(mport))["greenserve_listen_overflows_total"] >= 1
    assert m.stop() == 0

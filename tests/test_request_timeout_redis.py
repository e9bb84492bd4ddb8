"""--request-timeout with real peers: a request blocked in redis-py's BLPOP on a real redis-server.

The `greenserve` command with one worker serves an application that waits in BLPOP on a key
nobody pushes to; a real redis-server (Debian's, on a free loopback port, no persistence) is
started here and stopped by its PID. Checked straight and behind a real nginx: 504 in about the
timeout, greenserve's own short body (not nginx's page), the error log's stack naming redis-py,
other requests served by that same worker meanwhile, and no worker restarted.
"""

import os
import shutil
import signal
import subprocess
import textwrap
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests import test_nginx
from tests.conftest import CLIServer, children_of, free_port, wait_for_port

# test_nginx's fixture "tmp_dir" (a directory nginx's workers may enter), under this name here.
nginx_tmp_dir = test_nginx.tmp_dir

REDIS_SERVER = shutil.which("redis-server") or ("/usr/sbin/redis-server" if os.path.exists("/usr/sbin/redis-server")
                                                else None)
pytest.importorskip("redis", reason="redis-py is not installed (pip install redis)")
pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not installed (apt-get install redis-server)")

APP = '''
import os

import redis

PORT = int(open(os.path.join(os.path.dirname(__file__), "redis.port")).read())
store = redis.Redis(host="127.0.0.1", port=PORT, socket_connect_timeout=5)


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/blpop":
        store.blpop("greenserve-test-nobody-pushes-this", timeout=0)  # waits for ever
    elif path == "/ping":
        store.ping()  # the pool still works after a read was interrupted
    body = ("%d %s" % (os.getpid(), path)).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]
'''


@pytest.fixture
def redis_port(tmp_path):
    port = free_port()
    server = subprocess.Popen(
        [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path), "--daemonize", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_for_port(port, process=server)
        yield port
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=5)


def fetch(url, timeout=10):
    """(status, headers, body, seconds) of a GET, whatever its status."""
    began = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            status, headers, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, headers, body = error.code, error.headers, error.read()
    return status, headers, body, time.monotonic() - began


def blocked_while_others_are_served(url):
    """GET /blpop in a thread; while it waits, five other requests. Returns the blocked one's
    fetch() and the bodies of the others, each served before the blocked one was answered."""
    blocked = []
    thread = threading.Thread(target=lambda: blocked.append(fetch(url + "/blpop")))
    thread.start()
    time.sleep(0.2)  # it waits in BLPOP now
    others = []
    for n in range(5):
        status, _, body, _ = fetch(url + "/other%d" % n)
        assert status == 200
        assert thread.is_alive(), "served only after the blocked request was answered"
        others.append(body.decode())
    thread.join(15)
    return blocked[0], others


def test_a_request_blocked_in_blpop_is_answered_504_and_its_worker_serves_on(tmp_path, redis_port):
    (tmp_path / "redis.port").write_text(str(redis_port))
    (tmp_path / "rtapp.py").write_text(textwrap.dedent(APP))
    server = CLIServer("--workers", "1", "--request-timeout", "1", "--chdir", str(tmp_path), "rtapp:app",
                       cwd=str(tmp_path)).wait_ready()
    try:
        worker = fetch(server.url + "/")[2].split()[0].decode()
        (status, headers, body, seconds), others = blocked_while_others_are_served(server.url)
        assert status == 504 and body == b"Gateway Timeout\n"
        assert headers["Connection"] == "close"
        assert 1.0 <= seconds < 5.0
        assert [other.split()[0] for other in others] == [worker] * 5  # the same worker, meanwhile
        assert fetch(server.url + "/ping")[2].split()[0].decode() == worker  # no worker restarted
        assert [str(pid) for pid in children_of(server.process.pid)] == [worker]
    finally:
        code, _, log = server.stop()
    assert code == 0, log
    assert log.count("request timeout:") == 1, log
    entry = log[log.index("request timeout:"):]
    assert entry.startswith("request timeout: GET /blpop from 127.0.0.1:")
    assert 'rtapp.py", line' in entry and "store.blpop(" in entry
    assert "/redis/" in entry  # the stack goes down into redis-py, where it waited on the socket
    assert "gave no sign of life" not in log


@pytest.mark.skipif(test_nginx.NGINX is None, reason="nginx is not installed (apt-get install nginx-light)")
@pytest.mark.skipif(test_nginx.WORKER_USER is None, reason="no user www-data to run nginx's workers as")
@pytest.mark.skipif(os.geteuid() != 0, reason="nginx's master must run as root to run its workers as www-data")
def test_behind_nginx_the_client_gets_greenserves_504_not_nginxs(nginx_tmp_dir, redis_port):
    tmp_dir = nginx_tmp_dir
    (tmp_dir / "redis.port").write_text(str(redis_port))
    flags = ("--unix-socket-group", test_nginx.WORKER_USER, "--workers", "1", "--request-timeout", "1")
    with test_nginx.running_stack(tmp_dir, *flags, app=APP) as stack:
        workers = children_of(stack["greenserve"].pid)
        (status, headers, body, seconds), others = blocked_while_others_are_served(stack["url"])
        # nginx passes greenserve's answer on (its own 504 would be an HTML page, after
        # proxy_read_timeout's 60 s).
        assert status == 504 and body == b"Gateway Timeout\n"
        assert headers["Content-Type"] == "text/plain; charset=utf-8"
        assert 1.0 <= seconds < 5.0
        assert {other.split()[0] for other in others} == {str(pid) for pid in workers}
        assert children_of(stack["greenserve"].pid) == workers
        log = stack["log"].read_text()
    # The client as nginx said it (a trusted unix-socket peer), and the peer it came through.
    assert log.count("request timeout: GET /blpop from 127.0.0.1 (through a unix socket)") == 1, log
    assert "/redis/" in log

"""greenserve behind a real nginx, on loopback, proxied over a unix socket (docs/deployment.md).

nginx runs in the foreground from a generated config (skipped where nginx is not installed;
.ci/run installs it), as Debian runs it: the master as root, the workers as www-data, which may
connect to greenserve's socket only through its group (--unix-socket-group www-data). Checked:
the client's address and scheme come from nginx's headers (a unix-socket peer is trusted) and
never from a client's own; uploads and chunked uploads pass through; a streamed response reaches
the client before it is finished; a HUP reload of greenserve under load through nginx fails no
request; a socket only its owner may connect to gets a warning, and nginx a 502.
"""

import contextlib
import hashlib
import json
import os
import pathlib
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import textwrap
import time
import urllib.error
import urllib.request

import pytest

from tests.conftest import (
    KeepAliveFetch, Load, children_of, free_port, greenserve_command, stop_process, subprocess_env, wait_for_port, wait_until,
)

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else None)
try:
    WORKER_USER = pwd.getpwnam("www-data").pw_name  # nginx's workers, as on Debian and Ubuntu
except KeyError:
    WORKER_USER = None
pytestmark = [
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx-light)"),
    pytest.mark.skipif(WORKER_USER is None, reason="no user www-data to run nginx's workers as"),
    pytest.mark.skipif(os.geteuid() != 0, reason="nginx's master must run as root to run its workers as www-data"),
]

APP = '''
import hashlib
import json
import os
import time

VERSION = open(os.path.join(os.path.dirname(__file__), "version.txt")).read().strip()
RELEASE = os.path.join(os.path.dirname(__file__), "release")


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/stream":
        start_response("200 OK", [("Content-Type", "text/plain")])
        return stream()
    if path == "/upload":
        data = environ["wsgi.input"].read()
        body = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    else:
        body = {"version": VERSION, "pid": os.getpid(), "remote_addr": environ["REMOTE_ADDR"],
                "scheme": environ["wsgi.url_scheme"]}
    data = json.dumps(body).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def stream():
    yield b"first\\n"
    # The second part waits for the test, which creates the file only once it has read the
    # first through nginx: the first part cannot have been held back until the end.
    deadline = time.monotonic() + 10
    while not os.path.exists(RELEASE) and time.monotonic() < deadline:
        time.sleep(0.02)
    yield b"second\\n"
'''

MAIN_CONTEXT = """
daemon off;
master_process on;
worker_processes 1;
user {user};
pid {dir}/nginx.pid;
error_log {dir}/nginx-error.log warn;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
{http}
}}
"""

HTTP = """
    client_max_body_size 64m;

    upstream greenserve {{
        server unix:{dir}/gs.sock;
        keepalive 16;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://greenserve;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_request_buffering off;
        }}
        location /stream {{
            proxy_pass http://greenserve;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }}
    }}
"""


def nginx_conf(directory, http):
    """A whole nginx.conf around ``http``, the inside of its http block: nginx in the
    foreground, its workers as www-data, its files in ``directory``."""
    return MAIN_CONTEXT.format(user=WORKER_USER, dir=directory, http=http)


@pytest.fixture
def tmp_dir():
    """A directory nginx's workers may enter (pytest's are root's alone): for the socket and
    nginx's temporary files."""
    directory = tempfile.mkdtemp(prefix="gs-nginx-")
    os.chmod(directory, 0o711)  # enter, not list
    try:
        yield pathlib.Path(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def stack(tmp_dir):
    with running_stack(tmp_dir, "--unix-socket-group", WORKER_USER) as started:
        yield started


@contextlib.contextmanager
def running_stack(directory, *socket_flags, app=APP):
    """greenserve (2 workers, on a unix socket and on a TCP port) behind nginx. ``socket_flags``
    come last on greenserve's command line (a later flag wins); ``app`` is the source of the
    ``proxied:app`` it serves."""
    (directory / "version.txt").write_text("v1")
    (directory / "proxied.py").write_text(textwrap.dedent(app))
    direct = free_port()
    log = directory / "greenserve.log"
    greenserve = subprocess.Popen(
        greenserve_command(
            "--workers", "2", "--bind", "unix:%s/gs.sock" % directory, *socket_flags, "--bind", "127.0.0.1:%d" % direct,
            # 127.0.0.1 is not trusted here: only nginx, a unix-socket peer, may say who the client is.
            "--forwarded-allow-ips", "10.9.9.9", "--chdir", str(directory), "proxied:app",
        ),
        cwd=str(directory), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=open(log, "w"),
        start_new_session=True,
    )
    port = free_port()
    try:
        wait_for_port(direct, process=greenserve)
        wait_until(lambda: "listening on" in log.read_text(), 20, "greenserve")
        with running_nginx(directory, HTTP.format(dir=directory, port=port), port):
            yield {"dir": directory, "url": "http://127.0.0.1:%d" % port, "direct": "http://127.0.0.1:%d" % direct,
                   "greenserve": greenserve, "log": log}
    finally:
        stop_process(greenserve, signal.SIGTERM)
    assert greenserve.returncode == 0, log.read_text()


@contextlib.contextmanager
def running_nginx(directory, http, port):
    """nginx in the foreground (``nginx_conf(directory, http)``, listening on ``port``) for the
    block's time; the test is skipped where it cannot start here."""
    (directory / "nginx.conf").write_text(nginx_conf(directory, http))
    nginx = subprocess.Popen(
        [NGINX, "-p", str(directory), "-c", str(directory / "nginx.conf")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        try:
            wait_for_port(port, timeout=15, process=nginx)
        except AssertionError:
            pytest.skip("nginx did not start here: %s" % nginx.stderr.read().decode(errors="replace")[-500:])
        yield nginx
    finally:
        stop_process(nginx, signal.SIGQUIT)


def _json(url, headers=None, data=None, timeout=10):
    request = urllib.request.Request(url, headers=headers or {}, data=data)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def test_client_address_and_scheme_come_only_from_the_trusted_proxy(stack):
    spoof = {"X-Forwarded-For": "6.6.6.6", "X-Forwarded-Proto": "https"}
    # Through nginx: nginx appended its peer (127.0.0.1) and set the scheme it saw (http); the
    # client's own claims are to the left of that, or overwritten, and count for nothing.
    via_nginx = _json(stack["url"] + "/", headers=spoof)
    assert (via_nginx["remote_addr"], via_nginx["scheme"]) == ("127.0.0.1", "http")
    # Straight to greenserve from 127.0.0.1, which is not in --forwarded-allow-ips: ignored.
    direct = _json(stack["direct"] + "/", headers=spoof)
    assert (direct["remote_addr"], direct["scheme"]) == ("127.0.0.1", "http")
    # Without any proxy header, a unix-socket peer's address is empty (as in gunicorn):
    # nginx's X-Forwarded-For is what filled it in above.
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(stack["dir"] / "gs.sock"))
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        raw = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            raw += chunk
    assert json.loads(raw.split(b"\r\n\r\n", 1)[1])["remote_addr"] == ""


def test_uploads_pass_through(stack):
    data = os.urandom(3 * 1024 * 1024 + 77)
    expected = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert _json(stack["url"] + "/upload", data=data, timeout=30) == expected
    # Chunked from the client (no Content-Length): nginx passes it on to greenserve.
    pieces = (data[i:i + 100000] for i in range(0, len(data), 100000))
    request = urllib.request.Request(stack["url"] + "/upload", data=pieces,
                                     headers={"Transfer-Encoding": "chunked"}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        assert json.loads(response.read()) == expected


def test_streamed_response_is_not_held_back(stack):
    with urllib.request.urlopen(stack["url"] + "/stream", timeout=15) as response:
        assert response.readline() == b"first\n"  # before the app has produced the rest
        (stack["dir"] / "release").write_text("go")
        assert response.readline() == b"second\n"


def test_hup_reload_through_nginx_fails_no_request(stack):
    greenserve = stack["greenserve"]
    old = set(children_of(greenserve.pid))
    with Load(lambda: _json(stack["url"] + "/")["version"]) as load:
        time.sleep(0.3)
        (stack["dir"] / "version.txt").write_text("v2")
        greenserve.send_signal(signal.SIGHUP)
        wait_until(lambda: not old & set(children_of(greenserve.pid)) and len(children_of(greenserve.pid)) == 2,
                   20, "the new workers")
        wait_until(lambda: "v2" in load.served[-5:], 10, "the new code")
    assert load.failures == [], load.failures[:5]
    assert "v1" in load.served and "v2" in load.served


def test_three_hup_reloads_under_keep_alive_get_and_post_through_nginx_fail_no_request(stack):
    # nginx keeps its upstream connections (keepalive 16) and never retries a POST: a worker
    # that closed such a connection as "idle" while nginx was sending on it made a 502.
    greenserve = stack["greenserve"]
    port = int(stack["url"].rsplit(":", 1)[1])
    fetch = KeepAliveFetch("127.0.0.1", port)
    with Load(lambda: json.loads(fetch())["version"], threads=6) as load:
        for version in ("v2", "v3", "v4"):
            old = set(children_of(greenserve.pid))
            time.sleep(0.3)
            (stack["dir"] / "version.txt").write_text(version)
            greenserve.send_signal(signal.SIGHUP)
            wait_until(lambda: not old & set(children_of(greenserve.pid)) and len(children_of(greenserve.pid)) == 2,
                       20, "the new workers")
        wait_until(lambda: "v4" in load.served[-5:], 10, "the last reload's code")
    assert load.failures == [], load.failures[:5]
    assert set(load.served) == {"v1", "v2", "v3", "v4"}
    errors = (stack["dir"] / "nginx-error.log").read_text()
    assert "Connection reset" not in errors and "prematurely closed" not in errors, errors[-2000:]


def test_a_socket_only_its_owner_may_connect_to_is_warned_about_and_nginx_gets_502(tmp_dir):
    with running_stack(tmp_dir, "--unix-socket-mode", "0600") as started:
        # Root (this test) may connect to anything; nginx's workers, as www-data, may not.
        with pytest.raises(urllib.error.HTTPError) as refused:
            _json(started["url"] + "/")
        assert refused.value.code == 502
        assert "gs.sock failed (13: Permission denied)" in (tmp_dir / "nginx-error.log").read_text()
        log = started["log"].read_text()
        assert "[WARNING] unix:%s/gs.sock: only its owner can connect (mode 0600)" % tmp_dir in log, log

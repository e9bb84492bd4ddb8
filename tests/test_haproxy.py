"""greenserve behind a real HAProxy sending the PROXY protocol (docs/deployment.md, "Behind HAProxy").

Two `greenserve` instances (2 workers each, --proxy-protocol) behind HAProxy with the
configuration of docs/deployment.md, read from the page itself so the two cannot drift (only
loopback addresses, ports and the certificate path are substituted). HAProxy runs in the
foreground from a temporary directory and is stopped by its PID. Checked: the application sees
the client's own address (127.0.0.x) and scheme (http on the plain frontend, https on the TLS
one, from the v2 TLS TLV); HAProxy's health checks (PROXY v2 LOCAL) pass; a rolling restart of
both instances under keep-alive load fails no request.
"""

import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time

import pytest

from tests.conftest import CLIServer, KeepAliveFetch, Load, documented_config, free_port, substitute, wait_for_port, wait_until
from tests.entry.test_api import certificate  # noqa: F401 (a fixture)

HAPROXY = shutil.which("haproxy") or ("/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None)
pytestmark = pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (apt-get install haproxy)")

APP = '''
import json
import os


def app(environ, start_response):
    if environ["PATH_INFO"] == "/health":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]
    environ["wsgi.input"].read()
    body = json.dumps({"instance": os.environ["INSTANCE"], "pid": os.getpid(),
                       "remote_addr": environ["REMOTE_ADDR"], "scheme": environ["wsgi.url_scheme"],
                       "server_port": environ["SERVER_PORT"]}).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
'''


class HAProxy:
    def __init__(self, folder, ports, pem):
        self.http_port, self.https_port = free_port(), free_port()
        self.admin = str(folder / "admin.sock")
        config = documented_config("haproxy", section="Behind HAProxy")
        config = substitute(config, "bind :80\n", "bind 127.0.0.1:%d\n" % self.http_port)
        config = substitute(
            config, "bind :443 ssl crt /etc/haproxy/certs/example.com.pem\n",
            "bind 127.0.0.1:%d ssl crt %s\n" % (self.https_port, pem),
        )
        config = substitute(config, "10.0.0.11:8000", "127.0.0.1:%d" % ports[0])
        config = substitute(config, "10.0.0.12:8000", "127.0.0.1:%d" % ports[1])
        # Only the global section is the test's own: a log on stdout, the stats socket.
        config = (
            "global\n    log stdout format raw local0 info\n    stats socket %s level admin\n\n" % self.admin
        ) + config
        path = folder / "haproxy.cfg"
        path.write_text(config)
        check = subprocess.run([HAPROXY, "-c", "-f", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        self.log = open(folder / "haproxy.log", "w+")
        self.process = subprocess.Popen([HAPROXY, "-db", "-f", str(path)], stdout=self.log, stderr=subprocess.STDOUT)
        wait_for_port(self.http_port, process=self.process)
        # The stats socket may appear a moment after the listeners are bound.
        wait_until(lambda: os.path.exists(self.admin), 10, "HAProxy's stats socket")

    def server_states(self):
        """{server name: status} from HAProxy's stats ("UP", "DOWN", "UP 1/2", ...)."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(self.admin)
            sock.sendall(b"show stat\n")
            data = b""
            while True:
                piece = sock.recv(65536)
                if not piece:
                    break
                data += piece
        lines = data.decode().splitlines()
        fields = lines[0].lstrip("# ").split(",")
        rows = [dict(zip(fields, line.split(","))) for line in lines[1:] if line]
        return {row["svname"]: row["status"] for row in rows if row["pxname"] == "myapp"}

    def wait_state(self, name, state, timeout=20):
        wait_until(lambda: self.server_states().get(name) == state, timeout, "HAProxy to see %s %s" % (name, state))

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGUSR1)  # soft stop: finish what is in flight
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        return text


@pytest.fixture
def stack(tmp_path, certificate):  # noqa: F811
    (tmp_path / "app.py").write_text(APP)
    cert, key = certificate
    pem = tmp_path / "site.pem"
    pem.write_text(open(cert).read() + open(key).read())
    ports = [free_port(), free_port()]
    instances = {}

    def start(index):
        instance = CLIServer(
            "--workers", "2", "--proxy-protocol", "--chdir", str(tmp_path), "--graceful-timeout", "10",
            "app:app", port=ports[index], env={"INSTANCE": "app%d" % (index + 1)},
        )
        instances[index] = instance
        return instance.wait_ready()

    for index in (0, 1):
        start(index)
    haproxy = HAProxy(tmp_path, ports, pem)
    try:
        haproxy.wait_state("app1", "UP")
        haproxy.wait_state("app2", "UP")
        yield haproxy, instances, start
    finally:
        log = haproxy.stop()
        for instance in instances.values():
            if instance.process.poll() is None:
                instance.stop()
        print(log)


def get(host, port, source, context=None):
    if context is None:
        connection = http.client.HTTPConnection(host, port, timeout=10, source_address=(source, 0))
    else:
        connection = http.client.HTTPSConnection(host, port, timeout=10, source_address=(source, 0), context=context)
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        assert response.status == 200
        return json.loads(response.read())
    finally:
        connection.close()


def test_the_application_sees_the_client(stack, certificate):  # noqa: F811
    haproxy, _, _ = stack
    seen = {get("127.0.0.1", haproxy.http_port, "127.0.0.%d" % n)["remote_addr"] for n in (2, 3, 4, 5)}
    assert seen == {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
    plain = get("127.0.0.1", haproxy.http_port, "127.0.0.6")
    assert (plain["scheme"], plain["server_port"]) == ("http", str(haproxy.http_port))
    context = ssl.create_default_context(cafile=certificate[0])
    secure = get("127.0.0.1", haproxy.https_port, "127.0.0.7", context)
    assert (secure["remote_addr"], secure["scheme"], secure["server_port"]) == (
        "127.0.0.7", "https", str(haproxy.https_port)
    )
    # Both instances serve (round robin), and the health checks keep both UP.
    instances = {get("127.0.0.1", haproxy.http_port, "127.0.0.8")["instance"] for _ in range(4)}
    assert instances == {"app1", "app2"}
    assert haproxy.server_states() == {"app1": "UP", "app2": "UP", "BACKEND": "UP"}


def test_rolling_restart_under_keep_alive_load_fails_no_request(stack):
    haproxy, instances, start = stack
    fetch = KeepAliveFetch("127.0.0.1", haproxy.http_port)
    pids_before = {index: instance.process.pid for index, instance in instances.items()}
    with Load(fetch, threads=6) as load:
        time.sleep(1)
        for index, name in ((0, "app1"), (1, "app2")):
            port = instances[index].port
            code, _, err = instances[index].stop(timeout=30)  # SIGTERM, then wait for the exit
            assert code == 0, err
            haproxy.wait_state(name, "DOWN")
            start(index)
            assert instances[index].port == port
            haproxy.wait_state(name, "UP")
            time.sleep(1)
        served_during = len(load.served)
    assert load.failures == []
    assert served_during > 200
    assert {index: instance.process.pid for index, instance in instances.items()} != pids_before
    # Requests reached both new instances after their restart.
    seen = {json.loads(body)["instance"] for body in load.served[-100:]}
    assert seen == {"app1", "app2"}

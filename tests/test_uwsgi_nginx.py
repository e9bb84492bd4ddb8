"""greenserve --protocol uwsgi behind the real nginx's uwsgi_pass (Debian's uwsgi_params), on
loopback, nginx's workers as www-data as Debian runs them (tests/test_nginx.py's way of starting
it). curl is the client: a GET's query string and headers through both ways, a POST of several
MiB whose checksum comes back, a streamed response without Content-Length, several requests on one
keep-alive connection to nginx, each of them a uwsgi connection greenserve closes; a greenserve
that does not list nginx in --uwsgi-allow-from refuses it (one log line, nginx's 502), and so does
one given a modifier1 it does not serve."""

import hashlib
import json
import os
import shutil
import signal
import subprocess

import pytest

from tests.conftest import free_port, greenserve_command, stop_process, subprocess_env, wait_for_port, wait_until
from tests.test_nginx import pytestmark as nginx_marks, running_nginx, tmp_dir  # noqa: F401
from tests.uwsgi_app import STREAM

CURL = shutil.which("curl")
UWSGI_PARAMS = "/etc/nginx/uwsgi_params"
pytestmark = nginx_marks + [
    pytest.mark.skipif(CURL is None, reason="curl is not installed (apt-get install curl)"),
    pytest.mark.skipif(not os.path.exists(UWSGI_PARAMS), reason="no %s (nginx-common)" % UWSGI_PARAMS),
]

HTTP = """
    client_max_body_size 64m;
    upstream allowed {{
        server 127.0.0.1:{allowed};
        keepalive 4;  # nginx would reuse them: greenserve closes each after its response
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            uwsgi_pass allowed;
            include uwsgi_params;
        }}
        location /mod5 {{
            uwsgi_pass allowed;
            include uwsgi_params;
            uwsgi_modifier1 5;
        }}
        location /stream {{
            uwsgi_pass allowed;
            include uwsgi_params;
            uwsgi_buffering off;
        }}
        location /refused {{
            uwsgi_pass 127.0.0.1:{refused};
            include uwsgi_params;
        }}
    }}
"""


def start_greenserve(directory, name, port, *flags):
    log = directory / ("%s.log" % name)
    process = subprocess.Popen(
        greenserve_command("--workers", "1", "--protocol", "uwsgi", "--bind", "127.0.0.1:%d" % port,
                           *flags, "tests.uwsgi_app:app"),
        cwd=str(directory), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=open(log, "w"),
        start_new_session=True,
    )
    return process, log


@pytest.fixture
def stack(tmp_dir):  # noqa: F811 (tests/test_nginx.py's fixture)
    shutil.copy(UWSGI_PARAMS, tmp_dir / "uwsgi_params")  # `include uwsgi_params;` beside nginx.conf
    allowed, refused, port = free_port(), free_port(), free_port()
    processes = [
        start_greenserve(tmp_dir, "allowed", allowed),
        start_greenserve(tmp_dir, "refused", refused, "--uwsgi-allow-from", "10.9.9.9,::1"),
    ]
    try:
        for (process, log), gs_port in zip(processes, (allowed, refused)):
            wait_for_port(gs_port, process=process)
            wait_until(lambda: "listening on" in log.read_text(), 20, "greenserve")
        with running_nginx(tmp_dir, HTTP.format(allowed=allowed, refused=refused, port=port), port):
            yield {"url": "http://127.0.0.1:%d" % port, "allowed": allowed, "dir": tmp_dir,
                   "allowed_log": processes[0][1], "refused_log": processes[1][1]}
    finally:
        for process, _ in processes:
            stop_process(process, signal.SIGTERM)
    for process, log in processes:
        assert process.returncode == 0, log.read_text()


def curl(*args, timeout=60):
    result = subprocess.run([CURL, "-sS", "--max-time", "30", *args], capture_output=True, timeout=timeout)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return result.stdout


def established_to(port):
    """Connections to ``port`` on this machine that are still open (/proc/net/tcp: state 01)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
                    count += 1
    return count


def test_a_get_s_query_string_and_headers_go_through_both_ways(stack):
    output = curl("-D", "-", "-H", "X-Custom: hello there", "-H", "Cookie: a=1", stack["url"] + "/some/wh%20ere?x=1&y=%41")
    head, _, body = output.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\nX-App: greenserve\r\n" in head
    seen = json.loads(body)
    assert seen["REMOTE_PORT"].isdigit() and seen["HTTP_USER_AGENT"].startswith("curl/")
    assert seen["SERVER_PORT"] == stack["url"].rsplit(":", 1)[1]
    # nginx sends CONTENT_TYPE and CONTENT_LENGTH empty for a request without a body (PEP 3333: "may be empty").
    assert (seen["CONTENT_TYPE"], seen["CONTENT_LENGTH"], seen["HTTP_CONTENT_LENGTH"]) == ("", "", None)
    assert {key: seen[key] for key in seen if key not in ("REMOTE_PORT", "HTTP_USER_AGENT", "SERVER_PORT",
            "CONTENT_TYPE", "CONTENT_LENGTH", "HTTP_CONTENT_LENGTH")} == {
        "SERVER_NAME": "", "DOCUMENT_ROOT": str(stack["dir"] / "html"), "SCRIPT_NAME": "", "REQUEST_METHOD": "GET", "PATH_INFO": "/some/wh ere", "QUERY_STRING": "x=1&y=%41",
        "RAW_URI": "/some/wh%20ere?x=1&y=%41", "REMOTE_ADDR": "127.0.0.1", "HTTP_HOST": "127.0.0.1",
        "HTTP_X_CUSTOM": "hello there", "HTTP_COOKIE": "a=1", "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
    }


def test_a_post_of_several_mib_comes_through_whole(stack):
    data = os.urandom(1 << 16) * 96  # 6 MiB
    path = stack["dir"] / "upload.bin"
    path.write_bytes(data)
    answer = json.loads(curl("--data-binary", "@%s" % path, "-H", "Content-Type: application/octet-stream",
                             stack["url"] + "/upload"))
    assert answer == {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def test_a_streamed_response_without_content_length_arrives_whole(stack):
    assert curl(stack["url"] + "/stream") == b"".join(STREAM)


def test_several_requests_on_one_keep_alive_connection_each_a_uwsgi_connection_closed(stack):
    urls = [stack["url"] + "/n%d?i=%d" % (i, i) for i in range(5)]
    output = curl("-w", "\\n%{num_connects}\\n", *urls).decode()
    lines = output.strip().split("\n")
    bodies, connects = [json.loads(line) for line in lines[0::2]], [int(line) for line in lines[1::2]]
    assert [body["PATH_INFO"] for body in bodies] == ["/n%d" % i for i in range(5)]
    assert connects == [1, 0, 0, 0, 0]  # curl kept its one connection to nginx
    # nginx keeps idle upstream connections (keepalive 4); greenserve closed each of them.
    wait_until(lambda: established_to(stack["allowed"]) == 0, 5, "the uwsgi connections closed")
    assert "[WARNING] malformed uwsgi" not in stack["allowed_log"].read_text()


@pytest.mark.parametrize("path, log, words", [
    ("/refused", "refused_log", "uwsgi request from 127.0.0.1 refused: not in --uwsgi-allow-from 10.9.9.9,::1"),
    ("/mod5", "allowed_log", "malformed uwsgi packet: modifier1 5: only 0"),
], ids=["peer-not-allowed", "modifier1-5"])
def test_a_refused_connection_is_one_log_line_each_and_nginx_answers_502(stack, path, log, words):
    result = subprocess.run([CURL, "-s", "-o", "/dev/null", "-w", "%{http_code}", stack["url"] + path],
                            capture_output=True, timeout=60)
    assert result.stdout == b"502"
    wait_until(lambda: words in stack[log].read_text(), 5, "the refusal's line")
    lines = [line for line in stack[log].read_text().splitlines() if "[WARNING] " in line and "uwsgi" in line]
    # One line a connection (nginx tries its upstream again after the first is closed on it).
    assert 1 <= len(lines) <= 2 and len(set(line.rsplit(":", 1)[1] for line in lines)) == len(lines), lines
    for line in lines:
        assert words in line and "(connection from 127.0.0.1:" in line, line
    # Closed unread (a refused peer's packet: a reset) or read whole (a modifier it does not serve).
    nginx_log = (stack["dir"] / "nginx-error.log").read_text()
    assert "upstream prematurely closed connection" in nginx_log or "(104: Connection reset by peer)" in nginx_log
    assert curl(stack["url"] + "/after").startswith(b"{")  # the worker goes on

"""--protocol uwsgi on real sockets: packets as nginx's uwsgi_pass sends them, the environ and the
body the application gets, the HTTP/1.x answer and the close after it; each malformed packet is one
log line naming the peer and the problem and a close, and the worker goes on serving; a peer
outside --uwsgi-allow-from is refused the same way. The real nginx in front: test_uwsgi_nginx.py."""

import hashlib
import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import (
    ROOT, ServerThread, free_port, greenserve_command, stop_process, subprocess_env, wait_for_port, wait_until,
)
from tests.test_uwsgi_packet import NGINX_VARS, packet
from tests.uwsgi_app import STREAM, app

def uwsgi_server(**kwargs):
    """tests.uwsgi_app's app served with --protocol uwsgi in this process (a context manager)."""
    return ServerThread(app, protocol="uwsgi", **kwargs).start()


def exchange(port, data, timeout=5, shut=False):
    """Send ``data`` on a new connection, read to the server's close; the bytes answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        if shut:
            sock.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:  # closed with what we sent unread: a close all the same
                chunk = b""
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)


def split(response):
    head, _, body = response.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    return lines[0], {line.split(":", 1)[0].lower(): line.split(":", 1)[1].strip() for line in lines[1:]}, body


def test_the_vars_become_the_environ_and_the_answer_is_http():
    with uwsgi_server() as srv:
        variables = [(k, v) for k, v in NGINX_VARS if k != b"CONTENT_LENGTH"] + [(b"HTTP_X_CUSTOM", b"yes")]
        status, headers, body = split(exchange(srv.port, packet(variables + [(b"CONTENT_LENGTH", b"5")], b"hello")))
        assert status == "HTTP/1.1 200 OK"
        assert headers["connection"] == "close" and headers["content-length"] == str(len(body))
        assert json.loads(body) == {
            "REQUEST_METHOD": "POST", "PATH_INFO": "/a b/", "QUERY_STRING": "x=1&y=%41", "RAW_URI": "/a%20b/?x=1&y=%41",
            "SERVER_PROTOCOL": "HTTP/1.1", "CONTENT_TYPE": "application/x-www-form-urlencoded", "CONTENT_LENGTH": "5",
            "REMOTE_ADDR": "127.0.0.1", "REMOTE_PORT": "51234", "SERVER_NAME": "localhost", "SERVER_PORT": "8080",
            "DOCUMENT_ROOT": "/usr/share/nginx/html", "HTTP_HOST": "127.0.0.1", "HTTP_USER_AGENT": "curl/7.88.1",
            "HTTP_CONTENT_LENGTH": None, "HTTP_X_CUSTOM": "yes", "HTTP_COOKIE": None, "wsgi.url_scheme": "http",
            "SCRIPT_NAME": "",
        }
        assert srv.errors.getvalue() == ""


def test_the_front_end_says_who_the_client_is_and_its_scheme():
    with uwsgi_server() as srv:
        _, _, body = split(exchange(srv.port, packet([(b"REMOTE_ADDR", b"203.0.113.9"), (b"HTTPS", b"on")])))
        seen = json.loads(body)
        assert (seen["REMOTE_ADDR"], seen["wsgi.url_scheme"], seen["REMOTE_PORT"]) == ("203.0.113.9", "https", None)


def test_a_streamed_body_is_not_chunked_and_ends_with_the_connection():
    with uwsgi_server() as srv:
        status, headers, body = split(exchange(srv.port, packet([(b"PATH_INFO", b"/stream")])))
        assert status == "HTTP/1.1 200 OK"
        assert "transfer-encoding" not in headers and "content-length" not in headers
        assert headers["connection"] == "close" and body == b"".join(STREAM)


def test_head_gets_no_body():
    with uwsgi_server() as srv:
        status, headers, body = split(exchange(srv.port, packet([(b"REQUEST_METHOD", b"HEAD")])))
        assert status == "HTTP/1.1 200 OK" and body == b"" and int(headers["content-length"]) > 0


def test_a_body_of_several_mib_is_streamed_to_the_application():
    with uwsgi_server() as srv:
        body = bytes(range(256)) * (6 * 4096)  # 6 MiB
        response = exchange(srv.port, packet([(b"PATH_INFO", b"/upload"), (b"CONTENT_LENGTH", b"%d" % len(body))], body),
                            timeout=30)
        assert json.loads(split(response)[2]) == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_a_body_over_the_limit_is_answered_413():
    with uwsgi_server(limit_request_body=10) as srv:
        status, _, body = split(exchange(srv.port, packet([(b"CONTENT_LENGTH", b"11")], b"x" * 11)))
        assert status == "HTTP/1.1 413 Content Too Large" and b"exceeds the limit of 10" in body


def test_request_timeout_is_answered_504():
    with uwsgi_server(request_timeout=0.3) as srv:
        started = time.monotonic()
        status, _, _ = split(exchange(srv.port, packet([(b"PATH_INFO", b"/slow")])))
        assert status == "HTTP/1.1 504 Gateway Timeout" and time.monotonic() - started < 3


MALFORMED = [
    (packet([], modifier1=30), "modifier1 30: only 0 (a WSGI request) is served"),
    (packet([], modifier2=2), "modifier2 2: only 0 is served"),
    (b"\x00\xff\xff\x00", "vars of 65535 bytes, over the limit of 992"),
    (b"\x00\x0a\x00\x00" + b"\x14\x00KEY" + b"\x00" * 5, "runs past the end of the vars (datasize 10)"),
    (packet([(b"K\xe9Y", b"v")]), "is not a CGI name"),
    (packet([(b"HTTP_X", b"a\nb")]), "the value of HTTP_X holds a control character"),
    (b"\x00\x10", "closed after 2 bytes, before a complete uwsgi packet"),
    (packet([(b"PATH_INFO", b"/x")])[:-3], "closed after 16 bytes, before a complete uwsgi packet"),
]


@pytest.mark.parametrize("data, words", MALFORMED, ids=[w.split(":")[0][:30] for _, w in MALFORMED])
def test_a_malformed_packet_is_one_log_line_and_a_close_and_the_worker_goes_on(data, words):
    # limit_request_line + fields x field size: a head limit of 992 bytes (head.Limits.max_head).
    with uwsgi_server(limit_request_line=100, limit_request_fields=4, limit_request_field_size=220) as srv:
        assert exchange(srv.port, data, shut=True) == b""  # closed unanswered
        wait_until(lambda: srv.errors.getvalue(), 5, "the log line")
        lines = srv.errors.getvalue().splitlines()
        assert len(lines) == 1, lines
        assert words in lines[0] and "connection from 127.0.0.1:" in lines[0] and "closed" in lines[0], lines[0]
        assert "Traceback" not in srv.errors.getvalue()
        status, _, _ = split(exchange(srv.port, packet([(b"PATH_INFO", b"/")])))
        assert status == "HTTP/1.1 200 OK"


def test_a_packet_not_complete_in_header_timeout_is_one_log_line():
    with uwsgi_server(header_timeout=0.5) as srv:
        started = time.monotonic()
        assert exchange(srv.port, packet([(b"PATH_INFO", b"/")])[:10]) == b""
        assert time.monotonic() - started < 4
        wait_until(lambda: srv.errors.getvalue(), 5, "the log line")
        assert "no complete uwsgi packet in time (header_timeout; 10 bytes of one)" in srv.errors.getvalue()


def test_a_silent_connection_is_closed_without_a_line():
    with uwsgi_server(header_timeout=0.3) as srv:
        assert exchange(srv.port, b"", shut=True) == b""
        time.sleep(0.5)
        assert srv.errors.getvalue() == ""


def test_a_peer_outside_the_allow_list_is_refused():
    with uwsgi_server(uwsgi_allow_ips="10.1.2.3, 192.168.0.0/16") as srv:
        assert exchange(srv.port, packet([(b"PATH_INFO", b"/")])) == b""
        wait_until(lambda: srv.errors.getvalue(), 5, "the log line")
        line, = srv.errors.getvalue().splitlines()
        assert "uwsgi request from 127.0.0.1 refused: not in --uwsgi-allow-from 10.1.2.3,192.168.0.0/16" in line


def test_a_network_or_star_in_the_allow_list_lets_the_peer_in():
    for allow in ("127.0.0.0/8", "*"):
        with uwsgi_server(uwsgi_allow_ips=allow) as srv:
            assert split(exchange(srv.port, packet([])))[0] == "HTTP/1.1 200 OK"


def test_a_unix_socket_peer_is_always_served(tmp_path):
    path = str(tmp_path / "uwsgi.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen(16)
    with uwsgi_server(listener=listener, uwsgi_allow_ips="10.1.2.3"):
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(path)
            sock.sendall(packet([]))
            assert sock.recv(100).startswith(b"HTTP/1.1 200 OK\r\n")


def test_the_settings_refuse_what_cannot_go_with_uwsgi_and_http_imports_none_of_it():
    from greenserve.settings import Config, SettingError

    with pytest.raises(SettingError, match="--protocol uwsgi cannot be used with --sticky"):
        Config(protocol="uwsgi", sticky=True).check()
    with pytest.raises(SettingError, match="cannot be used with h2 in --http-protocols"):
        Config(protocol="uwsgi", http_protocols="h2,h1", http2_cleartext="prior-knowledge").check()
    with pytest.raises(ValueError, match="must be http or uwsgi"):
        Config(protocol="fastcgi")
    with pytest.raises(ValueError, match="'nowhere' is not an IP address"):
        Config(uwsgi_allow_ips="nowhere")
    # --protocol http, the default: nothing of uwsgi is imported, the protocol is HTTP/1.1's.
    script = (
        "import sys\nfrom greenserve import WSGIServer\nfrom greenserve.http11 import Http11Protocol\n"
        "s = WSGIServer(('127.0.0.1', 0), lambda e, r: [])\n"
        "assert s.choose_protocol is Http11Protocol\n"
        "print(sorted(m for m in sys.modules if 'uwsgi' in m))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], env=subprocess_env(), cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_the_command_names_a_bad_protocol_and_exits_2():
    result = subprocess.run(greenserve_command("--protocol", "fastcgi", "tests.conftest:hello_app"),
                            env=subprocess_env(), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--protocol: must be http or uwsgi (nginx's uwsgi_pass), got 'fastcgi'" in result.stderr


def test_a_gunicorn_conf_py_sets_it_and_the_start_says_so(tmp_path):
    # gunicorn 24's names in a config file, read by the command as gunicorn reads them.
    (tmp_path / "gunicorn.conf.py").write_text('protocol = "uwsgi"\nuwsgi_allow_ips = "10.0.0.0/8,127.0.0.1"\n')
    printed = subprocess.run(greenserve_command("-c", "gunicorn.conf.py", "--print-config", "tests.uwsgi_app:app"),
                             env=subprocess_env(), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    lines = {line.split()[0]: line for line in printed.stdout.splitlines() if line.startswith(("protocol", "uwsgi"))}
    assert " 'uwsgi' " in lines["protocol"] and "gunicorn.conf.py:1" in lines["protocol"], lines
    assert "['10.0.0.0/8', '127.0.0.1']" in lines["uwsgi_allow_ips"] and "gunicorn.conf.py:2" in lines["uwsgi_allow_ips"]
    port = free_port()
    server = subprocess.Popen(greenserve_command("-c", "gunicorn.conf.py", "--workers", "1", "--bind",
                                                 "127.0.0.1:%d" % port, "tests.uwsgi_app:app"),
                              env=subprocess_env(), cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, start_new_session=True)
    try:
        wait_for_port(port, process=server)
        assert split(exchange(port, packet([])))[0] == "HTTP/1.1 200 OK"
    finally:
        stop_process(server, signal.SIGTERM)
    assert "listening on http://127.0.0.1:%d speaking uwsgi (nginx's uwsgi_pass) to 10.0.0.0/8,127.0.0.1" % port \
        in server.stderr.read()

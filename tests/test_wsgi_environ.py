"""The WSGI environ (PEP 3333) as an application sees it, over real sockets."""

import json
import sys

import pytest

from greenserve import _accel
from tests.conftest import Client


def environ_app(environ, start_response):
    keys = {}
    for key, value in environ.items():
        if isinstance(value, (str, bool, int)) or key == "wsgi.version":
            keys[key] = value
        else:
            keys[key] = type(value).__name__
    body = json.dumps(keys).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def environ_for(client, *args, **kwargs):
    response = client.get(*args, **kwargs)
    assert response.status == 200, response.body
    return json.loads(response.body)


def test_cgi_variables(serve, client_for):
    server = serve(environ_app)
    client = client_for(server)
    env = environ_for(
        client,
        "/some/path?a=1&b=%20two",
        headers=[("Host", "example.com:8080"), ("Content-Type", "text/x-test"), ("X-Custom", "yes")],
    )
    assert env["REQUEST_METHOD"] == "GET"
    assert env["SCRIPT_NAME"] == ""
    assert env["PATH_INFO"] == "/some/path"
    assert env["QUERY_STRING"] == "a=1&b=%20two"
    assert env["SERVER_PROTOCOL"] == "HTTP/1.1"
    assert env["SERVER_NAME"] == "127.0.0.1"
    assert env["SERVER_PORT"] == str(server.port)
    assert env["REMOTE_ADDR"] == "127.0.0.1"
    assert int(env["REMOTE_PORT"]) == client.sock.getsockname()[1]
    assert env["HTTP_HOST"] == "example.com:8080"
    assert env["CONTENT_TYPE"] == "text/x-test"
    assert "HTTP_CONTENT_TYPE" not in env
    assert env["HTTP_X_CUSTOM"] == "yes"
    assert env["RAW_URI"] == "/some/path?a=1&b=%20two"
    assert env["GATEWAY_INTERFACE"] == "CGI/1.1"
    assert env["SERVER_SOFTWARE"].startswith("greenserve/")


def test_wsgi_keys(serve, client_for):
    env = environ_for(client_for(serve(environ_app)), "/")
    assert env["wsgi.version"] == [1, 0]
    assert env["wsgi.url_scheme"] == "http"
    assert env["wsgi.multithread"] is False
    assert env["wsgi.multiprocess"] is False
    assert env["wsgi.run_once"] is False
    assert env["wsgi.input_terminated"] is True
    assert "wsgi.input" in env and "wsgi.errors" in env and "wsgi.file_wrapper" in env


def test_content_length_without_http_prefix(serve, client_for):
    client = client_for(serve(environ_app, validate=False))
    env = environ_for(client, "/", method="POST", body=b"12345")
    assert env["CONTENT_LENGTH"] == "5"
    assert "HTTP_CONTENT_LENGTH" not in env


@pytest.mark.parametrize(
    "target, path",
    [
        ("/caf%C3%A9", "/caf\xc3\xa9"),  # UTF-8 bytes, decoded as latin-1 (PEP 3333)
        ("/a%2Fb", "/a/b"),
        ("/sp%20ace", "/sp ace"),
        ("/plus+sign", "/plus+sign"),
        ("/raw\xe9", "/raw\xe9"),  # obs-text sent unencoded
        ("/100%25", "/100%"),
    ],
)
def test_path_info_is_percent_decoded_as_latin1(serve, client_for, target, path):
    env = environ_for(client_for(serve(environ_app)), target)
    assert env["PATH_INFO"] == path
    assert env["RAW_URI"] == target


def test_repeated_headers_are_joined(serve, client_for):
    env = environ_for(
        client_for(serve(environ_app)),
        "/",
        headers=[("Accept", "text/html"), ("X-Forwarded-For", "1.1.1.1"), ("Accept", "*/*"), ("Cookie", "a=1"), ("Cookie", "b=2")],
    )
    assert env["HTTP_ACCEPT"] == "text/html, */*"
    assert env["HTTP_COOKIE"] == "a=1; b=2"


def test_header_names_with_underscores_are_dropped(serve, client_for):
    env = environ_for(
        client_for(serve(environ_app)),
        "/",
        headers=[("X-Forwarded-For", "10.0.0.1"), ("X_Forwarded_For", "6.6.6.6"), ("Client_IP", "6.6.6.6")],
    )
    # Both would map to HTTP_X_FORWARDED_FOR: the spoofed one must not reach the app.
    assert env["HTTP_X_FORWARDED_FOR"] == "10.0.0.1"
    assert "HTTP_CLIENT_IP" not in env


def test_absolute_form_target(serve, client_for):
    env = environ_for(client_for(serve(environ_app)), "http://other.example:81/p/q?x=1", headers=[("Host", "ignored")])
    assert env["PATH_INFO"] == "/p/q"
    assert env["QUERY_STRING"] == "x=1"
    assert env["HTTP_HOST"] == "other.example:81"


def test_root_path_moves_the_prefix_to_script_name(serve, client_for):
    client = client_for(serve(environ_app, root_path="/app"))
    env = environ_for(client, "/app/page")
    assert env["SCRIPT_NAME"] == "/app"
    assert env["PATH_INFO"] == "/page"
    env = environ_for(client, "/app")
    assert env["PATH_INFO"] == ""
    env = environ_for(client, "/application")  # not under the prefix
    assert env["PATH_INFO"] == "/application"


def test_http10_request(serve, client_for):
    env = environ_for(client_for(serve(environ_app)), "/", version="HTTP/1.0")
    assert env["SERVER_PROTOCOL"] == "HTTP/1.0"
    assert "HTTP_HOST" not in env


def test_extra_environ_from_the_constructor(serve, client_for):
    env = environ_for(client_for(serve(environ_app, environ={"my.key": "value", "SERVER_NAME": "named"})), "/")
    assert env["my.key"] == "value"
    assert env["SERVER_NAME"] == "named"


def test_environ_is_fresh_for_every_request(serve, client_for):
    def app(environ, start_response):
        seen = environ.get("leak", "none")
        environ["leak"] = "set by the previous request"
        environ["HTTP_X_ONCE"] = "mutated"
        body = seen.encode()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]

    client = client_for(serve(app, validate=False))
    assert client.get("/").body == b"none"
    assert client.get("/").body == b"none"


@pytest.mark.skipif(not _accel.compiled(), reason="the compiled build presizes the environ; plain Python copies")
def test_a_request_environ_takes_its_keys_without_growing(serve, client_for):
    # The server's environ is made presized (wsgi.roomy_copy), and each connection's and each
    # request's is a clone of it: a request's keys fit in the table, no resize per request.
    sizes = []

    def app(environ, start_response):
        sizes.append(sys.getsizeof(environ))
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
        return [b"ok"]

    server = serve(app, validate=False)
    client = client_for(server)
    headers = [("Host", "example.com"), ("Accept", "*/*"), ("User-Agent", "test"), ("X-Request-Id", "1"),
               ("Accept-Encoding", "gzip"), ("Cookie", "a=b")]
    assert client.get("/path?query=1", headers=headers).status == 200
    assert client.get("/", headers=headers).status == 200
    assert sizes == [sys.getsizeof(server.server.base_environ)] * 2


def test_wsgi_errors_goes_to_the_error_log(serve, client_for):
    def app(environ, start_response):
        environ["wsgi.errors"].write("a message from the app\n")
        environ["wsgi.errors"].flush()
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "0")])
        return []

    server = serve(app)
    client_for(server).get("/")
    assert "a message from the app" in server.errors.getvalue()


def test_unix_socket_environ(tmp_path):
    import socket

    from tests.conftest import ServerThread

    path = str(tmp_path / "s.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    with ServerThread(environ_app, listener=listener).start():
        with Client(path) as client:
            env = environ_for(client, "/x")
    assert env["REMOTE_ADDR"] == ""
    assert env["SERVER_NAME"] == "localhost" and env["SERVER_PORT"] == "0"
    assert env["PATH_INFO"] == "/x"


# --- behind a proxy: proxy_headers and forwarded_allow_ips --------------------------------------


@pytest.mark.parametrize(
    "settings, headers, remote_addr, scheme",
    [
        # 127.0.0.1 is trusted by default: the client's address and scheme come from the proxy.
        ({}, [("X-Forwarded-For", "203.0.113.9"), ("X-Forwarded-Proto", "https")], "203.0.113.9", "https"),
        ({}, [("X-Forwarded-Ssl", "on")], "127.0.0.1", "https"),
        ({}, [("X-Forwarded-Proto", "http")], "127.0.0.1", "http"),
        # A chain: each proxy appends its peer; trusted hops are skipped from the right, and what
        # the client wrote further left proves nothing.
        ({"forwarded_allow_ips": "127.0.0.1,10.0.0.0/8"},
         [("X-Forwarded-For", "6.6.6.6, 198.51.100.7, 10.1.2.3")], "198.51.100.7", "http"),
        ({}, [("X-Forwarded-For", "[2001:db8::1]:4711")], "2001:db8::1", "http"),
        ({}, [("X-Forwarded-For", "203.0.113.9:4711")], "203.0.113.9", "http"),
        # Contradictory scheme headers: never marked secure on a guess.
        ({}, [("X-Forwarded-Proto", "https"), ("X-Forwarded-Ssl", "off")], "127.0.0.1", "http"),
        # An untrusted peer's headers are ignored.
        ({"forwarded_allow_ips": "10.0.0.1"}, [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https")],
         "127.0.0.1", "http"),
        # Turned off: ignored from anyone.
        ({"proxy_headers": False}, [("X-Forwarded-For", "6.6.6.6"), ("X-Forwarded-Proto", "https")],
         "127.0.0.1", "http"),
        ({"forwarded_allow_ips": "*"}, [("X-Forwarded-For", "6.6.6.6")], "6.6.6.6", "http"),
    ],
    ids=["trusted", "x-forwarded-ssl", "proto-http", "chain", "ipv6-with-port", "ipv4-with-port",
         "contradiction", "untrusted", "off", "everyone"],
)
def test_proxy_headers(serve, client_for, settings, headers, remote_addr, scheme):
    server = serve(environ_app, **settings)
    env = environ_for(client_for(server), "/", headers=[("Host", "x")] + headers)
    assert (env["REMOTE_ADDR"], env["wsgi.url_scheme"]) == (remote_addr, scheme)


def test_forwarded_allow_ips_that_is_not_an_address_is_refused():
    from greenserve import WSGIServer
    from greenserve.settings import SettingError

    with pytest.raises(SettingError, match="forwarded_allow_ips: 'proxy.local' is not an IP address or network"):
        WSGIServer(("127.0.0.1", 0), environ_app, forwarded_allow_ips="10.0.0.1,proxy.local")

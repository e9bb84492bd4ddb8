"""The Python API: gevent.pywsgi.WSGIServer's constructor and methods, serve(), TLS, logging targets."""

import io
import logging
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import greenserve
from greenserve.settings import SettingError
from tests.conftest import Client, ServerThread, free_port, hello_app, read_to_close, subprocess_env, wait_for_port

CLASSIC_SCRIPT = """
import sys
{import_line}

def app(environ, start_response):
    body = b"Hello, World!"
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]

WSGIServer(("127.0.0.1", int(sys.argv[1])), app, log=None, spawn=int(sys.argv[2])).serve_forever()
"""


@pytest.mark.parametrize(
    "import_line", ["from gevent.pywsgi import WSGIServer", "from greenserve import WSGIServer"]
)
def test_the_classic_benchmark_script_runs_with_only_the_import_changed(tmp_path, import_line):
    script = tmp_path / "bench_script.py"
    script.write_text(CLASSIC_SCRIPT.format(import_line=import_line))
    port = free_port()
    process = subprocess.Popen([sys.executable, str(script), str(port), "50"], env=subprocess_env())
    try:
        wait_for_port(port, process=process)
        results = []
        lock = threading.Lock()

        def worker():
            for _ in range(10):
                with Client(("127.0.0.1", port)) as client:
                    response = client.get("/", headers=[("Connection", "close")])
                with lock:
                    results.append((response.status, response.body))

        threads = [threading.Thread(target=worker) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert results == [(200, b"Hello, World!")] * 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(10)


def start_in_thread(app, listener=("127.0.0.1", 0), **kwargs):
    return ServerThread(app, listener=listener, **kwargs).start()


def test_server_properties_and_lifecycle():
    from greenserve import WSGIServer

    server = WSGIServer(("127.0.0.1", 0), hello_app, log=None)
    assert not server.started
    assert server.closed  # no socket until start(), as in gevent
    with start_in_thread(hello_app) as thread:
        server = thread.server
        assert server.started
        assert server.server_host == "127.0.0.1"
        assert server.server_port == thread.port > 0
        assert server.address == ("127.0.0.1", thread.port)
        with Client(thread.address) as client:
            assert client.get("/").status == 200
    assert server.closed and not server.started


def test_a_listening_socket_can_be_passed_in():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(50)
    port = listener.getsockname()[1]
    with start_in_thread(hello_app, listener=listener) as thread:
        assert thread.server.server_port == port
        with Client(("127.0.0.1", port)) as client:
            assert client.get("/").status == 200


def test_spawn_accepts_an_int_a_pool_and_default():
    from gevent.pool import Pool

    for spawn in (10, "default"):
        with start_in_thread(hello_app, spawn=spawn) as thread:
            with Client(thread.address) as client:
                assert client.get("/").status == 200
            if spawn == 10:
                assert thread.server.pool.size == 10
    with start_in_thread(hello_app, spawn=Pool(5)) as thread:
        with Client(thread.address) as client:
            assert client.get("/").status == 200


def test_spawn_none_serves_each_connection_in_its_own_greenlet():
    # gevent's None (handle in the hub, never block) cannot serve HTTP: reading a request blocks.
    import gevent

    def sleepy_app(environ, start_response):
        gevent.sleep(0.3)  # blocks this connection's greenlet, and no other
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    with start_in_thread(sleepy_app, spawn=None) as thread:
        clients = [Client(thread.address) for _ in range(2)]
        try:
            for client in clients:
                client.request("GET", "/")
            assert [client.read_response().status for client in clients] == [200, 200]
        finally:
            for client in clients:
                client.close()
        assert thread.server.pool.size is None  # no limit, as with spawn="default"
        assert "BlockingSwitchOutError" not in thread.errors.getvalue()


def test_handler_class_is_refused_with_a_clear_message():
    from greenserve import WSGIServer

    class MyHandler:
        pass

    with pytest.raises(TypeError, match="does not run gevent.pywsgi handler classes") as info:
        WSGIServer(("127.0.0.1", 0), hello_app, handler_class=MyHandler)
    # The message names the one handler class that is accepted.
    assert "gevent-websocket's WebSocketHandler is accepted" in str(info.value) and "\n" not in str(info.value)


def test_gevent_websocket_and_pywsgi_handler_classes_are_accepted_silently():
    # Their work is built in (environ["wsgi.websocket"]; gevent.pywsgi's own handler is the
    # default): a gevent.pywsgi + gevent-websocket script changes only its import. Named, not
    # imported, so the stand-ins need only the module and the name.
    from greenserve import WSGIServer

    for module, name in (("geventwebsocket.handler", "WebSocketHandler"), ("gevent.pywsgi", "WSGIHandler")):
        handler = type(name, (), {"__module__": module})
        server = WSGIServer(("127.0.0.1", 0), hello_app, handler_class=handler)
        server.close()
    # A subclass's own code would not run: refused like any other class.
    subclass = type("MyHandler", (type("WebSocketHandler", (), {"__module__": "geventwebsocket.handler"}),), {})
    with pytest.raises(TypeError, match="does not run gevent.pywsgi handler classes"):
        WSGIServer(("127.0.0.1", 0), hello_app, handler_class=subclass)


def test_unknown_keywords_and_invalid_settings_are_refused():
    from greenserve import WSGIServer

    with pytest.raises(TypeError, match="unexpected keyword argument 'keepalive_timeout'"):
        WSGIServer(("127.0.0.1", 0), hello_app, keepalive_timeout=5)
    with pytest.raises(TypeError, match="'bind'"):
        WSGIServer(("127.0.0.1", 0), hello_app, bind="127.0.0.1:80")  # a CLI-only setting
    with pytest.raises(SettingError, match="limit_request_line"):
        WSGIServer(("127.0.0.1", 0), hello_app, limit_request_line=-1)
    with pytest.raises(SettingError, match="keepalive"):
        WSGIServer(("127.0.0.1", 0), hello_app, keepalive="soon")
    # Even with no access log: the typo would print "-" in every line once it is turned on.
    with pytest.raises(SettingError, match=r"access_log_format: unknown atom %\(nope\)s; the atoms are h l u"):
        WSGIServer(("127.0.0.1", 0), hello_app, log=None, access_log_format="%(h)s %(nope)s")


def test_settings_are_accepted_as_keywords():
    with start_in_thread(hello_app, keepalive=7, limit_request_line=200, server_header="x") as thread:
        config = thread.server.config
        assert config.keepalive == 7.0 and config.limit_request_line == 200
        with Client(thread.address) as client:
            assert client.get("/").header("Server") == "x"


def test_a_config_is_taken_whole_and_keywords_change_a_copy():
    from greenserve import WSGIServer
    from greenserve.settings import Config

    config = Config(keepalive=7, server_header="x", reuse_port=True)
    server = WSGIServer(("127.0.0.1", 0), hello_app, log=None, config=config)
    assert server.config is config
    assert server.private_queue  # a socket of this worker's own: stop() serves what is queued on it
    server = WSGIServer(("127.0.0.1", 0), hello_app, log=None, config=config, keepalive=3)
    assert server.config.keepalive == 3.0 and server.config.server_header == "x"
    assert config.keepalive == 7.0  # the caller's is left alone
    with pytest.raises(SettingError, match="^--keyfile needs --certfile$"):
        WSGIServer(("127.0.0.1", 0), hello_app, log=None, config=Config(keyfile="key.pem"))


@pytest.mark.parametrize("target", ["stream", "logger", "none"])
def test_log_targets(target):
    records = []
    if target == "stream":
        log = io.StringIO()
    elif target == "logger":
        logger = logging.getLogger("test.greenserve.access")
        logger.setLevel(logging.INFO)
        handler = logging.Handler()
        handler.emit = records.append
        logger.addHandler(handler)
        log = logger
    else:
        log = None
    thread = ServerThread(hello_app, log=log).start()
    try:
        with Client(thread.address) as client:
            client.get("/logged?x=1", headers=[("User-Agent", "tester/1"), ("Referer", "http://ref/")])
        time.sleep(0.1)
    finally:
        thread.stop()
    if target == "stream":
        line = log.getvalue()
        assert '"GET /logged?x=1 HTTP/1.1" 200 13 "http://ref/" "tester/1"' in line
        assert line.startswith("127.0.0.1 - - [")
    elif target == "logger":
        assert len(records) == 1 and "GET /logged?x=1" in records[0].getMessage()
        assert records[0].levelno == logging.INFO
    else:
        assert thread.server.access_log is None


def test_error_log_to_a_logger():
    records = []
    logger = logging.getLogger("test.greenserve.errors")
    logger.setLevel(logging.DEBUG)
    handler = logging.Handler()
    handler.emit = records.append
    logger.addHandler(handler)

    def app(environ, start_response):
        environ["wsgi.errors"].write("from the app\n")
        raise RuntimeError("boom")

    thread = ServerThread(app, error_log=logger).start()
    try:
        with Client(thread.address) as client:
            assert client.get("/").status == 500
    finally:
        thread.stop()
    messages = [record.getMessage() for record in records]
    assert "from the app" in messages
    failure = [record for record in records if "Error handling request GET /" in record.getMessage()]
    assert len(failure) == 1 and failure[0].exc_info[0] is RuntimeError


def test_serve_stops_gracefully_on_sigterm(tmp_path):
    script = tmp_path / "serve_script.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, time
            from gevent import monkey; monkey.patch_all()
            import greenserve

            def app(environ, start_response):
                time.sleep(float(environ["QUERY_STRING"] or 0))
                start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
                return [b"ok"]

            greenserve.serve(app, "127.0.0.1", int(sys.argv[1]))
            print("returned cleanly")
            """
        )
    )
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(script), str(port)], env=subprocess_env(), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True
    )
    wait_for_port(port, process=process)
    client = Client(("127.0.0.1", port))
    client.request(target="/?0.5")
    time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    response = client.read_response()
    assert response.status == 200 and response.header("Connection") == "close"
    out, err = process.communicate(timeout=10)
    assert process.returncode == 0
    assert "returned cleanly" in out
    client.close()
    # Where it listens, in the command's words (process/master.py's line), and nothing else.
    assert re.fullmatch(r"\[[^]]+\] \[%d\] \[INFO\] greenserve %s listening on http://127\.0\.0\.1:%d\n"
                        % (process.pid, re.escape(greenserve.__version__), port), err), err


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is needed to make a test certificate (apt-get install openssl)")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = str(folder / "cert.pem"), str(folder / "key.pem")
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        check=True,
        capture_output=True,
    )
    return cert, key


def scheme_app(environ, start_response):
    body = environ["wsgi.url_scheme"].encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def https_get(port, cert):
    context = ssl.create_default_context(cafile=cert)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            tls.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return read_to_close(tls)


@pytest.mark.parametrize("how", ["files", "context"])
def test_tls_with_gevent_pywsgi_keywords(certificate, how):
    cert, key = certificate
    if how == "files":
        kwargs = {"certfile": cert, "keyfile": key}
    else:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # a stdlib context, not gevent's
        context.load_cert_chain(cert, key)
        kwargs = {"ssl_context": context}
    thread = ServerThread(scheme_app, **kwargs).start()
    try:
        assert thread.server.ssl_enabled
        data = https_get(thread.port, cert)
        assert data.startswith(b"HTTP/1.1 200 OK") and data.endswith(b"https")
        # Plain HTTP on the TLS port is the client's mistake: no crash, no traceback.
        with socket.create_connection(thread.address, timeout=5) as plain:
            plain.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            plain.settimeout(5)
            try:
                plain.recv(100)
            except (ConnectionResetError, socket.timeout):
                pass
        # A client that connects and never says hello does not hold the server.
        idle = socket.create_connection(thread.address, timeout=5)
        assert https_get(thread.port, cert).endswith(b"https")
        idle.close()
    finally:
        thread.stop()
    assert "Traceback" not in thread.errors.getvalue()


def test_importing_greenserve_patches_nothing():
    code = "import greenserve, greenserve.server, sys; from gevent import monkey; " \
           "assert not monkey.is_module_patched('socket'); assert 'ssl' not in sys.modules; print('ok')"
    result = subprocess.run([sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True, timeout=30)
    assert result.stdout.strip() == "ok", result.stderr


def test_pywsgi_environ_attribute_and_set_environ():
    import json

    def app(environ, start_response):
        body = json.dumps({k: environ.get(k) for k in ("my.key", "other.key", "SERVER_NAME")}).encode()
        start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
        return [body]

    with start_in_thread(app, environ={"my.key": "a"}) as thread:
        thread.server.set_environ({"other.key": "b"})
        thread.server.environ["SERVER_NAME"] = "named.example"
        with Client(thread.address) as client:
            seen = json.loads(client.get("/").body)
    assert seen == {"my.key": "a", "other.key": "b", "SERVER_NAME": "named.example"}


def test_tls_connections_are_not_bound_by_header_timeout_after_the_handshake(certificate):
    # The handshake runs under header_timeout; afterwards keepalive and body/send timeouts
    # govern, as on plain connections.
    cert, key = certificate
    thread = ServerThread(scheme_app, certfile=cert, keyfile=key, header_timeout=0.5, keepalive=10).start()
    try:
        context = ssl.create_default_context(cafile=cert)
        with socket.create_connection(thread.address, timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                for _ in range(2):
                    tls.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    data = b""
                    while not data.endswith(b"https"):
                        data += tls.recv(65536)
                    time.sleep(1.2)  # idle longer than header_timeout, well within keepalive
    finally:
        thread.stop()

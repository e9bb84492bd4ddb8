"""HTTP/2's settings: gunicorn's names and values (from a gunicorn.conf.py too), the one-line
refusals (h2 without TLS, h2c by Upgrade), and what the server makes of them (ALPN)."""

import pytest

from greenserve import WSGIServer
from greenserve.settings import Config, SettingError
from tests.conftest import hello_app
from tests.entry.test_config_file import printed, run_cli, write
from tests.http2.serving import make_certificate

APP = "def app(environ, start_response):\n    start_response('200 OK', [])\n    return [b'']\n"


def test_a_gunicorn_conf_py_sets_http2_by_gunicorns_names(tmp_path):
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", """
        http_protocols = "h2, h1"
        http2_cleartext = True  # gunicorn's bool: prior-knowledge
        http2_max_concurrent_streams = 50
        http2_initial_window_size = "0x20000"
        http2_max_frame_size = 32768
        http2_max_header_list_size = 0  # gunicorn's "unlimited"
    """)
    settings = printed(run_cli("-c", "gunicorn.conf.py", "--print-config", "app:app", cwd=tmp_path))
    assert settings["http_protocols"][0] == ["h2", "h1"]
    assert settings["http2_cleartext"][0] == "prior-knowledge"
    assert settings["http2_max_concurrent_streams"][0] == 50
    assert settings["http2_initial_window_size"][0] == 0x20000
    assert settings["http2_max_frame_size"][0] == 32768
    assert settings["http2_max_header_list_size"][0] == 1 << 20


@pytest.mark.parametrize("value", ["upgrade", "both"])
def test_h2c_by_upgrade_is_refused_in_one_line_from_a_file_and_a_flag(tmp_path, value):
    write(tmp_path, "app.py", APP)
    write(tmp_path, "gunicorn.conf.py", 'http_protocols = "h2,h1"\nhttp2_cleartext = %r\n' % value)
    for args in (["-c", "gunicorn.conf.py"], ["--http-protocols", "h2,h1", "--http2-cleartext", value]):
        result = run_cli(*args, "app:app", cwd=tmp_path)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert "http2" in lines[0] and "h2c by Upgrade is not offered" in lines[0]
        assert "request-smuggling" in lines[0] and "prior-knowledge" in lines[0]


def test_h2_without_tls_is_refused_in_one_line(tmp_path):
    write(tmp_path, "app.py", APP)
    result = run_cli("--http-protocols", "h2,h1", "app:app", cwd=tmp_path)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert "needs TLS" in line and "--certfile" in line and "--http2-cleartext prior-knowledge" in line
    result = run_cli("--http2-cleartext", "prior-knowledge", "app:app", cwd=tmp_path)
    (line,) = result.stderr.strip().splitlines()
    assert result.returncode == 2 and "add h2 to --http-protocols" in line


def test_values_gunicorn_takes_and_refuses():
    gunicorn_config = pytest.importorskip("gunicorn.config", reason="gunicorn is not installed")
    for name, value in (("http_protocols", "h2,h1"), ("http_protocols", "h1"), ("http_protocols", " H2 , h1 "),
                        ("http2_cleartext", "prior-knowledge"), ("http2_cleartext", "off"),
                        ("http2_max_concurrent_streams", "250"), ("http2_max_frame_size", 16777215)):
        theirs = gunicorn_config.Config()
        theirs.set(name, value)
        ours = getattr(Config(**{name: value}), name)
        assert ours == theirs.settings[name].get(), (name, value)
    for name, value in (("http_protocols", "h3"), ("http_protocols", "h2,h2"), ("http2_max_frame_size", 1000),
                        ("http2_max_concurrent_streams", 0)):
        with pytest.raises(SettingError, match=name):
            Config(**{name: value})


def test_the_python_api_takes_the_settings_and_tls_keywords(tmp_path):
    with pytest.raises(SettingError, match="needs TLS"):
        WSGIServer(("127.0.0.1", 0), hello_app, http_protocols="h2,h1")
    cert, key = make_certificate(tmp_path)
    server = WSGIServer(("127.0.0.1", 0), hello_app, http_protocols="h2,h1", certfile=cert, keyfile=key,
                        http2_max_concurrent_streams=7)
    assert server.http2_config.max_concurrent_streams == 7
    # Without h2 nothing of HTTP/2 is set up: HTTP/1.1 exactly as before.
    plain = WSGIServer(("127.0.0.1", 0), hello_app)
    assert plain.http2_config is None and plain.choose_protocol is WSGIServer.choose_protocol


def test_tls_offers_h2_by_alpn_in_the_order_given(tmp_path):
    # RFC 7301 lets the server choose: the first of its list that the client offers.
    import socket

    from tests.conftest import ServerThread
    from tests.http2.serving import client_context

    cert, key = make_certificate(tmp_path)
    for protocols, chosen in (("h2,h1", "h2"), ("h1,h2", "http/1.1"), ("h1", None)):
        server = ServerThread(hello_app, http_protocols=protocols, certfile=cert, keyfile=key).start()
        try:
            with socket.create_connection(server.address, timeout=10) as raw:
                with client_context(cert).wrap_socket(raw, server_hostname="127.0.0.1") as sock:
                    assert sock.selected_alpn_protocol() == chosen, protocols
        finally:
            server.stop()


def test_a_certificate_renewed_on_sighup_still_offers_h2(tmp_path):
    # tls.ServerCertificate.renew makes the context anew from the settings: ALPN included.
    import ssl

    from greenserve import tls

    cert, key = make_certificate(tmp_path)
    certificate = tls.ServerCertificate(Config(certfile=cert, keyfile=key, http_protocols="h2,h1"))

    class Log:
        def info(self, line):
            pass

        error = info

    assert certificate.renew(Log())
    # A handshake in memory with the renewed context.
    client_side = ssl.create_default_context(cafile=cert)
    client_side.set_alpn_protocols(["h2", "http/1.1"])
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = certificate.context.wrap_bio(to_server, to_client, server_side=True)
    client = client_side.wrap_bio(to_client, to_server, server_hostname="127.0.0.1")
    for _ in range(10):
        for side in (client, server):
            try:
                side.do_handshake()
            except ssl.SSLWantReadError:
                pass
    assert client.selected_alpn_protocol() == server.selected_alpn_protocol() == "h2"

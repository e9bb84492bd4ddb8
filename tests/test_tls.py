"""TLS of the ``greenserve`` command: client certificates, ciphers and versions, and a certificate
renewed on SIGHUP. Real certificates made by the ``openssl`` command, a real server in a
subprocess, the standard library's TLS client on loopback.
"""

import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess

import pytest

from greenserve.settings import Config, SettingError
from greenserve.tls import distinguished_name
from tests.conftest import CLIServer, Load, free_port, greenserve_command, subprocess_env, wait_until

pytestmark = pytest.mark.timeout(90)

RUN_TIMEOUT = 30

# The application shows what a TLS client sees of itself in the environ.
PROBE_SOURCE = '''
import json


def app(environ, start_response):
    keys = {key: value for key, value in environ.items() if key.startswith("SSL_")}
    keys["peercert"] = "greenserve.peercert" in environ
    body = json.dumps(keys).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]
'''


def _openssl(*args, cwd):
    result = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    if result.returncode != 0:
        pytest.skip("openssl could not make the test certificates: %s" % result.stderr.strip()[-300:])


def _key(name, cwd):
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-out", name, cwd=cwd)


def _signed(name, subject, ca, cwd, server=False):
    """name.key, and name.pem signed by ca (name of a ca.key/ca.pem pair)."""
    _key(name + ".key", cwd)
    _openssl("req", "-new", "-key", name + ".key", "-subj", subject, "-out", name + ".csr", cwd=cwd)
    with open(os.path.join(cwd, name + ".ext"), "w") as ext:
        if server:
            ext.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
        else:
            ext.write("extendedKeyUsage=clientAuth\n")
    _openssl(
        "x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key", "-CAcreateserial",
        "-days", "2", "-extfile", name + ".ext", "-out", name + ".pem", cwd=cwd,
    )


def _ca(name, subject, cwd):
    _key(name + ".key", cwd)
    # keyUsage as RFC 5280 §4.2.1.3 asks of a CA: Python 3.13's clients verify strictly
    # (VERIFY_X509_STRICT) and refuse a CA without it ("CA cert does not include key usage").
    _openssl("req", "-x509", "-new", "-key", name + ".key", "-subj", subject, "-days", "2",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             "-out", name + ".pem", cwd=cwd)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA; two server certificates it signed (A and B, for the renewal); a client certificate
    it signed; and a client certificate of another CA, which the server must not accept."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (needed to make the test certificates)")
    directory = str(tmp_path_factory.mktemp("pki"))
    _ca("ca", "/CN=Test CA/O=Greenserve Tests", directory)
    _signed("server_a", "/CN=127.0.0.1", "ca", directory, server=True)
    _signed("server_b", "/CN=127.0.0.1", "ca", directory, server=True)
    _signed("alice", "/C=DE/O=Example, Inc./CN=alice", "ca", directory)
    _ca("rogue_ca", "/CN=Rogue CA", directory)
    _signed("mallory", "/CN=mallory", "rogue_ca", directory)
    with open(os.path.join(directory, "probe.py"), "w") as probe:
        probe.write(PROBE_SOURCE)
    return directory


def _path(pki, name):
    return os.path.join(pki, name)


def _client_context(pki, client=None, maximum=None):
    context = ssl.create_default_context(cafile=_path(pki, "ca.pem"))
    if client is not None:
        context.load_cert_chain(_path(pki, client + ".pem"), _path(pki, client + ".key"))
    if maximum is not None:
        context.maximum_version = maximum
    return context


def _get(port, context):
    """GET / over a new TLS connection: (status, JSON body, SHA-256 of the server's certificate)."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
    try:
        connection.connect()
        # Taken now: a response with Connection: close (a retiring worker's) drops the socket.
        served = hashlib.sha256(connection.sock.getpeercert(binary_form=True)).hexdigest()
        connection.request("GET", "/")
        response = connection.getresponse()
        body = response.read()
        return response.status, json.loads(body), served
    finally:
        connection.close()


def _refused(port, context):
    """True when the server ends the connection in or right after the handshake (TLS 1.3 clients
    learn of a refused certificate at their first read), never answering the request."""
    try:
        status, _, _ = _get(port, context)
    except (ssl.SSLError, ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
        return True
    raise AssertionError("the server answered %d" % status)


def _log(path):
    with open(path) as log_file:
        return log_file.read()


def _fingerprint(path):
    with open(path) as pem:
        return hashlib.sha256(ssl.PEM_cert_to_DER_cert(pem.read())).hexdigest()


@pytest.fixture
def tls_server(pki, cli_server):
    """Start the probe over TLS with certificate A and these flags (stopped at the end)."""

    def start(*flags):
        return cli_server(*_cert(pki), *flags, "--chdir", pki, "probe:app")

    return start


def _stopped_cleanly(server):
    returncode, _, err = server.stop()
    assert returncode == 0, err
    assert "Traceback" not in err, err
    return err


# --- client certificates -------------------------------------------------------------------------------------------


def test_required_client_certificate(pki, tls_server):
    server = tls_server("--ca-certs", _path(pki, "ca.pem"), "--cert-reqs", "required")
    assert _refused(server.port, _client_context(pki))  # no certificate
    assert _refused(server.port, _client_context(pki, "mallory"))  # one the CA did not sign
    status, seen, _ = _get(server.port, _client_context(pki, "alice"))
    assert status == 200
    assert seen["SSL_CLIENT_VERIFY"] == "SUCCESS"
    assert seen["SSL_CLIENT_S_DN"] == "CN=alice,O=Example\\, Inc.,C=DE"  # RFC 2253, as mod_ssl
    assert seen["SSL_CLIENT_S_DN_CN"] == "alice"
    assert seen["SSL_CLIENT_I_DN"] == "O=Greenserve Tests,CN=Test CA"
    with open(_path(pki, "alice.pem")) as pem:
        assert ssl.PEM_cert_to_DER_cert(seen["SSL_CLIENT_CERT"]) == ssl.PEM_cert_to_DER_cert(pem.read())
    serial = subprocess.run(
        ["openssl", "x509", "-noout", "-serial", "-in", _path(pki, "alice.pem")], capture_output=True, text=True
    ).stdout.strip().partition("=")[2]
    assert seen["SSL_CLIENT_M_SERIAL"] == serial
    assert seen["SSL_CLIENT_V_END"].endswith(" GMT")
    assert seen["peercert"] is True
    _stopped_cleanly(server)


def test_optional_client_certificate_serves_both(pki, tls_server):
    # gunicorn's spelling of optional, as a config file written for it would give it.
    server = tls_server("--ca-certs", _path(pki, "ca.pem"), "--cert-reqs", "1")
    status, seen, _ = _get(server.port, _client_context(pki))
    assert status == 200
    assert seen == {"SSL_CLIENT_VERIFY": "NONE", "peercert": False}
    status, seen, _ = _get(server.port, _client_context(pki, "alice"))
    assert status == 200
    assert seen["SSL_CLIENT_VERIFY"] == "SUCCESS"
    assert seen["SSL_CLIENT_S_DN_CN"] == "alice"
    # A certificate is checked when one is shown: the rogue CA's is refused (mod_ssl's optional too).
    assert _refused(server.port, _client_context(pki, "mallory"))
    _stopped_cleanly(server)


def test_no_client_certificate_keys_without_cert_reqs(pki, tls_server):
    server = tls_server()
    status, seen, _ = _get(server.port, _client_context(pki, "alice"))  # offered, never asked for
    assert status == 200
    assert seen == {"peercert": False}
    _stopped_cleanly(server)


# --- versions and ciphers ------------------------------------------------------------------------------------------


def test_tls_min_version(pki, tls_server):
    default = tls_server()
    assert _get(default.port, _client_context(pki, maximum=ssl.TLSVersion.TLSv1_2))[0] == 200
    _stopped_cleanly(default)
    modern = tls_server("--tls-min-version", "1.3")
    assert _refused(modern.port, _client_context(pki, maximum=ssl.TLSVersion.TLSv1_2))
    assert _get(modern.port, _client_context(pki))[0] == 200
    _stopped_cleanly(modern)


def test_ciphers(pki, tls_server):
    server = tls_server("--ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256")
    context = _client_context(pki, maximum=ssl.TLSVersion.TLSv1_2)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            assert tls.cipher()[0] == "ECDHE-ECDSA-AES128-GCM-SHA256"
    context.set_ciphers("ECDHE-ECDSA-CHACHA20-POLY1305")  # one the server does not offer
    assert _refused(server.port, context)
    _stopped_cleanly(server)


# --- mistakes: one line, exit code 2 -------------------------------------------------------------------------------


def _run(pki, *flags):
    return subprocess.run(
        greenserve_command("--bind", "127.0.0.1:%d" % free_port(), *flags, "--chdir", pki, "probe:app"),
        cwd=pki, env=subprocess_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT,
    )


def _cert(pki):
    return ["--certfile", _path(pki, "server_a.pem"), "--keyfile", _path(pki, "server_a.key")]


@pytest.mark.parametrize(
    "flags, fragments",
    [
        (["--ca-certs", "no-such-ca.pem", "--cert-reqs", "required"], ["--ca-certs: no such file: no-such-ca.pem"]),
        (["--cert-reqs", "required"], ["--cert-reqs required needs --ca-certs FILE"]),
        (["--cert-reqs", "sometimes"], ["--cert-reqs: must be none, optional or required"]),
        (["--ciphers", "NO-SUCH-CIPHER"], ["--ciphers 'NO-SUCH-CIPHER': OpenSSL knows no cipher in it", "openssl ciphers"]),
        (["--tls-min-version", "1.1"], ["--tls-min-version: must be 1.2 or 1.3"]),
        (["--ca-certs", "server_a.key", "--cert-reqs", "optional"], ["--ca-certs", "server_a.key", "BEGIN CERTIFICATE"]),
        (["--keyfile", "server_b.key"], ["--keyfile", "server_b.key is not the key of the certificate"]),
    ],
    ids=["ca-missing", "required-without-ca", "bad-cert-reqs", "unknown-cipher", "old-version", "ca-not-pem",
         "key-mismatch"],
)
def test_tls_mistakes_are_one_line(pki, flags, fragments):
    result = _run(pki, *_cert(pki), *flags)
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1 and lines[0].startswith("greenserve: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def test_client_certificate_flags_need_certfile(pki):
    result = _run(pki, "--ca-certs", _path(pki, "ca.pem"), "--cert-reqs", "required")
    assert result.returncode == 2
    assert result.stderr.strip() == "greenserve: error: --ca-certs is a TLS setting: it needs --certfile (and --keyfile)"


def test_cert_reqs_takes_gunicorn_numbers():
    assert [Config(cert_reqs=n).cert_reqs for n in (0, 1, 2)] == ["none", "optional", "required"]
    assert Config(cert_reqs="REQUIRED").cert_reqs == "required"
    with pytest.raises(SettingError):
        Config(cert_reqs=3)
    assert Config(tls_min_version=1.3).tls_min_version == "1.3"


def test_distinguished_name_escapes_what_would_forge_another():
    # A CN holding ",O=Admins" must not read as a second attribute.
    rdns = ((("organizationName", "Example"),), (("commonName", "eve,O=Admins"),), (("emailAddress", " x+y "),))
    assert distinguished_name(rdns) == "emailAddress=\\ x\\+y\\ ,CN=eve\\,O=Admins,O=Example"


# --- renewal on SIGHUP ---------------------------------------------------------------------------------------------


def test_renewed_certificate_is_served_after_sighup(pki, tmp_path):
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    shutil.copy(_path(pki, "server_a.pem"), cert)
    shutil.copy(_path(pki, "server_a.key"), key)
    log = str(tmp_path / "error.log")
    server = CLIServer(
        "--certfile", cert, "--keyfile", key, "--workers", "2", "--error-log", log, "--chdir", pki, "probe:app"
    ).wait_ready()
    try:
        context = _client_context(pki)
        a, b = _fingerprint(_path(pki, "server_a.pem")), _fingerprint(_path(pki, "server_b.pem"))
        assert _get(server.port, context)[2] == a

        def fetch():
            status, _, served = _get(server.port, context)
            assert status == 200
            return served

        with Load(fetch, threads=3) as load:
            # A renewal as certbot does it: new files in place, then SIGHUP.
            shutil.copy(_path(pki, "server_b.pem"), cert)
            shutil.copy(_path(pki, "server_b.key"), key)
            server.process.send_signal(signal.SIGHUP)
            wait_until(lambda: _get(server.port, context)[2] == b, 20, "certificate B served")
            wait_until(lambda: b in load.served[-20:] and a not in load.served[-20:], 20, "only B served")
        assert load.failures == [], load.failures[:5]
        assert load.served, "no request went through"

        wait_until(lambda: _log(log).count("stopped: reloaded (SIGHUP)") == 2, 20, "the old workers retired")
        assert "SIGHUP: certificate reloaded: %s (sha256 %s)" % (cert, b) in _log(log)

        # A broken renewal (a certificate whose key is not the one beside it): B stays, one ERROR line.
        shutil.copy(_path(pki, "server_a.pem"), cert)
        with Load(fetch, threads=2) as load:
            server.process.send_signal(signal.SIGHUP)
            wait_until(lambda: _log(log).count("stopped: reloaded (SIGHUP)") == 4, 20, "the old workers retired")
        assert load.failures == [], load.failures[:5]
        assert set(load.served) == {b}
        assert _get(server.port, context)[2] == b
        errors = [line for line in _log(log).splitlines() if "[ERROR]" in line]
        assert len(errors) == 1, errors
        assert "the certificate cannot be loaded again, so the new workers keep serving the previous one" in errors[0]
        assert b in errors[0] and "is not the key of the certificate" in errors[0]
    finally:
        err = _stopped_cleanly(server)
    assert err == ""  # everything went to the error log


class _Log:
    def __init__(self):
        self.lines = []

    def info(self, line):
        self.lines.append(("info", line))

    def error(self, line):
        self.lines.append(("error", line))


def test_a_renewal_with_a_file_missing_keeps_the_previous_context(pki, tmp_path):
    from greenserve.tls import ServerCertificate

    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    shutil.copy(_path(pki, "server_a.pem"), cert)
    shutil.copy(_path(pki, "server_a.key"), key)
    certificate = ServerCertificate(Config(certfile=cert, keyfile=key))
    serving = certificate.context
    os.remove(key)  # a renewal caught between its two files
    log = _Log()
    assert certificate.renew(log) is False
    assert certificate.context is serving
    assert log.lines == [(
        "error",
        "SIGHUP: the certificate cannot be loaded again, so the new workers keep serving the previous one "
        "(sha256 %s): --keyfile %s: no such file, or it cannot be read" % (_fingerprint(cert), key),
    )]
    shutil.copy(_path(pki, "server_b.key"), key)
    shutil.copy(_path(pki, "server_b.pem"), cert)
    assert certificate.renew(log) is True
    assert certificate.context is not serving
    assert log.lines[-1] == ("info", "SIGHUP: certificate reloaded: %s (sha256 %s)" % (cert, _fingerprint(cert)))

"""TLS for the ``greenserve`` command: the server's context from the settings, renewed on SIGHUP,
and a client certificate's keys for the environ.

``default_ssl_context(config)`` builds the SSLContext the workers serve with from the TLS rows of
the settings table (--certfile, --keyfile, --ca-certs, --cert-reqs, --ciphers, --tls-min-version;
--http-protocols, offered by ALPN when it has h2: ``set_alpn``), raising TLSError with one line that names the flag and the fix. ``ServerCertificate`` holds the
context the master forks its workers with and renews it on SIGHUP: a certificate renewed on disk
(certbot, cert-manager) reaches the next generation of workers without a restart, and a renewal
that cannot be loaded leaves the previous certificate in service. ``client_cert_environ(sock)``
is what a connection adds to its environ once the handshake is done: mod_ssl's variables, the
names applications and frameworks already look for.

Nothing here imports ``ssl`` at import time (``connection`` imports this module before the
workers monkey-patch; see server.py), nor ``hashlib``: every worker imports this module, and
hashlib (OpenSSL's _hashlib, blake2) is for a certificate's fingerprint only.
"""


class TLSError(ValueError):
    """The TLS settings cannot make a context; the message is one line naming the flag and the fix."""


# http_protocols' names -> what ALPN calls them (RFC 7301's registry).
ALPN_NAMES = {"h1": "http/1.1", "h2": "h2"}


def set_alpn(context, protocols):
    """Offer ``protocols`` (http_protocols' h1, h2, the preferred first) by ALPN: a client that
    offers h2 too then speaks HTTP/2 where h2 comes first (RFC 7301 lets the server choose);
    one that offers none of them is served HTTP/1.1, as one that offers no ALPN at all is."""
    context.set_alpn_protocols([ALPN_NAMES[protocol] for protocol in protocols])


def default_ssl_context(config):
    """The server's SSLContext from ``config``'s TLS settings, or a TLSError saying what is wrong.

    The factory of ServerCertificate: a server hook that makes its own context (gunicorn's
    ``ssl_context(config, default_ssl_context)``) is handed this function to start from.
    """
    from gevent import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    # PROTOCOL_TLS_SERVER's own minimum is 1.2 (Python 3.10+); said here, not left to the default.
    context.minimum_version = ssl.TLSVersion.TLSv1_3 if config.tls_min_version == "1.3" else ssl.TLSVersion.TLSv1_2
    certfile, keyfile = config.certfile, config.keyfile
    try:
        context.load_cert_chain(certfile, keyfile)
    except (OSError, ValueError) as exc:
        # OpenSSL's own words ("[SSL] PEM lib (_ssl.c:3926)") do not say which file lacks what.
        problem = certificate_problem(certfile, keyfile)
        if problem is None and "KEY_VALUES_MISMATCH" in str(exc):
            problem = "--keyfile %s is not the key of the certificate in --certfile %s: give the pair's key" % (
                keyfile or certfile, certfile)
        raise TLSError(problem or (
            "cannot load the certificate %s%s: %s" % (certfile, " with key %s" % keyfile if keyfile else "", _reason(exc))
        )) from None
    if config.ca_certs is not None:
        try:
            context.load_verify_locations(config.ca_certs)
        except (OSError, ValueError) as exc:
            raise TLSError(
                "--ca-certs %s: cannot load CA certificates from it (%s): give a PEM file of "
                "-----BEGIN CERTIFICATE----- blocks" % (config.ca_certs, _reason(exc))
            ) from None
    context.verify_mode = {
        "none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED
    }[config.cert_reqs]
    if "h2" in config.http_protocols:
        set_alpn(context, config.http_protocols)  # (HTTP/1.1 alone: no ALPN, as before HTTP/2)
    if config.ciphers is not None:
        try:
            context.set_ciphers(config.ciphers)
        except ssl.SSLError:
            raise TLSError(
                "--ciphers %r: OpenSSL knows no cipher in it; give an OpenSSL cipher list such as "
                "ECDHE+AESGCM:ECDHE+CHACHA20 (see `openssl ciphers -v 'LIST'`)" % config.ciphers
            ) from None
    return context


def _reason(exc):
    return getattr(exc, "strerror", None) or str(exc)


def certificate_problem(certfile, keyfile):
    """What is missing from the PEM files, in words, or None when both hold what they should."""
    def pem(path):
        try:
            with open(path, "rb") as pem_file:
                return pem_file.read(1 << 20)
        except OSError:
            return None

    cert_text = pem(certfile)
    if cert_text is None:
        return "--certfile %s: no such file, or it cannot be read" % certfile
    if b"-----BEGIN CERTIFICATE-----" not in cert_text:
        return "--certfile %s holds no PEM certificate (a -----BEGIN CERTIFICATE----- block)" % certfile
    if keyfile is None and b"PRIVATE KEY-----" not in cert_text:
        return "the certificate file %s holds no private key: give --keyfile KEYFILE" % certfile
    if keyfile is not None:
        key_text = pem(keyfile)
        if key_text is None:
            return "--keyfile %s: no such file, or it cannot be read" % keyfile
        if b"PRIVATE KEY-----" not in key_text:
            return "--keyfile %s holds no PEM private key (a -----BEGIN PRIVATE KEY----- block)" % keyfile
    return None


def fingerprint(certfile):
    """SHA-256 of the first certificate in a PEM file, as hex (what `openssl x509 -fingerprint -sha256` says)."""
    import hashlib
    import ssl

    with open(certfile, "rb") as pem_file:
        text = pem_file.read(1 << 20).decode("ascii", "replace")
    begin = text.find("-----BEGIN CERTIFICATE-----")
    end = text.find("-----END CERTIFICATE-----", begin)
    if begin < 0 or end < 0:
        return None
    der = ssl.PEM_cert_to_DER_cert(text[begin:end + len("-----END CERTIFICATE-----")])
    return hashlib.sha256(der).hexdigest()


class ServerCertificate:
    """The SSLContext the master forks its workers with; ``renew()`` loads the files again on SIGHUP.

    Built in the master, before any worker: a worker takes ``context`` as it is when it is forked,
    so the workers of one generation serve one certificate, and a renewal reaches the next.
    ``factory(config)`` makes a context (``default_ssl_context``, or a server hook built on it).
    """

    def __init__(self, config, factory=default_ssl_context):
        self.config = config
        self.factory = factory
        self.context = factory(config)  # TLSError at start: the command's one line
        self.loaded = self._fingerprint()

    def renew(self, log):
        """Load the certificate, key and CA files again; keep the current context if they do not load.

        A renewal caught half-done (the certificate written, the key not yet) or a wrong key must
        not take the server down: the new workers then serve the previous certificate, and one
        ERROR line says why; the next SIGHUP tries again.
        """
        try:
            context = self.factory(self.config)
        except Exception as exc:  # TLSError, or whatever a hook's factory raised
            log.error(
                "SIGHUP: the certificate cannot be loaded again, so the new workers keep serving the previous "
                "one (sha256 %s): %s" % (self.loaded, exc)
            )
            return False
        self.context = context
        loaded = self._fingerprint()
        if loaded != self.loaded:
            log.info("SIGHUP: certificate reloaded: %s (sha256 %s)" % (self.config.certfile, loaded))
        self.loaded = loaded
        return True

    def _fingerprint(self):
        try:
            return fingerprint(self.config.certfile)
        except (OSError, ValueError):
            return None


# getpeercert()'s attribute names (OpenSSL's long names) as OpenSSL's RFC 2253 output spells them
# (its short names), which is what mod_ssl's SSL_CLIENT_S_DN holds: "CN=alice,O=Example,C=DE".
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "street",
    "domainComponent": "DC",
    "userId": "UID",
    "givenName": "GN",
    "surname": "SN",
}


def distinguished_name(rdns):
    """A DN from getpeercert()'s tuple of RDNs, in RFC 2253 form (mod_ssl's since Apache 2.3.11).

    RFC 2253 §2.1 writes the RDNs last first; §2.4 escapes , + " \\ < > ; anywhere, # at the
    start and a space at either end, so a DN cannot be forged by a name that holds a comma.
    """
    parts = []
    for rdn in reversed(rdns):
        parts.append("+".join("%s=%s" % (_SHORT_NAMES.get(name, name), _escape(value)) for name, value in rdn))
    return ",".join(parts)


def _escape(value):
    out = []
    for index, char in enumerate(value):
        if char in ',+"\\<>;' or (char == "#" and index == 0) or (char == " " and index in (0, len(value) - 1)):
            out.append("\\" + char)
        elif char < " " or char == "\x7f":
            out.append("\\%02X" % ord(char))
        else:
            out.append(char)
    return "".join(out)


def client_cert_environ(sock):
    """The environ keys for a connection's client certificate, once its handshake is done.

    mod_ssl's names (what WSGI applications behind Apache, and nginx configurations forwarding
    $ssl_client_cert, already read), and the getpeercert() dict under ``greenserve.peercert``.
    Only when the server asks for client certificates (--cert-reqs optional or required); a
    certificate that did not verify never gets here (the handshake failed).
    """
    der = sock.getpeercert(binary_form=True)
    if der is None:
        return {"SSL_CLIENT_VERIFY": "NONE"}
    import ssl

    cert = sock.getpeercert()
    environ = {
        "SSL_CLIENT_VERIFY": "SUCCESS",
        "SSL_CLIENT_CERT": ssl.DER_cert_to_PEM_cert(der),
        "SSL_CLIENT_S_DN": distinguished_name(cert.get("subject", ())),
        "SSL_CLIENT_I_DN": distinguished_name(cert.get("issuer", ())),
        "SSL_CLIENT_M_SERIAL": cert.get("serialNumber", ""),
        "SSL_CLIENT_V_START": cert.get("notBefore", ""),
        "SSL_CLIENT_V_END": cert.get("notAfter", ""),
        "greenserve.peercert": cert,
    }
    # The most read single field; of several, the first, as in mod_ssl (without a _n suffix).
    common_names = [value for rdn in cert.get("subject", ()) for name, value in rdn if name == "commonName"]
    if common_names:
        environ["SSL_CLIENT_S_DN_CN"] = common_names[0]
    return environ


"""Trusting a reverse proxy: the client's address and scheme from the proxy's headers, only when the
peer is one we trust.

A proxy that ends TLS (nginx, a load balancer) forwards plain HTTP and says in a header that the
client used https (``X-Forwarded-Proto: https``). An application that builds absolute URLs or
sets secure cookies needs ``wsgi.url_scheme`` to say ``https`` then. Anyone can send that header,
so it counts only when the connection comes from an address in the trusted list, gunicorn's
``forwarded_allow_ips`` (by default only 127.0.0.1 and ::1). A unix-socket peer is trusted:
only processes on this machine with access to the socket file can connect.
"""

import ipaddress

from greenserve.http.errors import error_response

__all__ = ["TrustedProxies", "ProxyHeaders", "SecureScheme", "DEFAULT_SECURE_SCHEME_HEADERS"]

# gunicorn's defaults, so that a deployment moving over keeps its behaviour.
DEFAULT_SECURE_SCHEME_HEADERS = {"X-FORWARDED-PROTOCOL": "ssl", "X-FORWARDED-PROTO": "https", "X-FORWARDED-SSL": "on"}


class TrustedProxies:
    """Peers whose forwarding headers count: ``"*"``, or addresses and networks (``10.0.0.0/8``).

    ``allow`` is a list or a comma-separated string, as gunicorn's ``forwarded_allow_ips``.
    """

    def __init__(self, allow=("127.0.0.1", "::1")):
        if isinstance(allow, str):
            allow = [item.strip() for item in allow.split(",")]
        allow = [item for item in allow if item]
        self.everyone = "*" in allow
        self.addresses = set()
        self.networks = []
        for item in allow:
            if item == "*":
                continue
            try:
                if "/" in item:
                    self.networks.append(ipaddress.ip_network(item, strict=False))
                else:
                    self.addresses.add(ipaddress.ip_address(item).compressed)
            except ValueError:
                raise ValueError("%r is not an IP address or network" % item) from None

    def __contains__(self, remote_addr):
        if self.everyone or not remote_addr:  # "" is a unix-socket peer
            return True
        if remote_addr in self.addresses:
            return True
        if not self.networks and not self.addresses:
            return False
        try:
            address = ipaddress.ip_address(remote_addr)
        except ValueError:
            return False
        if address.compressed in self.addresses:
            return True
        mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:10.0.0.1 on a dual-stack socket
        if mapped is not None and mapped.compressed in self.addresses:
            return True
        return any(address in network or (mapped is not None and mapped in network) for network in self.networks)


# What _scheme_said returns for headers that disagree.
CONTRADICTORY = "contradictory"


def _scheme_keys(headers):
    """(environ key, secure value) pairs for a {header name: value meaning https} mapping."""
    return tuple(("HTTP_" + name.upper().replace("-", "_"), value) for name, value in headers.items())


def _scheme_said(environ, keys, same):
    """"https", "http", None (no such header) or CONTRADICTORY, from the scheme headers present.

    ``same(value, secure_value)`` decides whether a header says https.
    """
    scheme = None
    for key, secure_value in keys:
        value = environ.get(key)
        if value is None:
            continue
        said = "https" if same(value, secure_value) else "http"
        if scheme is not None and said != scheme:
            return CONTRADICTORY
        scheme = said
    return scheme


def _exactly(value, secure_value):
    return value == secure_value  # gunicorn's comparison


def _loosely(value, secure_value):
    return value.strip().lower() == secure_value.lower()


class SecureScheme:
    """WSGI middleware: ``wsgi.url_scheme`` from a trusted proxy's headers.

    ``headers`` maps a header name to the value that means https, as gunicorn's
    ``secure_scheme_headers`` (``{"X-FORWARDED-PROTO": "https"}``): present with that value, the
    scheme is https; present with another, http. Headers that disagree get a 400, as in gunicorn:
    the request is ambiguous, and guessing could mark a plain request secure.
    """

    def __init__(self, application, trusted, headers=None):
        self.application = application
        self.trusted = trusted
        self.keys = _scheme_keys(DEFAULT_SECURE_SCHEME_HEADERS if headers is None else headers)

    def __call__(self, environ, start_response):
        if self.keys and environ.get("REMOTE_ADDR", "") in self.trusted:
            scheme = _scheme_said(environ, self.keys, _exactly)
            if scheme is CONTRADICTORY:
                status, headers, body = error_response(400, "the proxy's scheme headers contradict each other")
                start_response(status, headers)
                return [body]
            if scheme is not None:
                environ["wsgi.url_scheme"] = scheme
        return self.application(environ, start_response)


class ProxyHeaders:
    """What the server does with a trusted proxy's headers (the ``proxy_headers`` setting).

    For a request from a peer in ``trusted`` (a unix-socket peer always is):

    - ``REMOTE_ADDR`` becomes the client's address from ``X-Forwarded-For``: the rightmost
      entry, or, while that entry is itself a trusted proxy, the one before it (a chain of
      proxies each appends its peer). Entries further left were written by the client and
      prove nothing.
    - ``wsgi.url_scheme`` follows ``secure_scheme_headers`` (``X-Forwarded-Proto: https``...).
      Headers that contradict each other leave the scheme as it was: never marked secure on
      a guess.

    The server calls ``rewrite`` only for requests that carry one of those X-Forwarded-*
    fields (the parser flags them), so the others cost nothing here.
    """

    def __init__(self, trusted):
        self.trusted = trusted
        self.scheme_keys = _scheme_keys(DEFAULT_SECURE_SCHEME_HEADERS)

    def rewrite(self, environ):
        trusted = self.trusted
        if environ.get("REMOTE_ADDR", "") not in trusted:
            return
        forwarded_for = environ.get("HTTP_X_FORWARDED_FOR")
        if forwarded_for:
            hops = [hop.strip() for hop in forwarded_for.split(",")]
            client = hops.pop()
            while hops and client in trusted:
                client = hops.pop()
            if client.startswith("[") and "]" in client:
                client = client[1:client.index("]")]  # "[2001:db8::1]:4711" (RFC 7239 style)
            elif client.count(":") == 1:
                client = client.split(":", 1)[0]  # "203.0.113.9:4711"
            if client:
                environ["REMOTE_ADDR"] = client
        scheme = _scheme_said(environ, self.scheme_keys, _loosely)
        if scheme is not None and scheme is not CONTRADICTORY:  # disagreeing: leave it alone
            environ["wsgi.url_scheme"] = scheme

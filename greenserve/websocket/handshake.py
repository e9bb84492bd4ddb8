"""RFC 6455 §4.2: the server's side of the opening handshake, from an environ to the 101's headers.

Sans-I/O like ``greenserve.http``: ``negotiate(environ, ...)`` reads the request's fields from a
WSGI environ and returns what the 101 says (``Handshake``), or raises ``HandshakeError``
carrying the HTTP answer (status and extra headers) the WebSocket object sends instead. The
HTTP parser has already checked the request as HTTP/1.1 (one Host, no ambiguous framing) and
that it asks for an upgrade (``Upgrade`` with the ``upgrade`` connection option, RFC 9110 §7.8);
what is left is the WebSocket's own part.
"""

import base64
import binascii
import hashlib

from greenserve.websocket.deflate import PerMessageDeflate

# RFC 6455 §1.3: "the server has to take the value (as present in the header field, e.g., the
# base64-encoded [RFC4648] version minus any leading and trailing whitespace) and concatenate
# this with the Globally Unique Identifier (GUID, [RFC4122]) "258EAFA5-E914-47DA-95CA-
# C5AB0DC85B11" in string form".
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# RFC 6455 §4.1: "The value of this header field MUST be 13."
VERSION = "13"


class HandshakeError(Exception):
    """The request is not a handshake we accept: answer ``status`` with ``headers`` added and
    close. The message says what was wrong (it goes into the answer's body)."""

    def __init__(self, message, status=400, headers=()):
        Exception.__init__(self, message)
        self.status = status
        self.headers = list(headers)


class Handshake:
    """What the 101 says: ``headers`` (the WSGI list), ``protocol`` (the subprotocol chosen, or
    None) and ``deflate`` (a ``deflate.PerMessageDeflate`` when permessage-deflate was
    negotiated, else None)."""

    __slots__ = ("headers", "protocol", "deflate")

    def __init__(self, headers, protocol, deflate):
        self.headers = headers
        self.protocol = protocol
        self.deflate = deflate


def accept_value(key):
    """The Sec-WebSocket-Accept value for a Sec-WebSocket-Key (RFC 6455 §4.2.2 step 5.4):

    "A |Sec-WebSocket-Accept| header field. The value of this header field is constructed by
    concatenating /key/, defined above in step 4 in Section 4.2.2, with the string
    "258EAFA5-E914-47DA-95CA-C5AB0DC85B11", taking the SHA-1 hash of this concatenated value to
    obtain a 20-byte value and base64-encoding (see Section 4 of [RFC4648]) this 20-byte hash."
    """
    return base64.b64encode(hashlib.sha1((key + GUID).encode("ascii")).digest()).decode("ascii")


def _tokens(value):
    """The comma-separated tokens of a field value, stripped and lower-cased (RFC 9110 §5.6.1)."""
    return [token.strip().lower() for token in value.split(",") if token.strip()]


def is_websocket_request(environ):
    """Does this upgrade request ask for a WebSocket? (The server offers ``wsgi.websocket`` only
    then, as gevent-websocket does: a GET whose Upgrade names ``websocket``.)"""
    return environ["REQUEST_METHOD"] == "GET" and "websocket" in _tokens(environ.get("HTTP_UPGRADE", ""))


def check_request(environ):
    """Check the handshake's fields (RFC 6455 §4.2.1); return the Sec-WebSocket-Key.

    The HTTP/1.1, Host, Upgrade and Connection conditions (items 1 to 4) hold already: the HTTP
    parser offers an upgrade only on an HTTP/1.1 request with a Host and the ``upgrade``
    connection option, and ``is_websocket_request`` checked the method and the Upgrade token.
    """
    # §4.2.1 item 5: "A |Sec-WebSocket-Key| header field with a base64-encoded (see Section 4 of
    # [RFC4648]) value that, when decoded, is 16 bytes in length." Several fields of the name
    # arrive joined with ", " in the environ: no longer valid base64, so refused too.
    key = environ.get("HTTP_SEC_WEBSOCKET_KEY", "").strip(" \t")
    if not key:
        raise HandshakeError("Sec-WebSocket-Key is missing")
    try:
        decoded = base64.b64decode(key.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise HandshakeError("Sec-WebSocket-Key is not base64") from None
    if len(decoded) != 16:
        raise HandshakeError("Sec-WebSocket-Key is not 16 bytes in base64")
    # §4.2.1 item 6: "A |Sec-WebSocket-Version| header field, with a value of 13." §4.4: "If
    # this version does not match a version understood by the server, the server MUST abort
    # the WebSocket handshake described in this section and instead send an appropriate HTTP
    # error code (such as 426 Upgrade Required) and a |Sec-WebSocket-Version| header field
    # indicating the version(s) the server is capable of understanding." Versions 7 and 8
    # (drafts of 2011, which gevent-websocket still took) have no client left that lacks 13.
    version = environ.get("HTTP_SEC_WEBSOCKET_VERSION", "").strip(" \t")
    if version != VERSION:
        raise HandshakeError(
            "Sec-WebSocket-Version %s; this server speaks 13" % (repr(version) if version else "is missing"),
            426,
            [("Sec-WebSocket-Version", VERSION)],
        )
    return key


def choose_protocol(environ, application):
    """The subprotocol to answer with (RFC 6455 §4.2.2 step 5.5 /subprotocol/), or None.

    gevent-websocket's rule, which its applications rely on: the application object may have an
    ``app_protocol(path)`` method naming the one subprotocol it speaks at ``PATH_INFO``; it is
    chosen if the client offered it. Without that method, none is chosen ("The absence of such
    a field is equivalent to the null value (meaning that if the server does not wish to agree
    to one of the suggested subprotocols, it MUST NOT send back a |Sec-WebSocket-Protocol|
    header field in its response)").
    """
    offered = environ.get("HTTP_SEC_WEBSOCKET_PROTOCOL")
    app_protocol = getattr(application, "app_protocol", None)
    if not offered or app_protocol is None:
        return None
    wanted = app_protocol(environ.get("PATH_INFO", ""))
    if not wanted:
        return None
    # Compared as tokens (gevent-websocket tested a substring of the field, so "chat" matched
    # an offer of "superchat"; §4.2.2 says the value must be one the client offered).
    for token in environ["HTTP_SEC_WEBSOCKET_PROTOCOL"].split(","):
        if token.strip(" \t") == wanted:
            return wanted
    return None


def negotiate(environ, application, per_message_deflate=False):
    """Check the handshake and decide the 101's headers; ``Handshake``, or ``HandshakeError``."""
    key = check_request(environ)
    # §4.2.2 step 5: "|Upgrade| ... with value "websocket"", "|Connection| ... with value
    # "Upgrade"" (build_head adds Connection: Upgrade to a 101 that carries Upgrade).
    headers = [("Upgrade", "websocket"), ("Sec-WebSocket-Accept", accept_value(key))]
    protocol = choose_protocol(environ, application)
    if protocol is not None:
        headers.append(("Sec-WebSocket-Protocol", protocol))
    deflate = None
    offers = environ.get("HTTP_SEC_WEBSOCKET_EXTENSIONS")
    if per_message_deflate and offers:
        # §9.1: the server answers with the extensions it accepts, among those offered; an
        # offer it cannot take is declined, never an error (RFC 7692 §5.1).
        deflate, value = PerMessageDeflate.accept(offers)
        if deflate is not None:
            headers.append(("Sec-WebSocket-Extensions", value))
    return Handshake(headers, protocol, deflate)

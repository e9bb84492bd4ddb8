"""RFC 6455 §4.2 server handshake (greenserve/websocket/handshake.py): byte vectors, no sockets."""

import pytest

from greenserve.websocket import handshake
from greenserve.websocket.handshake import HandshakeError, negotiate

# RFC 6455 §1.3's own example: "dGhlIHNhbXBsZSBub25jZQ==" -> "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=".
KEY = "dGhlIHNhbXBsZSBub25jZQ=="
ACCEPT = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def environ(**fields):
    base = {
        "REQUEST_METHOD": "GET",
        "PATH_INFO": "/chat",
        "HTTP_UPGRADE": "websocket",
        "HTTP_SEC_WEBSOCKET_KEY": KEY,
        "HTTP_SEC_WEBSOCKET_VERSION": "13",
    }
    base.update(fields)
    return {key: value for key, value in base.items() if value is not None}


def test_accept_value_is_the_rfc_example():
    assert handshake.accept_value(KEY) == ACCEPT


def test_a_valid_handshake_answers_upgrade_and_accept():
    result = negotiate(environ(), app)
    assert result.headers == [("Upgrade", "websocket"), ("Sec-WebSocket-Accept", ACCEPT)]
    assert result.protocol is None and result.deflate is None


def test_key_with_surrounding_whitespace_is_trimmed():
    # §1.3: "minus any leading and trailing whitespace".
    result = negotiate(environ(HTTP_SEC_WEBSOCKET_KEY="  " + KEY + "\t"), app)
    assert ("Sec-WebSocket-Accept", ACCEPT) in result.headers


@pytest.mark.parametrize(
    "key, why",
    [
        (None, "missing"),
        ("", "missing"),
        ("not base64!!", "not base64"),
        ("dGhlIHNhbXBsZSBub25jZQ", "not base64"),  # padding missing
        ("dGhlIHNhbXBsZQ==", "16 bytes"),  # 10 bytes
        ("AAAAAAAAAAAAAAAAAAAAAAAAAAAA", "16 bytes"),  # 21 bytes
        (KEY + ", " + KEY, "not base64"),  # two fields, joined by the environ
        ("dGhlIHNhbXBsZSBub25jZQ==\u00e9", "not base64"),
    ],
)
def test_bad_keys_are_400(key, why):
    with pytest.raises(HandshakeError, match=why) as info:
        negotiate(environ(HTTP_SEC_WEBSOCKET_KEY=key), app)
    assert info.value.status == 400 and info.value.headers == []


@pytest.mark.parametrize("version", [None, "", "8", "7", "12", "14", "13, 8"])
def test_versions_other_than_13_are_426_naming_13(version):
    # §4.4: abort with e.g. 426 and a Sec-WebSocket-Version naming what the server speaks.
    with pytest.raises(HandshakeError) as info:
        negotiate(environ(HTTP_SEC_WEBSOCKET_VERSION=version), app)
    assert info.value.status == 426
    assert info.value.headers == [("Sec-WebSocket-Version", "13")]


@pytest.mark.parametrize(
    "method, upgrade, expected",
    [
        ("GET", "websocket", True),
        ("GET", "WebSocket", True),
        ("GET", "h2c, websocket", True),
        ("POST", "websocket", False),
        ("GET", "h2c", False),
        ("GET", "websockets", False),
    ],
)
def test_is_websocket_request(method, upgrade, expected):
    assert handshake.is_websocket_request(environ(REQUEST_METHOD=method, HTTP_UPGRADE=upgrade)) is expected


def app(environ, start_response):
    return []


class ChatApp:
    """gevent-websocket's convention: the application names its subprotocol per path."""

    def __call__(self, environ, start_response):
        return []

    def app_protocol(self, path):
        return "chat" if path == "/chat" else None


@pytest.mark.parametrize(
    "offered, path, chosen",
    [
        ("chat", "/chat", "chat"),
        ("superchat, chat", "/chat", "chat"),
        ("superchat", "/chat", None),  # a token, not a substring (gevent-websocket matched it)
        ("chat", "/other", None),
        (None, "/chat", None),
    ],
)
def test_subprotocol_is_the_apps_app_protocol_if_offered(offered, path, chosen):
    result = negotiate(environ(HTTP_SEC_WEBSOCKET_PROTOCOL=offered, PATH_INFO=path), ChatApp())
    assert result.protocol == chosen
    assert (("Sec-WebSocket-Protocol", chosen) in result.headers) is (chosen is not None)
    assert len([name for name, _ in result.headers if name == "Sec-WebSocket-Protocol"]) == (chosen is not None)


def test_without_app_protocol_no_subprotocol_is_chosen():
    result = negotiate(environ(HTTP_SEC_WEBSOCKET_PROTOCOL="chat"), app)
    assert result.protocol is None
    assert all(name != "Sec-WebSocket-Protocol" for name, _ in result.headers)


def test_extensions_are_not_negotiated_when_deflate_is_off():
    offers = "permessage-deflate; client_max_window_bits"
    result = negotiate(environ(HTTP_SEC_WEBSOCKET_EXTENSIONS=offers), app, per_message_deflate=False)
    assert result.deflate is None
    assert all(name != "Sec-WebSocket-Extensions" for name, _ in result.headers)


@pytest.mark.parametrize(
    "offers",
    [
        "permessage-deflate; client_max_window_bits",  # what browsers send
        "x-webkit-deflate-frame, permessage-deflate",
    ],
)
def test_permessage_deflate_is_accepted_when_on(offers):
    result = negotiate(environ(HTTP_SEC_WEBSOCKET_EXTENSIONS=offers), app, per_message_deflate=True)
    assert result.deflate is not None
    name, value = result.headers[-1]
    assert name == "Sec-WebSocket-Extensions" and value.startswith("permessage-deflate")


def test_extensions_without_permessage_deflate_are_declined():
    result = negotiate(environ(HTTP_SEC_WEBSOCKET_EXTENSIONS="x-webkit-deflate-frame"), app, per_message_deflate=True)
    assert result.deflate is None
    assert all(name != "Sec-WebSocket-Extensions" for name, _ in result.headers)

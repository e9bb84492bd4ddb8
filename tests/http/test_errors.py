"""The one error renderer: every error answer, whoever sends it, has the same shape."""

from greenserve.http.errors import ProtocolError, error_response
from greenserve.http.framing import build_head
from greenserve.proxy import SecureScheme, TrustedProxies


def test_a_client_error_says_its_status_and_what_went_wrong():
    status, headers, body = error_response(431, "a header field is 9000 bytes, the limit is 8190")
    assert status == "431 Request Header Fields Too Large"
    assert body == b"431 Request Header Fields Too Large: a header field is 9000 bytes, the limit is 8190\n"
    assert headers == [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]


def test_a_server_error_says_nothing_of_ours():
    assert error_response(500) == (
        "500 Internal Server Error",
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", "22")],
        b"Internal Server Error\n",
    )


def test_a_detail_that_is_not_latin1_is_replaced_not_raised():
    assert error_response(400, "caf\u00e9 \u2603")[2] == b"400 Bad Request: caf\xe9 ?\n"


def test_the_rendered_answer_is_a_valid_head_for_build_head():
    exc = ProtocolError("request head not received in time", 408)
    status, headers, body = error_response(exc.status_hint, str(exc))
    head, code, *_ = build_head(status, headers, 1, False, False, len(body), b"")
    assert code == 408
    assert head.startswith(b"HTTP/1.1 408 Request Timeout\r\n")
    assert b"\r\nConnection: close\r\n" in head and b"\r\nContent-Length: %d\r\n" % len(body) in head


def test_the_proxy_middleware_answers_contradicting_scheme_headers_with_the_common_400():
    seen = []

    def app(environ, start_response):  # never reached
        raise AssertionError

    middleware = SecureScheme(app, TrustedProxies(), {"X-FORWARDED-PROTO": "https", "X-FORWARDED-SSL": "on"})
    environ = {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_PROTO": "https", "HTTP_X_FORWARDED_SSL": "off"}
    body = b"".join(middleware(environ, lambda status, headers: seen.append((status, headers))))
    expected = error_response(400, "the proxy's scheme headers contradict each other")
    assert seen == [expected[:2]] and body == expected[2]

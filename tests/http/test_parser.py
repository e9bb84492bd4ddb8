"""Byte vectors for the request parser, valid and invalid, grouped by RFC 9112 section.

Every vector runs three ways (whole, one byte at a time, followed by the start of another
request; see ``helpers.three_ways``) and must give the same events or the same error status.
Where a rule exists to stop an attack, the comment names the attack.
"""

import pytest

from greenserve.http import errors
from greenserve.http.grammar import MAX_CHUNK_LINE
from greenserve.http.parser import END_OF_MESSAGE, NEED_DATA, PAUSED, Limits, Request, RequestParser

from tests.http.helpers import parse, parse_one, reject, run

SIMPLE = b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n"


def head(request_line=b"GET / HTTP/1.1", *fields, host=b"example.com"):
    """A request head: the request line, ``Host`` (unless None), the fields, the blank line."""
    lines = [request_line]
    if host is not None:
        lines.append(b"Host: " + host)
    lines.extend(fields)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def post(*fields, body=b""):
    return head(b"POST /upload HTTP/1.1", *fields) + body


def chunked(body):
    return post(b"Transfer-Encoding: chunked", body=body)


# === the helper itself ==========================================================================


def test_helper_sees_a_difference_between_feedings():
    # A sanity check of the harness: run() reports where the parser stopped.
    events, error = run([SIMPLE])
    assert error is None and events[-1] is NEED_DATA
    events, error = run([b"GET / HTTP/1.1\r\n"])
    assert events == [NEED_DATA]


# === RFC 9112 §2.2: message parsing ==============================================================


def test_simple_get():
    request, body = parse_one(SIMPLE)
    assert request.method == "GET"
    assert request.target == "/"
    assert request.path == "/"
    assert request.query == ""
    assert request.version == "HTTP/1.1"
    assert request.minor == 1
    assert request.headers == [("host", "example.com")]
    assert request.host == "example.com"
    assert request.scheme is None
    assert request.content_length == 0
    assert not request.chunked
    assert not request.has_body
    assert request.keep_alive
    assert not request.expect_continue
    assert request.upgrade is None
    assert body == b""


@pytest.mark.parametrize("prefix", [b"\r\n", b"\r\n\r\n", b"\r\n" * 5])
def test_leading_empty_lines_are_ignored(prefix):
    # §2.2: "a server that is expecting to receive and parse a request-line SHOULD ignore at
    # least one empty line (CRLF) received prior to the request-line" (clients send CRLF after
    # a POST body).
    request, _ = parse_one(prefix + SIMPLE)
    assert request.target == "/"


def test_empty_lines_between_pipelined_requests_are_ignored():
    events = parse(post(b"Content-Length: 2", body=b"ok") + b"\r\n" + SIMPLE)
    assert [type(e).__name__ for e in events] == ["Request", "bytes", "_Sentinel", "Request", "_Sentinel"]
    assert events[1] == b"ok"


@pytest.mark.parametrize(
    "vector",
    [
        # §2.2: "A sender MUST NOT generate a bare CR (a CR character not immediately followed by
        # LF) within any protocol elements other than the content. A recipient of such a bare CR
        # MUST consider that element to be invalid". Lenient parsers that treat bare CR as a line
        # end are what header-smuggling through a proxy that does not relies on.
        b"GET / HTTP/1.1\rHost: a\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX\r: a\r\n\r\n",
        b"GET /\r HTTP/1.1\r\nHost: a\r\n\r\n",
    ],
)
def test_bare_cr_is_rejected(vector):
    reject(vector, 400)


@pytest.mark.parametrize(
    "vector",
    [
        # §2.2 lets a recipient accept a bare LF as a line terminator; we do not: a front end that
        # splits lines differently from us sees different headers (header smuggling).
        b"GET / HTTP/1.1\nHost: a\n\n",
        b"GET / HTTP/1.1\r\nHost: a\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: y\nZ: w\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n\n",
        b"\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"\r\n\nGET / HTTP/1.1\r\nHost: a\r\n\r\n",
    ],
)
def test_bare_lf_is_rejected(vector):
    reject(vector, 400)


@pytest.mark.parametrize("partial", [b"GET / HTTP/1.1\rX", b"GET / HTTP/1.1\r\nHost: a\rX", b"\rGET"])
def test_bare_cr_is_rejected_before_the_head_is_complete(partial):
    # A CR followed by anything but LF is invalid whatever comes next: no need to wait.
    reject(partial, 400)


# === RFC 9112 §2.3: HTTP version ==================================================================


def test_http_1_0():
    request, _ = parse_one(b"GET /old HTTP/1.0\r\n\r\n", final=PAUSED)
    assert request.version == "HTTP/1.0"
    assert request.minor == 0
    assert request.host is None  # no Host needed in HTTP/1.0
    assert not request.keep_alive


def test_http_1_0_with_host():
    request, _ = parse_one(b"GET / HTTP/1.0\r\nHost: old.example\r\n\r\n", final=PAUSED)
    assert request.host == "old.example"


@pytest.mark.parametrize("version", [b"HTTP/2.0", b"HTTP/1.2", b"HTTP/3.0", b"HTTP/0.9", b"HTTP/9.9"])
def test_unsupported_version_is_505(version):
    # §2.3: HTTP-version = HTTP-name "/" DIGIT "." DIGIT; well-formed but not ours -> 505
    # (RFC 9110 §15.6.6).
    error = reject(head(b"GET / " + version), 505, error_type=errors.UnsupportedVersion)
    assert error.reason == "HTTP Version Not Supported"


@pytest.mark.parametrize(
    "version",
    [b"http/1.1", b"Http/1.1", b"HTTP/1", b"HTTP/1.1.1", b"HTTP/11", b"HTTP/1.10", b"HTTP /1.1", b"HTTP/a.b",
     b"HTTP/1.1x", b"HTP/1.1", b"HTTP/\xb9.1"],
)
def test_malformed_version_is_400(version):
    # §2.3: "HTTP-name is case-sensitive"; anything not DIGIT "." DIGIT is not a version at all.
    reject(head(b"GET / " + version), 400)


# === RFC 9112 §3: request line ===================================================================


@pytest.mark.parametrize(
    "line",
    [
        # §3: request-line = method SP request-target SP HTTP-version, single SPs. §3 allows a
        # lenient split on any whitespace, but a proxy that splits differently from us reads a
        # different target (request-line smuggling), so we accept exactly one SP.
        b"GET  / HTTP/1.1",
        b"GET /  HTTP/1.1",
        b"GET / HTTP/1.1 ",
        b" GET / HTTP/1.1",
        b"GET\t/ HTTP/1.1",
        b"GET /\tHTTP/1.1",
        b"GET / HTTP/1.1\t",
        b"GET /",
        b"GET HTTP/1.1",
        b"GET",
        b"/ HTTP/1.1",
        b"GET / HTTP/1.1 extra",
        b"GET /a b HTTP/1.1",
        b"GET  HTTP/1.1",
        b"\x00GET / HTTP/1.1",
        b"GET\x0b/ HTTP/1.1",
        b"GET /\x7f HTTP/1.1",
        b"GET /\x00 HTTP/1.1",
        b"GET /\x1b HTTP/1.1",
    ],
)
def test_malformed_request_line(line):
    reject(head(line), 400)


@pytest.mark.parametrize("method", [b"G(ET", b"GET,", b"G\xc9T", b"GE/T", b"GET:", b'"GET"', b"{GET}"])
def test_method_must_be_a_token(method):
    # §3.1: method = token (RFC 9110 §9.1).
    reject(head(method + b" / HTTP/1.1"), 400)


@pytest.mark.parametrize("method", [b"PROPFIND", b"M-SEARCH", b"get", b"X!#$%&'*+-.^_`|~9"])
def test_extension_methods_are_tokens(method):
    # Methods are case-sensitive and extensible (RFC 9110 §9.1): "get" is a method, not GET.
    request, _ = parse_one(head(method + b" / HTTP/1.1"))
    assert request.method == method.decode("latin-1")


def test_target_with_tab_is_rejected():
    # §3.2: request-target is made of URI characters (RFC 3986): no whitespace of any kind. A
    # tab passes the field-value character check of the head, so it must be refused here; a
    # server that splits the request line on any whitespace would read "HTTP/1.1" elsewhere.
    reject(head(b"GET /a\tb HTTP/1.1"), 400)
    reject(head(b"GET /a\t HTTP/1.1"), 400)


def test_connect_is_not_implemented():
    # §3.2.3: authority-form is only for CONNECT, which tunnels; a WSGI app cannot. 501 (RFC 9110
    # §15.6.2: the method is not supported by the server).
    reject(head(b"CONNECT example.com:443 HTTP/1.1", host=b"example.com:443"), 501, error_type=errors.UnsupportedMethod)


# --- §3.2.1 origin-form ----------------------------------------------------------------------------


def test_query_is_split_from_path():
    request, _ = parse_one(head(b"GET /search?q=a+b&x=%20&y=?z HTTP/1.1"))
    assert request.target == "/search?q=a+b&x=%20&y=?z"
    assert request.path == "/search"
    assert request.query == "q=a+b&x=%20&y=?z"


def test_empty_query():
    request, _ = parse_one(head(b"GET /a? HTTP/1.1"))
    assert (request.path, request.query) == ("/a", "")


def test_percent_encoding_stays_raw():
    # Decoding is the WSGI layer's job (PEP 3333 PATH_INFO); %2F must stay distinguishable from /.
    request, _ = parse_one(head(b"GET /a%2Fb/%E2%82%AC/%zz HTTP/1.1"))
    assert request.path == "/a%2Fb/%E2%82%AC/%zz"


def test_obs_text_in_target_is_kept_as_latin_1():
    # Some clients send raw UTF-8; one byte -> one character, so nothing is lost (PEP 3333).
    request, _ = parse_one(head(b"GET /caf\xc3\xa9 HTTP/1.1"))
    assert request.path == "/caf\xc3\xa9"
    assert request.path.encode("latin-1").decode("utf-8") == "/café"


def test_double_slash_origin_form():
    # absolute-path = 1*( "/" segment ) and a segment may be empty: "//x" is a path, not an
    # authority.
    request, _ = parse_one(head(b"GET //evil.example/x HTTP/1.1"))
    assert request.path == "//evil.example/x"
    assert request.host == "example.com"


@pytest.mark.parametrize("target", [b"/a#b", b"/#", b"/a?b#c", b"http://example.com/#x"])
def test_fragment_is_rejected(target):
    # §3.2: the request-target has no fragment; clients strip it before sending (RFC 9110 §4.2.5).
    reject(head(b"GET " + target + b" HTTP/1.1"), 400)


@pytest.mark.parametrize("target", [b"a/b", b"?x", b"example.com:80", b"ftp://example.com/", b"http:/x",
                                    b"http//x", b"javascript:alert(1)"])
def test_target_of_no_known_form_is_rejected(target):
    reject(head(b"GET " + target + b" HTTP/1.1"), 400)


# --- §3.2.2 absolute-form ----------------------------------------------------------------------------


def test_absolute_form_gives_the_host():
    # §3.2.2: "When an origin server receives a request with an absolute-form of request-target,
    # the origin server MUST ignore the received Host header field (if any) and instead use the
    # host information of the request-target."
    request, _ = parse_one(head(b"GET http://target.example:8080/p/q?x=1 HTTP/1.1", host=b"header.example"))
    assert request.host == "target.example:8080"
    assert request.scheme == "http"
    assert request.path == "/p/q"
    assert request.query == "x=1"
    assert request.target == "http://target.example:8080/p/q?x=1"
    assert ("host", "header.example") in request.headers


@pytest.mark.parametrize(
    "target, host, path, query",
    [
        (b"http://example.org", "example.org", "/", ""),
        (b"http://example.org?a=b", "example.org", "/", "a=b"),
        (b"HTTPS://Example.org/x", "Example.org", "/x", ""),
        (b"http://[::1]:80/", "[::1]:80", "/", ""),
    ],
)
def test_absolute_form_variants(target, host, path, query):
    request, _ = parse_one(head(b"GET " + target + b" HTTP/1.1"))
    assert (request.host, request.path, request.query) == (host, path, query)
    assert request.scheme in ("http", "https")


def test_absolute_form_in_http_1_0_without_host():
    request, _ = parse_one(b"GET http://example.org/a HTTP/1.0\r\n\r\n", final=PAUSED)
    assert request.host == "example.org"


@pytest.mark.parametrize(
    "target",
    [
        b"http://",
        b"http:///path",
        # userinfo is deprecated in http(s) URIs (RFC 9110 §4.2.4) and used to disguise the host.
        b"http://user@example.org/",
        b"http://user:pw@example.org/",
        b"http://exa\"mple.org/",
        b"http://exa<mple.org/",
        b"http://ex\xe9mple.org/",
    ],
)
def test_absolute_form_with_a_bad_authority(target):
    reject(head(b"GET " + target + b" HTTP/1.1"), 400)


def test_absolute_form_still_needs_a_host_header_in_http_1_1():
    # §3.2: the Host rule applies to "any HTTP/1.1 request message", whatever the target's form.
    reject(head(b"GET http://example.org/ HTTP/1.1", host=None), 400)


# --- §3.2.4 asterisk-form ---------------------------------------------------------------------------


def test_options_asterisk():
    request, _ = parse_one(head(b"OPTIONS * HTTP/1.1"))
    assert request.method == "OPTIONS"
    assert request.target == "*"
    assert request.path == "*"
    assert request.query == ""


@pytest.mark.parametrize("method", [b"GET", b"POST", b"HEAD", b"DELETE"])
def test_asterisk_only_with_options(method):
    # §3.2.4: asterisk-form "is only used for a server-wide OPTIONS request".
    reject(head(method + b" * HTTP/1.1"), 400)


@pytest.mark.parametrize("target", [b"*/", b"**", b"*?x"])
def test_asterisk_form_is_exactly_one_asterisk(target):
    reject(head(b"OPTIONS " + target + b" HTTP/1.1"), 400)


# --- §3.2 Host ----------------------------------------------------------------------------------


def test_http_1_1_without_host():
    # §3.2: "A server MUST respond with a 400 (Bad Request) status code to any HTTP/1.1 request
    # message that lacks a Host header field".
    reject(head(host=None), 400)
    reject(head(b"GET / HTTP/1.1", b"X-Host: a", host=None), 400)


@pytest.mark.parametrize("version", [b"HTTP/1.1", b"HTTP/1.0"])
def test_two_host_headers(version):
    # §3.2: "... and to any request message that contains more than one Host header field".
    # Two hosts is how cache poisoning and routing confusion between a proxy and us start.
    reject(head(b"GET / " + version, b"Host: other.example"), 400)
    reject(head(b"GET / " + version, b"Host: example.com"), 400)


@pytest.mark.parametrize(
    "host",
    [b"a b", b"a/b", b"a@b", b"a\\b", b"a\"b", b"a<b", b"a{b", b"a#b", b"a?b", b"caf\xe9.example", b"a\tb", b"a:b c"],
)
def test_invalid_host_characters(host):
    # RFC 9110 §7.2 / RFC 3986 §3.2.2: Host = uri-host [ ":" port ], nothing else. A Host with
    # "/", "@" or spaces is how host-header injection into generated URLs starts.
    reject(head(host=host), 400)


@pytest.mark.parametrize("host", [b"example.com:8080", b"[::1]", b"[2001:db8::1]:443", b"127.0.0.1", b"xn--caf-dma.example",
                                  b"a-b_c~d.example", b"%41.example"])
def test_valid_hosts(host):
    request, _ = parse_one(head(host=host))
    assert request.host == host.decode()


def test_empty_host_is_allowed():
    # RFC 9110 §7.2: a client MUST send an empty Host when the target URI has no authority.
    request, _ = parse_one(head(host=b""))
    assert request.host == ""


# === RFC 9112 §5: field syntax =====================================================================


def test_header_names_are_lower_cased_and_kept_in_order():
    request, _ = parse_one(head(b"GET / HTTP/1.1", b"Accept: a", b"X-Multi: 1", b"x-multi: 2", b"Accept: b", b"X-MULTI: 3"))
    assert request.headers == [
        ("host", "example.com"),
        ("accept", "a"),
        ("x-multi", "1"),
        ("x-multi", "2"),
        ("accept", "b"),
        ("x-multi", "3"),
    ]


def test_ows_around_values_is_trimmed():
    # §5.1: field-line = field-name ":" OWS field-value OWS.
    request, _ = parse_one(head(b"GET / HTTP/1.1", b"A:  \t value \t ", b"B:value", b"C:", b"D: \t "))
    assert request.headers[1:] == [("a", "value"), ("b", "value"), ("c", ""), ("d", "")]


def test_values_keep_internal_spaces_tabs_and_obs_text():
    # RFC 9110 §5.5: field-content may hold SP, HTAB and obs-text (%x80-FF) between visible chars.
    request, _ = parse_one(head(b"GET / HTTP/1.1", b"X: a  b\t\tc", b"Y: caf\xe9 \x80\xff", b"Z: \"q\" (c) ;=,"))
    assert request.headers[1:] == [("x", "a  b\t\tc"), ("y", "caf\xe9 \x80\xff"), ("z", "\"q\" (c) ;=,")]


def test_token_characters_in_names():
    request, _ = parse_one(head(b"GET / HTTP/1.1", b"X!#$%&'*+-.^_`|~09aZ: v"))
    assert request.headers[1] == ("x!#$%&'*+-.^_`|~09az", "v")


def test_obs_fold_is_rejected():
    # §5.2: "A server that receives an obs-fold in a request message ... MUST either reject the
    # message by sending a 400 (Bad Request) ... or replace each received obs-fold with one or
    # more SP". Replacing changes what a proxy in front of us may have seen: we reject.
    reject(head(b"GET / HTTP/1.1", b"X: a", b" b"), 400)
    reject(head(b"GET / HTTP/1.1", b"X: a", b"\tb"), 400)
    reject(head(b"GET / HTTP/1.1", b"X: a", b" c: d"), 400)
    # A fold right after the request line: RFC 9112 §2.2 "whitespace between the start-line and
    # the first header field" is the classic way to hide a header from one parser.
    reject(b"GET / HTTP/1.1\r\n Host: a\r\n\r\n", 400)
    reject(b"GET / HTTP/1.1\r\n\tX: y\r\nHost: a\r\n\r\n", 400)


@pytest.mark.parametrize("line", [b"Host : a", b"X : a", b"X\t: a", b"Content-Length : 0", b"Transfer-Encoding\t: chunked"])
def test_whitespace_before_colon_is_rejected(line):
    # §5.1: "A server MUST reject, with a response status code of 400 (Bad Request), any received
    # request message that contains whitespace between a header field name and colon." A proxy
    # that ignores "Transfer-Encoding : chunked" and a server that honours it disagree on framing.
    reject(head(b"GET / HTTP/1.1", line), 400)


@pytest.mark.parametrize(
    "line",
    [
        b": empty name",
        b":",
        b"no colon at all",
        b"X Y: space in name",
        b"X(: paren",
        b"X/Y: slash",
        b"X\"Y: quote",
        b"X,Y: comma",
        b"X@Y: at",
        b"X\xe9: obs-text in name",
        b"[X]: brackets",
    ],
)
def test_invalid_field_names(line):
    # RFC 9110 §5.1: field-name = token.
    reject(head(b"GET / HTTP/1.1", line), 400)


@pytest.mark.parametrize(
    "line",
    [
        # RFC 9110 §5.5: "Field values containing CR, LF, or NUL characters are invalid and
        # dangerous ... a recipient ... MUST either reject the message or replace each of those
        # characters with SP". Other CTLs are not field-vchar either.
        b"X: a\x00b",
        b"X\x00: a",
        b"X: \x00",
        b"X: a\x01b",
        b"X: a\x1bb",
        b"X: a\x7fb",
        b"X\x7f: a",
        b"X: a\x0bb",
        b"X: a\x0cb",
        b"X: \x1f",
        b"X\x09Y: a",
    ],
)
def test_control_characters_in_fields(line):
    reject(head(b"GET / HTTP/1.1", line), 400)


# === RFC 9112 §6: message body length ================================================================


def test_content_length_body():
    request, body = parse_one(post(b"Content-Length: 11", body=b"hello world"))
    assert request.content_length == 11
    assert request.has_body
    assert not request.chunked
    assert body == b"hello world"


def test_content_length_zero():
    request, body = parse_one(post(b"Content-Length: 0"))
    assert request.content_length == 0
    assert not request.has_body
    assert body == b""


@pytest.mark.parametrize("value", [b"007", b" 7 ", b"\t7", b"0000000000000000007"])
def test_content_length_with_leading_zeros_and_ows(value):
    request, body = parse_one(post(b"Content-Length:" + value, body=b"1234567"))
    assert request.content_length == 7
    assert body == b"1234567"


def test_body_bytes_are_binary_safe():
    data = bytes(range(256)) + b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"
    _, body = parse_one(post(b"Content-Length: %d" % len(data), body=data))
    assert body == data


def test_http_1_0_content_length_body():
    request, body = parse_one(b"POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc", final=PAUSED)
    assert (request.content_length, body) == (3, b"abc")


def test_request_without_length_has_no_body():
    # §6.3 rule 7: a request with neither Content-Length nor Transfer-Encoding has no content;
    # what follows the head is the next request.
    events = parse(post() + SIMPLE)
    assert len(events) == 4
    assert events[0].method == "POST" and not events[0].has_body
    assert events[2].method == "GET"


@pytest.mark.parametrize(
    "fields",
    [
        # CL.TE / TE.CL request smuggling: a front end that frames by one and a back end that
        # frames by the other disagree on where the next request starts. §6.1: "A server MAY
        # reject a request that contains both Content-Length and Transfer-Encoding ... Such a
        # message might indicate an attempt to perform request smuggling". We always reject.
        (b"Content-Length: 5", b"Transfer-Encoding: chunked"),
        (b"Transfer-Encoding: chunked", b"Content-Length: 5"),
        (b"Content-Length: 0", b"Transfer-Encoding: chunked"),
        (b"Transfer-Encoding: chunked", b"Content-Length: 0", b"Transfer-Encoding: chunked"),
    ],
)
def test_content_length_and_transfer_encoding(fields):
    reject(post(*fields, body=b"0\r\n\r\n"), 400, error_type=errors.InvalidFraming)


@pytest.mark.parametrize(
    "fields",
    [
        # CL.CL smuggling: two lengths, two parsers, each picks another. §6.3 rule 5 lets a
        # recipient accept identical repeated values; a proxy in front of us may not, so we
        # refuse even equal ones.
        (b"Content-Length: 5", b"Content-Length: 5"),
        (b"Content-Length: 5", b"Content-Length: 6"),
        (b"Content-Length: 5, 5",),
        (b"Content-Length: 5,5",),
        (b"Content-Length: 5", b"content-length: 5"),
    ],
)
def test_repeated_content_length(fields):
    reject(post(*fields, body=b"hello"), 400, error_type=errors.InvalidFraming)


@pytest.mark.parametrize(
    "value",
    [
        # §8.6 (RFC 9110): Content-Length = 1*DIGIT. Anything a lenient int() would accept
        # ("+5", " 5", "5_0", "0x5", "\u0665") is a value two parsers may read differently.
        b"abc",
        b"-5",
        b"+5",
        b"5 5",
        b"5\t5",
        b"0x5",
        b"5.0",
        b"5_0",
        b"5e1",
        b"",
        b"   ",
        b"\xb2",  # latin-1 superscript two: str.isdigit() says yes
        b"\xb9\xb2",
        b"1" * 20,
        b"99999999999999999999999",
    ],
)
def test_invalid_content_length(value):
    reject(post(b"Content-Length: " + value, body=b"hello"), 400, error_type=errors.InvalidFraming)


def test_largest_content_length_is_accepted():
    unlimited = Limits(max_body=0)  # (the default limit_request_body answers 413 first)
    events = parse(post(b"Content-Length: 9999999999999999999", body=b"abc"), unlimited, trailing=False)
    assert events[0].content_length == 9999999999999999999
    assert events[1] == b"abc"


# --- §6.1 Transfer-Encoding ------------------------------------------------------------------


@pytest.mark.parametrize("value", [b"chunked", b"Chunked", b"CHUNKED", b" chunked\t"])
def test_transfer_encoding_chunked(value):
    request, body = parse_one(post(b"Transfer-Encoding: " + value, body=b"5\r\nhello\r\n0\r\n\r\n"))
    assert request.chunked
    assert request.content_length == -1
    assert request.has_body
    assert body == b"hello"


@pytest.mark.parametrize(
    "fields",
    [
        # §6.3 rule 4: "If a Transfer-Encoding header field is present in a request and the
        # chunked transfer coding is not the final encoding, the message body length cannot be
        # determined reliably; the server MUST respond with the 400 (Bad Request) status code
        # and then close the connection." (TE.TE smuggling: obfuscated codings one peer ignores.)
        (b"Transfer-Encoding: gzip",),
        (b"Transfer-Encoding: identity",),
        (b"Transfer-Encoding: chunked, gzip",),
        (b"Transfer-Encoding: chunked", b"Transfer-Encoding: gzip"),
        (b"Transfer-Encoding: xchunked",),
        (b"Transfer-Encoding: chunked;q=1",),
        (b"Transfer-Encoding: \"chunked\"",),
        (b"Transfer-Encoding:",),
        (b"Transfer-Encoding: chunk",),
        # §6.1: "A sender MUST NOT apply the chunked transfer coding more than once".
        (b"Transfer-Encoding: chunked, chunked",),
        (b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"),
        # a coding that is not even a token
        (b"Transfer-Encoding: g(zip, chunked",),
    ],
)
def test_transfer_encoding_not_ending_in_one_chunked(fields):
    reject(post(*fields, body=b"0\r\n\r\n"), 400, error_type=errors.InvalidFraming)


@pytest.mark.parametrize(
    "fields",
    [
        (b"Transfer-Encoding: gzip, chunked",),
        (b"Transfer-Encoding: gzip", b"Transfer-Encoding: chunked"),
        (b"Transfer-Encoding: deflate,chunked",),
    ],
)
def test_unknown_transfer_coding_is_501(fields):
    # §6.1: "A server that receives a request message with a transfer coding it does not
    # understand SHOULD respond with 501 (Not Implemented)."
    reject(post(*fields, body=b"0\r\n\r\n"), 501, error_type=errors.UnsupportedTransferCoding)


def test_transfer_encoding_in_http_1_0():
    # §6.1: "A server or client that receives an HTTP/1.0 message containing a Transfer-Encoding
    # header field MUST treat the message as if the framing is faulty" (an HTTP/1.0 proxy in
    # front of us ignores it and frames the body otherwise).
    reject(b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, error_type=errors.InvalidFraming)


# === RFC 9112 §7.1: chunked transfer coding ==========================================================


def test_chunked_body():
    request, body = parse_one(chunked(b"5\r\nhello\r\n1\r\n \r\n6\r\nworld!\r\n0\r\n\r\n"))
    assert body == b"hello world!"


def test_chunked_sizes_are_hex_any_case():
    data = bytes(range(26))
    request, body = parse_one(chunked(b"1a\r\n" + data + b"\r\nA\r\n0123456789\r\n0\r\n\r\n"))
    assert body == data + b"0123456789"


def test_chunked_size_with_leading_zeros():
    _, body = parse_one(chunked(b"0005\r\nhello\r\n0000000000000000\r\n\r\n"))
    assert body == b"hello"


def test_chunk_data_may_hold_crlf():
    _, body = parse_one(chunked(b"4\r\n\r\n\r\n\r\n0\r\n\r\n"))
    assert body == b"\r\n\r\n"


def test_empty_chunked_body():
    request, body = parse_one(chunked(b"0\r\n\r\n"))
    assert request.chunked
    assert body == b""


@pytest.mark.parametrize(
    "size_line",
    [
        # §7.1.1: chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ),
        # chunk-ext-val = token / quoted-string. Recognised, then ignored.
        b"5;name",
        b"5;name=value",
        b"5;n=v;m;o=\"p\"",
        b"5;name=\"quoted value\"",
        b"5;name=\"with \\\"escapes\\\" and ; = , chars\"",
        b"5;name=\"\"",
        b"5;name=\"obs\x80text\xff\"",
        b"5 ;name",
        b"5\t; name = value",
        b"5;name= \"q\"",
        b"5;a=!#$%&'*+-.^_`|~",
    ],
)
def test_chunk_extensions_are_ignored(size_line):
    _, body = parse_one(chunked(size_line + b"\r\nhello\r\n0;last=1\r\n\r\n"))
    assert body == b"hello"


def test_trailers_are_checked_and_ignored():
    # §7.1.2: trailer fields are dropped; merging them into the headers is what RFC 9110 §6.5.1
    # warns against (a trailer must not override a header a proxy already acted on).
    request, body = parse_one(chunked(b"5\r\nhello\r\n0\r\nX-Checksum: abc\r\nHost: evil\r\nContent-Length: 5\r\n\r\n"))
    assert body == b"hello"
    assert request.headers == [("host", "example.com"), ("transfer-encoding", "chunked")]


@pytest.mark.parametrize(
    "size_line",
    [
        # §7.1: chunk-size = 1*HEXDIG. Every other reading ("0x", signs, spaces, empty) is one a
        # lenient parser accepts differently (TE.TE chunk-size smuggling).
        b"g",
        b"5g",
        b"",
        b"0x5",
        b"0X5",
        b"-5",
        b"+5",
        b" 5",
        b"\t5",
        b"5 ",
        b"5\t",
        b"5 5",
        b"\xb5",
        b"5\x00",
        # More than 16 hex digits: an overflow attempt, not a chunk (servers that parse into
        # a 64-bit integer wrap and read the rest as the next request).
        b"1" + b"0" * 16,
        b"00000000000000005",
        b"ffffffffffffffffff",
        # malformed extensions
        b"5;",
        b"5; ",
        b"5;=v",
        b"5;a=",
        b"5;a=\"unterminated",
        b"5;a=\"bad \\\x01 escape\"",
        b"5;a b",
        b"5;a=b c",
        b"5;a=\"q\"x",
        b"5;a=\"\x7f\"",
        b"5;a=b;",
        b";a=b",
    ],
)
def test_invalid_chunk_size_line(size_line):
    reject(chunked(size_line + b"\r\nhello\r\n0\r\n\r\n"), 400, error_type=errors.InvalidChunk)


@pytest.mark.parametrize(
    "body",
    [
        # The chunk-size line must end in CRLF (§7.1, §2.2): a bare LF or CR there is how
        # chunk-size smuggling between lenient and strict parsers works.
        b"5\nhello\r\n0\r\n\r\n",
        b"5\rhello\r\n0\r\n\r\n",
        b"5;a=b\nhello\r\n0\r\n\r\n",
        b"5\r\rhello\r\n0\r\n\r\n",
        b"\n",
        b"0\n\r\n",
    ],
)
def test_bare_lf_or_cr_in_chunk_size_line(body):
    reject(chunked(body), 400, error_type=errors.InvalidChunk)


@pytest.mark.parametrize(
    "body",
    [
        # §7.1: chunk = chunk-size [ chunk-ext ] CRLF chunk-data CRLF. Data longer than its size
        # (or not followed by CRLF) means the size lies: never resynchronise on it.
        b"5\r\nhelloX\r\n0\r\n\r\n",
        b"5\r\nhello world\r\n0\r\n\r\n",
        b"5\r\nhello\n0\r\n\r\n",
        b"5\r\nhello\r0\r\n\r\n",
        b"5\r\nhello\r\r\n0\r\n\r\n",
        b"5\r\nhello0\r\n\r\n",
        b"5\r\nhello \r\n0\r\n\r\n",
    ],
)
def test_chunk_data_not_followed_by_crlf(body):
    reject(chunked(body), 400, error_type=errors.InvalidChunk)


def test_chunk_size_line_too_long():
    # Without a bound a peer makes us buffer forever while we look for the CRLF.
    reject(chunked(b"5;a=" + b"x" * (MAX_CHUNK_LINE + 10) + b"\r\nhello\r\n0\r\n\r\n"), 400)
    reject(chunked(b"5;a=" + b"x" * (MAX_CHUNK_LINE + 10)), 400)


def test_chunk_size_line_at_the_bound_is_accepted():
    line = b"5;a=" + b"x" * (MAX_CHUNK_LINE - 4)
    assert len(line) == MAX_CHUNK_LINE
    _, body = parse_one(chunked(line + b"\r\nhello\r\n0\r\n\r\n"))
    assert body == b"hello"


@pytest.mark.parametrize(
    "trailers",
    [
        # Trailers are field lines (§7.1.2) and get the head's rules.
        b"X : a\r\n\r\n",
        b": a\r\n\r\n",
        b"no colon\r\n\r\n",
        b"X: a\r\n b\r\n\r\n",
        b" X: a\r\n\r\n",
        b"X: a\x00\r\n\r\n",
        b"X: a\rb\r\n\r\n",
        b"X: a\nY: b\r\n\r\n",
        b"X: y\n\n",
        b"X: y\r\n\n",
        b"\n",
        b"\rX",
        b"\n\r\n",
    ],
)
def test_invalid_trailers(trailers):
    reject(chunked(b"5\r\nhello\r\n0\r\n" + trailers), 400)


def test_trailer_limits_while_incomplete():
    # Like a head: a trailer field that is too long, or one field too many, is refused as soon
    # as it is certain, however the bytes were split.
    limits = Limits(max_header_count=2, max_header_size=30)
    reject(chunked(b"0\r\nA: " + b"a" * 28), 431, limits)
    reject(chunked(b"0\r\nA: " + b"a" * 28 + b"\r\n"), 431, limits)
    reject(chunked(b"0\r\nA: a\r\nB: b\r\nC: c\r\n"), 431, limits)
    assert parse(chunked(b"0\r\nA: a\r\nB: b\r\n"), limits, trailing=False)[-1].chunked


def test_trailer_section_too_large():
    limits = Limits(max_header_count=2, max_header_size=30)
    ok = chunked(b"0\r\nA: " + b"a" * 27 + b"\r\nB: b\r\n\r\n")
    parse_one(ok, limits)
    reject(chunked(b"0\r\nA: " + b"a" * 28 + b"\r\n\r\n"), 431, limits)
    reject(chunked(b"0\r\nA: a\r\nB: b\r\nC: c\r\n\r\n"), 431, limits)
    # never terminated: refused once it is longer than any valid trailer section can be
    reject(chunked(b"0\r\n" + b"A: a\r\n" * 20), 431, limits)


# === limits: RFC 9112 §3 (414), RFC 6585 §5 (431), RFC 9110 §15.5.14 (413) =========================


def test_request_line_at_the_limit():
    limits = Limits(max_request_line=20)
    line = b"GET /" + b"a" * 6 + b" HTTP/1.1"
    assert len(line) == 20
    parse_one(head(line), limits)


def test_request_line_over_the_limit():
    # §3: "A server that receives a request-target longer than any URI it wishes to parse MUST
    # respond with a 414 (URI Too Long)". Without the bound, a peer makes us buffer without end.
    limits = Limits(max_request_line=20)
    line = b"GET /" + b"a" * 7 + b" HTTP/1.1"
    assert len(line) == 21
    error = reject(head(line), 414, limits, error_type=errors.RequestLineTooLong)
    assert error.reason == "URI Too Long"


@pytest.mark.parametrize(
    "partial, trailing",
    [
        (b"GET /" + b"a" * 16, True),
        (b"GET /" + b"a" * 100, True),
        (b"GET / HTTP/1.1xxxxxxx", True),
        # 21 bytes and a CR: too long whatever comes next (though a byte other than LF after the
        # CR makes it a bare CR, a 400, first).
        (b"GET /" + b"a" * 16 + b"\r", False),
    ],
)
def test_request_line_over_the_limit_while_incomplete(partial, trailing):
    # Refused as soon as it is certain to be too long, before its CRLF comes: a peer must not
    # make us buffer a request line without end.
    limits = Limits(max_request_line=20)
    assert len(partial.rstrip(b"\r")) >= 21
    reject(partial, 414, limits, trailing=trailing)


def test_incomplete_request_line_at_the_limit_waits():
    limits = Limits(max_request_line=20)
    line = b"GET /" + b"a" * 6 + b" HTTP/1.1"
    for partial in (line, line + b"\r", line + b"\r\n"):
        assert parse(partial, limits, trailing=False) == []


def test_too_many_header_fields():
    limits = Limits(max_header_count=3)
    parse_one(head(b"GET / HTTP/1.1", b"A: 1", b"B: 2"), limits)
    error = reject(head(b"GET / HTTP/1.1", b"A: 1", b"B: 2", b"C: 3"), 431, limits, error_type=errors.HeadersTooLarge)
    assert error.reason == "Request Header Fields Too Large"


def test_too_many_header_fields_while_incomplete():
    limits = Limits(max_header_count=3)
    reject(b"GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n", 431, limits)
    reject(b"GET / HTTP/1.1\r\n" + b"A: 1\r\n" * 50, 431, limits)


def test_field_at_the_size_limit():
    limits = Limits(max_header_size=20)
    line = b"X-Long: " + b"v" * 12
    assert len(line) == 20
    request, _ = parse_one(head(b"GET / HTTP/1.1", line), limits)
    assert request.headers[-1] == ("x-long", "v" * 12)


def test_field_over_the_size_limit():
    limits = Limits(max_header_size=20)
    line = b"X-Long: " + b"v" * 13
    reject(head(b"GET / HTTP/1.1", line), 431, limits, error_type=errors.HeadersTooLarge)


@pytest.mark.parametrize(
    "partial",
    [
        # The field itself is incomplete...
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: " + b"v" * 13,
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: " + b"v" * 500,
        # ...or complete, while the head is not (a peer can trickle one long field per line).
        b"GET / HTTP/1.1\r\nHost: a\r\nX-Long: " + b"v" * 13 + b"\r\n",
        b"GET / HTTP/1.1\r\nX-Long: " + b"v" * 13 + b"\r\nHost: a\r\n",
    ],
)
def test_field_over_the_size_limit_while_incomplete(partial):
    reject(partial, 431, Limits(max_header_size=20))


def test_content_length_over_max_body():
    # RFC 9110 §15.5.14: 413 Content Too Large; refused from the head, before reading the body.
    limits = Limits(max_body=10)
    _, body = parse_one(post(b"Content-Length: 10", body=b"0123456789"), limits)
    assert body == b"0123456789"
    error = reject(post(b"Content-Length: 11"), 413, limits, error_type=errors.BodyTooLarge)
    assert error.reason == "Content Too Large"


def test_chunked_body_over_max_body():
    # The total of the chunk sizes is what counts; refused at the size line that crosses it.
    limits = Limits(max_body=10)
    _, body = parse_one(chunked(b"5\r\n01234\r\n5\r\n56789\r\n0\r\n\r\n"), limits)
    assert body == b"0123456789"
    events, error = run([chunked(b"5\r\n01234\r\n6\r\n")], limits)
    assert error.status_hint == 413
    assert events[1] == b"01234"  # the first chunk was delivered before the limit was crossed
    reject(chunked(b"5\r\n01234\r\n6\r\n567890\r\n0\r\n\r\n"), 413, limits, error_type=errors.BodyTooLarge)
    reject(chunked(b"ffffffffffffffff\r\n"), 413, limits)


def test_default_limits_accept_a_large_head():
    # ~800 kB: fed whole and in 1000-byte pieces only (byte by byte would take seconds).
    fields = [b"X-%d: %s" % (i, b"v" * 8000) for i in range(99)]
    data = head(b"GET /" + b"p" * 4000 + b" HTTP/1.1", *fields)
    for pieces in ([data], [data[i : i + 1000] for i in range(0, len(data), 1000)]):
        events, error = run(pieces)
        assert error is None
        assert len(events[0].headers) == 100
        assert events[1:] == [END_OF_MESSAGE, NEED_DATA]


# === RFC 9112 §9: connection management ==============================================================


def test_pipelined_requests_in_one_feed():
    # §9.3.2: a server MAY process pipelined requests in parallel but MUST answer in order; the
    # parser hands them out in the order received.
    data = (
        head(b"GET /1 HTTP/1.1")
        + post(b"Content-Length: 3", body=b"abc")
        + chunked(b"2\r\nde\r\n0\r\n\r\n")
        + head(b"HEAD /4 HTTP/1.1")
    )
    events = parse(data)
    requests = [e for e in events if isinstance(e, Request)]
    assert [(r.method, r.target) for r in requests] == [("GET", "/1"), ("POST", "/upload"), ("POST", "/upload"), ("HEAD", "/4")]
    assert [e for e in events if type(e) is bytes] == [b"abc", b"de"]
    assert events.count(END_OF_MESSAGE) == 4


def test_events_are_handed_out_one_at_a_time():
    parser = RequestParser()
    parser.feed(head(b"GET /1 HTTP/1.1") + head(b"GET /2 HTTP/1.1"))
    assert parser.next_event().target == "/1"
    assert parser.next_event() is END_OF_MESSAGE
    assert parser.next_event().target == "/2"
    assert parser.next_event() is END_OF_MESSAGE
    assert parser.next_event() is NEED_DATA
    assert parser.at_request_boundary


def test_max_data_caps_body_events():
    parser = RequestParser()
    parser.feed(post(b"Content-Length: 10", body=b"0123456789"))
    assert isinstance(parser.next_event(max_data=4), Request)
    assert [parser.next_event(max_data=4) for _ in range(3)] == [b"0123", b"4567", b"89"]
    assert parser.next_event(max_data=4) is END_OF_MESSAGE

    parser = RequestParser()
    parser.feed(chunked(b"7\r\n0123456\r\n3\r\n789\r\n0\r\n\r\n"))
    assert isinstance(parser.next_event(), Request)
    assert [parser.next_event(max_data=3) for _ in range(4)] == [b"012", b"345", b"6", b"789"]
    assert parser.next_event(max_data=3) is END_OF_MESSAGE


@pytest.mark.parametrize("max_data", [1, 2, 5])
def test_max_data_three_ways(max_data):
    # run() checks every data event against max_data.
    events = parse(chunked(b"7\r\n0123456\r\n0\r\n\r\n") + post(b"Content-Length: 6", body=b"abcdef"), max_data=max_data)
    assert [e for e in events if type(e) is bytes] == [b"0123456", b"abcdef"]


def test_body_data_waits_for_bytes():
    parser = RequestParser()
    parser.feed(post(b"Content-Length: 6", body=b"abc"))
    assert isinstance(parser.next_event(), Request)
    assert parser.next_event() == b"abc"
    assert parser.next_event() is NEED_DATA
    parser.feed(b"def" + SIMPLE)
    assert parser.next_event() == b"def"
    assert parser.next_event() is END_OF_MESSAGE
    assert parser.next_event().method == "GET"


def test_connection_close_pauses_after_the_message():
    # §9.6: a server that receives "close" MUST NOT process further requests on the connection.
    events = parse(head(b"GET / HTTP/1.1", b"Connection: close") + SIMPLE, final=PAUSED)
    assert len(events) == 2
    assert not events[0].keep_alive
    parser = RequestParser()
    parser.feed(head(b"GET / HTTP/1.1", b"Connection: close") + SIMPLE)
    parser.next_event()
    assert parser.next_event() is END_OF_MESSAGE
    assert parser.next_event() is PAUSED
    assert parser.next_event() is PAUSED
    assert parser.buffered == SIMPLE


def test_connection_close_after_a_body():
    events = parse(post(b"Connection: close", b"Content-Length: 2", body=b"ok") + SIMPLE, final=PAUSED)
    assert events[1:] == [b"ok", END_OF_MESSAGE]


@pytest.mark.parametrize("value", [b"close", b"Close", b"keep-alive, close", b"close, keep-alive", b"Upgrade,  CLOSE "])
def test_connection_close_tokens(value):
    request, _ = parse_one(head(b"GET / HTTP/1.1", b"Connection: " + value), final=PAUSED)
    assert not request.keep_alive


def test_connection_close_in_a_second_header():
    request, _ = parse_one(head(b"GET / HTTP/1.1", b"Connection: keep-alive", b"Connection: close"), final=PAUSED)
    assert not request.keep_alive


def test_closed_is_not_a_substring_match():
    request, _ = parse_one(head(b"GET / HTTP/1.1", b"Connection: closed, x-close"))
    assert request.keep_alive


def test_http_1_0_keep_alive():
    # §9.3: HTTP/1.0 persists only with "Connection: keep-alive" (RFC 2068 §19.7.1 compatibility).
    data = b"GET /1 HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\nGET /2 HTTP/1.0\r\n\r\n" + SIMPLE
    events = parse(data, final=PAUSED)
    assert [e.target for e in events if isinstance(e, Request)] == ["/1", "/2"]
    assert events[0].keep_alive
    assert not events[2].keep_alive


def test_http_1_0_without_keep_alive_pauses():
    events = parse(b"GET / HTTP/1.0\r\n\r\n" + SIMPLE, final=PAUSED)
    assert len(events) == 2


# === RFC 9110 §10.1.1: Expect ========================================================================


@pytest.mark.parametrize("value", [b"100-continue", b"100-Continue", b" 100-CONTINUE "])
def test_expect_100_continue(value):
    request, body = parse_one(post(b"Expect: " + value, b"Content-Length: 2", body=b"ok"))
    assert request.expect_continue
    assert body == b"ok"


def test_expect_100_continue_is_ignored_in_http_1_0():
    # RFC 9110 §10.1.1: "A server that receives a 100-continue expectation in an HTTP/1.0 request
    # MUST ignore that expectation."
    request, _ = parse_one(b"POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok", final=PAUSED)
    assert not request.expect_continue


def test_empty_expect_is_no_expectation():
    # RFC 9110 §10.1.1: Expect = #expectation; an empty value is an empty list (§5.6.1), so there
    # is no expectation to fail.
    request, body = parse_one(post(b"Expect:", b"Content-Length: 2", body=b"ok"))
    assert not request.expect_continue
    assert body == b"ok"
    request, _ = parse_one(post(b"Expect: ", b"Expect: 100-continue", b"Content-Length: 2", body=b"ok"))
    assert request.expect_continue


@pytest.mark.parametrize("value", [b"something-else", b"100-continue, foo", b"100-continued", b"200-ok", b"100-continue;x=1"])
def test_other_expectations_are_417(value):
    # RFC 9110 §10.1.1: "A server that receives an Expect field value containing a member other
    # than 100-continue MAY respond with a 417 (Expectation Failed)".
    error = reject(post(b"Expect: " + value, b"Content-Length: 2", body=b"ok"), 417, error_type=errors.ExpectationFailed)
    assert error.reason == "Expectation Failed"


# === RFC 9110 §7.8: Upgrade ===========================================================================


def test_upgrade_is_recorded():
    request, _ = parse_one(head(b"GET /ws HTTP/1.1", b"Connection: Upgrade", b"Upgrade: websocket"))
    assert request.upgrade == "websocket"
    assert request.keep_alive
    assert ("upgrade", "websocket") in request.headers


@pytest.mark.parametrize(
    "lines",
    [
        # RFC 9110 §7.8: "A server MUST ignore an Upgrade header field that is received in an
        # HTTP/1.0 request."
        (b"GET /ws HTTP/1.0", b"Connection: Upgrade, keep-alive", b"Upgrade: websocket"),
        # Without the "upgrade" connection option the field may have been forwarded by a proxy
        # that did not know it: not an upgrade request.
        (b"GET /ws HTTP/1.1", b"Upgrade: websocket"),
        (b"GET /ws HTTP/1.1", b"Connection: keep-alive", b"Upgrade: websocket"),
    ],
)
def test_upgrade_is_ignored_without_its_connection_option_or_in_http_1_0(lines):
    request, _ = parse_one(head(*lines))
    assert request.upgrade is None
    assert ("upgrade", "websocket") in request.headers  # still there for the application


@pytest.mark.parametrize("connection", [b"Connection: upgrade", b"Connection: keep-alive, Upgrade", b"connection: UPGRADE "])
def test_upgrade_option_is_a_case_insensitive_token(connection):
    request, _ = parse_one(head(b"GET /ws HTTP/1.1", connection, b"Upgrade: websocket"))
    assert request.upgrade == "websocket"


@pytest.mark.parametrize(
    "field, flagged",
    [(b"X-Forwarded-For: 203.0.113.9", True), (b"x-forwarded-proto: https", True), (b"X-FORWARDED-SSL: on", True),
     (b"X-Forwarded-Protocol: ssl", True), (b"X-Forwarded-Host: example.com", False), (b"Accept: */*", False)],
)
def test_forwarding_fields_are_flagged(field, flagged):
    # The server rewrites REMOTE_ADDR and the scheme only for flagged requests (proxy.ProxyHeaders).
    request, _ = parse_one(head(b"GET / HTTP/1.1", field))
    assert request.forwarded is flagged
    assert request.upgrade is None


# === errors ==========================================================================================


def test_error_is_raised_again_on_every_call():
    parser = RequestParser()
    parser.feed(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n")
    with pytest.raises(errors.InvalidHeader) as first:
        parser.next_event()
    for data in (b"", SIMPLE, b"\r\n"):
        parser.feed(data)
        with pytest.raises(errors.InvalidHeader) as again:
            parser.next_event()
        assert again.value is first.value


def test_error_in_a_pipelined_request_after_a_good_one():
    events, error = run([SIMPLE + b"GET / HTTP/1.1\r\nHost : x\r\n\r\n"])
    assert isinstance(events[0], Request) and events[1] is END_OF_MESSAGE
    assert error.status_hint == 400
    reject(SIMPLE + b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400)


def test_error_in_a_body_after_data():
    parser = RequestParser()
    parser.feed(chunked(b"3\r\nabcX"))
    assert isinstance(parser.next_event(), Request)
    assert parser.next_event() == b"abc"
    with pytest.raises(errors.InvalidChunk):
        parser.next_event()
    with pytest.raises(errors.InvalidChunk):
        parser.next_event()


def test_errors_carry_a_status_and_reason():
    error = errors.ProtocolError("x")
    assert (error.status_hint, error.reason) == (400, "Bad Request")
    assert errors.ProtocolError("x", status_hint=431).status_hint == 431
    assert errors.UnsupportedTransferCoding("x").reason == "Not Implemented"
    assert not issubclass(errors.ClientDisconnected, errors.ProtocolError)


def test_feed_from_takes_the_first_n_bytes_of_a_receive_buffer_and_checks_n():
    # The connection's path: one shared receive buffer, n bytes of it received. In the compiled
    # build this is a memcpy, so an n beyond the buffer must be refused, never read past it.
    buffer = bytearray(64)
    data = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
    buffer[: len(data)] = data
    parser = RequestParser(Limits())
    parser.feed_from(buffer, 10)
    assert parser.next_event() is NEED_DATA
    buffer[: len(data) - 10] = data[10:]
    parser.feed_from(buffer, len(data) - 10)
    request = parser.next_event()
    assert (request.method, request.target, request.headers) == ("GET", "/a", [("host", "x")])
    for n in (65, -1):
        with pytest.raises(ValueError):
            parser.feed_from(buffer, n)
    with pytest.raises(TypeError):
        parser.feed_from(None, 0)

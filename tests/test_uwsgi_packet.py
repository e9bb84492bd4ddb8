"""The uwsgi packet parser (greenserve/uwsgi_packet.py), sans-I/O: byte vectors, each malformed
case, the limits as soon as their bytes are in, and a property: however a packet and its body are
split into reads, the same request, environ and body come out."""

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenserve.http import errors
from greenserve.http.head import Limits
from greenserve.http.parser import END_OF_MESSAGE, NEED_DATA
from greenserve.uwsgi_packet import MAX_CGI_VARS, PacketError, UwsgiParser

# What nginx 1.22 sends for `curl -d hello 'http://127.0.0.1:8080/a%20b/?x=1&y=%41'` through
# `uwsgi_pass ...; include uwsgi_params;` (Debian's /etc/nginx/uwsgi_params), headers after.
NGINX_VARS = [
    (b"QUERY_STRING", b"x=1&y=%41"),
    (b"REQUEST_METHOD", b"POST"),
    (b"CONTENT_TYPE", b"application/x-www-form-urlencoded"),
    (b"CONTENT_LENGTH", b"5"),
    (b"REQUEST_URI", b"/a%20b/?x=1&y=%41"),
    (b"PATH_INFO", b"/a b/"),
    (b"DOCUMENT_ROOT", b"/usr/share/nginx/html"),
    (b"SERVER_PROTOCOL", b"HTTP/1.1"),
    (b"REQUEST_SCHEME", b"http"),
    (b"REMOTE_ADDR", b"127.0.0.1"),
    (b"REMOTE_PORT", b"51234"),
    (b"SERVER_PORT", b"8080"),
    (b"SERVER_NAME", b"localhost"),
    (b"HTTP_HOST", b"127.0.0.1"),
    (b"HTTP_USER_AGENT", b"curl/7.88.1"),
    (b"HTTP_ACCEPT", b"*/*"),
    (b"HTTP_CONTENT_LENGTH", b"5"),
    (b"HTTP_CONTENT_TYPE", b"application/x-www-form-urlencoded"),
]


def var(key, value):
    return struct.pack("<H", len(key)) + key + struct.pack("<H", len(value)) + value


def packet(variables, body=b"", modifier1=0, modifier2=0, datasize=None):
    data = b"".join(var(key, value) for key, value in variables)
    size = len(data) if datasize is None else datasize
    return struct.pack("<BHB", modifier1, size, modifier2) + data + body


def parse(data, limits=None, max_data=0):
    """Feed ``data`` whole; the request, the environ and the body read to its end."""
    parser = UwsgiParser(limits or Limits())
    parser.feed(data)
    request = parser.next_event()
    assert request is not NEED_DATA
    body = b""
    while True:
        event = parser.next_event(max_data)
        if event is END_OF_MESSAGE:
            return request, parser.environ, body
        assert event is not NEED_DATA
        body += event


def test_nginx_packet_becomes_the_request_and_its_environ():
    request, environ, body = parse(packet(NGINX_VARS, b"hello"))
    assert (request.method, request.target, request.query, request.version) == (
        "POST", "/a%20b/?x=1&y=%41", "x=1&y=%41", "HTTP/1.1")
    # PATH_INFO comes decoded; the responder's decoding leaves it as it is.
    assert request.path == "/a b/"
    assert request.headers == [
        ("host", "127.0.0.1"), ("user-agent", "curl/7.88.1"), ("accept", "*/*"),
        ("content-type", "application/x-www-form-urlencoded"), ("content-length", "5"),
    ]
    assert request.content_length == 5 and not request.keep_alive and not request.chunked
    assert environ == {
        "DOCUMENT_ROOT": "/usr/share/nginx/html", "REQUEST_SCHEME": "http", "REMOTE_ADDR": "127.0.0.1",
        "REMOTE_PORT": "51234", "SERVER_PORT": "8080", "SERVER_NAME": "localhost", "wsgi.url_scheme": "http",
    }
    assert body == b"hello"


def test_a_percent_in_the_decoded_path_stays_one():
    request, _, _ = parse(packet([(b"PATH_INFO", b"/100%/x"), (b"REQUEST_URI", b"/100%25/x")]))
    assert request.path == "/100%25/x"  # unquoted once by the responder: /100%/x


def test_without_path_info_the_path_is_request_uri_s():
    request, _, _ = parse(packet([(b"REQUEST_URI", b"/a%2Fb?q=1"), (b"QUERY_STRING", b"q=1")]))
    assert (request.path, request.query, request.target) == ("/a%2Fb", "q=1", "/a%2Fb?q=1")


def test_defaults_of_a_bare_packet():
    request, environ, body = parse(packet([]))
    assert (request.method, request.path, request.target, request.version) == ("GET", "/", "/", "HTTP/1.1")
    assert environ == {} and body == b""


@pytest.mark.parametrize("variables, scheme", [
    ([(b"HTTPS", b"on"), (b"REQUEST_SCHEME", b"http")], "https"),
    ([(b"HTTPS", b"1")], "https"),
    ([(b"REQUEST_SCHEME", b"https")], "https"),
    ([(b"UWSGI_SCHEME", b"https")], "https"),
    ([(b"REQUEST_SCHEME", b"gopher")], None),
    ([], None),
])
def test_the_scheme_comes_from_https_or_request_scheme(variables, scheme):
    _, environ, _ = parse(packet(variables))
    assert environ.get("wsgi.url_scheme") == scheme


def test_an_empty_content_length_is_no_body_and_bytes_after_the_body_are_dropped():
    request, _, body = parse(packet([(b"CONTENT_LENGTH", b"")], b"trailing junk"))
    assert request.content_length == 0 and body == b""
    request, _, body = parse(packet([(b"CONTENT_LENGTH", b"3")], b"abcdef"))
    assert body == b"abc"


def test_the_body_comes_in_pieces_of_max_data():
    parser = UwsgiParser(Limits())
    parser.feed(packet([(b"CONTENT_LENGTH", b"10")], b"0123456"))
    parser.next_event()
    assert [parser.next_event(3), parser.next_event(3), parser.next_event(3)] == [b"012", b"345", b"6"]
    assert parser.next_event(3) is NEED_DATA
    parser.feed(b"789xyz")
    assert parser.next_event(0) == b"789"
    assert parser.next_event() is END_OF_MESSAGE


def test_forwarded_fields_are_flagged_for_the_proxy_middleware():
    request, _, _ = parse(packet([(b"HTTP_X_FORWARDED_FOR", b"10.0.0.1")]))
    assert request.forwarded
    request, _, _ = parse(packet([(b"HTTP_X_OTHER", b"1")]))
    assert not request.forwarded


def refused(data, limits=None):
    parser = UwsgiParser(limits or Limits())
    parser.feed(data)
    with pytest.raises(PacketError) as info:
        parser.next_event()
    return str(info.value)


@pytest.mark.parametrize("data, words", [
    (packet([], modifier1=5), "modifier1 5"),
    (packet([], modifier1=30), "modifier1 30"),
    (packet([], modifier2=1), "modifier2 1"),
    # datasize says 10, the vars hold a key size then 3 bytes of a 20-byte key
    (b"\x00\x0a\x00\x00" + b"\x14\x00KEY" + b"\x00" * 5, "key (at byte 4) runs past the end"),
    (b"\x00\x07\x00\x00" + b"\x01\x00K" + b"\x09\x00ab", "value (at byte 7) runs past the end"),
    (b"\x00\x01\x00\x00" + b"\x01", "1 bytes left at the end of the vars"),
    (packet([(b"K\xe9Y", b"v")]), "not a CGI name"),
    (packet([(b"", b"v")]), "not a CGI name"),
    (packet([(b"wsgi.input", b"x")]), "not a CGI name"),
    (packet([(b"HTTP_X\x01", b"v")]), "not printable ASCII"),
    (packet([(b"HTTP_X", b"a\r\nb")]), "HTTP_X holds a control character"),
    (packet([(b"CONTENT_TYPE", b"a\x00")]), "CONTENT_TYPE holds a control character"),
    (packet([(b"REQUEST_METHOD", b"GE T")]), "REQUEST_METHOD 'GE T'"),
    (packet([(b"CONTENT_LENGTH", b"-1")]), "CONTENT_LENGTH '-1'"),
    (packet([(b"CONTENT_LENGTH", b"1" * 20)]), "is not a number of bytes"),
])
def test_malformed_packets_are_refused_with_what_is_wrong(data, words):
    assert words in refused(data)


def test_limits():
    small = Limits(max_request_line=20, max_header_count=2, max_header_size=16, max_body=100)
    # datasize beyond the head's limit: refused from the 4-byte header alone.
    assert "vars of 65535 bytes, over the limit of %d" % small.max_head in refused(b"\x00\xff\xff\x00", small)
    many = [(b"HTTP_X%d" % i, b"v") for i in range(3)]
    assert "more than 2 header fields" in refused(packet(many), small)
    assert "over limit_request_field_size (16)" in refused(packet([(b"HTTP_X", b"v" * 20)]), small)
    cgi = [(b"V%d" % i, b"") for i in range(MAX_CGI_VARS + 1)]
    assert "more than %d vars" % MAX_CGI_VARS in refused(packet(cgi))
    parser = UwsgiParser(small)
    parser.feed(packet([(b"CONTENT_LENGTH", b"101")]))
    with pytest.raises(errors.BodyTooLarge):  # well-formed: answered 413 in HTTP
        parser.next_event()


def test_a_length_past_the_datasize_is_refused_before_its_bytes_arrive():
    parser = UwsgiParser(Limits())
    parser.feed(b"\x00\x10\x00\x00" + b"\xff\x00")  # a key of 255 bytes in 16 bytes of vars
    with pytest.raises(PacketError):
        parser.next_event()


def test_truncated_packets_wait_for_more():
    data = packet(NGINX_VARS, b"hello")
    for cut in (0, 1, 3, 4, 5, 40, len(data) - 6):
        parser = UwsgiParser(Limits())
        parser.feed(data[:cut])
        assert parser.next_event() is NEED_DATA


# --- the property ---------------------------------------------------------------------------

keys = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789", min_size=1, max_size=12).filter(
    lambda k: k not in ("REQUEST_METHOD", "QUERY_STRING", "REQUEST_URI", "PATH_INFO", "SERVER_PROTOCOL",
                        "CONTENT_TYPE", "CONTENT_LENGTH", "HTTPS", "REQUEST_SCHEME", "UWSGI_SCHEME")
    and not k.startswith("HTTP_"))
values = st.binary(max_size=30)
header_values = st.text("".join(map(chr, range(0x20, 0x7F))) + "\t\xe9", max_size=30)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    cgi=st.dictionaries(keys, values, max_size=10),
    headers=st.lists(st.tuples(st.sampled_from(["ACCEPT", "X_A", "COOKIE", "USER_AGENT"]), header_values),
                     max_size=6),
    body=st.binary(max_size=300),
    data=st.data(),
)
def test_any_split_gives_the_same_request(cgi, headers, body, data):
    variables = [(b"REQUEST_METHOD", b"PUT"), (b"CONTENT_LENGTH", str(len(body)).encode())]
    variables += [(key.encode(), value) for key, value in cgi.items()]
    variables += [(b"HTTP_" + name.encode(), value.encode("latin-1")) for name, value in headers]
    stream = packet(variables, body)
    whole = parse(stream)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=12)))
    max_data = data.draw(st.integers(0, 64))
    parser = UwsgiParser(Limits())
    pieces = [stream[a:b] for a, b in zip([0] + cuts, cuts + [len(stream)])]
    request, got = None, b""
    for piece in pieces:
        parser.feed(piece)
        while True:
            event = parser.next_event(max_data)
            if event is NEED_DATA or event is END_OF_MESSAGE:
                break
            if request is None:
                request = event
            else:
                assert 0 < len(event) <= (max_data or len(body))
                got += event
    assert parser.next_event() is END_OF_MESSAGE
    assert (request.method, request.headers, request.content_length) == (
        whole[0].method, whole[0].headers, whole[0].content_length)
    assert parser.environ == whole[1] == {key: value.decode("latin-1") for key, value in cgi.items()}
    assert got == whole[2] == body
    assert request.headers == [(name.lower().replace("_", "-"), value) for name, value in headers] + [
        ("content-length", str(len(body)))]

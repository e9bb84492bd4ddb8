"""Response heads: ``framing.build_head`` decides the headers and the body framing (RFC 9112 §6.3
from the sender's side) and refuses anything that must not reach the wire."""

import email.utils

import pytest

from greenserve.http import framing
from greenserve.http.framing import (
    ChunkedWriter as CHUNKED,
    CloseDelimitedWriter as CLOSE_DELIMITED,
    ContentLengthWriter as LENGTH,
    NoBodyWriter as NO_BODY,
    ResponseError,
    build_head,
    chunk_size_line,
    date_line,
    server_line_for,
)

SERVER = b"Server: greenserve\r\n"


def build(status="200 OK", headers=None, minor=1, is_head=False, keep_alive=True, body_length=-1, server_line=SERVER):
    """build_head with defaults; returns (status line, [(name, value)], (data, code, the writer's
    class, the Content-Length it holds to, keep_alive))."""
    data, code, writer, keep_alive = build_head(
        status, [] if headers is None else headers, minor, is_head, keep_alive, body_length, server_line
    )
    result = (data, code, type(writer), writer.content_length, keep_alive)
    assert data.endswith(b"\r\n\r\n")
    lines = data[:-4].decode("latin-1").split("\r\n")
    fields = [tuple(line.split(": ", 1)) for line in lines[1:]]
    assert all(len(f) == 2 for f in fields), lines
    return lines[0], fields, result


def values(fields, name):
    return [v for n, v in fields if n.lower() == name.lower()]


# --- status line (RFC 9112 §4) ---------------------------------------------------------------------


def test_status_line():
    line, _, (data, code, *_rest) = build("404 Not Found")
    assert line == "HTTP/1.1 404 Not Found"
    assert code == 404
    assert data.startswith(b"HTTP/1.1 404 Not Found\r\n")


def test_status_line_is_http_1_1_for_http_1_0_requests():
    # RFC 9110 §6.2: a server sends its own highest conformant version, whatever the request's.
    line, _, _ = build("200 OK", [("Content-Length", "0")], minor=0)
    assert line == "HTTP/1.1 200 OK"


def test_status_line_cache():
    framing._STATUS_CACHE.pop("299 Cached Reason", None)
    build("299 Cached Reason")
    entry = framing._STATUS_CACHE["299 Cached Reason"]
    assert entry == (299, b"HTTP/1.1 299 Cached Reason\r\n")
    build("299 Cached Reason")
    assert framing._STATUS_CACHE["299 Cached Reason"] is entry
    # a refused status never gets in
    with pytest.raises(ResponseError):
        build("200 OK\r\nX: y")
    assert "200 OK\r\nX: y" not in framing._STATUS_CACHE


@pytest.mark.parametrize("status", ["200 ", "200 OK ", "200 Very\tOdd Reason", "200 caf\xe9", "599 Last"])
def test_unusual_but_valid_status(status):
    # RFC 9112 §4: reason-phrase = 1*( HTAB / SP / VCHAR / obs-text ), and it may be empty.
    line, _, _ = build(status)
    assert line == "HTTP/1.1 " + status


@pytest.mark.parametrize(
    "status",
    [
        "200",
        "2000 X",
        200,
        b"200 OK",
        None,
        "20x OK",
        "２００ OK",
        "+20 OK",
        " 200 OK",
        "200\tOK",
        "200-OK",
        # Response splitting through the status: a CR/LF would start a header of the app's choice.
        "200 OK\r\nX: y",
        "200 OK\r\n",
        "200 OK\n",
        "200 OK\r",
        "200 O\x00K",
        "200 O\x7fK",
        "200 \u20ac",
        # RFC 9110 §15: "Values outside the range 100..599 are invalid".
        "000 Zero",
        "099 Low",
        "600 High",
        "999 Custom",
    ],
)
def test_invalid_status(status):
    with pytest.raises(ResponseError):
        build(status)


# --- Date and Server ---------------------------------------------------------------------------


def test_date_and_server_are_added():
    _, fields, _ = build("200 OK", [("Content-Type", "text/plain")])
    assert values(fields, "Server") == ["greenserve"]
    (date,) = values(fields, "Date")
    # RFC 9110 §6.6.1: an origin server with a clock MUST send Date, in IMF-fixdate.
    parsed = email.utils.parsedate_to_datetime(date)
    assert date.endswith(" GMT") and parsed.tzinfo is not None
    line = date_line()
    assert line.startswith(b"Date: ") and line.endswith(b" GMT\r\n")


def test_app_date_and_server_win():
    _, fields, _ = build("200 OK", [("date", "Sun, 06 Nov 1994 08:49:37 GMT"), ("SERVER", "app/1.0")])
    assert values(fields, "Date") == ["Sun, 06 Nov 1994 08:49:37 GMT"]
    assert values(fields, "Server") == ["app/1.0"]


def test_empty_server_line_sends_none():
    _, fields, _ = build("200 OK", server_line=b"")
    assert values(fields, "Server") == []
    assert len(values(fields, "Date")) == 1


def test_server_line_for():
    assert server_line_for("") == b""
    assert server_line_for(None) == b""
    assert server_line_for("greenserve/1.0") == b"Server: greenserve/1.0\r\n"
    for bad in ("a\r\nX: y", "a\nb", "a\x00"):
        with pytest.raises(ValueError):
            server_line_for(bad)


def test_app_headers_are_kept_in_order():
    headers = [("Content-Type", "text/html"), ("Set-Cookie", "a=1"), ("X-Custom", "inner spaced\tvalue"), ("Set-Cookie", "b=2")]
    _, fields, _ = build("200 OK", headers + [("Content-Length", "0")])
    assert fields[:4] == headers


def test_leading_and_trailing_whitespace_of_values_is_dropped():
    # RFC 9110 §5.5: OWS around a field value is not part of it (Django's Set-Cookie values
    # start with a space); whitespace inside the value stays.
    _, fields, _ = build("200 OK", [("Set-Cookie", " a=1; Path=/ "), ("X-Tab", "\tx\ty\t"), ("Content-Length", "0")])
    assert fields[:2] == [("Set-Cookie", "a=1; Path=/"), ("X-Tab", "x\ty")]


def test_a_string_is_not_a_header_item():
    with pytest.raises(ResponseError):
        build_head("200 OK", ["Xy"], 1, False, True, 0, b"")


# --- body framing (RFC 9112 §6.3, from the sender) --------------------------------------------------


def test_content_length_from_the_app():
    _, fields, (_, _, kind, length, keep_alive) = build("200 OK", [("Content-Length", "42")], body_length=10)
    assert kind == LENGTH
    assert length == 42  # the app's length wins; the body is cut or the connection closed later
    assert values(fields, "Content-Length") == ["42"]
    assert values(fields, "Transfer-Encoding") == []
    assert keep_alive


def test_known_body_length_adds_content_length():
    _, fields, (_, _, kind, length, keep_alive) = build("200 OK", body_length=13)
    assert (kind, length, keep_alive) == (LENGTH, 13, True)
    assert values(fields, "Content-Length") == ["13"]


def test_known_empty_body():
    _, fields, (_, _, kind, length, _) = build("200 OK", body_length=0)
    assert (kind, length) == (LENGTH, 0)
    assert values(fields, "Content-Length") == ["0"]


def test_unknown_length_on_http_1_1_is_chunked():
    _, fields, (_, _, kind, length, keep_alive) = build("200 OK")
    assert (kind, length, keep_alive) == (CHUNKED, -1, True)
    assert values(fields, "Transfer-Encoding") == ["chunked"]
    assert values(fields, "Content-Length") == []
    assert values(fields, "Connection") == []


def test_unknown_length_on_http_1_0_is_close_delimited():
    # HTTP/1.0 has no chunked coding (RFC 9112 §6.1): the body ends when the connection does.
    _, fields, (_, _, kind, length, keep_alive) = build("200 OK", minor=0, keep_alive=True)
    assert (kind, length, keep_alive) == (CLOSE_DELIMITED, -1, False)
    assert values(fields, "Connection") == ["close"]
    assert values(fields, "Transfer-Encoding") == []


def test_head_has_no_body_but_gets_the_length():
    # RFC 9110 §9.3.2: HEAD gets the headers GET would, without content.
    _, fields, (_, _, kind, length, keep_alive) = build("200 OK", is_head=True, body_length=13)
    assert kind == NO_BODY
    assert keep_alive
    assert values(fields, "Content-Length") == ["13"]
    assert values(fields, "Transfer-Encoding") == []


def test_head_keeps_the_apps_content_length():
    _, fields, (_, _, kind, _, _) = build("200 OK", [("Content-Length", "99")], is_head=True, body_length=0)
    assert kind == NO_BODY
    assert values(fields, "Content-Length") == ["99"]


def test_head_with_an_empty_body_claims_no_length():
    # RFC 9110 §8.6: a HEAD response MUST NOT carry a Content-Length other than what GET would
    # send. An app (Werkzeug does this) that returns nothing for HEAD has told us nothing about
    # GET's length, so "Content-Length: 0" would be a lie.
    _, fields, (_, _, kind, _, keep_alive) = build("200 OK", is_head=True, body_length=0)
    assert kind == NO_BODY and keep_alive
    assert values(fields, "Content-Length") == []
    _, fields, (_, _, kind, _, _) = build("200 OK", is_head=True, body_length=-1)
    assert kind == NO_BODY
    assert values(fields, "Content-Length") == [] and values(fields, "Transfer-Encoding") == []


def test_head_on_http_1_0_keeps_the_connection():
    _, fields, (_, _, kind, _, keep_alive) = build("200 OK", is_head=True, minor=0)
    assert kind == NO_BODY and keep_alive
    assert values(fields, "Connection") == ["keep-alive"]


@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified"])
def test_no_content_and_not_modified_have_no_body(status):
    _, fields, (_, _, kind, _, keep_alive) = build(status, body_length=5)
    assert kind == NO_BODY
    assert keep_alive
    assert values(fields, "Content-Length") == []
    assert values(fields, "Transfer-Encoding") == []


def test_content_length_is_dropped_for_204():
    # RFC 9110 §8.6: "A server MUST NOT send a Content-Length header field in any response with
    # a status code of 1xx (Informational) or 204 (No Content)."
    _, fields, (_, _, kind, _, _) = build("204 No Content", [("Content-Length", "0"), ("X-A", "b")])
    assert kind == NO_BODY
    assert values(fields, "Content-Length") == []
    assert values(fields, "X-A") == ["b"]


def test_content_length_is_kept_for_304():
    # RFC 9110 §8.6 allows it in a 304 (the length the 200 would have had).
    _, fields, (_, _, kind, _, _) = build("304 Not Modified", [("Content-Length", "10")])
    assert kind == NO_BODY
    assert values(fields, "Content-Length") == ["10"]


@pytest.mark.parametrize("status", ["100 Continue", "102 Processing", "103 Early Hints", "199 Other"])
def test_informational_status_cannot_be_final(status):
    # A WSGI app answers once; 1xx other than 101 is not a response it can end with.
    with pytest.raises(ResponseError):
        build(status, body_length=0)


def test_switching_protocols():
    _, fields, (_, code, kind, _, keep_alive) = build(
        "101 Switching Protocols", [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Content-Length", "0")]
    )
    assert (code, kind, keep_alive) == (101, NO_BODY, False)
    assert values(fields, "Upgrade") == ["websocket"]
    assert values(fields, "Connection") == ["Upgrade"]
    assert values(fields, "Content-Length") == []


def test_switching_protocols_needs_upgrade():
    # RFC 9110 §15.2.2: "The server MUST generate an Upgrade header field in the response".
    with pytest.raises(ResponseError):
        build("101 Switching Protocols", [("Connection", "Upgrade")])


# --- Connection (RFC 9112 §9) -----------------------------------------------------------------------


@pytest.mark.parametrize("value", ["close", "Close", "keep-alive, close", " CLOSE "])
def test_connection_close_from_the_app_is_honoured(value):
    _, fields, (_, _, kind, _, keep_alive) = build("200 OK", [("Connection", value)], body_length=2)
    assert keep_alive is False
    assert kind == LENGTH
    assert values(fields, "Connection") == ["close"]


def test_connection_close_once_when_server_and_app_both_close():
    _, fields, (_, _, _, _, keep_alive) = build("200 OK", [("Connection", "close")], keep_alive=False, minor=0)
    assert not keep_alive
    assert values(fields, "Connection") == ["close"]


def test_other_connection_values_from_the_app_are_dropped():
    _, fields, (_, _, _, _, keep_alive) = build("200 OK", [("Connection", "keep-alive")], body_length=0)
    assert keep_alive
    assert values(fields, "Connection") == []


def test_server_closing_says_so():
    _, fields, (_, _, kind, _, keep_alive) = build("200 OK", keep_alive=False, body_length=3)
    assert (kind, keep_alive) == (LENGTH, False)
    assert values(fields, "Connection") == ["close"]


def test_http_1_0_keep_alive_is_announced():
    # RFC 9112 §9.3 / RFC 2068 §19.7.1: an HTTP/1.0 client only reuses the connection if told.
    _, fields, (_, _, kind, _, keep_alive) = build("200 OK", minor=0, body_length=3)
    assert (kind, keep_alive) == (LENGTH, True)
    assert values(fields, "Connection") == ["keep-alive"]


def test_http_1_1_keep_alive_is_implicit():
    _, fields, _ = build("200 OK", body_length=3)
    assert values(fields, "Connection") == []


# --- what must not reach the wire ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        # Response splitting / header injection (RFC 9110 §5.5: CR, LF and NUL are invalid and
        # dangerous in a field value): "\r\nSet-Cookie: ..." from user input would add a header.
        "a\r\nSet-Cookie: evil=1",
        "a\nSet-Cookie: evil=1",
        "a\rb",
        "\r\n",
        "a\x00b",
        "a\x01b",
        "a\x7fb",
        "a\x1bb",
    ],
)
def test_control_characters_in_values(value):
    with pytest.raises(ResponseError):
        build("200 OK", [("X-Value", value)])
    with pytest.raises(ResponseError):
        build("200 OK", [("Location", value)], body_length=0)


@pytest.mark.parametrize(
    "name",
    ["", "X Y", "X:Y", "X\r\nY", "X\nY", "X\x00", "(X)", "X/Y", "X\xe9", "X\u20ac", "Set-Cookie: a=b\r\nX", " X", "X "],
)
def test_invalid_header_names(name):
    # RFC 9110 §5.1: field-name = token.
    with pytest.raises(ResponseError):
        build("200 OK", [(name, "v")])


@pytest.mark.parametrize("name", [b"X-Bytes", 1, None, ("X",)])
def test_non_str_names(name):
    with pytest.raises(ResponseError):
        build("200 OK", [(name, "v")])


@pytest.mark.parametrize("header", [("X-Bytes", b"v"), ("X-Int", 1), ("X-None", None), ("Content-Length", b"5"),
                                    ("Content-Length", 5), ("Connection", b"close"), ("Date", b"x"), ("Server", 1)])
def test_non_str_values(header):
    # PEP 3333: header names and values are native strings.
    with pytest.raises(ResponseError):
        build("200 OK", [header])
    with pytest.raises(ResponseError):
        build("204 No Content", [header])


@pytest.mark.parametrize("value", ["\u20ac", "caf\u00e9 \u2603", "\ud800"])
def test_non_latin_1_values(value):
    # PEP 3333: values must be latin-1 encodable ("bytes as latin-1").
    with pytest.raises(ResponseError):
        build("200 OK", [("X-Value", value)])


def test_latin_1_values_pass():
    _, fields, (data, *_r) = build("200 OK", [("X-Value", "caf\xe9 \xff")], body_length=0)
    assert values(fields, "X-Value") == ["caf\xe9 \xff"]
    assert b"X-Value: caf\xe9 \xff\r\n" in data


@pytest.mark.parametrize("headers", [(("X", "y"),), {"X": "y"}, None, "X: y", [("X",)], [("X", "y", "z")], ["Xyz"], [None]])
def test_headers_must_be_a_list_of_pairs(headers):
    with pytest.raises(ResponseError):
        build_head("200 OK", headers, 1, False, True, -1, SERVER)


@pytest.mark.parametrize(
    "name",
    [
        # PEP 3333: "applications and middleware are forbidden from using HTTP/1.1 hop-by-hop
        # features or headers". A second Transfer-Encoding would corrupt our framing (a response
        # a proxy frames otherwise than the client: response desync).
        "Transfer-Encoding",
        "transfer-encoding",
        "Keep-Alive",
        "TE",
        "Trailer",
        "Trailers",
        "Upgrade",
        "Proxy-Authenticate",
        "Proxy-Authorization",
    ],
)
def test_hop_by_hop_headers_are_refused(name):
    value = "chunked" if name.lower() == "transfer-encoding" else "x"
    with pytest.raises(ResponseError):
        build("200 OK", [(name, value)])


@pytest.mark.parametrize(
    "headers",
    [
        [("Content-Length", "5"), ("Content-Length", "5")],
        [("Content-Length", "5"), ("content-length", "6")],
        [("Content-Length", "abc")],
        [("Content-Length", "-1")],
        [("Content-Length", "+5")],
        [("Content-Length", "5.0")],
        [("Content-Length", "0x5")],
        [("Content-Length", "")],
        [("Content-Length", "\u0665")],
        [("Content-Length", "\xb2")],
        [("Content-Length", "5, 5")],
    ],
)
def test_invalid_or_repeated_content_length(headers):
    # Two lengths (or one a client reads otherwise) is response smuggling through a proxy.
    with pytest.raises(ResponseError):
        build("200 OK", headers, body_length=5)


def test_whitespace_around_content_length_is_not_part_of_it():
    for value in (" 5", "5 ", "\t5"):
        data, _, writer, _ = build_head("200 OK", [("Content-Length", value)], 1, False, True, 5, b"")
        assert writer.content_length == 5 and b"Content-Length: 5\r\n" in data


def test_head_ends_with_one_blank_line_and_only_crlf():
    _, _, (data, *_r) = build("200 OK", [("A", "1"), ("B", "2")], body_length=0)
    assert data.count(b"\r\n\r\n") == 1
    assert data.count(b"\n") == data.count(b"\r\n") == data.count(b"\r")


def test_chunk_size_line():
    assert chunk_size_line(1) == b"1\r\n"
    assert chunk_size_line(255) == b"ff\r\n"
    assert chunk_size_line(4096) == b"1000\r\n"
    assert framing.LAST_CHUNK == b"0\r\n\r\n"


# --- the validated-field cache ---------------------------------------------------------------------


def test_the_field_cache_is_bounded():
    for i in range(framing._FIELD_CACHE_MAX * 2 + 10):
        build("200 OK", [("X-Request-Id", "%d" % i), ("Content-Length", "0")])
        assert len(framing._FIELD_CACHE) <= framing._FIELD_CACHE_MAX


def test_fields_new_in_every_response_do_not_evict_the_cached_ones():
    framing._FIELD_CACHE.clear()
    build("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "0")])
    cached = dict(framing._FIELD_CACHE)
    for i in range(framing._FIELD_CACHE_MAX + 10):
        _, fields, _ = build("101 Switching Protocols", [("Upgrade", "websocket"), ("Sec-WebSocket-Accept", "k%d=" % i)])
        assert values(fields, "Sec-WebSocket-Accept") == ["k%d=" % i]
        build("200 OK", [("Set-Cookie", "session=%d" % i), ("Content-Length", "0")])
    assert all(framing._FIELD_CACHE.get(item) == entry for item, entry in cached.items())
    assert not any(name.lower() in ("set-cookie", "sec-websocket-accept") for name, _ in framing._FIELD_CACHE)


def test_cache_hits_keep_every_rule():
    ok = ("X-Frame-Options", "DENY")
    for _ in range(3):  # the first call fills the cache, the others hit it
        data, _, _, _ = build_head("200 OK", [ok, ("Content-Length", "0")], 1, False, True, 0, b"")
        assert b"X-Frame-Options: DENY\r\n" in data
        with pytest.raises(ResponseError):
            build_head("200 OK", [("Content-Length", "0"), ("Content-Length", "0")], 1, False, True, 0, b"")
        with pytest.raises(ResponseError):
            build_head("200 OK", [("Transfer-Encoding", "chunked")], 1, False, True, 0, b"")
        with pytest.raises(ResponseError):
            build_head("200 OK", [("X-Evil", "a\r\nb: c")], 1, False, True, 0, b"")
        _, _, _, keep_alive = build_head("200 OK", [("Connection", "close")], 1, False, True, 0, b"")
        assert keep_alive is False
    assert ("X-Evil", "a\r\nb: c") not in framing._FIELD_CACHE  # refusals are never cached


def test_headers_as_lists_are_checked_like_tuples():
    data, _, _, _ = build_head("200 OK", [["X-A", "1"], ("Content-Length", "0")], 1, False, True, 0, b"")
    assert b"X-A: 1\r\n" in data
    with pytest.raises(ResponseError):
        build_head("200 OK", [["X-A", "1\n2"]], 1, False, True, 0, b"")


# --- body writers: one per framing, chosen by build_head (h11's WRITERS) ---------------------------


def test_the_content_length_writer_takes_at_most_the_announced_bytes():
    writer = build_head("200 OK", [("Content-Length", "5")], 1, False, True, -1, b"")[2]
    out = []
    assert writer.write(out, b"abc") == 3 and not writer.full() and not writer.delimits()
    assert writer.write(out, b"defg") == 2 and writer.full() and writer.delimits()  # PEP 3333: cut
    assert writer.write(out, b"h") == 0
    writer.end(out)
    assert out == [b"abc", b"de"]


def test_the_content_length_writer_takes_a_whole_body_only_of_its_length():
    writer = build_head("200 OK", [], 1, False, True, 6, b"")[2]
    assert writer.write_whole([], [b"abc"], 3) == -1  # the head said 6: piece by piece
    out = []
    assert writer.write_whole(out, [b"abc", b"def"], 6) == 6 and out == [b"abc", b"def"] and writer.delimits()


@pytest.mark.parametrize(
    "headers, minor, is_head, body_length",
    [
        ([], 1, False, 6),  # the server's Content-Length
        ([("Content-Length", "6")], 1, False, 6),  # the application's
        ([("Content-Length", "6")], 0, False, 6),
        ([], 1, True, 6),  # HEAD: no body
        ([("Content-Length", "9")], 1, False, 6),  # short: piece by piece
        ([], 1, False, -1),  # chunked
        ([], 0, False, -1),  # close-delimited
    ],
)
def test_a_body_taken_whole_needs_no_end(headers, minor, is_head, body_length):
    # The responder skips end() and delimits() after write_whole took a body (wsgi._send_result):
    # every writer that takes one whole must leave nothing to end, and the body delimited.
    writer = build_head("200 OK", headers, minor, is_head, True, body_length, b"")[2]
    out = []
    if writer.write_whole(out, [b"abc", b"def"], 6) < 0:
        return  # (piece by piece: write, then end, as for any body)
    queued = list(out)
    writer.end(out)
    assert out == queued and writer.delimits()


def test_a_short_body_does_not_delimit_itself():
    writer = build_head("200 OK", [("Content-Length", "5")], 1, False, True, -1, b"")[2]
    writer.write([], b"ab")
    assert not writer.delimits()  # the connection must close for the client to see it


def test_the_chunked_writer_frames_each_piece_and_ends_with_the_last_chunk():
    writer = build_head("200 OK", [], 1, False, True, -1, b"")[2]
    out = []
    assert writer.write(out, b"hello") == 5 and writer.write(out, b"x" * 17) == 17
    assert writer.write_whole([], [b"a"], 1) == -1 and not writer.full()
    assert writer.begin_file(out, 3) == 3
    writer.end_file(out)
    writer.end(out)
    assert b"".join(out) == b"5\r\nhello\r\n11\r\n" + b"x" * 17 + b"\r\n3\r\n\r\n0\r\n\r\n"
    assert writer.delimits()


def test_the_close_delimited_writer_sends_bytes_as_they_are_and_never_delimits():
    writer = build_head("200 OK", [], 0, False, True, -1, b"")[2]
    out = []
    assert writer.write(out, b"abc") == 3 and writer.begin_file(out, 10) == 10
    writer.end_file(out)
    writer.end(out)
    assert out == [b"abc"] and not writer.full() and not writer.delimits()


def test_the_no_body_writer_drops_everything():
    writer = build_head("200 OK", [], 1, True, True, 5, b"")[2]  # HEAD
    out = []
    assert writer.write(out, b"abc") == 0 and writer.write_whole(out, [b"abcde"], 5) == 0
    assert writer.begin_file(out, 10) == 0
    writer.end_file(out)
    writer.end(out)
    assert out == [] and writer.full() and writer.delimits()


def test_the_content_length_writer_cuts_a_file_to_the_announced_length():
    writer = build_head("200 OK", [("Content-Length", "4")], 1, False, True, 10, b"")[2]
    out = []
    assert writer.begin_file(out, 10) == 4 and writer.full() and out == []


@pytest.mark.parametrize("value", ["9223372036854775808", "9" * 19, "1" + "0" * 25])
def test_a_content_length_no_writer_can_count_is_refused_in_both_builds(value):
    # A writer counts down from the length in a C long long (compiled): more than 2**63 - 1
    # bytes is an application's mistake, refused alike in both builds instead of overflowing.
    with pytest.raises(ResponseError):
        build_head("200 OK", [("Content-Length", value)], 1, False, True, -1, b"")
    assert build_head("200 OK", [("Content-Length", "9223372036854775807")], 1, False, True, -1, b"")[2].content_length == (1 << 63) - 1


# --- interim responses: 103 Early Hints (RFC 8297) -------------------------------------------------

# Fields build_head refuses; informational_fields must refuse each with the same error, whichever
# of the two meets it first (the field cache is shared).
REFUSED_FIELDS = [
    [("X-Evil", "a\r\nSet-Cookie: evil=1")],
    [("X-Evil", "a\nb")],
    [("X-Nul", "a\x00b")],
    [("X Y", "v")],
    [("", "v")],
    [("Link:", "v")],
    [(b"Link", "v")],
    [("Link", b"</a.css>")],
    [("Link", None)],
    [("Link", "\u20ac")],
    ["Link: </a.css>"],
    [("Link",)],
    [("Link", "a", "b")],
    [None],
    [("Transfer-Encoding", "chunked")],
    [("Keep-Alive", "timeout=5")],
    [("TE", "trailers")],
    [("Trailer", "X")],
    [("Proxy-Authenticate", "Basic")],
    [("Upgrade", "websocket")],
    [("Content-Length", "five")],
    [("Content-Length", b"5")],
    [["X-A", "1\r\n2"]],
]


def _refusal(check, headers):
    with pytest.raises(ResponseError) as caught:
        check(headers)
    return str(caught.value)


def _final_head(headers):
    return build_head("200 OK", headers, 1, False, True, 0, b"")


@pytest.mark.parametrize("headers", REFUSED_FIELDS)
def test_informational_fields_refuse_what_a_final_head_refuses_with_the_same_error(headers):
    # Both orders: a hop-by-hop field is a valid line, cached by whichever meets it first.
    framing._FIELD_CACHE.clear()
    early = _refusal(framing.informational_fields, headers)
    assert _refusal(_final_head, headers) == early
    framing._FIELD_CACHE.clear()
    final = _refusal(_final_head, headers)
    assert _refusal(framing.informational_fields, headers) == final == early


@pytest.mark.parametrize("headers", [(("Link", "</a.css>"),), {"Link": "</a.css>"}, None, "Link: </a.css>"])
def test_informational_fields_must_be_a_list(headers):
    with pytest.raises(ResponseError) as caught:
        framing.informational_fields(headers)
    with pytest.raises(ResponseError) as final:
        build_head("200 OK", headers, 1, False, True, 0, b"")
    assert str(caught.value) == str(final.value)


def test_informational_fields_keep_the_order_trim_values_and_leave_the_servers_fields_out():
    headers = [
        ("Link", "</a.css>; rel=preload; as=style"),
        ("Content-Length", "12"),  # RFC 9110 §8.6: never in a 1xx (build_head drops it there too)
        ("Connection", "close"),  # the final head says what becomes of the connection
        ["link", " </b.js>; rel=preload; as=script\t"],
        ("Date", "Thu, 01 Jan 2015 00:00:00 GMT"),
        ("X-Trace", "caf\xe9"),
    ]
    assert framing.informational_fields(headers) == [
        ("Link", "</a.css>; rel=preload; as=style"),
        ("link", "</b.js>; rel=preload; as=script"),
        ("Date", "Thu, 01 Jan 2015 00:00:00 GMT"),
        ("X-Trace", "caf\xe9"),
    ]
    assert framing.informational_fields([]) == []


def test_the_early_hints_head_byte_for_byte():
    fields = framing.informational_fields([("Link", "</a.css>; rel=preload; as=style"), ("Link", "</b.js>; rel=preload")])
    assert framing.informational_head(103, fields) == (
        b"HTTP/1.1 103 Early Hints\r\n"
        b"Link: </a.css>; rel=preload; as=style\r\n"
        b"Link: </b.js>; rel=preload\r\n"
        b"\r\n"
    )
    assert framing.informational_head(103, []) == b"HTTP/1.1 103 Early Hints\r\n\r\n"
    assert framing.informational_head(103, [("X-Trace", "caf\xe9")]) == b"HTTP/1.1 103 Early Hints\r\nX-Trace: caf\xe9\r\n\r\n"


def test_other_interim_statuses_get_an_empty_reason_and_final_ones_are_refused():
    # RFC 9112 §4: status-line = HTTP-version SP status-code SP [ reason-phrase ].
    assert framing.informational_head(102, []) == b"HTTP/1.1 102 \r\n\r\n"
    for code in (101, 99, 200, 204, 404, 0, -1):
        with pytest.raises(ResponseError):
            framing.informational_head(code, [])


@pytest.mark.parametrize("pair", [("X-Evil", "a\r\nb: c"), ("Bad Name", "v"), ("X", b"v")])
def test_the_early_hints_head_checks_pairs_it_is_given_unchecked(pair):
    # The ConnectionIO gets checked pairs; built from any others, the head still cannot split.
    with pytest.raises(ResponseError):
        framing.informational_head(103, [pair])
    with pytest.raises(ResponseError):
        framing.informational_head(103, [list(pair)])

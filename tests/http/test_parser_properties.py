"""Property: however a valid pipelined stream is split into reads, the parser sees the same requests.

A generated stream of several valid requests (random methods, targets, extra fields, bodies
framed by Content-Length or chunked with random chunk sizes, extensions and trailers) is fed
whole and then cut at random points; both must give the same events, and the events must be the
requests that were generated.
"""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenserve.http.grammar import TCHAR
from greenserve.http.parser import END_OF_MESSAGE, NEED_DATA, PAUSED, Request

from tests.http.helpers import request_tuple, run

METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "PROPFIND"]
# RFC 3986 pchar minus "%" (so no accidental half-escapes matter either way) plus "/"
PATH_CHARS = "abcXYZ019-._~!$&'()*+,;=:@/"
QUERY_CHARS = PATH_CHARS + "?%"
SPECIAL = {"content-length", "transfer-encoding", "host", "connection", "expect", "upgrade"}
NAME_CHARS = TCHAR.decode("ascii")
# field-vchar: VCHAR / obs-text (RFC 9110 §5.5), as latin-1 characters
VALUE_CHARS = "".join(map(chr, range(0x21, 0x7F))) + "".join(map(chr, range(0x80, 0x100)))

names = st.text(NAME_CHARS, min_size=1, max_size=12).filter(lambda n: n.lower() not in SPECIAL)
words = st.text(VALUE_CHARS, min_size=1, max_size=8)
# field-content: words with SP/HTAB runs between them, none at either end
field_values = st.builds(
    lambda ws, seps: ws[0] + "".join(s + w for s, w in zip(seps, ws[1:])) if ws else "",
    st.lists(words, max_size=4),
    st.lists(st.sampled_from([" ", "\t", "  ", " \t"]), min_size=3, max_size=3),
)
ows = st.sampled_from(["", " ", "\t", "  "])
tokens = st.text("abcxyz-09", min_size=1, max_size=6)
chunk_exts = st.lists(
    st.one_of(
        tokens.map(lambda t: ";" + t),
        st.tuples(tokens, tokens).map(lambda p: ";%s=%s" % p),
        st.tuples(tokens, st.text("ab ;=,\\", max_size=5)).map(
            lambda p: ';%s="%s"' % (p[0], p[1].replace("\\", "\\\\"))
        ),
    ),
    max_size=2,
).map("".join)


@st.composite
def requests(draw, last):
    method = draw(st.sampled_from(METHODS))
    path = "/" + draw(st.text(PATH_CHARS, max_size=20))
    query = draw(st.one_of(st.none(), st.text(QUERY_CHARS, max_size=15)))
    target = path if query is None else path + "?" + query
    minor = draw(st.sampled_from([1, 1, 1, 0]))
    close = last and draw(st.booleans())
    fields = []
    if minor == 1:
        fields.append(("Host", draw(st.sampled_from(["example.com", "a:8080", "[::1]", ""]))))
    fields += draw(st.lists(st.tuples(names, field_values), max_size=5))
    if close:
        fields.append(("Connection", "close"))
    elif minor == 0:
        fields.append(("Connection", "keep-alive"))
    body = draw(st.binary(max_size=80))
    framing = draw(st.sampled_from(["none", "length", "chunked"] if minor == 1 else ["none", "length"]))
    if framing == "none":
        body = b""
    body_bytes = body
    if framing == "length":
        fields.insert(draw(st.integers(0, len(fields))), ("Content-Length", str(len(body))))
    elif framing == "chunked":
        fields.insert(draw(st.integers(0, len(fields))), ("Transfer-Encoding", "chunked"))
        cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=5)))
        chunks = [body[a:b] for a, b in zip([0] + cuts, cuts + [len(body)]) if b > a]
        encoded = b""
        for chunk in chunks:
            size = "%x" % len(chunk)
            if draw(st.booleans()):
                size = size.upper()
            encoded += (size + draw(chunk_exts) + "\r\n").encode("latin-1") + chunk + b"\r\n"
        encoded += ("0" + draw(chunk_exts) + "\r\n").encode("latin-1")
        for name, value in draw(st.lists(st.tuples(names, field_values), max_size=2)):
            encoded += ("%s:%s%s\r\n" % (name, draw(ows), value)).encode("latin-1")
        body_bytes = encoded + b"\r\n"
    head = "%s %s HTTP/1.%d\r\n" % (method, target, minor)
    for name, value in fields:
        head += "%s:%s%s%s\r\n" % (name, draw(ows), value, draw(ows))
    head += "\r\n"
    leading = draw(st.sampled_from(["", "", "\r\n"]))
    data = (leading + head).encode("latin-1") + body_bytes
    expected = (method, target, minor, [(n.lower(), v) for n, v in fields], body)
    return data, expected, close


@st.composite
def streams(draw):
    count = draw(st.integers(1, 4))
    parts = [draw(requests(last=i == count - 1)) for i in range(count)]
    data = b"".join(p[0] for p in parts)
    closed = parts[-1][2]
    if closed:
        # after "Connection: close" nothing more is read, however valid or not
        data += draw(st.sampled_from([b"", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"\x00garbage\r\n\r\n"]))
    return data, [p[1] for p in parts], closed


def summarise(events):
    """[(request tuple, body)] and the final state; body data joined per message."""
    messages = []
    body = None
    for event in events[:-1]:
        if isinstance(event, Request):
            assert body is None
            current, body = event, b""
        elif event is END_OF_MESSAGE:
            messages.append((current, body))
            body = None
        else:
            body += event
    assert body is None, "stream ended inside a message"
    return messages, events[-1]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(stream=streams(), data=st.data())
def test_any_split_parses_like_the_whole(stream, data):
    raw, expected, closed = stream
    max_data = data.draw(st.sampled_from([-1, -1, 1, 3, 64]), label="max_data")
    if data.draw(st.booleans(), label="byte by byte") and len(raw) < 1500:
        pieces = [raw[i : i + 1] for i in range(len(raw))]
    else:
        cuts = sorted(set(data.draw(st.lists(st.integers(0, len(raw)), max_size=12), label="cuts")))
        pieces = [raw[a:b] for a, b in zip([0] + cuts, cuts + [len(raw)])]
    assert b"".join(pieces) == raw

    whole_events, whole_error = run([raw])
    split_events, split_error = run(pieces, max_data=max_data)  # run() checks the max_data cap
    assert whole_error is None, whole_error
    assert split_error is None, split_error

    whole, whole_state = summarise(whole_events)
    split, split_state = summarise(split_events)
    assert [(request_tuple(r), b) for r, b in split] == [(request_tuple(r), b) for r, b in whole]
    assert split_state is whole_state is (PAUSED if closed else NEED_DATA)

    # ...and what was parsed is what was generated.
    assert len(whole) == len(expected)
    for (request, body), (method, target, minor, headers, sent_body) in zip(whole, expected):
        assert (request.method, request.target, request.minor) == (method, target, minor)
        assert request.headers == headers
        assert body == sent_body
        assert request.path + ("?" + request.query if "?" in target else "") == target


# --- the compiled build's head scanner decides what the pure build's does ------------------------
# (In-process, on the scanners themselves; test_parser_builds_agree.py compares whole parsers.)

from greenserve import _accel  # noqa: E402
from greenserve.http import errors as _errors  # noqa: E402
from greenserve.http import _pyhttp  # noqa: E402
from greenserve.http.head import HeadFacts, Limits  # noqa: E402

_compiled_only = pytest.mark.skipif(
    not _accel.compiled(), reason="pure-Python build: there is no C scanner to compare with"
)

_HEAD_ALPHABET = st.sampled_from([b"\r", b"\n", b"\r\n", b"a", b" ", b"\t", b":", b"\x00", b"\x7f", b"\x80", b"\xff", b"\x01"])


def _scan(scanner, data, message=True):
    """What a scanner makes of a head ``data`` (without its CRLFCRLF): the request and the facts
    its fields gave, or the error (its message too, if ``message``)."""
    buf = bytearray(data + b"\r\n\r\n")
    facts = HeadFacts()
    try:
        request = scanner.scan(buf, len(data), Limits(), facts)
    except _errors.ProtocolError as exc:
        return ("error", type(exc).__name__, str(exc) if message else None, exc.status_hint)
    return (
        [getattr(request, name) for name in Request.__slots__],
        [getattr(facts, name) for name in HeadFacts.__slots__ if name != "host_ok"],
    )


@_compiled_only
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_HEAD_ALPHABET, max_size=24).map(b"".join))
def test_both_scanners_refuse_the_same_bytes_in_a_head_with_the_same_error(data):
    from greenserve.http import _chttp

    head = b"GET / HTTP/1.1\r\nHost: a\r\nX:" + data
    # The same verdict and status; with more than one fault in the bytes, the message names the
    # first one each check meets (the C pass goes byte by byte, the pure one class by class).
    assert _scan(_chttp.HeadScanner(), head, False) == _scan(_pyhttp.HeadScanner(), head, False), data


_FIELD_PIECES = st.sampled_from(
    [b"Host", b"host", b"Content-Length", b"Transfer-Encoding", b"Connection", b"Expect", b"Upgrade",
     b"X-Forwarded-For", b"X", b":", b" ", b"\t", b"\r\n", b"a", b"5", b"close", b"chunked",
     b"100-continue", b"[::1]", b"a b", b"_", b"\x80"]
)


@_compiled_only
@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_FIELD_PIECES, max_size=30).map(b"".join))
def test_both_scanners_read_the_same_fields_into_the_same_facts(data):
    from greenserve.http import _chttp

    head = b"POST /p?q HTTP/1.1\r\n" + data
    assert _scan(_chttp.HeadScanner(), head) == _scan(_pyhttp.HeadScanner(), head), data


@_compiled_only
@settings(max_examples=1000, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"\r\n\r\n", b"a"]), max_size=20).map(b"".join), st.integers(0, 30))
def test_both_scanners_find_the_same_head_end(data, start):
    from greenserve.http import _chttp

    buf = bytearray(data)
    start = min(start, len(buf))
    assert _chttp.HeadScanner().find_end(buf, start) == _pyhttp.HeadScanner().find_end(buf, start), (data, start)


@_compiled_only
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=20), st.sampled_from([b"", b"\r\n", b"\r\nrest"]))
def test_the_chunk_size_shortcut_reads_only_plain_lines_and_reads_them_right(line, tail):
    from greenserve.http import _chttp

    buf = bytearray(line + tail)
    size = _chttp.HeadScanner().chunk_size(buf)
    if size < 0:
        assert buf == line + tail  # left whole to the general reading of the line
    else:
        assert line and not line.translate(None, b"0123456789abcdefABCDEF") and tail
        assert size == int(line, 16) and buf == tail[2:]
    assert _pyhttp.HeadScanner().chunk_size(bytearray(line + tail)) == -1

"""greenserve.static's HTTP rules as pure functions, vector by vector: the target's safe split,
RFC 9110's preconditions (§13.2.2's order), ranges (§14), If-Range (§13.1.5), content coding
(§12.5.3), the content types, the hashed names, the mounts' settings."""

import pytest

from greenserve.settings import Config, SettingError
from greenserve.static import (
    IMMUTABLE,
    UNSATISFIABLE,
    byte_range,
    cache_control,
    choose_encoding,
    content_type,
    entity_tag,
    http_date,
    if_range_holds,
    is_hashed,
    mount_list,
    parse_http_date,
    preconditions,
    split_target,
)


@pytest.mark.parametrize("rest, expected", [
    ("a.txt", (["a.txt"], False)),
    ("css/site.css", (["css", "site.css"], False)),
    ("sub/", (["sub"], True)),
    ("", ([], True)),
    ("caf%C3%A9.txt", (["café.txt"], False)),
    ("%252e%252e/x", (["%2e%2e", "x"], False)),  # decoded once: a name, not a parent
    ("a%20b", (["a b"], False)),
    ("caf\xc3\xa9%20x.txt", (["café x.txt"], False)),  # raw UTF-8 bytes, as the parser's latin-1 str
])
def test_split_target_accepts(rest, expected):
    assert split_target(rest) == expected


@pytest.mark.parametrize("rest", [
    "../secret", "a/../../secret", "%2e%2e/secret", "%2E%2E/secret", ".%2e/secret", "..%2fsecret",
    "..%2Fsecret", "a/%2e%2e%2f%2e%2e/secret", "..\\secret", "a%5c..%5csecret", "%c0%ae%c0%ae/secret",
    "%c0%af", "%e0%80%ae%e0%80%ae/secret", "a%00.txt", "a\x00b", "/etc/passwd", "a//b", "./a", "a/./b",
    ".env", ".git/config", "sub/.htaccess", "%2eenv", "a%0d%0ab", "%ff",
])
def test_split_target_refuses(rest):
    assert split_target(rest) is None


def test_preconditions_order_rfc9110_13_2_2():
    etag, other, modified = '"a-1"', '"b-2"', 1_000_000
    before, after = http_date(modified - 10), http_date(modified + 10)
    # If-None-Match (weak comparison) -> 304 for GET and HEAD, 412 otherwise.
    assert preconditions("GET", None, None, etag, None, etag, modified) == 304
    assert preconditions("HEAD", None, None, "W/" + etag, None, etag, modified) == 304
    assert preconditions("GET", None, None, "%s, %s" % (other, etag), None, etag, modified) == 304
    assert preconditions("GET", None, None, "*", None, etag, modified) == 304
    assert preconditions("GET", None, None, other, None, etag, modified) == 200
    # If-None-Match present: If-Modified-Since is ignored (step 3 before 4).
    assert preconditions("GET", None, None, other, after, etag, modified) == 200
    assert preconditions("GET", None, None, None, after, etag, modified) == 304
    assert preconditions("GET", None, None, None, http_date(modified), etag, modified) == 304
    assert preconditions("GET", None, None, None, before, etag, modified) == 200
    assert preconditions("GET", None, None, None, "not a date", etag, modified) == 200
    # If-Match is a strong comparison, and comes first.
    assert preconditions("GET", etag, None, etag, None, etag, modified) == 304
    assert preconditions("GET", other, None, etag, None, etag, modified) == 412
    assert preconditions("GET", "W/" + etag, None, None, None, etag, modified) == 412
    assert preconditions("GET", "*", None, None, None, etag, modified) == 200
    # If-Unmodified-Since only without If-Match.
    assert preconditions("GET", None, before, None, None, etag, modified) == 412
    assert preconditions("GET", None, after, None, None, etag, modified) == 200
    assert preconditions("GET", etag, before, None, None, etag, modified) == 200


def test_http_dates_three_forms():
    assert parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT") == 784111777
    assert parse_http_date("Sunday, 06-Nov-94 08:49:37 GMT") == 784111777
    assert parse_http_date("Sun Nov  6 08:49:37 1994") == 784111777
    assert parse_http_date("yesterday") is None
    assert http_date(784111777) == "Sun, 06 Nov 1994 08:49:37 GMT"


@pytest.mark.parametrize("header, size, expected", [
    ("bytes=0-0", 10, (0, 0)),
    ("bytes=2-5", 10, (2, 5)),
    ("bytes=2-", 10, (2, 9)),
    ("bytes=5-100", 10, (5, 9)),
    ("bytes=-3", 10, (7, 9)),
    ("bytes=-30", 10, (0, 9)),
    ("BYTES = 1-2", 10, (1, 2)),
    ("bytes=10-", 10, UNSATISFIABLE),
    ("bytes=10-20", 10, UNSATISFIABLE),
    ("bytes=-0", 10, UNSATISFIABLE),
    ("bytes=0-", 0, UNSATISFIABLE),
    ("bytes=-5", 0, UNSATISFIABLE),
    ("bytes=5-2", 10, None),  # invalid: ignored
    ("bytes=0-1,3-4", 10, None),  # several: the whole file (§14.2 allows it)
    ("items=0-1", 10, None),
    ("bytes=a-b", 10, None),
    ("bytes=٣-", 10, None),  # a non-ASCII digit
    ("bytes 0-1", 10, None),
    ("bytes=1", 10, None),
])
def test_byte_range(header, size, expected):
    assert byte_range(header, size) == expected


def test_if_range():
    etag, modified = '"a-1"', 1_000_000
    assert if_range_holds(etag, etag, modified)
    assert not if_range_holds('"b-2"', etag, modified)
    assert not if_range_holds("W/" + etag, etag, modified)  # weak tags never match (strong comparison)
    assert if_range_holds(http_date(modified), etag, modified)
    assert not if_range_holds(http_date(modified + 1), etag, modified)
    assert not if_range_holds("garbage", etag, modified)


@pytest.mark.parametrize("header, available, expected", [
    ("gzip, deflate, br", ("br", "gzip"), "br"),
    ("gzip", ("br", "gzip"), "gzip"),
    ("x-gzip", ("gzip",), "gzip"),
    ("br;q=0.5, gzip;q=0.8", ("br", "gzip"), "gzip"),
    ("br;q=0, gzip", ("br", "gzip"), "gzip"),
    ("br;q=0", ("br",), None),
    ("*", ("br", "gzip"), "br"),
    ("*;q=0", ("br", "gzip"), None),
    ("gzip;q=0.5, identity", ("gzip",), None),
    ("deflate", ("br", "gzip"), None),
    ("", ("br",), None),
    (None, ("br",), None),
    ("br", (), None),
    ("BR;Q=1.0", ("br",), "br"),
    ("br;q=nan", ("br",), None),
    ("br;q=2", ("br",), None),
])
def test_choose_encoding(header, available, expected):
    assert choose_encoding(header, available) == expected


@pytest.mark.parametrize("name, expected", [
    ("app.js", "text/javascript; charset=utf-8"),
    ("mod.mjs", "text/javascript; charset=utf-8"),
    ("site.css", "text/css; charset=utf-8"),
    ("logo.svg", "image/svg+xml"),
    ("code.wasm", "application/wasm"),
    ("font.woff2", "font/woff2"),
    ("site.webmanifest", "application/manifest+json; charset=utf-8"),
    ("index.html", "text/html; charset=utf-8"),
    ("DATA.JSON", "application/json; charset=utf-8"),
    ("noextension", "application/octet-stream"),
])
def test_content_types(name, expected):
    assert content_type(name) == expected


@pytest.mark.parametrize("name", [
    "app.3f2a9c.js", "styles.55e7cbb9ba48.css", "main.8e0d62a0dfa5c4a1b2f3.chunk.js", "index-BfN2s0Kd.js",
    "vendor-4f3a2b1c.js",
])
def test_hashed_names_are_immutable(name):
    assert is_hashed(name)
    assert cache_control(name, 60) == IMMUTABLE


@pytest.mark.parametrize("name", [
    "app.js", "jquery-3.6.0.min.js", "app.facade.js", "jquery-autoplay.js", "report-20240101.pdf",
    "bootstrap-datepicker.js", "a.txt",
])
def test_plain_names_get_max_age(name):
    assert not is_hashed(name)
    assert cache_control(name, 60) == "public, max-age=60"
    assert cache_control(name, 0) == "no-cache"


def test_entity_tag_changes_with_each_validator():
    tags = {entity_tag(10, 5, 7), entity_tag(11, 5, 7), entity_tag(10, 6, 7), entity_tag(10, 5, 8)}
    assert len(tags) == 4
    assert all(tag.startswith('"') and tag.endswith('"') for tag in tags)


def test_mount_setting_forms():
    assert mount_list("/static=./static") == ["/static=./static"]
    assert mount_list({"/static/": "s", "/media": "m"}) == ["/static=s", "/media=m"]
    assert Config(static=["/static=./static"]).static == ["/static=./static"]
    assert Config(static={"/static": "./static"}).static == ["/static=./static"]
    assert Config(static_max_age="120").static_max_age == 120


@pytest.mark.parametrize("value", [
    "static=./static", "/static", "/=./site", "/static?x=./s", "/a/../b=./s", ["/s=a", "/s/=b"], [3],
])
def test_mount_setting_refusals(value):
    with pytest.raises(SettingError):
        Config(static=value)

"""The compiled parser decides every request head the way the pure-Python one does.

Each build has its own head scanner (http/_chttp.pyx compiled, http/_pyhttp.py as plain
Python). The compiled one reads the usual request line (GET /path?q HTTP/1.1, ...), the field
lines and the Host value byte by byte in C, and a plain chunk-size line too; it hands everything
else to the one statement of the rules in http/head.py (_parse_request_line, _field_name,
HeadFacts, frame_request). A shortcut that accepted a line the rules refuse, or read it into
other fields, would be a difference between two builds of one server. So a corpus of messages
near those shortcuts' edges (every common method and near-misses, odd spaces, tabs, fragments,
versions, lengths at the limit, Host bytes, the fields that decide framing and persistence,
chunk-size lines) is parsed here, in this run's build, and in a subprocess with
GREENSERVE_PURE_PYTHON=1; both must give the same events or the same error.
"""

import random

import pytest

from greenserve import _accel

from tests.conftest import in_both_builds

pytestmark = pytest.mark.skipif(
    _accel.module_build("greenserve.http.parser") != "compiled",
    reason="pure-Python build: there is no second reading to compare with",
)

METHODS = ["GET", "POST", "HEAD", "PUT", "DELETE", "PATCH", "OPTIONS", "CONNECT", "PROPFIND",
           "get", "GETT", "GE", "G", "OPTIONSX", "POS", "M-SEARCH", "GET\t", "", "GET:"]
TARGETS = ["/", "/a", "/a/b?c=d", "/?", "/a?", "/a??b", "/a b", "/a\tb", "/a#f", "#", "*",
           "/" + "x" * 60, "http://h/p?q", "https://h", "HTTP://h:80/", "h/p", "/%41?%20",
           "/;p=1", "/a?b#", "//", "?a", "/\x80\xff", "/a?b=c d"]
VERSIONS = ["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/1.2", "HTTP/1.", "HTTP/11", "http/1.1",
            "HTTP/1.1 ", "HTTP/0.9", "HTTP/3.0", "HTTPS/1.1", "HTTP/1.1x", ""]
HOSTS = ["example.com", "a:80", "[::1]:8080", "a b", "a\tb", "", "x" * 70, "a/b", "a@b",
         "\x80", "a,b", "h_o-s.t~1"]
SEPARATORS = [" ", "  ", "\t"]


def corpus():
    heads = []
    for method in METHODS:
        for target in TARGETS:
            for version in VERSIONS:
                heads.append("%s %s %s\r\nHost: example.com\r\n\r\n" % (method, target, version))
    rng = random.Random(20261124)
    for _ in range(2000):
        parts = [rng.choice(METHODS), rng.choice(TARGETS), rng.choice(VERSIONS)]
        line = rng.choice(SEPARATORS).join(parts[:2]) + rng.choice(SEPARATORS) + parts[2]
        if rng.random() < 0.2:
            line = line[: rng.randrange(len(line) + 1)]
        host = rng.choice(HOSTS)
        heads.append("%s\r\nHost: %s\r\nX: y\r\n\r\n" % (line, host))
    for host in HOSTS:
        heads.append("GET / HTTP/1.1\r\nHost: %s\r\n\r\n" % host)
    # Request lines at and just over the limit (64 here, to keep the corpus small).
    for length in range(60, 68):
        target = "/" + "p" * (length - len("GET  HTTP/1.1") - 1)
        heads.append("GET %s HTTP/1.1\r\nHost: a\r\n\r\n" % target)
    heads.extend(field_corpus(rng))
    heads.extend(chunked_corpus())
    return heads


FIELDS = ["Host: a", "Host: b", "host:a", "Content-Length: 5", "Content-Length: 0", "Content-Length:  7 ",
          "Content-Length: 5x", "Content-Length: +5", "Transfer-Encoding: chunked",
          "Transfer-Encoding: gzip, chunked", "Transfer-Encoding: chunked, chunked", "Transfer-Encoding: ",
          "Connection: close", "Connection: keep-alive", "Connection: Upgrade", "connection: x, CLOSE",
          "Expect: 100-continue", "Expect: 100-Continue", "Expect: ", "Expect: nope", "Upgrade: websocket",
          "X-Forwarded-For: 1.2.3.4", "X: \t y \t", "X:", "X :y", " X: y", "X_Y: z", "X", "Ä: y",
          "X: a\tb"]


def field_corpus(rng):
    """Heads whose fields are the special ones (and their malformed neighbours), in any mix."""
    heads = []
    for field in FIELDS:
        for version in ("HTTP/1.1", "HTTP/1.0"):
            heads.append("GET / %s\r\nHost: h\r\n%s\r\n\r\n" % (version, field))
    for _ in range(1500):
        fields = [rng.choice(FIELDS) for _ in range(rng.randrange(5))]
        version = rng.choice(("HTTP/1.1", "HTTP/1.0"))
        heads.append("POST /u %s\r\n%s\r\n" % (version, "".join(f + "\r\n" for f in fields)))
    return heads


def chunked_corpus():
    """Chunked bodies whose size lines are plain (the compiled build's shortcut) or not."""
    messages = []
    for line in ["5", "05", "A", "a", "fFfF", "0" * 15 + "5", "0" * 16 + "5", "5;x=y", "5 ", " 5", "5\r",
                 "g", "", "-5", "7fffffffffffffff", "ffffffffffffffffff"]:
        body = "%s\r\nhello\r\n0\r\n\r\n" % line
        messages.append("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    return messages


# Run in this process and in the pure-Python subprocess: one JSON line per head.
PARSE = r"""
import json, sys
from greenserve.http import errors
from greenserve.http.parser import Limits, Request, RequestParser

def parse(message):
    parser = RequestParser(Limits(max_request_line=64))
    parser.feed(message.encode("latin-1"))
    events = []
    try:
        while True:
            event = parser.next_event()
            if isinstance(event, Request):
                events.append(["request"] + [getattr(event, name) for name in Request.__slots__])
            elif isinstance(event, bytes):
                events.append(["data", event.decode("latin-1")])
            else:
                events.append(["event", repr(event)])
                if repr(event) != "END_OF_MESSAGE":
                    return events
    except errors.ProtocolError as exc:
        return events + [["error", type(exc).__name__, str(exc)]]

def main(heads):
    return [parse(head) for head in heads]
"""


def test_compiled_and_pure_parsers_agree_on_every_head():
    heads = corpus()
    here, pure = in_both_builds(PARSE, heads)
    differ = [(head, mine, theirs) for head, mine, theirs in zip(heads, here, pure) if mine != theirs]
    assert not differ, "%d of %d heads differ, the first: %r" % (len(differ), len(heads), differ[0])
    # The corpus reaches both sides of the shortcuts: accepted requests and refused ones, bodies.
    kinds = {event[0] for outcome in here for event in outcome}
    assert kinds == {"request", "error", "data", "event"}, kinds

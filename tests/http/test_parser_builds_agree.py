"""The compiled parser decides every request head the way the pure-Python one does.

The compiled build reads the usual request line (GET /path?q HTTP/1.1, ...) and the Host value
byte by byte in C, and hands everything else to the one statement of the rules
(_parse_request_line, _check_host). A shortcut that accepted a line the rules refuse, or read it
into other fields, would be a difference between two builds of one server. So a corpus of heads
near those shortcuts' edges (every common method and near-misses, odd spaces, tabs, fragments,
versions, lengths at the limit, Host bytes) is parsed here, in this run's build, and in a
subprocess with GREENSERVE_PURE_PYTHON=1; both must give the same request or the same error.
"""

import json
import random
import subprocess
import sys

import pytest

from greenserve import _accel

from tests.conftest import ROOT, subprocess_env

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
    return heads


# Run in this process and in the pure-Python subprocess: one JSON line per head.
PARSE = r"""
import json, sys
from greenserve.http import errors
from greenserve.http.parser import Limits, Request, RequestParser

def parse(head):
    parser = RequestParser(Limits(max_request_line=64))
    parser.feed(head.encode("latin-1"))
    try:
        request = parser.next_event()
    except errors.ProtocolError as exc:
        return ["error", type(exc).__name__, str(exc)]
    if not isinstance(request, Request):
        return ["event", repr(request)]
    return ["request"] + [getattr(request, name) for name in Request.__slots__]

def main(heads):
    return [parse(head) for head in heads]
"""


def test_compiled_and_pure_parsers_agree_on_every_head():
    heads = corpus()
    namespace = {}
    exec(PARSE, namespace)
    here = namespace["main"](heads)
    script = PARSE + "\nprint(json.dumps(main(json.load(sys.stdin))))\n"
    result = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(heads),
        env=subprocess_env(GREENSERVE_PURE_PYTHON="1"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    pure = json.loads(result.stdout)
    here = json.loads(json.dumps(here))  # the same JSON round trip (tuples become lists)
    differ = [(head, mine, theirs) for head, mine, theirs in zip(heads, here, pure) if mine != theirs]
    assert not differ, "%d of %d heads differ, the first: %r" % (len(differ), len(heads), differ[0])
    # The corpus reaches both sides of the shortcuts: accepted requests and refused ones.
    kinds = {outcome[0] for outcome in here}
    assert kinds == {"request", "error"}, kinds

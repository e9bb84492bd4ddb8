"""h2spec, the HTTP/2 conformance tester (gunicorn runs it in its CI since 26.2.1), against the
server itself: built from its vendored source (tests/http2/h2spec/, VENDORED.md there) with
Debian's Go and golang-*-dev packages, offline, once per change of that source (build/h2spec/),
then run over h2c (--http-protocols h2, prior knowledge) and over TLS (ALPN h2) with --strict
(its 146 cases of the RFCs' MUSTs and the one of a SHOULD it runs only then): every one of the
147 must pass, and none is skipped.

The tests in test_h2spec_vectors.py are these cases' bytes against the codec alone; these are
the same cases against the whole server, with h2spec's own reading of the answers."""

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree

import pytest

from tests.conftest import ServerThread
from tests.http2.serving import make_certificate

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "h2spec")
BUILD = os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "h2spec")
GOCODE = "/usr/share/gocode"  # where Debian's golang-*-dev packages put their source
# The Debian packages h2spec's imports come from (.ci/run installs them with golang-go).
PACKAGES = {
    "github.com/spf13/cobra": "golang-github-spf13-cobra-dev",
    "github.com/fatih/color": "golang-github-fatih-color-dev",
    "golang.org/x/net/http2": "golang-golang-x-net-dev",
}
CASES = 147  # h2spec's cases with --strict (generic, http2, hpack)
RUN_TIMEOUT = 120  # h2spec's whole run; each case waits at most its -o (2 s) for an answer


def _source_digest():
    digest = hashlib.sha256()
    for folder, folders, files in sorted(os.walk(SOURCE)):
        folders.sort()
        for name in sorted(files):
            path = os.path.join(folder, name)
            digest.update(os.path.relpath(path, SOURCE).encode() + b"\0")
            with open(path, "rb") as source:
                digest.update(source.read())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="module")
def h2spec():
    """The h2spec binary, built from the vendored source unless a build of it is cached."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("go is not installed (apt-get install golang-go): h2spec is built from its Go source")
    missing = [package for path, package in PACKAGES.items() if not os.path.isdir(os.path.join(GOCODE, "src", path))]
    if missing:
        pytest.skip("h2spec's Go dependencies are not installed: apt-get install %s" % " ".join(missing))
    binary = os.path.join(BUILD, _source_digest(), "h2spec")
    os.makedirs(BUILD, exist_ok=True)
    with open(os.path.join(BUILD, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (two pytest runs side by side)
        if not os.path.exists(binary):
            _build(go, binary)
    return binary


def _build(go, binary):
    # GOPATH mode: the vendored tree as github.com/summerwind/h2spec, its imports from Debian's
    # /usr/share/gocode; no module proxy (CI has none), no cgo. About 20 s on one core.
    gopath = os.path.join(os.path.dirname(binary), "gopath")
    shutil.rmtree(gopath, ignore_errors=True)
    shutil.copytree(SOURCE, os.path.join(gopath, "src", "github.com", "summerwind", "h2spec"))
    env = dict(os.environ, GO111MODULE="off", GOPATH=gopath + os.pathsep + GOCODE, GOPROXY="off", GOFLAGS="",
               CGO_ENABLED="0", GOCACHE=os.path.join(BUILD, "gocache"))
    result = subprocess.run([go, "build", "-o", binary + ".new", "./cmd/h2spec"],
                            cwd=os.path.join(gopath, "src", "github.com", "summerwind", "h2spec"),
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, "go build of h2spec failed:\n" + (result.stderr or result.stdout)[-3000:]
    os.replace(binary + ".new", binary)
    shutil.rmtree(gopath, ignore_errors=True)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    return make_certificate(tmp_path_factory.mktemp("h2spec-tls"))


def _reads_its_body(environ, start_response):
    # h2spec's cases send request bodies; an application that reads them is what lets the
    # server see a body's mistakes (a content-length that its DATA contradicts, §8.1.1) while
    # the stream is still open, as a real application's would be.
    size = len(environ["wsgi.input"].read())
    body = b"read %d bytes\n" % size
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def _run(h2spec, port, tmp_path, tls):
    report = str(tmp_path / ("h2spec-%s.xml" % ("tls" if tls else "h2c")))
    argv = [h2spec, "-h", "127.0.0.1", "-p", str(port), "-o", "2", "--strict", "-j", report] + (["-t", "-k"] if tls else [])
    result = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT)
    summary = re.search(r"(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed", result.stdout)
    assert summary, result.stdout[-3000:] + result.stderr[-3000:]
    failed = []
    for case in ElementTree.parse(report).iter("testcase"):
        if case.find("failure") is not None or case.find("skipped") is not None:
            failed.append("%s: %s" % (case.get("package"), case.get("name")))
    return tuple(int(n) for n in summary.groups()), failed, result.stdout


@pytest.mark.parametrize("tls", [False, True], ids=["h2c", "tls"])
def test_h2spec_passes_every_case(h2spec, certificate, tmp_path, tls):
    settings = {"http_protocols": "h2"}
    if tls:
        settings.update(certfile=certificate[0], keyfile=certificate[1])
    else:
        settings["http2_cleartext"] = "prior-knowledge"
    server = ServerThread(_reads_its_body, **settings).start()
    try:
        counts, failed, output = _run(h2spec, server.port, tmp_path, tls)
    finally:
        server.stop()
    assert not failed and counts == (CASES, CASES, 0, 0), "\n".join(failed) + "\n" + output[-4000:]
    errors = server.errors.getvalue()
    assert "Traceback" not in errors and "internal error" not in errors, errors

"""Flask and Django through the real command line: `python -m greenserve ...` in a subprocess.

Each example (examples/flask_app.py, as `flask_app:app` and as the factory
`flask_app:create_app()`, and examples/django_project/) is started once per module and driven
with `requests` over real sockets: plain GETs, a CSRF-protected form, JSON, a ~3 MB multipart
upload and the same body sent chunked, a streamed response, a static file sent through
wsgi.file_wrapper, 200 concurrent requests to a view that sleeps, and outbound calls with requests
to a second greenserve while serving (both cooperative, because the
command monkey-patches before importing the app).
"""

import hashlib
import os
import random
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest

requests = pytest.importorskip("requests")
pytest.importorskip("flask")
pytest.importorskip("django")

from tests.conftest import ROOT, CLIServer, most_at_once  # noqa: E402

EXAMPLES = os.path.join(ROOT, "examples")
UPLOAD = random.Random(3333).randbytes(3 * 1024 * 1024 + 12345)  # ~3 MB, an odd size
UPLOAD_SHA256 = hashlib.sha256(UPLOAD).hexdigest()


@dataclass
class Site:
    """One example app as served by greenserve, and how its URLs and CSRF look."""

    name: str
    server: CLIServer
    paths: dict
    static_dir: str
    csrf_field: str
    csrf_refused: int  # the status of a POST without a valid CSRF token

    def url(self, name):
        return self.server.url + self.paths[name]

    def csrf_token(self, html):
        match = re.search(r'name="%s" value="([^"]+)"' % self.csrf_field, html)
        assert match, "no %s in the form page:\n%s" % (self.csrf_field, html)
        return match.group(1)


FLASK_PATHS = {
    "index": "/",
    "form": "/form",
    "json": "/api/echo",
    "upload": "/upload",
    "raw": "/upload/raw",
    "stream": "/stream",
    "static": "/static/",
    "sleep": "/sleep",
    "outbound": "/outbound",
}
DJANGO_PATHS = {name: path if path == "/" or path.endswith("/") else path + "/" for name, path in FLASK_PATHS.items()}

SITES = {
    "flask": dict(
        args=("--chdir", "examples", "--access-log", "-", "flask_app:app"),
        paths=FLASK_PATHS,
        static_dir=os.path.join(EXAMPLES, "static"),
        csrf_field="csrf_token",
        csrf_refused=400,
    ),
    "flask-2-workers": dict(
        args=("--chdir", "examples", "--workers", "2", "flask_app:app"),
        paths=FLASK_PATHS,
        static_dir=os.path.join(EXAMPLES, "static"),
        csrf_field="csrf_token",
        csrf_refused=400,
    ),
    "flask-factory": dict(
        args=("--chdir", "examples", "flask_app:create_app()"),
        paths=FLASK_PATHS,
        static_dir=os.path.join(EXAMPLES, "static"),
        csrf_field="csrf_token",
        csrf_refused=400,
    ),
    "django": dict(
        args=("--chdir", "examples/django_project", "mysite.wsgi:application"),
        paths=DJANGO_PATHS,
        static_dir=os.path.join(EXAMPLES, "django_project", "static"),
        csrf_field="csrfmiddlewaretoken",
        csrf_refused=403,
    ),
}


@pytest.fixture(scope="module", params=list(SITES))
def site(request):
    """One greenserve process per example, for all the tests of this module."""
    config = SITES[request.param]
    server = CLIServer(*config["args"])
    try:
        server.wait_ready()
    except AssertionError:
        code, out, err = server.stop()
        pytest.fail("greenserve %s did not start (exit %s):\n%s" % (" ".join(config["args"]), code, err))
    yield Site(
        request.param,
        server,
        config["paths"],
        config["static_dir"],
        config["csrf_field"],
        config["csrf_refused"],
    )
    code, out, err = server.stop()
    print("--- greenserve %s: exit %s; stderr:\n%s" % (request.param, code, err))
    assert code == 0, "greenserve did not stop cleanly on SIGTERM (exit %s):\n%s" % (code, err)
    assert "Traceback" not in err and "internal error" not in err, err


def test_get_index(site):
    response = requests.get(site.url("index"), timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    assert response.text.startswith("Hello from ")
    assert response.headers["Content-Length"] == str(len(response.content))
    assert response.headers["Server"] == "greenserve"


def test_form_with_csrf_token(site):
    with requests.Session() as session:
        page = session.get(site.url("form"), timeout=10)
        assert page.status_code == 200
        assert session.cookies, "the form page set no cookie (session or CSRF)"
        token = site.csrf_token(page.text)
        reply = session.post(site.url("form"), data={site.csrf_field: token, "name": "Grace & Ada"}, timeout=10)
        assert reply.status_code == 200, reply.text
        assert "Hello, Grace &amp; Ada!" in reply.text


def test_form_without_csrf_token_is_refused(site):
    with requests.Session() as session:
        page = session.get(site.url("form"), timeout=10)
        assert page.status_code == 200
        # With the cookie but without the token in the form,
        missing = session.post(site.url("form"), data={"name": "Mallory"}, timeout=10)
        assert missing.status_code == site.csrf_refused
        # with a wrong token,
        wrong = session.post(site.url("form"), data={site.csrf_field: "x" * 64, "name": "Mallory"}, timeout=10)
        assert wrong.status_code == site.csrf_refused
    # and without any cookie at all.
    fresh = requests.post(site.url("form"), data={site.csrf_field: site.csrf_token(page.text)}, timeout=10)
    assert fresh.status_code == site.csrf_refused
    for response in (missing, wrong, fresh):
        assert "Mallory" not in response.text


def test_json_api(site):
    document = {"name": "greenserve", "numbers": [1, 2.5, None], "nested": {"ok": True}, "text": "héllo ☃"}
    response = requests.post(site.url("json"), json=document, timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {"echo": document}
    bad = requests.post(site.url("json"), data=b"{not json", headers={"Content-Type": "application/json"}, timeout=10)
    assert bad.status_code == 400


def test_multipart_upload(site):
    response = requests.post(
        site.url("upload"), files={"file": ("data.bin", UPLOAD, "application/octet-stream")}, timeout=30
    )
    assert response.status_code == 200, response.text[:500]
    assert response.json() == {"filename": "data.bin", "size": len(UPLOAD), "sha256": UPLOAD_SHA256}


def _pieces(data):
    """The payload in irregular pieces, so chunk boundaries fall anywhere."""
    sizes = [1, 7, 1000, 65536, 70001, 3, 200000]
    offset = 0
    index = 0
    while offset < len(data):
        size = sizes[index % len(sizes)]
        yield data[offset : offset + size]
        offset += size
        index += 1


def test_raw_body_with_content_length(site):
    response = requests.post(site.url("raw"), data=UPLOAD, timeout=30)
    assert response.status_code == 200, response.text[:500]
    result = response.json()
    assert result["content_length"] == str(len(UPLOAD))
    assert (result["size"], result["sha256"]) == (len(UPLOAD), UPLOAD_SHA256)


def test_raw_body_chunked(site):
    # A generator as data: requests sends the body with Transfer-Encoding: chunked.
    response = requests.post(site.url("raw"), data=_pieces(UPLOAD), timeout=30)
    assert response.status_code == 200, response.text[:500]
    result = response.json()
    assert result["transfer_encoding"] == "chunked"
    assert result["content_length"] is None
    assert (result["size"], result["sha256"]) == (len(UPLOAD), UPLOAD_SHA256)


def test_streaming_response(site):
    expected = ["part %d" % n for n in range(1, 6)]
    with requests.get(site.url("stream"), params={"prefix": "part", "delay": 0.2}, stream=True, timeout=10) as response:
        assert response.status_code == 200
        assert "Content-Length" not in response.headers
        assert response.headers["Transfer-Encoding"] == "chunked"
        arrivals = []
        for line in response.iter_lines():
            arrivals.append((time.monotonic(), line.decode()))
    assert [line for _, line in arrivals] == expected
    # Streamed, not buffered: the first line came well before the last was produced
    # (four 0.2 s pauses apart).
    assert arrivals[-1][0] - arrivals[0][0] > 0.4


def test_head_of_streaming_response(site):
    # Werkzeug answers every HEAD with an empty iterable: that must not become "Content-Length: 0"
    # when the GET body (streamed, no length) is 35 bytes.
    get = requests.get(site.url("stream"), timeout=10)
    head = requests.head(site.url("stream"), timeout=10)
    assert head.status_code == 200
    assert head.content == b""
    # RFC 9110 §8.6: a HEAD response may carry Content-Length only if it is what GET would send.
    assert head.headers.get("Content-Length") in (None, str(len(get.content)))


@pytest.mark.parametrize("name", ["logo.png", "style.css"])
def test_static_file(site, name):
    with open(os.path.join(site.static_dir, name), "rb") as file:
        expected = file.read()
    response = requests.get(site.url("static") + name, timeout=10)
    assert response.status_code == 200
    assert response.content == expected
    assert response.headers["Content-Length"] == str(len(expected))
    assert response.headers["Content-Type"].split(";")[0] == ("image/png" if name.endswith(".png") else "text/css")
    head = requests.head(site.url("static") + name, timeout=10)
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["Content-Length"] == str(len(expected))
    missing = requests.get(site.url("static") + "nope.txt", timeout=10)
    assert missing.status_code == 404


def test_sleeping_requests_are_concurrent(site):
    # 200 requests that each sleep 0.5 s: served one after the other they would take 100 s.
    # With time.sleep patched by the command they overlap.
    url = site.url("sleep")

    def fetch(_):
        response = requests.get(url, params={"seconds": 0.5}, timeout=60)
        return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=200) as pool:
        results = list(pool.map(fetch, range(200)))
    assert [(status, body["slept"]) for status, body in results] == [(200, 0.5)] * 200
    # Cooperative sleeps overlap: many are in progress at once (blocking ones: never two).
    assert most_at_once([(body["began"], body["ended"]) for _, body in results]) >= 10


@pytest.fixture(scope="module")
def upstream():
    """A second greenserve, on loopback, for the examples to call while they serve."""
    server = CLIServer("--chdir", "examples", "flask_app:app")
    server.wait_ready()
    yield server
    server.stop()


def test_outbound_calls_with_requests_are_cooperative(site, upstream):
    # Each request makes an outbound call with requests (urllib3) to a view that sleeps 0.5 s.
    # The app imported requests after greenserve patched, so those calls wait on the event
    # loop: 20 of them overlap, where blocking sockets would run one at a time per worker.
    target = upstream.url + "/sleep?seconds=0.5"

    def fetch(_):
        response = requests.get(site.url("outbound"), params={"url": target}, timeout=60)
        return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(fetch, range(20)))
    assert [(status, body["status"]) for status, body in results] == [(200, 200)] * 20
    assert all('"slept":0.5' in body["body"].replace(" ", "") for _, body in results)
    assert most_at_once([(body["began"], body["ended"]) for _, body in results]) >= 10
    refused = requests.get(site.url("outbound"), params={"url": "http://example.com/"}, timeout=10)
    assert refused.status_code == 400  # the example is not an open proxy

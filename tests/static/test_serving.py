"""--static through a running ``greenserve`` command: real requests from curl and raw sockets.

Every path-safety case is a request a naive implementation (``os.path.join(root, unquote(path))``
and ``open``) would answer with a file outside the directory, a hidden file, an error or a hang;
here each is a 404 from greenserve, and the secret's bytes never appear. Then HTTP: conditional
requests, ranges (curl -C - resuming a download), If-Range, precompressed files, content types,
HEAD, 405, the index, the access log's mark. Runs against whichever build the suite runs
(GREENSERVE_PURE_PYTHON=1 for the pure one): the command inherits the environment.
"""

import gzip
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import ROOT, Client, CLIServer, subprocess_env, wait_until

SECRET = b"TOP SECRET: outside the static directory\n"
HIDDEN = b"DATABASE_PASSWORD=hunter2\n"
TEXT = b"hello, static world\n" * 50
BIG = os.urandom(1024 * 1024 + 12345)  # over HTTP/2's initial window, and several sendfile calls
APP = '''
def app(environ, start_response):
    start_response("200 OK", [("Content-Type", "text/plain")])
    return [b"app:" + environ["PATH_INFO"].encode("latin-1")]
'''


def make_site(root):
    """A site: static/ with files of each kind, and what lies beside it that must never be served."""
    static = root / "static"
    (static / "sub").mkdir(parents=True)
    (static / "emptydir").mkdir()
    (static / ".git").mkdir()
    (root / "app.py").write_text(APP)
    (root / "secret.txt").write_bytes(SECRET)
    (static / "a.txt").write_bytes(TEXT)
    (static / "a.txt.gz").write_bytes(gzip.compress(TEXT))
    (static / "a.txt.br").write_bytes(b"brotli bytes stand-in")
    (static / "big.bin").write_bytes(BIG)
    (static / "empty.txt").write_bytes(b"")
    for name in ("app.3f2a9c.js", "mod.mjs", "site.css", "logo.svg", "code.wasm", "font.woff2",
                 "site.webmanifest"):
        (static / name).write_bytes(b"x" * 10)
    (static / "sub" / "index.html").write_bytes(b"<h1>sub index</h1>\n")
    (static / ".env").write_bytes(HIDDEN)
    (static / ".git" / "config").write_bytes(HIDDEN)
    (static / "back\\slash.txt").write_bytes(b"a name with a backslash\n")
    os.symlink("a.txt", static / "inside-link")
    os.symlink("../secret.txt", static / "outside-link")
    os.symlink("..", static / "updir")
    os.symlink(".env", static / "hidden-link")
    os.symlink("/dev/zero", static / "zero")
    os.mkfifo(static / "fifo")
    return root


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    return make_site(tmp_path_factory.mktemp("site"))


def start(site, *flags):
    log = site / ("access-%d.log" % os.getpid())
    server = CLIServer("--static", "/static=static", "--access-log", str(log), *flags, "app:app", cwd=str(site))
    server.wait_ready()
    server.access_log = log
    return server


@pytest.fixture(scope="module")
def server(site):
    server = start(site, "--static-index")
    yield server
    server.stop()


def raw(server, target, method="GET", headers=(), timeout=10):
    """One request as the bytes say (nothing normalises the target), its response read strictly
    (tests/conftest.py's Client): (status, headers by lower-case name, body)."""
    with Client(("127.0.0.1", server.port), timeout=timeout) as client:
        client.request(method, target, headers=list(headers))
        response = client.read_response(method)
    return response.status, {name.lower(): value for name, value in response.headers}, response.body


def curl(*args):
    result = subprocess.run(["curl", "-s", "--max-time", "20", *args], capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


# --- safety: never outside the directory, never a hidden file, never a device or a FIFO ---

TRAVERSALS = [
    "/static/../secret.txt",
    "/static/%2e%2e/secret.txt",
    "/static/%2E%2E/secret.txt",
    "/static/.%2e/secret.txt",
    "/static/..%2fsecret.txt",
    "/static/sub/..%2f..%2fsecret.txt",
    "/static/%252e%252e/secret.txt",  # decoded twice, a parent
    "/static/%c0%ae%c0%ae/secret.txt",  # overlong UTF-8 for ..
    "/static/..%5csecret.txt",
    "/static/..\\secret.txt",
    "/static/back%5cslash.txt",  # a backslash in a name: a separator to some
    "/static/a.txt%00.png",
    "/static//{root}/secret.txt",  # absolute: os.path.join drops the root
    "/static/%2f{root}/secret.txt",
    "/static/outside-link",  # a symlink out of the directory
    "/static/updir/secret.txt",  # a directory symlink out of it
    "/static/.env",
    "/static/.git/config",
    "/static/hidden-link",  # a link to a hidden file
    "/static/sub/%2e%2e/.env",
    "/static/zero",  # a device
    "/static/fifo",  # opening a FIFO would wait for a writer
]


@pytest.mark.parametrize("target", TRAVERSALS)
def test_refused(server, site, target):
    status, fields, body = raw(server, target.format(root=str(site).lstrip("/")))
    assert status in (400, 404), (status, body[:200])
    assert SECRET not in body and HIDDEN not in body and not body.startswith(b"app:")


def test_served_after_the_refusals(server):
    # The FIFO did not block the worker (it was never opened for reading), nor did /dev/zero.
    status, _, body = raw(server, "/static/inside-link")  # a symlink within the directory is fine
    assert (status, body) == (200, TEXT)


def test_follow_symlinks_serves_outside_links_but_never_devices(site):
    server = start(site, "--static-follow-symlinks")
    try:
        assert raw(server, "/static/outside-link")[2] == SECRET
        assert raw(server, "/static/zero")[0] == 404
        assert raw(server, "/static/fifo")[0] == 404
        assert raw(server, "/static/.env")[0] == 404  # hidden names stay refused
    finally:
        server.stop()


# --- HTTP ---


def test_get_head_and_the_application_beside(server):
    status, fields, body = raw(server, "/static/a.txt")
    assert status == 200 and body == TEXT
    assert fields["content-length"] == str(len(TEXT))
    assert fields["content-type"] == "text/plain; charset=utf-8"
    assert fields["etag"].startswith('"') and fields["last-modified"].endswith("GMT")
    assert fields["cache-control"] == "public, max-age=60"
    assert fields["vary"] == "Accept-Encoding"
    with Client(("127.0.0.1", server.port)) as client:  # HEAD, then GET on the same connection
        client.request("HEAD", "/static/a.txt")
        head = client.read_response("HEAD")
        client.request("GET", "/static/a.txt")
        after = client.read_response()
    assert head.status == 200 and head.header("Content-Length") == str(len(TEXT))
    assert head.header("ETag") == fields["etag"] and (after.status, after.body) == (200, TEXT)
    assert raw(server, "/static/empty.txt")[:1] == (200,)
    assert raw(server, "/elsewhere")[2] == b"app:/elsewhere"
    assert raw(server, "/staticfile")[2] == b"app:/staticfile"  # the prefix ends at its slash


def test_a_miss_is_greenservers_404_not_the_applications(server):
    status, fields, body = raw(server, "/static/no-such-file.js")
    assert status == 404 and not body.startswith(b"app:")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS"])
def test_other_methods_405(server, method):
    status, fields, body = raw(server, "/static/a.txt", method=method)
    assert status == 405 and fields["allow"] == "GET, HEAD"


def test_conditional_requests(server):
    _, fields, _ = raw(server, "/static/a.txt")
    etag, modified = fields["etag"], fields["last-modified"]
    status, got, body = raw(server, "/static/a.txt", headers=[("If-None-Match", etag)])
    assert (status, body) == (304, b"") and got["etag"] == etag and "content-length" not in got
    assert raw(server, "/static/a.txt", headers=[("If-None-Match", '"other"')])[0] == 200
    assert raw(server, "/static/a.txt", headers=[("If-Modified-Since", modified)])[0] == 304
    assert raw(server, "/static/a.txt", headers=[("If-Modified-Since", "Sun, 06 Nov 1994 08:49:37 GMT")])[0] == 200
    assert raw(server, "/static/a.txt", headers=[("If-Match", '"other"')])[0] == 412
    assert raw(server, "/static/a.txt", headers=[("If-Match", etag)])[0] == 200


def test_ranges_and_if_range(server):
    size = len(BIG)
    status, fields, body = raw(server, "/static/big.bin", headers=[("Range", "bytes=100-199")])
    assert (status, body) == (206, BIG[100:200])
    assert fields["content-range"] == "bytes 100-199/%d" % size
    status, fields, body = raw(server, "/static/big.bin", headers=[("Range", "bytes=-10")])
    assert (status, body) == (206, BIG[-10:])
    status, fields, body = raw(server, "/static/big.bin", headers=[("Range", "bytes=%d-" % size)])
    assert status == 416 and fields["content-range"] == "bytes */%d" % size
    status, _, body = raw(server, "/static/big.bin", headers=[("Range", "bytes=0-1,5-6")])
    assert (status, body) == (200, BIG)  # several ranges: the whole file
    etag = raw(server, "/static/big.bin", method="HEAD")[1]["etag"]
    status, _, body = raw(server, "/static/big.bin", headers=[("Range", "bytes=0-9"), ("If-Range", etag)])
    assert (status, body) == (206, BIG[:10])
    status, _, body = raw(server, "/static/big.bin", headers=[("Range", "bytes=0-9"), ("If-Range", '"stale"')])
    assert (status, body) == (200, BIG)


def test_curl_resumes_a_partial_download(server, tmp_path):
    out = tmp_path / "big.bin"
    out.write_bytes(BIG[:300000])  # an interrupted download
    curl("-C", "-", "-o", str(out), server.url + "/static/big.bin")
    assert out.read_bytes() == BIG


def test_precompressed_files(server):
    status, fields, body = raw(server, "/static/a.txt", headers=[("Accept-Encoding", "gzip, br")])
    assert (fields["content-encoding"], body) == ("br", b"brotli bytes stand-in")
    assert fields["vary"] == "Accept-Encoding"
    status, fields, body = raw(server, "/static/a.txt", headers=[("Accept-Encoding", "gzip")])
    assert fields["content-encoding"] == "gzip" and gzip.decompress(body) == TEXT
    status, fields, body = raw(server, "/static/a.txt", headers=[("Accept-Encoding", "br;q=0, gzip;q=0")])
    assert "content-encoding" not in fields and body == TEXT
    assert curl("--compressed", "-H", "Accept-Encoding: gzip", server.url + "/static/a.txt") == TEXT


@pytest.mark.parametrize("name, kind, cache", [
    ("app.3f2a9c.js", "text/javascript; charset=utf-8", "public, max-age=31536000, immutable"),
    ("mod.mjs", "text/javascript; charset=utf-8", "public, max-age=60"),
    ("site.css", "text/css; charset=utf-8", "public, max-age=60"),
    ("logo.svg", "image/svg+xml", "public, max-age=60"),
    ("code.wasm", "application/wasm", "public, max-age=60"),
    ("font.woff2", "font/woff2", "public, max-age=60"),
    ("site.webmanifest", "application/manifest+json; charset=utf-8", "public, max-age=60"),
])
def test_content_types_and_cache_control(server, name, kind, cache):
    fields = raw(server, "/static/" + name, method="HEAD")[1]
    assert (fields["content-type"], fields["cache-control"]) == (kind, cache)


def test_index(server, site):
    assert raw(server, "/static/sub/")[2] == b"<h1>sub index</h1>\n"
    status, fields, _ = raw(server, "/static/sub?x=1")
    assert status == 301 and fields["location"] == "/static/sub/?x=1"
    assert raw(server, "/static/emptydir/")[0] == 404
    plain = start(site)  # --static-index is off by default
    try:
        assert raw(plain, "/static/sub/")[0] == 404
        assert raw(plain, "/static/sub")[0] == 404
    finally:
        plain.stop()


def test_an_edited_file_is_served_anew(server, site):
    path = site / "static" / "edited.txt"
    path.write_bytes(b"first\n")
    assert raw(server, "/static/edited.txt")[2] == b"first\n"
    replacement = site / "static" / "edited.tmp"
    replacement.write_bytes(b"second version\n")
    os.replace(replacement, path)  # as a deployment does: a new inode
    wait_until(lambda: raw(server, "/static/edited.txt")[2] == b"second version\n", 10, "the new file")


def test_access_log_marks_static(server):
    raw(server, "/static/a.txt?logged=1")
    raw(server, "/not-static?logged=2")

    def lines():
        return server.access_log.read_text().splitlines() if server.access_log.exists() else []

    wait_until(lambda: any("logged=2" in line for line in lines()), 10, "the access log's lines")
    static_line = next(line for line in lines() if "logged=1" in line)
    app_line = next(line for line in lines() if "logged=2" in line)
    assert static_line.endswith(" static") and not app_line.endswith(" static")


def test_missing_directory_is_one_line_and_exit_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "greenserve", "--static", "/static=nowhere", "--chdir", str(tmp_path), "app:app"],
        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 2
    assert "nowhere" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_config_file_dict(site, tmp_path):
    conf = tmp_path / "conf.py"
    conf.write_text('static = {"/assets": "static"}\nstatic_max_age = 30\n')
    server = CLIServer("-c", str(conf), "app:app", cwd=str(site))
    try:
        server.wait_ready()
        status, fields, body = raw(server, "/assets/a.txt")
        assert (status, body, fields["cache-control"]) == (200, TEXT, "public, max-age=30")
        assert raw(server, "/static/a.txt")[2] == b"app:/static/a.txt"  # not mounted there
    finally:
        server.stop()


def test_sighup_reads_the_mounts_again(site, tmp_path):
    conf, log = tmp_path / "conf.py", tmp_path / "error.log"
    conf.write_text('static = {"/assets": "static"}\n')
    server = CLIServer("-c", str(conf), "--error-log", str(log), "app:app", cwd=str(site))
    try:
        server.wait_ready()
        conf.write_text('static = {"/assets": "no-such-directory"}\n')
        server.process.send_signal(signal.SIGHUP)  # refused: the workers serve on as they were
        wait_until(lambda: "no such directory: no-such-directory" in log.read_text(), 20, "the refusal")
        assert raw(server, "/assets/a.txt")[2] == TEXT
        conf.write_text('static = {"/files": "static/sub"}\n')
        server.process.send_signal(signal.SIGHUP)
        # (The old worker may answer until it has stopped: both, once only the new one serves.)
        wait_until(lambda: raw(server, "/files/index.html")[0] == 200
                   and raw(server, "/assets/a.txt")[2] == b"app:/assets/a.txt", 30, "the new mount alone")
    finally:
        server.stop()

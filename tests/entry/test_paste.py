"""greenserve.httpserver as a drop-in for paste.httpserver, and the PasteDeploy entry point.

The classic call runs in a subprocess with only its import changed; PasteDeploy loads
``egg:greenserve`` from a real ``.ini``. Loopback only, every wait bounded.
"""

import inspect
import os
import re
import signal
import subprocess
import sys
import textwrap
import urllib.request
import warnings

import pytest

from greenserve import httpserver
from tests.conftest import children_of, free_port, subprocess_env, wait_for_port, wait_until
from tests.entry.test_cli import _https_get, certificate  # noqa: F401  (a fixture, used by name)

APP = '''
import os


def app(environ, start_response):
    body = ("%d %s %s" % (os.getpid(), environ["PATH_INFO"], environ["wsgi.url_scheme"])).encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def make_app(global_conf, **local_conf):
    return app
'''


def _get(port, path="/"):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=10) as response:
        return response.read().decode()


def _run(tmp_path, script, *args):
    (tmp_path / "pasteapp.py").write_text(textwrap.dedent(APP))
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)], cwd=str(tmp_path),
        env=subprocess_env(PYTHONPATH=str(tmp_path) + os.pathsep + subprocess_env()["PYTHONPATH"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )


def _finish(process, signum):
    process.send_signal(signum)
    try:
        out, err = process.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=5)
        raise
    return process.returncode, out, err


def test_serve_takes_every_keyword_of_paste():
    paste_httpserver = pytest.importorskip("paste.httpserver", reason="Paste is not installed")
    ours = inspect.signature(httpserver.serve).parameters
    for name, parameter in inspect.signature(paste_httpserver.serve).parameters.items():
        assert name in ours, name
        assert ours[name].default == parameter.default, name  # the same call means the same thing


def test_the_classic_call_with_only_the_import_changed(tmp_path):
    port = free_port()
    process = _run(tmp_path, """
        import sys
        from pasteapp import app
        from greenserve import httpserver      # was: from paste import httpserver
        httpserver.serve(app, host='127.0.0.1', port=sys.argv[1], use_threadpool=True, threadpool_workers=10)
    """, port)
    try:
        wait_for_port(port, process=process)
        assert _get(port, "/x").endswith(" /x http")
    finally:
        code, out, err = _finish(process, signal.SIGINT)  # Ctrl-C: paste's way to stop it
    assert code == 0, err
    assert out == "serving on http://127.0.0.1:%d\n" % port


def test_start_loop_false_returns_a_bound_server():
    server = httpserver.serve(lambda e, s: [], host="127.0.0.1", port=0, start_loop=False, socket_timeout=7)
    try:
        assert server.server_port > 0  # bound already, as paste's is
        assert server.config.keepalive == server.config.header_timeout == 7.0
        assert server.pool.size == 1000  # paste's 10 threads are a floor for connections
        assert server.socket.getsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_ACCEPTCONN)
    finally:
        server.close()


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"handler": object}, TypeError, "BaseHTTPRequestHandler"),
        ({"ssl_pem": "*"}, ValueError, "throwaway certificates"),
        ({"ssl_context": object()}, TypeError, "pyOpenSSL"),
        ({"protocol_version": "HTTP/2"}, ValueError, "protocol_version"),
        ({"port": "http"}, ValueError, "not a port number"),
        ({"threadpool_options": {"frobnicate": 1}}, TypeError, "unknown option(s) frobnicate"),
    ],
    ids=["handler", "generated-pem", "pyopenssl-context", "protocol", "port", "threadpool-option"],
)
def test_what_cannot_be_done_is_said(kwargs, error, words):
    with pytest.raises(error, match=None) as info:
        httpserver.serve(lambda e, s: [], host="127.0.0.1", start_loop=False, **kwargs)
    assert words in str(info.value)


def test_thread_pool_options_are_named_when_ignored():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        server = httpserver.serve(lambda e, s: [], host="127.0.0.1", port=0, start_loop=False,
                                  threadpool_options={"hung_thread_limit": 30, "nworkers": 2000})
    server.close()
    assert server.pool.size == 2000
    assert [str(w.message) for w in caught] == [
        "greenserve.httpserver: threadpool_options hung_thread_limit only apply to paste's thread pool; ignored"
    ]


def test_ssl_pem_holding_certificate_and_key(tmp_path, certificate):  # noqa: F811
    cert, key = certificate
    pem = tmp_path / "host.pem"
    pem.write_text(open(cert).read() + open(key).read())  # paste's format: both in one file
    port = free_port()
    process = _run(tmp_path, """
        import sys
        from pasteapp import app
        from greenserve import httpserver
        httpserver.serve(app, host='127.0.0.1', port=sys.argv[1], ssl_pem=sys.argv[2])
    """, port, pem)
    try:
        wait_for_port(port, process=process)
        status, body = _https_get(port, cert, "/s")
        assert status == 200 and body.endswith(b" /s https")
    finally:
        code, out, err = _finish(process, signal.SIGINT)
    assert code == 0, err
    assert out == "serving on https://127.0.0.1:%d\n" % port


INI = """
[app:main]
paste.app_factory = pasteapp:make_app

[server:main]
use = egg:greenserve{entry}
host = 127.0.0.1
port = {port}
keepalive = 3
threadpool_workers = 20
{extra}
"""

LOAD = """
import sys
from paste.deploy import loadapp, loadserver
uri = "config:" + sys.argv[1]
server = loadserver(uri)
server(loadapp(uri))
"""


@pytest.mark.parametrize("entry, workers", [("", 1), ("#http", 2)], ids=["egg-greenserve", "egg-greenserve-http-2-workers"])
def test_pastedeploy_server_entry_point(tmp_path, entry, workers):
    pytest.importorskip("paste.deploy", reason="PasteDeploy is not installed")
    port = free_port()
    ini = tmp_path / "site.ini"
    ini.write_text(INI.format(entry=entry, port=port, extra="workers = %d" % workers))
    process = _run(tmp_path, LOAD, ini)
    try:
        wait_for_port(port, process=process)
        pid = int(_get(port, "/d").split()[0])
        if workers == 1:
            assert pid == process.pid
        else:
            wait_until(lambda: len(children_of(process.pid)) == 2, 15, "two workers")
            assert pid in children_of(process.pid)
    finally:
        # One process stops on Ctrl-C, as paste's does; the pre-fork master on TERM.
        code, out, err = _finish(process, signal.SIGINT if workers == 1 else signal.SIGTERM)
    assert code == 0, err
    if workers == 1:
        assert out == "serving on http://127.0.0.1:%d\nstopped\n" % port, (out, err)
    else:  # the pre-fork master's log: an address to click, not a Python tuple
        assert "listening on http://127.0.0.1:%d\n" % port in err, err
        assert err.endswith("[INFO] stopped\n"), err


PSERVE = "import runpy, sys; sys.argv = ['pserve', sys.argv[1]]; runpy.run_module('pyramid.scripts.pserve', run_name='__main__')"


def _without_others_warnings(lines):
    """stderr's lines but a Python warning that another package's module raised, and the source
    line printed under it: Pyramid's pserve imports pkg_resources, deprecated by setuptools 81
    and later ("pkg_resources is deprecated as an API"), which is Pyramid's to fix, not ours."""
    kept = []
    skip_source = False
    for line in lines:
        if skip_source and line.startswith("  "):
            skip_source = False
            continue
        skip_source = False
        if re.match(r"^\S+\.py:\d+: \w*Warning: ", line) and "/greenserve/" not in line.split(":", 1)[0]:
            skip_source = True
            continue
        kept.append(line)
    return kept


@pytest.mark.parametrize(
    "launcher, extra, words",
    [
        ("loadserver", "keep_alive = 3", "[server] keep_alive: not a key greenserve knows; did you mean keepalive?"),
        ("pserve", "keep_alive = 3", "[server] keep_alive: not a key greenserve knows; did you mean keepalive?"),
        ("pserve", "limit_request_line = lots", "[server] limit_request_line = 'lots': "),
        ("pserve", "workers = two", "[server] workers = 'two': not a whole number"),
    ],
    ids=["loadserver-unknown-key", "pserve-unknown-key", "pserve-bad-setting-value", "pserve-bad-workers"],
)
def test_pastedeploy_mistakes_are_one_line_and_exit_2(tmp_path, launcher, extra, words):
    pytest.importorskip("paste.deploy", reason="PasteDeploy is not installed")
    if launcher == "pserve":
        pytest.importorskip("pyramid.scripts.pserve", reason="Pyramid (pserve) is not installed")
    ini = tmp_path / "site.ini"
    ini.write_text(INI.format(entry="", port=free_port(), extra=extra))
    process = _run(tmp_path, LOAD if launcher == "loadserver" else PSERVE, ini)
    out, err = process.communicate(timeout=30)
    assert process.returncode == 2, (out, err)
    lines = _without_others_warnings(err.splitlines())
    assert lines[-1].startswith("greenserve: error: %s: %s" % (ini, words)), err  # not a 20-line traceback
    assert lines[:-1] in ([], ["Starting server in PID %d." % process.pid]), err  # (pserve's own line)
    assert "Exiting" not in out and "serving on" not in out, out


def test_pserve_serves_with_greenserve(tmp_path):
    pytest.importorskip("pyramid.scripts.pserve", reason="Pyramid (pserve) is not installed")
    port = free_port()
    ini = tmp_path / "site.ini"
    ini.write_text(INI.format(entry="", port=port, extra=""))
    process = _run(tmp_path, PSERVE, ini)
    try:
        wait_for_port(port, process=process)
        assert _get(port, "/p").endswith(" /p http")
    finally:
        code, out, err = _finish(process, signal.SIGINT)
    assert "serving on http://127.0.0.1:%d" % port in out, (out, err)
    assert out.endswith("stopped\n"), (out, err)

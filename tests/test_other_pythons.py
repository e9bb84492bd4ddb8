"""The oldest and the newest Python 3 of this machine beside the one running the suite (issue 42).

gevent supports Python 3.10 to 3.14 and so does greenserve (``requires-python``), but the suite
runs on one. The whole suite on two more Pythons would take README's test command past CI's 30
minutes (a pass is about 10 minutes), so each other Python builds greenserve compiled from a
copy of this checkout and runs the tests that change with the Python version:

- the compiled build itself (``tests/test_build.py``): Cython's C against each version's C API;
- the protocol cores, with their byte vectors and split-anywhere properties: HTTP/1.1
  (``tests/http``), HTTP/2 and HPACK (``tests/http2``), WebSocket (``tests/websocket``), whose
  codecs lean on ``bytes``, ``memoryview``, ``int.from_bytes`` and ``zlib``;
- TLS (``tests/test_tls.py``): the ``ssl`` module changes from version to version (3.10's close
  handshake raced in ``tests/websocket/test_builtin.py::test_over_tls``);
- the command's first steps (``tests/test_smoke.py``).

Compiled build only, as issue 42 allows: in the pure pass (GREENSERVE_PURE_PYTHON=1) it skips.
A Python that is absent skips with the command that installs it. The other Pythons' own
packages come from the package index into a venv of their own (the first run downloads them).
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT

# What the subset's tests import (each test that needs one of the others skips without it).
PACKAGES = [
    "setuptools>=77", "Cython>=3.0", "gevent>=23.9", "greenlet>=3.0", "pytest>=7", "pytest-timeout>=2",
    "pytest-xdist>=3", "hypothesis>=6", "h2>=4.1", "httpx[http2]>=0.24", "websockets>=13", "wsproto>=1.2",
    "websocket-client>=1", "simple-websocket>=1", "gevent-websocket>=0.10.1", "gunicorn>=21", "requests>=2.28",
]
SUBSET = ["tests/test_build.py", "tests/test_smoke.py", "tests/test_tls.py", "tests/http", "tests/http2",
          "tests/websocket"]
# The vendored h2spec needs Go and the suite's own 3.11 run covers it; its build is no Python's.
DESELECT = ["tests/http2/test_h2spec.py"]


def _version(python):
    out = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True, timeout=30)
    return tuple(int(part) for part in out.stdout.strip().split(".")) if out.returncode == 0 else None


def other_pythons():
    """{(3, minor): path} for every Python 3.10+ found on PATH or in pyenv, except this one."""
    candidates = [shutil.which("python3.%d" % minor) for minor in range(10, 20)]
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3")))
    found = {}
    for python in filter(None, candidates):
        version = _version(python)
        if version and version >= (3, 10) and version != sys.version_info[:2]:
            found.setdefault(version, python)
    return found


def _ends():
    found = other_pythons()
    if not found:
        return []
    ends = sorted({min(found), max(found)})
    return [(version, found[version]) for version in ends]


def _copy_checkout(dest):
    """The checkout's files as git has them (tracked, and new ones not ignored): no build output."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, timeout=60)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: cannot copy the sources alone (%s)" % listed.stderr.decode()[:200])
    for name in listed.stdout.decode().split("\0"):
        source = os.path.join(ROOT, name)
        if name and os.path.isfile(source):
            os.makedirs(os.path.join(dest, os.path.dirname(name)), exist_ok=True)
            shutil.copy2(source, os.path.join(dest, name))


def _environment():
    """This run's environment without what would point the other Python back at this run: its
    pytest-xdist worker's variables, PYTHONPATH, the pure-build switch."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("PYTEST_") and name not in ("PYTHONPATH", "GREENSERVE_PURE_PYTHON", "VIRTUAL_ENV")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(argv, cwd, timeout, what):
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=_environment())
    assert result.returncode == 0, "%s failed (exit %d):\n%s\n%s" % (
        what, result.returncode, result.stdout[-6000:], result.stderr[-3000:])
    return result.stdout


@pytest.mark.timeout(1500)
@pytest.mark.parametrize("version,python", _ends() or [pytest.param(None, None, marks=pytest.mark.skip(
    reason="no other Python 3.10+ here (pyenv install 3.10 3.13, or python3.10 on PATH): only this one is tested"))],
    ids=lambda value: "%d.%d" % value if isinstance(value, tuple) else "")
def test_the_version_sensitive_tests_pass_compiled(version, python, tmp_path):
    if os.environ.get("GREENSERVE_PURE_PYTHON"):
        pytest.skip("the other Pythons run the compiled build only (issue 42): the pure pass leaves them out")
    tree = tmp_path / "checkout"
    _copy_checkout(str(tree))
    venv = tmp_path / "venv"
    _run([python, "-m", "venv", str(venv)], str(tmp_path), 120, "python%d.%d -m venv" % version)
    bin_python = str(venv / "bin" / "python")
    _run([bin_python, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + PACKAGES, str(tree), 600,
         "pip install of the subset's packages on %d.%d" % version)
    _run([bin_python, "setup.py", "-q", "build_ext", "--inplace"], str(tree), 600, "the build on %d.%d" % version)
    said = _run([bin_python, "-m", "greenserve", "--version"], str(tree), 60, "greenserve --version")
    assert "compiled hot path" in said and "Python %d.%d" % version in said, said
    argv = [bin_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2"] + SUBSET
    argv += ["--deselect=%s" % path for path in DESELECT]
    out = _run(argv, str(tree), 1200, "the version-sensitive tests on %d.%d" % version)
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and "error" not in summary, summary

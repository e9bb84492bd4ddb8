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

It runs when named (README's test command's last step: ``python -m pytest
tests/test_other_pythons.py``, after the two passes) and skips inside the passes: it holds both
cores for about 4 minutes, which under ``-n 3`` made the tests queued behind it time out.
Compiled build only, as issue 42 allows: with GREENSERVE_PURE_PYTHON=1 it skips.
A Python that is absent skips with the command that installs it. The other Pythons' packages
(pyproject.toml's requirements, by name) come from the package index into a venv of their own,
each run (pip's cache keeps the downloads).
"""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

from greenserve import _accel
from tests.conftest import ROOT

# What the subset's tests import, by name; their version limits are pyproject.toml's (one home):
# the build's requirements, the dependencies, and these of the test extra (a test that needs one of
# the others skips without it).
TEST_EXTRAS = {"pytest", "pytest-timeout", "pytest-xdist", "hypothesis", "h2", "httpx", "websockets", "wsproto",
               "websocket-client", "simple-websocket", "gevent-websocket", "gunicorn", "requests"}
SUBSET = ["tests/test_build.py", "tests/test_smoke.py", "tests/test_tls.py", "tests/http", "tests/http2",
          "tests/websocket"]
# The vendored h2spec needs Go and the suite's own 3.11 run covers it; its build is no Python's.
DESELECT = ["tests/http2/test_h2spec.py"]


def packages():
    """The requirements the other Pythons' venvs install, as pyproject.toml gives them."""
    import tomllib  # (the suite's own Python is 3.11+: README's test command)

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    wanted = list(project["build-system"]["requires"]) + list(project["project"]["dependencies"])
    for requirement in project["project"]["optional-dependencies"]["test"]:
        name = re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0].lower()
        if name in TEST_EXTRAS:
            wanted.append(requirement)
    return wanted


def _version(python):
    """(major, minor, micro) of a Python with the GIL (a free-threaded build is another target), or None."""
    probe = "import sys, sysconfig; print('%d.%d.%d' % sys.version_info[:3], sysconfig.get_config_var('Py_GIL_DISABLED') or 0)"
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = out.stdout.split()
    if out.returncode != 0 or len(words) != 2 or words[1] not in ("0", "None"):
        return None
    return tuple(int(part) for part in words[0].split("."))


def other_pythons():
    """{(3, minor): (micro, path)} for the newest patch of each Python 3.10+ on PATH or in pyenv, but
    this one's minor version."""
    candidates = [shutil.which("python3.%d" % minor) for minor in range(10, 20)]
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3"))
    found = {}
    for python in filter(None, candidates):
        version = _version(python)
        if version is None or version[:2] < (3, 10) or version[:2] == sys.version_info[:2]:
            continue
        if version[:2] not in found or version[2] > found[version[:2]][0]:
            found[version[:2]] = (version[2], python)
    return found


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


# The steps' own limits below add up to less than this: a step that hangs is named by its own.
@pytest.mark.timeout(1900)
@pytest.mark.parametrize("end", ["oldest", "newest"])
def test_the_version_sensitive_tests_pass_compiled(end, tmp_path, request):
    named = [arg for arg in request.config.invocation_params.args if "test_other_pythons" in str(arg)]
    if not named:
        pytest.skip("run on its own, as README's test command's last step: python -m pytest "
                    "tests/test_other_pythons.py")
    if _accel.pure_python_requested():
        pytest.skip("the other Pythons run the compiled build only (issue 42): the pure pass leaves them out")
    found = other_pythons()
    if not found:
        pytest.skip("no other Python 3.10+ here (pyenv install 3.10 3.13, or python3.10 on PATH): "
                    "only this one is tested")
    version = min(found) if end == "oldest" else max(found)
    if end == "newest" and version == min(found):
        pytest.skip("one other Python here (%d.%d): the oldest's test covers it" % version)
    python = found[version][1]
    tree = tmp_path / "checkout"
    _copy_checkout(str(tree))
    venv = tmp_path / "venv"
    _run([python, "-m", "venv", str(venv)], str(tmp_path), 120, "python%d.%d -m venv" % version)
    bin_python = str(venv / "bin" / "python")
    _run([bin_python, "-m", "pip", "install", "-q", "--disable-pip-version-check"] + packages(), str(tree), 400,
         "pip install of the subset's packages on %d.%d" % version)
    _run([bin_python, "setup.py", "-q", "build_ext", "--inplace"], str(tree), 400, "the build on %d.%d" % version)
    said = _run([bin_python, "-m", "greenserve", "--version"], str(tree), 60, "greenserve --version")
    assert "compiled hot path" in said and "Python %d.%d" % version in said, said
    argv = [bin_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2"] + SUBSET
    argv += ["--deselect=%s" % path for path in DESELECT]
    out = _run(argv, str(tree), 900, "the version-sensitive tests on %d.%d" % version)
    summary = out.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary) and "failed" not in summary and "error" not in summary, summary

"""The two builds of the hot path: compiled (Cython, pure-Python mode) and plain Python.

README's test command runs the suite twice, once as built and once with GREENSERVE_PURE_PYTHON=1;
these tests make sure each run tests what it says it tests.
"""

import ast
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import pytest

from greenserve import _accel

from tests.conftest import ROOT, subprocess_env

HOT_PATH = _accel.COMPILED_MODULES


def _compiler_available():
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None


def _headers_available():
    return os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h"))


def test_this_run_uses_the_build_it_says():
    kinds = {name: _accel.module_build(name) for name in HOT_PATH}
    if _accel.pure_python_requested():
        assert set(kinds.values()) == {"pure Python"}, kinds
    elif _compiler_available() and _headers_available():
        # `pip install -e .` compiles in place whenever it can (Cython comes with the build
        # requirements, not the test environment); a silent fallback to pure Python here would
        # mean the compiled build went untested.
        assert set(kinds.values()) == {"compiled"}, (
            "expected the compiled hot path (a C compiler and Cython are here); build it in place "
            "with `pip install -e .` -- got %r" % kinds
        )
    else:
        pytest.skip("no C compiler or no Python headers here: only the pure-Python build can run")


def _probe(env_extra, cwd=ROOT, code=None):
    code = code or textwrap.dedent(
        """
        import warnings
        warnings.simplefilter("always")
        import greenserve.connection, greenserve.http.parser, greenserve.wsgi, greenserve.http.framing
        from greenserve import _accel
        print(_accel.build())
        """
    )
    env = subprocess_env()
    env.pop(_accel.PURE_PYTHON_ENV, None)
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env, timeout=60)


def test_pure_python_env_runs_the_py_files_even_where_a_compiled_build_exists():
    result = _probe({_accel.PURE_PYTHON_ENV: "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "pure Python"


@pytest.mark.parametrize("value", ["", "0"])
def test_pure_python_env_empty_or_zero_means_not_requested(value):
    result = _probe({_accel.PURE_PYTHON_ENV: value})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == _probe({}).stdout.strip()


def test_a_compiled_module_older_than_its_source_is_not_used(tmp_path):
    # An edited working tree that was not rebuilt must run the edit, and say so.
    binaries = [
        name for name in os.listdir(os.path.join(ROOT, "greenserve", "http")) if name.startswith("parser.") and name.endswith(".so")
    ]
    if not binaries:
        pytest.skip("no compiled build in the working tree")
    copy = tmp_path / "tree"
    shutil.copytree(os.path.join(ROOT, "greenserve"), copy / "greenserve", ignore=shutil.ignore_patterns("__pycache__"))
    source = copy / "greenserve" / "http" / "parser.py"
    binary = copy / "greenserve" / "http" / binaries[0]
    stat = binary.stat()
    os.utime(source, (stat.st_atime, stat.st_mtime + 10))
    env = {"PYTHONPATH": str(copy)}
    result = _probe(env, cwd=str(copy))
    assert result.returncode == 0, result.stderr
    assert "parser.py is newer than its compiled build" in result.stderr
    assert "rebuild with: pip install -e ." in result.stderr
    # All of it: the compiled modules use the compiled parser's types, so none can stay compiled.
    assert result.stdout.strip() == "pure Python", result.stdout


def test_the_compiled_build_reads_and_writes_plain_sockets_through_their_descriptor():
    # The compiled connection calls recv(2)/send(2) itself (greenserve/connection.py,
    # _sys_recv); a type check that never matched would leave it on the slower socket methods
    # with every test still passing. TLS and stand-in sockets keep the socket's own methods.
    from gevent import socket as gsocket

    import greenserve
    from greenserve.connection import Connection

    server = greenserve.WSGIServer(("127.0.0.1", 0), lambda environ, start_response: [], log=None)
    server.update_environ()
    a, b = gsocket.socketpair()
    try:
        connection = Connection(server, a, ("127.0.0.1", 5555))
        compiled = _accel.module_build("greenserve.connection") == "compiled"
        assert connection.direct_io is compiled
    finally:
        a.close()
        b.close()



def _pxd_fields(path):
    """{class name: [its C fields]} of the cdef classes a .pxd declares."""
    classes = {}
    fields = None
    with open(path) as f:
        for line in f:
            text = line.split("#", 1)[0].rstrip()
            header = re.match(r"cdef\s+(?:final\s+)?class\s+(\w+)", text)
            if header:
                fields = classes[header.group(1)] = []
            elif not text.startswith((" ", "\t")):
                fields = None  # the class's block ended
            elif fields is not None:
                # "cdef [public|readonly] <type of one or more words> name[, name ...]"; a
                # method has parentheses.
                field = re.match(r"\s+cdef\s+(?:public\s+|readonly\s+)?([\w.\s,]+)$", text)
                if field:
                    first, *more = field.group(1).split(",")
                    fields.extend([first.split()[-1]] + [name.strip() for name in more])
    return classes


def _own_slots(path):
    """{class name: its own __slots__} of the classes a .py file defines with them."""
    with open(path) as f:
        tree = ast.parse(f.read())
    slots = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and any(
                    isinstance(target, ast.Name) and target.id == "__slots__" for target in statement.targets
                ):
                    slots[node.name] = list(ast.literal_eval(statement.value))
    return slots


@pytest.mark.parametrize("module", HOT_PATH)
def test_the_pure_builds_slots_are_the_fields_the_pxd_declares(module):
    # A class with __slots__ has no instance dict in the pure build (as a dict, more than 30
    # attributes slow down every one of them: docs/performance.md, issue 31), and the compiled
    # build's struct has only the fields its .pxd declares. The two must name the same
    # attributes, or one build would take an attribute the other refuses.
    source = os.path.join(ROOT, *module.split(".")) + ".py"
    pxd = source[:-3] + ".pxd"
    if not os.path.exists(pxd):
        pytest.skip("%s has no .pxd" % module)
    declared = _pxd_fields(pxd)
    slots = _own_slots(source)
    compared = sorted(set(slots) & set(declared))
    assert compared or not slots
    for name in compared:
        assert sorted(slots[name]) == sorted(declared[name]), name

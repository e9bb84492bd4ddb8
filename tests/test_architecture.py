"""The import layering of docs/architecture.md, read from the source: what imports what.

Every import of greenserve/**/*.py counts, at module level or inside a function: a lazy import is a
dependency all the same, taken the first time its function runs. So do the imports and cimports of
the compiled-only modules (``.pyx``) and of the ``.pxd`` declarations, read line by line: a compiled
module imports at run time the modules it cimports from. Only code under ``if __name__ ==
"__main__":`` is left out: it runs when its file is run as a script (``python -m
greenserve.settings``), never when the module is imported.

The rules, each a test below:

(a) no import cycle among greenserve's modules;
(b) ``http/`` and ``websocket/`` import nothing of ``settings``, ``process/``, ``entry/`` or the
    package face, at any level; and the codec in them, every module but the two gevent-side ones
    (``GEVENT_SIDE``), imports no gevent, greenlet, gevent-websocket or socket module at any
    level, and no gevent-side module at module level: importing it loads no gevent;
(c) the floors (``FLOORS``, lowest first): a module imports only from its own floor or lower ones;
(d) only the face's floor imports the package face, ``greenserve/__init__.py``.
"""

import ast
import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import ROOT, subprocess_env

PACKAGE = "greenserve"

# The floors, lowest first. ``name`` is that module alone; ``name.*`` is the package and every module
# under it; the longest pattern that matches a module places it. Every module must be placed.
FLOORS = [
    # What the build and the version are: imported by the hot modules of every floor.
    ("leaves", ["greenserve._accel", "greenserve._version"]),
    # Sans-I/O: bytes in, events out; no sockets, no gevent (rule b). websocket/exceptions.py imports
    # none of ours: it is here, though on gevent's side (GEVENT_SIDE), with the package that offers it.
    ("codec", [
        "greenserve.http.*", "greenserve.http2.*",
        "greenserve.websocket", "greenserve.websocket.frames", "greenserve.websocket._cframes",
        "greenserve.websocket.deflate", "greenserve.websocket.handshake", "greenserve.websocket.exceptions",
        "greenserve.proxy_protocol", "greenserve.uwsgi_packet",
    ]),
    # One connection on gevent: its greenlet, the WSGI side, the WebSocket on its socket, the logs.
    ("connection", [
        "greenserve.connection", "greenserve.http11", "greenserve.http2_protocol", "greenserve._csys", "greenserve.wsgi",
        "greenserve.admission", "greenserve.uwsgi_protocol", "greenserve.static",
        "greenserve.websocket.websocket", "greenserve.pool", "greenserve.request_hooks", "greenserve.proxy", "greenserve.tls",
        "greenserve.sticky", "greenserve.observe", "greenserve.observe.stats", "greenserve.observe.accesslog",
        "greenserve.observe.errorlog", "greenserve.observe.logconfig",
    ]),
    # Processes and what they own: the master, the workers, the listening sockets, the metrics.
    ("processes", ["greenserve.process.*", "greenserve.listeners", "greenserve.observe.metrics",
                   "greenserve.observe.statsd"]),
    # The table: above every module whose values it checks (listeners, http/grammar, accesslog, proxy,
    # logconfig, statsd, process.hooks, process.reloader), which never import it.
    ("settings", ["greenserve.settings"]),
    # WSGIServer: its keywords are settings, checked by the table's Config.
    ("server", ["greenserve.server"]),
    # The front doors: each makes a checked Config and hands it to a server or the master.
    ("entry", ["greenserve.entry.*"]),
    # The public paths: greenserve/__init__.py, python -m greenserve, the old module names.
    ("face", ["greenserve", "greenserve.__main__", "greenserve.workers", "greenserve.httpserver"]),
]

# The two modules of websocket/ on gevent's side (rule b): the object an application gets, on the
# connection's gevent socket (gevent's Event and Semaphore), and the exceptions, subclasses of
# gevent-websocket's when it is importable (its package imports gevent.pywsgi). Both load at the
# first WebSocket: wsgi imports the first in a function, websocket/__init__.py the second in its
# lazy attributes (PEP 562).
GEVENT_SIDE = ("greenserve.websocket.websocket", "greenserve.websocket.exceptions")
GEVENT = ("gevent", "greenlet", "geventwebsocket")
SOCKETS = ("socket", "_socket", "ssl", "_ssl", "select", "selectors")


class Import:
    """One import: ``source`` imports ``target`` (a greenserve module, or the top-level name of
    another package), in a function or not, at ``where`` (file:line)."""

    __slots__ = ("source", "target", "in_function", "where")

    def __init__(self, source, target, in_function, where):
        self.source = source
        self.target = target
        self.in_function = in_function
        self.where = where

    def __repr__(self):
        return "%s -> %s (%s%s)" % (self.source, self.target, self.where, ", in a function" if self.in_function else "")


def _module_files():
    """{dotted module name: [files]}: each .py and .pyx, and the .pxd beside it."""
    found = {}
    for directory, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(name for name in dirnames if name != "__pycache__" and not name.startswith("."))
        for filename in sorted(filenames):
            stem, extension = os.path.splitext(filename)
            if extension not in (".py", ".pyx", ".pxd"):
                continue
            parts = os.path.relpath(os.path.join(directory, stem), ROOT).split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            found.setdefault(".".join(parts), []).append(os.path.join(directory, filename))
    return found


def _is_main_block(node):
    # if __name__ == "__main__":
    test = getattr(node, "test", None)
    return (
        isinstance(node, ast.If) and isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
        and test.left.id == "__name__" and len(test.comparators) == 1
        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == "__main__"
    )


def _python_imports(path, package):
    """(module, names or None, in a function, line) for each import statement of a .py file."""
    with open(path, encoding="utf-8") as source:
        tree = ast.parse(source.read(), path)

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if _is_main_block(child):
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield alias.name, None, in_function, child.lineno
            elif isinstance(child, ast.ImportFrom):
                module = child.module or ""
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    module = ".".join(base + ([module] if module else []))
                yield module, [alias.name for alias in child.names], in_function, child.lineno
            yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    return list(walk(tree, False))


_CYTHON_FROM = re.compile(r"^(\s*)from\s+([\w.]+)\s+c?import\s+\(?([^#)]*)")
_CYTHON_IMPORT = re.compile(r"^(\s*)c?import\s+([\w., ]+)")


def _cython_imports(path):
    """The same for a .pyx or .pxd file, read line by line (one import a line, as ours are written);
    an indented import is taken as one in a function."""
    found = []
    with open(path, encoding="utf-8") as source:
        for number, line in enumerate(source, 1):
            match = _CYTHON_FROM.match(line)
            if match:
                names = [name.split(" as ")[0].strip() for name in match.group(3).split(",") if name.strip()]
                found.append((match.group(2), names, bool(match.group(1)), number))
                continue
            match = _CYTHON_IMPORT.match(line)
            if match:
                for name in match.group(2).split(","):
                    if name.strip():
                        found.append((name.split(" as ")[0].strip(), None, bool(match.group(1)), number))
    return found


def import_graph():
    """Every import of every greenserve module, as ``Import``s; the target of ``from X import Y`` is
    X.Y when that is a module of ours (``from greenserve import listeners``), else X."""
    files = _module_files()
    imports = []
    for module, paths in sorted(files.items()):
        is_package = any(os.path.basename(path).startswith("__init__.") for path in paths)
        package = module if is_package else module.rpartition(".")[0]
        for path in paths:
            found = _python_imports(path, package) if path.endswith(".py") else _cython_imports(path)
            where = os.path.relpath(path, ROOT)
            for name, names, in_function, line in found:
                top = name.split(".")[0]
                if top != PACKAGE:
                    imports.append(Import(module, top, in_function, "%s:%d" % (where, line)))
                    continue
                targets = [name + "." + each for each in names if name + "." + each in files] if names else []
                if len(targets) < len(names or [None]):
                    targets.append(name)  # the module itself, for a name it defines (or the package face's)
                for target in targets:
                    imports.append(Import(module, target, in_function, "%s:%d" % (where, line)))
    return sorted(files), imports


MODULES, IMPORTS = import_graph()
OURS = [edge for edge in IMPORTS if edge.target.split(".")[0] == PACKAGE and edge.target != edge.source]


# --- the checks, each a function of the graph so that the tests at the end can feed it a bad one --


def find_cycles(edges):
    """Each import cycle (a strongly connected set of modules), as one loop through it with the
    place of each import: [[Import, ...], ...]."""
    graph = {}
    for edge in edges:
        graph.setdefault(edge.source, {}).setdefault(edge.target, edge)
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(node):  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            connect(node)
    loops = []
    for component in components:
        start = min(component)
        # The shortest way from start back to itself inside the component (breadth first).
        previous, frontier, found = {start: None}, [start], None
        while frontier and found is None:
            following = []
            for node in frontier:
                for successor in sorted(graph.get(node, ())):
                    if successor not in component:
                        continue
                    if successor == start:
                        found = node
                        break
                    if successor not in previous:
                        previous[successor] = node
                        following.append(successor)
                if found is not None:
                    break
            frontier = following
        path = [found]
        while previous[path[-1]] is not None:
            path.append(previous[path[-1]])
        path.reverse()
        loops.append([graph[a][b] for a, b in zip(path, path[1:] + [start])])
    return loops


def floor_of(module):
    """The index in FLOORS of the floor ``module`` is on, or None when no pattern places it."""
    best, length = None, -1
    for number, (_, patterns) in enumerate(FLOORS):
        for pattern in patterns:
            if pattern.endswith(".*"):
                base = pattern[:-2]
                matches = module == base or module.startswith(base + ".")
            else:
                matches = module == pattern
            if matches and len(pattern) > length:
                best, length = number, len(pattern)
    return best


def upward_imports(edges):
    """The imports from a floor to a higher one."""
    return [edge for edge in edges if floor_of(edge.target) > floor_of(edge.source)]


def codec_violations(edges):
    """What rule (b) forbids: http/, http2/ and websocket/ importing settings, process/, entry/ or the face;
    the codec importing gevent's side or a socket module (any level), or a gevent-side module of
    ours at module level."""
    found = []
    for edge in edges:
        if not _in(edge.source, ("greenserve.http", "greenserve.http2", "greenserve.websocket")):
            continue
        if edge.target == PACKAGE or _in(edge.target, ("greenserve.settings", "greenserve.process", "greenserve.entry")):
            found.append(edge)
        elif edge.source in GEVENT_SIDE:
            continue
        elif edge.target in GEVENT + SOCKETS or (edge.target in GEVENT_SIDE and not edge.in_function):
            found.append(edge)
    return found


def face_imports(edges):
    """Imports of the package face (greenserve/__init__.py) from below the face's floor."""
    face = len(FLOORS) - 1
    return [edge for edge in edges if edge.target == PACKAGE and floor_of(edge.source) != face]


def _in(module, packages):
    return any(module == package or module.startswith(package + ".") for package in packages)


def _listed(edges):
    return "\n  ".join(repr(edge) for edge in edges)


# --- the rules ----------------------------------------------------------------------------------


def test_the_graph_is_read_whole():
    # The reader sees what it should: lazy imports, the .pyx's and the .pxd's, submodules by name.
    seen = {(edge.source, edge.target, edge.in_function) for edge in IMPORTS}
    assert ("greenserve.wsgi", "greenserve.websocket.websocket", True) in seen  # in a function
    assert ("greenserve._csys", "greenserve.http.errors", False) in seen  # a .pyx
    assert ("greenserve.http11", "greenserve.observe.stats", False) in seen  # a .pxd's cimport
    assert ("greenserve.server", "greenserve.observe.accesslog", False) in seen  # from greenserve.observe import accesslog
    assert ("greenserve.websocket.websocket", "gevent", False) in seen
    assert {"greenserve", "greenserve.http.parser", "greenserve._csys", "greenserve.entry.cli"} <= set(MODULES)
    # Nothing names a module of ours that does not exist (an edge the rules below would misplace).
    assert [edge for edge in OURS if edge.target not in MODULES] == []


def test_a_no_import_cycles():
    loops = find_cycles(OURS)
    assert loops == [], "import cycles:\n" + "\n".join(
        "  " + " -> ".join([loop[0].source] + [edge.target for edge in loop]) + "\n    " + _listed(loop) for loop in loops
    )


def test_b_http_http2_and_websocket_import_neither_settings_process_entry_nor_gevent():
    found = codec_violations(IMPORTS)
    assert found == [], "http/, http2/ or websocket/ reaches out of the codec:\n  " + _listed(found)


def test_b_importing_the_codec_loads_nothing_above_it():
    # The same rule, as the interpreter sees it (in this build): whatever the codec imports,
    # directly or not, is on its floor or below, and nothing of gevent is loaded.
    from greenserve._accel import C_MODULES  # (compiled-only: the pure build has none)

    codec = [module for module in MODULES if floor_of(module) == 1 and module not in GEVENT_SIDE + C_MODULES]
    script = "import json, sys\n%s\nprint(json.dumps(sorted(sys.modules)))" % "\n".join("import " + m for m in codec)
    out = subprocess.run([sys.executable, "-c", script], env=subprocess_env(), capture_output=True, text=True,
                         timeout=60, check=True)
    loaded = json.loads(out.stdout)
    above = [name for name in loaded if name.split(".")[0] == PACKAGE and name != PACKAGE and floor_of(name) > 1]
    assert above == []
    assert [name for name in loaded if name.split(".")[0] in GEVENT] == []


def test_c_no_import_from_a_lower_floor_to_a_higher_one():
    unplaced = [module for module in MODULES if floor_of(module) is None]
    assert unplaced == [], "modules on no floor (add each to FLOORS): %s" % ", ".join(unplaced)
    found = upward_imports(OURS)
    assert found == [], "imports up the floors (%s, lowest first):\n  %s" % (
        " < ".join(name for name, _ in FLOORS), _listed(found)
    )


def test_the_connection_imports_no_protocol():
    # The protocol seam (docs/architecture.md): a protocol imports the connection, never the
    # reverse; the server names the protocol it chooses. A second protocol plugs in beside http11.
    # (The connection may use what every protocol shares: http.errors, the Joiner.)
    found = [edge for edge in OURS if edge.source == "greenserve.connection"
             and _in(edge.target, ("greenserve.http11", "greenserve.http2", "greenserve.http.parser"))]
    assert found == [], "connection.py reaches into a protocol:\n  " + _listed(found)


def test_d_the_core_never_imports_the_package_face():
    found = face_imports(OURS)
    assert found == [], "the package face, imported from below it:\n  " + _listed(found)


def test_process_imports_nothing_of_http():
    # docs/architecture.md: process/ is processes, nothing of HTTP (the master's /metrics is
    # metrics.py's, which process/master.py imports with --metrics-bind only).
    http = ("greenserve.http", "greenserve.wsgi", "greenserve.connection", "greenserve.server",
            "greenserve.websocket", "greenserve.proxy", "greenserve.proxy_protocol", "greenserve.tls")
    found = [edge for edge in OURS if _in(edge.source, ("greenserve.process",)) and _in(edge.target, http)]
    assert found == [], _listed(found)


# --- each check fails on a graph that breaks its rule -------------------------------------------


def _edge(source, target, in_function=False):
    return Import(source, target, in_function, "planted")


def test_each_check_finds_what_it_forbids():
    # Two imports this layering removed: statsd took split_host_port from settings (which imports
    # statsd's checks), http/head.py the limits' defaults from the table.
    planted = [_edge("greenserve.observe.statsd", "greenserve.settings"), _edge("greenserve.http.head", "greenserve.settings")]
    back = _edge("greenserve.settings", "greenserve.observe.statsd", True)  # settings checks statsd_prefix with statsd's rule
    assert [[(edge.source, edge.target) for edge in loop] for loop in find_cycles([back] + planted)] == [
        [("greenserve.observe.statsd", "greenserve.settings"), ("greenserve.settings", "greenserve.observe.statsd")]
    ]
    assert [len(loop) for loop in find_cycles([_edge("a", "b"), _edge("b", "c", True), _edge("c", "a"), _edge("c", "d")])] == [3]
    assert upward_imports(planted) == planted
    assert codec_violations(planted) == planted[1:]
    assert codec_violations([_edge("greenserve.http.parser", "gevent", True)]) != []
    assert codec_violations([_edge("greenserve.websocket.frames", "socket")]) != []
    assert codec_violations([_edge("greenserve.websocket.handshake", "greenserve.websocket.websocket")]) != []
    assert codec_violations([_edge("greenserve.websocket.websocket", "gevent")]) == []  # the adapter's
    assert face_imports([_edge("greenserve.wsgi", "greenserve", True)]) != []
    assert face_imports([_edge("greenserve.workers", "greenserve")]) == []
    assert floor_of("greenserve.newmodule") is None


@pytest.mark.parametrize("text, expected", [
    ("from greenserve.http import errors, head\n", [("greenserve.http", ["errors", "head"], False, 1)]),
    ("    from greenserve._csys cimport SysCalls as _C\n", [("greenserve._csys", ["SysCalls"], True, 1)]),
    ("cimport cython\n", [("cython", None, False, 1)]),
])
def test_cython_imports_are_read(tmp_path, text, expected):
    path = tmp_path / "module.pyx"
    path.write_text(text)
    assert _cython_imports(str(path)) == expected


# The socket calls (rule e): who reads and writes a socket. docs/architecture.md says connection.py
# is the only module that touches an accepted socket; the others that call these own a socket of
# their own, named here with it. _csys.pyx (the C calls connection.py makes) is not Python: not read.
SOCKET_CALLS = {"recv", "recv_into", "recvfrom", "recvmsg", "send", "sendall", "sendto", "sendmsg", "sendfile"}
OWN_SOCKETS = {
    "greenserve/connection.py": "every accepted connection's socket, the WebSocket's reads included",
    "greenserve/observe/metrics.py": "the master's /metrics listener and its scrapers' sockets",
    "greenserve/observe/statsd.py": "the statsd client's UDP or unix datagram socket",
    "greenserve/listeners.py": "the sock_diag netlink socket that reads a unix listener's queue",
    "greenserve/process/worker.py": "the heartbeat pipe to the master",
    "greenserve/process/systemd.py": "systemd's NOTIFY_SOCKET",
    "greenserve/process/control.py": "the master's control socket (gunicornc) and its clients' sockets",
    "greenserve/sticky.py": "the worker's hand-over sockets (--sticky): accepted connections' descriptors "
                            "pass through them, never a byte of the connections",
}


def socket_callers(root):
    """{module path: [line, ...]} of the calls named in SOCKET_CALLS (docstrings are not calls)."""
    found = {}
    for directory, _, names in os.walk(os.path.join(root, PACKAGE)):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            with open(path, encoding="utf-8") as source:
                tree = ast.parse(source.read(), path)
            lines = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and isinstance(node.func, ast.Attribute) and node.func.attr in SOCKET_CALLS]
            if lines:
                found[os.path.relpath(path, root).replace(os.sep, "/")] = sorted(lines)
    return found


def test_e_only_the_connection_touches_an_accepted_socket():
    callers = socket_callers(ROOT)
    strays = {path: lines for path, lines in callers.items() if path not in OWN_SOCKETS}
    assert strays == {}, "socket calls outside connection.py (route them through the Connection, or "\
        "name the module's own socket in OWN_SOCKETS): %s" % strays
    assert "greenserve/connection.py" in callers  # the reader sees calls at all


def test_e_finds_a_stray_socket_call(tmp_path):
    (tmp_path / PACKAGE / "http").mkdir(parents=True)
    (tmp_path / PACKAGE / "http" / "stray.py").write_text('"""sock.recv(1) in a docstring is no call."""\n'
                                                         "def f(sock):\n    return sock.recv_into(b)\n")
    assert socket_callers(str(tmp_path)) == {"greenserve/http/stray.py": [3]}

"""Choose, per hot-path module, between its Cython-compiled build and its plain-Python source.

The hot path (``http/head.py``, ``http/parser.py``, ``http/framing.py``, ``wsgi.py``,
``observe/stats.py``, ``pool.py``, ``connection.py``, ``http11.py``, for WebSockets
``websocket/frames.py``, and for HTTP/2 ``http2/huffman.py``, ``http2/hpack.py``,
``http2/frames.py``, ``http2/events.py``, ``http2/validation.py``, ``http2/connection.py``,
``http2_protocol.py``, and for ``--static`` ``static.py``) is written in
Cython's pure-Python mode: each ``.py`` has a ``.pxd`` beside it declaring types, and
``setup.py`` compiles the pair into an extension module of the same name when Cython and a C
compiler are there at install time (``observe/accesslog.py`` is compiled too, as it is, without a
``.pxd``: it runs once per request when access logging is on). One source, two builds, the same
behaviour.

What only C can do (a loop over a pointer, a syscall on a descriptor, a clock without a float)
lives in modules of its own, written in Cython proper (``C_MODULES``: ``http/_chttp.pyx``,
``_csys.pyx``, ``websocket/_cframes.pyx``), each with a pure-Python twin or fallback. The pure
build never imports them. A hot module picks its helpers once, at import, by the one build
flag: ``compiled()``.

Python's own import system would always prefer the extension module when it exists. This finder,
installed by ``greenserve/__init__.py`` at the front of ``sys.meta_path``, takes that decision
for these modules only:

- ``GREENSERVE_PURE_PYTHON=1`` (any value but ``""``/``0``) in the environment: the ``.py``
  source, even where a compiled build exists (CI runs the test suite both ways);
- in a working tree built in place, a compiled build older than its ``.py`` (an edit not yet
  rebuilt): the source, with one warning, so that an edit is never silently ignored;
- otherwise the compiled build when there is one.

``build()`` reports what runs ("compiled" or "pure Python"), ``location()`` from where and
``why_pure()`` why not compiled, for ``greenserve --version``.
"""

import os
import sys
import warnings
from importlib.machinery import EXTENSION_SUFFIXES, ExtensionFileLoader, ModuleSpec, SourceFileLoader

# The modules compiled by setup.py, in dependency order. One source of truth: setup.py reads it.
COMPILED_MODULES = (
    "greenserve.http.head",
    "greenserve.http.parser",
    "greenserve.http.framing",
    "greenserve.observe.stats",
    "greenserve.admission",
    "greenserve.static",  # (before wsgi, which cimports it)
    "greenserve.wsgi",
    "greenserve.pool",
    "greenserve.connection",
    "greenserve.http11",
    "greenserve.observe.accesslog",  # no .pxd: plain Python compiled as it is
    "greenserve.websocket.frames",
    # HTTP/2's codec (docs/http2.md): HPACK's Huffman code, HPACK, the frame layer, the connection.
    "greenserve.http2.huffman",
    "greenserve.http2.hpack",
    "greenserve.http2.frames",
    "greenserve.http2.events",
    "greenserve.http2.validation",
    "greenserve.http2.connection",
    "greenserve.http2_protocol",
)

# Compiled-only modules (Cython proper, from a .pyx): part of the compiled build, never of the
# pure one. setup.py compiles them before COMPILED_MODULES, which cimport them.
C_MODULES = (
    "greenserve.http._chttp",
    "greenserve._csys",
    "greenserve.websocket._cframes",
)

PURE_PYTHON_ENV = "GREENSERVE_PURE_PYTHON"


def pure_python_requested():
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


class _Finder:
    """A meta path finder for COMPILED_MODULES only; every other import passes through.

    The choice is made once for the whole hot path, not per module: the compiled modules use
    each other's types directly (``http11`` cimports ``parser``'s), so a compiled module
    cannot run beside the pure-Python version of another.
    """

    def __init__(self):
        self.pure = pure_python_requested()
        self.stale = []
        self.decided = False

    def _decide(self):
        """Look at every hot-path module's files once; keep the compiled build only if all are fresh."""
        self.decided = True
        if self.pure:
            return
        root = os.path.dirname(os.path.abspath(__file__))  # the greenserve package
        for name in C_MODULES + COMPILED_MODULES:
            base = os.path.join(root, *name.split(".")[1:])
            binary = next((base + s for s in EXTENSION_SUFFIXES if os.path.exists(base + s)), None)
            if binary is None:
                self.pure = True  # no compiled build (or only part of one)
                return
            # Only an in-place build (a working tree: Cython's .c output lies beside the source)
            # can go stale under an edit. An installed copy's files all get new mtimes, in any
            # order, when pip unpacks the wheel, so their mtimes say nothing.
            source = base + (".pyx" if name in C_MODULES else ".py")
            if os.path.exists(base + ".c") and os.path.getmtime(binary) < os.path.getmtime(source):
                self.stale.append(source)
        if self.stale:
            self.pure = True
            warnings.warn(
                "greenserve: %s is newer than its compiled build; running the hot path as pure "
                "Python (rebuild with: pip install -e .)" % ", ".join(self.stale),
                RuntimeWarning,
                stacklevel=3,
            )

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in COMPILED_MODULES or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for directory in path:
            source = os.path.join(directory, leaf + ".py")
            if not os.path.exists(source):
                continue
            if not self.decided:
                self._decide()
            if not self.pure:
                for suffix in EXTENSION_SUFFIXES:
                    binary = os.path.join(directory, leaf + suffix)
                    if os.path.exists(binary):
                        return _spec(fullname, binary, ExtensionFileLoader(fullname, binary))
            return _spec(fullname, source, SourceFileLoader(fullname, source))
        return None


def _spec(fullname, path, loader):
    """What ``importlib.util.spec_from_file_location`` makes for a module (not a package) file;
    importlib.util itself is not imported, since every master would hold it (~0.1 MB)."""
    spec = ModuleSpec(fullname, loader, origin=path)
    spec.has_location = True  # __file__ (and __cached__ for a source) from origin
    return spec


_finder = None


def compiled():
    """The one build flag: True when the hot path runs compiled (decided once per process).

    Hot modules read it at import to pick their helpers (``_chttp`` or ``_pyhttp``, ...). It is
    the finder's decision, so it is the same for every module, and the same as the build that
    is being imported.
    """
    if _finder is None:
        return False
    if not _finder.decided:
        _finder._decide()
    return not _finder.pure


def install():
    global _finder
    if _finder is None:
        _finder = _Finder()
        sys.meta_path.insert(0, _finder)


def module_build(name):
    """'compiled' or 'pure Python' for one hot-path module (importing it if need be)."""
    __import__(name)
    module = sys.modules[name]
    filename = getattr(module, "__file__", "") or ""
    return "pure Python" if filename.endswith(".py") else "compiled"


def build():
    """'compiled', 'pure Python', or 'mixed (...)' for the hot path as it runs in this process."""
    kinds = {name: module_build(name) for name in COMPILED_MODULES}
    values = set(kinds.values())
    if len(values) == 1:
        return values.pop()
    compiled = [name for name, kind in kinds.items() if kind == "compiled"]
    return "mixed (compiled: %s)" % ", ".join(compiled)


def location():
    """The directory of the greenserve package this process imports (its hot path's .py files)."""
    return os.path.dirname(os.path.abspath(__file__))


def _compiled_elsewhere(root):
    """Another greenserve package on sys.path, with a compiled hot path, that ``root`` hides: or None."""
    leaf = os.path.join("greenserve", "http11")
    for entry in sys.path:
        package = os.path.join(os.path.abspath(entry or os.curdir), "greenserve")
        if os.path.realpath(package) != os.path.realpath(root) and any(
                os.path.exists(os.path.join(os.path.abspath(entry or os.curdir), leaf + suffix))
                for suffix in EXTENSION_SUFFIXES):
            return package
    return None


def why_pure():
    """Why the hot path runs as pure Python, with the fix, in one clause; '' when it runs compiled.

    The case that misleads most: ``python -m greenserve`` run in a source checkout imports the
    checkout (the current directory comes first on sys.path), not the build ``pip install .``
    compiled into site-packages."""
    if pure_python_requested():
        return "%s is set" % PURE_PYTHON_ENV
    if _finder is None or not _finder.pure:
        return ""
    if _finder.stale:
        return ("%s %s newer than the compiled build beside it (an edit not rebuilt: python setup.py"
                " build_ext --inplace, or pip install -e .)"
                % (", ".join(_finder.stale), "is" if len(_finder.stale) == 1 else "are"))
    root = location()
    if os.path.exists(os.path.join(os.path.dirname(root), "setup.py")):
        other = _compiled_elsewhere(root)
        if other is not None:
            return ("this source checkout is not built, and Python imports it before the compiled"
                    " build at %s (the current directory comes first on sys.path): run from another"
                    " directory, or build the checkout with pip install -e ." % other)
        return "this source checkout is not built: pip install -e . compiles it in place"
    return ("no compiled modules beside its .py files (Cython or a C compiler was missing at install"
            " time: install gcc and the Python headers, then reinstall)")


__all__ = ["COMPILED_MODULES", "C_MODULES", "PURE_PYTHON_ENV", "build", "compiled", "install", "location",
           "why_pure"]

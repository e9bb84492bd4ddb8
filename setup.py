"""Build hook: compile the hot path with Cython when it can be done; never fail the install over it.

Everything else about the package is in pyproject.toml. The modules compiled are listed once, in
greenserve/_accel.py (C_MODULES, COMPILED_MODULES), which also picks compiled or pure Python at
import time. Each of COMPILED_MODULES is a plain ``.py`` with a ``.pxd`` beside it (Cython's
pure-Python mode, as gevent does); C_MODULES are the compiled build's C-only helpers, ``.pyx``
files the pure build never imports. With no Cython, no C compiler, or GREENSERVE_PURE_PYTHON=1 at
install time, the same ``.py`` files are installed and run as they are.
"""

import os
import sys
from importlib.util import module_from_spec, spec_from_file_location

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))


def _accel():
    spec = spec_from_file_location("_greenserve_accel", os.path.join(HERE, "greenserve", "_accel.py"))
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _say(message):
    sys.stderr.write("greenserve setup: %s\n" % message)


def _jobs():
    """Processes for the build: one per core (a 2-core machine translates and compiles the 20-odd
    modules in about half the time of one)."""
    return os.cpu_count() or 1


def extensions():
    accel = _accel()
    if accel.pure_python_requested():
        _say("%s is set: installing the pure-Python build" % accel.PURE_PYTHON_ENV)
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _say("Cython is not installed: installing the pure-Python build")
        return []
    modules = [Extension(name, [os.path.join(*name.split(".")) + ".pyx"]) for name in accel.C_MODULES]
    modules += [Extension(name, [os.path.join(*name.split(".")) + ".py"]) for name in accel.COMPILED_MODULES]
    # (pip shows this with -v; README says how long the build takes.)
    _say("compiling the hot path: %d modules with Cython and the C compiler, %d at a time; a module "
         "that cannot be compiled stays pure Python" % (len(modules), _jobs()))
    try:
        return cythonize(
            modules,
            compiler_directives={
                "language_level": "3",
                # Keep Python semantics where the pure-Python build defines them: tracebacks
                # with line numbers, introspectable functions.
                "binding": True,
            },
            quiet=True,
            # Cython's translation of each module is independent: one process per core.
            nthreads=_jobs(),
        )
    except Exception as exc:  # Cython.Compiler.Errors.CompileError, or an old Cython
        _say("Cython could not translate the hot path (%s): installing the pure-Python build" % exc)
        return []


# -O2 where CPython's flags say -O3: the C files Cython writes are calls into CPython's C API,
# which -O3's vectorizing and wider inlining do not speed up, and they compile in about 25 % less
# time (measured: the 21 modules in 44 s instead of 59 s on two cores; hello at the same speed).
# A CFLAGS of the user's own is left as it is.
_OPTIMIZE = {} if os.environ.get("CFLAGS") else {"-O3": "-O2"}


class OptionalBuildExt(build_ext):
    """A failed compilation (no C compiler, no Python headers) leaves that module pure Python.

    The C compiler runs one process per core (``--parallel``, which pip's build does not pass)
    and without ``-g``: CPython's CFLAGS ask for debug information, which makes the compiled
    modules several times larger (the wheel and the install) and their compilation slower, and
    which nobody who installs a server reads; and at -O2 (``_OPTIMIZE``). GREENSERVE_DEBUG_BUILD=1
    keeps CPython's flags as they are."""

    def finalize_options(self):
        super().finalize_options()
        if self.parallel is None:
            self.parallel = _jobs()

    def build_extensions(self):
        if not os.environ.get("GREENSERVE_DEBUG_BUILD"):
            for attribute in ("compiler_so", "compiler", "compiler_cxx"):
                command = getattr(self.compiler, attribute, None)
                if isinstance(command, list):
                    setattr(self.compiler, attribute, [_OPTIMIZE.get(arg, arg) for arg in command if arg != "-g"])
        # The largest first (the C files Cython wrote, 0.2 to 2.5 MB): the last to start is then
        # a short one, and no core waits while the other compiles a long one alone.
        self.extensions.sort(key=lambda ext: -sum(os.path.getsize(s) for s in ext.sources if os.path.exists(s)))
        super().build_extensions()

    def run(self):
        try:
            super().run()
        except Exception as exc:  # distutils raises its own error types; none may fail the install
            _say("could not compile the hot path (%s): installing the pure-Python build" % exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            _say("could not compile %s (%s): it will run as pure Python" % (ext.name, exc))


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})

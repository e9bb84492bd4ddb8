"""Process titles: `greenserve: master [NAME]` and `greenserve: worker [NAME]`, as ps, top and /proc/PID/cmdline show them (--name), through setproctitle when it is installed.

gunicorn titles its processes `gunicorn: master [NAME]` and `gunicorn: worker [NAME]`, and
tools find them by it (Datadog's gunicorn check looks for the master's title; operators grep ps
for the master to signal). greenserve's are the same but for the first word.

Rewriting the title means writing over the memory the kernel shows as the command line (argv
and the environment after it), which Python cannot do by itself: setproctitle's C module does
it, as in gunicorn. It is an optional dependency (``pip install setproctitle``; from a checkout, ``pip install -e '.[proctitle]'``);
without it the processes keep their command line, silently unless --name asked for a title.
"""

import sys

PREFIX = "greenserve"

# setproctitle's setproctitle(), once looked for; False when it is not to be had.
_setter = None


def set_title(role, name):
    """Title this process ``greenserve: ROLE [NAME]``; False when setproctitle is not installed."""
    setter = _find_setter()
    if not setter:
        return False
    setter("%s: %s [%s]" % (PREFIX, role, name))
    return True


def _find_setter():
    global _setter
    if _setter is None:
        _setter = _load_setter() or False
    return _setter


def _load_setter():
    """setproctitle's C function, loaded without running the package's ``__init__``.

    That ``__init__`` imports ``logging`` (for a debug line when the C module is missing): the
    master's RSS grew by ~0.8 MB with it, against ~40 KiB for the C module alone (measured,
    median of five starts; tests/process/test_master_memory.py keeps ``logging`` out of the
    master). The C module is registered under its own name, so an application that imports
    setproctitle later gets this same module under the package.
    """
    loaded = sys.modules.get("setproctitle._setproctitle")
    if loaded is not None:
        return loaded.setproctitle
    from importlib.machinery import PathFinder  # (already imported by greenserve._accel)

    try:
        package = PathFinder.find_spec("setproctitle")
        if package is None or not package.submodule_search_locations:
            return None
        spec = PathFinder.find_spec("setproctitle._setproctitle", package.submodule_search_locations)
        if spec is None:
            return None  # a setproctitle without its C module (a failed build) sets no title either
        module = spec.loader.create_module(spec)
        spec.loader.exec_module(module)
    except (ImportError, OSError):  # a C module built for another Python, an unreadable directory
        return None
    module.__spec__, module.__loader__ = spec, spec.loader
    sys.modules[spec.name] = module
    return module.setproctitle

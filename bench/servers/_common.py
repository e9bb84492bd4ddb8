"""Shared by the launchers: the port argument and the import path of the repository.

Each launcher is started by bench/run.py as ``taskset -c 0 python bench/servers/NAME.py PORT``
and serves ``bench.apps.app`` on 127.0.0.1:PORT in a single process until it is signalled, or
the app that ``BENCH_APP`` (``module:name``) names: bench/run.py sets it for the framework
scenarios (``bench.frameworks:flask_app``, ``bench.frameworks:django_app``).
"""

import importlib
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # the working tree's greenserve and bench.apps, not an installed copy


def port():
    if len(sys.argv) < 2:
        sys.exit("usage: %s PORT" % sys.argv[0])
    return int(sys.argv[1])


def app_spec():
    """``module:name`` of the WSGI app to serve: ``BENCH_APP``, else bench.apps:app."""
    return os.environ.get("BENCH_APP") or "bench.apps:app"


def app():
    """The WSGI app that app_spec() names, imported, for the launchers that serve it in-process."""
    module, _, name = app_spec().partition(":")
    return getattr(importlib.import_module(module), name or "app")

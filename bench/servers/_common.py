"""Shared by the launchers: the port argument and the import path of the repository.

Each launcher is started by bench/run.py as ``taskset -c 0 python bench/servers/NAME.py PORT``
and serves ``bench.apps.app`` on 127.0.0.1:PORT in a single process until it is signalled.
"""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)  # the working tree's greenserve and bench.apps, not an installed copy


def port():
    if len(sys.argv) < 2:
        sys.exit("usage: %s PORT" % sys.argv[0])
    return int(sys.argv[1])

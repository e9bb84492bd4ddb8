"""waitress, one process with 4 threads: python bench/servers/waitress_server.py PORT

The same as ``waitress-serve --host=127.0.0.1 --port=PORT --threads=4 bench.apps:app``; every
other setting (connection_limit=100, backlog=1024, ...) is waitress's default.
"""

import logging

from _common import app, port

import waitress

if __name__ == "__main__":
    # Waitress logs "Task queue depth is N" at WARNING whenever its 4 threads are busy: under a
    # benchmark that is every few milliseconds, so only errors are kept.
    logging.basicConfig(level=logging.ERROR)
    waitress.serve(app(), host="127.0.0.1", port=port(), threads=4)

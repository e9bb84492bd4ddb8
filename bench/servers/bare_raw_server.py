"""bench/bare_gevent.py's raw loop: python bench/servers/bare_raw_server.py PORT [hello|page]

The canned-bytes loop over the non-blocking socket and its read watcher, as greenserve's
connection talks to it: the cost of gevent's event loop and greenlet switches alone.
"""

import sys

from _common import port

from gevent.server import StreamServer
from bench import bare_gevent

if __name__ == "__main__":
    bare_gevent.RESPONSE = bare_gevent.RESPONSES[sys.argv[2] if len(sys.argv) > 2 else "hello"]
    StreamServer(("127.0.0.1", port()), bare_gevent.handle_raw, backlog=2048).serve_forever()

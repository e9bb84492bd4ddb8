"""The bare gevent StreamServer loop of bench/bare_gevent.py: python bench/servers/bare_server.py PORT [hello|page]

It answers every request head with one canned response, whatever the path: the hello response,
or the ~4.5 KB page when the second argument says so.
"""

import sys

from _common import port

from gevent.server import StreamServer
from bench import bare_gevent

if __name__ == "__main__":
    bare_gevent.RESPONSE = bare_gevent.RESPONSES[sys.argv[2] if len(sys.argv) > 2 else "hello"]
    StreamServer(("127.0.0.1", port()), bare_gevent.handle, backlog=2048).serve_forever()

"""The bare gevent StreamServer loop of bench/bare_gevent.py: python bench/servers/bare_server.py PORT

It answers every request head with the canned hello response, whatever the path.
"""

from _common import port

from gevent.server import StreamServer
from bench.bare_gevent import handle

if __name__ == "__main__":
    StreamServer(("127.0.0.1", port()), handle, backlog=2048).serve_forever()

"""greenserve's WSGIServer, one process: python bench/servers/greenserve_server.py PORT"""

from _common import port

import greenserve
from bench.apps import app

if __name__ == "__main__":
    greenserve.WSGIServer(("127.0.0.1", port()), app, log=None, backlog=2048, spawn=10000).serve_forever()

"""paste's threaded httpserver: python bench/servers/paste_server.py PORT

Paste's defaults are kept (protocol_version HTTP/1.0, so every response closes its connection;
request_queue_size=5, the listen backlog).
"""

from _common import app, port

import paste.httpserver

if __name__ == "__main__":
    paste.httpserver.serve(app(), host="127.0.0.1", port=port(), use_threadpool=True, threadpool_workers=10)

"""gevent.pywsgi as shipped, one process: python bench/servers/pywsgi_server.py PORT"""

from _common import app, port

import gevent.pywsgi

if __name__ == "__main__":
    gevent.pywsgi.WSGIServer(("127.0.0.1", port()), app(), log=None, backlog=2048).serve_forever()

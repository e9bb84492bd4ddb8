"""The WebSocket echo servers of bench/wsbench.py: python bench/servers/ws_server.py PORT NAME

NAME is one of:

- ``greenserve``: ``python -m greenserve --workers 1 --worker-connections 20000 --backlog 2048
  --graceful-timeout 2 --log-level warning --chdir ROOT --bind 127.0.0.1:PORT
  bench.ws_apps:gevent_websocket_echo`` (greenserve's built-in ``wsgi.websocket``; the CLI
  patches with gevent, as it always does; a master and one worker);
- ``greenserve-simple``: the same command with ``bench.ws_apps:simple_echo`` (simple-websocket);
- ``gunicorn``: ``python -m gunicorn -k gevent -w 1 --worker-connections 20000 --backlog 2048
  --graceful-timeout 2 --log-level warning --chdir ROOT -b 127.0.0.1:PORT
  bench.ws_apps:simple_echo`` (a master and one gevent worker);
- ``pywsgi``: ``gevent.pywsgi.WSGIServer(('127.0.0.1', PORT), bench.ws_apps:gevent_websocket_echo,
  handler_class=geventwebsocket.handler.WebSocketHandler, log=None, backlog=2048)`` in this
  process (no monkey-patching: the handler and the app use gevent's sockets).

Every server first raises its own RLIMIT_NOFILE soft limit to its hard limit (10,000 WebSockets
need 10,000 descriptors). greenserve's CLI and gunicorn do not raise it themselves, so the
launcher raises it and then execs them: the limit survives exec, and their workers inherit it.
The exec keeps the PID, so the PID bench/wsbench.py holds is the master's.
"""

import os
import resource
import sys

from _common import ROOT, port as port_argument

BACKLOG = "2048"
CONNECTIONS = "20000"


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in ("greenserve", "greenserve-simple", "gunicorn", "pywsgi"):
        sys.exit("usage: %s PORT greenserve|greenserve-simple|gunicorn|pywsgi" % sys.argv[0])
    port, name = port_argument(), sys.argv[2]
    raise_nofile()
    bind = "127.0.0.1:%d" % port
    if name in ("greenserve", "greenserve-simple"):
        argv = [
            sys.executable, "-m", "greenserve",
            "--workers", "1",
            "--worker-connections", CONNECTIONS,
            "--backlog", BACKLOG,
            "--graceful-timeout", "2",
            "--log-level", "warning",
            "--chdir", ROOT,
            "--bind", bind,
            "bench.ws_apps:gevent_websocket_echo" if name == "greenserve" else "bench.ws_apps:simple_echo",
        ]
        os.execv(sys.executable, argv)
    if name == "gunicorn":
        argv = [
            sys.executable, "-m", "gunicorn",
            "-k", "gevent",
            "-w", "1",
            "--worker-connections", CONNECTIONS,
            "--backlog", BACKLOG,
            "--graceful-timeout", "2",
            "--log-level", "warning",
            "--chdir", ROOT,
            "-b", bind,
            "bench.ws_apps:simple_echo",
        ]
        os.execv(sys.executable, argv)
    from gevent import pywsgi
    from geventwebsocket.handler import WebSocketHandler

    from bench.ws_apps import gevent_websocket_echo

    server = pywsgi.WSGIServer(
        ("127.0.0.1", port), gevent_websocket_echo, handler_class=WebSocketHandler, log=None, backlog=int(BACKLOG)
    )
    server.serve_forever()


if __name__ == "__main__":
    main()

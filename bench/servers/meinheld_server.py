"""meinheld (C, picoev and greenlet), one process: python bench/servers/meinheld_server.py PORT

``meinheld.server.listen(("127.0.0.1", port)); meinheld.server.run(app)``, with three settings
changed from meinheld's defaults so that it is measured like the other servers:

* ``set_keepalive(10)``: meinheld's default is 0, which answers every request with
  ``Connection: close`` (one connection per request, like paste). 10 is the idle timeout in
  seconds; gunicorn's meinheld worker turns keep-alive on the same way;
* ``set_access_logger(None)``: importing meinheld installs a logger that formats an access-log
  line for every request (greenserve and pywsgi run with ``log=None``);
* ``set_backlog(2048)``: the backlog of the greenserve, pywsgi and gunicorn launchers (meinheld's
  default is 4096).

meinheld 1.0.2 declares ``greenlet<0.5``; it is installed with ``pip install --no-deps meinheld``
so that pip leaves gevent's greenlet alone. It runs each request in a new greenlet through
greenlet's C API, and it built and ran with greenlet 3 on Python 3.11 (hello, pipelining, 1,000
connections, and a 1 MiB response to a slow reader).
"""

from _common import app, port

import meinheld.server

if __name__ == "__main__":
    meinheld.server.set_keepalive(10)
    meinheld.server.set_access_logger(None)
    meinheld.server.set_backlog(2048)
    meinheld.server.listen(("127.0.0.1", port()))
    meinheld.server.run(app())

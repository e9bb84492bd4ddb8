"""bjoern (C, libev), one process: python bench/servers/bjoern_server.py PORT

``bjoern.run(app, "127.0.0.1", port, listen_backlog=2048)``: the listen backlog is the one the
greenserve, pywsgi and gunicorn launchers use (bjoern's default is 1024). bjoern has no other
settings: it keeps connections alive, writes no access log, and runs the app in its one thread.
Building it needs libev's headers (``apt-get install libev-dev``, then ``pip install bjoern``).
"""

from _common import app, port

import bjoern

if __name__ == "__main__":
    bjoern.run(app(), "127.0.0.1", port(), listen_backlog=2048)

"""nginx answering from its configuration, one worker: python bench/servers/nginx_server.py PORT

The reference for what one core can do: no application, no interpreter. ``return 200`` with
the bytes ``bench.apps`` answers for ``/`` (the hello body, the same Content-Type); ``/page``
as a static file of the ~4.5 KB page (nginx takes at most 4 KB in a ``return``), ``worker_processes 1`` (pinned like every server, by the launcher's affinity,
which nginx inherits), ``listen ... backlog=2048`` as the others, no access log, and keep-alive
as long as the others keep it (``keepalive_requests`` unlimited in practice: nginx's default
of 1,000 would close every thousandth connection under wrk, which greenserve and bjoern do not).
Run as root it starts its worker as Debian's ``www-data``, the way users run it.

The launcher writes the configuration in a temporary directory, runs the nginx master in the
foreground (``daemon off``), passes SIGTERM and SIGINT on to it (nginx's fast shutdown), and
removes the directory once it has exited.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile

from _common import port

from bench.apps import HELLO, PAGE
from bench.lib.machine import program
from bench.lib.servers import nginx_conf

LOCATIONS = """\
        location = /page {{ default_type text/html; alias {dir}/page.html; }}
        location / {{ default_type text/plain; return 200 "{hello}"; }}
"""


def quoted(body):
    text = body.decode("ascii")
    assert '"' not in text and "\\" not in text and "$" not in text, "a body nginx would not return as is"
    return text


def main():
    nginx = program("nginx")
    if nginx is None:
        sys.exit("nginx is not installed (apt-get install nginx)")
    directory = tempfile.mkdtemp(prefix="greenserve-bench-nginx-")
    try:
        os.chmod(directory, 0o755)  # the worker (www-data) reads page.html
        with open(os.path.join(directory, "page.html"), "wb") as f:
            f.write(PAGE)
        conf = os.path.join(directory, "nginx.conf")
        with open(conf, "w") as f:
            locations = LOCATIONS.format(dir=directory, hello=quoted(HELLO))
            f.write(nginx_conf(directory, "127.0.0.1", port(), locations))
        proc = subprocess.Popen([nginx, "-c", conf, "-p", directory + "/", "-e", os.path.join(directory, "error.log")])
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda signum, frame: proc.send_signal(signal.SIGTERM))
        status = proc.wait()
        with open(os.path.join(directory, "error.log")) as f:
            sys.stderr.write(f.read())
        return status
    finally:
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

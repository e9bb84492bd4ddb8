"""The benchmark library: everything bench/'s scenario scripts share, so that each script says
only what it measures and how it reports it.

    servers.py  the peers, one row each; starting a server pinned on a fresh port; stopping by PID
    load.py     the load generators: wrk and ab pinned to the client CPU, the parsers of their
                reports, and bench's own clients (idle keep-alive connections, WebSockets)
    machine.py  what /proc says: CPU time, RSS, sockets, kernel settings; the machine and versions
    report.py   medians and paired ratios, number formats, text and Markdown tables, JSON
    cli.py      the shared options (--repeats, --duration, --quick, --servers, --json, ...) and
                the run loop that interleaves the servers and stops them whatever happens
    discard.py  a download client that drops response bodies in the kernel (recv MSG_TRUNC), run as
                a script, for files too large for wrk to keep up with (bench/static.py)

Every script imports it the same way: it puts the working tree first on sys.path (so that the
tree's greenserve and ``bench`` are the ones imported), then ``from bench.lib import ...``.
"""

import os

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(BENCH)
RESULTS = os.path.join(BENCH, "results")
LOGS = os.path.join(RESULTS, "logs")
HOST = "127.0.0.1"  # the only address any load is sent to

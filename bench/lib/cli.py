"""What every scenario script's command line and run loop share.

The options: ``--repeats``/``--duration`` with the smaller defaults of ``--quick``; a
comma-separated choice from a table (``--servers``, ``--scenarios``); ``--markdown``/``--json``;
the pinning (``--server-cpu``, ``--client-cpu``, ``--no-pin``).

The run loop: ``rotations`` gives the order of the servers for each repeat (every server once,
the order rotating by one from one repeat to the next, so that noise lasting a few seconds falls
on different servers), and ``Session`` frames the loop: Ctrl-C or SIGTERM ends the measuring but
not the report, and whatever happens every process started is stopped by PID and its log closed.
"""

import os
import shlex
import signal
import sys
import time

from bench.lib import RESULTS, servers


def add_repeats(parser, repeats, duration, quick=None, duration_type=int, what="server"):
    """--repeats and --duration, and --quick when `quick` gives its (repeats, duration).

    With --quick, the defaults become quick's unless --repeats or --duration is given; call
    ``repeats_chosen`` after parsing.
    """
    later = " (default %s; --quick %s)" if quick else " (default %s)"
    parser.add_argument("--repeats", type=int, default=None,
                        help=("runs of each %s" % what) + later % ((repeats, quick[0]) if quick else (repeats,)))
    parser.add_argument("--duration", type=duration_type, default=None,
                        help="seconds of load per run" + later % ((duration, quick[1]) if quick else (duration,)))
    if quick:
        parser.add_argument("--quick", action="store_true",
                            help="%d repeat(s) of %s s unless --repeats/--duration are given" % quick)
    parser.set_defaults(_repeats=(repeats, duration, quick))


def repeats_chosen(parser, args):
    """Fills in --repeats and --duration (from --quick's or the usual defaults) and checks them."""
    repeats, duration, quick = args._repeats
    if args.repeats is None:
        args.repeats = quick[0] if quick and args.quick else repeats
    if args.duration is None:
        args.duration = quick[1] if quick and args.quick else duration
    if args.repeats < 1 or args.duration <= 0:
        parser.error("--repeats must be at least 1 and --duration above 0")


def add_output(parser, json_name, pin=True):
    """--markdown, --json (default bench/results/JSON_NAME) and, with `pin`, the pinning options."""
    parser.add_argument("--markdown", metavar="FILE", help="also write the Markdown report to FILE")
    parser.add_argument("--json", metavar="FILE", default=os.path.join(RESULTS, json_name),
                        help="raw results (default bench/results/%s)" % json_name)
    if pin:
        parser.add_argument("--server-cpu", type=int, default=0, help="CPU the server is pinned to (default 0)")
        parser.add_argument("--client-cpu", type=int, default=1, help="CPU the load is pinned to (default 1)")
        parser.add_argument("--no-pin", action="store_true", help="do not pin with taskset")


def choose(parser, text, table, what, allowed=None):
    """The rows of `table` ({name: row}) named in comma-separated `text`, in that order; a usage
    error for a name that is not in the table (or not in `allowed`) or for an empty list."""
    allowed = list(table) if allowed is None else allowed
    wanted = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in table or n not in allowed]
    if unknown or not wanted:
        parser.error("unknown %s %s; known: %s" % (what, ", ".join(unknown) or "(none)", ", ".join(allowed)))
    return [table[n] for n in wanted]


def integers(parser, text, option, example):
    """Comma-separated integers; a usage error otherwise."""
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        parser.error("%s takes integers, e.g. %s" % (option, example))


def command(script, argv):
    """The command line as the report gives it: ``python bench/SCRIPT ARGS``."""
    return shlex.join(["python", "bench/" + script] + list(sys.argv[1:] if argv is None else argv))


def rotations(items, count):
    """(i, items rotated left by i) for i in range(count)."""
    for i in range(count):
        shift = i % len(items) if items else 0
        yield i, items[shift:] + items[:shift]


class Session:
    """The frame of a run loop: ``with Session(logs) as session:`` around the measuring.

    Ctrl-C (and SIGTERM, through ``main``) ends the loop with a message, and the report is made
    from what was measured; on the way out every process started is stopped by PID and the logs
    are closed. ``progress`` prints a line on stderr, stamped with the seconds since the start.
    """

    def __init__(self, logs):
        self.logs = logs
        self.started = time.monotonic()

    def elapsed(self):
        return round(time.monotonic() - self.started, 1)

    def progress(self, line):
        print("[%5.0fs] %s" % (time.monotonic() - self.started, line), file=sys.stderr, flush=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        servers.stop_all(self.logs)
        if kind is KeyboardInterrupt:
            print("\ninterrupted; reporting what was measured", file=sys.stderr)
            return True
        return False


def _terminate(signum, frame):
    raise KeyboardInterrupt


def main(function):
    """Run a script's main(); SIGTERM ends it as Ctrl-C does: it reports what it measured and
    stops what it started."""
    signal.signal(signal.SIGTERM, _terminate)
    sys.exit(function())

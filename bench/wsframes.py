"""WebSocket frame codec micro-benchmark: client frames parsed per second, compiled and pure Python.

    python bench/wsframes.py                           # 3 repeats of 1 s per build, kind and size
    python bench/wsframes.py --seconds 0.2 --repeats 1 # a smoke run (a few seconds)
    python bench/wsframes.py --sizes 16,65536 --kinds binary --json bench/results/wsframes.json

What is measured is greenserve.websocket.frames.FrameParser alone, with no socket, server or
application: a stream of masked client frames (one message each, of ``--sizes`` bytes, binary
or ASCII text, every frame with its own masking key) cut into 64 KiB reads, as a server's recv
would hand them over, fed with ``receive_data`` and drained with ``next_event`` after each read.
That is per frame the header checks, one unmask (C a word at a time in the compiled build, a
big-integer XOR in the pure one), for text the UTF-8 decoding, and the event object.

Each build runs in a subprocess of this script (``--worker``), started fresh for each repeat:
the build is chosen once per process (greenserve/_accel.py). Before timing, a worker checks that
one pass gives every message back whole; while timing, it counts the messages and bytes of every
pass. The table gives medians over the repeats, in messages per second and MB/s of payload.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import ROOT  # noqa: E402

BUILDS = ("compiled", "pure")
KINDS = ("binary", "text")
SIZES = (16, 125, 1024, 16384, 65536)
READ_SIZE = 65536
# Each pass parses about this many payload bytes (and at least MIN_FRAMES frames), so a pass
# takes milliseconds at every size.
PASS_BYTES = 1 << 20
MIN_FRAMES = 200


def stream(kind, size):
    """``(reads, frames, payload)``: masked client frames of one message each, cut into reads."""
    from greenserve.websocket.frames import BINARY, TEXT, frame, mask

    count = max(MIN_FRAMES, PASS_BYTES // size)
    payload = (b"0123456789abcdefghijklmnopqrstuvwxyz" * (size // 36 + 1))[:size]
    opcode = TEXT if kind == "text" else BINARY
    parts = []
    for i in range(count):
        key = (i * 2654435761 & 0xFFFFFFFF).to_bytes(4, "big")
        unmasked = frame(opcode, payload)
        header = bytearray(unmasked[: len(unmasked) - size])
        header[1] |= 0x80  # MASK: a client frame (RFC 6455 §5.1)
        parts.append(bytes(header) + key + mask(payload, key))
    data = b"".join(parts)
    reads = [data[i : i + READ_SIZE] for i in range(0, len(data), READ_SIZE)]
    return reads, count, payload


def one_pass(reads):
    """Parse the reads once with a new parser (default limits, as a server has them)."""
    from greenserve.websocket.frames import NEED_DATA, FrameParser

    parser = FrameParser()
    receive_data = parser.receive_data
    next_event = parser.next_event
    messages = 0
    size = 0
    for data in reads:
        receive_data(data)
        while (event := next_event()) is not NEED_DATA:
            messages += 1
            size += len(event.data)
    return messages, size


def worker(kind, size, seconds, warmup):
    """Run in a subprocess: measure one kind and size in this process's build; print JSON."""
    from greenserve import _accel
    from greenserve.websocket.frames import FrameParser, Message, NEED_DATA

    reads, count, payload = stream(kind, size)
    expected = payload.decode("ascii") if kind == "text" else payload
    parser = FrameParser()
    for data in reads:  # the check: every message back whole
        parser.receive_data(data)
        while (event := parser.next_event()) is not NEED_DATA:
            assert event == Message(expected), "a message came back wrong"
            count -= 1
    assert count == 0, "%d messages missing" % count
    deadline = time.perf_counter() + warmup
    while time.perf_counter() < deadline:
        one_pass(reads)
    messages = size_total = 0
    started = time.perf_counter()
    elapsed = 0.0
    while elapsed < seconds:
        got, got_size = one_pass(reads)
        messages += got
        size_total += got_size
        elapsed = time.perf_counter() - started
    print(json.dumps({
        "build": _accel.module_build("greenserve.websocket.frames"),
        "messages_per_s": messages / elapsed,
        "mb_per_s": size_total / elapsed / 1e6,
    }))


def measure(build, kind, size, seconds, warmup):
    env = dict(os.environ)
    env.pop("GREENSERVE_PURE_PYTHON", None)
    if build == "pure":
        env["GREENSERVE_PURE_PYTHON"] = "1"
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, os.path.abspath(__file__), "--worker", kind, str(size),
               "--seconds", str(seconds), "--warmup", str(warmup)]
    result = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=seconds * 20 + 60)
    if result.returncode != 0:
        raise SystemExit("wsframes: the %s worker failed:\n%s" % (build, result.stderr))
    figures = json.loads(result.stdout)
    if (build == "compiled") != (figures["build"] == "compiled"):
        raise SystemExit("wsframes: asked for the %s build, the worker ran %s (rebuild: pip install -e .)"
                         % (build, figures["build"]))
    return figures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.0, help="measured seconds per build, kind, size, repeat")
    parser.add_argument("--warmup", type=float, default=0.1)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)), help="payload sizes in bytes")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--builds", default=",".join(BUILDS))
    parser.add_argument("--json", help="also write every measurement to this file")
    parser.add_argument("--worker", nargs=2, metavar=("KIND", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), args.seconds, args.warmup)
        return
    builds = args.builds.split(",")
    rows = []
    print("%-7s %7s  %-9s %14s %10s" % ("kind", "size", "build", "messages/s", "MB/s"))
    for kind in args.kinds.split(","):
        for size in map(int, args.sizes.split(",")):
            runs = {build: [] for build in builds}
            for _ in range(args.repeats):
                for build in builds:  # interleaved: noise on a shared machine falls on both
                    runs[build].append(measure(build, kind, size, args.seconds, args.warmup))
            for build in builds:
                rate = statistics.median(r["messages_per_s"] for r in runs[build])
                mb = statistics.median(r["mb_per_s"] for r in runs[build])
                rows.append({"kind": kind, "size": size, "build": build, "messages_per_s": rate, "mb_per_s": mb,
                             "runs": runs[build]})
                print("%-7s %7d  %-9s %14.0f %10.1f" % (kind, size, build, rate, mb), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()

"""HTTP/2 codec micro-benchmark: hello requests/s through greenserve.http2 and python-hyper's h2.

    python bench/h2codec.py                         # 5 repeats of 1 s per codec
    python bench/h2codec.py --codecs compiled,h2 --repeats 3 --seconds 0.5

Codecs (``--codecs``): ``compiled`` (greenserve.http2, the Cython build), ``pure`` (the same
with GREENSERVE_PURE_PYTHON=1), ``h2`` (h2.connection.H2Connection, server side, bytes headers).

One connection, in memory, no sockets: the client's bytes are made beforehand (python-hyper's
h2 as the client: a browser-like GET whose header block, after the first request, refers to
the client's HPACK table only, so the same block serves every request on a new stream id), and
each request is one turn of the server's loop: ``receive(frame)``, then for its request
``send_headers`` (:status 200, content-type, content-length) and ``send_data(b"Hello,
world!", end_stream=True)``, then ``data_to_send()``. Every 1,000 requests the client's
WINDOW_UPDATE for the connection goes in with the next frame. Each codec runs in its own
subprocess, once per repeat; the report gives the median requests/s, single core, of the
process's CPU time (time.process_time: a busy shared machine takes the core away, not the count).
"""

import argparse
import os
import statistics
import struct
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HELLO = b"Hello, world!"
RESPONSE = [(b":status", b"200"), (b"content-type", b"text/plain"), (b"content-length", b"13")]


def client_bytes(count):
    """The preface and ``count`` requests' frames, made by h2 as the client."""
    import h2.config
    import h2.connection

    client = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding=None))
    client.initiate_connection()
    fields = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", b"localhost:8000"), (b":path", b"/"),
              (b"user-agent", b"Mozilla/5.0 (X11; Linux x86_64) Gecko/20100101 Firefox/128.0"),
              (b"accept", b"text/html,application/xhtml+xml,*/*;q=0.8"), (b"accept-language", b"en-US,en;q=0.5"),
              (b"accept-encoding", b"gzip, deflate, br"), (b"cookie", b"session=0123456789abcdef")]
    client.send_headers(1, fields, end_stream=True)
    preface = client.data_to_send()
    client.send_headers(3, fields, end_stream=True)
    block = client.data_to_send()[9:]  # refers to the table only: the same for every stream
    frames = []
    for i in range(count):
        stream_id = 3 + 2 * i
        frame = struct.pack(">BHBBL", 0, len(block), 1, 5, stream_id) + block
        if i % 1000 == 999:
            frame = struct.pack(">BHBBLL", 0, 4, 8, 0, 0, 1000 * len(HELLO)) + frame
        frames.append(frame)
    return preface, frames


def run_greenserve(preface, frames):
    from greenserve.http2 import H2Connection, RequestReceived

    conn = H2Connection()
    conn.data_to_send()
    conn.receive(preface)
    conn.data_to_send()
    return timed(conn, conn.receive, RequestReceived, frames)


def run_h2(preface, frames):
    import h2.config
    import h2.connection
    import h2.events

    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False, header_encoding=None))
    conn.initiate_connection()
    conn.receive_data(preface)
    conn.data_to_send()
    return timed(conn, conn.receive_data, h2.events.RequestReceived, frames)


def timed(conn, receive, request_type, frames):
    """The server's loop over ``frames``: (CPU seconds, bytes it sent)."""
    start = time.process_time()
    sent = 0
    for frame in frames:
        for event in receive(frame):
            if type(event) is request_type:
                conn.send_headers(event.stream_id, RESPONSE)
                conn.send_data(event.stream_id, HELLO, end_stream=True)
        sent += len(conn.data_to_send())
    return time.process_time() - start, sent


def worker(codec, seconds):
    preface, frames = client_bytes(1000)
    run = run_h2 if codec == "h2" else run_greenserve
    if codec != "h2":
        from greenserve import _accel

        build = _accel.module_build("greenserve.http2.hpack")
        if build != ("compiled" if codec == "compiled" else "pure Python"):
            sys.exit("%s: the %s build runs here" % (codec, build))
    run(preface, frames[:100])  # warm up
    # A connection carries 2^30 streams at most: a fresh one per 1,000 requests, its setup untimed.
    total = 0.0
    requests = 0
    while total < seconds:
        elapsed, sent = run(preface, frames)
        assert sent > 1000 * 30
        total += elapsed
        requests += len(frames)
    print(requests / total)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--codecs", default="compiled,pure,h2")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.worker, args.seconds)
    rates = {codec: [] for codec in args.codecs.split(",")}
    for _ in range(args.repeats):
        for codec in rates:  # interleaved, so that a busy moment falls on every codec alike
            env = dict(os.environ, PYTHONPATH=ROOT)
            env.pop("GREENSERVE_PURE_PYTHON", None)
            if codec == "pure":
                env["GREENSERVE_PURE_PYTHON"] = "1"
            out = subprocess.run([sys.executable, __file__, "--worker", codec, "--seconds", str(args.seconds)],
                                 env=env, cwd=ROOT, capture_output=True, text=True, check=True)
            rates[codec].append(float(out.stdout))
    print("| codec | hello requests/s (median of %d) |\n| --- | --- |" % args.repeats)
    for codec, values in rates.items():
        print("| %s | %s |" % (codec, "{:,.0f}".format(statistics.median(values))))


if __name__ == "__main__":
    main()

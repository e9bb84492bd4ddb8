"""A server-sent events clock with Flask, served by greenserve: each event is sent as it is produced.

    greenserve --chdir examples sse_clock:app
    curl -N http://127.0.0.1:8000/clock            # one event a second; ?interval=0.2 for faster

A stream is a generator: greenserve sends each chunk it yields at once (chunked framing on
HTTP/1.1), never buffering a streaming body. A client that goes away is noticed at the next write:
the response's ``close()`` runs (here: the generator's ``finally``), and the connection's greenlet
and socket are freed. ``/stats`` counts the streams open and closed, which is how the tests show
that 1,000 clients that vanish leave nothing behind.

The stream ends itself when the server stops: ``environ["greenserve.stopping"]`` is an event set
when a graceful stop (TERM, or HUP's reload of this worker) begins, so the loop waits on it
instead of sleeping and sends a last ``bye`` event. Without it the stream would be held until
``--graceful-timeout`` and then cut. Browsers reconnect by themselves (``retry:``), to the new
worker, with ``Last-Event-ID`` so that the count goes on.

Behind nginx, turn its response buffering off for the stream: this app sends
``X-Accel-Buffering: no``, which does that per response (docs/websockets.md).
"""

import json
import time
from datetime import datetime, timezone

from flask import Flask, Response, request

app = Flask(__name__)

# One worker process: plain counters are enough (each worker counts its own streams).
streams = {"open": 0, "closed": 0, "events": 0}


def _event(name, data, event_id=None):
    lines = []
    if event_id is not None:
        lines.append("id: %d" % event_id)
    lines.append("event: %s" % name)
    lines.append("data: %s" % data)
    return ("\n".join(lines) + "\n\n").encode()


def _interval():
    try:
        value = float(request.args.get("interval", "1"))
    except ValueError:
        return None
    return value if 0.01 <= value <= 60 else None


@app.get("/")
def index():
    return "SSE clock at /clock (?interval=SECONDS, 0.01 to 60); counters at /stats\n"


@app.get("/clock")
def clock():
    interval = _interval()
    if interval is None:
        return "interval: a number of seconds from 0.01 to 60\n", 400
    try:
        first = int(request.headers.get("Last-Event-ID", "0")) + 1
    except ValueError:
        first = 1
    # Under another server the key is absent: then the stream just sleeps between events.
    stopping = request.environ.get("greenserve.stopping")

    def generate():
        streams["open"] += 1
        try:
            yield b"retry: 2000\n\n"  # how long a browser waits before it reconnects
            number = first
            while True:
                now = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
                yield _event("tick", now, number)
                streams["events"] += 1
                number += 1
                if stopping is not None:
                    if stopping.wait(interval):
                        yield _event("bye", "server stopping")
                        return
                else:
                    time.sleep(interval)
        finally:
            # Runs when the client went away (greenserve closes the response at the failed
            # write) as well as when the stream ended itself.
            streams["open"] -= 1
            streams["closed"] += 1

    return Response(
        generate(),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@app.get("/stats")
def stats():
    return Response(json.dumps(streams), mimetype="application/json")

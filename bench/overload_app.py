"""The app of issue 40's overload benchmark (bench/overload.py): "a typical view: about 2 ms of
CPU and 20 ms waiting on I/O".

    GET /anything   ~2 ms of pure-Python CPU, then time.sleep(0.020), then 200 "done\\n"
    GET /health     200 "ok\\n" at once (no CPU, no sleep): the readiness check

The CPU is a pure-Python arithmetic loop that holds the GIL (a thread-pool server cannot run two
at once, as with a real view's Python). The wait is ``time.sleep``: a gevent server's worker is
monkey-patched (greenserve's command, gunicorn -k gevent), so there it yields to the hub; under a
thread-pool server (uvicorn --interface wsgi, granian) it releases the GIL, as a blocking I/O call
would.

The loop count: ``OVERLOAD_APP_LOOPS`` when set (bench/overload.py calibrates once, on the server
CPU, and gives every server the same count, so that each does the same work); otherwise it is
calibrated at import to ``OVERLOAD_APP_CPU_MS`` (default 2) milliseconds on this machine.
``python bench/overload_app.py`` prints the calibrated count and what one call costs.
"""

import os
import time

CPU_MS = float(os.environ.get("OVERLOAD_APP_CPU_MS", "2"))
WAIT_S = float(os.environ.get("OVERLOAD_APP_WAIT_MS", "20")) / 1000.0

BODY = b"done\n"
HEALTH = b"ok\n"


def burn(loops):
    """Pure-Python arithmetic, `loops` iterations; returns a value so that nothing is skipped."""
    x = 0
    for i in range(loops):
        x = (x + i * i) % 1000003
    return x


def calibrate(target_ms=CPU_MS, rounds=25):
    """The loop count whose run takes `target_ms` of CPU here (the fastest of `rounds` runs,
    measured with the thread's CPU clock, so that a preempted run does not shrink the count)."""
    probe = 20000
    burn(probe)  # warm up
    best = None
    for _ in range(rounds):
        t0 = time.thread_time()
        burn(probe)
        spent = time.thread_time() - t0
        best = spent if best is None else min(best, spent)
    best = max(best, 1e-6)
    return max(1, int(probe * (target_ms / 1000.0) / best))


_env_loops = os.environ.get("OVERLOAD_APP_LOOPS")
LOOPS = int(_env_loops) if _env_loops else calibrate()


def app(environ, start_response):
    if environ.get("PATH_INFO") == "/health":
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(HEALTH)))])
        return [HEALTH]
    burn(LOOPS)
    time.sleep(WAIT_S)
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(BODY)))])
    return [BODY]


if __name__ == "__main__":
    loops = calibrate()
    calls = []
    for _ in range(50):
        t0 = time.thread_time()
        burn(loops)
        calls.append(time.thread_time() - t0)
    calls.sort()
    print("OVERLOAD_APP_LOOPS=%d  (one call: %.3f ms of CPU, median of 50; target %.1f ms)"
          % (loops, calls[len(calls) // 2] * 1000, CPU_MS))

"""The applications of the overload tests: a CPU-bound view, an I/O-bound one, a health check."""

import os
import time

CPU_SECONDS = float(os.environ.get("OVERLOAD_CPU_MS", "5")) / 1000.0
IO_SECONDS = float(os.environ.get("OVERLOAD_IO_SECONDS", "3"))


def burn(seconds):
    """Hold the CPU (and so the event loop) for ``seconds``, as a view's Python code does."""
    end = time.perf_counter() + seconds
    n = 0
    while time.perf_counter() < end:
        n += 1
    return n


def _answer(start_response, body):
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def cpu_app(environ, start_response):
    if environ["PATH_INFO"] == "/health":
        return _answer(start_response, b"ok")
    burn(CPU_SECONDS)
    return _answer(start_response, b"computed")


def io_app(environ, start_response):
    """Waits on I/O (time.sleep, patched by gevent under greenserve) and uses no CPU."""
    time.sleep(IO_SECONDS)
    return _answer(start_response, b"waited")

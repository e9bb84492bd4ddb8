"""How fast the CPU a server runs on is right now: ``python bench/lib/speedprobe.py LOOPS PERIOD``.

A virtual machine's CPU speed moves while a benchmark runs (this project's 2-vCPU VM: the same
2 ms of Python took 2.1 ms in one minute and 3.0 ms in the next, with no other program running and
no steal reported), so a server's capacity measured at one time is not its capacity a minute later.
This probe, pinned to the server's CPU, runs a fixed piece of pure-Python work (LOOPS iterations of
bench/overload_app.py's ``burn``) every PERIOD seconds and prints the thread CPU time it took, in
milliseconds, one line per sample. CPU time, not wall time: the probe waiting for the busy server to
yield the CPU is not counted; time the hypervisor took from the vCPU while the probe ran is, as it
is for the server. At 1 ms of work every 0.5 s it takes 0.2 % of the CPU it measures.
It runs until it is terminated (SIGTERM ends it cleanly).
"""

import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from overload_app import burn  # noqa: E402  (bench/ on the path: the benchmark's own work)


def main(argv):
    loops, period = int(argv[0]), float(argv[1])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        start = time.thread_time()
        burn(loops)
        print("%.4f" % ((time.thread_time() - start) * 1e3), flush=True)
        time.sleep(period)


if __name__ == "__main__":
    main(sys.argv[1:])

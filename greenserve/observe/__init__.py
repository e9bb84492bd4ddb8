"""Observability, one wing: what the server tells about itself (logs, metrics), and nothing else.

- ``errorlog``   the error log: greenserve's own lines, its levels, and the library logger
- ``accesslog``  access-log formats (gunicorn's atoms), compiled: one line per request when on
- ``logconfig``  the logs through ``logging``: --log-config, syslog, structured access records,
                 --capture-output
- ``stats``      the observer interface (``Sink``) and a worker's counters (``WorkerStats``), compiled
- ``statsd``     --statsd-host: requests and the worker count as statsd lines
- ``metrics``    --metrics-bind: the master's side, worker snapshots merged and served at /metrics

Nothing is imported here: the master imports ``errorlog`` at start, and each other module only
when its feature is on (tests/process/test_master_memory.py holds the master to that).
"""

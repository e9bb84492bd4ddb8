"""``gunicorn -k greenserve.workers.GreenserveWorker``: the worker class's public path (it lives in entry/gunicorn.py)."""

from greenserve.entry.gunicorn import GreenserveWorker

__all__ = ["GreenserveWorker"]

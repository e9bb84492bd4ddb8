# Written for greenserve's corpus; stands for the gunicorn configuration of mealie-recipes/mealie (gunicorn_conf.py): the uvicorn image's computation rewritten as a class (annotated attributes, a method working out the workers that honours MAX_WORKERS), an instance at module level, errorlog and accesslog that become None when their variable is empty, the settings printed as labelled, indented JSON when the file loads.
import json
import multiprocessing
import os


class GunicornConfig:
    """The server's settings, worked out from the container's environment."""

    def __init__(self) -> None:
        read = os.environ.get
        self.listen_host: str = read("HOST", "127.0.0.1")
        self.listen_port: str = read("PORT", "9000")
        self.explicit_bind: str = read("BIND")
        self.level: str = read("LOG_LEVEL", "info")
        self.error_log: str = read("ERROR_LOG", "-") or None
        self.access_log: str = read("ACCESS_LOG", "-") or None
        self.grace: int = int(read("GRACEFUL_TIMEOUT", "90"))
        self.silence: int = int(read("TIMEOUT", "90"))
        self.idle: int = int(read("KEEP_ALIVE", "5"))
        self.per_core: float = float(read("WORKERS_PER_CORE", "1"))
        self.concurrency_text: str = read("WEB_CONCURRENCY")
        self.ceiling_text: str = read("MAX_WORKERS")

    @property
    def address(self) -> str:
        return self.explicit_bind or "%s:%s" % (self.listen_host, self.listen_port)

    def worker_count(self) -> int:
        if self.concurrency_text:
            asked = int(self.concurrency_text)
            assert asked > 0, "WEB_CONCURRENCY must be a positive number"
            return asked
        computed = max(2, int(self.per_core * multiprocessing.cpu_count()))
        return min(computed, int(self.ceiling_text)) if self.ceiling_text else computed


gunicorn_conf = GunicornConfig()

bind = gunicorn_conf.address
workers = gunicorn_conf.worker_count()
loglevel = gunicorn_conf.level
errorlog = gunicorn_conf.error_log
accesslog = gunicorn_conf.access_log
graceful_timeout = gunicorn_conf.grace
timeout = gunicorn_conf.silence
keepalive = gunicorn_conf.idle

log_data = dict(
    bind=bind,
    workers=workers,
    loglevel=loglevel,
    errorlog=errorlog,
    accesslog=accesslog,
    graceful_timeout=graceful_timeout,
    timeout=timeout,
    keepalive=keepalive,
    workers_per_core=gunicorn_conf.per_core,
    max_workers=gunicorn_conf.ceiling_text,
    host=gunicorn_conf.listen_host,
    port=gunicorn_conf.listen_port,
)
print("== server settings ==", json.dumps(log_data, indent=4))

# Written for greenserve's corpus; stands for the gunicorn configuration of acoustid/acoustid-server (acoustid/gunicorn_config.py): nothing but a logconfig_dict: gunicorn.error to stderr through a formatter class of the project's own, gunicorn.access thrown away by a NullHandler, disable_existing_loggers, qualname keys, a root logger.
logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": True,
    "formatters": {
        "structured": {"class": "lookup.logs.StructuredFormatter"},
    },
    "handlers": {
        "stderr": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
            "formatter": "structured",
        },
        "discard": {"class": "logging.NullHandler"},
    },
    "root": {"handlers": ["stderr"], "level": "INFO"},
    "loggers": {
        "gunicorn.access": {
            "handlers": ["discard"],
            "level": "ERROR",
            "propagate": False,
            "qualname": "gunicorn.access",
        },
        "gunicorn.error": {
            "handlers": ["stderr"],
            "level": "INFO",
            "propagate": False,
            "qualname": "gunicorn.error",
        },
    },
}

# Written for greenserve's corpus; stands for the gunicorn configuration of pgadmin-org/pgadmin4 (pkg/docker/gunicorn_config.py): gunicorn.SERVER_SOFTWARE set by the file, names imported from the application's own config module, a logconfig_dict only when that config asks for JSON logs (gunicorn.error and gunicorn.access, a jsonformatter class given a format dict, a root logger with no handler), access_log_format with a response header.
import gunicorn

from config import CONSOLE_LOG_FORMAT_JSON, CONSOLE_LOG_LEVEL, JSON_LOGGER

gunicorn.SERVER_SOFTWARE = "Server"  # no server name and version in the responses

# The signed-in user, from a header the application adds to its responses ("-" before sign-in).
access_log_format = '%(h)s %({x-remote-user}o)s %(t)s "%(r)s" %(s)s %(b)s "%(a)s"'

if JSON_LOGGER:
    logconfig_dict = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {
            "json": {"class": "jsonformatter.JsonFormatter", "format": CONSOLE_LOG_FORMAT_JSON},
        },
        "handlers": {
            "out": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout", "formatter": "json"},
            "err": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr", "formatter": "json"},
        },
        "root": {"handlers": [], "level": CONSOLE_LOG_LEVEL},
        "loggers": {
            "gunicorn.access": {"handlers": ["out"], "level": CONSOLE_LOG_LEVEL, "propagate": True,
                                 "qualname": "gunicorn.access"},
            "gunicorn.error": {"handlers": ["err"], "level": CONSOLE_LOG_LEVEL, "propagate": True,
                                "qualname": "gunicorn.error"},
        },
    }

# Written for greenserve's corpus; stands for the gunicorn configuration of City-of-Helsinki/parking-permits (gunicorn.conf.py): wsgi_app as a module path, limit_request_field_size, a logconfig_dict for gunicorn.error and gunicorn.access with python-json-logger formatters made by "()" and a filter class of the project's own.
wsgi_app = "permits.wsgi"
bind = "0.0.0.0:8000"
limit_request_field_size = 32768

logconfig_dict = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "request_context": {"()": "permits.logs.ContextFilter"},
    },
    "formatters": {
        "json_out": {
            "()": "pythonjsonlogger.jsonlogger.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(message)s",
        },
        "json_err": {
            "()": "pythonjsonlogger.jsonlogger.JsonFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s",
        },
    },
    "handlers": {
        "stdout": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stdout",
            "formatter": "json_out",
            "filters": ["request_context"],
        },
        "stderr": {
            "class": "logging.StreamHandler",
            "stream": "ext://sys.stderr",
            "formatter": "json_err",
            "filters": ["request_context"],
        },
    },
    "root": {"level": "INFO", "handlers": ["stdout"]},
    "loggers": {
        "gunicorn.error": {"level": "INFO", "handlers": ["stderr"], "propagate": False},
        "gunicorn.access": {"level": "INFO", "handlers": ["stdout"], "propagate": False},
    },
}

# Written for greenserve's corpus; stands for the gunicorn configuration of openedx/credentials (credentials_gunicorn.py): a module docstring, pythonpath, limit_request_field_size, gevent, a pre_request hook logging the method and path through worker.log.
"""Server settings of the credentials service, kept by the deployment tooling."""

bind = "127.0.0.1:8150"
workers = 2
worker_class = "gevent"
timeout = 200
pythonpath = "/opt/apps/credentials/code"
limit_request_field_size = 32768


def pre_request(worker, req):
    worker.log.info("request: %s %s", req.method, req.path)

# Written for greenserve's corpus; stands for the gunicorn configuration of PostHog/posthog (gunicorn.config.py): bind = "unix://tmp/nginx.socket" (gunicorn reads the relative path tmp/nginx.socket), an on_starting hook printing a banner and server.address, a when_ready hook touching the file nginx's buildpack waits for, loglevel "error", gevent.
# -*- coding: utf-8 -*-
bind = "unix://tmp/nginx.socket"
worker_class = "gevent"
timeout = 60
loglevel = "error"


def on_starting(server):
    art = "\n".join([
        "  +---------------------------+",
        "  |    analytics  web  app    |",
        "  +---------------------------+",
    ])
    print("\x1b[1;32m" + art + "\x1b[0m")
    print("Listening on \x1b[4mhttp://{}:{}\x1b[0m".format(*server.address[0]))
    print("Press CTRL+C to stop.")


def when_ready(server):
    # The nginx buildpack starts taking traffic once this file exists.
    with open("/tmp/app-initialized", "w"):
        pass

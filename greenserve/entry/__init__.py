"""The front doors: each way into greenserve makes a checked ``settings.Config`` and hands it on.

``cli`` the ``greenserve`` command; ``api`` ``serve()``; ``run`` ``greenserve.run()`` (any
gevent server under the pre-fork master); ``paste`` the ``paste.httpserver`` drop-in and the
PasteDeploy runner; ``gunicorn`` the gunicorn worker class. The core below them (server,
connection, http/, wsgi, process/) knows none of them.
"""

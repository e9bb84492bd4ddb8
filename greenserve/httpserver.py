"""``from greenserve import httpserver``: the paste drop-in's public path (it lives in entry/paste.py).

Also where PasteDeploy's ``egg:greenserve`` entry point pointed in installs made before it moved.
"""

from greenserve.entry.paste import serve, server_runner

__all__ = ["serve", "server_runner"]

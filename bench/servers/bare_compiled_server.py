"""bench/bare_gevent.py's raw loop compiled by Cython: python bench/servers/bare_compiled_server.py PORT [hello|page]

The same source as bare-raw (handle_raw), compiled to C the way greenserve's own modules are,
so that no bytecode is interpreted on the path: what is left is gevent's event loop, the greenlet
switches and the kernel. Issue 31 asks for the floor under a gevent server to be quoted as a
compiled loop; this is it. The extension is built once per source text into
bench/results/.compiled-<hash>/ (a few seconds, before the port opens).
"""

import hashlib
import importlib.util
import os
import shutil
import sys

from _common import ROOT, port

SOURCE = os.path.join(ROOT, "bench", "bare_gevent.py")
MODULE = "bench_bare_compiled"


def build():
    """The compiled module, built into a directory named by the source's hash if not there yet."""
    with open(SOURCE, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:12]
    where = os.path.join(ROOT, "bench", "results", ".compiled-" + digest)
    built = [n for n in os.listdir(where) if n.startswith(MODULE) and n.endswith(".so")] if os.path.isdir(where) else []
    if not built:
        from Cython.Build import cythonize
        from setuptools import Distribution
        from setuptools.command.build_ext import build_ext

        os.makedirs(where, exist_ok=True)
        copy = os.path.join(where, MODULE + ".py")
        shutil.copyfile(SOURCE, copy)
        dist = Distribution({"ext_modules": cythonize([copy], language_level=3, quiet=True,
                                                      compiler_directives={"binding": False})})
        command = build_ext(dist)
        command.build_lib = where
        command.build_temp = os.path.join(where, "tmp")
        command.inplace = False
        command.ensure_finalized()
        command.run()
        built = [n for n in os.listdir(where) if n.startswith(MODULE) and n.endswith(".so")]
    spec = importlib.util.spec_from_file_location(MODULE, os.path.join(where, built[0]))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if __name__ == "__main__":
    from gevent.server import StreamServer

    compiled = build()
    assert not compiled.__file__.endswith(".py"), compiled.__file__
    compiled.RESPONSE = compiled.RESPONSES[sys.argv[2] if len(sys.argv) > 2 else "hello"]
    StreamServer(("127.0.0.1", port()), compiled.handle_raw, backlog=2048).serve_forever()

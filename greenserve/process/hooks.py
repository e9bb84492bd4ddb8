"""Server hooks: gunicorn's names, meanings and arguments, called at the points of the process model they name.

Each hook is a setting (``settings.py``, section "Server hooks"): a callable, or a
``'module:function'`` string (the command line's form; gunicorn's ``'module.function'`` too).
``HOOKS`` below is the one place that says, for each, what it is given and in which process it
runs; the settings rows and docs/hooks.md are written from it.

Where a string is imported: hooks that run in the master are imported in the master at start,
so a typo is one line before anything is forked. Hooks that run only in a worker are imported
in each worker after gevent's reinit and monkey-patching, where the application is imported
too: a module imported in the master would bind ``threading``, ``socket`` and ``time`` before
the patching, and whatever it starts would block the worker's event loop.

What an exception in a hook does:

* ``on_starting`` and ``ssl_context`` (the master, before anything serves): the start stops with
  the hook's traceback and exit code 3, as an application that fails to load.
* ``post_fork`` and ``post_worker_init`` (a worker, before it serves): the worker fails to boot,
  as when its application raises while loading (the master stops if no worker ever served, else
  starts another after a back-off).
* ``pre_request``: the request is answered 500, and the error log names the hook.
* every other hook: logged with its traceback; the server goes on (a metrics hook that raises
  in ``child_exit`` must not take the server down with it; gunicorn's master would stop).

A hook that runs in the master and creates a gevent hub stops the master with one line and exit
code 2: every worker forked after would share that hub's loop and resolver threads.
"""

import importlib
import os
import signal
import sys


class Hook:
    """One hook: its name, the arguments it is given, where it runs, and when (for the docs)."""

    __slots__ = ("name", "arguments", "where", "when")

    def __init__(self, name, arguments, where, when):
        self.name = name
        self.arguments = arguments
        self.where = where  # "master" or "worker"
        self.when = when

    @property
    def arity(self):
        return len(self.arguments)


HOOKS = [
    Hook("on_starting", ("server",), "master",
         "once, in the master, after it bound its sockets (and, with --daemon, detached), before the first fork"),
    Hook("when_ready", ("server",), "master", "once, in the master, when the first worker serves"),
    Hook("pre_fork", ("server", "worker"), "master",
         "in the master, just before each worker is forked (worker.pid is None)"),
    Hook("post_fork", ("server", "worker"), "worker",
         "in each worker, after gevent's reinit and monkey-patching, before the application is imported"),
    Hook("post_worker_init", ("worker",), "worker",
         "in each worker, after the application is imported, before it serves"),
    Hook("worker_int", ("worker",), "worker",
         "in a worker, on SIGQUIT (it then closes every connection now) or SIGINT (Ctrl-C: the master decides)"),
    Hook("worker_abort", ("worker",), "worker",
         "in a worker, on SIGABRT (the master's last word to a blocked worker); the worker then exits 1"),
    Hook("worker_exit", ("server", "worker"), "worker",
         "in a worker, on its way out, however it stopped (not when killed); its atexit handlers follow "
         "when the stop was graceful"),
    Hook("child_exit", ("server", "worker"), "master",
         "in the master, after each worker's death, whatever ended it (kill -9 and the OOM killer too)"),
    Hook("nworkers_changed", ("server", "new_value", "old_value"), "master",
         "in the master, at start (old_value None) and each time the worker count changes (TTIN, TTOU, a reload's new count)"),
    Hook("on_reload", ("server",), "master", "in the master, on SIGHUP, before the new workers are forked"),
    Hook("on_exit", ("server",), "master", "in the master, just before it exits"),
    Hook("pre_exec", ("server",), "master",
         "on SIGUSR2 (a binary upgrade), in the master's forked child, just before it executes the new master"),
    Hook("pre_request", ("worker", "req"), "worker", "in a worker, before the application is called"),
    Hook("post_request", ("worker", "req", "environ", "resp"), "worker",
         "in a worker, after the response's iterable is closed (it may take 2, 3 or 4 arguments)"),
    Hook("ssl_context", ("config", "default_ssl_context_factory"), "master",
         "in the master, when the TLS context is made: returns an ssl.SSLContext"),
]

HOOKS_BY_NAME = {hook.name: hook for hook in HOOKS}


# --- the setting's converter ----------------------------------------------------------------------


def _accepts(function, count):
    """Whether ``function`` can be called with ``count`` positional arguments (None: cannot tell)."""
    import inspect  # (here: the command imports this module at start, for the settings table)

    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None  # some builtins have no signature: let the call say
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def _check_arity(name, function):
    """The callable, or ValueError saying what it must accept. post_request may take 2, 3 or 4, as in gunicorn."""
    hook = HOOKS_BY_NAME[name]
    if not callable(function):
        raise ValueError("expected a callable or 'module:function', got %r" % (function,))
    counts = (4, 3, 2) if name == "post_request" else (hook.arity,)
    for count in counts:
        if _accepts(function, count) is not False:
            return function
    raise ValueError(
        "%s must accept %s (%s), as in gunicorn; %s does not"
        % (name, "2, 3 or 4 arguments" if len(counts) > 1 else "%d argument%s" % (hook.arity, "s" * (hook.arity > 1)),
           ", ".join(hook.arguments), getattr(function, "__qualname__", repr(function)))
    )


def _split(text):
    """'module:function' (or gunicorn's 'module.function') -> (module, attribute path); ValueError."""
    module, colon, attribute = text.partition(":")
    if not colon:
        module, _, attribute = text.rpartition(".")
    if not module or not attribute or module.startswith("."):
        raise ValueError("expected 'module:function', got %r" % text)
    return module, attribute


def converter(name):
    """The settings row's converter: None, a callable whose arity fits, or a 'module:function' string
    (imported later, where the hook runs: see the module docstring)."""
    def convert(value):
        if value is None:
            return None
        if isinstance(value, str):
            _split(value)
            return value
        return _check_arity(name, value)

    convert.type_name = "callable"
    return convert


# --- resolving strings ------------------------------------------------------------------------------


class HookError(ValueError):
    """A hook's 'module:function' does not resolve, or does not take the right arguments: one line."""


class HookRaised(Exception):
    """A worker hook before serving (post_fork, post_worker_init) raised; its traceback is logged."""


def resolve(name, value):
    """The callable a hook's setting names (importing a 'module:function'), or HookError."""
    if not isinstance(value, str):
        return value
    module_name, attribute = _split(value)
    flag = "--" + name.replace("_", "-")
    try:
        target = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise HookError("%s %s: no module named %r (current directory: %s)"
                            % (flag, value, exc.name, os.getcwd())) from None
        raise
    try:
        for part in attribute.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise HookError("%s %s: module %r has no attribute %r" % (flag, value, module_name, attribute)) from None
    try:
        return _check_arity(name, target)
    except ValueError as exc:
        raise HookError("%s %s: %s" % (flag, value, exc)) from None


def _check_findable(name, value):
    """A worker hook's 'module:function' whose top-level package cannot be found: HookError now,
    in the master, rather than in every worker (which import it after patching). Finding the
    top-level name imports nothing."""
    import importlib.util  # only with a worker hook given: not in every master

    top = _split(value)[0].partition(".")[0]
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise HookError("--%s %s: no module named %r (current directory: %s)"
                        % (name.replace("_", "-"), value, top, os.getcwd()))


# --- what hooks are given -------------------------------------------------------------------------


class HookLog:
    """``server.log`` and ``worker.log``: the error log with gunicorn's calls, which hooks copied
    from gunicorn.conf.py files make: ``log.info("worker %s spawned", worker.pid)``, and
    ``log.exception(message)`` in an ``except`` block (the exception being handled is logged)."""

    def __init__(self, log):
        self._log = log

    def _say(self, level, message, args):
        text = message % args if args else str(message)
        getattr(self._log, level, self._log.info)(text)

    def debug(self, message, *args, **_kwargs):
        self._say("debug", message, args)

    def info(self, message, *args, **_kwargs):
        self._say("info", message, args)

    def warning(self, message, *args, **_kwargs):
        self._say("warning", message, args)

    def error(self, message, *args, **_kwargs):
        self._say("error", message, args)

    def critical(self, message, *args, **_kwargs):
        self._say("error", message, args)

    def exception(self, message, *args, **_kwargs):
        exc = sys.exc_info()[1]
        if exc is None or not hasattr(self._log, "exception"):
            self._say("error", message, args)
        else:
            self._log.exception(message % args if args else str(message), exc)


class Server:
    """The ``server`` argument of the master's hooks: what gunicorn's Arbiter offers them.

    ``pid``: the master's; ``cfg``: the settings as gunicorn's Config reads them (the Hooks'
    ``view`` of the ``settings.Config``, which ``config`` is); ``log``: the error log, with
    gunicorn's calls (``HookLog``); ``address``: the bound addresses as gunicorn parses them
    ((host, port) or a unix path); ``LISTENERS``: the listening sockets (``str()`` as gunicorn
    prints them, ``.sock``, ``fileno()``, ``getsockname()``); ``app``: the application
    (``app.cfg``, ``app.app_uri``, ``app.wsgi()``); ``num_workers``: how many workers the master
    keeps; ``workers`` (also ``WORKERS``): pid -> ``Worker`` of those alive; ``timeout``,
    ``proc_name``, ``pidfile``, ``worker_class``, ``master_name``, ``reexec_pid``,
    ``master_pid``, ``systemd``, ``worker_age``; and gunicorn's ``reload()``, ``stop()``,
    ``halt()``, ``kill_worker(pid, sig)``, ``kill_workers(sig)``, ``wakeup()``, which signal
    the master as the command line does. A worker's hooks that take ``server`` get the copy it
    inherited at the fork.
    """

    master_name = "Master"

    @property
    def reexec_pid(self):
        """The new master this one started on SIGUSR2, while it runs (process.upgrade); else 0."""
        upgrade = getattr(self.arbiter, "upgrade", None)
        return (upgrade.child or 0) if upgrade is not None else 0

    @property
    def master_pid(self):
        """In a new master: the old master, while it runs; else 0 (as gunicorn's)."""
        upgrade = getattr(self.arbiter, "upgrade", None)
        return (upgrade.predecessor() or 0) if upgrade is not None else 0

    def __init__(self, config, log, view=None):
        self.pid = os.getpid()
        self.view = view if view is not None else (lambda config: config)
        self.config = config
        self.cfg = self.view(config)
        self.log = HookLog(log)
        self.arbiter = None  # set by the Master
        self.LISTENERS = []  # set by the Master: Listener of each listening socket
        self.app = App(self.cfg, None, None, None)
        self.pidfile = None
        self.systemd = "LISTEN_FDS" in os.environ

    def listening(self, sockets, ssl):
        """The master's listening sockets, for ``address`` and ``LISTENERS``."""
        self.LISTENERS = [Listener(sock, ssl) for sock in sockets]

    @property
    def address(self):
        return [listener.address for listener in self.LISTENERS]

    @property
    def num_workers(self):
        return self.arbiter.target if self.arbiter is not None else self.config.worker_count()

    @num_workers.setter
    def num_workers(self, count):
        if self.arbiter is None:
            raise RuntimeError("num_workers can be set once the master runs")
        self.arbiter.set_target(int(count))

    @property
    def workers(self):
        if self.arbiter is None:
            return {}
        return {pid: record.hook_worker for pid, record in self.arbiter.workers.items()
                if record.hook_worker is not None}

    WORKERS = workers

    @property
    def timeout(self):
        return self.config.timeout

    @property
    def proc_name(self):
        return getattr(self.cfg, "proc_name", None) or self.app.app_uri or "greenserve"

    @property
    def worker_class(self):
        return "greenserve"

    @property
    def worker_age(self):
        return self.arbiter.forked if self.arbiter is not None else 0

    # gunicorn's Arbiter methods, as the signals the command line sends (docs/signals.md).

    def reload(self):
        os.kill(self.pid, signal.SIGHUP)

    def stop(self, graceful=True):
        os.kill(self.pid, signal.SIGTERM if graceful else signal.SIGQUIT)

    def halt(self, reason=None, exit_status=0):
        if reason is not None:
            self.log.info("halt: %s", reason)
        os.kill(self.pid, signal.SIGTERM)

    def wakeup(self):
        pass  # the master's loop wakes on its own signals and pipes

    def kill_worker(self, pid, sig):
        if pid in self.workers:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass  # reaped meanwhile, as gunicorn's kill_worker tolerates

    def kill_workers(self, sig):
        for pid in list(self.workers):
            self.kill_worker(pid, sig)


class Listener:
    """One of ``server.LISTENERS``: a listening socket as gunicorn's sock.TCPSocket or
    UnixSocket shows it (``str()``: ``http://127.0.0.1:8000``, ``unix:/run/app.sock``)."""

    def __init__(self, sock, ssl):
        self.sock = sock
        self.ssl = ssl

    @property
    def address(self):
        name = self.sock.getsockname()
        return name[:2] if isinstance(name, tuple) else name

    def fileno(self):
        return self.sock.fileno()

    def getsockname(self):
        return self.sock.getsockname()

    def __str__(self):
        address = self.address
        if isinstance(address, tuple):
            host = "[%s]" % address[0] if ":" in address[0] else address[0]
            return "%s://%s:%d" % ("https" if self.ssl else "http", host, address[1])
        return "unix:%s" % address

    __repr__ = __str__


class App:
    """``server.app`` and ``worker.app``: gunicorn's WSGIApplication as hooks use it.

    ``cfg``; ``app_uri``: MODULE:APP; ``callable``: the application once imported (in the
    master with --preload, in a worker once it serves); ``wsgi()`` returns it, importing it
    with ``load`` (as gunicorn's does) when it is not yet.
    """

    def __init__(self, cfg, app_uri, application, load):
        self.cfg = cfg
        self.app_uri = app_uri
        self.callable = application
        self._load = load

    def wsgi(self):
        if self.callable is None:
            if self._load is None or self.app_uri is None:
                raise RuntimeError("no application to import here (greenserve serves one given as MODULE:APP)")
            self.callable = self._load(self.app_uri)
        return self.callable

    load = wsgi


class Worker:
    """The ``worker`` argument of hooks: one worker process, the same object from pre_fork to
    child_exit, with what gunicorn's Worker offers them.

    ``pid``: None in pre_fork, the worker's after; ``ppid``: the master's pid; ``age``: how many
    workers the master had forked counting this one (gunicorn's); ``number``: its slot 1..N
    (``GREENSERVE_WORKER`` in its environment; reused by its replacement); ``cfg``, ``config``,
    ``log``, ``app``: as the server's; ``sockets``: the listening sockets; ``timeout``;
    ``max_requests``: the worker's request limit (sys.maxsize: none), which post_worker_init may
    change; ``alive``: False once it is stopping; ``booted``: True once it serves;
    ``aborted``: True on SIGABRT; ``wsgi``: the application, in the worker once imported;
    ``exit_code``: in child_exit, how it ended (``os.waitstatus_to_exitcode``: -9 when killed by
    SIGKILL).
    """

    def __init__(self, server, log, number, age):
        self.pid = None
        self.ppid = os.getpid()
        self.age = age
        self.number = number
        self.config = server.config
        self.cfg = server.cfg
        self.app = server.app
        self.log = HookLog(log)
        self.sockets = [listener.sock for listener in server.LISTENERS]
        self.alive = True
        self.booted = False
        self.aborted = False
        self.exit_code = None
        # As gunicorn's: the limit (sys.maxsize for none); in the worker, with its jitter, and
        # what post_worker_init leaves here is the worker's limit.
        self.max_requests = self.config.max_requests or sys.maxsize

    @property
    def timeout(self):
        return self.config.timeout

    @property
    def wsgi(self):
        return self.app.callable

    def __repr__(self):
        return "<greenserve worker %d pid %s>" % (self.number, self.pid)


def _by_arity(post_request):
    """gunicorn's post_request may take 2, 3 or 4 arguments: always call it with 4."""
    if _accepts(post_request, 4) is not False:
        return post_request
    if _accepts(post_request, 3):
        return lambda worker, req, environ, resp: post_request(worker, req, environ)
    return lambda worker, req, environ, resp: post_request(worker, req)


# --- the hooks of one start -----------------------------------------------------------------------


def _hub_exists():
    """Whether a gevent hub exists here and has run (been switched into).

    A hub that was only made is harmless to fork: each worker's ``gevent.reinit()`` renews its
    loop, and nothing of it ran (no greenlet, no resolver thread, no watcher). Importing Django
    under a patched threading makes one (asgiref builds a ThreadPoolExecutor), so a when_ready
    that reads ``django.conf.settings`` must not be refused for it.
    """
    # No gevent imported, no hub: and importing gevent to ask would be a change of its own.
    if "gevent" not in sys.modules:
        return False
    from gevent._hub_local import get_hub_if_exists

    hub = get_hub_if_exists()
    return hub is not None and bool(hub)  # a greenlet is true once started and until it ends


class Hooks:
    """The hooks of one start, resolved, and the objects they are given.

    Made in the master at start: ``HookError`` when a master hook's string does not resolve.
    The worker hooks' strings are resolved in each worker by :meth:`resolve_worker_hooks`.
    """

    def __init__(self, config, log, view=None):
        self.log = log
        self.server = Server(config, log, view)
        self.worker = None  # in a worker: its Worker
        self.reconfigure(config)

    def reconfigure(self, config):
        """Take the hooks ``config`` names: at start, and from settings read again on SIGHUP.
        A master hook's string that does not resolve is a HookError, and nothing changes."""
        functions = {}
        for hook in HOOKS:
            value = getattr(config, hook.name)
            if value is not None and hook.where == "master":
                value = resolve(hook.name, value)
            elif isinstance(value, str):
                _check_findable(hook.name, value)
            functions[hook.name] = value
        self.functions = functions
        server = self.server
        self.config = server.config = config
        server.cfg = server.app.cfg = server.view(config)

    def resolve_worker_hooks(self):
        """In a worker, after patching: import the worker hooks' 'module:function' strings (HookError)."""
        for hook in HOOKS:
            if hook.where == "worker":
                self.functions[hook.name] = resolve(hook.name, self.functions[hook.name])

    def __getitem__(self, name):
        return self.functions[name]

    # --- in the master ---

    def call_starting(self, name, *args):
        """A master hook before anything serves (on_starting, ssl_context): an exception is a
        HookRaised from it (the start fails); a hub it created is an ``arbiter.StopMaster``."""
        function = self.functions[name]
        if function is None:
            return None
        hub_before = _hub_exists()
        try:
            result = function(*args)
        except Exception as exc:
            raise HookRaised("the %s hook raised (see the traceback above)" % name) from exc
        self._check_hub(name, hub_before)
        return result

    def call_master(self, name, *args):
        """A master hook while it serves: an exception is logged with its traceback; a hub it
        created is an ``arbiter.StopMaster``."""
        function = self.functions[name]
        if function is None:
            return
        hub_before = _hub_exists()
        try:
            function(*args)
        except Exception:
            self.server.log.exception("the %s hook raised", name)
        if name != "on_exit":  # the last thing the master does: no worker is forked after it
            self._check_hub(name, hub_before)

    def _check_hub(self, name, hub_before):
        from greenserve.process import arbiter

        if not hub_before and _hub_exists():
            raise arbiter.StopMaster(
                "the %s hook created a gevent hub in the master (it slept, spawned or did I/O with gevent): "
                "the workers would share it; do that in post_fork" % name
            )

    def new_worker(self, number, age):
        """In the master, before a fork: the Worker given to pre_fork and, from then on, to its hooks."""
        worker = Worker(self.server, self.log, number, age)
        self.call_master("pre_fork", self.server, worker)
        return worker

    # --- in a worker ---

    def call_boot(self, name, *args):
        """A worker hook before it serves: an exception is logged with its traceback and is a
        HookRaised (the worker fails to boot, as when its application raises while loading)."""
        function = self.functions[name]
        if function is None:
            return
        try:
            function(*args)
        except Exception:
            self.server.log.exception("worker pid %d: the %s hook raised", os.getpid(), name)
            raise HookRaised("the %s hook raised in the worker (see the traceback above)" % name) from None

    def call_worker(self, name, *args):
        """A worker hook where an exception is logged and the worker goes on (or out)."""
        function = self.functions[name]
        if function is None or isinstance(function, str):  # (a string: it did not resolve)
            return
        try:
            function(*args)
        except Exception:
            self.server.log.exception("worker pid %d: the %s hook raised", os.getpid(), name)

    def request_hooks(self):
        """``(pre_request, post_request)`` as the WSGI side calls them around each request
        (``request_hooks.wrap_application``), post_request always with 4 arguments; None for
        one not set."""
        pre, post = self.functions["pre_request"], self.functions["post_request"]
        return pre, (_by_arity(post) if post is not None else None)

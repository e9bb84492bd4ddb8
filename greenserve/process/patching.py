"""gevent's monkey-patching for a worker: which modules to patch, the resolver and loop, and a plain report.

greenserve patches in each worker before it imports the application, so the order gevent asks for
("patch first") holds without the user writing it. The report says what that did and did not make
cooperative, in words, with what to use instead, for ``greenserve check`` and the worker's log.

Importing this module imports nothing of gevent: the hub must not exist before ``configure_gevent``
(the loop and resolver are chosen when the hub is created), and ``apply`` must see ``sys.modules``
as the application left it, not as gevent's own imports changed it.
"""

import os
import re
import sys
import types
import warnings
from collections import namedtuple

# The order ``gevent.monkey.patch_all()`` patches in. Order matters: time must come after thread
# (gevent's threading needs the real time.sleep while it is patched), os before signal (SIGCHLD).
# Which names exist is decided by the installed gevent (``_patchable()``); this only orders them.
_PATCH_ORDER = (
    "os", "thread", "time", "sys", "socket", "dns", "select", "ssl", "subprocess",
    "builtins", "signal", "queue",
)

# What patching each module changes, and what stays blocking when it is not patched.
_PATCHED_MEANS = {
    "socket": "socket.socket, create_connection and socketpair wait on the event loop",
    "dns": "getaddrinfo, gethostbyname and the rest go through gevent's resolver (below)",
    "time": "time.sleep is gevent.sleep",
    "select": "select.select, select.poll and selectors.DefaultSelector wait on the event loop"
              " (epoll and kqueue are removed)",
    "thread": "threading.Thread starts a greenlet, not an OS thread; locks and Event wait"
              " cooperatively; threading.local is per greenlet; CPU-bound code still blocks the"
              " worker (use gevent.get_hub().threadpool for real threads)",
    "os": "os.fork reinitialises gevent in the child; os.waitpid waits cooperatively",
    "ssl": "SSLSocket and SSLContext.wrap_socket are cooperative",
    "subprocess": "Popen, run, call and check_output wait for the child cooperatively",
    "signal": "signal.signal works with gevent's SIGCHLD handling (handlers still run outside"
              " the event loop: see 'signal handlers')",
    "queue": "queue.Queue, LifoQueue, PriorityQueue and SimpleQueue are gevent.queue's: they"
             " wait cooperatively between greenlets, but must not be shared with real OS threads",
}
_UNPATCHED_MEANS = {
    "socket": "socket I/O blocks the whole worker",
    "dns": "name lookups (getaddrinfo, connecting to a host name) block the whole worker",
    "time": "time.sleep blocks the whole worker; use gevent.sleep",
    "select": "select, poll and selectors block the whole worker",
    "thread": "threading.Thread starts real OS threads; waiting on their locks blocks the worker",
    "os": "os.fork does not reinitialise gevent in the child (call gevent.reinit() there);"
          " os.waitpid blocks",
    "ssl": "TLS socket I/O blocks the whole worker",
    "subprocess": "waiting for a child process blocks the whole worker; use gevent.subprocess",
    "signal": "signal.signal handlers installed now can break gevent's SIGCHLD handling",
    "queue": "queue.Queue.get() blocks the whole worker while it waits; between greenlets use"
             " gevent.queue.Queue",
    # gevent's patch_sys is a no-op on Python 3 (a threadpool at interpreter exit hangs).
    "sys": "sys.stdin, stdout and stderr block (gevent cannot patch them on Python 3); read a"
           " terminal or pipe through gevent.fileobject.FileObjectThread",
}
# How to tell whether a name is patched: (module, attribute or None for "anything in it").
# dns and socket both patch the socket module, so they are told apart by one attribute each.
_PATCHED_WHEN = {
    "socket": ("socket", "socket"),
    "dns": ("socket", "getaddrinfo"),
    "thread": ("threading", None),
}

# Things monkey-patching never makes cooperative, with what to use instead. The subject gets
# " (loaded)" in the report when its module is in sys.modules.
_NEVER_COOPERATIVE = (
    ("signal handlers", None,
     "Python runs signal.signal handlers in the main thread, inside whichever greenlet is"
     " running: one that blocks or switches can break it; use gevent.signal_handler(signum, func),"
     " which runs the handler in a new greenlet from the event loop"),
    ("multiprocessing", "multiprocessing",
     "Queue, Pipe and Pool block the worker, and with threading patched multiprocessing.Queue"
     " and ProcessPoolExecutor hang: use gevent.subprocess or a job queue in another process"),
    ("files", None,
     "open(), read() and write() on regular files block the worker (the kernel reports disk"
     " files as always ready): use gevent.fileobject.FileObjectThread or"
     " gevent.get_hub().threadpool.spawn(...)"),
    ("psycopg2", "psycopg2",
     "its C client does its own I/O and blocks the worker: call"
     " psycogreen.gevent.patch_psycopg() after patching (pip install psycogreen)"),
    ("mysqlclient", "MySQLdb",
     "MySQLdb is a C client and blocks the worker: use PyMySQL, which is pure Python and"
     " cooperates through the patched socket module"),
    ("grpc", "grpc",
     "gRPC's C core does its own I/O and blocks the worker: call"
     " grpc.experimental.gevent.init_gevent() after patching, before creating channels"),
    ("C extensions", None,
     "any other extension doing its own network I/O (database drivers, pycurl, ...) blocks the"
     " worker: look for a gevent or 'green' mode, or a pure-Python client"),
)

# Modules that, imported before patching, may keep blocking originals: what they took from
# socket, ssl or threading at import time (from-imports, subclasses, locks) is not replaced.
# Stdlib clients such as http.client are not listed: they look up socket.create_connection and
# ssl's names when called, so they see the patched ones whenever they were imported.
_WATCHED = (
    "ssl", "requests", "urllib3", "httpx", "httplib2", "redis", "pymysql", "pymongo", "kombu",
    "botocore", "elasticsearch",
)

RESOLVERS = ("thread", "ares", "dnspython", "block")
# Our short names onto gevent.config.loop's; "libev" tries the C extension, then cffi, as gevent does.
LOOPS = {
    "libev": ["libev-cext", "libev-cffi"],
    "libuv": ["libuv-cffi"],
    "libev-cext": ["libev-cext"],
    "libev-cffi": ["libev-cffi"],
    "libuv-cffi": ["libuv-cffi"],
}
# Fork behaviour matters because greenserve's master forks its workers (and, with --preload,
# after the application ran its imports).
_RESOLVER_NOTES = {
    "thread": "the system resolver in gevent's threadpool; gevent.reinit() rebuilds the pool after"
              " fork, but a lookup in flight at fork time can leave libc's locks held in the child",
    "ares": "c-ares, no threads; gevent.reinit() rebuilds its channel after fork: fork-safe;"
            " answers may differ slightly from the system resolver (gevent's DNS docs list how)",
    "dnspython": "dnspython over gevent sockets, no threads: fork-safe; does not use the system"
                 " resolver library (nsswitch.conf is not consulted)",
    "block": "the system resolver called directly: no threads, fork-safe, but every lookup"
             " blocks the whole worker",
}
_LOOP_NOTES = {
    "libev-cext": "libev (C extension), gevent's default on POSIX; supports gevent.reinit() after fork",
    "libev-cffi": "libev through cffi; supports gevent.reinit() after fork",
    "libuv-cffi": "libuv through cffi; after fork gevent relies on uv_loop_fork, which libuv calls"
                  " experimental: prefer libev with a pre-fork master",
}

_GROUPS = (
    ("summary", None),
    ("patched", "patched:"),
    ("not patched", "not patched:"),
    ("warning", "warnings:"),
    ("gevent", "gevent:"),
)


# Named tuples, not typing.NamedTuple or dataclasses: the master imports this module, and those
# two (with inspect under dataclasses) are ~1.5 MB of its RSS.
Row = namedtuple("Row", "status subject detail")
Row.__doc__ = "One line of the report: status is a group of ``_GROUPS``, subject what it is about."

PatchState = namedtuple("PatchState", "spec imported_before threads_before gevent_warnings")
PatchState.__doc__ = """What ``apply`` did in this process, and what it saw just before: ``spec`` ("all", "none" or
a tuple of module names), ``imported_before`` (watched modules already in sys.modules),
``threads_before`` (names of OS threads other than the main one, already running), ``gevent_warnings``
(MonkeyPatchWarning messages, verbatim)."""


# Set by apply(); inherited by forked workers, which is what lets apply() be called again there.
_applied = None


def _patchable():
    """Module names gevent.monkey can patch one by one, in patch_all's order (gevent decides)."""
    from gevent import monkey

    names = {
        name[len("patch_"):] for name in monkey.__all__
        if name.startswith("patch_") and name not in ("patch_all", "patch_module")
    }
    ordered = [name for name in _PATCH_ORDER if name in names]
    return tuple(ordered + sorted(names.difference(ordered)))


def parse_patch_spec(text):
    """``--patch`` text -> ``"all"``, ``"none"`` or a tuple of module names in patching order.

    Raises ValueError with one line naming the bad item and the choices.
    """
    names = [item.strip().lower() for item in text.split(",")]
    names = [name for name in names if name]
    if len(names) == 1 and names[0] in ("all", "none"):
        # Before _patchable(): it imports gevent.monkey, and the master, which parses the spec
        # of the default "all", must not import gevent (its RSS: gevent, greenlet and zope.interface
        # are ~6 MB that only workers need).
        return names[0]
    choices = _patchable()
    if not names:
        raise ValueError("--patch needs all, none or modules; choose from: all, none, %s"
                         % ", ".join(choices))
    for name in names:
        if name in ("all", "none"):
            raise ValueError("--patch %s: '%s' cannot be combined with module names" % (text, name))
        if name not in choices:
            raise ValueError("unknown module '%s' for --patch; choose from: all, none, %s"
                             % (name, ", ".join(choices)))
    return tuple(name for name in choices if name in names)


def spec_of(config):
    """The patching a ``settings.Config`` asks for: its ``patch``, or "none" with
    ``monkey_patch`` off (as parse_patch_spec() returns it; ValueError naming a bad module)."""
    return parse_patch_spec(config.patch) if config.monkey_patch else "none"


def patch_text(spec):
    """How the startup log and --check-config name a patch spec."""
    if spec == "all":
        return "all (patch_all)"
    if spec == "none":
        return "off (--no-monkey-patch)"
    return "%s (--patch)" % ", ".join(spec)


def _hub_exists():
    from gevent._hub_local import get_hub_if_exists

    return get_hub_if_exists() is not None


def _load_failure(flag, name, exc):
    """One line for an implementation gevent cannot import, naming the missing piece."""
    missing = getattr(exc, "name", None) or ""
    if missing == "dns" or missing.startswith("dns."):
        return "%s %s: the dnspython package is not installed (pip install dnspython)" % (flag, name)
    if missing == "cffi" or missing.startswith("_cffi"):
        return "%s %s: the cffi package is not installed (pip install cffi)" % (flag, name)
    detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return "%s %s: this gevent installation cannot load it (%s)" % (flag, name, detail)


def configure_gevent(resolver=None, loop=None):
    """Choose gevent's DNS resolver and event loop; call before anything creates the hub.

    ``resolver`` is one of ``RESOLVERS``, ``loop`` one of ``LOOPS``; None keeps gevent's choice
    (and its GEVENT_RESOLVER / GEVENT_LOOP environment variables). Returns the dict of setting
    name -> implementation class that was set. Raises ValueError for a bad or unloadable name,
    RuntimeError when the hub already exists (it has already picked its loop and resolver).
    """
    wanted = {}
    if resolver is not None:
        if resolver not in RESOLVERS:
            raise ValueError("unknown resolver '%s' for --resolver; choose from: %s"
                             % (resolver, ", ".join(RESOLVERS)))
        wanted["resolver"] = ("--resolver", resolver, [resolver])
    if loop is not None:
        if loop not in LOOPS:
            raise ValueError("unknown loop '%s' for --loop; choose from: %s"
                             % (loop, ", ".join(LOOPS)))
        wanted["loop"] = ("--loop", loop, LOOPS[loop])
    if not wanted:
        return {}

    import gevent

    if _hub_exists():
        raise RuntimeError(
            "configure_gevent() must run before the gevent hub exists: the hub picks its loop and"
            " resolver when it is created (something called gevent.get_hub(), slept or did I/O first)")
    # Load every implementation before setting any, so a failure leaves gevent's config untouched.
    # Loading (importing the class) is as far as the check can go: instantiating a resolver or a
    # loop would create the hub or the default loop, which is what this must not do.
    chosen = {}
    for setting_name, (flag, name, candidates) in wanted.items():
        setting = gevent.config.settings[setting_name]
        try:
            chosen[setting_name] = setting.validate(list(candidates))
        except ImportError as exc:
            raise ValueError(_load_failure(flag, name, exc)) from None
    for setting_name, implementation in chosen.items():
        gevent.config.set(setting_name, implementation)
    return chosen


def configure_monitor(max_blocking_time):
    """Turn on gevent's monitor thread (``--max-blocking-time``); call before the hub exists.

    The monitor also offers to watch memory, and warns at every hub start ("MonitorWarning:
    Unable to monitor memory usage. Install psutil.") when psutil is missing, although memory
    is only watched when GEVENT_MONITOR_MEMORY_MAX sets a limit. Without that limit the warning
    says nothing about what was asked for, so exactly that one is silenced; with a limit and no
    psutil, it stays.
    """
    import gevent

    gevent.config.monitor_thread = True
    gevent.config.max_blocking_time = max_blocking_time
    if gevent.config.max_memory_usage is None:
        warnings.filterwarnings("ignore", message=r"Unable to monitor memory usage\.",
                                module=r"gevent\._monitor")


def _normalize(spec):
    if isinstance(spec, str):
        return parse_patch_spec(spec)
    return parse_patch_spec(",".join(spec))


def _threads_running():
    threading = sys.modules.get("threading")
    if threading is None:
        return ()
    main = threading.main_thread()
    return tuple(thread.name for thread in threading.enumerate() if thread is not main)


def _patch_one(monkey, name):
    if name == "select":
        # patch_all's select=True also covers selectors; do the same for a list.
        monkey.patch_select()
        if hasattr(monkey, "patch_selectors"):
            monkey.patch_selectors()
        return
    getattr(monkey, "patch_" + name)()


def apply(spec):
    """Monkey-patch this process as ``spec`` says ("all", "none", a module list or --patch text).

    Records which watched modules were imported and which threads were running before, and
    keeps gevent's MonkeyPatchWarnings for ``report()`` (other warnings are re-issued). Returns
    the PatchState. Calling it again with the same spec (a forked worker after --preload) returns
    the same state; with another spec it raises RuntimeError, since patches cannot be undone.
    """
    global _applied

    spec = _normalize(spec)
    if _applied is not None:
        if _applied.spec == spec:
            return _applied
        raise RuntimeError("monkey-patching was already applied as %s in this process; it cannot"
                           " become %s" % (_spec_text(_applied.spec), _spec_text(spec)))
    # Before importing gevent.monkey: the snapshot is of what the application's path imported.
    imported_before = tuple(name for name in _WATCHED if name in sys.modules)
    threads_before = _threads_running()
    if _patched_already():
        # Patched before greenserve's turn, as docs/gunicorn.md recommends (patch_all() at the
        # top of gunicorn.conf.py, then preload_app) or by a wrapper that patches first: what
        # was imported since saw the cooperative modules (and "threads" started since are
        # greenlets), and gevent itself warned, at that earlier patch, about anything imported
        # before it. Nothing here is evidence of a late patch.
        imported_before = threads_before = ()

    from gevent import monkey

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if spec == "all":
            monkey.patch_all()
        elif spec != "none":
            for name in spec:
                _patch_one(monkey, name)
    gevent_warnings = []
    for warning in caught:
        if issubclass(warning.category, monkey.MonkeyPatchWarning):
            gevent_warnings.append(str(warning.message))
        else:
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno, source=warning.source)
    _applied = PatchState(spec, imported_before, threads_before, tuple(gevent_warnings))
    return _applied


def _patched_already():
    """Did gevent patch socket and ssl in this process before apply() ran?

    Reads gevent.monkey only if something imported it: importing it here would change the
    sys.modules that apply() is about to look at.
    """
    monkey = sys.modules.get("gevent.monkey")
    return monkey is not None and all(monkey.is_module_patched(name) for name in ("socket", "ssl"))


def _spec_text(spec):
    if spec == "all":
        return "all (gevent.monkey.patch_all)"
    if spec == "none":
        return "none"
    return ",".join(spec)


def _is_patched(monkey, name):
    module, attribute = _PATCHED_WHEN.get(name, (name, None))
    if attribute is None:
        return monkey.is_module_patched(module)
    return monkey.is_object_patched(module, attribute)


def _ssl_holders(message):
    """The modules and classes gevent's "ssl imported before patching" warning names as keeping
    the original ssl classes; None for any other warning."""
    if not message.startswith("Monkey-patching ssl after ssl has already been imported"):
        return None
    return re.findall(r"'([\w.]+) \(", message) + re.findall(r"<class '([\w.]+)'>", message)


def _explain_gevent_warning(message):
    """A MonkeyPatchWarning in plain words: (subject, sentence)."""
    holders = _ssl_holders(message)
    if holders is not None:
        return "ssl", (
            "ssl was imported before patching, and %s kept references to the original ssl"
            " classes: TLS connections made through them may block or fail (gevent issue #1016);"
            " do not import them before greenserve patches" % ", ".join(holders or ["some module"]))
    if message.startswith("Patching more than once"):
        return "patching", ("monkey-patching ran more than once with different modules: gevent"
                            " patched the union of them")
    if message.startswith("Patching signal but not os"):
        return "signal", ("signal is patched but os is not: SIGCHLD handlers installed later are"
                          " not called and os.waitpid may misbehave; patch os too")
    return "gevent", "gevent: " + message.split(". ")[0].rstrip(".")


def _sleep_is_gevents():
    import time

    import gevent

    return time.sleep is gevent.sleep


def _user_startup_hook(name):
    """Is ``name`` (sitecustomize, usercustomize) loaded, and one of the user's or an agent's?

    Debian's and Ubuntu's Python always load their own sitecustomize from the standard library
    directory (a link to /etc/python3.X/sitecustomize.py); it imports nothing of the network, and
    blaming it would mislead.
    """
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    if not path:
        return False
    import sysconfig

    stdlib = sysconfig.get_paths()["stdlib"]
    return not any(os.path.abspath(path).startswith(os.path.join(where, ""))
                   for where in (stdlib, os.path.realpath(stdlib)))


_STARTUP_HOOKS = ("sitecustomize", "usercustomize")
# A python -X importtime line: "import time: <self> | <cumulative> | <indent><name>"; the indent
# is one space, then two per level of nesting, and a module's line comes after its imports'.
_IMPORTTIME_LINE = re.compile(r"import time:\s+\d+ \|\s+\d+ \| ( +)(\S+)$")


def _startup_imports():
    """{hook: names of the modules its import brought in} for the startup hooks loaded here, or None.

    What a hook imported cannot be read from this process afterwards (a module holding none of
    them by name may still have imported ssl, through an agent's package; Debian's sitecustomize
    is loaded from /etc and imports nothing of the network). So Python's startup is replayed in a
    child, ``python -X importtime -c pass``, with this process's interpreter, flags and environment:
    the import tree it prints nests each module under the import that first brought it in. The
    child runs the hooks once more (an agent's bootstrap may start and end); only called when
    something was imported before patching and a hook is loaded. None when the child fails or
    takes over 10 s (a worker's boot waits for it).
    """
    hooks = [name for name in _STARTUP_HOOKS if name in sys.modules]
    if not hooks:
        return {}
    import subprocess

    flags = [flag for flag, on in (("-I", sys.flags.isolated), ("-E", sys.flags.ignore_environment),
                                   ("-s", sys.flags.no_user_site)) if on]
    try:
        child = subprocess.run([sys.executable] + flags + ["-X", "importtime", "-c", "pass"],
                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    found, pending = {}, []
    for line in child.stderr.decode("utf-8", "replace").splitlines():
        match = _IMPORTTIME_LINE.match(line)
        if match is None:
            continue
        depth, name = len(match.group(1)) // 2, match.group(2)
        brought = {name}
        while pending and pending[-1][0] > depth:
            brought |= pending.pop()[1]
        if name in hooks:
            found[name] = brought - {name}
        pending.append((depth, brought))
    return found if set(found) == set(hooks) else None


def _startup_blame(names):
    """(sure, maybe) for the startup hooks: lists of (hook, path, what of ``names`` it imported).

    Sure: the replay shows the hook's import bringing in some of ``names``. Maybe: the replay
    failed, and the hook is the user's or an agent's (not the system Python's own)."""
    imports = _startup_imports()
    sure, maybe = [], []
    for hook in _STARTUP_HOOKS:
        module = sys.modules.get(hook)
        if module is None:
            continue
        path = getattr(module, "__file__", None) or hook
        if imports is None:
            if _user_startup_hook(hook):
                maybe.append((hook, path, ()))
            continue
        took = [name for name in names
                if any(mod == name or mod.startswith(name + ".") for mod in imports.get(hook, ()))]
        if took:
            sure.append((hook, path, took))
    return sure, maybe


def _takes_from(module, names):
    """Does ``module``'s namespace hold one of the modules ``names`` (or a submodule of one), or
    something imported from one (``from requests import get``)?"""
    for value in list(vars(module).values()):
        origin = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if isinstance(origin, str) and origin.split(".")[0] in names:
            return True
    return False


def _early_importers(names):
    """What ran before greenserve and imported ``names``, as far as this process can tell.

    Returns (sure, maybe): lists of (what, path). Sure: a sitecustomize or usercustomize whose
    import brought one of them in (``_startup_blame``), or the script Python was started with (a
    wrapper) that holds one of them by name. Maybe: a user's startup hook, when replaying the
    startup failed. A .pth file or ``python -c`` leaves no trace to name.
    """
    sure, maybe = _startup_blame(names)
    sure = [(hook, path) for hook, path, _ in sure]
    maybe = [(hook, path) for hook, path, _ in maybe]
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path and _takes_from(main, names):
        sure.append(("the script Python started with", path))
    return sure, maybe


def _names(items):
    items = list(items)
    return items[0] if len(items) == 1 else "%s and %s" % (", ".join(items[:-1]), items[-1])


def late_patching_warning(state, preload=None):
    """The one line a server logs at boot when monkey-patching came too late, or None.

    ``greenserve check`` lists each finding as a row; a running server says them once, folded
    into one line with gevent's own MonkeyPatchWarning: what was imported before patching, by
    what (when the process shows it), what fails, and the fix. ``ssl`` alone, with no module
    holding its original classes, is no finding: gevent then patches it whole, and greenserve's
    master (for --certfile) and gunicorn import it themselves. ``preload`` is None, "greenserve"
    (the application was imported after patching, in the master) or "gunicorn" (its
    preload_app imported the application before the worker patched).
    """
    if state is None or state.spec == "none":
        return None
    holders, others = [], []
    for message in state.gevent_warnings:
        found = _ssl_holders(message)
        if found is None:
            others.append(_explain_gevent_warning(message)[1])
        else:
            holders.extend(found or ["some module"])
    early = [name for name in state.imported_before if name != "ssl" or holders]
    if not early and not others and not state.threads_before:
        return None
    parts = []
    if early:
        sure, maybe = _early_importers(early)
        if sure:
            by = " by %s" % _names("%s (%s)" % item for item in sure)
            place = sure[0][1]
        elif preload == "gunicorn":
            by = " by the application, which gunicorn's preload_app imports before the worker patches"
            place = None
        elif maybe:
            by = ", maybe by %s, which Python runs at startup (an agent's bootstrap often does)" % (
                _names("%s (%s)" % item for item in maybe))
            place = maybe[0][1]
        else:
            by = place = None
        parts.append("%s %s imported before it%s" % (
            _names(early), "was" if len(early) == 1 else "were", by or ""))
        if preload == "greenserve":
            parts.append("not by the application: --preload imports it after patching")
        if holders:
            parts.append("%s kept the original ssl classes, so HTTPS requests through them fail"
                         " (RecursionError) or block the worker (gevent issue #1016)" % _names(holders))
        else:
            parts.append("what %s took from socket, ssl or threading at import time stays blocking"
                         % ("it" if len(early) == 1 else "they"))
    parts.extend(others)
    if state.threads_before:
        parts.append("%d OS thread(s) were already running (%s): they stay real threads, and locks"
                     " shared with them block the worker"
                     % (len(state.threads_before), ", ".join(state.threads_before)))
    if early:
        if place is not None:
            fix = ("in %s, call gevent.monkey.patch_all() before those imports, or remove them"
                   " (the application can import them itself, after greenserve patches)" % place)
        elif preload == "gunicorn":
            fix = ("put 'from gevent import monkey; monkey.patch_all()' at the top of"
                   " gunicorn.conf.py, or turn preload_app off (docs/gunicorn.md)")
        else:
            fix = ("whatever imports them before greenserve (a sitecustomize, a .pth file, an agent's"
                   " bootstrap such as ddtrace-run, a wrapper script) must call"
                   " gevent.monkey.patch_all() first, or leave those imports to the application")
        parts.append("fix: " + fix)
    head = "gevent's monkey-patching came too late: " if early or state.threads_before else (
        "gevent's monkey-patching: ")
    tail = "" if preload == "gunicorn" else "; greenserve check MODULE:APP lists each finding"
    return head + "; ".join(parts) + tail


def _startup_rows(names):
    """The warning rows naming the startup hooks that imported some of ``names`` before greenserve."""
    # Before greenserve's first line ran: the application cannot have imported them.
    sure, maybe = _startup_blame(names)
    fix = ("have it import gevent.monkey and call patch_all() first, or import those modules later"
           " (an agent's bootstrap often is the cause: ddtrace-run, newrelic-admin, opentelemetry-instrument)")
    rows = [Row("warning", "startup", "%s ran when Python started, before greenserve, and imported %s"
                " (%s); %s" % (hook, _names(took), path, fix)) for hook, path, took in sure]
    if maybe:
        rows.append(Row("warning", "startup", "%s ran when Python started, before greenserve, and may be"
                        " what imported them; %s" % (" and ".join(hook for hook, _, _ in maybe), fix)))
    return rows


def _warning_rows(state, monkey):
    rows = []
    mentioned = []
    for message in state.gevent_warnings:
        subject, sentence = _explain_gevent_warning(message)
        rows.append(Row("warning", subject, sentence))
        mentioned.append(sentence)
    if state.spec != "none":
        for name in state.imported_before:
            if name == "ssl":
                if not _is_patched(monkey, "ssl") or any(s.startswith("ssl ") for s in mentioned):
                    continue
                sentence = ("ssl was imported before patching: SSL sockets created by code that"
                            " kept a reference to the original ssl module (from ssl import ...,"
                            " subclasses of SSLContext) may block")
            else:
                if any((" %s." % name) in s or (" %s," % name) in s for s in mentioned):
                    continue  # already named by gevent's ssl warning
                sentence = ("%s was imported before patching: what it took from socket, ssl or"
                            " threading at import time may stay blocking; let the application"
                            " import it, after greenserve patches" % name)
            rows.append(Row("warning", name, sentence))
        if state.imported_before:
            rows.extend(_startup_rows(state.imported_before))
        if state.threads_before:
            rows.append(Row("warning", "threads", (
                "%d OS thread(s) were already running before patching (%s): they stay real"
                " threads, and locks shared with them block the worker"
                % (len(state.threads_before), ", ".join(state.threads_before)))))
    if isinstance(state.spec, tuple):
        pairs = (("ssl", "socket", "ssl is patched but socket is not: TLS runs over blocking sockets"),
                 ("dns", "socket", "dns is patched but socket is not: lookups cooperate, connections"
                                   " still block"),
                 ("signal", "os", "signal is patched but os is not: SIGCHLD handlers installed later"
                                  " are not called and os.waitpid may misbehave; patch os too"))
        for name, needs, sentence in pairs:
            if name in state.spec and needs not in state.spec:
                rows.append(Row("warning", name, sentence))
    return rows


def _implementation(setting_name):
    """(short name, class) of gevent.config's loop or resolver; never creates the hub."""
    import gevent

    setting = gevent.config.settings[setting_name]
    implementation = setting.get()
    path = "%s.%s" % (implementation.__module__, implementation.__name__)
    for short, target in setting.shortname_map.items():
        if target == path:
            return short, implementation
    return path, implementation


def _gevent_rows():
    import gevent
    import greenlet

    from gevent._hub_local import get_hub_if_exists

    rows = [Row("gevent", "versions", "gevent %s, greenlet %s" % (gevent.__version__,
                                                                  greenlet.__version__))]
    hub = get_hub_if_exists()
    loop_name, loop_class = _implementation("loop")
    if hub is not None:
        loop_class = type(hub.loop)
    rows.append(Row("gevent", "loop", "%s (%s.%s): %s" % (
        loop_name, loop_class.__module__, loop_class.__name__, _LOOP_NOTES.get(loop_name, ""))))
    resolver_name, resolver_class = _implementation("resolver")
    # hub._resolver, not hub.resolver: the property would create a resolver to answer.
    existing = getattr(hub, "_resolver", None) if hub is not None else None
    if existing is not None:
        resolver_class = type(existing)
    rows.append(Row("gevent", "resolver", "%s (%s.%s): %s" % (
        resolver_name, resolver_class.__module__, resolver_class.__name__,
        _RESOLVER_NOTES.get(resolver_name, ""))))
    if gevent.config.monitor_thread:
        rows.append(Row("gevent", "monitor", (
            "on: a greenlet that keeps the loop from running for more than %g s is reported"
            " with its stack" % gevent.config.max_blocking_time)))
    else:
        rows.append(Row("gevent", "monitor", (
            "off: --max-blocking-time SECONDS (or GEVENT_MONITOR_THREAD_ENABLE=1) has each worker"
            " report any greenlet that blocks the loop, with its stack")))
    rows.append(Row("gevent", "hub", "created in this thread" if hub is not None
                    else "not created yet (the loop and resolver can still be changed)"))
    return rows


def report(state=None):
    """Rows describing this process: what is patched, what is not and what to use, warnings, gevent.

    ``state`` defaults to what ``apply()`` did here; without it the rows still say what is
    patched (the application may have patched itself). Imports gevent; never creates the hub.
    """
    from gevent import monkey

    state = state if state is not None else _applied
    rows = []
    if state is None:
        rows.append(Row("summary", "gevent monkey-patching",
                        "not applied by greenserve in this process"))
    else:
        rows.append(Row("summary", "gevent monkey-patching", _spec_text(state.spec)))

    for name in _patchable():
        if name == "builtins":
            continue  # nothing to patch on Python 3: its import locks are per module
        if _is_patched(monkey, name):
            detail = _PATCHED_MEANS.get(name, "patched")
            if name == "time" and not _sleep_is_gevents():
                detail = "patched, but time.sleep is no longer gevent.sleep: something replaced it again"
            rows.append(Row("patched", name, detail))
        else:
            rows.append(Row("not patched", name, _UNPATCHED_MEANS.get(name, "not patched")))

    for subject, module, detail in _NEVER_COOPERATIVE:
        if module == "psycopg2" and module in sys.modules:
            extensions = sys.modules.get("psycopg2.extensions")
            if extensions is not None and extensions.get_wait_callback() is not None:
                rows.append(Row("patched", "psycopg2 (loaded)",
                                "a wait callback is set (psycogreen): queries wait cooperatively"))
                continue
        if module is not None and module in sys.modules:
            subject += " (loaded)"
        rows.append(Row("not patched", subject, detail))

    if state is not None:
        rows.extend(_warning_rows(state, monkey))
    if "eventlet" in sys.modules:
        rows.append(Row("warning", "eventlet", (
            "eventlet is loaded: it is incompatible with gevent (both replace socket, threading"
            " and the event loop); remove it from the application's imports")))
    rows.extend(_gevent_rows())
    return rows


def format_report(rows):
    """Plain text for a terminal: the summary line, then one line per row under its group heading."""
    lines = []
    width = max([len(row.subject) for row in rows if row.status in ("patched", "not patched")]
                + [8])
    for status, heading in _GROUPS:
        group = [row for row in rows if row.status == status]
        if heading is None:
            lines.extend("%s: %s" % (row.subject, row.detail) for row in group)
            continue
        lines.append(heading)
        if not group:
            lines.append("  (none)")
        for row in group:
            if status == "warning":
                # Warning details are whole sentences that name their subject.
                lines.append("  - %s" % row.detail)
            else:
                lines.append("  %-*s  %s" % (width, row.subject, row.detail))
    return "\n".join(lines) + "\n"

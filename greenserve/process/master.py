"""The master as every front door runs it: the arbiter, each worker's listeners and boot, the startup lines.

The ``greenserve`` command and ``greenserve.run()`` (and through it PasteDeploy's ``workers``)
build one ``Master`` from a checked ``settings.Config``, the listening sockets the master bound,
and a ``boot(listeners)`` function that runs in each worker, after gevent's order
(``process.worker``), and returns the servers to start. What differs between them is only that
function; the rest -- a socket per worker with ``--reuse-port``, ``wsgi.multiprocess``, the
lines that say where the master listens -- is here once, so that
logs read the same however the master runs.
"""

import os
import sys

from greenserve.process import arbiter


class Master:
    """Fork ``config.workers`` workers serving ``listeners`` and watch them until a signal stops the master.

    ``boot(listeners)`` runs in each worker and returns its servers (each with ``start()`` and
    ``stop(timeout)``); with ``--reuse-port`` the listeners are that worker's own. ``log`` has
    info/warning/error; ``reopen_logs()`` runs on SIGUSR1 in the master and the workers.
    ``notes`` are ``(level, line)`` pairs said once a worker serves, with the listening lines;
    ``readiness`` is a ``process.daemon`` launcher to tell then. ``certificate`` (a
    ``tls.ServerCertificate``) says the listeners serve HTTPS, and is renewed on SIGHUP;
    ``preloaded`` that the master imported the application (and said what was imported before
    patching). ``hooks``: the server hooks (``process.hooks.Hooks``), made from ``config`` when
    not given (``HookError`` when a master hook's string does not resolve). ``reread(running_config)``,
    when given, loads the settings again on SIGHUP and returns ``(config, warning lines)``
    (``entry.configfile.Loader.reload``); the new generation of workers, the arbiter and the
    hooks run with that config. ``default_name`` is the processes' titles' name when
    ``config.proc_name`` is not set (the command's MODULE:APP, as gunicorn's default_proc_name).
    ``systemd``: the ``process.systemd.Notifier`` of NOTIFY_SOCKET, when the front door took it
    out of the environment already (before a --preload import); else it is taken here.
    """

    def __init__(self, config, listeners, boot, log, reopen_logs=None, notes=(), readiness=None, certificate=None,
                 preloaded=False, hooks=None, reread=None, default_name="greenserve", systemd=None):
        from greenserve.process.hooks import Hooks

        self.config = config
        self.default_name = default_name
        self.reread = reread
        self.listeners = listeners
        self.boot = boot
        self.log = log
        self.reopen_logs = reopen_logs
        self.notes = list(notes)
        self.readiness = readiness
        self.certificate = certificate
        self.ssl = certificate is not None
        self.preloaded = preloaded
        self.heartbeat_fd = None  # in a worker: its pipe to the master
        self.statsd_address = None  # --statsd-host, resolved (statsd.resolve) by the master at start
        self.control = None  # process.control.ControlSocket, once bound
        self.hooks = hooks if hooks is not None else Hooks(config, log)
        self.arbiter = arbiter.Arbiter(
            self._worker_main, config, log=log, on_ready=self._on_ready, reopen_logs=reopen_logs,
            close_in_child=[readiness] if readiness is not None else (), on_reload=self.reload, hooks=self.hooks,
            on_stop=self._close_listeners,
        )
        self.hooks.server.arbiter = self.arbiter
        self.hooks.server.pidfile = config.pid
        self.hooks.server.listening(listeners, self.ssl)
        self.arbiter.systemd = systemd if systemd is not None else systemd_notifier()
        if not config.reuse_port:  # (with it, each worker's own socket has the queue)
            from greenserve.listeners import ListenQueueCheck

            self.arbiter.listen_check = ListenQueueCheck(listeners)

    @property
    def name(self):
        """The name in the processes' titles (--name, else ``default_name``)."""
        return self.config.proc_name or self.default_name

    @property
    def failure(self):
        """The one-line error of the worker that stopped the master, if one did."""
        return self.arbiter.failure

    def run(self):
        """Serve until a signal stops the master; return its exit code.

        on_starting runs first (an exception in it propagates: the start fails), on_exit last.
        """
        hooks = self.hooks
        hooks.server.pid = os.getpid()  # (after --daemon detached)
        try:
            hooks.call_starting("on_starting", hooks.server)
            hooks.call_master("nworkers_changed", hooks.server, self.arbiter.target, None)
        except arbiter.StopMaster as exc:
            self.arbiter.failure = "greenserve: error: %s" % exc
            sys.stderr.write(self.arbiter.failure + "\n")
            return arbiter.EXIT_USAGE
        watcher = None
        if self.config.reload:
            from greenserve.process.reloader import Watcher

            # Forked before the arbiter installs its signal handlers: the watcher keeps the defaults.
            watcher = Watcher(self.config, self.listeners, self.log).start()
        # After the watcher's fork: only the master has the master's title.
        self._set_title(at_start=True)
        try:
            # After the --reload watcher's fork: that process must not hold the socket.
            if self.config.metrics_bind:
                try:
                    self._serve_metrics()
                except ValueError as exc:  # listeners.ListenerError
                    self.arbiter.failure = "greenserve: error: --metrics-bind %s: %s" % (self.config.metrics_bind, exc)
                    sys.stderr.write(self.arbiter.failure + "\n")
                    return arbiter.EXIT_USAGE
            if self.config.statsd_host is not None:
                try:
                    self._start_statsd()
                except (ValueError, OSError) as exc:
                    self.arbiter.failure = "greenserve: error: --statsd-host %s: %s" % (self.config.statsd_host, exc)
                    sys.stderr.write(self.arbiter.failure + "\n")
                    return arbiter.EXIT_USAGE
            if not self.config.control_socket_disable:
                refusal = self._serve_control()
                if refusal is not None:
                    self.arbiter.failure = "greenserve: error: %s" % refusal
                    sys.stderr.write(self.arbiter.failure + "\n")
                    return arbiter.EXIT_USAGE
            if self.arbiter.upgrade is not None:
                self.arbiter.upgrade.close_untaken()
            code = self.arbiter.run()
        finally:
            if watcher is not None:
                watcher.stop()
            if self.arbiter.upgrade is not None:
                self.arbiter.upgrade.ending()
            if self.arbiter.observer is not None:
                self.arbiter.observer.close()
            hooks.call_master("on_exit", hooks.server)
        if code == 0:
            self.log.info("stopped")
        return code

    def _serve_metrics(self):
        """--metrics-bind: bind its socket and have the arbiter's loop serve GET /metrics."""
        from greenserve import listeners
        from greenserve.observe.metrics import MasterMetrics

        spec = listeners.bind_spec(self.config.metrics_bind)
        upgrade = self.arbiter.upgrade
        # A new master of a binary upgrade takes the old master's: the address is held by it.
        sock = upgrade.take("metrics", spec) if upgrade is not None else None
        if sock is None:
            # Scrapers are few: a short queue. The unix socket gets --unix-socket-mode and group.
            sock = listeners.make_listener(spec, 64, False, self.config.unix_socket_mode, self.config.unix_socket_group)
        metrics = MasterMetrics(listeners.adopt(sock))  # accept() is socket.socket's (--metrics-bind only)
        if upgrade is not None:
            # (Its unix socket file stays when another master serves it.)
            upgrade.hand_on("metrics", metrics.sock, keep_file=lambda: setattr(metrics, "unix_path", None))
        metrics.unix_path = spec[1] if spec[0] == "unix" else None
        metrics.multiproc_dir = self.config.prometheus_multiproc_dir
        if not self.config.reuse_port:  # (with it, each worker's socket has the queue)
            metrics.listeners = self.listeners
        metrics.arbiter = self.arbiter
        self._observe(metrics)

    def _start_statsd(self):
        """--statsd-host: resolve it once, here (a worker never waits on DNS), and send the
        worker count from the arbiter's loop."""
        from greenserve.observe.statsd import StatsdSink, resolve

        self.statsd_address = resolve(self.config.statsd_host)
        config = self.config
        sink = StatsdSink(self.statsd_address, config.statsd_prefix, config.dogstatsd_tags, log=self.log)
        if config.enable_backlog_metric and not config.reuse_port:  # (with it, each worker's socket has the queue)
            sink.listeners = self.listeners
        self._observe(sink)

    def _serve_control(self):
        """The control socket (``gunicornc``): bound here, after the --reload watcher's fork, and
        served from the arbiter's loop. Returns the start's refusal (a line), or None."""
        from greenserve.process import control

        config = self.config
        path = control.resolve(config.control_socket)
        try:
            sock = control.bind(path, config.control_socket_mode)
        except control.ControlError as exc:
            if config.control_socket is not None:
                return "--control-socket %s: %s" % (path, exc)
            # The default path is every master's on this account: one there already keeps it.
            self.log.warning("control socket: %s; this master runs without one (--control-socket PATH gives it "
                             "its own)" % exc)
            return None
        observer = self.arbiter.observer
        metrics = next((sink for sink in getattr(observer, "sinks", (observer,)) if hasattr(sink, "reports")), None)
        self.control = control.ControlSocket(sock, path, config.control_socket_mode, self.arbiter, config,
                                             self.listeners, metrics, self.log)
        self.notes.append(("info", "control socket: gunicornc -s %s" % path))
        self._observe(self.control)
        return None

    def _observe(self, observer):
        """One more observer of the arbiter's worker events (``observe.stats.Sink``)."""
        if self.arbiter.observer is None:
            self.arbiter.observer = observer  # (observe.stats stays out of a plain master)
            return
        from greenserve.observe.stats import combine

        self.arbiter.observer = combine(self.arbiter.observer, observer)

    def _worker_statsd(self):
        """In a worker: its own statsd socket, flushed once per turn of its event loop."""
        if self.statsd_address is None:
            return None
        import gevent

        from greenserve.observe.statsd import StatsdSink

        return StatsdSink(self.statsd_address, self.config.statsd_prefix, self.config.dogstatsd_tags,
                          schedule=gevent.get_hub().loop.run_callback, log=self.log)

    def reload(self):
        """On SIGHUP, in the master, before the new generation of workers is forked: what a reload
        renews besides the application's code (which each new worker imports afresh).
        The on_reload hook runs last, after what is renewed.

        Returns False to cancel the reload: the running workers keep serving. That is what a
        config file that no longer loads does, as nginx does with a broken nginx.conf on
        reload: new code started with the old settings would be a pairing nobody deployed, and
        gunicorn's way (the master exits) takes the service down for a typo. One more SIGHUP,
        once the file is fixed, reloads both.
        """
        if self.reread is not None:
            try:
                config, warnings = self.reread(self.config)
                self.hooks.reconfigure(config)
            except ValueError as exc:  # SettingError, the config file's ConfigError, a hook's HookError
                self.log.error(
                    "SIGHUP: not reloading, the workers keep serving with the running settings: %s" % exc
                )
                return False
            for line in warnings:
                self.log.warning(line)
            self.config = config
            if self.control is not None:
                self.control.config = config  # (its show config)
            set_environment(config)  # as gunicorn's Arbiter.setup does on each reload
            self.arbiter.configure(config)
            if self.certificate is not None:
                self.certificate.config = config
        if self.certificate is not None:
            # A renewed certificate on disk (certbot, cert-manager): the new workers serve it.
            self.certificate.renew(self.log)
        self._set_title()  # the config file may have renamed it
        self.hooks.call_master("on_reload", self.hooks.server)
        return None

    def _set_title(self, at_start=False):
        from greenserve.process import title

        if not title.set_title("master", self.name) and at_start and self.config.proc_name is not None:
            self.log.warning(
                "--name %s: process titles need setproctitle, which is not installed: "
                "pip install setproctitle" % self.config.proc_name
            )

    def _close_listeners(self):
        """A stop began: the master's copies of the listening sockets go at once.

        The workers stop accepting now; while the master held its copy, the kernel went on
        completing connections into a queue no one would accept from, and reset them all when
        the master exited, after the drain: a load balancer had sent each its request, and does
        not retry a POST that met a reset. Closed (once the workers have closed theirs), the
        port refuses new connections, which every balancer retries on another server.
        """
        for sock in self.listeners:
            sock.close()

    def refuse(self, message):
        """In a worker: end it with a one-line usage error, on its standard error (the terminal,
        or the error log of a daemon) and to the master, whose --daemon launcher prints it."""
        line = "greenserve: error: %s" % message
        sys.stderr.write(line + "\n")
        arbiter.tell_master(self.heartbeat_fd, line)
        raise SystemExit(arbiter.EXIT_USAGE) from None

    def _worker_main(self, heartbeat_fd):
        from greenserve import listeners
        from greenserve.process import title, worker

        # First: ps tells the worker from its master while it imports the application.
        title.set_title("worker", self.name)
        self.heartbeat_fd = heartbeat_fd
        served = self.listeners
        if self.config.reuse_port:
            # Before worker.serve() drops privileges (see listeners.worker_listener).
            try:
                served = [listeners.worker_listener(sock, self.config.backlog) for sock in self.listeners]
            except OSError as exc:
                self.refuse("--reuse-port: a worker cannot listen: %s" % listeners.reason(exc))
            for sock in self.listeners:
                sock.close()  # the master's placeholder: the master keeps its own copy
        # The master's plain sockets (listeners.py) as the socket.socket objects servers take.
        served = [listeners.adopt(sock) for sock in served]
        from greenserve.process.hooks import HookError, HookRaised

        try:
            return worker.serve(
                heartbeat_fd, lambda: self._boot(served), self.config, self.log, self.reopen_logs,
                # With a preloaded application the master said it, having patched before the import.
                warn_late_patching=not self.preloaded and self.arbiter.forked == 0, hooks=self.hooks,
            )
        except HookError as exc:  # a worker hook's 'module:function' does not resolve
            self.refuse(str(exc))
        except HookRaised as exc:  # post_fork or post_worker_init raised: its traceback is logged
            arbiter.tell_master(heartbeat_fd, "greenserve: error: %s" % exc)
            raise SystemExit(arbiter.EXIT_BOOT_ERROR) from None

    def _boot(self, served):
        servers = self.boot(served)
        worker_slot = self.arbiter.worker_slot
        if worker_slot is not None:  # --sticky
            # Each server by its index in the list, which every worker's boot makes the same.
            for index, server in enumerate(servers):
                if hasattr(server, "enable_sticky"):  # greenserve's WSGIServer
                    server.enable_sticky(worker_slot, index)
                else:
                    self.log.warning("--sticky: %r is not greenserve's WSGIServer: its clients are served where "
                                     "they connect" % (server,))
        if self.config.metrics_bind or self.statsd_address is not None:
            from greenserve.observe.stats import WorkerStats, combine

            # One per worker, shared by its servers (its listeners).
            stats = combine(WorkerStats() if self.config.metrics_bind else None, self._worker_statsd())
            for server in servers:
                if hasattr(server, "stats"):  # greenserve's WSGIServer (not a plain gevent server)
                    server.stats = stats
        if self.config.worker_count() > 1:
            # PEP 3333: another process may serve the same application. Decided by the worker
            # count at start: a master started with one worker and grown by TTIN still says False.
            for server in servers:
                _say_multiprocess(server)
        return servers

    def _on_ready(self):
        from greenserve import listeners
        from greenserve.process import patching

        for level, note in self.notes:
            getattr(self.log, level)(note)
        per_worker = " (a socket per worker: --reuse-port)" if self.config.reuse_port else ""
        if self.config.protocol == "uwsgi":  # not HTTP, whatever the address's scheme says
            per_worker += " speaking uwsgi (nginx's uwsgi_pass) to %s" % ",".join(self.config.uwsgi_allow_ips)
        for listener in self.listeners:
            self.log.info(listeners.listening_line(listener, self.ssl, per_worker))
        self.log.info(
            "master pid %d, %d worker(s); gevent monkey-patching: %s; hot path: %s"
            % (os.getpid(), self.config.worker_count(), patching.patch_text(patching.spec_of(self.config)), hot_path())
        )
        if self.readiness is not None:
            self.readiness.ready()
        self.hooks.call_master("when_ready", self.hooks.server)


def systemd_notifier():
    """The ``process.systemd.Notifier`` of NOTIFY_SOCKET, which it takes out of the environment
    (of the workers and the application, forked and imported later); None without it, and then
    nothing of systemd's is imported."""
    if not os.environ.get("NOTIFY_SOCKET"):
        return None
    from greenserve.process import systemd

    return systemd.from_environ()


def _say_multiprocess(server):
    """Set ``wsgi.multiprocess`` (PEP 3333) in a WSGI server's environ: other workers serve too.

    greenserve's ``WSGIServer.environ`` and gevent.pywsgi's are both the dict every request's
    environ starts from; a server without one (a plain StreamServer) is not WSGI.
    """
    environ = getattr(server, "environ", None)
    if isinstance(environ, dict):
        environ["wsgi.multiprocess"] = True


def hot_path():
    """Which build of the hot path the workers run, as the startup line says it after 'hot path: ':
    'compiled' or 'pure Python: why'.

    Read from the import finder's decision (the files on disk), not by importing the hot path:
    the master serves no request, and importing the parser, wsgi and connection (gevent under
    them) would grow its RSS by megabytes for one word of a log line.
    """
    from greenserve import _accel

    if _accel.compiled():
        return "compiled"
    return "pure Python: %s" % _accel.why_pure()


def set_environment(config):
    """raw_env (gunicorn's -e KEY=VALUE) in this process's environment, which every worker
    forked after inherits: set in the master at start, before the hooks, --preload and the
    application run, and again on SIGHUP (a variable the file no longer sets keeps its value,
    as in gunicorn)."""
    os.environ.update(entry.split("=", 1) for entry in config.raw_env)  # each checked KEY=VALUE

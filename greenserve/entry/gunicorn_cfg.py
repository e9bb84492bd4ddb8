"""``server.cfg`` and ``worker.cfg`` as a gunicorn.conf.py's hooks read them: gunicorn's Config over greenserve's.

A hook copied from a gunicorn deployment reads the configuration by gunicorn's names
(``server.cfg.accesslog``, ``server.cfg.preload_app``, ``worker.cfg.workers``) and gunicorn's
computed properties (``cfg.address``, ``cfg.env``, ``cfg.is_ssl``, ``cfg.uid``,
``cfg.worker_class_str``, ``cfg.settings["workers"].get()``). ``GunicornConfig`` answers each
from greenserve's ``settings.Config``: greenserve's own names too, so a hook written for
greenserve reads the same object. The gunicorn settings that mean nothing here
(configfile.GUNICORN_UNUSED) read as the file set them, else as gunicorn's default says.
"""

import os

from greenserve.entry.configfile import GUNICORN_ALIASES, GUNICORN_UNUSED
from greenserve.settings import SETTINGS_BY_NAME

# gunicorn's defaults of the settings greenserve does not use, for a hook that reads one the
# file left unset (gunicorn.config, 27.0). worker_class: what greenserve's workers are.
GUNICORN_DEFAULTS = {
    "worker_class": "gevent",
    "threads": 1,
    "worker_tmp_dir": None,
    "raw_paste_global_conf": [],
    "pythonpath": None,
    "paste": None,
    "spew": False,
    "check_config": False,
    "print_config": False,
    "initgroups": False,
    "tmp_upload_dir": None,
    "secure_scheme_headers": {"X-FORWARDED-PROTOCOL": "ssl", "X-FORWARDED-PROTO": "https", "X-FORWARDED-SSL": "on"},
    "enable_stdio_inheritance": False,
    "disable_redirect_access_to_syslog": False,
    "reload_engine": "auto",
    "config": "./gunicorn.conf.py",
    "default_proc_name": "",
}


class _Setting:
    """``cfg.settings[name]``: what a hook reads of gunicorn's Setting objects."""

    __slots__ = ("name", "value")

    def __init__(self, name, value):
        self.name = name
        self.value = value

    def get(self):
        return self.value


class GunicornConfig:
    """The ``cfg`` given to hooks: ``config`` (settings.Config) read by gunicorn's names.

    ``file_values``: ``{gunicorn name: value}`` of the unused gunicorn settings the config file
    set; ``app_uri``: the application's MODULE:APP (gunicorn's default process name).
    """

    def __init__(self, config, file_values=None, app_uri=None):
        self._config = config
        self._file_values = dict(file_values or {})
        self._app_uri = app_uri

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._value(name)

    def _value(self, name):
        config = self._config
        if name in SETTINGS_BY_NAME:
            return getattr(config, name)
        if name in GUNICORN_ALIASES:
            return getattr(config, GUNICORN_ALIASES[name])
        if name in self._file_values:
            return self._file_values[name]
        if name == "default_proc_name":
            return self._app_uri or ""
        if name in GUNICORN_DEFAULTS:
            return GUNICORN_DEFAULTS[name]
        if name in GUNICORN_UNUSED:
            return None  # (a gunicorn setting with no default of interest: HTTP/2's, the dirty arbiters')
        raise AttributeError("%r is neither a greenserve setting nor a gunicorn one (docs/settings.md)" % name)

    def __dir__(self):
        return sorted(set(SETTINGS_BY_NAME) | set(GUNICORN_ALIASES) | set(GUNICORN_UNUSED) | set(type(self).__dict__))

    def __repr__(self):
        return "<greenserve config, read by gunicorn's names>"

    # --- gunicorn's Config properties ---

    @property
    def settings(self):
        names = set(GUNICORN_ALIASES) | set(GUNICORN_UNUSED) | set(SETTINGS_BY_NAME)
        return {name: _Setting(name, self._value(name)) for name in sorted(names)}

    def get(self, name):
        return self._value(name)

    def set(self, name, value):
        """gunicorn's ``cfg.set(name, value)``: a setting of greenserve's changed, validated
        (SettingError naming it), in this process; a gunicorn setting unused here is kept."""
        setting = SETTINGS_BY_NAME.get(GUNICORN_ALIASES.get(name, name))
        if setting is None:
            if name not in GUNICORN_UNUSED:
                raise AttributeError("No configuration setting for: %s" % name)
            self._file_values[name] = value
            return
        self._config.update(**{setting.name: value})

    @property
    def address(self):
        """The bind addresses as gunicorn parses them: (host, port), a unix path, or an fd."""
        addresses = []
        for spec in self._config.bind_specs():
            addresses.append(spec[1] if spec[0] in ("unix", "fd") else (spec[1], spec[2]))
        return addresses

    @property
    def worker_class_str(self):
        return str(self._file_values.get("worker_class", GUNICORN_DEFAULTS["worker_class"]))

    @property
    def proc_name(self):
        return getattr(self._config, "proc_name", None) or self._app_uri or "greenserve"

    @property
    def env(self):
        return dict(entry.split("=", 1) for entry in self._config.raw_env)

    @property
    def sendfile(self):
        return self._config.sendfile

    @property
    def is_ssl(self):
        return self._config.certfile is not None

    @property
    def ssl_options(self):
        return {name: getattr(self._config, name) for name in ("certfile", "keyfile", "ca_certs", "cert_reqs", "ciphers")}

    @property
    def uid(self):
        return _account_id(self._config.user, "pwd", os.geteuid)

    @property
    def gid(self):
        return _account_id(self._config.group, "grp", os.getegid)

    @property
    def reuse_port(self):
        return self._config.reuse_port


def _account_id(name, module, current):
    """gunicorn's cfg.uid and cfg.gid: the number of the account named (or given), else ours."""
    if name is None:
        return current()
    text = str(name)
    if text.isdigit():
        return int(text)
    database = __import__(module)
    entry = database.getpwnam(text) if module == "pwd" else database.getgrnam(text)
    return entry[2]


def hook_view(loader, app_uri):
    """The ``cfg`` hooks are given, made from each load's Config (process.hooks.Hooks' ``view``):
    gunicorn's names over greenserve's settings, with the unused gunicorn settings the file set
    (``loader``: the ``configfile.Loader`` of the run)."""
    return lambda config: GunicornConfig(config, loader.gunicorn_values, app_uri)

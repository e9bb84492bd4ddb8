"""The settings table: one source for the CLI, the API and docs/settings.md."""

import os

import pytest

from greenserve import cli
from greenserve.settings import SETTINGS, Config, SettingError, parse_bind, render_markdown
from tests.conftest import ROOT


def test_the_settings_page_is_generated_from_the_table():
    with open(os.path.join(ROOT, "docs", "settings.md"), encoding="utf-8") as page:
        committed = page.read()
    assert committed == render_markdown(), (
        "docs/settings.md is out of date: run `python -m greenserve.settings > docs/settings.md`"
    )


def test_every_setting_has_help_a_section_and_a_valid_default():
    names = set()
    for setting in SETTINGS:
        assert setting.name not in names
        names.add(setting.name)
        assert setting.help.endswith(".") or setting.help.endswith(")"), setting.name
        assert setting.section
        if setting.default is not None:
            assert setting.convert(setting.default) == setting.default, setting.name


def test_every_cli_setting_is_a_flag():
    help_text = cli.build_parser().format_help()
    for setting in SETTINGS:
        if setting.cli:
            flag = "--no-" + setting.name.replace("_", "-") if setting.boolean else "--" + setting.name.replace("_", "-")
            assert flag in help_text, setting.name


def test_config_defaults_and_validation():
    config = Config()
    assert config.limit_request_line == 4094
    assert config.limit_request_fields == 100
    assert config.limit_request_field_size == 8190
    assert config.keepalive == 5.0
    config = Config(keepalive="2.5", limit_request_line="8190")
    assert config.keepalive == 2.5 and config.limit_request_line == 8190
    with pytest.raises(TypeError, match="unknown setting 'keep_alive'"):
        Config(keep_alive=3)
    for bad in ({"keepalive": 0}, {"keepalive": "x"}, {"backlog": True}, {"root_path": "app"}, {"log_level": "loud"}):
        with pytest.raises(SettingError):
            Config(**bad)


@pytest.mark.parametrize(
    "text, spec",
    [
        ("127.0.0.1:8000", ("tcp", "127.0.0.1", 8000)),
        (":8000", ("tcp", "0.0.0.0", 8000)),
        ("8000", ("tcp", "0.0.0.0", 8000)),
        ("localhost", ("tcp", "localhost", 8000)),
        ("[::1]:9000", ("tcp", "::1", 9000)),
        ("[::]:9000", ("tcp", "::", 9000)),
        ("unix:/tmp/app.sock", ("unix", "/tmp/app.sock")),
        ("fd://3", ("fd", 3)),
    ],
)
def test_bind_addresses(text, spec):
    assert parse_bind(text) == spec


@pytest.mark.parametrize("text", ["", "1.2.3.4:99999", "::1:80", "[::1", "host:port", "unix:", "fd://x", "[::1]80"])
def test_invalid_bind_addresses(text):
    with pytest.raises(SettingError):
        parse_bind(text)


def test_the_parsers_limits_default_to_the_table():
    # One source of truth: Limits() (the parser's, used alone by tests and bench/parser.py)
    # holds the settings' defaults, not a copy of them.
    from greenserve.http.parser import Limits

    limits, config = Limits(), Config()
    assert limits.max_request_line == config.limit_request_line
    assert limits.max_header_count == config.limit_request_fields
    assert limits.max_header_size == config.limit_request_field_size
    assert limits.max_body == config.limit_request_body


# The modules a request passes through, and the process model: none of them reads anything from
# the package face (greenserve/__init__.py), which lazily imports them.
CORE = ["settings.py", "server.py", "connection.py", "wsgi.py", "listeners.py", "proxy.py", "accesslog.py",
        "errorlog.py", "http", "process"]


def test_the_core_never_imports_the_package_face():
    import ast

    package = os.path.join(ROOT, "greenserve")
    offenders = []
    for entry in CORE:
        path = os.path.join(package, entry)
        files = [path] if entry.endswith(".py") else [
            os.path.join(path, name) for name in sorted(os.listdir(path)) if name.endswith(".py")
        ]
        for filename in files:
            with open(filename, encoding="utf-8") as source:
                tree = ast.parse(source.read(), filename)
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom) and node.module == "greenserve":
                    # Submodules (greenserve._accel, greenserve.accesslog) are not the face.
                    for alias in node.names:
                        if not os.path.exists(os.path.join(package, alias.name + ".py")) and \
                                not os.path.isdir(os.path.join(package, alias.name)):
                            offenders.append("%s: from greenserve import %s" % (os.path.relpath(filename, ROOT), alias.name))
    assert offenders == []

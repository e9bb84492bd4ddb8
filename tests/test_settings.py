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

"""The settings table: one source for the CLI, the API and docs/settings.md."""

import os

import pytest

from greenserve.entry import cli
from greenserve.entry.configfile import settings_page
from greenserve.settings import SETTINGS, Config, SettingError, cli_flags, parse_bind
from tests.conftest import ROOT


def test_the_settings_page_is_generated_from_the_table():
    with open(os.path.join(ROOT, "docs", "settings.md"), encoding="utf-8") as page:
        committed = page.read()
    assert committed == settings_page(), (
        "docs/settings.md is out of date: run `python -m greenserve.entry.configfile > docs/settings.md`"
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
            # A flag of its own spelling (proc_name is gunicorn's -n/--name) or the name with dashes.
            flags = ["--no-" + setting.name.replace("_", "-")] if setting.boolean and not setting.flags \
                else cli_flags(setting)
            for flag in flags:
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
    for bad in ({"keepalive": -1}, {"keepalive": "x"}, {"backlog": True}, {"root_path": "app"}, {"log_level": "loud"}):
        with pytest.raises(SettingError):
            Config(**bad)


@pytest.mark.parametrize(
    "values, systemd_sockets, message",
    [
        ({"keyfile": "key.pem"}, 0, "--keyfile needs --certfile"),
        ({"reuse_port": True}, 1, "--reuse-port cannot be used with systemd socket activation: systemd owns the sockets"),
        ({"reuse_port": True, "bind": ["127.0.0.1:80", "unix:/run/a.sock"]}, 0,
         "--reuse-port works only with HOST:PORT addresses, not unix:/run/a.sock (it is one socket the workers share)"),
        ({"reuse_port": True, "bind": "fd://3"}, 0,
         "--reuse-port works only with HOST:PORT addresses, not fd://3 (it is one socket the workers share)"),
    ],
    ids=["keyfile-without-certfile", "reuse-port-and-systemd", "reuse-port-and-unix", "reuse-port-and-fd"],
)
def test_check_refuses_settings_that_cannot_go_together(values, systemd_sockets, message):
    config = Config(**values)
    with pytest.raises(SettingError) as info:
        config.check(systemd_sockets=systemd_sockets)
    assert str(info.value) == message


def test_check_passes_what_goes_together_and_warns_of_what_works_badly():
    Config(certfile="cert.pem", keyfile="key.pem").check()
    Config(certfile="both.pem").check()
    Config(reuse_port=True, bind=["127.0.0.1:80", "[::1]:80"]).check()
    Config(bind="unix:/run/a.sock").check(systemd_sockets=2)  # systemd's replace it
    assert Config(reuse_port=True, workers=2).warnings() == []
    assert Config(reuse_port=False, workers=1).warnings() == []
    (warning,) = Config(reuse_port=True, workers=1).warnings()
    assert warning.startswith("--reuse-port with one worker: nothing to balance")
    assert Config(proxy_protocol=True).warnings() == []
    assert Config(forwarded_allow_ips="*").warnings() == []
    (warning,) = Config(proxy_protocol=True, forwarded_allow_ips="*").warnings()
    assert warning.startswith("--proxy-protocol with --forwarded-allow-ips '*': any client")


def test_replace_validates_and_leaves_the_original_alone():
    config = Config(keepalive=7)
    copy = config.replace(keepalive="2", workers=3)
    assert (copy.keepalive, copy.workers) == (2.0, 3)
    assert (config.keepalive, config.workers) == (7.0, 1)
    with pytest.raises(SettingError) as info:
        config.replace(workers=-1)
    assert (info.value.setting, info.value.reason) == ("workers", "must be at least 0, got -1")


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
    # One source of truth: Limits() (the parser's, used alone by tests and bench/parser.py) and the
    # table's limit_request_* rows both read http/grammar.py's DEFAULT_MAX_* constants.
    from greenserve.http.parser import Limits

    limits, config = Limits(), Config()
    assert limits.max_request_line == config.limit_request_line
    assert limits.max_header_count == config.limit_request_fields
    assert limits.max_header_size == config.limit_request_field_size
    assert limits.max_body == config.limit_request_body

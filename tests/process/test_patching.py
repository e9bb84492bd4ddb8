"""Tests for greenserve.process.patching: the --patch spec, gevent's resolver and loop, apply and the report.

Monkey-patching cannot be undone and the hub is per process, so every test that patches or
configures gevent runs a small program in a fresh interpreter and checks what it prints.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from greenserve.process.patching import parse_patch_spec

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(code):
    """Run ``code`` in a new interpreter that can import greenserve; return its stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    # The program must choose its own resolver, loop and monitor, not inherit the test runner's.
    for key in ("GEVENT_RESOLVER", "GEVENT_LOOP", "GEVENT_MONITOR_THREAD_ENABLE"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], timeout=30,
                          capture_output=True, text=True, cwd=ROOT, env=env)
    assert done.returncode == 0, "exit %d\nstdout:\n%s\nstderr:\n%s" % (
        done.returncode, done.stdout, done.stderr)
    return done.stdout


def has_module(name):
    return subprocess.run([sys.executable, "-c", "import " + name],
                          capture_output=True, timeout=30).returncode == 0


def section(report, heading):
    """The lines under ``heading:`` in a formatted report, up to the next heading."""
    lines = report.splitlines()
    start = lines.index(heading + ":") + 1
    body = []
    for line in lines[start:]:
        if not line.startswith("  "):
            break
        body.append(line.strip())
    return body


def subjects(lines):
    return {line.split()[0] for line in lines}


# --- parse_patch_spec ----------------------------------------------------------------------


def test_parse_all_and_none():
    assert parse_patch_spec("all") == "all"
    assert parse_patch_spec(" none ") == "none"


def test_parse_list_is_ordered_like_patch_all_and_deduplicated():
    # time must be patched after thread; the user's order does not matter.
    assert parse_patch_spec("time,thread, socket,time") == ("thread", "time", "socket")


def test_parse_names_come_from_installed_gevent():
    from gevent import monkey

    expected = {name[len("patch_"):] for name in monkey.__all__
                if name.startswith("patch_") and name not in ("patch_all", "patch_module")}
    assert set(parse_patch_spec(",".join(sorted(expected)))) == expected


def test_parse_unknown_name_is_one_line_with_choices():
    with pytest.raises(ValueError) as info:
        parse_patch_spec("socket,sockt")
    message = str(info.value)
    assert message.startswith("unknown module 'sockt' for --patch; choose from: all, none, ")
    assert "socket" in message and "\n" not in message


@pytest.mark.parametrize("text", ["", " , ", "all,socket", "none,time"])
def test_parse_rejects_empty_and_mixed(text):
    with pytest.raises(ValueError):
        parse_patch_spec(text)


# --- importing, apply and report ----------------------------------------------------------


def test_import_loads_no_gevent():
    out = run("""
        import sys
        import greenserve.process.patching
        print(sorted(name for name in sys.modules if name.split('.')[0] in ('gevent', 'greenlet')))
    """)
    assert out.strip() == "[]"


def test_apply_all_patches_socket_and_time_without_creating_the_hub():
    out = run("""
        from greenserve.process import patching
        state = patching.apply("all")
        import time, gevent
        from gevent._hub_local import get_hub_if_exists
        print("spec", state.spec)
        print("sleep-is-gevent", time.sleep is gevent.sleep)
        print("hub", get_hub_if_exists())
        print(patching.format_report(patching.report()))
    """)
    assert "spec all" in out
    assert "sleep-is-gevent True" in out
    assert "hub None" in out
    assert out.count("gevent monkey-patching: all (gevent.monkey.patch_all)") == 1
    patched = subjects(section(out, "patched"))
    assert {"socket", "time", "dns", "ssl", "thread", "select", "os"} <= patched
    assert "sys" in subjects(section(out, "not patched"))


def test_apply_socket_only_leaves_time_unpatched():
    out = run("""
        from greenserve.process import patching
        patching.apply(("socket",))
        import time, gevent
        print("sleep-is-gevent", time.sleep is gevent.sleep)
        print(patching.format_report(patching.report()))
    """)
    assert "sleep-is-gevent False" in out
    assert "socket" in subjects(section(out, "patched"))
    unpatched = section(out, "not patched")
    assert "time" in subjects(unpatched)
    assert any(line.startswith("time") and "gevent.sleep" in line for line in unpatched)


def test_apply_again_same_spec_is_a_no_op_other_spec_refused():
    out = run("""
        from greenserve.process import patching
        first = patching.apply("socket,time")
        print("same", patching.apply(("time", "socket")) is first)
        try:
            patching.apply("all")
        except RuntimeError as exc:
            print("refused", exc)
    """)
    assert "same True" in out
    assert "refused monkey-patching was already applied as time,socket in this process" in out


def test_ssl_imported_before_patching_is_named():
    out = run("""
        import ssl
        from greenserve.process import patching
        state = patching.apply("all")
        print("before", state.imported_before)
        print(patching.format_report(patching.report()))
    """)
    assert "'ssl'" in out
    warnings = section(out, "warnings")
    assert any(line.startswith("- ssl was imported before patching") for line in warnings), out


@pytest.mark.skipif(not has_module("requests"), reason="requests is not installed")
def test_requests_imported_before_patching_turns_gevents_warning_into_a_line():
    out = run("""
        import warnings
        warnings.simplefilter("error")  # gevent's warning must be captured, not raised or printed
        import requests
        from greenserve.process import patching
        state = patching.apply("all")
        print("gevent-warnings", len(state.gevent_warnings))
        print(patching.format_report(patching.report()))
    """)
    assert "gevent-warnings 1" in out
    warnings = section(out, "warnings")
    ssl_lines = [line for line in warnings if line.startswith("- ssl was imported before patching")]
    assert len(ssl_lines) == 1 and "urllib3" in ssl_lines[0]
    assert any(line.startswith("- requests was imported before patching") for line in warnings)


@pytest.mark.skipif(not has_module("requests"), reason="requests is not installed")
def test_imports_after_an_earlier_patch_are_no_finding():
    # A gunicorn.conf.py or a wrapper that patches first, as recommended, then imports.
    out = run("""
        from gevent import monkey
        monkey.patch_all()
        import requests
        from greenserve.process import patching
        state = patching.apply("all")
        print("before", state.imported_before, state.gevent_warnings)
        print("late", patching.late_patching_warning(state))
        print(patching.format_report(patching.report()))
    """)
    assert "before () ()" in out
    assert "late None" in out
    assert section(out, "warnings") == ["(none)"]


def test_threads_running_before_patching_are_named():
    out = run("""
        import threading
        stop = threading.Event()
        worker = threading.Thread(target=stop.wait, name="early-bird", daemon=True)
        worker.start()
        from greenserve.process import patching
        patching.apply("all")
        print(patching.format_report(patching.report()))
    """)
    assert any("early-bird" in line for line in section(out, "warnings"))


def test_eventlet_loaded_is_a_warning():
    out = run("""
        import sys, types
        sys.modules["eventlet"] = types.ModuleType("eventlet")
        from greenserve.process import patching
        patching.apply("all")
        print(patching.format_report(patching.report()))
    """)
    assert any("eventlet is loaded" in line and "incompatible with gevent" in line
               for line in section(out, "warnings"))


def test_partial_list_warns_about_missing_partner():
    out = run("""
        from greenserve.process import patching
        patching.apply("signal")
        print(patching.format_report(patching.report()))
    """)
    assert any(line.startswith("- signal is patched but os is not") for line in section(out, "warnings"))


def test_report_without_apply_still_reads_the_process():
    out = run("""
        from gevent import monkey
        monkey.patch_time()
        from greenserve.process import patching
        print(patching.format_report(patching.report()))
    """)
    assert "gevent monkey-patching: not applied by greenserve in this process" in out
    assert "time" in subjects(section(out, "patched"))
    assert "socket" in subjects(section(out, "not patched"))


def test_format_report_is_plain_grouped_text():
    out = run("""
        from greenserve.process import patching
        patching.apply("none")
        text = patching.format_report(patching.report())
        print(text)
    """)
    headings = [line for line in out.splitlines() if line and not line.startswith("  ")]
    assert headings == ["gevent monkey-patching: none", "patched:", "not patched:", "warnings:",
                        "gevent:"]
    assert "\x1b" not in out
    assert section(out, "warnings") == ["(none)"]
    gevent_lines = section(out, "gevent")
    assert gevent_lines[0].startswith("versions") and "greenlet" in gevent_lines[0]


# --- configure_gevent ----------------------------------------------------------------------


def test_ares_resolver_resolves_localhost_and_is_reported():
    out = run("""
        from greenserve.process import patching
        chosen = patching.configure_gevent(resolver="ares")
        print("chosen", chosen["resolver"].__module__)
        import gevent.socket
        addresses = {info[4][0] for info in gevent.socket.getaddrinfo("localhost", 80)}
        print("addresses", sorted(addresses))
        print(patching.format_report(patching.report()))
    """)
    assert "chosen gevent.resolver.ares" in out
    addresses = out.split("addresses ", 1)[1].splitlines()[0]
    assert "127.0.0.1" in addresses or "::1" in addresses
    resolver = [line for line in section(out, "gevent") if line.startswith("resolver")]
    assert resolver and "ares (gevent.resolver.ares.Resolver)" in resolver[0]


def test_loop_short_names_map_onto_gevents():
    out = run("""
        from greenserve.process import patching
        chosen = patching.configure_gevent(loop="libev")
        print("loop", chosen["loop"].__module__)
        print(patching.format_report(patching.report()))
    """)
    assert "loop gevent.libev." in out
    assert any(line.startswith("loop") and "libev" in line for line in section(out, "gevent"))


def test_unknown_resolver_and_loop_are_value_errors():
    out = run("""
        from greenserve.process import patching
        for kwargs in ({"resolver": "nope"}, {"loop": "libevent"}):
            try:
                patching.configure_gevent(**kwargs)
            except ValueError as exc:
                print("ValueError", exc)
    """)
    assert ("ValueError unknown resolver 'nope' for --resolver;"
            " choose from: thread, ares, dnspython, block") in out
    assert "ValueError unknown loop 'libevent' for --loop; choose from: libev, libuv" in out


@pytest.mark.skipif(has_module("dns"), reason="dnspython is installed here")
def test_dnspython_missing_is_one_line_and_changes_nothing():
    out = run("""
        import gevent
        from greenserve.process import patching
        before = gevent.config.resolver
        try:
            patching.configure_gevent(resolver="dnspython", loop="libev")
        except ValueError as exc:
            print("ValueError", exc)
        print("unchanged", gevent.config.resolver is before)
    """)
    assert ("ValueError --resolver dnspython: the dnspython package is not installed"
            " (pip install dnspython)") in out
    assert "unchanged True" in out


def test_configure_after_the_hub_exists_is_a_runtime_error():
    out = run("""
        import gevent
        from greenserve.process import patching
        gevent.get_hub()
        try:
            patching.configure_gevent(resolver="ares")
        except RuntimeError as exc:
            print("RuntimeError", exc)
        print("resolver", gevent.config.settings["resolver"].get().__module__)
    """)
    assert "RuntimeError configure_gevent() must run before the gevent hub exists" in out
    assert "resolver gevent.resolver.ares" not in out


def test_forked_child_resolves_with_ares_after_reinit():
    # The pre-fork master's case: the parent has a hub and an ares channel, forks with the
    # real fork, and the child reinitialises gevent before using the resolver.
    out = run("""
        import os, sys, time
        import gevent
        from gevent import monkey
        from greenserve.process import patching
        patching.configure_gevent(resolver="ares")
        patching.apply("all")
        import socket
        socket.getaddrinfo("localhost", 80)
        real_fork = monkey.get_original("os", "fork")
        read_end, write_end = os.pipe()
        pid = real_fork()
        if pid == 0:
            try:
                gevent.reinit()
                found = {info[4][0] for info in socket.getaddrinfo("localhost", 80)}
                os.write(write_end, ("ok %s" % sorted(found)).encode())
                os._exit(0)
            except BaseException as exc:
                os.write(write_end, ("failed %r" % (exc,)).encode())
                os._exit(1)
        os.close(write_end)
        deadline = time.monotonic() + 20
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                print("child hung")
                sys.exit(3)
            time.sleep(0.05)
        print("child exit", os.waitstatus_to_exitcode(status), os.read(read_end, 4096).decode())
    """)
    assert "child exit 0 ok" in out, out
    assert "127.0.0.1" in out or "::1" in out

"""HTTP/2 against its peers, as issue 33 asks: h2load on h2c and on TLS, and HTTP/1.1 with HTTP/2 on.

    python bench/h2peers.py                        # every scenario and server: 3 repeats of 5 s (about 9 min)
    python bench/h2peers.py --quick                # 1 repeat of 2 s: a smoke test of the harness
    python bench/h2peers.py --scenarios h2c-c10-m10,tls-c10-m10 --servers greenserve,granian --repeats 5

The issue's targets: in one run, h2load -c10 -m10 and -c100 -m1, over h2c and over TLS, greenserve
at least 1.0x granian's HTTP/2 and 20x gunicorn 27's; and HTTP/1.1 speed held with HTTP/2 on.

Rules, as bench/run.py's (see bench/README.md):
  * every server is one process (gunicorn and granian: a main process and one worker; greenserve:
    its one-process WSGIServer launcher, and its command with --workers 1 as ``greenserve-cli``),
    started by its launcher in bench/servers/ with the HTTP/2 settings as arguments, pinned with
    ``taskset`` to CPU 0, fresh for every run on a fresh port, stopped by PID (its children too);
  * the load is h2load with one thread (``-t1``) pinned to CPU 1, bounded by ``-D`` (its
    duration mode, after ``--warm-up-time``) and a wall-clock limit, on 127.0.0.1 only; ``h1-hello``
    is run.py's ``hello`` (wrk -t1 -c100);
  * peers are interleaved: each repeat runs every server once, in an order that rotates from one
    repeat to the next; tables give medians, and ratios are medians of per-repeat ratios.

A server is ready once ``h2load -n1`` gets its one answer (HTTP/1.1's ``GET /`` cannot tell for a
TLS or prior-knowledge port). TLS runs on a self-signed EC P-256 certificate made for the run in
a temporary directory (openssl, else the ``cryptography`` package); h2 is offered by ALPN, and
h2load asks for h2 only (``--npn-list h2``), so no run falls back to HTTP/1.1 unseen. Raw results
go to bench/results/h2peers.json; the report is printed as Markdown (and written to --markdown FILE).
"""

import argparse
import importlib.util
import os
import re
import shlex
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import HOST, cli, load, machine, report, servers  # noqa: E402
from bench.run import target_notes  # noqa: E402

# Issue 33: greenserve's req/s over the peer's, in the same run, in every HTTP/2 scenario.
H2_TARGETS = {"granian": 1.0, "gunicorn": 20.0}
# "HTTP/1.1 speed held": greenserve with HTTP/2 on, over greenserve with its defaults, in h1-hello.
# A run on this machine moves by a few percent, so held means within 5 %.
HELD = 0.95
PATH = "/"  # bench.apps' 13-byte hello
DISTRIBUTIONS = ("greenserve", "gevent", "greenlet", "gunicorn", "h2", "granian")


class Scenario:
    """One load: h2load -cCLIENTS -mSTREAMS over `transport` ("h2c", "tls"), or wrk over HTTP/1.1 ("h1")."""

    def __init__(self, name, transport, clients, streams, description, servers=None, targets=None):
        self.name = name
        self.transport = transport
        self.clients = clients
        self.streams = streams
        self.description = description
        self.servers = servers  # the rows that take part; None: every HTTP/2 row
        self.targets = targets if targets is not None else H2_TARGETS
        self.tool = "wrk" if transport == "h1" else "h2load"


def h2load_scenario(transport, clients, streams):
    over = "h2c (prior knowledge)" if transport == "h2c" else "TLS (h2 by ALPN)"
    return Scenario("%s-c%d-m%d" % (transport, clients, streams), transport, clients, streams,
                    "h2load -t1 -c%d -m%d on GET / (13-byte hello) over %s" % (clients, streams, over))


SCENARIOS = [
    h2load_scenario("h2c", 10, 10),
    h2load_scenario("h2c", 100, 1),
    h2load_scenario("tls", 10, 10),
    h2load_scenario("tls", 100, 1),
    Scenario("h1-hello", "h1", 100, None,
             "HTTP/1.1 held: wrk -t1 -c100 --latency GET / (run.py's hello) on greenserve with HTTP/2 on "
             "(h2,h1 and prior-knowledge) and with its default settings",
             servers=("greenserve", "greenserve-default"), targets={"greenserve-default": HELD}),
]
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}


# --------------------------------------------------------------------------------------------
# The servers: bench/lib/servers.py's rows, with the HTTP/2 settings as their launchers' arguments


def h2_settings(transport, tls):
    """HTTP/2 on, in greenserve's (and gunicorn 27's) setting names: {name: value}."""
    if transport == "tls":
        return {"http_protocols": "h2,h1", "certfile": tls["certfile"], "keyfile": tls["keyfile"]}
    return {"http_protocols": "h2,h1", "http2_cleartext": "prior-knowledge"}


def as_keywords(transport, tls):
    """greenserve_server.py's NAME=VALUE settings."""
    return ["%s=%s" % item for item in h2_settings(transport, tls).items()]


def as_flags(transport, tls):
    """The same as command-line flags: ``--http-protocols h2,h1 ...`` (greenserve's and gunicorn's)."""
    return [x for name, value in h2_settings(transport, tls).items() for x in ("--" + name.replace("_", "-"), value)]


def granian_flags(transport, tls):
    """granian's: ``--http 2`` (h2c by prior knowledge), and its certificate options over TLS."""
    if transport == "tls":
        return ["--http", "2", "--ssl-certificate", tls["certfile"], "--ssl-keyfile", tls["keyfile"]]
    return ["--http", "2"]


class Row:
    """A row of the report: a server of bench/lib/servers.py and the arguments its launcher gets."""

    def __init__(self, name, server, arguments, modules=()):
        self.name = name
        self.server = servers.BY_NAME[server]
        self.arguments = arguments  # (transport, tls) -> the launcher's arguments after the port
        self.modules = modules  # modules it needs beyond the server's own

    def missing(self):
        why = self.server.missing()
        if why is None:
            for module in self.modules:
                if importlib.util.find_spec(module) is None:
                    return "module %r cannot be imported (not installed?)" % module
        return why

    def describe(self, transport):
        tls = {"certfile": "CERT", "keyfile": "KEY"}
        return " ".join(self.arguments(transport, tls)) or "(default settings)"


ROWS = [
    Row("greenserve", "greenserve", as_keywords),
    Row("greenserve-cli", "greenserve-cli", as_flags),
    Row("granian", "granian", granian_flags),
    Row("gunicorn", "gunicorn", as_flags, modules=("h2",)),  # gunicorn[http2]
    Row("greenserve-default", "greenserve", lambda transport, tls: []),  # h1-hello only
]
ROWS_BY_NAME = {r.name: r for r in ROWS}
H2_ROWS = ("greenserve", "greenserve-cli", "granian", "gunicorn")


def takes(scen, row):
    return row.name in (scen.servers if scen.servers is not None else H2_ROWS)


# --------------------------------------------------------------------------------------------
# TLS: a certificate for 127.0.0.1, made for the run


def make_certificate(directory):
    """A self-signed EC P-256 certificate for 127.0.0.1 and its PKCS#8 key (granian reads no
    other) in `directory`: {"certfile", "keyfile", "how"}."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    openssl = shutil.which("openssl")
    if openssl:
        argv = [openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                "-keyout", key, "-out", cert]
        subprocess.run(argv, check=True, capture_output=True, timeout=30)
        how = (machine.first_line([openssl, "version"]) or "openssl").split(" (Library")[0]
    else:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        private = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, HOST)])
        now = datetime.datetime.now(datetime.timezone.utc)
        certificate = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(private.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now)
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(HOST))]), False)
            .sign(private, hashes.SHA256())
        )
        with open(cert, "wb") as f:
            f.write(certificate.public_bytes(serialization.Encoding.PEM))
        with open(key, "wb") as f:
            f.write(private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
        how = "cryptography " + machine.versions(("cryptography",))["cryptography"]
    return {"certfile": cert, "keyfile": key, "how": "self-signed EC P-256 for IP 127.0.0.1 (%s)" % how}


# --------------------------------------------------------------------------------------------
# h2load: the probe, the load and its report


def url(transport, port):
    return "%s://%s:%d%s" % ("https" if transport == "tls" else "http", HOST, port, PATH)


def h2load_argv(h2load, transport, port, clients, streams, duration=None, warmup=0, requests=None):
    """h2load -t1 -cC -mM, bounded by -D DURATION (after --warm-up-time) or -n REQUESTS; h2 only."""
    argv = [h2load, "-t1", "-c%d" % clients, "-m%d" % streams]
    argv += ["-n%d" % requests] if requests else ["-D", str(duration)]
    if warmup and not requests:
        argv += ["--warm-up-time", str(warmup)]
    if transport == "tls":
        argv += ["--npn-list", "h2"]  # no silent HTTP/1.1 over TLS
    return argv + [url(transport, port)]


def h2_ready(h2load, transport, timeout=20.0):
    """A readiness check for Server.start: one request by h2load answered, before `timeout` s."""

    def ready(proc, port):
        deadline = time.monotonic() + timeout
        argv = h2load_argv(h2load, transport, port, 1, 1, requests=1)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False
            try:
                out = subprocess.run(argv, capture_output=True, text=True, timeout=max(0.5, min(5.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                continue
            if (parse_h2load(out.stdout)["done"] or {}).get("succeeded") == 1:
                return True
            time.sleep(0.1)
        return False

    return ready


_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_COUNTS = ("total", "started", "done", "succeeded", "failed", "errored", "timeout")


def parse_h2load(text):
    """Figures from h2load's report (nghttp2 1.4x-1.5x); a key is None when it is missing.

    In duration mode (-D), "requests" and "req/s" count the measured duration only, and "finished
    in" includes the warm-up, so ``seconds`` is requests ÷ req/s. ``errors`` holds h2load's
    failed (every request without a 2xx/3xx, errored and timeout included), errored and timeout.
    """
    out = {"requests": None, "seconds": None, "finished_s": None, "rps": None, "done": None, "non2xx": 0,
           "errors": {"failed": 0, "errored": 0, "timeout": 0}, "protocol": None, "tls": None,
           "mean_ms": None, "max_ms": None}
    m = re.search(r"^finished in ([\d.]+)(us|ms|s|m|h), ([\d.]+) req/s", text, re.M)
    if m:
        out["finished_s"] = float(m.group(1)) * _UNITS_S[m.group(2)]
        out["rps"] = float(m.group(3))
    m = re.search(r"^requests: " + ", ".join(r"(\d+) " + name for name in _COUNTS), text, re.M)
    if m:
        out["done"] = dict(zip(_COUNTS, map(int, m.groups())))
        out["requests"] = out["done"]["done"]
        out["errors"] = {k: out["done"][k] for k in ("failed", "errored", "timeout")}
        if out["rps"]:
            out["seconds"] = round(out["requests"] / out["rps"], 3)
    m = re.search(r"^status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", text, re.M)
    if m:
        out["non2xx"] = sum(int(n) for n in m.groups()[1:])
    out["protocol"] = load._search(r"^Application protocol: (\S+)", text, str)
    tls = [load._search(r"^%s: (.+)$" % field, text, str) for field in ("TLS Protocol", "Cipher")]
    if all(tls):
        out["tls"] = " ".join(tls)
    m = re.search(r"^time for request:\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)\s+([\d.]+)(us|ms|s)", text, re.M)
    if m:
        out["max_ms"] = float(m.group(3)) * _UNITS_S[m.group(4)] * 1000
        out["mean_ms"] = float(m.group(5)) * _UNITS_S[m.group(6)] * 1000
    return out


def measured_h2load(ctx, h2load, scen, proc, port, warmup):
    """h2load on the server `proc`, with the server's CPU per request over the measured duration.

    The server's CPU time is read when the warm-up ends and when the duration does (by the clock:
    h2load says nothing between them), so the warm-up and the connections' setup are not in it.
    """
    argv = h2load_argv(h2load, scen.transport, port, scen.clients, scen.streams, ctx.duration, warmup)
    readings = []

    def sample():
        started = time.monotonic()
        for at in (warmup, warmup + ctx.duration):
            time.sleep(max(0.0, started + at - time.monotonic()))
            readings.append((time.monotonic(), machine.tree_cpu(proc.pid)))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    result = ctx.run_load(argv, parse_h2load, "h2load", port, warmup + ctx.duration)
    sampler.join(5)
    if len(readings) == 2 and result.get("rps"):
        interval = readings[1][0] - readings[0][0]
        window = {"requests": result["rps"] * interval, "seconds": interval}
        result.update(machine.cpu_per_request(readings[0][1], readings[1][1], window))
    wanted = "h2" if scen.transport == "tls" else "h2c"
    if result.get("rps") is not None and result.get("protocol") != wanted and not result.get("failure"):
        result["failure"] = "h2load spoke %s, not %s" % (result.get("protocol"), wanted)
    result.update(clients=scen.clients, streams=scen.streams)
    return result


def run_one(ctx, args, h2load, tls, row, scen, log):
    """Start the row's server for the scenario, measure, stop it; the result dict."""
    extra = row.arguments("h2c" if scen.transport == "h1" else scen.transport, tls)
    ready = None if scen.transport == "h1" else h2_ready(h2load, scen.transport)
    proc, port, argv, failure = row.server.start(ctx, log, extra, label="%s %s" % (scen.name, row.name), ready=ready)
    try:
        if failure:
            return {"server_command": shlex.join(argv), "rps": None, "failure": failure}
        if scen.transport == "h1":
            if args.warmup > 0:
                ctx.wrk(port, PATH, connections=10, duration=args.warmup)
            cpu_before = machine.tree_cpu(proc.pid)
            result = ctx.wrk(port, PATH, connections=scen.clients)
            result.update(machine.cpu_per_request(cpu_before, machine.tree_cpu(proc.pid), result))
        else:
            result = measured_h2load(ctx, h2load, scen, proc, port, args.warmup)
        result["server_command"] = shlex.join(argv)
        return servers.note_exit(proc, result)
    finally:
        servers.stop_and_rest(proc, args.pause)


# --------------------------------------------------------------------------------------------
# Summaries and the report


def summarize(scen, names, runs):
    """runs[row] = [result per repeat]; per-row medians, totals, ÷ greenserve and notes."""
    ok = {n: report.good_runs(runs[n]) for n in names}
    summary = {}
    for n in names:
        entry = report.summary_entry(runs[n], ok[n], ("rps", "mean_ms", "p99_ms", "unaccepted", "user_us", "kernel_us", "busy"))
        entry["ratio_greenserve"] = report.paired_ratio(ok[n], ok["greenserve"]) if "greenserve" in ok else None
        notes = report.failure_notes(entry)
        if sum(entry["errors"].values()):
            notes.append("failed requests" if scen.tool == "h2load" else "socket errors")
        if entry["non2xx"]:
            notes.append("non-2xx responses")
        if entry.get("unaccepted"):
            notes.append("~%d connections waiting unaccepted at every sample" % entry["unaccepted"])
        ciphers = sorted({r["tls"] for r in runs[n] if r.get("tls")})
        if ciphers:
            notes.append(", ".join(ciphers))
        if n in scen.targets:
            notes += target_notes(n, scen.targets[n], ok, entry)
        entry["notes"] = notes
        summary[n] = entry
    return summary


def table_rows(scen, summary):
    latency = "p99 (median)" if scen.tool == "wrk" else "mean request time (median)"
    errors = "socket errors" if scen.tool == "wrk" else "failed, errored, timeout"
    header = ["server", "req/s (median)", latency, "server CPU µs/request: user + kernel", errors, "non-2xx",
              "÷ greenserve", "notes"]
    rows = []
    for name, e in summary.items():
        rows.append([
            name,
            report.fmt_rps(e["rps"]),
            report.fmt_ms(e["p99_ms"] if scen.tool == "wrk" else e["mean_ms"]),
            report.fmt_cpu(e["user_us"], e["kernel_us"], e["busy"]),
            report.fmt_errors(e["errors"]),
            str(e["non2xx"]),
            report.fmt_ratio(e["ratio_greenserve"]),
            "; ".join(e["notes"]),
        ])
    return header, rows


def verdicts(scenario_summaries):
    """One line per scenario and target row: greenserve's ratio over each peer, met or MISSED."""
    lines = []
    for scen, summary in scenario_summaries:
        parts = []
        for peer, target in scen.targets.items():
            for ref, ratio in (summary.get(peer, {}).get("targets") or {}).items():
                parts.append("%s %s× %s (≥ %s: %s)" % (ref, report.fmt_ratio(ratio), peer, report.fmt_ratio(target),
                                                      "met" if ratio >= target else "MISSED"))
        lines.append("%s: %s" % (scen.name, "; ".join(parts) if parts else "no target measured"))
    return lines


def markdown_report(meta, tables, summaries):
    v = meta["versions"]
    lines = report.report_head(meta, "greenserve HTTP/2 benchmark") + [
        "- Peers: granian %s (`--interface wsgi --http 2`, one worker, one runtime thread, one app thread; rustls); "
        "gunicorn %s (`-k gevent -w 1`, h2 %s; Python's ssl)" % (v.get("granian"), v.get("gunicorn"), v.get("h2")),
        "- Load generators: %s (`-t1`, `-D %d --warm-up-time %d`); %s; TLS: %s; Python's ssl: %s"
        % (meta["h2load"], meta["duration"], meta["warmup"], meta["wrk"], meta["certificate"], meta["python_ssl"]),
        "- HTTP/2 settings (h2c; over TLS the certificate instead of the cleartext mode): "
        + "; ".join("%s `%s`" % (name, text) for name, text in meta["h2_settings"].items()),
        "- Pinning: %s; %d repeat(s) of %d s per server and scenario, interleaved in rotating order; "
        "load average at start %s" % (meta["pinning"], meta["repeats"], meta["duration"], meta["loadavg_at_start"]),
        "",
        "req/s and latency are medians over the repeats; ÷ greenserve is the median of per-repeat ratios of req/s "
        "(this server ÷ greenserve); failures and non-2xx are totals. h2load counts the measured duration only, "
        "after its warm-up. Server CPU per request: the server processes' user and kernel time from /proc/PID/stat "
        "(%d ms ticks), read when the warm-up ends and when the duration does, ÷ the requests of that span; "
        "busy: that time over the span (100 %%: the server's core was the limit). Targets (issue 33): greenserve "
        "≥ %s× granian and ≥ %s× gunicorn in every HTTP/2 scenario; HTTP/1.1 held: greenserve with HTTP/2 on "
        "≥ %s× greenserve with its defaults." % (1000 // machine.CLOCK_TICK, report.fmt_ratio(H2_TARGETS["granian"]),
                                                report.fmt_ratio(H2_TARGETS["gunicorn"]), report.fmt_ratio(HELD)),
    ]
    for name, reason in meta["skipped"].items():
        lines += ["", "- Skipped %s: %s" % (name, reason)]
    lines += [""] + ["**%s**" % line for line in verdicts(summaries)]
    for scen, header, rows in tables:
        lines += ["", "## %s" % scen.name, "", scen.description, "", report.markdown_table(header, rows)]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="greenserve's HTTP/2 against granian's and gunicorn's, with h2load (see bench/README.md).",
        epilog="scenarios: %s; servers: %s (greenserve-default takes part in h1-hello only)"
        % (", ".join(SCENARIOS_BY_NAME), ", ".join(ROWS_BY_NAME)),
    )
    cli.add_repeats(p, 3, 5, quick=(1, 2), what="server per scenario")
    p.add_argument("--scenarios", default=None, help="comma-separated scenario names (default: all)")
    p.add_argument("--servers", default=None, help="comma-separated server names (default: all)")
    p.add_argument("--warmup", type=int, default=1,
                   help="seconds of load before the measured duration: h2load --warm-up-time, wrk -c10 (0: none)")
    p.add_argument("--pause", type=float, default=0.5, help="seconds between runs")
    cli.add_output(p, "h2peers.json")
    args = p.parse_args(argv)
    cli.repeats_chosen(p, args)
    if args.warmup < 0:
        p.error("--warmup must be 0 or more")
    args.scenario_list = cli.choose(p, args.scenarios, SCENARIOS_BY_NAME, "scenario(s)") if args.scenarios else list(SCENARIOS)
    args.row_list = cli.choose(p, args.servers, ROWS_BY_NAME, "server(s)") if args.servers else list(ROWS)
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    machine.raise_nofile()
    ctx = load.Context.from_args(args, args.duration)
    h2load = shutil.which("h2load")
    if not ctx.pin:
        print("warning: not pinning (taskset missing, fewer than 2 CPUs, or --no-pin)", flush=True)
    skipped = {}
    for row in args.row_list:
        why = row.missing()
        if why:
            skipped[row.name] = why
            print("skipping %s: %s" % (row.name, why), flush=True)
    rows = [r for r in args.row_list if r.name not in skipped]
    tools = {"h2load": (h2load, "apt-get install nghttp2-client"), "wrk": (ctx.wrk_path, "apt-get install wrk")}

    meta = machine.environment(ctx, DISTRIBUTIONS)
    meta.update(
        command=cli.command("h2peers.py", argv),
        argv=["bench/h2peers.py"] + (sys.argv[1:] if argv is None else argv),
        repeats=args.repeats, duration=args.duration, warmup=args.warmup, skipped=skipped,
        h2load=machine.first_line([h2load, "--version"]) if h2load else None,
        python_ssl=ssl.OPENSSL_VERSION,
        h2_settings={r.name: r.describe("h2c") for r in rows if r.name in H2_ROWS},
        targets={"h2": H2_TARGETS, "h1_held": HELD},
    )
    logs = {r.name: servers.open_log("h2-" + r.name, "w") for r in rows}
    results = {"meta": meta, "scenarios": {}}
    tables, summaries = [], []
    with tempfile.TemporaryDirectory(prefix="greenserve-h2bench-") as directory, cli.Session(logs) as session:
        tls = make_certificate(directory)
        meta["certificate"] = tls["how"]
        for scen in args.scenario_list:
            path, install = tools[scen.tool]
            if not path:
                print("skipping scenario %s: %s is not installed (%s)" % (scen.name, scen.tool, install), flush=True)
                continue
            taking = [r for r in rows if takes(scen, r)]
            if not taking:
                print("skipping scenario %s: none of the servers chosen takes part" % scen.name, flush=True)
                continue
            runs = {r.name: [] for r in taking}
            for repeat, order in cli.rotations(taking, args.repeats):
                for row in order:
                    result = run_one(ctx, args, h2load, tls, row, scen, logs[row.name])
                    result["repeat"] = repeat
                    runs[row.name].append(result)
                    session.progress("%-12s repeat %d/%d %-18s %10s req/s  errors %s%s" % (
                        scen.name, repeat + 1, args.repeats, row.name, report.fmt_rps(result.get("rps")),
                        report.fmt_errors(result.get("errors") or {}),
                        ("  FAILED: " + result["failure"]) if result.get("failure") else ""))
            summary = summarize(scen, [r.name for r in taking], runs)
            header, table = table_rows(scen, summary)
            tables.append((scen, header, table))
            summaries.append((scen, summary))
            results["scenarios"][scen.name] = {"description": scen.description, "summary": summary, "runs": runs}
            print("\n== %s: %s ==" % (scen.name, scen.description))
            print(report.text_table(header, table), flush=True)

    meta["elapsed_s"] = session.elapsed()
    meta.setdefault("certificate", "not made")
    report.publish(markdown_report(meta, tables, summaries), args.markdown, args.json, results)


if __name__ == "__main__":
    cli.main(main)

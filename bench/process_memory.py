"""Memory of the processes: greenserve's master and one worker serving hello, beside bare Python, nginx and bjoern.

    python bench/process_memory.py                 # every row below
    python bench/process_memory.py --no-peers      # greenserve and bare Python only
    python bench/process_memory.py --no-peers --workers 4    # a master and four workers

Each server is started on a fresh port, answers --requests ``GET /`` (hello), and then each of
its processes is read from /proc: VmRSS (/proc/PID/status), and from /proc/PID/smaps_rollup
PSS (shared pages divided among the processes that map them) and USS (Private_Clean +
Private_Dirty: what the process alone holds, what killing it would give back). A forked
worker's RSS counts the pages it still shares with the master, so RSS(master) + RSS(worker)
overstates the two; PSS adds up.

Rows, each run twice: as ``python`` (this interpreter with its site-packages' ``.pth`` files,
which on some machines import a lot at start: certifi, editable-install finders, namespace
packages), and as ``python -S`` (no ``site``; site-packages on PYTHONPATH instead), which is
what the interpreter itself costs:

- bare Python: ``python -c "import time; time.sleep(60)"``, the floor under any Python process;
- gevent, patched: the same after ``gevent.monkey.patch_all()`` and ``gevent.get_hub()``, what a
  worker holds before any code of greenserve's (the floor under any patched gevent server);
- greenserve: ``python -m greenserve --workers 1 --chdir bench apps:hello``, the master and its
  worker; targets: master <= 12 MB RSS, worker <= 24 MB RSS (issue 22);
- nginx (``return 200``, ``worker_processes 1``) and bjoern (``bench/servers/bjoern_server.py``),
  when installed; skipped with the reason otherwise.

greenserve's modules are byte-compiled first (``compileall``, as pip does at install): run from
source, each start would compile them, and the compiler's garbage would stay in the RSS.
Memory, not speed: nothing is pinned, and a busy machine changes nothing but the wait.
Raw results go to bench/results/process_memory.json (--json).
"""

import argparse
import os
import site
import socket
import subprocess
import sys
import tempfile
import time

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import HOST, ROOT, cli, machine, report, servers  # noqa: E402

TARGET_MASTER_KIB = 12 * 1024
TARGET_WORKER_KIB = 24 * 1024
GEVENT_FLOOR = "from gevent import monkey; monkey.patch_all(); import gevent; gevent.get_hub(); gevent.sleep(60)"
NGINX_CONF = """\
worker_processes 1;
daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy; fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
    server {{ listen {host}:{port}; location / {{ return 200 "Hello, World!"; }} }}
}}
"""


def process_memory(pid):
    """{rss_kib, pss_kib, uss_kib} of a process (None each when it is gone)."""
    values = {"rss_kib": machine.rss_kib(pid), "pss_kib": None, "uss_kib": None}
    rollup = machine.read("/proc/%d/smaps_rollup" % pid) or ""
    fields = {}
    for line in rollup.splitlines():
        name, _, rest = line.partition(":")
        if rest.strip().endswith("kB"):
            fields[name] = int(rest.split()[0])
    if "Pss" in fields:
        values["pss_kib"] = fields["Pss"]
        values["uss_kib"] = fields.get("Private_Clean", 0) + fields.get("Private_Dirty", 0)
    return values


def get(port, count):
    """`count` GET / on one keep-alive connection; the number answered 200."""
    ok = 0
    with socket.create_connection((HOST, port), timeout=5) as sock:
        reader = sock.makefile("rb")
        for _ in range(count):
            sock.sendall(b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
            status = reader.readline()
            length = 0
            while True:
                line = reader.readline()
                if line in (b"\r\n", b""):
                    break
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            ok += status.split()[1:2] == [b"200"]
    return ok


def interpreter(no_site):
    """The argv prefix and environment of a Python process, with or without ``site``."""
    env = dict(os.environ)
    if not no_site:
        return [sys.executable], env
    paths = [ROOT] + site.getsitepackages() + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return [sys.executable, "-S"], env


def startup_hooks():
    """What the ``python`` rows' interpreter runs at start besides itself: its site-packages'
    ``.pth`` files (a fresh venv has setuptools' one only; a machine's own Python may have many)."""
    found = []
    for directory in site.getsitepackages():
        try:
            found += sorted(name for name in os.listdir(directory) if name.endswith(".pth"))
        except OSError:
            pass
    return "site-packages .pth files: %s" % (", ".join(found) or "none")


def measure(name, argv, env, port, log, args, roles):
    """Start `argv`, load it, read its processes: a result dict. `roles` names the main
    process's role and its children's (None: it has none), e.g. ("master", "worker")."""
    result = {"server": name, "command": " ".join(argv)}
    log.write("\n=== %s\n" % result["command"])
    log.flush()
    proc = servers.spawn(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        if port is None:
            time.sleep(args.settle)  # bare Python: nothing to ask
        elif not servers.wait_ready(proc, port):
            result["failure"] = "did not answer GET / (see %s)" % os.path.relpath(log.name, ROOT)
            return result
        else:
            result["answered"] = get(port, args.requests)
            time.sleep(args.settle)
        main_role, child_role = roles
        result[main_role] = process_memory(proc.pid)
        if child_role:
            children = machine.children(proc.pid)
            expected = args.workers if name.startswith("greenserve") else 1
            if len(children) != expected:
                result["failure"] = "expected %d %s(s), found %d" % (expected, child_role, len(children))
                return result
            every = [process_memory(pid) for pid in children]
            result[child_role] = every[0]  # the first; the others alike
            result["processes"] = 1 + len(every)
            if None not in [m["pss_kib"] for m in every] + [result[main_role]["pss_kib"]]:
                result["pss_total_kib"] = result[main_role]["pss_kib"] + sum(m["pss_kib"] for m in every)
        return result
    finally:
        servers.stop_process(proc)


def run_all(args, log):
    results, skipped = [], {}
    for no_site in (False, True):
        prefix, env = interpreter(no_site)
        flavour = "python -S" if no_site else "python"
        results.append(measure("bare Python (%s)" % flavour, prefix + ["-c", "import time; time.sleep(60)"],
                               env, None, log, args, ("process", None)))
        results.append(measure("gevent, patched (%s)" % flavour, prefix + ["-c", GEVENT_FLOOR], env, None, log, args,
                               ("process", None)))
        port = servers.free_port()
        argv = prefix + ["-m", "greenserve", "--workers", str(args.workers), "--chdir", "bench", "--bind", "%s:%d" % (HOST, port),
                         "--graceful-timeout", "2", "apps:hello"]
        results.append(measure("greenserve (%s)" % flavour, argv, env, port, log, args, ("master", "worker")))
        if args.no_peers:
            continue
        bjoern = servers.BY_NAME["bjoern"]
        reason = bjoern.missing()
        if reason:
            skipped["bjoern"] = reason
        else:
            port = servers.free_port()
            results.append(measure("bjoern (%s)" % flavour, prefix + [bjoern.launcher, str(port)], env, port, log,
                                   args, ("process", None)))
    if not args.no_peers:
        nginx = machine.program("nginx")
        if nginx is None:
            skipped["nginx"] = "not installed (apt-get install nginx)"
        else:
            with tempfile.TemporaryDirectory(prefix="greenserve-bench-nginx-") as directory:
                port = servers.free_port()
                conf = os.path.join(directory, "nginx.conf")
                with open(conf, "w") as f:
                    f.write(NGINX_CONF.format(dir=directory, host=HOST, port=port))
                results.append(measure("nginx (return 200, one worker)", [nginx, "-c", conf, "-p", directory],
                                       None, port, log, args, ("master", "worker")))
    return results, skipped


def fmt(values):
    if not values or values.get("rss_kib") is None:
        return "—", "—", "—"
    return tuple("—" if values[k] is None else "{:,.1f} MB".format(values[k] / 1024) for k in ("rss_kib", "pss_kib", "uss_kib"))


def table(results):
    header = ["server", "process", "RSS", "PSS", "USS", "notes"]
    rows = []
    for r in results:
        if r.get("failure"):
            rows.append([r["server"], "", "—", "—", "—", r["failure"]])
        for role in ("process", "master", "worker"):
            if role not in r:
                continue
            note = ""
            target = {"master": TARGET_MASTER_KIB, "worker": TARGET_WORKER_KIB}.get(role)
            if target and r["server"].startswith("greenserve") and r[role]["rss_kib"] is not None:
                note = "target <= %d MB RSS %s" % (target // 1024, "met" if r[role]["rss_kib"] <= target else "MISSED")
            rows.append([r["server"], role] + list(fmt(r[role])) + [note])
        if r.get("pss_total_kib") is not None:
            rows.append([r["server"], "all %d processes (PSS adds up)" % r["processes"], "—",
                         "{:,.1f} MB".format(r["pss_total_kib"] / 1024), "—", ""])
    return header, rows


def main(argv=None):
    p = argparse.ArgumentParser(description="Memory of greenserve's master and worker beside bare Python, nginx and bjoern.")
    p.add_argument("--requests", type=int, default=20, help="GET / sent to each server before it is read (default 20)")
    p.add_argument("--settle", type=float, default=1.0, help="seconds between the last request and the reading (default 1)")
    p.add_argument("--no-peers", action="store_true", help="greenserve and bare Python only")
    p.add_argument("--workers", type=int, default=1, help="greenserve's --workers (default 1; the table shows the first)")
    cli.add_output(p, "process_memory.json", pin=False)
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    # As an installed copy is: byte-compiled, so that no start compiles greenserve's sources.
    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.join(ROOT, "greenserve"),
                    os.path.join(ROOT, "bench", "apps.py")], check=True, env=dict(os.environ, PYTHONDONTWRITEBYTECODE=""))
    log = servers.open_log("process-memory")
    with cli.Session({"process-memory": log}):
        results, skipped = run_all(args, log)
    for name, reason in skipped.items():
        print("skipped %s: %s" % (name, reason))
    print(report.text_table(*table(results)))
    v = machine.versions()
    lines = [
        "# greenserve process memory, %s" % time.strftime("%Y-%m-%d"),
        "",
        "- Command: `%s`" % cli.command("process_memory.py", argv),
        "- Python %s; greenserve %s (%s); gevent %s; greenlet %s"
        % (sys.version.split()[0], v.get("greenserve"), machine.greenserve_commit(), v.get("gevent"), v.get("greenlet")),
        "- Interpreter: `%s`; %s" % (sys.executable, startup_hooks()),
        "- %d GET / answered by each server before its processes were read; MB = 1,024 KiB" % args.requests,
    ]
    lines += ["- Skipped %s: %s" % kv for kv in skipped.items()]
    lines += ["", report.markdown_table(*table(results))]
    report.publish("\n".join(lines) + "\n", args.markdown, args.json, {"results": results, "skipped": skipped})


if __name__ == "__main__":
    cli.main(main)

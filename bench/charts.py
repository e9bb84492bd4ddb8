"""PNG charts of the benchmark results, with matplotlib (headless: the Agg backend).

    python bench/charts.py                    # both charts, from the default JSON files, into docs/img/
    python bench/charts.py --only sweep       # one of them: scenarios or sweep

- docs/img/scenarios.png: requests/s by scenario, one bar per server (grouped bars), from the
  JSON that bench/run.py writes (bench/results/latest.json; --scenarios-json). Each scenario
  has its own panel with its own linear axis from 0, since pipelined rates are tens of times
  the others; each bar is the median over the run's repeats, labelled with its value. A server
  that did not take part in a scenario (the bare loop outside hello, page and pipeline) shows
  n/a.
- docs/img/sweep.png: the classic chart of the gevent-vs-paste write-up, from bench/sweep.py's
  JSON (bench/results/sweep.json; --sweep-json): requests/s against ab's concurrency (top) and
  failed requests against concurrency (bottom, a symmetric-log axis so that 0 shows). A run
  that ab aborted has no rate and is marked with an x and "aborted" in both panels.

A chart whose JSON is missing is skipped with a message. Each server keeps its colour in both
charts. Needs matplotlib (pip install matplotlib).
"""

import argparse
import json
import os
import sys

if __name__ == "__main__":  # run as a script: the working tree first on sys.path, not bench/
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from bench.lib import RESULTS, ROOT, servers  # noqa: E402

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import transforms
    from matplotlib.ticker import FuncFormatter, NullFormatter
except ImportError:  # pragma: no cover - said plainly instead of a traceback
    sys.exit("bench/charts.py needs matplotlib: pip install matplotlib")

IMG = os.path.join(ROOT, "docs", "img")
SERVER_ORDER = [s.name for s in servers.SERVERS]
LABELS = {
    "greenserve": "greenserve",
    "greenserve-pure": "greenserve (pure Python)",
    "pywsgi": "gevent.pywsgi",
    "bare": "bare gevent loop",
    "bare-raw": "bare gevent loop, raw socket",
    "bare-compiled": "bare gevent loop, compiled",
    "gunicorn": "gunicorn -k gevent",
    "waitress": "waitress",
    "paste": "paste",
}
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
SCENARIO_LABELS = {
    "hello": "keep-alive hello, 100 conns",
    "page": "~4.5 KB page, 100 conns",
    "pipeline": "16-deep pipelining, 100 conns (responses/s)",
    "c1000": "keep-alive hello, 1,000 conns",
    "big": "1 MiB responses, 10 conns",
    "upload": "64 KiB uploads, 50 conns",
    "close": "a new connection per request, ab -c50",
}


def colours(names):
    """A fixed colour per server: greenserve always the first of the palette."""
    # tab10 then tab20's light shades: eleven servers and more never share a colour.
    palette = plt.get_cmap("tab10").colors + plt.get_cmap("tab20").colors[1::2]
    ordered = SERVER_ORDER + sorted(n for n in names if n not in SERVER_ORDER)
    return {name: palette[i % len(palette)] for i, name in enumerate(ordered)}


def ordered(names):
    known = [n for n in SERVER_ORDER if n in names]
    return known + sorted(n for n in names if n not in SERVER_ORDER)


def compact(v):
    if v >= 100000:
        return "%.0fk" % (v / 1000)
    if v >= 10000:
        return "%.1fk" % (v / 1000)
    if v >= 1000:
        return "%.2fk" % (v / 1000)
    return "%.0f" % v


def thousands(v, _pos=None):
    return "{:,.0f}".format(v)


def scenarios_chart(data, out):
    """One panel per scenario (grouped bars: one bar per server), each with its own linear axis."""
    meta = data.get("meta", {})
    scen_names = [s for s, v in data.get("scenarios", {}).items() if v.get("summary")]
    if not scen_names:
        print("scenarios: no scenario with results in the JSON; skipped", file=sys.stderr)
        return None
    servers = ordered({name for s in scen_names for name in data["scenarios"][s]["summary"]})
    colour = colours(servers)
    cols = 3 if len(scen_names) in (5, 6) else min(len(scen_names), 4)
    rows = (len(scen_names) + cols - 1) // cols
    panel_w = max(2.6, 0.45 * len(servers) + 0.8)
    fig, axes = plt.subplots(rows, cols, figsize=(max(8.0, panel_w * cols + 0.6), 3.6 * rows + 1.3), dpi=110, squeeze=False)
    for ax in axes.flat[len(scen_names):]:
        ax.axis("off")
    for ax, scen in zip(axes.flat, scen_names):
        summary = data["scenarios"][scen]["summary"]
        ys = [(summary.get(name) or {}).get("rps") for name in servers]
        for i, (name, y) in enumerate(zip(servers, ys)):
            if y:
                ax.bar(i, y, 0.8, color=colour[name])
                ax.annotate(compact(y), (i, y), xytext=(0, 2), textcoords="offset points", ha="center",
                            va="bottom", fontsize=7, rotation=90 if len(servers) > 5 else 0)
            else:
                ax.annotate("n/a", (i, 0), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                            fontsize=7, color="0.5")
        top = max([y for y in ys if y] or [1])
        ax.set_ylim(0, top * (1.3 if len(servers) > 5 else 1.15))
        ax.set_xticks([])
        ax.set_xlim(-0.6, len(servers) - 0.4)
        ax.yaxis.set_major_formatter(FuncFormatter(thousands))
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        ax.set_title(SCENARIO_LABELS.get(scen, scen), fontsize=9)
    for ax in axes[:, 0]:
        ax.set_ylabel("requests/s (median)", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[n]) for n in servers]
    fig.legend(handles, [LABELS.get(n, n) for n in servers], loc="lower center", ncol=min(len(servers), 4),
               fontsize=8, frameon=False)
    v = meta.get("versions", {})
    fig.suptitle(
        "greenserve and its peers: requests/s by scenario (higher is better)\n"
        "%s, greenserve %s (%s), %s repeat(s) of %s s; server on CPU 0, wrk/ab on CPU 1"
        % ((meta.get("date") or "")[:10], v.get("greenserve"), meta.get("greenserve_commit"), meta.get("repeats"), meta.get("duration")),
        fontsize=10,
    )
    legend_rows = (len(servers) + 3) // 4
    fig.tight_layout(rect=(0, 0.03 + 0.035 * legend_rows * 4.9 / fig.get_figheight(), 1, 1))
    fig.savefig(out)
    plt.close(fig)
    return out


def sweep_chart(data, out):
    meta = data.get("meta", {})
    results = data.get("results") or []
    if not results:
        print("sweep: no results in the JSON; skipped", file=sys.stderr)
        return None
    levels = sorted({r["concurrency"] for r in results})
    servers = ordered({r["server"] for r in results})
    colour = colours(servers)
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(8, 8), dpi=110, gridspec_kw={"height_ratios": [3, 2]})
    ymax = max([r["rps"] for r in results if r.get("rps")] or [1])
    for server in servers:
        runs = sorted((r for r in results if r["server"] == server), key=lambda r: r["concurrency"])
        label = LABELS.get(server, server)
        ok = [r for r in runs if r.get("rps") is not None]
        # Later servers are drawn thinner and smaller, so that equal values (0 failed) stay visible.
        row = servers.index(server)
        style = dict(color=colour[server], marker=MARKERS[row % len(MARKERS)], lw=max(1.0, 5.0 - 1.6 * row), ms=max(4, 12 - 3 * row))
        top.plot([r["concurrency"] for r in ok], [r["rps"] for r in ok], label=label, **style)
        for r in ok:
            top.annotate(compact(r["rps"]), (r["concurrency"], r["rps"]), xytext=(0, 6), textcoords="offset points",
                         ha="center", fontsize=7, color=colour[server])
        failed_x = [r["concurrency"] for r in runs if r.get("failed") is not None]
        failed_y = [r["failed"] for r in runs if r.get("failed") is not None]
        bottom.plot(failed_x, failed_y, label=label, **style)
        aborted = [r for r in runs if r.get("aborted")]
        for i, r in enumerate(aborted):
            side = dict(xytext=(7, 0), ha="left") if r["concurrency"] == levels[0] else dict(xytext=(-7, 0), ha="right")
            # Labelled once per server, at its first abort (labels at every level overlap); the
            # other aborts are the same x. Requests completed before each abort: the JSON.
            text = "%s: ab aborted (x)" % label if i == 0 else ""
            if r.get("rps"):
                top.plot([r["concurrency"]], [r["rps"]], "x", color=colour[server], ms=10, mew=2.5)
            else:  # no rate: marked along the bottom of the panel, not at a made-up rate
                tr = transforms.blended_transform_factory(top.transData, top.transAxes)
                top.plot([r["concurrency"]], [0.05 + 0.07 * row], "x", color=colour[server], ms=9, mew=2.5, transform=tr, clip_on=False)
                top.annotate(text, (r["concurrency"], 0.05 + 0.07 * row), xycoords=tr, textcoords="offset points",
                             fontsize=7, color=colour[server], va="center", **side)
            if r.get("failed") is None:
                tr = transforms.blended_transform_factory(bottom.transData, bottom.transAxes)
                bottom.plot([r["concurrency"]], [0.92 - 0.09 * row], "x", color=colour[server], ms=9, mew=2.5, transform=tr)
                if i == 0:
                    bottom.annotate("%s: aborted, no count (x)" % label, (r["concurrency"], 0.92 - 0.09 * row), xycoords=tr,
                                    textcoords="offset points", fontsize=7, color=colour[server], va="center", **side)
    top.set_xscale("log")
    top.set_xticks(levels)
    top.xaxis.set_major_formatter(FuncFormatter(thousands))
    top.xaxis.set_minor_formatter(NullFormatter())
    top.set_yscale("log")
    ymin = min([r["rps"] for r in results if r.get("rps")] or [ymax])
    top.set_ylim(ymin / 4, ymax * 2.5)
    top.yaxis.set_major_formatter(FuncFormatter(thousands))
    top.yaxis.set_minor_formatter(NullFormatter())
    top.set_ylabel("requests/s (log scale)")
    top.grid(which="major", alpha=0.3)

    most = max([r["failed"] for r in results if r.get("failed") is not None] or [0])
    decades = max(1, len("%d" % most))
    bottom.set_yscale("symlog", linthresh=1)
    bottom.set_ylim(-0.3, 10 ** (decades + 0.3))
    bottom.set_yticks([0] + [10 ** k for k in range(decades + 1)])
    bottom.yaxis.set_major_formatter(FuncFormatter(thousands))
    bottom.yaxis.set_minor_formatter(NullFormatter())
    bottom.set_ylabel("failed requests (ab)")
    bottom.set_xlabel("concurrent connections (ab -c), a new connection per request")
    bottom.grid(which="major", alpha=0.3)
    bottom.set_xticks(levels)
    bottom.xaxis.set_major_formatter(FuncFormatter(thousands))
    bottom.xaxis.set_minor_formatter(NullFormatter())
    top.set_title(
        "ab -r -n %s -c N %s (HTTP/1.0): requests/s and failed requests\n%s; greenserve %s (%s); server on CPU 0, ab on CPU 1"
        % (thousands(meta.get("requests") or 0), meta.get("path", "/"), (meta.get("date") or "")[:10],
           meta.get("versions", {}).get("greenserve"), meta.get("greenserve_commit")),
        fontsize=10,
    )
    handles, labels = top.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(servers), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.04 * ((len(servers) + 3) // 4), 1, 1))
    fig.savefig(out)
    plt.close(fig)
    return out


def load(path, what):
    if not os.path.exists(path):
        print("%s: %s not found; skipped" % (what, os.path.relpath(path)), file=sys.stderr)
        return None
    with open(path) as f:
        return json.load(f)


def main(argv=None):
    p = argparse.ArgumentParser(description="PNG charts of bench/run.py's and bench/sweep.py's JSON (see bench/README.md).")
    p.add_argument("--scenarios-json", default=os.path.join(RESULTS, "latest.json"), help="bench/run.py's JSON (default bench/results/latest.json)")
    p.add_argument("--sweep-json", default=os.path.join(RESULTS, "sweep.json"), help="bench/sweep.py's JSON (default bench/results/sweep.json)")
    p.add_argument("--out-dir", default=IMG, help="where the PNGs go (default docs/img)")
    p.add_argument("--only", choices=["scenarios", "sweep"], help="draw only this chart")
    args = p.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    print("matplotlib %s" % matplotlib.__version__, file=sys.stderr)
    made = []
    if args.only in (None, "scenarios"):
        data = load(args.scenarios_json, "scenarios")
        if data:
            made.append(scenarios_chart(data, os.path.join(args.out_dir, "scenarios.png")))
    if args.only in (None, "sweep"):
        data = load(args.sweep_json, "sweep")
        if data:
            made.append(sweep_chart(data, os.path.join(args.out_dir, "sweep.png")))
    for path in made:
        if path:
            print("wrote %s" % os.path.relpath(path))
    if not any(made):
        sys.exit("no chart drawn")


if __name__ == "__main__":
    main()

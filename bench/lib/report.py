"""From runs to a report: medians and paired ratios, number formats, text and Markdown tables,
the report's head, the raw JSON.

The rule every report follows: figures are medians over the repeats, and a ratio is the median
of per-repeat ratios, each pairing two runs of the same repeat (close in time, so the noise of a
shared machine falls on both). Only ratios within one report mean anything.
"""

import json
import os
import statistics
import sys

from bench.lib import LOGS


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def paired_ratio(runs, reference, value="rps"):
    """The median of per-repeat ratios runs[i][value] ÷ reference[i][value] over the repeats
    where both runs are good (not None) and the reference is above 0."""
    return median([a[value] / b[value] for a, b in zip(runs, reference) if a is not None and b is not None and b[value] > 0])


def good_runs(runs, value="rps"):
    """Each run where it measured (a `value`, no failure), else None: what medians and paired ratios take."""
    return [r if r.get(value) is not None and not r.get("failure") else None for r in runs]


def summary_entry(runs, good, medians):
    """What every summary gives for one server: its runs and good runs, the median over the good
    runs of each key in `medians`, and totals over all runs of socket errors, non-2xx responses
    and the distinct failures."""
    good = [r for r in good if r is not None]
    entry = {"runs": len(runs), "ok_runs": len(good)}
    for key in medians:
        entry[key] = median([r.get(key) for r in good])
    entry["errors"] = {}
    for r in runs:
        add_counts(entry["errors"], r.get("errors"))
    entry["non2xx"] = sum(r.get("non2xx") or 0 for r in runs)
    entry["failures"] = sorted({r["failure"] for r in runs if r.get("failure")})
    return entry


def failure_notes(entry):
    """The notes a summary entry opens with: its distinct failures, and how many runs failed."""
    notes = list(entry["failures"])
    if entry["ok_runs"] and entry["ok_runs"] < entry["runs"]:
        notes.append("%d of %d runs failed" % (entry["runs"] - entry["ok_runs"], entry["runs"]))
    return notes


def add_counts(total, counts):
    """Adds each count of `counts` (a dict) to `total`; returns total."""
    for key, n in (counts or {}).items():
        total[key] = total.get(key, 0) + n
    return total


def fmt_cpu(user, kernel, busy=None):
    """A server's CPU per request as bench's tables give it: µs of user and kernel time, and
    how busy its core was."""
    if user is None or kernel is None:
        return "—"
    text = "%.2f + %.2f" % (user, kernel)
    return text if busy is None else text + " (%d %% busy)" % round(busy * 100)


def fmt_rps(v):
    return "—" if v is None else "{:,.0f}".format(v)


def fmt_ms(v):
    if v is None:
        return "—"
    return "%.2f ms" % v if v < 100 else "%.0f ms" % v


def fmt_ratio(v):
    return "—" if v is None else "%.2f" % v


def fmt_pct(v):
    return "—" if v is None else "%.0f%%" % (100.0 * v)


def fmt_int(v):
    return "—" if v is None else "{:,}".format(v)


def fmt_errors(errors):
    nonzero = ["%s %d" % (k, n) for k, n in errors.items() if n]
    return ", ".join(nonzero) if nonzero else "0"


def text_table(header, rows):
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())
    return "\n".join(lines)


def markdown_table(header, rows, align=None):
    """align: "l" or "r" per column; by default the first and last columns are text (the name,
    the notes), left-aligned, and those between are figures, right-aligned."""
    align = align or "l" + "r" * (len(header) - 2) + "l"
    esc = lambda x: str(x).replace("|", "\\|")  # noqa: E731
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    lines += ["| " + " | ".join(esc(x) for x in row) + " |" for row in rows]
    return "\n".join(lines)


def report_head(meta, title):
    """A report's first lines: the title with the date, the command, the machine and greenserve."""
    v = meta["versions"]
    return [
        "# %s, %s" % (title, meta["date"]),
        "",
        "- Command: `%s`" % meta["command"],
        "- Machine: %s, %s CPUs; Linux %s; Python %s (%s)"
        % (meta["cpu_model"], meta["cpu_count"], meta["kernel"], meta["python"], meta["python_implementation"]),
        "- greenserve %s (%s), hot path %s; gevent %s; greenlet %s"
        % (v.get("greenserve"), meta["greenserve_commit"], meta.get("greenserve_build"), v.get("gevent"), v.get("greenlet")),
    ]


def short_head(meta, title, tool):
    """The head of the memory, sweep and worker reports: one line for the machine, one for greenserve
    and `tool` (the load generator, or a peer's version)."""
    v = meta["versions"]
    return [
        "# %s, %s" % (title, meta["date"]),
        "",
        "- Command: `%s`" % meta["command"],
        "- Machine: %s, %s CPUs; Linux %s; Python %s" % (meta["cpu_model"], meta["cpu_count"], meta["kernel"], meta["python"]),
        "- greenserve %s (%s, hot path %s); gevent %s; %s"
        % (v.get("greenserve"), meta["greenserve_commit"], meta.get("greenserve_build"), v.get("gevent"), tool),
    ]


def write_json(path, data):
    """The raw results, whole, at ``path`` (its directory made if missing)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def publish(report, markdown_path, json_path, data=None):
    """The end of every run: the raw JSON written (unless data is None: written already), the
    Markdown report printed (and written to markdown_path if given), and where the rest went."""
    if data is not None:
        write_json(json_path, data)
    print()
    print(report, end="")
    if markdown_path:
        with open(markdown_path, "w") as f:
            f.write(report)
    print("\nraw results: %s; server logs: %s" % (os.path.relpath(json_path), os.path.relpath(LOGS)), file=sys.stderr)

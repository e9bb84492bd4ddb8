"""The house kept tidy: short functions, one benchmark report per topic, docs whose links lead somewhere."""

import ast
import collections
import os
import re

from tests.conftest import ROOT

MAX_FUNCTION_LINES = 100


def _python_files(folder):
    for directory, _, names in os.walk(os.path.join(ROOT, folder)):
        for name in sorted(names):
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def test_no_function_in_greenserve_is_over_100_lines():
    long_ones = []
    for path in _python_files("greenserve"):
        with open(path, encoding="utf-8") as source:
            tree = ast.parse(source.read(), path)
        relative = os.path.relpath(path, ROOT).replace(os.sep, "/")
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno] + [decorator.lineno for decorator in node.decorator_list])
                lines = node.end_lineno - first + 1
                if lines > MAX_FUNCTION_LINES:
                    long_ones.append("%s:%d %s (%d lines)" % (relative, node.lineno, node.name, lines))
    assert long_ones == [], "split these into steps of at most %d lines each" % MAX_FUNCTION_LINES


# docs/bench/DATE-TOPIC.md: the topic is the name after the date, less the issue it was run for and
# the run's own qualifiers at its end (a run number, when it ran, an experiment's name).
_REPORT = re.compile(r"^(\d{4}-\d{2}-\d{2})-(.+)\.md$")
_ISSUE = re.compile(r"^issue\d+-")
_QUALIFIER = re.compile(r"-(\d+|before|after|later|evening|busy|lazy|accept4)$")


def report_topic(name):
    topic = _ISSUE.sub("", _REPORT.match(name).group(2))
    while _QUALIFIER.search(topic):
        topic = _QUALIFIER.sub("", topic)
    return topic


def test_report_topics():
    assert report_topic("2026-11-26-issue22-accept-sweep-busy-3.md") == "accept-sweep"
    assert report_topic("2026-11-27-issue31-accept-sweep.md") == "accept-sweep"
    assert report_topic("2026-11-26-process-memory-venv-before.md") == "process-memory-venv"
    assert report_topic("2026-11-25-issue19-hello-pipeline-c1000.md") == "hello-pipeline-c1000"


def test_docs_bench_keeps_one_report_per_topic():
    folder = os.path.join(ROOT, "docs", "bench")
    names = [name for name in sorted(os.listdir(folder)) if name.endswith(".md")]
    assert all(_REPORT.match(name) for name in names), "docs/bench/ reports are named DATE-TOPIC.md"
    by_topic = collections.defaultdict(list)
    for name in names:
        by_topic[report_topic(name)].append(name)
    several = {topic: found for topic, found in by_topic.items() if len(found) > 1}
    assert several == {}, "keep the latest report of each topic (git keeps the others): %r" % several


# [text](target) and ![alt](target), with an optional "title"; code spans and blocks are not links.
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_CODE = re.compile(r"```.*?```|`[^`\n]*`", re.S)


def test_every_relative_link_in_the_docs_leads_to_a_file():
    folder = os.path.join(ROOT, "docs")
    broken = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".md"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as page:
            text = _CODE.sub("", page.read())
        for match in _LINK.finditer(text):
            target = match.group(1)
            path = target.split("#", 1)[0]
            if not path or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # an anchor on the same page, or a URL (https:, mailto:)
            if not os.path.isfile(os.path.normpath(os.path.join(folder, path))):
                broken.append("docs/%s: %s" % (name, target))
    assert broken == []

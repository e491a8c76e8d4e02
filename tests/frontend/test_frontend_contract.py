"""The tab keeps no copy of a Python table: it reads what the routes serve.

Pure Python, no browser.  Each forbidden pattern is built from the Python
table it would copy (the threshold defaults, the health status codes, the
Keras policy table, the low-precision dtypes, the tag layout), so the test
follows Python when a table changes.  What the routes serve instead is in
docs/ROUTES.md ("What the tab is told").
"""

import dataclasses
import glob
import os
import re

import pytest

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import codes
from tb_gradlens.serving import health

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STATIC = os.path.join(ROOT, "frontend_static")
NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?"


def modules():
    """{path relative to frontend_static: text without // and /* */ comments}."""
    out = {}
    for path in sorted(glob.glob(os.path.join(STATIC, "**", "*.js"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        text = re.sub(r"(^|[^:'\"`\\])//[^\n]*", r"\1", text)
        out[os.path.relpath(path, STATIC)] = text
    return out


def quoted(name):
    return r"""['"`]%s['"`]""" % re.escape(name)


def forbidden():
    """[(what it would copy, compiled pattern)], built from the Python tables."""
    out = []
    # The alert thresholds (analysis.codes.Thresholds): a table entry naming one with a number.
    for field in dataclasses.fields(codes.Thresholds):
        out.append(("threshold %s (analysis.codes.Thresholds)" % field.name,
                    re.compile(r"\b%s\b\s*[:=]\s*%s" % (field.name, NUMBER))))
    # The health route's status codes (serving.health): a name or a text keyed by its number.
    statuses = {"ok": health.OK, "dead": health.DEAD, "none": health.NONE, "nonfinite": health.NONFINITE}
    for name, code in statuses.items():
        out.append(("health status code %s = %d (serving.health)" % (name, code),
                    re.compile(r"\b%s\s*:\s*%d\b" % (name, code))))
    out.append(("a text keyed by a health status code (serving.health)",
                re.compile(r"\{\s*(?:%s)\s*:\s*['\"`]" % "|".join(str(c) for c in statuses.values()))))
    out.append(("a health status code compared as a number (serving.health)",
                re.compile(r"\b(?:c|status\w*(?:\[[^\]]*\])*)\s*===\s*(?:%s)\b"
                           % "|".join(str(c) for c in statuses.values()))))
    # The Keras policy table (records.POLICY_COMPUTE_DTYPES): a policy name as a key.
    for policy in records.POLICY_COMPUTE_DTYPES:
        if policy != records.POLICY_COMPUTE_DTYPES[policy]:
            out.append(("policy %s -> %s (records.POLICY_COMPUTE_DTYPES)"
                        % (policy, records.POLICY_COMPUTE_DTYPES[policy]),
                        re.compile(r"(?:\b%s|%s)\s*:\s*['\"`]" % (policy, quoted(policy)))))
    # "Low precision" (float_formats.LOW_PRECISION): its dtypes listed or tested together on one line.
    low = float_formats.LOW_PRECISION
    out.append(("the low-precision dtypes %s (float_formats.LOW_PRECISION)" % (low,),
                re.compile(r"^(?=.*%s)(?=.*%s).*$" % (quoted(low[0]), quoted(low[1])), re.M)))
    out.append(("a run-name pattern guessing a run's precision (served as the run's precision)",
                re.compile(r"/[^/\n]*(?:bf16|bfloat16|fp32|f32)[^/\n]*/[gimsuy]*")))
    # The tag layout (metadata.tag_for): "<name>/<kind>/<digest>" taken apart again.
    out.append(("the tag layout of metadata.tag_for parsed again (served as the tag's name)",
                re.compile(r"\bprefixOf\b|lastIndexOf\(\s*`/\$\{kind\}/`|/\$\{kind\}/")))
    out.append(("the comparison kinds' ranking (served as the comparison's rank)",
                re.compile(r"\bcomparisonRank\b|\bcomputeDtype\b")))
    return out


@pytest.mark.parametrize("what,pattern", forbidden(), ids=lambda x: x if isinstance(x, str) else "")
def test_no_copy_of_a_python_table_in_the_tab(what, pattern):
    found = ["%s: %s" % (path, m.group(0).strip()[:80])
             for path, text in modules().items() for m in pattern.finditer(text)]
    assert not found, "%s is copied in the tab (serve it instead): %s" % (what, found)


def test_the_patterns_find_the_copies_they_forbid():
    """Each kind of copy the tab used to hold is found (the checker is not blind)."""
    copies = [
        "const POLICY_COMPUTE = {float64: 'float64', mixed_bfloat16: 'bfloat16'};",
        "export const STATUS = {ok: 1, dead: 2, none: 3, nonfinite: 4};",
        "const STATUS_TEXT = {1: 'ok', 2: 'dead'};",
        "none: Uint8Array.from(health.status[r], (c) => (c === 3 ? 1 : 0)),",
        "const LOW_PRECISION = new Set(['bfloat16', 'float16', 'float8_e4m3fn']);",
        "const low = stored.filter((d) => d === 'bfloat16' || d === 'float16');",
        "const LOW = /bf16|bfloat16|f16|float16|half/i;",
        "export function prefixOf(tag, kind) {",
        "const DEFAULTS = {lost_update: 0.1, float32_rel_l2: 1e-3};",
    ]
    patterns = forbidden()
    for copy in copies:
        assert any(p.search(copy) for _, p in patterns), copy


def test_the_tab_reads_what_the_routes_serve_instead():
    """The fields that replace the copies are read by the tab (docs/ROUTES.md names them)."""
    text = "\n".join(modules().values())
    routes = open(os.path.join(ROOT, "docs", "ROUTES.md"), encoding="utf-8").read()
    for field in ("name", "compared", "rank", "precision", "low_precision_dtypes", "status_codes"):
        assert re.search(r"\.%s\b" % field, text), field
    for field in ("name", "compared", "low_precision", "rank", "precision", "low_precision_dtypes",
                  "status_codes"):
        assert "`%s`" % field in routes, field
    assert metadata.tag_for  # the layout the served name comes from

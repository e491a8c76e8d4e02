"""The comparisons of a run, as a user names and orders them, and each run's precision.

TensorFlow-free.  A comparison is the group of divergence-like records
(gradients, layer outputs, the loss) that share a tag name, labelled by its
variants ("mixed_bfloat16 vs float32").  The runs route (``serving.run_listing``),
the answers (``answers``) and the tab all take the order and the labels
from here:

* ``comparison_rank``: how likely a comparison is the one a user asks about
  first (a 16-bit candidate against float32 first);
* ``compared``: a record's resolved sides and rank (the runs route's
  ``compared``);
* ``run_precision``: "low", "float32" or None for a run;
* ``run_comparisons``: a run's comparisons, best first.
"""

import re
from typing import Any
from typing import Dict
from typing import List
from typing import Optional

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis.record_source import RecordSource

COMPARISON_KINDS = (metadata.DIVERGENCE, metadata.ACTIVATION_DIVERGENCE, metadata.LOSS_COMPARISON)

# What a candidate computes in when its comparison is a low-precision one:
# a 16-bit dtype, or several (a model of mixed layers).
LOW_PRECISION_COMPUTE = float_formats.LOW_PRECISION + (records.MIXED,)

# A run without a low-precision comparison is taken by its name: a guess,
# made here only (the Compare view's default runs A and B, the first answer).
_LOW_PRECISION_NAME = re.compile(r"bf16|bfloat16|f16|float16|half", re.IGNORECASE)
_FLOAT32_NAME = re.compile(r"float32|f32|fp32", re.IGNORECASE)


def comparison_rank(comparison: str, reference: Optional[str], candidate: Optional[str]) -> int:
    """How likely a comparison is the one a user asks about first (smaller
    first): a 16-bit candidate against float32 (bfloat16 0, float16 1),
    then against float64 (2), float32 against float64 (3), anything else
    (5), replicas against their mean last (9)."""
    if comparison == records.REPLICA_VS_MEAN:
        return 9
    low = candidate in LOW_PRECISION_COMPUTE
    if low and reference == "float32":
        return 1 if candidate == "float16" else 0
    if low and reference == "float64":
        return 2
    if candidate == "float32" and reference == "float64":
        return 3
    return 5


def compared(record: Any, tag: str) -> Optional[Dict[str, Any]]:
    """``{"reference", "candidate", "low_precision", "rank"}`` of a
    divergence-like record: its sides' compute dtypes (None: unknown), or
    None when its extras cannot be read."""
    try:
        info = records.read_comparison(record, tag)
    except metadata.FormatError:
        return None
    reference, candidate = info.reference.compute_dtype, info.candidate.compute_dtype
    return {
        "reference": reference,
        "candidate": candidate,
        "low_precision": info.comparison == records.PRECISION and candidate in LOW_PRECISION_COMPUTE,
        "rank": comparison_rank(info.comparison, reference, candidate),
    }


def run_precision(run: str, tags: List[Dict[str, Any]]) -> Optional[str]:
    """"low" for a run with a low-precision comparison (or, without one, a
    16-bit name: bf16, bfloat16, f16, float16, half), "float32" for a name
    saying float32 (float32, f32, fp32), else None.  ``tags``: dicts with a
    ``compared`` key (the runs route's tags)."""
    if any((t.get("compared") or {}).get("low_precision") for t in tags):
        return "low"
    if _LOW_PRECISION_NAME.search(run):
        return "low"
    if _FLOAT32_NAME.search(run):
        return "float32"
    return None


def source_run_precision(source: RecordSource, run: str) -> Optional[str]:
    """``run_precision`` of a run of ``source``."""
    tags = [{"compared": compared(e.record, e.tag)} for e in source.entries(run)
            if e.kind in COMPARISON_KINDS and e.record is not None]
    return run_precision(run, tags)


def side_label(variant: Any) -> str:
    """A side's label: its ``label``, else its policy, else "?"."""
    if not isinstance(variant, dict):
        return "?"
    return str(variant.get("label") or variant.get("policy") or "?")


def label(extras: Any) -> str:
    """"mixed_bfloat16 vs float32" of a record's extras."""
    extras = extras if isinstance(extras, dict) else {}
    return "%s vs %s" % (side_label(extras.get("candidate")), side_label(extras.get("reference")))


def run_comparisons(source: RecordSource, run: str) -> List[Dict[str, Any]]:
    """The comparisons of ``run``, best first: ``[{"name", "label", "rank",
    "low_precision", "reference", "entries": {kind: TagEntry}}]`` (one entry
    per kind: the first readable one of the name; ``reference``: what the
    reference was, in words, where its record states it, else None).  A label two comparisons share names
    its tag name too, as the tab does."""
    groups: Dict[str, Dict[str, Any]] = {}
    for entry in source.entries(run):
        if entry.kind not in COMPARISON_KINDS or entry.record is None:
            continue
        name = metadata.tag_name(entry.tag, entry.kind)
        group = groups.setdefault(name, {"name": name, "entries": {}, "extras": None, "compared": None})
        group["entries"].setdefault(entry.kind, entry)
        if group["extras"] is None or entry.kind == metadata.DIVERGENCE:
            group["extras"] = entry.record.extras
            group["compared"] = compared(entry.record, entry.tag)
    out = []
    for group in groups.values():
        info = group.pop("compared")
        extras = group.pop("extras")
        reference = extras.get("reference") if isinstance(extras, dict) else None
        out.append(dict(group, label=label(extras), rank=info["rank"] if info else 5,
                        low_precision=bool(info and info["low_precision"]),
                        reference=records.precision_text(records.read_variant(reference).precision)))
    for group in out:
        if sum(1 for g in out if g["label"] == group["label"]) > 1:
            group["label"] = "%s (%s)" % (group["label"], group["name"])
    return sorted(out, key=lambda g: (g["rank"], g["name"]))

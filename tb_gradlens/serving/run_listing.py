"""The ``runs`` route's answer: each run's tags as the tab names them.

TensorFlow-free.  The tab keeps no copy of the record contract: what it
needs to name a tag, order comparisons and pick runs is decided here, once,
from the Python tables (docs/ROUTES.md, "What the tab is told"):

* each tag's ``name`` (``metadata.tag_name``: the tag without its kind and
  digest);
* each comparison tag's ``compared``: the resolved compute dtypes of its
  reference and candidate (``records.read_comparison``, the policy table
  included), whether the candidate computes in low precision, and the
  comparison's ``rank`` (smaller: shown first);
* each run's ``precision``: "low", "float32" or None;
* the answer's ``low_precision_dtypes`` (``float_formats.LOW_PRECISION``).
"""

import re

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens import records

COMPARISON_KINDS = (metadata.DIVERGENCE, metadata.ACTIVATION_DIVERGENCE, metadata.LOSS_COMPARISON)

# What a candidate computes in when its comparison is a low-precision one:
# a 16-bit dtype, or several (a model of mixed layers).
LOW_PRECISION_COMPUTE = float_formats.LOW_PRECISION + (records.MIXED,)

# A run without a low-precision comparison is taken by its name: a guess,
# made here only (the Compare view's default runs A and B).
_LOW_PRECISION_NAME = re.compile(r"bf16|bfloat16|f16|float16|half", re.IGNORECASE)
_FLOAT32_NAME = re.compile(r"float32|f32|fp32", re.IGNORECASE)


def comparison_rank(comparison, reference, candidate):
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


def compared(record, tag):
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


def tag_json(entry):
    """A TagEntry's JSON with its ``name`` and, for a comparison, ``compared``."""
    out = entry.to_json()
    out["name"] = metadata.tag_name(entry.tag, entry.kind)
    if entry.kind in COMPARISON_KINDS:
        out["compared"] = compared(entry.record, entry.tag)
    return out


def run_precision(run, tags):
    """"low" for a run with a low-precision comparison (or, without one, a
    16-bit name: bf16, bfloat16, f16, float16, half), "float32" for a name
    saying float32 (float32, f32, fp32), else None.  ``tags``: tag_json dicts."""
    if any((t.get("compared") or {}).get("low_precision") for t in tags):
        return "low"
    if _LOW_PRECISION_NAME.search(run):
        return "low"
    if _FLOAT32_NAME.search(run):
        return "float32"
    return None


def runs_answer(source, problems):
    """The ``runs`` route's answer of a reading.Source; ``problems``:
    {run: [{"file", "error"}]} of the logdir's event files."""
    scalars = source.scalar_listing()
    runs = []
    for run in source.runs():
        tags = [tag_json(entry) for entry in source.entries(run)]
        runs.append({
            "run": run,
            "tags": tags,
            "scalars": sorted(scalars.get(run, {})),
            "problems": problems.get(run, []),
            "precision": run_precision(run, tags),
        })
    return {"runs": runs, "low_precision_dtypes": list(float_formats.LOW_PRECISION)}

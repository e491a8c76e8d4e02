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
* the answer's ``low_precision_dtypes`` (``float_formats.LOW_PRECISION``);
* the answer's ``explanations``: one line per column of each record kind, per
  column of the tab's tables and per metric (``metadata.explanations``): the
  tab's hovers say them, it keeps no copy.

The ranks, labels and precisions are ``analysis.comparisons``' (the answers
use the same).
"""

from tb_gradlens import float_formats
from tb_gradlens import metadata
from tb_gradlens.analysis.comparisons import COMPARISON_KINDS
from tb_gradlens.analysis.comparisons import LOW_PRECISION_COMPUTE  # noqa: F401 - the route's names
from tb_gradlens.analysis.comparisons import comparison_rank  # noqa: F401
from tb_gradlens.analysis.comparisons import compared
from tb_gradlens.analysis.comparisons import run_precision
from tb_gradlens.metadata import explanations


def tag_json(entry):
    """A TagEntry's JSON with its ``name`` and, for a comparison, ``compared``."""
    out = entry.to_json()
    out["name"] = metadata.tag_name(entry.tag, entry.kind)
    if entry.kind in COMPARISON_KINDS:
        out["compared"] = compared(entry.record, entry.tag)
    return out


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
    return {"runs": runs, "low_precision_dtypes": list(float_formats.LOW_PRECISION),
            "explanations": explanations.contract()}

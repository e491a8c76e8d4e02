"""The verdict of a replayed non-finite step (``nonfinite_replay`` records).

TensorFlow-free.  The lens replays the first train step in trouble, before
its update, as configured (the candidate) and in float32 or float64 (the
reference), from the same weights, batch and random draws, and counts the
non-finite elements of every layer output, the loss and every gradient, in
forward order.  The verdict:

* "precision": the step as configured is non-finite, the reference is
  not: 16 bits cannot hold this step (an overflow, a cancellation);
* "not precision": the reference is non-finite too: the data, the
  learning rate or the loss makes the NaN, whatever the precision;
* "not reproduced": the replay of the step as configured is finite (an
  op that is not deterministic, or randomness the lens cannot replay).

The tab, ``report`` and the ``nonfinite`` alert all read it from here.
"""

import numpy as np

from tb_gradlens import metadata
from tb_gradlens import records

PRECISION = "precision"
NOT_PRECISION = "not_precision"
NOT_REPRODUCED = "not_reproduced"
VERDICT_TEXT = {
    PRECISION: "16-bit precision: {ref} is finite here",
    NOT_PRECISION: "not precision: {ref} is non-finite too \u2014 check the data, the learning rate, the loss",
    NOT_REPRODUCED: "not reproduced: the replay of the step as configured is finite (an op that is not "
                    "deterministic, or randomness the lens cannot replay)",
}
_WHERE = {records.replays.OUTPUT: "the output of {row}", records.replays.LOSS: "the loss",
          records.replays.GRADIENT: "the gradient of {row}"}


def first_nonfinite(rows, kinds, counts):
    """``{"row", "kind", "where", "count"}`` of the first row (forward order)
    whose count of non-finite elements is above 0, else None."""
    for row, kind, count in zip(rows, kinds, counts):
        if np.isfinite(count) and count > 0:
            return {"row": row, "kind": kind, "where": _WHERE[kind].format(row=row), "count": float(count)}
    return None


def verdict(record, values, tag=None):
    """The verdict of one replay: ``{"verdict", "text", "candidate",
    "reference", "candidate_label", "reference_label", "reference_precision",
    "layer"}`` from its
    RecordMetadata and values ``[rows, NONFINITE_REPLAY_COLUMNS]``;
    ``candidate``/``reference`` are ``first_nonfinite`` of each side and
    ``layer`` the row the NaN is traced to (the candidate's first)."""
    info = records.read_replay(record, tag)
    columns = metadata.NONFINITE_REPLAY_COLUMNS
    values = np.asarray(values, np.float64)
    cand = first_nonfinite(record.rows, info.row_kinds, values[:, columns.index("candidate_nonfinite")])
    ref = first_nonfinite(record.rows, info.row_kinds, values[:, columns.index("reference_nonfinite")])
    code = NOT_REPRODUCED if cand is None else (PRECISION if ref is None else NOT_PRECISION)
    ref_label = info.reference.compute_dtype or info.reference.label
    return {
        "verdict": code,
        "text": VERDICT_TEXT[code].format(ref=ref_label),
        "candidate": cand,
        "reference": ref,
        "candidate_label": info.candidate.label,
        "reference_label": ref_label,
        "reference_precision": records.precision_text(info.reference.precision),
        "layer": (cand or ref or {}).get("row"),
    }


def run_replays(source, run):
    """``[{"step", "tag", ...verdict}]`` of every replay of ``run``, oldest first."""
    out = []
    for entry in source.entries_of_kind(run, metadata.NONFINITE_REPLAY):
        series = source.series(run, entry.tag)
        for i, step in enumerate(series.steps):
            out.append(dict(verdict(series.record, series.values[i], entry.tag), step=int(step), tag=entry.tag))
    return sorted(out, key=lambda r: r["step"])


def detail(found):
    """The part of a verdict an alert's details carry."""
    return {k: found.get(k) for k in ("step", "verdict", "text", "layer", "candidate", "reference", "tag",
                                      "reference_precision")}


def summary(found):
    """One sentence of a replay: where each side first went non-finite and the verdict."""
    cand = found["candidate"]["where"] if found["candidate"] else "nothing (finite)"
    ref = found["reference"]["where"] if found["reference"] else "nothing (finite)"
    said = found.get("reference_precision")
    return ("replayed before its update: first non-finite in %s: %s; in %s: %s. Verdict: %s%s."
            % (found["candidate_label"], cand, found["reference_label"], ref, found["text"],
               " (%s)" % said if said else ""))

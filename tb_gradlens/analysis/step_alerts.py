"""Alerts of the records about single steps: an embedding id past its table
(``gradient_indices``) and the replayed first non-finite step
(``nonfinite_replay``).

TensorFlow-free; ``findings`` collects them with the others.
"""

import numpy as np

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.analysis import codes
from tb_gradlens.analysis import detectors
from tb_gradlens.analysis import replays
from tb_gradlens.analysis import texts
from tb_gradlens.analysis.codes import Alert


def alerts_for_gradient_indices(series, view_tag=None):
    """Out-of-range alert of a gradient_indices Series: a sparse gradient
    naming a row past its table (an input id out of range).  ``view_tag``:
    the grad_stats tag of the same variables, which the alert opens."""
    rows, steps = series.record.rows, series.steps
    if len(steps) == 0:
        return []
    past = series.column("out_of_range").astype(np.float64)
    found = detectors.hits(past, past > 0)
    index = detectors.by_first(found)
    if not len(index):
        return []
    a, b = int(steps[found["first"][index].min()]), int(steps[found["last"][index].max()])
    table = records.read_gradient_indices(series.record, series.tag)
    r0 = index[0]
    view = codes.view(series, "count", rows[r0], a)
    if view_tag is not None:
        view.update(name=metadata.GRAD_STATS, tag=view_tag)
    return [Alert(
        codes.ERROR, codes.INDEX_OUT_OF_RANGE, series.run, series.tag, a, b, [rows[i] for i in index],
        texts.INDEX_OUT_OF_RANGE.format(vars=texts.names(rows, index), n="?" if table[r0] is None else table[r0],
                                        m=int(found["count"][index].max()), a=a,
                                        k=float(np.nanmax(found["worst"][index]))),
        texts.INDEX_OUT_OF_RANGE_FIX, view,
        detectors.row_details(rows, steps, found, index, steps=found["count"].astype(int).tolist(),
                     worst=found["worst"].tolist(), table_rows=list(table)),
    )]


def alerts_for_nonfinite_replay(series):
    """The non-finite alert of a ``nonfinite_replay`` Series: the first train
    step in trouble, where it went non-finite in each setting, the verdict."""
    if len(series.steps) == 0:
        return []
    out = []
    for i, step in enumerate(series.steps):
        found = dict(replays.verdict(series.record, series.values[i], series.tag), step=int(step), tag=series.tag)
        where = found["candidate"] or found["reference"]
        a = int(step)
        out.append(Alert(
            codes.ERROR, codes.NONFINITE, series.run, series.tag, a, a, [where["row"]] if where else [],
            texts.REPLAY.format(a=a, cand=found["candidate_label"],
                                where=where["where"] if found["candidate"] else "nowhere (the replay is finite)",
                                summary="It was " + replays.summary(found)),
            texts.REPLAY_FIX[found["verdict"]].format(a=a, layer=found["layer"] or "that layer"),
            codes.view(series, "candidate_nonfinite", where["row"] if where else None, a),
            [{"variable": where["row"] if where else None, "step_first": a, "step_last": a,
              "replay": replays.detail(found)}],
        ))
    return out

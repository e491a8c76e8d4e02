"""What the plugin's JSON routes answer, once their parameters are read.

TensorFlow-free.  ``gradlens_plugin.GradLensPlugin``'s handlers parse a
request and call the ``*_impl`` functions here, as TensorBoard's own
plugins do; these select, read and shape the answer (docs/ROUTES.md).
Errors are TensorBoard's: ``InvalidArgumentError`` (400), ``NotFoundError``
(404).
"""

from typing import Any
from typing import Dict
from typing import Optional

from tensorboard import errors
import numpy as np

from tb_gradlens import analysis
from tb_gradlens import metadata
from tb_gradlens.analysis import advice
from tb_gradlens.analysis import answers
from tb_gradlens.serving import health
from tb_gradlens.serving import judgment_json
from tb_gradlens.serving import reading

# What one ``series`` answer may hold.  Steps are evenly thinned to
# ``max_steps`` (default DEFAULT_MAX_STEPS, at most MAX_STEPS; the answer
# says ``sampled: true``); more than MAX_VALUES numbers (rows x columns x
# steps) is a 400 that says what to narrow.  A full answer of MAX_VALUES
# float32 numbers is ~40 MB of JSON.
DEFAULT_MAX_STEPS = 2000
MAX_STEPS = 10000
MAX_VALUES = 4_000_000
# Steps of a log2 histogram read for the tab when it names none (histograms route).
HISTOGRAM_STEPS = 500
MAX_HISTOGRAM_STEPS = 5000
# Buckets of steps of the health route (about one per pixel column of the tab's heatmap).
HEALTH_BUCKETS = 1000
MAX_HEALTH_BUCKETS = 5000


def check_answer_size(n_rows, n_columns, n_steps):
    """InvalidArgumentError when rows x columns x steps exceeds MAX_VALUES."""
    n_values = n_rows * n_columns * n_steps
    if n_values > MAX_VALUES:
        raise errors.InvalidArgumentError(
            "this answer would hold %d values (%d rows x %d columns x %d steps), more than the "
            "%d one answer may hold: ask for fewer rows (rows=, row=), columns (columns=) or "
            "steps (max_steps=, step_min=, step_max=)"
            % (n_values, n_rows, n_columns, n_steps, MAX_VALUES)
        )


def series_answer(series, rows, columns, steps):
    """The JSON-ready answer of the series and histograms routes: rows,
    columns and steps (index lists) of a Series, ``values[column][row][step]``."""
    record = series.record
    index = np.ix_(steps, np.asarray(rows, np.intp), np.asarray(columns, np.intp))
    values = series.values[index]  # [steps, rows, columns]
    return {
        "run": series.run,
        "tag": series.tag,
        "kind": record.kind,
        "rows": [record.rows[i] for i in rows],
        "columns": [record.columns[i] for i in columns],
        "extras": record.extras,
        "sampled": series.sampled,
        "steps": series.steps[steps],
        "wall_times": series.wall_times[steps],
        "values": np.ascontiguousarray(values.transpose(2, 1, 0)),
    }


def filter_dtype_maps(maps, pattern):
    """The dtype maps with only the layers and variables whose path matches
    ``pattern`` (the ``rows`` pattern of ``series``: bounded time, 400 when
    refused).  The maps are not changed (they are the cache's)."""
    keys = ("layers", "variables")
    paths = sorted({
        item["path"] for m in maps for key in keys for item in (m.get("map") or {}).get(key, ())
    })
    keep = {paths[i] for i in reading.select_rows(paths, pattern)}
    out = []
    for m in maps:
        if m.get("map"):
            shown = {key: [x for x in m["map"].get(key, ()) if x["path"] in keep] for key in keys}
            m = dict(m, map=dict(m["map"], **shown))
        out.append(m)
    return out


def series_impl(series, rows, columns, step_min, step_max, max_steps):
    """The ``series`` answer: ``rows`` (indices) of a Series, the named
    ``columns`` (all if None), its steps in [step_min, step_max] evenly
    thinned to ``max_steps`` (None: DEFAULT_MAX_STEPS; at most MAX_STEPS)."""
    max_steps = min(DEFAULT_MAX_STEPS if max_steps is None else max_steps, MAX_STEPS)
    columns = reading.select_columns(series.record.columns, columns)
    in_range = reading.select_steps(series.steps, step_min, step_max)
    steps = in_range[reading.thin_indices(len(in_range), max_steps)]
    check_answer_size(len(rows), len(columns), len(steps))
    body = series_answer(series, rows, columns, steps)
    body["sampled"] = bool(series.sampled or len(steps) < len(in_range))
    return body


def histogram_series(source, run, tag, max_steps):
    """The grad_histogram Series of ``tag``, at most ``max_steps`` steps
    (None: HISTOGRAM_STEPS; at most MAX_HISTOGRAM_STEPS) read with the data
    provider's own downsampling; 400 for another kind."""
    max_steps = min(max_steps or HISTOGRAM_STEPS, MAX_HISTOGRAM_STEPS)
    if source.entry(run, tag).kind != metadata.GRAD_HISTOGRAM:
        raise errors.InvalidArgumentError("tag %r is not a grad_histogram record" % tag)
    return source.sampled_series(run, tag, max_steps)


def histograms_impl(series, rows, steps):
    """The ``histograms`` answer: every bin column of ``rows`` at ``steps`` (indices)."""
    columns = list(range(len(series.record.columns)))
    check_answer_size(len(rows), len(columns), len(steps))
    return series_answer(series, rows, columns, steps)


def grad_stats_series(source, run, tag):
    """The grad_stats Series of ``tag``; 400 for another kind."""
    series = source.series(run, tag)
    if series.record.kind != metadata.GRAD_STATS:
        raise errors.InvalidArgumentError("tag %r is not a grad_stats record" % tag)
    return series


def health_buckets(buckets):
    """The buckets a health answer is cut into (None: HEALTH_BUCKETS; at most MAX_HEALTH_BUCKETS)."""
    return min(buckets or HEALTH_BUCKETS, MAX_HEALTH_BUCKETS)


def health_impl(source, series, rows, steps, buckets):
    """The ``health`` answer of ``rows`` and ``steps`` (indices) of a
    grad_stats Series of ``source``, in at most ``buckets`` buckets of steps.
    Every row and step: from the tag's ``health.StatusTable``, kept in the
    source's cache and extended with the steps the tag gained since."""
    record = series.record
    check_answer_size(len(rows), 2, min(buckets, len(steps)))  # status, nonfinite
    every = len(rows) == len(record.rows) and len(steps) == len(series.steps)
    table = status_table(source, series) if every else None
    body = None
    if table is not None:
        with table.lock:
            if table.follows(series.steps, series.wall_times):  # not extended past it meanwhile
                table.extend(series.steps, series.wall_times, {c: series.column(c) for c in health.COLUMNS})
                body = table.answer(buckets)
        source.cache.put(_status_table_key(source, series), None, table, "data")  # kept, at its size now
    if body is None:
        index = np.ix_(steps, np.asarray(rows, np.intp))
        columns = {c: series.column(c)[index] for c in health.COLUMNS}
        body = health.gradient_health(series.steps[steps], columns, buckets)
    body.update(run=series.run, tag=series.tag, rows=[record.rows[i] for i in rows])
    return body


def status_table(source, series):
    """The ``health.StatusTable`` of a grad_stats Series: the one kept for its
    tag when its steps are the first of the series', else a new one; None
    when the kept one is ahead of the series (a request at an older version:
    answered without it)."""
    table = source.cache.latest(_status_table_key(source, series), "data")
    if table is None or table.codes.shape[1] != len(series.record.rows):
        return health.StatusTable(len(series.record.rows))
    with table.lock:
        if table.follows(series.steps, series.wall_times):
            return table
        return None if table.n > len(series.steps) else health.StatusTable(len(series.record.rows))


def _status_table_key(source, series):
    return source.key("status table", series.run, series.tag)


def dtypes_impl(source, run, tag, pattern):
    """The ``dtypes`` answer: the dtype maps of ``tag`` (None: every dtypes
    record of the run; 404 when it has none), oldest first, with only the
    layers and variables matching ``pattern`` (None: all)."""
    if tag is None:
        entries = source.entries_of_kind(run, metadata.DTYPES)
        if not entries:
            raise errors.NotFoundError("run %r has no dtypes record" % run)
    else:
        entries = [source.entry(run, tag)]
    maps = []
    for entry in entries:
        for m in source.dtype_maps(run, entry.tag):
            maps.append(dict(m, tag=entry.tag))
    maps.sort(key=lambda m: (m["step"], m["wall_time"]))
    if pattern is not None:
        maps = filter_dtype_maps(maps, pattern)
    latest = max(entries, key=lambda e: (e.max_step or 0, e.last_wall_time or 0))
    return {"run": run, "tag": latest.tag, "maps": maps}


def scalars_impl(source, run, tag):
    """The ``scalars`` answer: a TensorBoard scalar tag of ``run``."""
    steps, wall_times, values = source.scalars(run, tag)
    return {"run": run, "tag": tag, "steps": steps, "wall_times": wall_times, "values": values}


def alerts_impl(source, run, thresholds, file_problems):
    """The ``alerts`` answer of ``run`` (None: every run) of a (filtered)
    source; ``file_problems()``: {run: [{"file", "error"}]} of the logdir."""
    if run is not None:
        source.entries(run)  # 404 for an unknown run
    runs = None if run is None else [run]
    alerts, problems = analysis.run_alerts(source, runs, thresholds)
    problems = problems + source.point_errors(runs) + [
        {"run": file_run, "tag": None, "file": p["file"], "error": p["error"]}
        for file_run, found in sorted(file_problems().items())
        if run is None or file_run == run
        for p in found
    ]
    return {"alerts": [a.to_json() for a in alerts], "errors": problems}


def run_comparison_impl(source, run_a, run_b, quantity, noise_run, thresholds, step_min, step_max):
    """The ``compare`` answer: the verdict over the whole runs, the series
    cut to [step_min, step_max] (``analysis.compare_runs``)."""
    comparison = analysis.compare_runs(source, run_a, run_b, quantity, noise_run, thresholds)
    body = judgment_json.run_comparison_json(comparison)
    body["summary"]["answer"] = answers.noise_sentence(comparison)  # what the first answer says of these runs
    return restrict_run_comparison(body, step_min, step_max)


def restrict_run_comparison(result: Dict[str, Any], step_min: Optional[int] = None,
                            step_max: Optional[int] = None) -> Dict[str, Any]:
    """A ``compare_runs`` answer with its step-aligned sequences cut to
    ``[step_min, step_max]`` (a display filter: the summary, decided on
    the whole runs, stays as it is)."""
    if step_min is None and step_max is None:
        return result

    def keep(steps):
        steps = np.asarray(steps)
        lo = -np.inf if step_min is None else step_min
        hi = np.inf if step_max is None else step_max
        return (steps >= lo) & (steps <= hi)

    out = dict(result)
    index = keep(result["steps"])
    for key in ("steps", "a", "b", "difference", "ratio", "rel_difference"):
        out[key] = np.asarray(result[key])[index]
    for key in ("only_in_a", "only_in_b"):
        out[key] = np.asarray(result[key])[keep(result[key])]
    if result["noise"] is not None:
        index = keep(result["noise"]["steps"])
        out["noise"] = {k: np.asarray(v)[index] for k, v in result["noise"].items()}
    return out



def answers_impl(source, run, thresholds):
    """The ``answers`` answer (``analysis.answers``): every run's five answers,
    or ``run``'s; NotFoundError for an unknown run."""
    if run is not None and run not in source.runs():
        raise errors.NotFoundError("no run %r" % (run,))
    return answers.logdir_answers(source, None if run is None else [run], thresholds)


def overview_impl(source, thresholds):
    """The ``overview`` answer: every run's headline (``analysis.overview``) of a (filtered) source."""
    return {"runs": judgment_json.overview_json(analysis.overview(source, thresholds))}


def advice_impl(source, run):
    """The ``advice`` answer: the latest advice of ``run`` and its history (``analysis.advice.run_advice``)."""
    return judgment_json.advice_json(advice.run_advice(source, run))


def limits_impl(source, run, tag, thresholds=analysis.DEFAULT_THRESHOLDS):
    """The ``limits`` answer: the tolerances of a divergence-like tag (``analysis.limits``)."""
    return judgment_json.limits_json(analysis.limits(source, run, tag, thresholds))

"""A Source seen through the tab's filters: a row regex and a step range.

TensorFlow-free.  ``FilteredSource(source, pattern, step_min, step_max)``
answers what ``reading.Source`` answers (the duck type ``analysis`` reads
through), restricted to the rows whose name matches ``pattern`` (search
semantics, ``reading.select_rows``) and to the steps in
``[step_min, step_max]``.  So ``analysis.overview``, ``analysis.run_alerts``
and ``analysis.compare`` run unchanged on what the tab shows: the Overview
and alerts honour the tab's variable regex and step range, and Compare its
step range, with the same detectors as the unfiltered routes and the CLI.

The regex applies to variable and layer rows; the single ``loss`` row of a
``loss_comparison`` record is kept (it is no variable), and JSON records
(dtype maps, lens status) pass through.  A record left with no row is left
out.  Results are memoized in the wrapped source's cache under the filter.
"""

import numpy as np

from tb_gradlens import metadata
from tb_gradlens.serving import reading

# Extras that hold one entry per row (tb_gradlens.records): sliced with the rows.
PER_ROW_EXTRAS = ("row_dtypes", "variable_dtypes", "gradient_dtypes")

# Kinds whose rows are not variables or layers: the regex does not apply.
UNFILTERED_ROW_KINDS = (metadata.LOSS_COMPARISON,) + metadata.JSON_KINDS


def is_filtered(pattern=None, step_min=None, step_max=None):
    """True when any filter is set."""
    return pattern is not None or step_min is not None or step_max is not None


def restrict_record(record, index):
    """A RecordMetadata with only the rows at ``index`` (per-row extras sliced)."""
    extras = dict(record.extras)
    for key in PER_ROW_EXTRAS:
        value = extras.get(key)
        if isinstance(value, list) and len(value) == len(record.rows):
            extras[key] = [value[i] for i in index]
    return metadata.RecordMetadata(
        record.kind, [record.rows[i] for i in index], record.columns, extras, record.version
    )


def restrict_series(series, record, row_index, step_index):
    """A reading.Series with the rows of ``row_index`` and steps of ``step_index``."""
    values = series.values
    if len(row_index) != values.shape[1]:
        values = values[:, np.asarray(row_index, np.intp), :]
    if len(step_index) != len(series.steps):
        values = values[step_index]
    return reading.Series(
        series.run, series.tag, record, series.steps[step_index],
        series.wall_times[step_index], values, series.sampled,
    )


class FilteredSource:
    """``source`` restricted to rows matching ``pattern`` and steps in range."""

    def __init__(self, source, pattern=None, step_min=None, step_max=None):
        self._source = source
        self.pattern = pattern
        # One budget for the pattern over every tag this source restricts (a request).
        self._row_filter = None if pattern is None else reading.row_filter(pattern)
        self.step_min = step_min
        self.step_max = step_max
        self._key = ("filtered", pattern, step_min, step_max)
        self._entries = {}  # run -> restricted TagEntries
        self._rows = {}  # (run, tag) -> row indices kept

    @property
    def unfiltered(self):
        """The source this one filters: judgements are made on whole records
        (a display filter never changes a limit or a verdict)."""
        return self._source

    # -- listing -------------------------------------------------------------

    def records(self):
        return {run: self.entries(run) for run in self.runs()}

    def runs(self):
        return self._source.runs()

    def entries(self, run):
        """The entries of ``run`` restricted (each run when first asked: a
        request about one run matches the pattern against that run only)."""
        found = self._entries.get(run)
        if found is None:
            found = self._entries[run] = self._restrict(self._source.entries(run))  # NotFoundError
        return found

    def _restrict(self, entries):
        out = []
        for e in entries:
            if e.record is None or e.kind in UNFILTERED_ROW_KINDS or self.pattern is None:
                out.append(e)
                continue
            index = reading.select_rows(e.record.rows, self._row_filter)
            if not index:
                continue
            self._rows[(e.run, e.tag)] = index
            record = e.record if len(index) == len(e.record.rows) else restrict_record(e.record, index)
            out.append(reading.TagEntry(e.run, e.tag, record, e.error, e.max_step, e.last_wall_time))
        return out

    def entry(self, run, tag):
        for e in self.entries(run):
            if e.tag == tag:
                return e
        return self._source.entry(run, tag)  # NotFoundError, or a tag the regex left out

    def entries_of_kind(self, run, kind):
        return [e for e in self.entries(run) if e.kind == kind]

    # -- reading -------------------------------------------------------------

    def cached(self, name, entry, compute, pool="derived", reads=()):
        return self._source.cached((name,) + self._key, entry, compute, pool, reads)

    def series(self, run, tag):
        base = self._source.series(run, tag)
        entry = self.entry(run, tag)
        rows = self._rows.get((run, tag), range(len(base.record.rows)))
        steps = reading.select_steps(base.steps, self.step_min, self.step_max)
        if len(rows) == len(base.record.rows) and len(steps) == len(base.steps):
            return base
        return self.cached(
            "series", entry, lambda: restrict_series(base, entry.record, list(rows), steps), pool="data"
        )

    def dtype_maps(self, run, tag):
        return self._source.dtype_maps(run, tag)

    def lens_statuses(self, run, tag):
        return self._source.lens_statuses(run, tag)

    def point_errors(self, runs=None):
        return self._source.point_errors(runs)

    def scalar_listing(self):
        return self._source.scalar_listing()

    def scalars(self, run, tag):
        steps, wall_times, values = self._source.scalars(run, tag)
        keep = reading.select_steps(steps, self.step_min, self.step_max)
        return steps[keep], wall_times[keep], values[keep]

"""Long-format rows of every float record (``tb-gradlens export``, pandas).

TensorFlow-free: one row per (run, tag, step, row, column).
"""

from typing import Any
from typing import Collection
from typing import Dict
from typing import Iterable
from typing import Iterator
from typing import List
from typing import Optional
from typing import Tuple

from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens.analysis.record_source import RecordSource

EXPORT_FIELDS = ("run", "tag", "kind", "step", "wall_time", "row", "column", "value")
# Left out unless asked for by kind: a histogram has 281 columns per variable and logged step, 20x the
# statistics (docs/benchmarks-history.md, section 14).
NOT_BY_DEFAULT = (metadata.GRAD_HISTOGRAM,)
# What can be exported: every float record kind.
FLOAT_KINDS = tuple(k for k in metadata.KINDS if k not in metadata.JSON_KINDS)


def kinds_present(source: RecordSource, runs: Iterable[str]) -> List[str]:
    """The float record kinds ``runs`` hold (readable records), in contract order."""
    found = {e.kind for run in runs for e in source.entries(run) if e.record is not None}
    return [k for k in FLOAT_KINDS if k in found]


def export_rows(source: RecordSource, runs: Iterable[str], kinds: Optional[Collection[str]] = None,
                ) -> Tuple[Iterator[Dict[str, Any]], List[Tuple[str, str, str]]]:
    """(rows, problems): a generator of dicts of EXPORT_FIELDS for every
    float record of ``runs`` (of ``kinds`` if given), and the list it fills
    with ``(run, tag, error)`` for tags that cannot be read."""
    problems = []

    def rows():
        for run in runs:
            for entry in source.entries(run):
                if entry.record is None:
                    problems.append((run, entry.tag, entry.error))
                    continue
                if entry.kind in metadata.JSON_KINDS or (kinds and entry.kind not in kinds):
                    continue
                try:
                    series = source.series(run, entry.tag)
                except errors.InvalidArgumentError as e:
                    problems.append((run, entry.tag, str(e)))
                    continue
                yield from _series_rows(run, entry, series)

    return rows(), problems


def _series_rows(run, entry, series):
    record = series.record
    for s, step in enumerate(series.steps.tolist()):
        wall = float(series.wall_times[s])
        values = series.values[s].tolist()
        for r, row in enumerate(record.rows):
            for c, column in enumerate(record.columns):
                yield {
                    "run": run, "tag": entry.tag, "kind": entry.kind, "step": step,
                    "wall_time": wall, "row": row, "column": column, "value": values[r][c],
                }

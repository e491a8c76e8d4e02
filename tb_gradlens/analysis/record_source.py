"""``RecordSource``: what every analysis entry point reads logged records from.

``tb_gradlens.serving.reading.Source`` is one (over TensorBoard's data
provider: the plugin's per request, the command line's over a
``serving.logdir.LoadedLogdir``); ``serving.filtered_source`` wraps one for
the tab's variable regex and step range; tests build small fakes with the
methods they need.  The analysis never imports the serving side, so it names
here what it calls (a ``typing.Protocol``: checked by the type checker where
a source is passed, nothing at run time).  Tag entries and series are the
serving side's ``TagEntry`` and ``Series``; here they are read by attribute
(``entry.run``, ``entry.tag``, ``entry.kind``, ``entry.record``;
``series.steps``, ``series.values``, ``series.rows``, ``series.column(name)``).
"""

from typing import Any
from typing import Callable
from typing import Dict
from typing import List
from typing import Protocol
from typing import Sequence
from typing import Tuple

import numpy as np


class RecordSource(Protocol):
    """The reading methods of ``serving.reading.Source`` the analysis uses."""

    def runs(self) -> List[str]:
        """Sorted names of the runs that hold gradlens records."""

    def entries(self, run: str) -> List[Any]:
        """The tag entries of ``run``; NotFoundError for an unknown run."""

    def entry(self, run: str, tag: str) -> Any:
        """The tag entry of (run, tag); NotFoundError if either is unknown."""

    def entries_of_kind(self, run: str, kind: str) -> List[Any]:
        """Readable tag entries of ``run`` whose record is of ``kind``."""

    def series(self, run: str, tag: str) -> Any:
        """The series (steps, values [steps, rows, columns]) of a float record."""

    def dtype_maps(self, run: str, tag: str) -> List[Dict[str, Any]]:
        """[{"step", "wall_time", "map"[, "error"]}] of a ``dtypes`` tag, oldest first."""

    def lens_statuses(self, run: str, tag: str) -> List[Dict[str, Any]]:
        """[{"step", "wall_time", "status"[, "error"]}] of a ``lens_status`` tag, oldest first."""

    def advice(self, run: str, tag: str) -> List[Dict[str, Any]]:
        """[{"step", "wall_time", "advice"[, "error"]}] of an ``advice`` tag, oldest first."""

    def scalar_listing(self) -> Dict[str, Dict[str, Any]]:
        """{run: {tag: time series}} of TensorBoard's scalar summaries."""

    def scalars(self, run: str, tag: str) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps int64, wall_times float64, values float64) of a scalar tag."""

    def cached(self, name: str, entry: Any, compute: Callable[[], Any], pool: str = "derived",
               reads: Sequence[Any] = ()) -> Any:
        """``compute()`` memoized for ``entry`` until its tag, or one of the entries ``reads``, changes."""

"""Findings from logged gradlens numbers: alerts, run overview, run comparison.

Pure NumPy, TensorFlow-free, shared by the TensorBoard plugin and the
command line.  Every entry point takes a *source*: a ``RecordSource``
(``record_source``: the methods of ``tb_gradlens.serving.reading.Source``
it calls, ``runs``, ``entries``, ``entries_of_kind``, ``series``,
``dtype_maps``, ``lens_statuses``, ``scalars``, ``scalar_listing``,
``cached``).  The plugin builds one over
TensorBoard's data provider; the CLI builds the same over
``EventMultiplexer`` + ``MultiplexerDataProvider``.

Modules, one job each:

* ``record_source``: ``RecordSource``, what the analysis reads from;
* ``codes``: severities, alert codes, ``Thresholds`` and ``Alert``;
* ``texts``: what each alert says;
* ``detectors``: pure functions of ``[steps, rows]`` arrays;
* ``tolerances``: the limit each compared row is judged against (what
  rounding explains), and the tolerances route;
* ``alerts``: one detector per record kind;
* ``step_alerts``: the alerts of single-step records (an embedding id past
  its table, the replayed first non-finite step);
* ``loss_scale``: loss-scale skips told apart from real trouble;
* ``replays``: the verdict of a replayed non-finite step;
* ``findings``: the alerts of tags and runs (``run_alerts``), grouped;
* ``overview``: each run's headline;
* ``runs``: ``compare_runs``, the run comparison: two runs step by step
  ("comparison" alone is the precision comparison of one step);
* ``run_verdict``: the run comparison's verdict against its noise runs;
* ``coverage``: what the writers asked for and could not log;
* ``export``: long-format rows;
* ``comparisons``: a run's comparisons, named and ordered, and its precision;
* ``answers`` (with ``sentences``, ``answer_rows``, ``answer_divergence``):
  the five questions a user asks of a run, answered once in plain sentences
  for the tab (the ``answers`` route) and ``report``.
"""

from tb_gradlens.analysis.alerts import alerts_for_dtype_maps  # noqa: F401
from tb_gradlens.analysis.alerts import alerts_for_grad_stats  # noqa: F401
from tb_gradlens.analysis.alerts import alerts_for_histogram  # noqa: F401
from tb_gradlens.analysis.alerts import alerts_for_update_stats  # noqa: F401
from tb_gradlens.analysis.divergence_alerts import alerts_for_divergence  # noqa: F401
from tb_gradlens.analysis.codes import *  # noqa: F401,F403 (severities, codes, Thresholds, Alert)
from tb_gradlens.analysis.coverage import coverage  # noqa: F401
from tb_gradlens.analysis.detectors import exceedances  # noqa: F401
from tb_gradlens.analysis.detectors import first_nonfinite  # noqa: F401
from tb_gradlens.analysis.detectors import first_true  # noqa: F401
from tb_gradlens.analysis.detectors import last_true  # noqa: F401
from tb_gradlens.analysis.detectors import zero_runs  # noqa: F401
from tb_gradlens.analysis.export import EXPORT_FIELDS  # noqa: F401
from tb_gradlens.analysis.export import export_rows  # noqa: F401
from tb_gradlens.analysis.export import FLOAT_KINDS  # noqa: F401
from tb_gradlens.analysis.export import NOT_BY_DEFAULT  # noqa: F401
from tb_gradlens.analysis.export import kinds_present  # noqa: F401
from tb_gradlens.analysis.findings import group_alerts  # noqa: F401
from tb_gradlens.analysis.findings import run_alerts  # noqa: F401
from tb_gradlens.analysis.findings import tag_alerts  # noqa: F401
from tb_gradlens.analysis.overview import overview  # noqa: F401
from tb_gradlens.analysis.overview import worst_divergence  # noqa: F401
from tb_gradlens.analysis.record_source import RecordSource  # noqa: F401
from tb_gradlens.analysis.runs import DEFAULT_QUANTITY  # noqa: F401
from tb_gradlens.analysis.runs import LOSS_TAG  # noqa: F401
from tb_gradlens.analysis.runs import Quantity  # noqa: F401
from tb_gradlens.analysis.runs import SCALAR  # noqa: F401
from tb_gradlens.analysis.runs import align  # noqa: F401
from tb_gradlens.analysis.runs import compare_runs  # noqa: F401
from tb_gradlens.analysis.runs import quantity_series  # noqa: F401
from tb_gradlens.analysis.runs import relative_difference  # noqa: F401
from tb_gradlens.analysis.tolerances import is_replica_disagreement  # noqa: F401
from tb_gradlens.analysis.tolerances import judge  # noqa: F401
from tb_gradlens.analysis.tolerances import limits  # noqa: F401

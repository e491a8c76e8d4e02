"""The record contract: what each kind's extras hold, written and read here only.

TensorFlow-free.  ``metadata`` defines the frame of a record (version,
kind, rows, columns); this package defines the kind-specific keys beside
them (``RecordMetadata.extras``) and the dtype-map payload:

* writers (``summary_ops``, ``compare``, ``keras``, ``distribute``) build
  extras only with the ``*_extras`` / ``variant`` / ``dtype_map``
  functions here, and frame a record only with its ``*_record`` factory;
* readers (``analysis``, ``cli``, the plugin) take them out only with the
  ``read_*`` functions here, which validate types (a malformed value is a
  ``metadata.FormatError`` naming the tag, so one bad record becomes an
  error entry for its tag and never breaks the rest of a logdir) and fill
  in what records of older tb_gradlens versions did not state (the compute
  dtype of a comparison side is then inferred from its exact policy name,
  never from a substring).

Kinds and their extras:

==========================  ==============================================
grad_stats                  variable_dtypes, gradient_dtypes [rows];
                            skipped [{row, dtype, reason}]
grad_histogram              min_exponent (int), dtype_exponent_limits
                            {dtype: {min_subnormal, min_normal, max}}
update_stats                variable_dtypes [rows]
gradient_indices            table_rows [rows] (int or null)
optimizer_step              loss_scaling (bool)
nonfinite_replay            row_kinds [rows] ("output" | "loss" |
                            "gradient"), candidate, reference
                            (``variant``)
divergence,                 reference, candidate (``variant``);
activation_divergence,      comparison ("precision" | "replica_vs_mean");
loss_comparison             floor_fraction; row_dtypes [rows] (optional:
                            the candidate's compute dtype per row)
dtypes                      (none; the tensor is a ``dtype_map`` JSON)
lens_status                 (none; the tensor is a ``lens_status`` JSON:
                            what the lens was asked to log, on which
                            schedule, and what it cannot log and why;
                            the run's environment and what float32
                            measured to be, ``environments``)
advice                      (none; the tensor is an ``advice`` JSON: the
                            precision advisor's per-unit attribution,
                            recommendation and its verification; rows
                            name the units)
==========================  ==============================================

Modules: ``framing`` (one factory per kind: the RecordMetadata a writer
writes, its columns, fixed rows and extras), ``variants`` (comparison
sides), ``comparisons``, ``statistics``
(gradient, histogram and update extras), ``dtype_maps``, ``statuses``
(lens_status), ``environments`` (the hardware and what float32 is
there), ``advice_records``, ``replays`` (optimizer steps and
non-finite replays), ``checks`` (shared type checks); every
name is also importable from ``tb_gradlens.records``.
"""

from tb_gradlens import metadata
from tb_gradlens.records.advice_records import ADVICE_RECOMMENDATION_NUMBERS  # noqa: F401
from tb_gradlens.records.advice_records import ADVICE_UNIT_NUMBERS  # noqa: F401
from tb_gradlens.records.advice_records import Advice  # noqa: F401
from tb_gradlens.records.advice_records import advice  # noqa: F401
from tb_gradlens.records.advice_records import advice_recommendation  # noqa: F401
from tb_gradlens.records.advice_records import advice_unit  # noqa: F401
from tb_gradlens.records.advice_records import read_advice  # noqa: F401
from tb_gradlens.records.comparisons import COMPARISONS  # noqa: F401
from tb_gradlens.records.comparisons import ComparisonInfo  # noqa: F401
from tb_gradlens.records.comparisons import DEFAULT_FLOOR_FRACTION  # noqa: F401
from tb_gradlens.records.comparisons import PRECISION  # noqa: F401
from tb_gradlens.records.comparisons import REPLICAS_NAME  # noqa: F401
from tb_gradlens.records.comparisons import REPLICA_VS_MEAN  # noqa: F401
from tb_gradlens.records.comparisons import comparison_extras  # noqa: F401
from tb_gradlens.records.comparisons import read_comparison  # noqa: F401
from tb_gradlens.records.comparisons import read_reference_16_bit  # noqa: F401
from tb_gradlens.records.comparisons import row_compute_dtypes  # noqa: F401
from tb_gradlens.records.dtype_maps import LAYER_KEYS  # noqa: F401
from tb_gradlens.records.environments import IEEE_FLOAT32_BITS  # noqa: F401
from tb_gradlens.records.environments import NUMERIC_VARIABLES  # noqa: F401
from tb_gradlens.records.environments import PROBED_OPS  # noqa: F401
from tb_gradlens.records.environments import environment  # noqa: F401
from tb_gradlens.records.environments import environment_differences  # noqa: F401
from tb_gradlens.records.environments import environment_text  # noqa: F401
from tb_gradlens.records.environments import float32_precision  # noqa: F401
from tb_gradlens.records.environments import is_degraded  # noqa: F401
from tb_gradlens.records.environments import measured_text  # noqa: F401
from tb_gradlens.records.environments import precision_text  # noqa: F401
from tb_gradlens.records.environments import read_environment  # noqa: F401
from tb_gradlens.records.environments import read_float32_precision  # noqa: F401
from tb_gradlens.records.dtype_maps import UNKNOWN  # noqa: F401
from tb_gradlens.records.dtype_maps import dtype_map  # noqa: F401
from tb_gradlens.records.dtype_maps import read_dtype_map  # noqa: F401
from tb_gradlens.records.tag_data import Series  # noqa: F401
from tb_gradlens.records.tag_data import TagEntry  # noqa: F401
from tb_gradlens.records.framing import DIVERGENCE_KINDS  # noqa: F401
from tb_gradlens.records.framing import LOSS_ROW  # noqa: F401
from tb_gradlens.records.framing import OPTIMIZER_ROW  # noqa: F401
from tb_gradlens.records.framing import activation_divergence_record  # noqa: F401
from tb_gradlens.records.framing import advice_record  # noqa: F401
from tb_gradlens.records.framing import comparison_record  # noqa: F401
from tb_gradlens.records.framing import divergence_record  # noqa: F401
from tb_gradlens.records.framing import dtypes_record  # noqa: F401
from tb_gradlens.records.framing import grad_histogram_record  # noqa: F401
from tb_gradlens.records.framing import grad_stats_record  # noqa: F401
from tb_gradlens.records.framing import gradient_indices_record  # noqa: F401
from tb_gradlens.records.framing import json_text  # noqa: F401
from tb_gradlens.records.framing import lens_status_record  # noqa: F401
from tb_gradlens.records.framing import loss_comparison_record  # noqa: F401
from tb_gradlens.records.framing import nonfinite_replay_record  # noqa: F401
from tb_gradlens.records.framing import optimizer_step_record  # noqa: F401
from tb_gradlens.records.framing import update_stats_record  # noqa: F401
from tb_gradlens.records.replays import ROW_KINDS  # noqa: F401
from tb_gradlens.records.replays import ReplayInfo  # noqa: F401
from tb_gradlens.records.replays import optimizer_step_extras  # noqa: F401
from tb_gradlens.records.replays import read_optimizer_step  # noqa: F401
from tb_gradlens.records.replays import read_replay  # noqa: F401
from tb_gradlens.records.replays import replay_extras  # noqa: F401
from tb_gradlens.records.statistics import GradientInfo  # noqa: F401
from tb_gradlens.records.statistics import HistogramInfo  # noqa: F401
from tb_gradlens.records.statistics import gradient_extras  # noqa: F401
from tb_gradlens.records.statistics import gradient_index_extras  # noqa: F401
from tb_gradlens.records.statistics import histogram_extras  # noqa: F401
from tb_gradlens.records.statistics import read_gradient  # noqa: F401
from tb_gradlens.records.statistics import read_gradient_indices  # noqa: F401
from tb_gradlens.records.statistics import read_histogram  # noqa: F401
from tb_gradlens.records.statistics import read_update  # noqa: F401
from tb_gradlens.records.statistics import update_extras  # noqa: F401
from tb_gradlens.records.statuses import Expectation  # noqa: F401
from tb_gradlens.records.statuses import LensStatus  # noqa: F401
from tb_gradlens.records.statuses import Unsupported  # noqa: F401
from tb_gradlens.records.statuses import expectation  # noqa: F401
from tb_gradlens.records.statuses import expected_steps  # noqa: F401
from tb_gradlens.records.statuses import lens_status  # noqa: F401
from tb_gradlens.records.statuses import read_lens_status  # noqa: F401
from tb_gradlens.records.statuses import unsupported  # noqa: F401
from tb_gradlens.records.variants import MIXED  # noqa: F401
from tb_gradlens.records.variants import POLICY_COMPUTE_DTYPES  # noqa: F401
from tb_gradlens.records.variants import VariantInfo  # noqa: F401
from tb_gradlens.records.variants import policy_label  # noqa: F401
from tb_gradlens.records.variants import read_variant  # noqa: F401
from tb_gradlens.records.variants import variant  # noqa: F401

FormatError = metadata.FormatError

_READERS = {
    metadata.GRAD_STATS: read_gradient,
    metadata.GRAD_HISTOGRAM: read_histogram,
    metadata.UPDATE_STATS: read_update,
    metadata.GRADIENT_INDICES: read_gradient_indices,
    metadata.OPTIMIZER_STEP: read_optimizer_step,
    metadata.NONFINITE_REPLAY: read_replay,
    metadata.DIVERGENCE: read_comparison,
    metadata.ACTIVATION_DIVERGENCE: read_comparison,
    metadata.LOSS_COMPARISON: read_comparison,
}


def validate(record, tag=None):
    """Raise FormatError unless ``record`` is a well-formed known record
    (``metadata.validate``: kind, rows, columns) whose extras are readable.
    The one check of a record: readers call it on what they list, writers on
    what they write, so a writer never writes what a reader refuses."""
    metadata.validate(record, tag)
    reader = _READERS.get(record.kind)
    if reader is not None:
        reader(record, tag)

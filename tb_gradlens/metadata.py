"""The gradlens summary format, shared by the writer and every reader.

TensorFlow-free: the TensorBoard plugin, the command line and the writer all
import this module.

A gradlens record is one TensorBoard tensor summary:

* ``SummaryMetadata.plugin_data.plugin_name == "gradlens"``;
* ``SummaryMetadata.data_class == DATA_CLASS_TENSOR`` (mandatory: without it
  neither TensorBoard loader returns the tag);
* ``plugin_data.content`` is UTF-8 JSON::

      {"version": 1, "kind": "grad_stats",
       "rows": ["dense/kernel", ...],      # variable or layer paths
       "columns": ["l2_norm", ...],        # statistic or metric names
       ...kind-specific keys (see KINDS)}

* the tensor is float32 ``[len(rows), len(columns)]``, one per step per tag
  (the ``JSON_KINDS``, ``dtypes``, ``lens_status`` and ``advice``, hold a
  scalar UTF-8 JSON string).

TensorBoard keeps the metadata of a tag's first event, so rows and columns of
a tag never change: the writer derives the tag from a digest of them
(``tag_for``), and a changed variable set gets a new tag.
"""

import collections
import hashlib
import json

from tensorboard.compat.proto import summary_pb2

from tb_gradlens import float_formats

PLUGIN_NAME = "gradlens"

# The newest content version this code writes and reads.  Version 2 added
# the stable-rounding and half-batch columns of the comparison records
# (``stable_rel_l2``, ``half_batch_rel_l2``; the loss: ``stable_rel_error``,
# ``half_batch_rel_error``); version 1 records are read as they are.
FORMAT_VERSION = 2

# ---------------------------------------------------------------------------
# Record kinds and their columns.
# ---------------------------------------------------------------------------

GRAD_STATS = "grad_stats"
GRAD_HISTOGRAM = "grad_histogram"
DIVERGENCE = "divergence"
ACTIVATION_DIVERGENCE = "activation_divergence"
LOSS_COMPARISON = "loss_comparison"
UPDATE_STATS = "update_stats"
GRADIENT_INDICES = "gradient_indices"
OPTIMIZER_STEP = "optimizer_step"
NONFINITE_REPLAY = "nonfinite_replay"
DTYPES = "dtypes"
LENS_STATUS = "lens_status"
ADVICE = "advice"

KINDS = (
    GRAD_STATS,
    GRAD_HISTOGRAM,
    DIVERGENCE,
    ACTIVATION_DIVERGENCE,
    LOSS_COMPARISON,
    UPDATE_STATS,
    GRADIENT_INDICES,
    OPTIMIZER_STEP,
    NONFINITE_REPLAY,
    DTYPES,
    LENS_STATUS,
    ADVICE,
)

# Kinds whose tensor is one scalar UTF-8 JSON string (rows name what it
# describes, no columns): the dtype map, the lens status and the precision
# advisor's advice.
JSON_KINDS = (DTYPES, LENS_STATUS, ADVICE)

# Per-variable gradient statistics (kind ``grad_stats``).  Value statistics
# (l2_norm .. rms) are taken over the finite elements; the counts say how
# many elements were left out.  A None gradient gives NaN value statistics,
# ``count`` = the variable's size and ``is_none`` = 1.
GRAD_STATS_COLUMNS = (
    "l2_norm",  # sqrt(sum g_i^2) over finite g_i
    "mean",  # sum g_i / n_finite
    "std",  # sqrt(sum (g_i - mean)^2 / n_finite)  (population)
    "min",
    "max",
    "max_abs",  # max |g_i|
    "rms",  # sqrt(sum g_i^2 / n_finite)
    "zero_fraction",  # #(g_i == +-0 exactly, by bits) / count
    "subnormal_fraction",  # #(0 < |g_i| < 2^-126) / count
    "nan_count",
    "posinf_count",
    "neginf_count",
    "count",  # number of elements
    "is_none",  # 1 if the gradient was None (variable disconnected)
)

# log2-magnitude histogram (kind ``grad_histogram``): column i < N_EXP_BINS
# counts finite nonzero |g| in [2^e, 2^(e+1)) with e = MIN_EXPONENT + i,
# i.e. e = floor(log2 |g|) over the whole float32/bfloat16 range, subnormals
# included; then exact zeros, +Inf, -Inf and NaN.
MIN_EXPONENT = float_formats.FORMATS["float32"].min_subnormal  # -149
MAX_EXPONENT = float_formats.FORMATS["float32"].max  # 127: largest finite float32 < 2^128
N_EXP_BINS = MAX_EXPONENT - MIN_EXPONENT + 1  # 277
HISTOGRAM_SPECIAL_COLUMNS = ("zero", "posinf", "neginf", "nan")
HISTOGRAM_COLUMNS = tuple(
    "2^%d" % e for e in range(MIN_EXPONENT, MAX_EXPONENT + 1)
) + HISTOGRAM_SPECIAL_COLUMNS

# Exponent limits a histogram view draws as lines: floor(log2) of the
# smallest subnormal, the smallest normal and the largest finite value.
DTYPE_EXPONENT_LIMITS = float_formats.exponent_limits()

# Divergence of a candidate c from a reference r (kinds ``divergence`` and
# ``activation_divergence``).  Formulas: tb_gradlens/numerics.py.
DIVERGENCE_COLUMNS_V1 = (
    "rel_l2",  # ||c - r||_2 / ||r||_2
    "cosine",  # <c, r> / (||c|| ||r||)
    "norm_ratio",  # ||c|| / ||r||
    "max_abs",  # max |c - r|
    "max_rel",  # max |c - r| / max(|r|, floor)
    "ulp_rms",  # rms((c - r) / spacing_candidate(r))
    "sign_flip",  # fraction sign(c) != sign(r) among |r| > floor
    "flush_to_zero",  # fraction r != 0 and c == 0
    "nonfinite",  # count of NaN/Inf in c or r
)
# rel_l2 of the stable-rounding pass (the reference rounded to the
# candidate's dtype between layers: compare/stable.py) against the
# reference; NaN where it was not measured.
STABLE_REL_L2 = "stable_rel_l2"
# rel_l2 of the reference gradient of the first half of the batch against
# the batch's: the gradient's sampling noise (gradients only; NaN elsewhere
# or where it was not measured).
HALF_BATCH_REL_L2 = "half_batch_rel_l2"
DIVERGENCE_COLUMNS = DIVERGENCE_COLUMNS_V1 + (STABLE_REL_L2, HALF_BATCH_REL_L2)
# The metrics of a candidate against a reference (numerics.divergence_metrics).
DIVERGENCE_METRICS = DIVERGENCE_COLUMNS_V1

# Loss of one step in both variants (kind ``loss_comparison``, row "loss").
LOSS_COMPARISON_COLUMNS_V1 = ("reference", "candidate", "abs_error", "rel_error")
STABLE_REL_ERROR = "stable_rel_error"  # rel_error of the stable-rounding pass's loss
HALF_BATCH_REL_ERROR = "half_batch_rel_error"  # rel_error of the half batch's reference loss
LOSS_COMPARISON_COLUMNS = LOSS_COMPARISON_COLUMNS_V1 + (STABLE_REL_ERROR, HALF_BATCH_REL_ERROR)

# What an optimizer step did to each variable (kind ``update_stats``).
UPDATE_STATS_COLUMNS = (
    "update_rms",  # rms(w_after - w_before)
    "update_ratio",  # ||w_after - w_before|| / ||w_before||
    "lost_update_bf16",  # fraction with w != w+dw but bf16(w+dw) == bf16(w)
)

# The indices of sparse (IndexedSlices) gradients, e.g. an Embedding's, per
# variable and logged step (kind ``gradient_indices``; only variables whose
# gradient is sparse).  An index past the table is an input id out of
# range: the applied gradient drops its row (XLA clamps the lookup).
GRADIENT_INDICES_COLUMNS = (
    "indices",  # indices the gradient names (with repeats)
    "out_of_range",  # of them, index >= the table's rows
    "negative",  # of them, index < 0 (dropped by TensorFlow too)
)

# What the optimizer did at a train step (kind ``optimizer_step``, row
# "optimizer"): written at every logged step and at every step the
# optimizer skipped (a float16 loss scale that overflowed).  Record steps
# count train steps (batches); the optimizer's own step is kept here.
OPTIMIZER_STEP_COLUMNS = (
    "iteration",  # optimizer.iterations before the step
    "loss_scale",  # the loss scale the step used (NaN without loss scaling)
    "next_loss_scale",  # the loss scale after it
    "skipped",  # 1 when the optimizer skipped the update (non-finite scaled gradients)
    "loss_nonfinite",  # 1 when the step's loss was NaN or infinite (NaN: not seen, under XLA)
)

# The first non-finite step replayed from its weights before its update (kind
# ``nonfinite_replay``): per row, in forward order (``row_kinds``: layer
# outputs, the loss, then the gradients), the non-finite element count and
# the largest finite magnitude in the step as configured (candidate) and
# in the reference (float32 or float64), from the same weights, batch and
# random draws.
NONFINITE_REPLAY_COLUMNS = (
    "candidate_nonfinite",
    "reference_nonfinite",
    "candidate_max_abs",
    "reference_max_abs",
)

# Columns a kind must have (readers check this); None: free-form.
KIND_COLUMNS = {
    GRAD_STATS: GRAD_STATS_COLUMNS,
    GRAD_HISTOGRAM: HISTOGRAM_COLUMNS,
    DIVERGENCE: DIVERGENCE_COLUMNS,
    ACTIVATION_DIVERGENCE: DIVERGENCE_COLUMNS,
    LOSS_COMPARISON: LOSS_COMPARISON_COLUMNS,
    UPDATE_STATS: UPDATE_STATS_COLUMNS,
    GRADIENT_INDICES: GRADIENT_INDICES_COLUMNS,
    OPTIMIZER_STEP: OPTIMIZER_STEP_COLUMNS,
    NONFINITE_REPLAY: NONFINITE_REPLAY_COLUMNS,
    DTYPES: (),
    LENS_STATUS: (),
    ADVICE: (),
}

# The columns of each kind in older format versions (where they differ).
KIND_COLUMNS_V1 = dict(KIND_COLUMNS, **{
    DIVERGENCE: DIVERGENCE_COLUMNS_V1,
    ACTIVATION_DIVERGENCE: DIVERGENCE_COLUMNS_V1,
    LOSS_COMPARISON: LOSS_COMPARISON_COLUMNS_V1,
})


def kind_columns(kind, version=FORMAT_VERSION):
    """The columns a record of ``kind`` has in format ``version``."""
    return (KIND_COLUMNS_V1 if version < 2 else KIND_COLUMNS)[kind]


class FormatError(ValueError):
    """A gradlens record this code cannot read (malformed or newer)."""

    def __init__(self, message, tag=None):
        self.tag = tag
        prefix = "gradlens record %r: " % tag if tag is not None else ""
        super().__init__(prefix + message)


class RecordMetadata:
    """The parsed plugin content of one gradlens tag.

    Attributes:
      version: format version the record was written with.
      kind: one of KINDS.
      rows: tuple of row names (variable or layer paths).
      columns: tuple of column names.
      extras: dict of the kind-specific keys (e.g. ``reference``).
    """

    __slots__ = ("version", "kind", "rows", "columns", "extras")

    def __init__(self, kind, rows, columns, extras=None, version=FORMAT_VERSION):
        self.version = version
        self.kind = kind
        self.rows = tuple(rows)
        self.columns = tuple(columns)
        self.extras = dict(extras or {})

    def to_json(self):
        """The JSON-ready dict of this record (what ``content`` holds)."""
        out = dict(self.extras)
        out.update(
            version=self.version,
            kind=self.kind,
            rows=list(self.rows),
            columns=list(self.columns),
        )
        return out

    def __eq__(self, other):
        return isinstance(other, RecordMetadata) and self.to_json() == other.to_json()

    def __repr__(self):
        return "RecordMetadata(kind=%r, rows=%d, columns=%d, version=%d)" % (
            self.kind,
            len(self.rows),
            len(self.columns),
            self.version,
        )


def serialize_content(record):
    """UTF-8 JSON bytes of a RecordMetadata (key order fixed for digests)."""
    return json.dumps(record.to_json(), sort_keys=True, ensure_ascii=False).encode(
        "utf-8"
    )


def create_summary_metadata(record, display_name=None, description=None):
    """A ``SummaryMetadata`` proto for one gradlens tag.

    Args:
      record: a RecordMetadata.
      display_name: optional display name.
      description: optional description.
    """
    validate(record)
    return summary_pb2.SummaryMetadata(
        display_name=display_name or "",
        summary_description=description or "",
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=serialize_content(record)
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


def tag_for(name, record):
    """The tag of a record: ``<name>/<kind>/<digest of rows and columns>``.

    The digest makes a tag's metadata immutable, as TensorBoard requires:
    another variable set (or another comparison) is another tag.
    """
    digest = hashlib.sha1(serialize_content(record)).hexdigest()[:8]
    return "%s/%s/%s" % (name, record.kind, digest)


TagParts = collections.namedtuple("TagParts", ("name", "kind", "digest"))


def parse_tag(tag):
    """The ``TagParts(name, kind, digest)`` of a tag made by ``tag_for``
    (the name may hold "/" itself).  A tag of another shape, with fewer
    than two "/" (e.g. a scalar's), is all name: kind and digest are None."""
    if tag.count("/") < 2:
        return TagParts(tag, None, None)
    return TagParts(*tag.rsplit("/", 2))


def tag_name(tag, kind):
    """The name a tag was made from (``tag_for``): ``"model_vs_float32"`` of
    ``"model_vs_float32/divergence/1a2b3c4d"``; the whole tag when it is not
    a tag of ``kind`` (``parse_tag``)."""
    parts = parse_tag(tag)
    return parts.name if kind and parts.kind == kind else tag


def validate(record, tag=None):
    """Raise FormatError unless ``record`` is a well-formed known record."""
    if record.kind not in KINDS:
        raise FormatError("unknown kind %r" % (record.kind,), tag)
    for what, names in (("rows", record.rows), ("columns", record.columns)):
        if not all(isinstance(n, str) for n in names):
            raise FormatError("%s must be a list of strings" % what, tag)
    expected = kind_columns(record.kind, record.version)
    if record.kind not in JSON_KINDS and record.columns != tuple(expected):
        raise FormatError(
            "kind %r must have columns %s, not %s"
            % (record.kind, list(expected), list(record.columns)),
            tag,
        )


def parse_plugin_content(content, tag=None):
    """Parse ``plugin_data.content`` bytes into a RecordMetadata.

    Reads every version up to FORMAT_VERSION.  Raises FormatError, naming
    the tag, for content that is not JSON, misses a field, has a wrong
    type, or was written by a newer tb_gradlens (upgrade to read it).
    """
    if not isinstance(content, (bytes, bytearray)):
        raise FormatError("content must be bytes, not %s" % type(content).__name__, tag)
    try:
        obj = json.loads(bytes(content).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError("content is not UTF-8 JSON (%s)" % e, tag) from None
    except RecursionError:
        raise FormatError("content is JSON nested too deeply", tag) from None
    if not isinstance(obj, dict):
        raise FormatError("content must be a JSON object", tag)
    version = obj.get("version")
    if type(version) is not int or version < 1:
        raise FormatError("missing or invalid format version %r" % (version,), tag)
    if version > FORMAT_VERSION:
        raise FormatError(
            "written in format version %d, newer than this tb_gradlens reads (%d): "
            "upgrade tb_gradlens" % (version, FORMAT_VERSION),
            tag,
        )
    for key in ("kind", "rows", "columns"):
        if key not in obj:
            raise FormatError("missing field %r" % key, tag)
    if not isinstance(obj["kind"], str):
        raise FormatError("kind must be a string", tag)
    if not isinstance(obj["rows"], list) or not isinstance(obj["columns"], list):
        raise FormatError("rows and columns must be lists", tag)
    extras = {
        k: v for k, v in obj.items() if k not in ("version", "kind", "rows", "columns")
    }
    record = RecordMetadata(obj["kind"], obj["rows"], obj["columns"], extras, version)
    validate(record, tag)
    return record


def parse_summary_metadata(metadata, tag=None):
    """Parse a ``SummaryMetadata`` proto (or the plugin content bytes)."""
    if isinstance(metadata, (bytes, bytearray)):
        return parse_plugin_content(metadata, tag)
    if metadata.plugin_data.plugin_name != PLUGIN_NAME:
        raise FormatError(
            "not a gradlens record (plugin %r)" % metadata.plugin_data.plugin_name, tag
        )
    return parse_plugin_content(metadata.plugin_data.content, tag)


def check_tensor_shape(record, shape, tag=None):
    """Raise FormatError unless a tensor of ``shape`` fits ``record``."""
    shape = tuple(int(d) for d in shape)
    expected = () if record.kind in JSON_KINDS else (len(record.rows), len(record.columns))
    if shape != expected:
        raise FormatError(
            "tensor shape %s does not match its metadata %s" % (list(shape), list(expected)),
            tag,
        )

"""What a finding is: severities, alert codes, the user-settable limits and the Alert.

TensorFlow-free.  The rules that use the limits: ``tolerances`` (what
rounding explains) and ``alerts`` (one detector per record kind); README
"## Alerts" states each rule and its reason.
"""

import dataclasses

from tb_gradlens import metadata

__all__ = [
    "ERROR", "WARNING", "INFO", "SEVERITIES", "SEVERITY_ORDER", "NONE_GRADIENT", "ZERO_GRADIENT",
    "NONFINITE", "BF16_DIVERGENCE", "F16_DIVERGENCE", "F32_F64_MISMATCH", "DIVERGENCE", "FLUSH_TO_ZERO",
    "UNDERFLOW", "LOST_UPDATE", "BF16_MODEL_OUTPUT", "HARDCODED_16_BIT", "INDEX_OUT_OF_RANGE", "LOSS_SCALE_SKIP",
    "LOSS_SCALE_FAILURE", "CODES", "PRECISION_CODES", "DIVERGENCE_KINDS",
    "DEFAULT_COLUMN", "Thresholds", "DEFAULT_THRESHOLDS", "Alert",
]

ERROR = "error"
WARNING = "warning"
INFO = "info"
SEVERITIES = (ERROR, WARNING, INFO)
SEVERITY_ORDER = {ERROR: 0, WARNING: 1, INFO: 2}

# Alert codes.
NONE_GRADIENT = "none_gradient"
ZERO_GRADIENT = "zero_gradient"
NONFINITE = "nonfinite"
BF16_DIVERGENCE = "bf16_divergence"
F16_DIVERGENCE = "f16_divergence"
F32_F64_MISMATCH = "f32_f64_mismatch"
DIVERGENCE = "divergence"
FLUSH_TO_ZERO = "flush_to_zero"
UNDERFLOW = "underflow"
LOST_UPDATE = "lost_update"
BF16_MODEL_OUTPUT = "bf16_model_output"
HARDCODED_16_BIT = "hardcoded_16_bit"
INDEX_OUT_OF_RANGE = "index_out_of_range"
LOSS_SCALE_SKIP = "loss_scale_skip"
LOSS_SCALE_FAILURE = "loss_scale_failure"
CODES = (
    NONE_GRADIENT, ZERO_GRADIENT, NONFINITE, BF16_DIVERGENCE, F16_DIVERGENCE, F32_F64_MISMATCH,
    DIVERGENCE, FLUSH_TO_ZERO, UNDERFLOW, LOST_UPDATE, BF16_MODEL_OUTPUT, HARDCODED_16_BIT, INDEX_OUT_OF_RANGE,
    LOSS_SCALE_SKIP, LOSS_SCALE_FAILURE,
)

# The divergence code of a comparison, by the candidate's (effective)
# compute dtype when it is less precise than the reference.
PRECISION_CODES = {"bfloat16": BF16_DIVERGENCE, "float16": F16_DIVERGENCE, "float32": F32_F64_MISMATCH}

# Kinds whose records compare a candidate with a reference.
DIVERGENCE_KINDS = (
    metadata.DIVERGENCE,
    metadata.ACTIVATION_DIVERGENCE,
    metadata.LOSS_COMPARISON,
)

# The column a kind is judged and shown by (alerts' view, run comparison).
DEFAULT_COLUMN = {
    metadata.GRAD_STATS: "l2_norm",
    metadata.DIVERGENCE: "rel_l2",
    metadata.ACTIVATION_DIVERGENCE: "rel_l2",
    metadata.LOSS_COMPARISON: "rel_error",
    metadata.UPDATE_STATS: "update_ratio",
}


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """The user-settable limits of the alert rules (README "## Alerts").

    Beyond harmless rounding (``harm``; rows a stable-rounding pass measured):
      stable_factor: a row's limit is stable_factor x its stable-rounding
        divergence (counted as at least one rounding u of the candidate's dtype).
      boundary_factor: a layer output's stable divergence counts up to this
        many times the largest of the rows before it (at least u); a larger
        jump is damage born at the layer's boundary, not rounding to excuse.
      half_batch_fraction: a gradient row's limit is also at least this
        fraction of its sampling noise, the distance of the half batch's
        reference gradient from the batch's: an error well below what another
        batch changes is no harm to the training; the loss's limit is this
        fraction of its sampling noise alone.
      stable_window: ... taking the largest of each over this many logged
        comparisons.
      held_comparisons: a row is harmed when above its limit this many
        logged comparisons in a row, or ...
      immediate_factor: ... this many times above it at one.

    Fixed floors of the depth formula (rows no stable-rounding pass
    measured: a computed tolerance is never below them; raise one to
    silence a rule, set it to 0 to leave only the budgets):
      low_precision_gradient_rel_l2: gradients of a bfloat16/float16
        candidate (JAX tests bfloat16 gradients at 1e-1).
      low_precision_value_rel_l2: activations and the loss of a
        bfloat16/float16 candidate (TensorFlow tests bfloat16 values at 1e-2).
      float32_rel_l2: a float32 candidate (from float64, or another device).

    The depth formula:
      gradient_rounding, value_rounding: C in the rounding budgets
        C * u * sqrt(depth) of gradients and the loss and C * u * depth of
        activations; u the unit roundoff of the candidate's effective dtype.
      rise_factor, baseline_steps, rise_steps: an activation is also judged
        against rise_factor x its median over its first baseline_steps
        logged comparisons, held for rise_steps logged comparisons.
      noise_factor: a gradient whose reference is within noise_factor x the
        rounding noise of its own computation is not judged (its true
        value is zero: the rel L2 of two noises is not a signal).

    Two runs against a noise-floor run (``runs.compare_runs``):
      run_noise_factor, run_noise_windows, run_noise_window: run B is beyond
        the noise floor when its mean |(B-A)/|A|| over a window of logged
        steps (at least run_noise_window, about 20 windows per run) is above
        run_noise_factor x the noise run's in the same window, in
        run_noise_windows windows in a row.

    Other rules:
      zero_gradient_steps: K consecutive logged steps of an all-zero gradient.
      flush_to_zero: fraction of nonzero reference elements that are zero
        in the candidate (also above the row's own rel_l2, held for
        rise_steps logged comparisons).
      underflow: fraction of a gradient's elements within
        underflow_binades binades of its dtype's smallest normal number.
      lost_update: fraction of the elements of bfloat16 weights that did
        not move although their gradient was nonzero.
      loss_scale_floor, loss_scale_skips_in_row: a loss-scale skip is real
        trouble when the scale falls below the floor, or after an applied
        update when more skips than this come in a row
        (``analysis.loss_scale``).
    """

    stable_factor: float = 4.0
    boundary_factor: float = 2.0
    half_batch_fraction: float = 0.5
    stable_window: int = 4
    held_comparisons: int = 2
    immediate_factor: float = 10.0
    low_precision_gradient_rel_l2: float = 0.1
    low_precision_value_rel_l2: float = 0.01
    float32_rel_l2: float = 1e-3
    gradient_rounding: float = 96.0
    value_rounding: float = 5.0
    rise_factor: float = 10.0
    baseline_steps: int = 5
    rise_steps: int = 2
    noise_factor: float = 64.0
    run_noise_factor: float = 2.0
    run_noise_windows: int = 3
    run_noise_window: int = 10
    zero_gradient_steps: int = 5
    flush_to_zero: float = 0.01
    underflow: float = 0.01
    underflow_binades: int = 8
    lost_update: float = 0.1
    loss_scale_floor: float = 1.0
    loss_scale_skips_in_row: int = 3

    def replace(self, **changes):
        """A copy with some thresholds changed (unknown names: ValueError)."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError("unknown threshold(s): %s" % ", ".join(sorted(unknown)))
        return dataclasses.replace(self, **changes)


DEFAULT_THRESHOLDS = Thresholds()


@dataclasses.dataclass
class Alert:
    """One finding: what, where, since when, why, and what to do.

    ``view`` opens the record that shows it: ``{"name": record kind, "run",
    "tag", "column", "row", "step"}`` with ``step`` = ``step_first``;
    ``limit`` is the tolerance exceeded on ``view.column`` (None for rules
    that are not a threshold on a column); ``also``: the other records the
    same event shows in (``[{"code", "tag", "view", "variables",
    "step_first", "step_last"}]``: one event, one alert).
    """

    severity: str
    code: str
    run: str
    tag: str
    step_first: int
    step_last: int
    variables: list
    explanation: str
    fix: str
    view: dict
    details: list = dataclasses.field(default_factory=list)
    limit: float = None
    also: list = dataclasses.field(default_factory=list)

    @property
    def id(self):
        return "%s|%s|%s" % (self.code, self.run, self.tag)

    @property
    def group(self):
        """Alerts of several runs that say the same thing share it: code,
        record kind, tag name (the tag without its digest) and variables."""
        name = metadata.parse_tag(self.tag).name
        return "%s|%s|%s|%s" % (self.code, self.view.get("name"), name, ",".join(self.variables))

    def to_json(self):
        """A JSON-ready dict (shallow: its lists and dicts are this alert's own;
        ``dataclasses.asdict`` would deep-copy them)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["id"] = self.id
        out["group"] = self.group
        return out


def view(series_or_entry, column, row, step):
    """The ``view`` of an alert on a record."""
    return {
        "name": series_or_entry.record.kind,
        "run": series_or_entry.run,
        "tag": series_or_entry.tag,
        "column": column,
        "row": row,
        "step": step,
    }


def sort_key(alert):
    return (SEVERITY_ORDER[alert.severity], alert.step_first, alert.run, alert.tag, alert.code)

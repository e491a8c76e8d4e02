"""The numeric settings compared (``Variant``) and the outcome of a comparison
(``Comparison``), shared by Keras models and custom loss functions."""

from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens.writing import summary_ops

# Policy name -> (compute dtype, storage dtype of the weights).
POLICIES = {
    "float64": ("float64", "float64"),
    "float32": ("float32", "float32"),
    "mixed_bfloat16": ("bfloat16", "float32"),
    "bfloat16": ("bfloat16", "bfloat16"),
}


class Variant:
    """The numeric setting of one step.

    Args:
      policy: one of POLICIES, or None for "the model as configured"
        (Keras only: each layer keeps its own policy).
      device: a device string such as '/CPU:0' or '/GPU:0' (None: TF's
        placement).
      jit_compile: True runs the pass as an XLA function, False or None as
        the surrounding code runs (eager, graph, or the caller's XLA).
      label: a short name for displays (default from the other fields).
    """

    def __init__(self, policy=None, device=None, jit_compile=None, label=None):
        if policy is not None and policy not in POLICIES:
            raise ValueError(
                "tb_gradlens: unknown policy %r (use one of %s, or None for the "
                "model as configured)" % (policy, ", ".join(POLICIES))
            )
        self.policy = policy
        self.device = device
        self.jit_compile = bool(jit_compile) if jit_compile is not None else None
        self._label_given = label is not None
        self.label = label or self._default_label()

    def _default_label(self, model_policy=None):
        label = self.policy or model_policy or "model"
        if self.device:
            label += "@" + self.device.strip("/").lower()
        if self.jit_compile:
            label += "+xla"
        return label

    @property
    def compute_dtype(self):
        """The compute dtype name (None for the model as configured)."""
        return POLICIES[self.policy][0] if self.policy else None

    @property
    def storage_dtype(self):
        """The weights' dtype in a ``compare_fn`` pass (None: as stored)."""
        return POLICIES[self.policy][1] if self.policy else None

    def runs_as_surrounding(self, surrounding_jit):
        """Whether a pass of this variant compiles as the surrounding code
        does (``jit_compile`` None, or equal to ``surrounding_jit``)."""
        return self.jit_compile is None or self.jit_compile == bool(surrounding_jit)

    def is_model_as_configured(self, surrounding_jit):
        """The training step as it runs: the model's own policies, placement
        and compilation."""
        return self.policy is None and self.device is None and self.runs_as_surrounding(surrounding_jit)

    def resolved(self, surrounding_jit):
        """This variant with ``jit_compile`` None made explicit (the label
        is kept)."""
        if self.jit_compile is not None:
            return self
        return Variant(self.policy, self.device, bool(surrounding_jit), label=self.label)

    def describe(self, model_policy=None, surrounding_jit=False, model_dtypes=(None, None)):
        """The record's description of this side (``records.variant``).

        ``jit_compile`` None is reported as the surrounding code runs;
        ``model_dtypes`` (compute, variable dtype) describe the model as
        configured, for ``policy=None``.
        """
        jit = self.jit_compile if self.jit_compile is not None else surrounding_jit
        label = self.label
        if not self._label_given and self.policy is None and model_policy:
            label = self._default_label(model_policy)  # e.g. "mixed_bfloat16", not "model"
        compute, stored = (self.compute_dtype, self.storage_dtype) if self.policy else model_dtypes
        return records.variant(
            label, self.policy or model_policy or "model", compute, stored, self.device, jit
        )

    def __eq__(self, other):
        return isinstance(other, Variant) and self.describe() == other.describe()

    def __hash__(self):
        return hash(tuple(sorted(self.describe().items())))

    def __repr__(self):
        return "Variant(policy=%r, device=%r, jit_compile=%r)" % (
            self.policy,
            self.device,
            self.jit_compile,
        )


def as_variant(value):
    """A Variant from a Variant, a policy name or None (model as configured)."""
    if isinstance(value, Variant):
        return value
    return Variant(value)


def default_name(reference, candidate):
    """Tag prefix of a comparison: ``<candidate label>_vs_<reference label>``."""
    raw = "%s_vs_%s" % (candidate.label, reference.label)
    return "".join(ch if ch.isalnum() or ch in "_-.+@" else "_" for ch in raw)


class Comparison:
    """The outcome of one shadow step (tensors; usable inside tf.function).

    Attributes:
      reference, candidate: the Variants.
      reference_extras, candidate_extras: their record descriptions.
      variable_rows: variable paths (rows of ``gradient_divergence``).
      gradient_divergence: float32 ``[V, 10]`` (metadata.DIVERGENCE_COLUMNS:
        the metrics, then the stable-rounding pass's rel_l2, NaN if not run).
      loss: float32 ``[1, 5]`` (metadata.LOSS_COMPARISON_COLUMNS).
      activation_rows: layer output names, in forward order (may be empty).
      activation_divergence: float32 ``[L, 10]`` or None.
      reference_gradients, candidate_gradients: the raw gradients.
      gradient_dtypes, activation_dtypes: the candidate's compute dtype per
        variable / per activation row (``records.comparison_extras``).
      reference_16_bit: ``{layer path: dtype}`` of the layers the reference
        computes in 16 bits whatever their policy (``graph_dtypes``; optional).
    """

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def extras(self, kind=metadata.DIVERGENCE):
        """The extras of this comparison's record of ``kind``
        (``records.comparison_extras``, with the candidate's dtype per row)."""
        row_dtypes = {
            metadata.DIVERGENCE: self.gradient_dtypes,
            metadata.ACTIVATION_DIVERGENCE: self.activation_dtypes,
        }.get(kind)
        return records.comparison_extras(
            self.reference_extras, self.candidate_extras, numerics.SIGNIFICANCE_FLOOR,
            row_dtypes=row_dtypes, reference_16_bit=getattr(self, "reference_16_bit", None),
        )

    def write(self, step=None, name=None):
        """Write the three records at ``step`` to the default writer.

        A failure is reported by ``tb_gradlens.safety`` (a warning once,
        raised in strict mode) and gives False.
        """
        import tensorflow as tf

        with safety.guard("tb_gradlens.compare.Comparison.write"):
            return self._write(step, name)
        return tf.constant(False)

    def _write(self, step, name):
        import tensorflow as tf

        name = name or default_name(self.reference, self.candidate)
        summary_ops.divergence(
            self.gradient_divergence, self.variable_rows, self.extras(), step=step, name=name
        )
        summary_ops.loss_comparison(
            self.loss, self.extras(metadata.LOSS_COMPARISON), step=step, name=name
        )
        if self.activation_divergence is not None and self.activation_rows:
            summary_ops.divergence(
                self.activation_divergence,
                self.activation_rows,
                self.extras(metadata.ACTIVATION_DIVERGENCE),
                step=step,
                name=name,
                kind=metadata.ACTIVATION_DIVERGENCE,
            )
        return tf.constant(True)

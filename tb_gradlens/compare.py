"""Shadow steps: one training step computed in a reference and a candidate
numeric setting (dtype policy, device, XLA), compared per variable, per
layer and on the loss.

Two entry points:

* ``compare_keras(model, x, y)``: a Keras 3 model, no copy of it.  Every
  layer's ``dtype_policy`` is switched for the shadow pass and restored in
  ``finally``; the pass runs in a ``keras.StatelessScope`` (no variable,
  BatchNormalization statistic or seed is updated, so both variants see the
  same dropout mask) and each layer's output is recorded for the
  activation divergence.
* ``compare_fn(loss_fn, variables)``: any model of raw TF ops.
  ``loss_fn(weights, compute_dtype)`` receives the variables' values in the
  variant's storage dtype (float64 for a float64 variant, bfloat16 for a
  bfloat16 one) and the compute dtype; gradients are taken with respect to
  those weights, so a float64 reference is float64 end to end.  It may
  return ``(loss, {name: activation})`` to compare activations too.

Both run eagerly and inside ``tf.function`` (the Keras callback calls them
inside the traced train step).  Results are a ``Comparison``; its
``write(step)`` writes the ``divergence``, ``loss_comparison`` and
``activation_divergence`` records.

Keras and float64: Keras 3 keeps a float32 variable float32 in a shadow
pass, so a float64 reference computes every layer and the loss in float64
on the exactly widened weights, and its gradients are rounded once to
float32 at the variables (at most half a float32 ULP; the float32
candidate's accumulated error is what the comparison shows).  Use
``compare_fn`` for float64 gradients.
"""

import contextlib

import keras
import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens import summary_v2

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

    def describe(self, model_policy=None, surrounding_jit=False, model_dtypes=(None, None)):
        """The record's description of this side (``records.variant``).

        ``jit_compile`` None is reported as the surrounding code runs;
        ``model_dtypes`` (compute, variable dtype) describe the model as
        configured (``model_dtypes``), for ``policy=None``.
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


class Comparison:
    """The outcome of one shadow step (tensors; usable inside tf.function).

    Attributes:
      reference, candidate: the Variants.
      reference_extras, candidate_extras: their record descriptions.
      variable_rows: variable paths (rows of ``gradient_divergence``).
      gradient_divergence: float32 ``[V, 9]`` (metadata.DIVERGENCE_COLUMNS).
      loss: float32 ``[1, 4]`` (metadata.LOSS_COMPARISON_COLUMNS).
      activation_rows: layer output names, in forward order (may be empty).
      activation_divergence: float32 ``[L, 9]`` or None.
      reference_gradients, candidate_gradients: the raw gradients.
      gradient_dtypes, activation_dtypes: the candidate's compute dtype per
        variable / per activation row (``records.comparison_extras``).
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
            row_dtypes=row_dtypes,
        )

    def write(self, step=None, name=None):
        """Write the three records at ``step`` to the default writer.

        A failure is reported by ``tb_gradlens.safety`` (a warning once,
        raised in strict mode) and gives False.
        """
        with safety.guard("tb_gradlens.compare.Comparison.write"):
            return self._write(step, name)
        return tf.constant(False)

    def _write(self, step, name):
        name = name or default_name(self.reference, self.candidate)
        summary_v2.divergence(
            self.gradient_divergence, self.variable_rows, self.extras(), step=step, name=name
        )
        summary_v2.loss_comparison(
            self.loss, self.extras(metadata.LOSS_COMPARISON), step=step, name=name
        )
        if self.activation_divergence is not None and self.activation_rows:
            summary_v2.divergence(
                self.activation_divergence,
                self.activation_rows,
                self.extras(metadata.ACTIVATION_DIVERGENCE),
                step=step,
                name=name,
                kind=metadata.ACTIVATION_DIVERGENCE,
            )
        return tf.constant(True)


def default_name(reference, candidate):
    """Tag prefix of a comparison: ``<candidate label>_vs_<reference label>``."""
    raw = "%s_vs_%s" % (candidate.label, reference.label)
    return "".join(ch if ch.isalnum() or ch in "_-.+@" else "_" for ch in raw)


# ---------------------------------------------------------------------------
# Custom loops.
# ---------------------------------------------------------------------------


def compare_fn(loss_fn, variables, reference="float32", candidate="mixed_bfloat16", names=None):
    """Compare the gradients of ``loss_fn`` between two variants.

    Args:
      loss_fn: ``loss_fn(weights, compute_dtype) -> loss`` or
        ``-> (loss, {name: activation tensor})``.  ``weights`` holds one
        tensor per variable, in the variant's storage dtype; compute with
        them (cast to ``compute_dtype``), not with the variables.
      variables: the variables (or tensors) to differentiate.
      reference, candidate: Variants or policy names (not None).
      names: row names (default: the variables' paths).

    Returns:
      A Comparison.
    """
    reference, candidate = as_variant(reference), as_variant(candidate)
    for v in (reference, candidate):
        if v.policy is None:
            raise ValueError("tb_gradlens.compare_fn: a variant needs a policy, got %r" % v)
    variables = list(variables)
    rows = list(names) if names is not None else summary_v2.variable_paths(variables)
    ref = _fn_pass(loss_fn, variables, reference)
    cand = _fn_pass(loss_fn, variables, candidate)
    for what, result in (("reference", ref), ("candidate", cand)):
        if variables and all(g is None for g in result[1]):
            raise ValueError(
                "tb_gradlens.compare_fn: the %s loss does not depend on the weights "
                "loss_fn received; compute with `weights`, not the variables" % what
            )
    act_names = [k for k in cand[2] if k in ref[2]]
    act_div = None
    if act_names:
        act_div = numerics.divergence_metrics(
            [cand[2][k] for k in act_names],
            [ref[2][k] for k in act_names],
            [candidate.compute_dtype] * len(act_names),
        )
    return Comparison(
        gradient_dtypes=[candidate.compute_dtype] * len(variables),
        activation_dtypes=[candidate.compute_dtype] * len(act_names),
        reference=reference,
        candidate=candidate,
        reference_extras=reference.describe(),
        candidate_extras=candidate.describe(),
        variable_rows=rows,
        gradient_divergence=numerics.divergence_metrics(
            cand[1], ref[1], [candidate.compute_dtype] * len(variables)
        ),
        loss=numerics.loss_comparison(ref[0], cand[0]),
        activation_rows=act_names,
        activation_divergence=act_div,
        reference_gradients=ref[1],
        candidate_gradients=cand[1],
    )


def _device(device):
    return tf.device(device) if device else contextlib.nullcontext()


def _fn_pass(loss_fn, variables, variant):
    """(loss, gradients, activations) of ``loss_fn`` under ``variant``."""

    def body():
        with _device(variant.device):
            weights = [tf.identity(tf.cast(v, variant.storage_dtype)) for v in variables]
            with tf.GradientTape() as tape:
                tape.watch(weights)
                loss, activations = _split_output(loss_fn(weights, tf.as_dtype(variant.compute_dtype)))
            grads = tape.gradient(loss, weights)
        return loss, grads, activations

    if variant.jit_compile:
        body = tf.function(body, jit_compile=True)
    return body()


def _split_output(output):
    if isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[1], dict):
        return output[0], dict(output[1])
    return output, {}


# ---------------------------------------------------------------------------
# Keras models.
# ---------------------------------------------------------------------------


class _ShadowPolicy(keras.DTypePolicy):
    """A policy computing in one dtype on variables of another (autocast)."""

    def __init__(self, name, compute_dtype, variable_dtype):
        super().__init__(name)
        self._compute_dtype = compute_dtype
        self._variable_dtype = variable_dtype


def model_layers(model):
    """Every layer of ``model``, itself first (Keras' own traversal order)."""
    return list(model._flatten_layers(include_self=True, recursive=True))


def _own_variable_dtype(layer):
    own = list(getattr(layer, "_trainable_variables", [])) + list(
        getattr(layer, "_non_trainable_variables", [])
    )
    floats = [v for v in own if tf.as_dtype(v.dtype).is_floating]
    return tf.as_dtype(floats[0].dtype).name if floats else None


def _shadow_policy(layer, variant):
    """The policy ``layer`` computes with in a pass of ``variant``."""
    if variant.policy is None:
        return layer.dtype_policy
    compute = variant.compute_dtype
    stored = _own_variable_dtype(layer) or compute
    return _ShadowPolicy(variant.policy, compute, stored)


@contextlib.contextmanager
def switched_policies(model, variant):
    """Within the block every layer computes as ``variant`` says.

    The original policy objects are put back in ``finally``, also when the
    block raises.  A no-op for ``policy=None``.
    """
    if variant.policy is None:
        yield
        return
    saved = [(layer, layer.dtype_policy) for layer in model_layers(model)]
    for layer, policy in saved:
        if getattr(policy, "quantization_mode", None) is not None:
            raise ValueError(
                "tb_gradlens: layer %r is quantized (%s); dtype comparisons do not "
                "support quantized layers" % (layer.name, policy.quantization_mode)
            )
    try:
        for layer, _ in saved:
            layer.dtype_policy = _shadow_policy(layer, variant)
        yield
    finally:
        for layer, policy in saved:
            layer.dtype_policy = policy


def _loss_objects(model):
    compile_loss = getattr(model, "_compile_loss", None)
    if compile_loss is None:
        return []
    found = [compile_loss]
    for entry in getattr(compile_loss, "_flat_losses", None) or []:
        loss = entry[1] if isinstance(entry, (tuple, list)) else entry
        if hasattr(loss, "_dtype"):
            found.append(loss)
    return [obj for obj in found if hasattr(obj, "_dtype")]


@contextlib.contextmanager
def _loss_dtype(model, dtype, y, y_pred, sample_weight):
    """Compute the compiled loss in ``dtype`` (float64 references only)."""
    if dtype != "float64":
        yield
        return
    compile_loss = getattr(model, "_compile_loss", None)
    if compile_loss is not None and not getattr(compile_loss, "built", True):
        compile_loss.build(y, y_pred)
    saved = [(obj, obj._dtype) for obj in _loss_objects(model)]
    try:
        for obj, _ in saved:
            obj._dtype = dtype
        yield
    finally:
        for obj, old in saved:
            obj._dtype = old


class ActivationRecorder:
    """Records every layer's output while active (context manager).

    Each sub-layer's ``call`` is shadowed by an instance attribute for the
    duration of the block and removed in ``finally``.  ``outputs`` lists
    ``(name, tensor)`` of every sub-layer in the order layers finished
    (forward order; the model's own output is not a row); a
    layer called twice gets "name (2)"; a structured output gives one row
    per floating tensor, "name[i]".  ``dtypes`` maps layer ids to the
    observed output dtype name.
    """

    def __init__(self, model, keep_tensors=True):
        self.model = model
        self.keep_tensors = keep_tensors
        self.outputs = []
        self.dtypes = {}
        self._patched = []

    def __enter__(self):
        for layer in model_layers(self.model):
            if "call" in layer.__dict__:
                continue  # already shadowed (nested recorder): leave it
            object.__setattr__(layer, "call", self._recording_call(layer, layer.call))
            self._patched.append(layer)
        return self

    def __exit__(self, *exc):
        for layer in self._patched:
            object.__delattr__(layer, "call")
        self._patched = []
        return False

    def _recording_call(self, layer, call):
        def recording_call(*args, **kwargs):
            out = call(*args, **kwargs)
            self._record(layer, out)
            return out

        return recording_call

    def _record(self, layer, out):
        flat = [t for t in tf.nest.flatten(out) if _is_float_tensor(t)]
        if not flat:
            return
        self.dtypes[id(layer)] = tf.as_dtype(flat[0].dtype).name
        if not self.keep_tensors or layer is self.model:
            return
        name = getattr(layer, "path", None) or layer.name
        taken = {n for n, _ in self.outputs}
        base, k = name, 1
        while (base if len(flat) == 1 else base + "[0]") in taken:
            k += 1
            base = "%s (%d)" % (name, k)
        if len(flat) == 1:
            self.outputs.append((base, flat[0]))
        else:
            self.outputs.extend(("%s[%d]" % (base, i), t) for i, t in enumerate(flat))


def _is_float_tensor(t):
    dtype = getattr(t, "dtype", None)
    try:
        return dtype is not None and tf.as_dtype(dtype).is_floating
    except TypeError:
        return False


def _compute_loss(model, x, y, y_pred, sample_weight):
    return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)


def _owner_compute_dtypes(model, variables):
    """Per variable: the compute dtype of the layer that owns it."""
    owner = {}
    for layer in model_layers(model):
        for v in getattr(layer, "_trainable_variables", []):
            owner.setdefault(id(v), layer.compute_dtype)
    return [owner.get(id(v), tf.as_dtype(v.dtype).name) for v in variables]


def keras_pass(model, variant, activations=True):
    """A callable ``(x, y, sample_weight) -> (loss, grads, activation tensors)``.

    ``state_values`` (optional): values for ``model.non_trainable_variables``
    to run with (e.g. seed-generator states read before a training step
    advanced them), so the pass draws the same dropout masks as that step.
    The callable also has ``.activation_rows`` (set when it runs or is
    traced) and ``.compute_dtypes`` (per trainable variable).  With
    ``variant.jit_compile`` it is an XLA-compiled tf.function.
    """
    holder = {"rows": []}

    def run(x, y, sample_weight, state_values=None):
        variables = model.trainable_variables
        with _device(variant.device), switched_policies(model, variant):
            values = [_stored_value(v, variant) for v in variables]
            mapping = list(zip(variables, values))
            if state_values is not None:
                mapping += list(zip(model.non_trainable_variables, state_values))
            recorder = ActivationRecorder(model) if activations else contextlib.nullcontext()
            with tf.GradientTape() as tape:
                tape.watch(values)
                with keras.StatelessScope(state_mapping=mapping):
                    with recorder:
                        y_pred = model(x, training=True)
                    with _loss_dtype(model, variant.compute_dtype, y, y_pred, sample_weight):
                        loss = _compute_loss(model, x, y, y_pred, sample_weight)
            grads = tape.gradient(loss, values)
            holder["compute_dtypes"] = _owner_compute_dtypes(model, variables)
        acts = recorder.outputs if activations else []
        holder["rows"] = [name for name, _ in acts]
        return loss, grads, [t for _, t in acts]

    fn = tf.function(run, jit_compile=True) if variant.jit_compile else run

    class _Pass:
        def __call__(self, x, y=None, sample_weight=None, state_values=None):
            return fn(x, y, sample_weight, state_values)

        @property
        def activation_rows(self):
            return holder["rows"]

        @property
        def compute_dtypes(self):
            return holder.get("compute_dtypes")

    return _Pass()


def _stored_value(variable, variant):
    value = variable.value if hasattr(variable, "value") else tf.convert_to_tensor(variable)
    value = tf.convert_to_tensor(value)
    if variant.storage_dtype == "bfloat16" and value.dtype != tf.bfloat16:
        return tf.cast(value, tf.bfloat16)
    return tf.identity(value)


def dominant_policy(model):
    """The most common policy name among the model's weighted layers."""
    names = [
        layer.dtype_policy.name
        for layer in model_layers(model)
        if getattr(layer, "_trainable_variables", None)
    ] or [model.dtype_policy.name]
    return max(set(names), key=names.count)


def model_dtypes(model):
    """(compute, variable) dtype of the model as configured: the one dtype
    its weighted layers compute in (``records.MIXED`` when they differ) and
    the dtype of its floating-point trainable weights (MIXED likewise)."""
    weighted = [layer for layer in model_layers(model) if getattr(layer, "_trainable_variables", None)]
    computes = {layer.compute_dtype for layer in weighted} or {model.compute_dtype}
    stored = {tf.as_dtype(v.dtype).name for v in model.trainable_variables
              if tf.as_dtype(v.dtype).is_floating} or {None}

    def one(names):
        return names.pop() if len(names) == 1 else records.MIXED

    return one(computes), one(stored)


def compare_keras(model, x, y=None, sample_weight=None, reference="float32", candidate=None,
                  activations=True, passes=None, surrounding_jit=False, candidate_outcome=None,
                  state_values=None):
    """Compare one training step of a Keras model between two variants.

    Same batch, same weights; nothing in the model changes (policies are
    restored, the passes are stateless).  The candidate runs first.

    Args:
      model: a compiled Keras 3 model (``compute_loss`` gives its loss).
      x, y, sample_weight: one batch.
      reference, candidate: Variants or policy names; None = the model as
        configured (the default candidate).
      activations: also compare every layer's output.
      passes: optional (reference_pass, candidate_pass) from ``keras_pass``
        to reuse (tf.functions keep their trace).
      surrounding_jit: whether the caller runs under XLA (recorded for
        variants with ``jit_compile=None``).
      candidate_outcome: ``(loss, gradients, [(layer name, output)])`` of
        the training step itself, when the candidate is the model as
        configured and the caller has them (the Keras callback): then no
        candidate pass runs, and the comparison costs one reference pass.
        The weights must be those the step differentiated (call before
        the optimizer applies the gradients).
      state_values: values of ``model.non_trainable_variables`` before
        the step (see ``keras_pass``), so the reference pass draws the
        step's dropout masks.

    Returns:
      A Comparison.
    """
    reference, candidate = as_variant(reference), as_variant(candidate)
    variables = model.trainable_variables
    if passes is None:
        passes = (
            keras_pass(model, reference, activations),
            None if candidate_outcome is not None else keras_pass(model, candidate, activations),
        )
    ref_pass, cand_pass = passes
    if candidate_outcome is not None:
        cand_loss, cand_grads, named = candidate_outcome
        cand_rows, cand_acts = [n for n, _ in named], [t for _, t in named]
    else:
        cand_loss, cand_grads, cand_acts = cand_pass(x, y, sample_weight, state_values)
        cand_rows = cand_pass.activation_rows
    ref_loss, ref_grads, ref_acts = ref_pass(x, y, sample_weight, state_values)
    if candidate.policy is not None:
        grad_dtypes = [candidate.compute_dtype] * len(cand_grads)
    elif cand_pass is not None:
        grad_dtypes = cand_pass.compute_dtypes
    else:
        grad_dtypes = _owner_compute_dtypes(model, variables)
    act_rows, act_div, act_dtypes = [], None, []
    if activations:
        ref_index = {n: i for i, n in enumerate(ref_pass.activation_rows)}
        pairs = [(n, i) for i, n in enumerate(cand_rows) if n in ref_index]
        act_rows = [n for n, _ in pairs]
        act_dtypes = [tf.as_dtype(cand_acts[i].dtype).name for _, i in pairs]
        if pairs:
            act_div = numerics.divergence_metrics(
                [cand_acts[i] for _, i in pairs],
                [ref_acts[ref_index[n]] for n, _ in pairs],
                act_dtypes,
            )
    model_policy = dominant_policy(model)
    dtypes = model_dtypes(model)
    return Comparison(
        gradient_dtypes=[tf.as_dtype(d).name for d in grad_dtypes],
        activation_dtypes=act_dtypes,
        reference=reference,
        candidate=candidate,
        reference_extras=reference.describe(model_policy, surrounding_jit, dtypes),
        candidate_extras=candidate.describe(model_policy, surrounding_jit, dtypes),
        variable_rows=summary_v2.variable_paths(variables),
        gradient_divergence=numerics.divergence_metrics(cand_grads, ref_grads, grad_dtypes),
        loss=numerics.loss_comparison(ref_loss, cand_loss),
        activation_rows=act_rows,
        activation_divergence=act_div,
        reference_gradients=ref_grads,
        candidate_gradients=cand_grads,
    )


# ---------------------------------------------------------------------------
# dtype map.
# ---------------------------------------------------------------------------


def dtype_map(model, output_dtypes=None):
    """The model's dtype map (the ``dtypes`` record payload).

    ``{"layers": [{"path", "class", "policy", "compute_dtype",
    "variable_dtype", "output_dtype"}], "variables": [{"path", "dtype"}],
    "model_output_dtype"}``; output dtypes come from ``output_dtypes``
    (layer id -> dtype name, as an ActivationRecorder observes them), else
    "unknown".
    """
    output_dtypes = output_dtypes or {}
    layers = []
    for layer in model_layers(model)[1:]:
        policy = layer.dtype_policy
        layers.append(
            {
                "path": getattr(layer, "path", None) or layer.name,
                "class": type(layer).__name__,
                "policy": policy.name,
                "compute_dtype": policy.compute_dtype,
                "variable_dtype": _own_variable_dtype(layer) or policy.variable_dtype,
                "output_dtype": output_dtypes.get(id(layer), "unknown"),
            }
        )
    variables = [
        {"path": path, "dtype": tf.as_dtype(v.dtype).name}
        for path, v in zip(summary_v2.variable_paths(model.weights), model.weights)
    ]
    return records.dtype_map(
        layers, variables, output_dtypes.get(id(model)) or _last_output_dtype(layers)
    )


def _last_output_dtype(layers):
    observed = [layer["output_dtype"] for layer in layers if layer["output_dtype"] != "unknown"]
    return observed[-1] if observed else "unknown"


def observe_dtypes(model, x):
    """The dtype map of ``model`` after one forward pass on ``x`` (eager)."""
    recorder = ActivationRecorder(model, keep_tensors=False)
    with recorder:
        model(x, training=False)
    return dtype_map(model, recorder.dtypes)

"""The stable-rounding pass: what 16-bit rounding does to a step computed stably.

A bfloat16 step always differs from its float32 reference: every layer
stores its output in 16 bits, reads its weights in 16 bits and passes a
16-bit gradient back.  How much that moves a gradient, a layer output or
the loss depends on the model (its depth, its conditioning, a gradient
whose true value is near zero) and on the batch.  The stable-rounding pass
measures it on the step itself: the reference pass, computed in the
reference precision inside every layer, but rounded to the candidate's
16-bit dtype exactly where the candidate rounds between layers:

* the floating inputs of every layer that computes in 16 bits as the
  candidate is configured (what Keras casts them to), and the outputs of
  such layers that hold no layers themselves;
* the weights those layers read in their compute dtype (autocast
  variables);
* the gradients at those same points (the candidate's gradient there is a
  16-bit tensor).

Nothing inside a layer rounds, so the pass is what a numerically stable
16-bit computation of the same step gives: its divergence from the
reference is the rounding the step cannot avoid.  A layer computing
stably in 16 bits (a matmul accumulating in float32, a normalization
upcasting) diverges about as much as this pass; a layer that loses digits
inside (a variance as E[x^2] - E[x]^2, a long 16-bit cumulative sum,
(x + c) - c, a softmax over large unscaled logits) diverges far more.
``analysis.harm`` judges every compared row by that ratio.
"""

import tensorflow as tf

from tb_gradlens.compare import instruments
from tb_gradlens.compare.keras_passes import KerasPass
from tb_gradlens.compare.keras_passes import model_layers
from tb_gradlens.compare.variants import as_variant
from tb_gradlens.writing import keras_private

_LOW = {"bfloat16": tf.bfloat16, "float16": tf.float16, "float32": tf.float32}
_BITS = {"bfloat16": 8, "float16": 11, "float32": 24, "float64": 53}


def rounding_dtypes(model, candidate, reference_dtype, configured=None):
    """``{id(layer): dtype name}``: the layers of ``model`` whose candidate
    compute dtype is less precise than ``reference_dtype``, and that dtype.

    ``candidate`` is a Variant (policy None: the model as configured, given
    by ``configured``, ``{id(layer): compute dtype}``)."""
    candidate = as_variant(candidate)
    ref_bits = _BITS.get(reference_dtype, 24)
    out = {}
    for layer in model_layers(model)[1:]:
        dtype = candidate.compute_dtype if candidate.policy else (configured or {}).get(
            id(layer), layer.compute_dtype)
        if dtype in _LOW and _BITS[dtype] < ref_bits:
            out[id(layer)] = dtype
    return out


def round_to(dtype):
    """x -> x rounded to ``dtype`` (kept in x's dtype), and its gradient
    rounded alike: a tensor the candidate holds in ``dtype``."""
    low = _LOW[dtype]

    @tf.custom_gradient
    def rounded(x):
        def grad(dy):
            return tf.cast(tf.cast(dy, low), dy.dtype)

        return tf.cast(tf.cast(x, low), x.dtype), grad

    return rounded


def _round_floating(structure, dtype):
    """Every floating tensor of ``structure`` wider than ``dtype`` rounded to it."""
    rounded, size = round_to(dtype), _LOW[dtype].size

    def one(t):
        if tf.is_tensor(t) and t.dtype.is_floating and t.dtype.size > size:
            return rounded(t)
        return t

    return tf.nest.map_structure(one, structure)


class BoundaryRounding(instruments.Instrument):
    """Rounds the floating inputs of the layers of ``dtypes`` (``{id(layer):
    dtype name}``) and the outputs of those that hold no layers."""

    def __init__(self, model, dtypes):
        super().__init__(model)
        self._dtypes = dict(dtypes)
        self._leaves = {id(layer) for layer in model_layers(model)[1:]
                        if id(layer) in self._dtypes and len(keras_private.flatten_layers(layer)) == 1}

    def transform_inputs(self, layer, args, kwargs):
        dtype = self._dtypes.get(id(layer))
        if dtype is None:
            return args, kwargs
        kept = {k: v for k, v in kwargs.items() if k in ("training", "mask")}
        moved = {k: v for k, v in kwargs.items() if k not in kept}
        args, moved = _round_floating((list(args), moved), dtype)
        return tuple(args), dict(moved, **kept)

    def transform_output(self, layer, out):
        if id(layer) not in self._leaves:
            return out
        return _round_floating(out, self._dtypes[id(layer)])


def dithered(value, amplitude, seed):
    """``value * (1 + amplitude * xi)``, xi uniform in [-1, 1) drawn from
    ``seed`` (stateless): another realization of the values' low bits, so
    every rounding after it falls otherwise."""
    xi = tf.random.stateless_uniform(tf.shape(value), seed=seed, minval=-1.0, maxval=1.0, dtype=value.dtype)
    return value * (1 + tf.cast(amplitude, value.dtype) * xi)


def _rounded_weights(model, dtypes):
    """{id(variable): dtype} of the weights the layers of ``dtypes`` read in
    that dtype (autocast variables)."""
    out = {}
    for layer in model_layers(model)[1:]:
        if id(layer) in dtypes:
            for v in keras_private.own_trainable_variables(layer):
                if keras_private.is_autocast(v):
                    out.setdefault(id(v), dtypes[id(layer)])
    return out


class DitheredPass(KerasPass):
    """A pass of ``variant`` in which realization k > 0 draws the 16-bit
    rounding anew: the weights rounded to 16 bits and the floating inputs are
    first moved by a quarter of a rounding at random (seed k), so every value
    rounds otherwise, with the same statistics.  Realization 0 is the pass
    itself.  ``candidate``: whose rounding (None: the model as configured)."""

    def __init__(self, model, variant, candidate=None, activations=True, optimizer=None, realization=0,
                 **pass_options):
        super().__init__(model, variant, activations, optimizer, **pass_options)
        self.candidate = as_variant(candidate)
        self.realization = int(realization)
        self._amplitude = 2.0 ** -10  # a quarter rounding of bfloat16, set from the dtypes when the pass runs

    def _dtypes(self, configured):
        reference_dtype = self.variant.compute_dtype or "float32"
        return rounding_dtypes(self.model, self.candidate, reference_dtype, configured)

    def _inputs(self, x):
        if not self.realization:
            return x
        flat = tf.nest.flatten(x)
        moved = [dithered(t, self._amplitude, [self.realization, 1000 + i])
                 if tf.is_tensor(t) and t.dtype.is_floating else t for i, t in enumerate(flat)]
        return tf.nest.pack_sequence_as(x, moved)

    def _used_values(self, variables, values, configured):
        dtypes = self._dtypes(configured)
        rounded = _rounded_weights(self.model, dtypes)
        bits = min((_BITS[d] for d in dtypes.values()), default=24)
        self._amplitude = 2.0 ** (-bits - 2)
        out = []
        for i, (variable, value) in enumerate(zip(variables, values)):
            dtype = rounded.get(id(variable))
            if dtype is not None and self.realization:
                value = dithered(value, self._amplitude, [self.realization, i])
            out.append(self._stored(value, dtype))
        return out

    def _stored(self, value, dtype):
        """What the pass reads for a weight the candidate rounds to ``dtype``
        (None: not rounded): the value itself (the layer rounds it)."""
        return value


class StableRoundingPass(DitheredPass):
    """The reference pass of a comparison with the candidate's rounding at
    every layer boundary (see the module).  Called like a ``KerasPass``; it
    replays the draws of the comparison's other passes.  One realization
    under-states what rounding does now and then (a ReLU that flips), the
    largest of several does not (``realization``, ``analysis.harm``)."""

    def __init__(self, model, reference, candidate=None, activations=True, optimizer=None, realization=0,
                 **pass_options):
        super().__init__(model, reference, candidate, activations, optimizer, realization, **pass_options)

    def _stored(self, value, dtype):
        if dtype is None or value.dtype.size <= _LOW[dtype].size:
            return value
        return round_to(dtype)(value)

    def _instrument(self, configured):
        return BoundaryRounding(self.model, self._dtypes(configured))

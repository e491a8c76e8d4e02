"""Every private Keras (and TensorFlow) API tb_gradlens touches, in one place.

Keras 3 has no public hook for what the lens needs: observing the gradient
the optimizer applies, running a shadow pass of a model in another dtype
policy without copying it, sharing one random draw between two passes, or
running a step outside of Keras' XLA cluster.  Everything below reaches
into Keras' (and a little into TensorFlow's) internals; nothing else in
tb_gradlens touches private Keras.  The TensorFlow internals of the writing
side (XLA context, default summary writer) are in ``tb_gradlens/numerics/tf_internals.py``.  A Keras upgrade that renames one of these breaks this
file only: each function says what it relies on.

Checked against Keras 3.15 and TensorFlow 2.21 (``tests/writing/test_keras_private.py``
fails when an attribute disappears).
"""

import contextlib

import keras
import tensorflow as tf

# ---------------------------------------------------------------------------
# Layers and their variables.
# ---------------------------------------------------------------------------


def flatten_layers(model):
    """Every layer of ``model``, itself first, in Keras' own traversal order
    (``Layer._flatten_layers``)."""
    return list(model._flatten_layers(include_self=True, recursive=True))


def own_trainable_variables(layer):
    """The trainable variables a layer created itself, not its sublayers'
    (``Layer._trainable_variables``)."""
    return list(getattr(layer, "_trainable_variables", []))


def own_variables(layer):
    """Trainable and non-trainable variables a layer created itself
    (``Layer._trainable_variables``, ``Layer._non_trainable_variables``)."""
    return own_trainable_variables(layer) + list(getattr(layer, "_non_trainable_variables", []))


def is_autocast(variable):
    """Whether a layer computing in 16 bits reads ``variable`` in its compute
    dtype (``Variable._autocast``; LayerNormalization's and BatchNormalization's
    weights are not)."""
    return bool(getattr(variable, "_autocast", True))


class ShadowPolicy(keras.DTypePolicy):
    """A policy computing in one dtype on variables of another: what a
    shadow pass switches a layer to (sets ``DTypePolicy._compute_dtype`` and
    ``_variable_dtype``, which the public constructor derives from a name)."""

    def __init__(self, name, compute_dtype, variable_dtype):
        super().__init__(name)
        self._compute_dtype = compute_dtype
        self._variable_dtype = variable_dtype


def _functional_inputs(layer):
    """The KerasTensors a functional model converts the values it is called
    with to (``Functional._inputs``; a Sequential's through its inner
    ``Sequential._functional``)."""
    functional = getattr(layer, "_functional", None) if isinstance(layer, keras.Sequential) else layer
    return [t for t in getattr(functional, "_inputs", None) or [] if isinstance(t, keras.KerasTensor)]


@contextlib.contextmanager
def sixteen_bit_inputs_as(model, dtype):
    """Within the block the models in ``model`` convert their inputs to
    ``dtype`` where they convert to bfloat16 or float16: a Sequential built
    without an Input under a mixed policy rounds its input to its first
    layer's compute dtype (``InputLayer._dtype``, read by
    ``Sequential.input_dtype``; ``KerasTensor._dtype`` of its inner
    functional's input), which a float32 pass must not do."""
    from keras.src.layers.core.input_layer import InputLayer

    sixteen_bit = []
    for layer in flatten_layers(model):
        holders = _functional_inputs(layer) + ([layer] if isinstance(layer, InputLayer) else [])
        for holder in holders:  # KerasTensors and InputLayers (``Sequential.input_dtype``)
            if holder._dtype in ("bfloat16", "float16") and holder._dtype != dtype:
                sixteen_bit.append(holder)
    with _private_dtypes(sixteen_bit, dtype):
        yield


@contextlib.contextmanager
def _private_dtypes(objects, dtype):
    """Within the block each of ``objects`` has ``_dtype`` = ``dtype``;
    restored after, also when the block raises."""
    saved = [(obj, obj._dtype) for obj in objects]
    try:
        for obj, _ in saved:
            obj._dtype = dtype
        yield
    finally:
        for obj, old in saved:
            obj._dtype = old


# ---------------------------------------------------------------------------
# Training steps and losses.
# ---------------------------------------------------------------------------


def _trainer_class():
    from keras.src.backend.tensorflow.trainer import TensorFlowTrainer

    return TensorFlowTrainer


def uses_default_train_step(model):
    """Whether ``model`` trains with Keras' own ``train_step`` and
    ``_compute_loss`` (``TensorFlowTrainer``): its loss then goes through
    ``_compute_loss`` and its gradients through ``optimizer.apply``."""
    trainer = _trainer_class()
    return (type(model).train_step is trainer.train_step
            and type(model)._compute_loss is trainer._compute_loss)


def loss_objects(model):
    """The compiled loss and its Loss objects with a dtype
    (``Trainer._compile_loss``, ``CompileLoss._flat_losses``, ``Loss._dtype``)."""
    compile_loss = getattr(model, "_compile_loss", None)
    if compile_loss is None:
        return []
    found = [compile_loss]
    for entry in getattr(compile_loss, "_flat_losses", None) or []:
        loss = entry[1] if isinstance(entry, (tuple, list)) else entry
        found.append(loss)
    return [obj for obj in found if hasattr(obj, "_dtype")]


@contextlib.contextmanager
def loss_dtype(model, dtype, y, y_pred):
    """Within the block the compiled loss computes in ``dtype`` (``Loss._dtype``)."""
    compile_loss = getattr(model, "_compile_loss", None)
    if compile_loss is not None and not getattr(compile_loss, "built", True):
        compile_loss.build(y, y_pred)
    with _private_dtypes(loss_objects(model), dtype):
        yield


def symbolic_build(model, element_spec):
    """Build a model that Keras would build lazily at its first batch, from
    the specs of a batch (``Trainer._symbolic_build``: what ``fit`` does
    itself under a distribution strategy).  Creates the same variables, in
    the same order, as the lazy build."""
    model._symbolic_build(data_batch=element_spec)


def make_train_function_around(model, step):
    """Keras' train function (its multi-step loop, distribution and
    iterator handling) around ``step(data)`` instead of ``model.train_step``,
    built as if ``jit_compile`` were off (``Trainer._make_function``,
    ``Trainer._jit_compile``); ``step`` compiles what it wants itself."""
    saved = model._jit_compile
    model._jit_compile = False
    try:
        return model._make_function(step)
    finally:
        model._jit_compile = saved


# ---------------------------------------------------------------------------
# Optimizers.
# ---------------------------------------------------------------------------


def applied_gradients(optimizer, grads, variables):
    """The gradients ``optimizer.apply(grads, variables)`` applies: divided
    by a ``LossScaleOptimizer``'s current ``dynamic_scale`` (as its
    ``_stateful_handle_finite_grads`` does, except for variables whose value
    is overwritten by their gradient, ``_overwrite_variable_with_gradient``)
    and by the inner optimizer's ``loss_scale_factor``.  Call before
    ``apply``, which may change the scale."""
    grads = list(grads)
    scales = []
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        build_as_apply_does(optimizer, variables)
        scales.append(("dynamic", optimizer.dynamic_scale))
        optimizer = optimizer.inner_optimizer
    if getattr(optimizer, "loss_scale_factor", None) is not None:
        scales.append(("factor", optimizer.loss_scale_factor))
    if not scales:
        return grads
    overwritten = getattr(optimizer, "_overwrite_variable_with_gradient", lambda v: False)
    out = []
    for g, v in zip(grads, variables):
        if g is not None and not overwritten(v):
            for _, scale in scales:
                g = g / tf.cast(tf.convert_to_tensor(scale), g.dtype)
        out.append(g)
    return out


def build_as_apply_does(optimizer, variables):
    """Build an optimizer the way its ``apply`` does on its first call (in
    its name scope, ``Optimizer.build`` then ``built = True``), so its
    state (a loss scale) can be read before ``apply`` runs, and, called
    before the train function is traced, so that its first trace makes no
    variable (TensorFlow traces such a trace again).  The same variables,
    paths and values as when ``apply`` builds it."""
    if optimizer.built:
        return
    from keras.src import backend

    with backend.name_scope(optimizer.name, caller=optimizer):
        optimizer.build(list(variables))
    optimizer.built = True


def is_loss_scaling(optimizer):
    """Whether ``optimizer`` is Keras' ``LossScaleOptimizer`` (it skips the
    updates whose scaled gradients are not finite)."""
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def loss_scale(optimizer):
    """A ``LossScaleOptimizer``'s loss scale variable (``dynamic_scale``,
    made by its ``build``), None for other optimizers."""
    if not isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return None
    return getattr(optimizer, "dynamic_scale", None)


def optimizer_variables(optimizer):
    """The variables an optimizer was built on (``Optimizer._trainable_variables``:
    what ``apply(grads)`` without variables updates)."""
    return list(optimizer._trainable_variables)


def var_key(optimizer):
    """The optimizer's variable key function (``Optimizer._var_key``), else ``id``."""
    return getattr(optimizer, "_var_key", id)


ALL_REDUCE = "_all_reduce_sum_gradients"


def all_reduce(optimizer):
    """The optimizer's cross-replica gradient sum
    (``TFOptimizer._all_reduce_sum_gradients``), or None."""
    return getattr(optimizer, ALL_REDUCE, None)


def shadow_method(obj, name, function):
    """Shadow ``obj.name`` by an instance attribute (bypassing Keras'
    attribute tracking); ``unshadow`` removes it."""
    object.__setattr__(obj, name, function)


def set_train_function(model, function):
    """``model.train_function = function`` without Keras' attribute tracking
    (Keras' tracking costs time twice per logged call): Keras' train function and
    the lens's are plain Python functions, which Keras does not track."""
    object.__setattr__(model, "train_function", function)


def unshadow(obj, name):
    if name in obj.__dict__:
        object.__delattr__(obj, name)


# ---------------------------------------------------------------------------
# Randomness.
# ---------------------------------------------------------------------------


def random_module():
    """The module whose functions every Keras random draw of the TensorFlow
    backend goes through (``keras.src.backend.tensorflow.random``: layers
    call ``backend.random.dropout`` etc., looked up at call time)."""
    from keras.src.backend.tensorflow import random

    return random


# The functions of ``random_module`` that draw, and the name of their dtype
# argument (None: the draw has no dtype of its own).
RANDOM_FUNCTIONS = {
    "dropout": None,
    "uniform": "dtype",
    "normal": "dtype",
    "truncated_normal": "dtype",
    "randint": "dtype",
    "categorical": "dtype",
    "gamma": "dtype",
    "binomial": "dtype",
    "beta": "dtype",
    "shuffle": None,
}


def drawn_by_initializer(frame):
    """Whether ``frame`` (the caller of a ``random_module`` function) is a
    Keras initializer (``keras.src.initializers``): a weight initialized
    where a pass first builds a layer, not a draw of the training step."""
    return frame is not None and frame.f_globals.get("__name__", "").startswith("keras.src.initializers")


def concrete_noise_shape(inputs, noise_shape):
    """The shape of a dropout draw, as Keras computes it
    (``random._get_concrete_noise_shape``)."""
    return random_module()._get_concrete_noise_shape(inputs, noise_shape)


def is_seed_state(variable):
    """Whether a non-trainable variable is a ``SeedGenerator`` state (an
    integer ``seed_generator_state``)."""
    return not tf.as_dtype(variable.dtype).is_floating and "seed_generator_state" in variable.path


# ---------------------------------------------------------------------------
# TensorFlow graph internals.
# ---------------------------------------------------------------------------


def function_per_instance(python_function, **options):
    """``tf.function(python_function, **options)`` for a function made once
    per object (a record writer, a callback's loss writer), which traces
    once for each.

    TensorFlow counts traces per Python source (``__code__``), not per
    ``tf.function``: the fifth writer created in one process (the second
    model trained) made it warn "triggered tf.function retracing ... please
    define your @tf.function outside of the loop" about our internals.
    ``Function._omit_frequent_tracing_warning`` is the flag TensorFlow sets
    on the functions it restores from a SavedModel for the same reason.
    """
    function = tf.function(python_function, **options)
    function._omit_frequent_tracing_warning = True
    return function


def current_graph():
    """The graph ops are added to now (None when executing eagerly)."""
    if tf.executing_eagerly():
        return None
    return tf.compat.v1.get_default_graph()


def keep_branches_unlowered(output):
    """Keep the ``If`` op producing ``output`` (a ``tf.cond`` result in a
    graph) a functional ``If``: TensorFlow lowers conditionals to
    Switch/Merge by default, which makes every op of the branch not taken
    pass a dead tensor at every step; a functional ``If`` runs only the
    branch taken (attribute ``_lower_using_switch_merge``)."""
    from tensorflow.core.framework import attr_value_pb2

    if tf.executing_eagerly():
        return
    op = output.op
    seen = 0
    while op.type not in ("If", "StatelessIf") and op.inputs and seen < 4:
        op = op.inputs[0].op
        seen += 1
    if op.type in ("If", "StatelessIf"):
        op._set_attr("_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False))


def without_retracing_warning(function):
    """``function`` (a ``tf.function``) that never logs TensorFlow's
    "triggered tf.function retracing" warning: TensorFlow counts traces per
    Python code object, so many instances of one class, each traced once,
    read as retracing (``Function._omit_frequent_tracing_warning``)."""
    if hasattr(function, "_omit_frequent_tracing_warning"):
        function._omit_frequent_tracing_warning = True
    return function


"""The dtype map of a Keras model (the ``dtypes`` record) and the dtypes a
comparison side states."""

import tensorflow as tf

from tb_gradlens import records
from tb_gradlens.writing import keras_private
from tb_gradlens.writing import summary_ops


def own_variable_dtype(layer):
    """The dtype of the first floating-point variable a layer created itself."""
    floats = [v for v in keras_private.own_variables(layer) if tf.as_dtype(v.dtype).is_floating]
    return tf.as_dtype(floats[0].dtype).name if floats else None


def _weighted_layers(model):
    return [layer for layer in keras_private.flatten_layers(model)
            if keras_private.own_trainable_variables(layer)]


def dominant_policy(model):
    """The policy name the model is labelled by (``records.policy_label``):
    its 16-bit policy when a weighted layer computes in 16 bits, else the
    most common policy of its weighted layers."""
    layers = _weighted_layers(model) or [model]
    return records.policy_label([layer.dtype_policy.name for layer in layers],
                                [layer.dtype_policy.compute_dtype for layer in layers])


def model_dtypes(model):
    """(compute, variable) dtype of the model as configured: the one dtype
    its weighted layers compute in (``records.MIXED`` when they differ) and
    the dtype of its floating-point trainable weights (MIXED likewise)."""
    computes = {layer.compute_dtype for layer in _weighted_layers(model)} or {model.compute_dtype}
    stored = {tf.as_dtype(v.dtype).name for v in model.trainable_variables
              if tf.as_dtype(v.dtype).is_floating} or {None}

    def one(names):
        return names.pop() if len(names) == 1 else records.MIXED

    return one(computes), one(stored)


def dtype_map(model, output_dtypes=None, output_layer=None):
    """The model's dtype map (the ``dtypes`` record payload).

    ``{"layers": [{"path", "class", "policy", "compute_dtype",
    "variable_dtype", "output_dtype"}], "variables": [{"path", "dtype"}],
    "model_output_dtype", "model_output_layer"}``; output dtypes come from
    ``output_dtypes`` (layer id -> dtype name, as an ActivationRecorder
    observes them: the model's own id holds the forward pass's output),
    else "unknown"; ``output_layer``: the layer the forward pass ended with
    (``ActivationRecorder.output_layer``).
    """
    output_dtypes = output_dtypes or {}
    layers = []
    for layer in keras_private.flatten_layers(model)[1:]:
        policy = layer.dtype_policy
        layers.append(
            {
                "path": _path(layer),
                "class": type(layer).__name__,
                "policy": policy.name,
                "compute_dtype": policy.compute_dtype,
                "variable_dtype": own_variable_dtype(layer) or policy.variable_dtype,
                "output_dtype": output_dtypes.get(id(layer), "unknown"),
            }
        )
    variables = [
        {"path": path, "dtype": tf.as_dtype(v.dtype).name}
        for path, v in zip(summary_ops.variable_paths(model.weights), model.weights)
    ]
    return records.dtype_map(
        layers, variables, output_dtypes.get(id(model)) or _last_output_dtype(layers),
        None if output_layer is None else _path(output_layer),
    )


def _path(layer):
    return getattr(layer, "path", None) or layer.name


def _last_output_dtype(layers):
    observed = [layer["output_dtype"] for layer in layers if layer["output_dtype"] != "unknown"]
    return observed[-1] if observed else "unknown"


def observe_dtypes(model, x):
    """The dtype map of ``model`` after one forward pass on ``x`` (eager)."""
    from tb_gradlens.compare.instruments import ActivationRecorder

    recorder = ActivationRecorder(model, keep_tensors=False)
    with recorder:
        model(x, training=False)
    return dtype_map(model, recorder.dtypes, recorder.output_layer)

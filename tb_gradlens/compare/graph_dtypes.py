"""Which layers compute in 16 bits in a traced pass, whatever their dtype policy.

A layer written with raw TensorFlow ops and a hard-coded ``tf.bfloat16``
computes in bfloat16 in the float32 reference too: its error is on both
sides of a comparison, so no comparison measures it, and switching its
policy (the precision advisor) does not change it.  Found as 16-bit
computing ops under the layer's name scope in the traced graph of a float32
(or float64) pass.
"""

import re

import tensorflow as tf

from tb_gradlens.compare import randomness
from tb_gradlens.writing import keras_private

# Ops that move or store a value without computing with it.
_NOT_COMPUTING = frozenset(("Placeholder", "ReadVariableOp", "Identity", "IdentityN", "Const", "NoOp", "Cast"))
_SIXTEEN = (tf.bfloat16, tf.float16)
_UNIQUIFIED = re.compile(r"^(.*)_\d+$")


def _drawing(op_name):
    """Whether an op draws a pass's random numbers (``randomness.DRAW_SCOPE``,
    uniquified as scopes are): in the dtype the layer computes in as
    configured, 16 bits in a float32 pass, which is no 16-bit computing."""
    return any(_UNIQUIFIED.sub(r"\1", part) == randomness.DRAW_SCOPE for part in op_name.split("/")[:-1])


def _layer_of(op_name, by_name):
    parts = op_name.split("/")[:-1]
    for part in reversed(parts[1:]):  # parts[0] is the model's own scope
        for name in (part, _UNIQUIFIED.sub(r"\1", part)):
            if name in by_name:
                return by_name[name]
    return None


def sixteen_bit_ops(graph, model):
    """``{id(layer): (layer, dtype name, [op names])}`` of the layers with
    16-bit computing ops in ``graph`` (a float32 pass), forward ops only;
    ops under no layer are keyed by None."""
    by_name = {layer.name: layer for layer in keras_private.flatten_layers(model)[1:]}
    found = {}
    for op in graph.get_operations():
        if op.type in _NOT_COMPUTING or op.name.startswith("gradient_tape/") or _drawing(op.name):
            continue
        dtypes = [t.dtype for t in op.outputs if t.dtype in _SIXTEEN]
        if not dtypes:
            continue
        layer = _layer_of(op.name, by_name)
        key = None if layer is None else id(layer)
        entry = found.setdefault(key, (layer, dtypes[0].name, []))
        entry[2].append(op.name)
    return found


def sixteen_bit_layers(graph, model):
    """``{layer path: dtype name}`` of the layers computing in 16 bits in
    ``graph`` whatever their policy (``sixteen_bit_ops``; ops under no layer
    are left out), the innermost layer of each op."""
    out = {}
    for key, (layer, dtype, _) in sixteen_bit_ops(graph, model).items():
        if layer is not None:
            out[getattr(layer, "path", None) or layer.name] = dtype
    return out

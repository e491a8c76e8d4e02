"""What the advisor attributes the error to: units of layers whose policy it switches.

A *unit* is one top-level layer of the model with every layer inside it (a
Dense, a Transformer block written as one custom layer, a nested
Sequential), so switching a unit switches a whole block.  Only units with a
layer that computes in 16 bits as configured are candidates (a layer
already in float32 cannot be "kept in float32").  A model with one
top-level block (everything inside a Sequential or a backbone) is opened
up to the block's own layers.  A model with more candidate units than
``max_units`` has consecutive units grouped into ``max_units`` blocks
(forward order), which bounds the passes a round costs at
``2 * max_units + 3``.
"""

import collections

from tb_gradlens.writing import keras_private

SIXTEEN_BIT = ("bfloat16", "float16")
MAX_UNITS = 16

# ``tops``: the top-level layers of the unit; ``layers``: those and every layer inside them.
Unit = collections.namedtuple("Unit", ("name", "layers", "paths", "classes", "params", "tops"))


def layer_path(layer):
    return getattr(layer, "path", None) or layer.name


def _size(variable):
    n = 1
    for d in variable.shape:
        n *= int(d)
    return n


def _members(layer):
    """The layer and every layer inside it (Keras' traversal order)."""
    return keras_private.flatten_layers(layer)


def _is_input(layer):
    return type(layer).__name__ == "InputLayer"


def _children(container):
    return [layer for layer in container.layers if not _is_input(layer)] if hasattr(container, "layers") else []


def _computes_in_16_bits(layers):
    return any(layer.compute_dtype in SIXTEEN_BIT for layer in layers)


def _params(layers):
    seen, total = set(), 0
    for layer in layers:
        for v in keras_private.own_trainable_variables(layer):
            if id(v) not in seen:
                seen.add(id(v))
                total += _size(v)
    return total


def _unit(name, tops):
    layers, seen = [], set()
    for top in tops:
        for layer in _members(top):
            if id(layer) not in seen:
                seen.add(id(layer))
                layers.append(layer)
    return Unit(name, tuple(layers), tuple(layer_path(t) for t in tops),
                tuple(type(t).__name__ for t in tops), _params(layers), tuple(tops))


def unit_of(tops):
    """The Unit of some top-level layers (named as a group when there are several)."""
    return _unit(group_name(tops), tops)


def top_blocks(model):
    """The model's top-level layers (inputs left out), opened up while there
    is a single block with layers inside it."""
    tops = _children(model)
    while len(tops) == 1 and _children(tops[0]):
        tops = _children(tops[0])
    return tops


def group(tops, max_units):
    """``tops`` in at most ``max_units`` consecutive groups of near equal size."""
    n = len(tops)
    if n <= max_units:
        return [[t] for t in tops]
    bounds = [round(i * n / max_units) for i in range(max_units + 1)]
    return [tops[a:b] for a, b in zip(bounds, bounds[1:]) if b > a]


def group_name(tops):
    if len(tops) == 1:
        return layer_path(tops[0])
    return "%s .. %s (%d layers)" % (layer_path(tops[0]), layer_path(tops[-1]), len(tops))


def candidate_units(model, max_units=MAX_UNITS):
    """The units the advisor measures, in forward (definition) order."""
    tops = [t for t in top_blocks(model) if _computes_in_16_bits(_members(t))]
    return [_unit(group_name(g), g) for g in group(tops, max(1, int(max_units)))]


def model_params(model):
    return sum(_size(v) for v in model.trainable_variables)


def params_in_16_bits(model, float32_units=()):
    """Trainable parameters of layers computing in 16 bits, once the units
    ``float32_units`` compute in float32."""
    kept = {id(layer) for unit in float32_units for layer in unit.layers}
    layers = [layer for layer in keras_private.flatten_layers(model)
              if layer.compute_dtype in SIXTEEN_BIT and id(layer) not in kept]
    return _params(layers)

"""What a pass sees of each layer call: which layer is running, and its output.

While an ``Instrument`` is active (a context manager), the ``call`` of
every layer of its model is shadowed by an instance attribute that keeps a
per-thread stack of the layers being called (``current_layer``: the
random draws of a shadow pass ask it which layer draws), lets the active
instruments of the thread replace the call's inputs and output
(``transform_inputs``, ``transform_output``: the stable-rounding pass
rounds them) and then hands the output to each of them (``on_output``).  Shadows are counted per
layer and removed in ``finally`` when the last instrument using them
exits, also when the block raises; a ``call`` the user had set on the
instance is put back.
"""

import threading

import tensorflow as tf

from tb_gradlens.writing import keras_private

_local = threading.local()
_lock = threading.Lock()
_shadows = {}  # id(layer) -> [layer, users, the instance attribute it replaced or None]


def _stack():
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def _active():
    active = getattr(_local, "instruments", None)
    if active is None:
        active = _local.instruments = []
    return active


def current_layer():
    """The innermost layer whose ``call`` runs in this thread (None outside)."""
    stack = _stack()
    return stack[-1] if stack else None


def _shadowing_call(layer, call):
    def call_seen_by_instruments(*args, **kwargs):
        active = list(_active())
        for instrument in active:
            args, kwargs = instrument.transform_inputs(layer, args, kwargs)
        stack = _stack()
        stack.append(layer)
        try:
            out = call(*args, **kwargs)
        finally:
            stack.pop()
        for instrument in active:
            out = instrument.transform_output(layer, out)
        for instrument in active:
            instrument.on_output(layer, out)
        return out

    return call_seen_by_instruments


def _acquire(layers):
    with _lock:
        for layer in layers:
            entry = _shadows.get(id(layer))
            if entry is not None:
                entry[1] += 1
                continue
            own = layer.__dict__.get("call")
            keras_private.shadow_method(layer, "call", _shadowing_call(layer, layer.call))
            _shadows[id(layer)] = [layer, 1, own]


def _release(layers):
    with _lock:
        for layer in layers:
            entry = _shadows.get(id(layer))
            if entry is None:
                continue
            entry[1] -= 1
            if entry[1] == 0:
                del _shadows[id(layer)]
                keras_private.unshadow(layer, "call")
                if entry[2] is not None:
                    keras_private.shadow_method(layer, "call", entry[2])


def is_float_tensor(t):
    dtype = getattr(t, "dtype", None)
    try:
        return dtype is not None and tf.as_dtype(dtype).is_floating
    except TypeError:
        return False


class Instrument:
    """Sees the layer calls of ``model`` while active (subclasses override
    ``on_output``)."""

    def __init__(self, model):
        self.model = model
        self._layers = None

    def __enter__(self):
        self._layers = keras_private.flatten_layers(self.model)
        _acquire(self._layers)
        _active().append(self)
        return self

    def __exit__(self, *exc):
        active = _active()
        if self in active:
            active.remove(self)
        _release(self._layers or [])
        self._layers = None
        return False

    def transform_inputs(self, layer, args, kwargs):
        """``(args, kwargs)`` a layer call (any model's) in this thread runs
        with; unchanged by default."""
        return args, kwargs

    def transform_output(self, layer, out):
        """The output a layer call (any model's) in this thread returns;
        unchanged by default."""
        return out

    def on_output(self, layer, out):
        """Called after each layer call (any model's) in this thread, with
        the output the call returns."""


class ActivationRecorder(Instrument):
    """Records every layer's output while active (context manager).

    ``outputs`` lists ``(name, tensor)`` of every sub-layer in the order
    layers finished (forward order; the model's own output is not a row); a
    layer called twice gets "name (2)"; a structured output gives one row
    per floating tensor, "name[i]".  Outputs computed inside a control-flow
    body (an RNN cell inside its ``while`` loop) are not recorded: they
    cannot be used outside it, and the layer around the loop has its own row.
    ``dtypes`` maps layer ids to the observed output dtype name; under the
    model's own id it holds the dtype of what the step's forward pass
    produced last: the model's own call, or (a custom ``train_step`` that
    calls sub-models and never the model) the last outermost layer call;
    ``output_layer`` is the innermost layer that produced it.
    """

    def __init__(self, model, keep_tensors=True):
        super().__init__(model)
        self.keep_tensors = keep_tensors
        self.outputs = []
        self.dtypes = {}
        self._graph = None
        self._own = set()
        self._taken = set()
        self._called_itself = set()
        self.output_layer = None
        self._last_leaf = None
        self._leaves = set()

    def __enter__(self):
        super().__enter__()
        self._graph = keras_private.current_graph()
        self._own = {id(layer) for layer in self._layers}
        self._leaves = {id(layer) for layer in self._layers if len(keras_private.flatten_layers(layer)) == 1}
        return self

    def on_output(self, layer, out):
        if id(layer) not in self._own:
            return
        flat = [t for t in tf.nest.flatten(out) if is_float_tensor(t)]
        if not flat:
            return
        dtype = tf.as_dtype(flat[0].dtype).name
        self.dtypes[id(layer)] = dtype
        leaf = id(layer) in self._leaves
        if not _stack() and id(self.model) not in self._called_itself:
            self.dtypes[id(self.model)] = dtype  # an outermost call: the forward pass's output so far
            self.output_layer = layer if leaf else self._last_leaf
        if leaf:
            self._last_leaf = layer
        if layer is self.model:
            self._called_itself.add(id(layer))
        if not self.keep_tensors or layer is self.model:
            return
        if keras_private.current_graph() is not self._graph:
            return  # inside a loop or branch body: not usable outside it
        name = getattr(layer, "path", None) or layer.name
        base, k = name, 1
        while (base if len(flat) == 1 else base + "[0]") in self._taken:
            k += 1
            base = "%s (%d)" % (name, k)
        if len(flat) == 1:
            rows = [(base, flat[0])]
        else:
            rows = [("%s[%d]" % (base, i), t) for i, t in enumerate(flat)]
        self.outputs.extend(rows)
        self._taken.update(n for n, _ in rows)

    def stop(self):
        """Stop recording (the forward pass is over); same as leaving the block."""
        if self._layers is not None:
            self.__exit__(None, None, None)

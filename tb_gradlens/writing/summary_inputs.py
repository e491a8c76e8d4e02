"""What the gradlens writers take: variable paths, dtype names, gradients as
the statistics pass takes them, and which dtypes have no statistics.

Shared by ``summary_ops``, the Keras lens and the precision comparison
(``summary_ops`` re-exports every name, as before).
"""

import tensorflow as tf


def variable_path(variable):
    """A variable's display path: Keras 3 ``path``, else ``name`` minus ':0'."""
    path = getattr(variable, "path", None)
    if not isinstance(path, str) or not path:
        path = getattr(variable, "name", None) or "variable"
    if path.endswith(":0"):
        path = path[:-2]
    return path


def variable_paths(variables):
    """Unique display paths of ``variables`` (a repeated one gets ' (2)')."""
    seen = {}
    paths = []
    for v in variables:
        p = variable_path(v)
        if p in seen:
            seen[p] += 1
            p = "%s (%d)" % (p, seen[p])
        else:
            seen[p] = 1
        paths.append(p)
    return paths


_DTYPE_NAMES = {}  # dtype -> name: tf.as_dtype costs microseconds, per variable


def dtype_name(value):
    """Name of a tensor's or variable's dtype ('none' for None)."""
    if value is None:
        return "none"
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return "unknown"
    try:
        return _DTYPE_NAMES[dtype]
    except (KeyError, TypeError):
        name = tf.as_dtype(dtype).name
    try:
        _DTYPE_NAMES[dtype] = name
    except TypeError:
        pass
    return name


def static_size(variable):
    """Elements of a variable of static shape (0 when unknown)."""
    shape = getattr(variable, "shape", None)
    if isinstance(shape, tf.TensorShape):
        return shape.num_elements() or 0
    try:
        n = 1
        for d in shape:
            n *= int(d)
        return n
    except (TypeError, ValueError):
        return 0


def as_gradient(gradient):
    """A gradient as ``numerics.gradient_statistics`` takes it: None,
    ``tf.IndexedSlices`` (kept sparse) or a tensor."""
    if gradient is None or isinstance(gradient, (tf.IndexedSlices, tf.Tensor)):
        return gradient
    return tf.convert_to_tensor(gradient)



_REASONS = {}  # dtype -> unsupported_dtype_reason


def unsupported_dtype_reason(value):
    """None if ``value`` (a tensor, variable or None) has a real float dtype;
    else (dtype name, why it has no gradient statistics)."""
    if value is None:
        return None
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return None
    try:
        return _REASONS[dtype]
    except (KeyError, TypeError):
        reason = _dtype_reason(dtype)
    try:
        _REASONS[dtype] = reason
    except TypeError:
        pass
    return reason


def _dtype_reason(dtype):
    try:
        dtype = tf.as_dtype(dtype)
    except TypeError:
        return (str(dtype), "not a TensorFlow dtype")
    if dtype.is_floating:
        return None
    if dtype.is_complex:
        why = "complex: statistics are defined for real floating-point gradients"
    elif dtype.is_integer or dtype.is_bool:
        why = "integer or boolean: not differentiable, no floating-point statistics"
    else:
        why = "not a floating-point dtype"
    return (dtype.name, why)


def with_static_shape(tensor, shape):
    """``tensor`` with its static shape set to ``shape``: what
    ``tf.ensure_shape`` states, without its check when the graph runs
    (inside a training step nothing the lens adds may raise; a shape that
    contradicts the known one still fails when traced)."""
    tensor = tf.convert_to_tensor(tensor)
    if tf.executing_eagerly():
        return tensor
    tensor = tf.identity(tensor)
    tensor.set_shape(shape)
    return tensor


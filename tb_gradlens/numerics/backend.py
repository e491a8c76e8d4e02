"""Which implementation computes the raw sums: the compiled kernel or TensorFlow.

  "kernel"  the C library (``kernel.py``), called through
            ``tf.numpy_function`` inside a graph: one multi-threaded pass,
            float64 sums; CPU tensors only, not inside XLA.
  "tf"      TensorFlow ops, one row-wise reduction per group of
            equal-size tensors (``packing.py``): multi-threaded on CPU.
  "xla"     the same ops compiled by XLA (``jit_compile``): what runs
            inside an XLA-compiled function, and the default on GPU.

``choose`` picks: inside XLA "xla"; with a GPU "xla"; else the kernel when
it loads, else "tf".  Every backend gives the same statistics (tests
compare each with float64 NumPy), except that TensorFlow's CPU kernels
flush subnormal inputs to zero in value statistics (sums, min, max), where
the kernel keeps them exactly.
"""

import numpy as np
import tensorflow as tf

from tb_gradlens import tf_internals
from tb_gradlens.numerics import kernel

BACKENDS = ("kernel", "tf", "xla")

_gpu = []


in_xla_context = tf_internals.in_xla_context


def has_gpu():
    if not _gpu:
        _gpu.append(bool(tf.config.list_logical_devices("GPU")))
    return _gpu[0]


def choose(backend=None, use_xla=None):
    """The backend to run: ``backend`` if given (checked), else from the
    context; ``use_xla`` (the former flag) True means "xla", False "tf"."""
    if backend is None and use_xla is not None:
        backend = "xla" if use_xla else "tf"
    if backend is not None:
        if backend not in BACKENDS:
            raise ValueError("tb_gradlens: backend must be one of %s, not %r" % (BACKENDS, backend))
        if in_xla_context():
            return "xla"  # the only one that compiles there
        if backend == "kernel" and kernel.library() is None:
            raise RuntimeError("tb_gradlens: the compiled kernel is not available: " + kernel.status())
        return backend
    if in_xla_context() or has_gpu():
        return "xla"
    return "kernel" if kernel.library() is not None else "tf"


def run_kernel(compute, inputs, output_dtypes):
    """``compute(*numpy arrays)`` on ``inputs`` (tensors): called directly in
    eager mode, through ``tf.numpy_function`` in a graph."""
    if tf.executing_eagerly():
        # np.asarray: the tensors' own memory (.numpy() would copy each one).
        return [tf.constant(o) for o in compute(*[np.asarray(t) for t in inputs])]
    return tf.numpy_function(compute, list(inputs), list(output_dtypes), stateful=False)


def xla_or_kernels(fn, backend):
    """``fn`` as it runs for a TensorFlow backend: compiled for "xla" (unless
    already inside XLA), as plain kernels for "tf"."""
    if backend == "xla" and not in_xla_context():
        return _compiled(fn)
    return fn


_compiled_fns = {}


def _compiled(fn):
    if fn not in _compiled_fns:
        # reduce_retracing: gradients whose shapes change between steps reuse
        # one trace (XLA still compiles per shape, on demand).
        _compiled_fns[fn] = tf.function(fn, jit_compile=True, autograph=False, reduce_retracing=True)
    return _compiled_fns[fn]

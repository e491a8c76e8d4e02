"""Which implementation computes the raw sums: the compiled kernel or TensorFlow.

  "kernel"  the compiled kernel (``kernel.py``): one multi-threaded pass,
            float64 sums; in a graph as TensorFlow ops (else the C library
            through ``tf.numpy_function``), eagerly the C library called
            directly; CPU tensors only, not inside XLA.
  "tf"      TensorFlow ops, one row-wise reduction per group of
            equal-size tensors (``packing.py``): multi-threaded on CPU.
  "xla"     the same ops compiled by XLA (``jit_compile``): what runs
            inside an XLA-compiled function, and the default on GPU.

``choose`` picks: inside XLA "xla"; with a GPU "xla"; else the kernel when
it loads, else "xla" (faster than "tf" on the models measured,
docs/benchmarks-history.md).  Every backend gives the same statistics (tests
compare each with float64 NumPy), except that TensorFlow's CPU kernels
flush subnormal inputs to zero in value statistics (sums, min, max), where
the kernel keeps them exactly.
"""

import numpy as np
import tensorflow as tf

from tb_gradlens.numerics import kernel
from tb_gradlens.numerics import tf_internals

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
    return "kernel" if kernel.library() is not None else "xla"


def run_kernel(compute, inputs, output_dtypes):
    """``compute(*numpy arrays)`` on ``inputs`` (tensors): called directly in
    eager mode, through ``tf.numpy_function`` in a graph."""
    if tf.executing_eagerly():
        # np.asarray: the tensors' own memory (.numpy() would copy each one).
        return [tf.constant(o) for o in compute(*[np.asarray(t) for t in inputs])]
    return tf.numpy_function(compute, list(inputs), list(output_dtypes), stateful=False)


def run_groups(group_fn, group_args, static, backend):
    """``[group_fn(*args, backend) for args in group_args]`` for the
    TensorFlow backends: for "xla" the groups of static shape in one
    XLA-compiled call, the others (shapes known only when the graph runs,
    e.g. a sparse gradient's rows: XLA would compile every step) as plain
    kernels; inside an XLA-compiled function everything inline."""
    inside = in_xla_context()
    out = [None] * len(group_args)
    compiled = [i for i, s in enumerate(static) if s] if backend == "xla" and not inside else []
    if compiled:
        results = _compiled(group_fn)([group_args[i] for i in compiled], "xla")
        for i, r in zip(compiled, results):
            out[i] = r
    plain_backend = "xla" if inside else ("tf" if backend == "xla" else backend)
    for i in range(len(group_args)):
        if out[i] is None:
            out[i] = group_fn(*group_args[i], plain_backend)
    return out


_compiled_fns = {}


def _compiled(group_fn):
    if group_fn not in _compiled_fns:
        def run_all(args_list, backend):
            return [group_fn(*args, backend) for args in args_list]

        # reduce_retracing: gradients whose shapes change between steps reuse
        # one trace (XLA still compiles per shape, on demand).
        _compiled_fns[group_fn] = tf.function(run_all, jit_compile=True, autograph=False, reduce_retracing=True)
    return _compiled_fns[group_fn]

"""Other hardware, emulated on this CPU for tests.

* ``emulated_reduced_float32(bits)``: float32 matmul, batched matmul,
  einsum and conv inputs (and their backprops') rounded to ``bits``
  significand bits while TensorFlow's TF32 switch is on, as TF32 rounds
  them on an NVIDIA Ampere GPU (11 bits).  It wraps the functions of
  TensorFlow's generated op modules that TensorFlow's own wrappers and
  gradient functions make those ops through (``math_ops.matmul``,
  ``_MatMulGrad``, ``nn_ops.conv2d``, ``_Conv2DGrad``,
  ``special_math_ops.einsum``), so an op made in the block (traced, or
  run eagerly) rounds: a function traced in the block keeps the rounding,
  as XLA fixes the switch when it compiles (TensorFlow's GPU kernels read
  it when they run).  float64 and 16-bit inputs pass unchanged.
* ``emulated_nondeterministic_float32(relative)``: every float32 matmul
  result that sums two terms or more moved by a random relative amount up
  to ``relative``, drawn anew at every run (a stateful draw), as a GPU's
  atomics and algorithm choices sum in another order from run to run
  (much exaggerated); a result of one product (the float32 probe's) is
  exact, as any order leaves it.
* ``auto_jit_sees(device_type)``: Keras' ``jit_compile="auto"`` resolved
  as if a GPU were present (``Trainer._resolve_auto_jit_compile`` reads
  ``tf.config.list_physical_devices()`` and compiles with XLA when a device
  other than a CPU is there); a model compiled in the block trains under
  XLA as it would on a GPU machine.
"""

import contextlib
import importlib

import tensorflow as tf

from tb_gradlens.compare import float32_probe

# {module path: function names} of the ops TF32 rounds (see the module).
REDUCED_FLOAT32_OPS = {
    "tensorflow.python.ops.gen_math_ops": ("mat_mul", "batch_mat_mul", "batch_mat_mul_v2", "batch_mat_mul_v3"),
    "tensorflow.python.ops.gen_nn_ops": ("conv2d", "conv2d_backprop_input", "conv2d_backprop_filter"),
    "tensorflow.python.ops.gen_linalg_ops": ("einsum",),
}


def round_significand(x, bits):
    """float32 ``x`` rounded to nearest (ties to even) with ``bits``
    significand bits, the implicit bit included (11: TF32; 8: bfloat16),
    kept in float32; NaN and infinities pass; the gradient passes unchanged."""
    drop = 24 - int(bits)

    @tf.custom_gradient
    def rounded(value):
        i = tf.bitcast(value, tf.int32)
        lsb = tf.bitwise.bitwise_and(tf.bitwise.right_shift(i, drop), 1)
        kept = tf.bitwise.bitwise_and(i + ((1 << (drop - 1)) - 1) + lsb, ~((1 << drop) - 1))
        out = tf.where(tf.math.is_finite(value), tf.bitcast(kept, tf.float32), value)
        return out, lambda dy: dy

    return rounded(x)


def _round_float32(bits):
    def one(value):
        if tf.is_tensor(value) and value.dtype == tf.float32:
            return round_significand(value, bits)
        return value

    return one


@contextlib.contextmanager
def emulated_reduced_float32(bits=11):
    """Within the block float32 is ``bits`` bits in matmul/conv (see the
    module); the probe's answers are forgotten on entry and exit."""

    def rounding(original):
        def op(*args, **kwargs):
            if tf.config.experimental.tensor_float_32_execution_enabled():
                args, kwargs = tf.nest.map_structure(_round_float32(bits), (list(args), kwargs))
            return original(*args, **kwargs)

        return op

    saved = []
    float32_probe.forget()
    try:
        for path, names in REDUCED_FLOAT32_OPS.items():
            module = importlib.import_module(path)
            for name in names:
                if hasattr(module, name):
                    saved.append((module, name, getattr(module, name)))
                    setattr(module, name, rounding(getattr(module, name)))
        yield
    finally:
        for module, name, original in reversed(saved):
            setattr(module, name, original)
        float32_probe.forget()


@contextlib.contextmanager
def emulated_nondeterministic_float32(relative=1e-2):
    """Within the block float32 matmul results are not repeatable (see the module)."""
    from tensorflow.python.ops import gen_math_ops

    original = gen_math_ops.mat_mul
    draws = tf.random.Generator.from_seed(0)  # (one state for every function: each run draws anew)

    def mat_mul(a, b, transpose_a=False, transpose_b=False, **kwargs):
        out = original(a, b, transpose_a=transpose_a, transpose_b=transpose_b, **kwargs)
        if out.dtype != tf.float32:
            return out
        terms = original(tf.cast(tf.not_equal(a, 0), tf.float32), tf.cast(tf.not_equal(b, 0), tf.float32),
                         transpose_a=transpose_a, transpose_b=transpose_b)
        moved = draws.uniform(tf.shape(out), -relative, relative) * tf.cast(terms >= 2, tf.float32)
        return out * (1.0 + moved)

    gen_math_ops.mat_mul = mat_mul
    try:
        yield
    finally:
        gen_math_ops.mat_mul = original


@contextlib.contextmanager
def auto_jit_sees(device_type="GPU"):
    """Within the block Keras' ``jit_compile="auto"`` resolves as if a
    ``device_type`` device were present (see the module): compile the model
    in the block."""
    real = tf.config.list_physical_devices

    def listed(kind=None):
        found = list(real(kind))
        if kind is None or kind == device_type:
            found.append(tf.config.PhysicalDevice("/physical_device:%s:0" % device_type, device_type))
        return found

    tf.config.list_physical_devices = listed
    try:
        yield
    finally:
        tf.config.list_physical_devices = real

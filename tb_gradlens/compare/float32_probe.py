"""What float32 is on this hardware, measured: the reference's precision.

A "float32 reference" is IEEE float32 (24 significand bits, the implicit
bit included) on this CPU.  Elsewhere it is often not:

* on NVIDIA Ampere and newer, with TensorFlow's TF32 switch on (its
  default), float32 matmul, batched matmul (einsum) and convolution
  (forward and both backprops) round their inputs to TF32 (11 bits);
* on TPUs float32 matmuls run in bfloat16 passes (8 bits) unless that
  switch is off;
* on CPUs with AMX or Arm bfloat16, oneDNN's fpmath mode
  (``TF_SET_ONEDNN_FPMATH_MODE`` / ``ONEDNN_DEFAULT_FPMATH_MODE`` = BF16)
  lets those ops compute float32 in bfloat16.

``probe`` runs each of those ops, on the device and under the compilation
a reference runs with, on products whose exact values need every bit of
float32, and counts the bits that survive: operand ladders ``1 + 2^-k``
(k = 1..23) against an exact 1 tell how many bits each operand keeps (a
ladder that loses ``1 + 2^-k`` keeps k bits), and products
``(1 + 2^-k)(1 + 2^-(23-k))``, exact in float32 and needing all 24 bits,
tell whether the product and its accumulation keep them.  Every probe
value sits alone in its dot product (the other terms are exact zeros),
so no summation order can change it.  The answer is cached per device,
compilation, TF32 switch and fpmath variables.
"""

import contextlib
import os

import numpy as np
import tensorflow as tf

from tb_gradlens import records
from tb_gradlens import safety
from tb_gradlens.writing import keras_private

FPMATH_VARIABLES = ("TF_SET_ONEDNN_FPMATH_MODE", "ONEDNN_DEFAULT_FPMATH_MODE")
SIZE = 128  # matrix side (large enough for a GPU's tensor-core kernels)
CHANNELS = 32  # conv channels
SPATIAL = 8  # conv image side
PROBE_CAUSE = "tb_gradlens.compare.float32_probe"
_cache = {}


def ladder(n):
    """``1 + 2^-k`` for k = 1, ..., 23, 1, ... (n values, float32)."""
    k = np.arange(n) % 23 + 1
    return (1.0 + 2.0 ** -k).astype(np.float32)


def _factors(n):
    """Pairs ``(1 + 2^-k, 1 + 2^-(23-k))``, k = 1..22 repeated: float32
    operands whose product is exact in float32 and needs all 24 bits."""
    k = np.arange(n) % 22 + 1
    return (1.0 + 2.0 ** -k).astype(np.float32), (1.0 + 2.0 ** -(23 - k)).astype(np.float32)


def kept_bits(got, want):
    """The significand bits kept: ``want`` holds ``1 + 2^-k`` values; the
    smallest k whose value did not come back is the bits kept (24: all came
    back)."""
    got, want = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
    lost = np.round(-np.log2(want - 1.0))[got != want]
    return records.IEEE_FLOAT32_BITS if not len(lost) else int(lost.min())


def products_exact(got, a, b):
    """Whether every product ``a*b`` (exact in float32) came back exactly."""
    want = np.asarray(a, np.float64).ravel() * np.asarray(b, np.float64).ravel()
    return bool((np.asarray(got, np.float64).ravel() == want).all())


def op_bits(left, right, exact):
    """An op's bits: the fewer its two operands kept; 23 when both kept all
    24 but a product that needs them all came back rounded (the product or
    its accumulation rounds)."""
    bits = min(left, right)
    return records.IEEE_FLOAT32_BITS - 1 if bits == records.IEEE_FLOAT32_BITS and not exact else bits


def _inputs():
    """The probe's operands (NumPy float32), built once."""
    n, c, s = SIZE, CHANNELS, SPATIAL
    eye = np.eye(n, dtype=np.float32)
    a, b = _factors(n)
    mats = {  # (left, right) per arrangement: left ladder, right ladder, products
        "left": (np.diag(ladder(n)), eye), "right": (eye, np.diag(ladder(n))),
        "product": (np.diag(a), np.diag(b)),
    }
    center = np.zeros((3, 3, c, c), np.float32)
    center[1, 1] = np.eye(c, dtype=np.float32)
    image = ladder(s * s * c).reshape(1, s, s, c)
    ones = np.ones((1, s, s, c), np.float32)
    ca, cb = _factors(c)

    def filt(values):
        f = np.zeros((3, 3, c, c), np.float32)
        f[1, 1] = np.diag(values)
        return f

    def pixel(values):  # one pixel, all channels (the filter gradient's probe)
        x = np.zeros((1, s, s, c), np.float32)
        x[0, s // 2, s // 2] = values
        return x

    convs = {  # (image, filter, output gradient)
        "image": (image, center, image), "filter": (ones, filt(ladder(c)), ones),
        "product": (np.broadcast_to(ca, (1, s, s, c)).copy(), filt(cb), np.broadcast_to(ca, (1, s, s, c)).copy()),
    }
    filter_grads = {  # (image, output gradient) for the filter gradient
        "image": (pixel(ladder(c)), pixel(np.ones(c, np.float32))),
        "gradient": (pixel(np.ones(c, np.float32)), pixel(ladder(c))),
        "product": (pixel(ca), pixel(cb)),
    }
    return mats, convs, filter_grads


def _run_ops(mats, convs, filter_grads):
    """Every probed op on every arrangement (tensors in, tensors out)."""
    out = {}
    for name, (left, right) in mats.items():
        out["matmul/" + name] = tf.linalg.matmul(left, right)
    stacked = [tf.stack([mats[k][i] for k in ("left", "right", "product")]) for i in (0, 1)]
    out["batch_matmul"] = tf.linalg.matmul(stacked[0], stacked[1])
    strides, shape = [1, 1, 1, 1], [1, SPATIAL, SPATIAL, CHANNELS]
    for name, (image, kernel, upstream) in convs.items():
        # (the ops a gradient tape would make, made directly: a probe run
        # from inside a trace escapes it by ``tf.init_scope``, which pauses tapes)
        out["conv2d/" + name] = tf.nn.conv2d(image, kernel, 1, "SAME")
        out["conv2d_backprop_input/" + name] = tf.compat.v1.nn.conv2d_backprop_input(
            shape, kernel, upstream, strides, "SAME")
    for name, (image, upstream) in filter_grads.items():
        out["conv2d_backprop_filter/" + name] = tf.compat.v1.nn.conv2d_backprop_filter(
            image, [3, 3, CHANNELS, CHANNELS], upstream, strides, "SAME")[1, 1]
    return out


def _bits(results, mats, convs, filter_grads):
    """``{op: bits}`` from the probe's results (NumPy)."""
    n, c = SIZE, CHANNELS
    a, b = _factors(n)
    ca, cb = _factors(c)
    bits = {}
    mm = [np.diag(results["matmul/" + k]) for k in ("left", "right", "product")]
    bits["matmul"] = op_bits(kept_bits(mm[0], ladder(n)), kept_bits(mm[1], ladder(n)), products_exact(mm[2], a, b))
    bmm = [np.diag(m) for m in results["batch_matmul"]]
    bits["batch_matmul"] = op_bits(kept_bits(bmm[0], ladder(n)), kept_bits(bmm[1], ladder(n)),
                                   products_exact(bmm[2], a, b))
    inner = (slice(None), slice(1, -1), slice(1, -1))  # (pixels whose 3x3 window is inside the image)
    image = convs["image"][0]
    for op in ("conv2d", "conv2d_backprop_input"):
        got = [results[op + "/" + k][inner] for k in ("image", "filter", "product")]
        bits[op] = op_bits(kept_bits(got[0], image[inner]),
                           kept_bits(got[1], np.broadcast_to(ladder(c), got[1].shape)),
                           products_exact(got[2], np.broadcast_to(ca, got[2].shape), np.broadcast_to(cb, got[2].shape)))
    grads = [results["conv2d_backprop_filter/" + k] for k in ("image", "gradient", "product")]
    bits["conv2d_backprop_filter"] = op_bits(
        kept_bits(grads[0], np.broadcast_to(ladder(c)[:, None], (c, c))),
        kept_bits(grads[1], np.broadcast_to(ladder(c)[None, :], (c, c))),
        products_exact(np.diag(grads[2]), ca, cb))
    return bits


def fpmath_variables():
    """``{variable: value}`` of oneDNN's fpmath variables that are set."""
    return {k: os.environ[k] for k in FPMATH_VARIABLES if os.environ.get(k)}


def _cause(bits, tf32, fpmath, device_type):
    """Why float32 measured ``bits`` bits (None: IEEE, or not known)."""
    if bits >= records.IEEE_FLOAT32_BITS:
        return None
    if device_type == "TPU":
        return "TPU bfloat16 passes"
    if bits == 11 and tf32:
        return "TF32"
    if fpmath and bits <= 8:
        return "oneDNN fpmath %s" % sorted(set(fpmath.values()))[0]
    return None


def device_type(device=None):
    """The type ("CPU", "GPU", "TPU") of ``device``, else of the device
    TensorFlow places ops on by default."""
    if device:
        return tf.DeviceSpec.from_string(device).device_type or "CPU"
    for kind in ("TPU", "GPU"):
        if tf.config.list_logical_devices(kind):
            return kind
    return "CPU"


def probe(device=None, jit_compile=False):
    """What float32 is on ``device`` (None: the default placement) when
    computed as a reference compiled so (``jit_compile``) computes it: a
    ``records.float32_precision`` dict (cached; see the module)."""
    tf32 = bool(tf.config.experimental.tensor_float_32_execution_enabled())
    fpmath = fpmath_variables()
    key = (device, bool(jit_compile), tf32, tuple(sorted(fpmath.items())))
    if key not in _cache:
        mats, convs, filter_grads = _inputs()
        run = keras_private.function_per_instance(_run_ops, jit_compile=bool(jit_compile), autograph=False)
        with tf.init_scope(), (tf.device(device) if device else contextlib.nullcontext()):
            results = run(*tf.nest.map_structure(tf.constant, (mats, convs, filter_grads)))
            results = {k: np.asarray(v) for k, v in results.items()}
        bits = _bits(results, mats, convs, filter_grads)
        _cache[key] = records.float32_precision(
            bits, tf32, _cause(min(bits.values()), tf32, fpmath, device_type(device)), device, jit_compile, fpmath)
    return dict(_cache[key])


def forget():
    """Forget every answer (a test that emulates other hardware measures anew)."""
    _cache.clear()


def side_precision(variant, surrounding_jit=False, computed_in=None):
    """What float32 is where a comparison side of ``variant`` computes (its
    device, and XLA when it compiles so), a ``records.float32_precision``
    with ``computed_in``; None when the side does not compute in float32
    (a 16-bit or float64 policy, the model as configured)."""
    if variant.compute_dtype != "float32":
        return None
    jit = variant.jit_compile if variant.jit_compile is not None else surrounding_jit
    found = safety.call(PROBE_CAUSE, probe, variant.device, bool(jit))  # (a probe that fails: not known)
    if found is not None:
        found["computed_in"] = computed_in or "float32"
    return found


def ieee_dtype(precision, ieee=True):
    """The dtype a float32 side computes in so that it is IEEE float32 or
    better: "float64" where float32 measured degraded (TF32 and oneDNN's
    fpmath leave float64 alone) and ``ieee`` is on, else None (as it is)."""
    return "float64" if ieee and records.is_degraded(precision) else None

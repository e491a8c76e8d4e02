"""The environment a run trains in, read once: what else than precision can
make two runs (or a run and its reference) compute differently.

``environment(model)`` is a ``records.environment``: the device the step
runs on (kind, name, compute capability), the TF32 switch, op determinism,
the model's resolved ``jit_compile`` and ``run_eagerly``, whether oneDNN
kernels run and the environment variables that change numerics (oneDNN's
fpmath mode, XLA flags, determinism), the replicas in sync and the strategy,
TensorFlow's and Keras' versions.  It only reads: the lens never changes a
setting (``enable_op_determinism`` would also switch Keras' automatic XLA
off).
"""

import os
import platform

import keras
import tensorflow as tf

from tb_gradlens import records
from tb_gradlens.numerics import tf_internals


def cpu_name():
    """The CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or None


def step_device():
    """``{"type", "name", "compute_capability"}`` of the device TensorFlow
    places a step on by default: the first TPU or GPU, else the CPU."""
    for kind in ("TPU", "GPU"):
        found = tf.config.list_physical_devices(kind)
        if found:
            details = {}
            try:
                details = tf.config.experimental.get_device_details(found[0]) or {}
            except (ValueError, RuntimeError, tf.errors.OpError):
                pass
            capability = details.get("compute_capability")
            if isinstance(capability, (tuple, list)):
                capability = ".".join(str(c) for c in capability)
            return {"type": kind, "name": details.get("device_name") or found[0].name,
                    "compute_capability": capability}
    return {"type": "CPU", "name": cpu_name(), "compute_capability": None}


def device_counts():
    """``{type: count}`` of the physical devices."""
    counts = {}
    for device in tf.config.list_physical_devices():
        counts[device.device_type] = counts.get(device.device_type, 0) + 1
    return counts


def numeric_variables():
    """``{name: value}`` of ``records.NUMERIC_VARIABLES`` that are set."""
    return {k: os.environ[k] for k in records.NUMERIC_VARIABLES if os.environ.get(k) is not None}


def environment(model=None, strategy=None):
    """The ``records.environment`` of a training of ``model`` (None: a
    custom loop, whose compilation the lens does not know) under
    ``strategy`` (default: the model's)."""
    jit = eager = None
    if model is not None:
        strategy = strategy or model.distribute_strategy
        eager = bool(getattr(model, "run_eagerly", False))
        if getattr(model, "compiled", False):
            jit = bool(model.jit_compile) and not eager
    strategy = strategy or tf.distribute.get_strategy()
    replicas = int(getattr(strategy, "num_replicas_in_sync", 1) or 1)
    default = type(strategy).__name__.startswith("_Default")
    return records.environment(
        step_device(), tf32=bool(tf.config.experimental.tensor_float_32_execution_enabled()),
        op_determinism=tf_internals.op_determinism_enabled(), jit_compile=jit, run_eagerly=eager,
        onednn=tf_internals.onednn_enabled(), variables=numeric_variables(), replicas=replicas,
        strategy=None if default else type(strategy).__name__, tensorflow=tf.__version__, keras=keras.__version__,
        devices=device_counts())

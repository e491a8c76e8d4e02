"""The compiled one-pass kernel (``_kernel.c``): finding, building, loading it.

The statistics, divergence metrics and update statistics can come from
TensorFlow ops (the "tf" and "xla" backends) or from this small C kernel,
which reads every element once, on all cores, with float64 sums, and
applies the same formulas.  It is optional: ``pip install`` needs no
compiler (the package ships ``_kernel.c`` and ``_op.cc`` as data), and
without a compiler every path runs in TensorFlow.

Two ways to call it, both built on first use where a compiler exists, into a
per-user cache (``$TB_GRADLENS_CACHE``, else ``$XDG_CACHE_HOME/tb_gradlens``
or ``~/.cache/tb_gradlens``), once per source (and TensorFlow) version:

* as TensorFlow ops (``_op.cc`` + ``_kernel.c``, compiled with ``$CXX`` or
  ``c++`` against the installed TensorFlow's headers, ~15 s once): graph
  ops, no Python on the logged step;
* as a C library through ``ctypes`` (``$CC`` or the compiler Python was
  built with, once): in eager mode (an op with one input per tensor
  costs TensorFlow seconds to set up for 10^5 tensors), and through
  ``tf.numpy_function`` in graphs when the ops cannot be built or loaded
  (a Python call more per step).

``$TB_GRADLENS_KERNEL``: ``0``/``off`` disables the kernel, ``library``
skips the ops.  ``status()`` says what is used and why;
``python -m tb_gradlens.numerics`` builds both ahead and prints it.
The kernel reads host memory: ``backend.choose`` uses it for CPU tensors only.
"""

import ctypes
import hashlib
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import threading

import numpy as np

from tb_gradlens import float_formats
from tb_gradlens import metadata

ENV_KERNEL = "TB_GRADLENS_KERNEL"
ENV_CACHE = "TB_GRADLENS_CACHE"
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "_kernel.c")
OP_SOURCE = os.path.join(HERE, "_op.cc")

# dtype codes of _kernel.c
FLOAT32, BFLOAT16, FLOAT16, FLOAT64, NONE = 0, 1, 2, 3, -1
CODES = {"float32": FLOAT32, "bfloat16": BFLOAT16, "float16": FLOAT16, "float64": FLOAT64}
DTYPES = tuple(CODES)

# The column orders _kernel.c writes (checked against the record format).
assert metadata.GRAD_STATS_COLUMNS == (
    "l2_norm", "mean", "std", "min", "max", "max_abs", "rms", "zero_fraction", "subnormal_fraction",
    "nan_count", "posinf_count", "neginf_count", "count", "is_none")
assert metadata.DIVERGENCE_METRICS == (
    "rel_l2", "cosine", "norm_ratio", "max_abs", "max_rel", "ulp_rms", "sign_flip", "flush_to_zero",
    "nonfinite")
assert metadata.UPDATE_STATS_COLUMNS == ("update_rms", "update_ratio", "lost_update_bf16")
assert metadata.HISTOGRAM_SPECIAL_COLUMNS == ("zero", "posinf", "neginf", "nan")

# Below this many elements one thread is faster than starting others
# (_op.cc has the same number).
PARALLEL_ELEMENTS = 1 << 17

# Tensors per op: TensorFlow's graph optimizer spends time quadratic in an
# op's inputs (8 s to set up one op of 10^4 inputs here, under 5 s as 40
# ops of 250).
OP_INPUTS = 256


def in_op_chunks(fn, *lists):
    """``fn`` on slices of at most OP_INPUTS rows of parallel ``lists``;
    the results (tuples of row-wise tensors) concatenated."""
    n = len(lists[0])
    if n <= OP_INPUTS:
        return fn(*lists)
    import tensorflow as tf

    parts = [fn(*(lst[i:i + OP_INPUTS] for lst in lists)) for i in range(0, n, OP_INPUTS)]
    return tuple(tf.concat(list(outs), axis=0) for outs in zip(*parts))

def report_failed_rows(marker, what):
    """Report (``step_failures``) a kernel op that failed inside the step:
    it leaves NaN rows, ``marker`` (float [rows]) NaN in a column that is
    never NaN otherwise."""
    import tensorflow as tf

    from tb_gradlens.numerics import step_failures

    step_failures.report_if("tb_gradlens compiled kernel", tf.reduce_any(tf.math.is_nan(marker)),
                            "the compiled kernel failed (out of memory) computing %s: its rows are NaN" % what)


_lock = threading.RLock()
_state = {}


# ---------------------------------------------------------------------------
# Building.
# ---------------------------------------------------------------------------


def cache_dir():
    base = os.environ.get(ENV_CACHE)
    if not base:
        base = os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "tb_gradlens",
        )
    try:
        os.makedirs(base, mode=0o700, exist_ok=True)
    except OSError:  # an unwritable home: a per-user temporary folder
        base = os.path.join(tempfile.gettempdir(), "tb_gradlens-%s" % getattr(os, "getuid", lambda: "")())
        os.makedirs(base, mode=0o700, exist_ok=True)
    return base


def _c_compiler():
    """$CC, else the compiler Python was built with, else ``cc``."""
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


def _cxx_compiler():
    return shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")


_C_FLAGS = ["-O3", "-fPIC", "-pthread"]


def _cached(stem, key_parts, make, directory=None):
    """The path of ``<stem>-<digest of key_parts>.so`` in the cache, made
    by ``make(partial_path)`` if missing (atomic: concurrent builders agree)."""
    key = hashlib.sha256(repr(key_parts).encode()).hexdigest()[:16]
    directory = directory or cache_dir()
    os.makedirs(directory, mode=0o700, exist_ok=True)
    target = os.path.join(directory, "%s-%s.so" % (stem, key))
    if os.path.exists(target):
        return target
    fd, partial = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    try:
        make(partial)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def _run(command, timeout):
    subprocess.run(command, check=True, capture_output=True, timeout=timeout)


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def build(directory=None, timeout=120):
    """Compile ``_kernel.c`` into a shared library; returns its path."""
    cc = _c_compiler()
    parts = (_read(SOURCE), cc, _C_FLAGS, sys.platform, sysconfig.get_platform())
    return _cached("tb_gradlens_kernel", parts, lambda out: _run(
        cc + _C_FLAGS + ["-shared", SOURCE, "-o", out, "-lm"], timeout), directory)


def build_ops(directory=None, timeout=600):
    """Compile ``_op.cc`` and ``_kernel.c`` into a TensorFlow op library
    for the installed TensorFlow; returns its path."""
    import tensorflow as tf

    cc, cxx = _c_compiler(), _cxx_compiler()
    compile_flags, link_flags = tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()
    parts = (_read(SOURCE), _read(OP_SOURCE), cc, cxx, compile_flags, link_flags, tf.__version__,
             tf.__file__, sys.platform, sysconfig.get_platform())

    def make(out):
        with tempfile.TemporaryDirectory() as tmp:
            obj = os.path.join(tmp, "kernel.o")
            _run(cc + _C_FLAGS + ["-c", SOURCE, "-o", obj], timeout)
            _run(cxx + ["-O2", "-shared", "-fPIC", "-pthread", "-w", OP_SOURCE, obj, "-o", out]
                 + compile_flags + link_flags + ["-lm"], timeout)

    return _cached("tb_gradlens_ops", parts, make, directory)


# ---------------------------------------------------------------------------
# Loading.
# ---------------------------------------------------------------------------


def _setting():
    return os.environ.get(ENV_KERNEL, "").strip().lower()


def _declare(library):
    pointer, i64, i32, f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_double
    library.gl_gradient_statistics.argtypes = [
        i64, pointer, pointer, pointer, pointer, i32, i32, i32, i32, pointer, pointer, i32]
    library.gl_divergence_metrics.argtypes = [
        i64, pointer, pointer, pointer, pointer, pointer, pointer, pointer, pointer, f64, pointer, i32]
    library.gl_update_statistics.argtypes = [i64, pointer, pointer, pointer, pointer, pointer, pointer, pointer, i32]
    for fn in (library.gl_gradient_statistics, library.gl_divergence_metrics, library.gl_update_statistics):
        fn.restype = ctypes.c_int
    library.gl_float32_layout.argtypes = [pointer]
    library.gl_float32_layout.restype = None
    layout = np.zeros(3, np.int32)
    library.gl_float32_layout(layout.ctypes.data)
    f32 = float_formats.get("float32")
    expected = [f32.mantissa_bits, float_formats.bias("float32"), f32.min_subnormal]
    if layout.tolist() != expected:
        raise OSError("the kernel's float32 layout %s is not float_formats' %s" % (layout.tolist(), expected))
    return library


def _error(e):
    detail = getattr(e, "stderr", b"") or b""
    return ("%s %s" % (e, detail.decode(errors="replace")[-300:])).strip()


def _load_library():
    if _setting() in ("0", "off", "false", "no"):
        return None, "disabled by $%s" % ENV_KERNEL
    try:
        path = build()
        return _declare(ctypes.CDLL(path)), "C library %s" % path
    except (OSError, subprocess.SubprocessError, AttributeError) as e:
        return None, "no C compiler or build failed (%s)" % _error(e)


def _load_ops():
    if _setting() in ("0", "off", "false", "no", "library"):
        return None, "TensorFlow ops not used ($%s=%s)" % (ENV_KERNEL, _setting())
    if library() is None:
        return None, "no TensorFlow ops without the C kernel"
    try:
        import tensorflow as tf

        path = build_ops()
        return tf.load_op_library(path), "TensorFlow ops %s" % path
    except Exception as e:  # noqa: BLE001 - headers, ABI, compiler: any failure means no ops
        return None, "TensorFlow ops not built (%s)" % _error(e)


def _loaded(key, load):
    with _lock:
        if key not in _state:
            _state[key], _state[key + "_status"] = load()
        return _state[key]


def library():
    """The C kernel as a ctypes library, or None (``status`` says why)."""
    return _loaded("library", _load_library)


def ops():
    """The kernel as TensorFlow ops (a module), or None."""
    library()
    return _loaded("ops", _load_ops)


def status():
    """One sentence: how the kernel runs, or why it does not."""
    ops()
    if _state["ops"] is not None:
        return "compiled kernel as " + _state["ops_status"]
    if _state["library"] is not None:
        return "compiled kernel as %s through tf.numpy_function (%s)" % (
            _state["library_status"], _state["ops_status"])
    return "no compiled kernel, TensorFlow ops instead: " + _state["library_status"]


def reset():
    """Forget what was found (tests: after changing the environment)."""
    with _lock:
        _state.clear()


def threads():
    """Threads the C library uses: TensorFlow's intra-op setting, else the
    CPUs this process may run on (read once)."""
    if "threads" not in _state:
        _state["threads"] = _count_threads()
    return _state["threads"]


def _count_threads():
    try:
        import tensorflow as tf

        configured = tf.config.threading.get_intra_op_parallelism_threads()
    except Exception:  # noqa: BLE001 - TF absent or not configurable: count CPUs
        configured = 0
    if configured > 0:
        return configured
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return os.cpu_count() or 1


def threads_for(sizes):
    """Threads for arrays of ``sizes`` elements: one below PARALLEL_ELEMENTS."""
    return threads() if int(np.sum(sizes)) >= PARALLEL_ELEMENTS else 1

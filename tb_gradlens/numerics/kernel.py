"""The compiled one-pass kernel (``_kernel.c``): finding, building, calling it.

The statistics, divergence and update sums can come from two places that
compute the same numbers: TensorFlow ops (``tf_sums`` in each formula
module; one XLA-compiled pass or separate kernels) or this small C library,
which reads every element once, on all cores, with float64 sums.  The C
library is optional: ``pip install`` works without a compiler, and without
the library every path runs in TensorFlow.

Where the library comes from, first found wins:

1. ``$TB_GRADLENS_KERNEL``: ``0``/``off`` disables it; a path loads that file;
2. a ``_kernel*`` library next to this module (a packager may build one);
3. compiled on first use (``$CC``, else the compiler Python was built with,
   about a second, once per source version) into a per-user cache
   (``$TB_GRADLENS_CACHE``, else ``$XDG_CACHE_HOME/tb_gradlens`` or
   ``~/.cache/tb_gradlens``); ``python -m tb_gradlens.numerics.kernel``
   builds it ahead and prints where.

The package ships ``_kernel.c`` as data and installs without a compiler.
``status()`` says which library is used, or why none.  The library reads
host memory, so ``backend.choose`` uses it for CPU tensors only.
"""

import ctypes
import glob
import hashlib
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import threading

import numpy as np

ENV_KERNEL = "TB_GRADLENS_KERNEL"
ENV_CACHE = "TB_GRADLENS_CACHE"
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_kernel.c")

# dtype codes of _kernel.c
FLOAT32, BFLOAT16, FLOAT16, FLOAT64, NONE = 0, 1, 2, 3, -1
_CODES = {"float32": FLOAT32, "bfloat16": BFLOAT16, "float16": FLOAT16, "float64": FLOAT64}
# Row widths of the kernel's outputs (see _kernel.c).
GRADIENT_SUMS = 4  # sum, sum of squares, min, max; then the histogram
DIVERGENCE_SUMS = 12
UPDATE_SUMS = 4

_lock = threading.Lock()
_state = {"library": None, "status": None}


def _cache_dir():
    base = os.environ.get(ENV_CACHE)
    if not base:
        base = os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
            "tb_gradlens",
        )
    return base


def _compiler():
    """$CC, else the compiler Python was built with, else ``cc``."""
    return shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")


_FLAGS = ["-O3", "-shared", "-fPIC", "-pthread"]


def build(directory=None, timeout=120):
    """Compile ``_kernel.c`` into ``directory`` (default: the cache);
    returns the library's path.  Raises OSError/CalledProcessError."""
    with open(SOURCE, "rb") as f:
        source = f.read()
    command = _compiler()
    key = hashlib.sha256(
        source + repr((command, _FLAGS, sys.platform, sysconfig.get_platform())).encode()
    ).hexdigest()[:16]
    directory = directory or _cache_dir()
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except OSError:  # an unwritable home: a per-user temporary folder
        directory = os.path.join(tempfile.gettempdir(), "tb_gradlens-%s" % getattr(os, "getuid", lambda: "")())
        os.makedirs(directory, mode=0o700, exist_ok=True)
    target = os.path.join(directory, "tb_gradlens_kernel-%s.so" % key)
    if os.path.exists(target):
        return target
    fd, partial = tempfile.mkstemp(suffix=".so", dir=directory)
    os.close(fd)
    try:
        subprocess.run(
            command + _FLAGS + [SOURCE, "-o", partial, "-lm"],
            check=True, capture_output=True, timeout=timeout,
        )
        os.replace(partial, target)  # atomic: concurrent builders agree
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def _declare(library):
    pointer, i64, i32, f64 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_double
    library.gl_gradient_sums.argtypes = [i64, pointer, pointer, pointer, i32, i32, i32, pointer, i32]
    library.gl_divergence_sums.argtypes = [
        i64, pointer, pointer, pointer, pointer, pointer, pointer, pointer, f64, pointer, i32
    ]
    library.gl_update_sums.argtypes = [i64, pointer, pointer, pointer, pointer, pointer, pointer, pointer, i32]
    for fn in (library.gl_gradient_sums, library.gl_divergence_sums, library.gl_update_sums):
        fn.restype = ctypes.c_int
    return library


def _find():
    """(library or None, status sentence)."""
    setting = os.environ.get(ENV_KERNEL, "").strip()
    if setting.lower() in ("0", "off", "false", "no"):
        return None, "disabled by $%s" % ENV_KERNEL
    candidates = []
    if setting:
        candidates.append(("$%s" % ENV_KERNEL, setting))
    here = os.path.dirname(SOURCE)
    for path in sorted(glob.glob(os.path.join(here, "_kernel*"))):
        if not path.endswith(".c"):
            candidates.append(("built at install", path))
    errors = []
    for origin, path in candidates:
        try:
            return _declare(ctypes.CDLL(path)), "compiled kernel (%s: %s)" % (origin, path)
        except (OSError, AttributeError) as e:
            errors.append("%s: %s" % (path, e))
    if setting:
        return None, "cannot load $%s=%s (%s)" % (ENV_KERNEL, setting, "; ".join(errors))
    try:
        path = build()
        return _declare(ctypes.CDLL(path)), "compiled kernel (built on first use: %s)" % path
    except (OSError, subprocess.SubprocessError, AttributeError) as e:
        detail = getattr(e, "stderr", b"") or b""
        errors.append("%s %s" % (e, detail.decode(errors="replace")[-300:]))
    return None, "no compiled kernel, TensorFlow ops instead (%s)" % "; ".join(errors)


def library():
    """The loaded C library, or None (see ``status``)."""
    with _lock:
        if _state["status"] is None:
            _state["library"], _state["status"] = _find()
        return _state["library"]


def status():
    """One sentence: which library computes the sums, or why none does."""
    library()
    return _state["status"]


def reset():
    """Forget the library found (tests: after changing the environment)."""
    with _lock:
        _state["library"] = _state["status"] = None
        _state.pop("threads", None)


def threads():
    """Threads the kernel uses: TensorFlow's intra-op setting, else the CPUs
    this process may run on (read once)."""
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


# ---------------------------------------------------------------------------
# NumPy-level calls: lists of arrays in, float64 rows out.
# ---------------------------------------------------------------------------


def _prepared(arrays):
    """(kept arrays, pointers, dtype codes, sizes) for the C calls."""
    kept, codes = [], []
    for a in arrays:
        if a is None:
            kept.append(None)
            codes.append(NONE)
            continue
        a = np.asarray(a)
        name = a.dtype.name
        if name not in _CODES:
            a = a.astype(np.float32)
            name = "float32"
        a = np.ascontiguousarray(a)
        kept.append(a)
        codes.append(_CODES[name])
    pointers = np.array([0 if a is None else a.ctypes.data for a in kept], np.uint64)
    sizes = np.array([0 if a is None else a.size for a in kept], np.int64)
    return kept, pointers, np.array(codes, np.int32), sizes


def _check(result, what):
    if result != 0:
        raise MemoryError("tb_gradlens: the compiled kernel ran out of memory (%s)" % what)


def gradient_sums(arrays, min_exponent, zero_bin, n_bins):
    """float64 ``[len(arrays), 4 + n_bins]``: sum, sum of squares, min, max
    over the finite elements, then the histogram counts."""
    kept, pointers, codes, sizes = _prepared(arrays)
    rows = np.empty((len(kept), GRADIENT_SUMS + n_bins), np.float64)
    if len(kept):
        _check(library().gl_gradient_sums(
            len(kept), pointers.ctypes.data, codes.ctypes.data, sizes.ctypes.data,
            min_exponent, zero_bin, n_bins, rows.ctypes.data, _threads_for(sizes),
        ), "gradient statistics")
    return rows


def divergence_sums(candidates, references, mantissa_bits, min_normal, floor_fraction):
    """float64 ``[pairs, 12]``: the raw sums of ``divergence.metrics_from_sums``."""
    kept_c, c_pointers, c_codes, sizes = _prepared(candidates)
    kept_r, r_pointers, r_codes, r_sizes = _prepared(references)
    if not np.array_equal(sizes, r_sizes):
        raise ValueError("tb_gradlens: candidate and reference sizes differ: %s vs %s"
                         % (sizes.tolist(), r_sizes.tolist()))
    p = np.asarray(mantissa_bits, np.int32)
    e = np.asarray(min_normal, np.int32)
    rows = np.empty((len(kept_c), DIVERGENCE_SUMS), np.float64)
    if len(kept_c):
        _check(library().gl_divergence_sums(
            len(kept_c), c_pointers.ctypes.data, c_codes.ctypes.data, r_pointers.ctypes.data,
            r_codes.ctypes.data, sizes.ctypes.data, p.ctypes.data, e.ctypes.data, float(floor_fraction),
            rows.ctypes.data, _threads_for(sizes),
        ), "divergence")
    return rows


def update_sums(before, after, gradients):
    """float64 ``[variables, 4]``: n, sum u^2, sum before^2, lost count."""
    kept_b, b_pointers, codes, sizes = _prepared(before)
    kept_a, a_pointers, a_codes, _ = _prepared([np.asarray(a, b.dtype) for a, b in zip(after, kept_b)])
    kept_g, g_pointers, g_codes, _ = _prepared(gradients)
    rows = np.empty((len(kept_b), UPDATE_SUMS), np.float64)
    if len(kept_b):
        _check(library().gl_update_sums(
            len(kept_b), b_pointers.ctypes.data, a_pointers.ctypes.data, codes.ctypes.data,
            g_pointers.ctypes.data, g_codes.ctypes.data, sizes.ctypes.data, rows.ctypes.data,
            _threads_for(sizes),
        ), "update statistics")
    return rows


# Below this many elements one thread is faster than starting others.
PARALLEL_ELEMENTS = 1 << 17


def _threads_for(sizes):
    return threads() if int(np.sum(sizes)) >= PARALLEL_ELEMENTS else 1


if __name__ == "__main__":
    print(status())
    sys.exit(0 if library() is not None else 1)

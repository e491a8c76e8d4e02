"""What every benchmark shares: the machine line, the spread of per-round ratios
measured in interleaved rounds and its table cell, the ``--json`` file, and the
per-batch timer of a ``fit`` call.

A benchmark times the plain side and the lens's side in interleaved rounds
(plain, lens, plain, lens, ...) in one process, so the load of a shared
machine hits both alike; it reports the median over rounds of lens / plain of
the same round with the interquartile range of those ratios as the noise
(``spread``, printed by ``cell``), and writes its results with ``write_json``
when asked (``--json PATH``).  ``python -m benchmarks.run`` prints
``machine()`` first and gathers every benchmark's ``--json`` into one file.
"""

import datetime
import json
import os
import platform
import time

import numpy as np


def machine():
    """The machine line of every result: CPU, cores, versions, date."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    import tensorboard

    versions = "python %s, numpy %s, tensorboard %s" % (platform.python_version(), np.__version__,
                                                        tensorboard.__version__)
    try:
        import keras
        import tensorflow as tf

        versions += ", tensorflow %s, keras %s" % (tf.__version__, keras.__version__)
    except ImportError:
        pass
    return "%s, %d cores; %s; %s" % (cpu, os.cpu_count(), versions, datetime.date.today().isoformat())


def write_json(path, results):
    """The results of a run as JSON (``--json``), for benchmarks/results/."""
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)


def write_rows(path, rows):
    """The rows of a benchmark's table as JSON (``--json``), each with the machine
    line (asked for after the timing: it imports TensorFlow where it can)."""
    if path:
        line = machine()
        write_json(path, [dict(row, machine=line) for row in rows])


def spread(ratios):
    """{"median", "p25", "p75", "rounds"} of per-round ratios."""
    r = np.asarray(ratios, np.float64)
    return {"median": float(np.median(r)), "p25": float(np.percentile(r, 25)),
            "p75": float(np.percentile(r, 75)), "rounds": int(r.size)}


def cell(s):
    """A spread as a table cell: median (p25-p75)."""
    return "%.3fx (%.2f-%.2f)" % (s["median"], s["p25"], s["p75"])


class BatchTimer:
    """Per-batch wall time of one fit call."""

    def __new__(cls):
        import keras

        class _Timer(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.times = []
                self.first_step = 0

            def on_train_begin(self, logs=None):
                self.first_step = int(self.model.optimizer.iterations.numpy())

            def on_train_batch_begin(self, batch, logs=None):
                self._t = time.perf_counter()

            def on_train_batch_end(self, batch, logs=None):
                self.times.append(time.perf_counter() - self._t)

        return _Timer()

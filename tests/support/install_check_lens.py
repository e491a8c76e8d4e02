"""Run by tests/project/test_install.py inside a freshly installed venv: the lens works
with whatever compiler this process finds, and says which kernel it used.

Prints one JSON line: the kernel status, where tb_gradlens was imported
from, the largest deviation of the callback's logged gradient statistics
(step 0) from a float64 NumPy recomputation on the same weights and batch,
the steps logged, and the compiled files in the kernel cache.
"""

import json
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main(logdir):
    import keras
    import tensorflow as tf

    import tb_gradlens
    from tb_gradlens.keras import GradLensCallback
    from tb_gradlens.numerics import backend as backends
    from tb_gradlens.numerics import kernel

    sys.path.append(ROOT)  # last, and after the import above: tb_gradlens stays the installed one
    from tests.support.readback import only_tag, read_records  # noqa: PLC0415 - after the path is set
    from tests.support.gradient_reference import reference_statistics  # noqa: PLC0415

    started = time.perf_counter()
    status = kernel.status()
    build_seconds = time.perf_counter() - started
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).normal(size=(16, 5)).astype(np.float32)
    y = np.random.default_rng(1).normal(size=(16, 1)).astype(np.float32)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse", jit_compile=False)
    with tf.GradientTape() as tape:
        loss = keras.losses.MeanSquaredError()(y, model(x, training=True))
    expected = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
    model.fit(x, y, batch_size=16, epochs=3, shuffle=False, verbose=0,
              callbacks=[GradLensCallback(logdir, gradient_every=1, update_every=1, compare_every=0)])
    record, data = only_tag(read_records(os.path.dirname(logdir)), os.path.basename(logdir), "grad_stats")
    first = next(d for d in data if d.step == 0).numpy
    deviation = 0.0
    for row, grad in enumerate(expected):
        want = reference_statistics(grad)
        deviation = max(deviation, float(np.max(np.abs(first[row] - want) / (np.abs(want) + 1e-6))))
    cache = kernel.cache_dir()
    print(json.dumps({
        "status": status, "backend": backends.choose(), "package": tb_gradlens.__file__,
        "deviation": deviation, "steps": sorted(d.step for d in data), "rows": list(record.rows),
        "compiled": sorted(f for f in os.listdir(cache) if f.endswith(".so")),
        "status_seconds": build_seconds,
    }))


if __name__ == "__main__":
    main(sys.argv[1])

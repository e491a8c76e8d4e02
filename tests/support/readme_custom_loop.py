"""Run the README's "Custom loop" block as a user would, for ``test_tf_warnings.py``.

``python tests/support/readme_custom_loop.py LOGDIR`` (the repository root on
PYTHONPATH): the README's ```python block under "## Custom loop", given what
it leaves to the user (a small mixed_bfloat16 model, its loss and optimizer,
the log directory), trained for 21 steps in a fresh process with
TensorFlow's C++ logs not silenced; the logged steps are printed.
"""

import os
import re
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def readme_block(title="## Custom loop"):
    """The first ```python block after ``title`` in README.md."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index(title):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def main(logdir):
    import keras
    import tensorflow as tf

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1, dtype="float32")])
    # As a file: AutoGraph reads a tf.function's source to turn its `if` into a tf.cond.
    script = os.path.join(logdir, "readme_custom_loop_block.py")
    os.makedirs(logdir, exist_ok=True)
    with open(script, "w", encoding="utf-8") as f:
        f.write(readme_block().replace('"logs/bf16"', repr(os.path.join(logdir, "run"))))
    import runpy

    scope = runpy.run_path(script, {"model": model, "loss_fn": keras.losses.MeanSquaredError(),
                                    "optimizer": keras.optimizers.Adam(1e-3)})
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 8)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")
    for step in range(21):
        scope["train_step"](x, y, tf.constant(step, tf.int64))
    scope["writer"].flush()

    from tensorboard.backend.event_processing import event_accumulator

    acc = event_accumulator.EventAccumulator(os.path.join(logdir, "run"), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = [t for t in acc.Tags()["tensors"] if "/grad_stats/" in t]
    print("readme_custom_loop: steps", [e.step for e in acc.Tensors(tags[0])])


if __name__ == "__main__":
    main(sys.argv[1])

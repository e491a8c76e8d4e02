"""Train while a real disk fills and frees (run by tests/writing/test_event_writer.py).

Run inside a private mount namespace whose MOUNT is a small tmpfs::

    python tests/support/disk_full_train.py MODE MOUNT OUT_DIR

MODE ``keras``: ``model.fit`` of the README's MLP (float32, real digits) with
``GradLensCallback(gradient_every=1, update_every=1, flush_seconds=0)`` (every logged
call flushed: the writer's recovery is tested step by step); a callback listed after it fills
the disk at the end of batch FILL[0] and frees it at FREE[0], then fills
and frees it again (FILL[1], FREE[1]).  MODE ``loop``: the README's custom
``tf.function`` loop with ``tb_gradlens.summary.create_file_writer`` and
``tb_gradlens.summary.gradients`` at every step, the disk filled and freed
at the same steps.  MODE ``plain_loop``: the same loop with TensorFlow's
own ``tf.summary.create_file_writer`` (what TensorFlow does alone).

OUT_DIR receives a copy of the run directory (``run/``) and ``result.json``:
the warnings issued (message, step), ``safety.reported()``, the steps at
which the disk was full, the losses, and exceptions raised by steps.
"""

import atexit
import json
import os
import shutil
import signal
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)  # tb_gradlens and tests.support from this checkout

STEPS = 40
FILL = (8, 22)  # the disk is full from the end of these steps ...
FREE = (14, 28)  # ... to the end of these
BATCH = 32
# MODE "keras_stays_full": the disk fills at the end of step FILL[0] and stays full to the end.
# MODE "keras_kill": the disk fills at FILL[0], frees at FREE[0] (no pause after), and the process
# SIGKILLs itself at the end of step KILL (result.json is written just before).
KILL = 15
SCENARIOS = {"keras": (FILL, FREE), "loop": (FILL, FREE), "plain_loop": (FILL, FREE),
             "keras_stays_full": (FILL[:1], ()), "keras_kill": (FILL[:1], FREE[:1])}


def fill(mount):
    """Fill ``mount`` to the last byte (a real ENOSPC); returns the filler's path."""
    path = os.path.join(mount, "filler_%d" % time.monotonic_ns())
    with open(path, "wb", buffering=0) as f:
        for size in (1 << 16, 1 << 12, 1 << 8, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError:
                pass
    return path


def free(path, pause=True):
    os.remove(path)
    if pause:
        time.sleep(1.1)  # the writer tries a new file at most once a second


class Disk:
    """Fills and frees the disk at the given steps; records when it was full."""

    def __init__(self, mount, fills=FILL, frees=FREE, pause=True):
        self.mount = mount
        self.fills, self.frees, self.pause = fills, frees, pause
        self.filler = None
        self.full_steps = []

    def after_step(self, step):
        if self.filler is not None:
            self.full_steps.append(step)
        if step in self.fills:
            self.filler = fill(self.mount)
        elif step in self.frees and self.filler is not None:
            free(self.filler, self.pause)
            self.filler = None


def main(mode, mount, out_dir):
    import numpy as np
    import tensorflow as tf
    import keras

    from evaluation import real_models
    import tb_gradlens
    from tb_gradlens import safety

    logdir = os.path.join(mount, "run")
    fills, frees = SCENARIOS[mode]
    disk = Disk(mount, fills, frees, pause=mode != "keras_kill")
    caught = []
    errors = []
    losses = []
    current = {"step": -1}
    original_showwarning = warnings.showwarning

    def record(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, safety.GradLensWarning):
            caught.append({"step": current["step"], "message": str(message)})
        else:
            original_showwarning(message, category, filename, lineno, file, line)

    warnings.showwarning = record
    warnings.simplefilter("always", safety.GradLensWarning)
    x, y = real_models.digits(STEPS * BATCH, np.random.default_rng(0))
    model = real_models.build_compiled("mlp", "float32", optimizer="sgd")
    def save(path):
        with open(path, "w") as f:
            json.dump({"warnings": caught, "reported": safety.reported(), "full_steps": disk.full_steps,
                       "losses": losses, "errors": errors}, f)

    # At exit, after the writers' own exit hooks (registered later, run first): copy the run, save.
    atexit.register(save, os.path.join(out_dir, "result.json"))
    atexit.register(shutil.copytree, logdir, os.path.join(out_dir, "run"))
    if mode.startswith("keras"):
        from tb_gradlens.keras import GradLensCallback

        class DiskCallback(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                current["step"] = batch

            def on_train_batch_end(self, batch, logs=None):
                losses.append(float(logs["loss"]))
                disk.after_step(batch)
                if mode == "keras_kill" and batch == KILL:
                    save(os.path.join(out_dir, "result.json"))
                    os.kill(os.getpid(), signal.SIGKILL)  # the copy of the run is made outside

        model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                  callbacks=[GradLensCallback(logdir, gradient_every=1, update_every=1, compare_every=0,
                                                   flush_seconds=0), DiskCallback()])
    else:
        writer = (tb_gradlens.summary.create_file_writer(logdir) if mode == "loop"
                  else tf.summary.create_file_writer(logdir))
        loss_fn = keras.losses.SparseCategoricalCrossentropy()
        optimizer = keras.optimizers.SGD(0.01)

        @tf.function
        def train_step(xb, yb, step):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(xb, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            if step % 1 == 0:  # the README's logging condition (every step here)
                with writer.as_default():
                    tb_gradlens.summary.gradients(grads, model.trainable_variables, step=step)
            optimizer.apply(grads, model.trainable_variables)
            return loss

        for step in range(STEPS):
            current["step"] = step
            xb, yb = x[step * BATCH:(step + 1) * BATCH], y[step * BATCH:(step + 1) * BATCH]
            try:
                losses.append(float(train_step(xb, yb, tf.constant(step, tf.int64))))
            except Exception as e:  # noqa: BLE001 - what TensorFlow raises, recorded
                errors.append({"step": step, "error": "%s: %s" % (type(e).__name__, str(e)[:200])})
            disk.after_step(step)
        writer.close()


if __name__ == "__main__":
    main(*sys.argv[1:4])

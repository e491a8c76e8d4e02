"""The README demo: train the 784-64-64-10 MLP in float32 and mixed_bfloat16,
log gradient statistics with tb_gradlens, then serve TensorBoard with the tab.

A second float32 run, ``float32_seed1`` (another seed for the weights and the
batch order), is the noise floor of the tab's Compare view: the bfloat16 run
differs from ``float32`` beyond float32-vs-float32 noise only where it
differs by more than ``float32_seed1`` does.

With ``precision=True`` (what ``tb-gradlens demo`` runs) the mixed_bfloat16
custom loop also logs, through ``tb_gradlens.keras.GradLens``, a shadow
float32 step every ``compare_every`` steps (per-variable and per-layer
bf16-vs-f32 divergence, the loss in both), update statistics (lost
bfloat16 updates) and the dtype map, and after its last step the precision
advisor measures it once (one ``advice`` record: what to keep in float32);
a third run, ``fit_mixed_bfloat16``, trains the same model with ``model.fit``
and ``GradLensCallback``, comparing against float32 and against XLA.

``tb-gradlens demo`` (``cli/demo.py``) owns the logdir's demo runs: it
checks the port before training, replaces the runs of an earlier demo and
refuses a second demo writing the same logdir at the same time.

Data: scikit-learn's bundled 8x8 handwritten digits (1,797 real images that
ship inside the scikit-learn package, no download), upsampled bilinearly to
28x28 = 784 inputs so the model is exactly the reference MLP of the
bfloat16 Keras guides.
"""

import os
import sys

import numpy as np

RUNS = ("float32", "mixed_bfloat16")
# The float32 noise floor: float32 again with another seed (run name, seed).
NOISE_RUN = ("float32_seed1", 1)
FIT_RUN = "fit_mixed_bfloat16"
COMPARE_EVERY = 10
DEFAULT_LOGDIR = "/tmp/gradlens_demo"
DEFAULT_PORT = 6006
HOST = "127.0.0.1"


def _interpolation_matrix(n_in, n_out):
    """[n_out, n_in] bilinear (align-corners) interpolation weights."""
    positions = np.linspace(0.0, n_in - 1.0, n_out)
    lower = np.floor(positions).astype(int)
    upper = np.minimum(lower + 1, n_in - 1)
    frac = positions - lower
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lower] += 1.0 - frac
    m[np.arange(n_out), upper] += frac
    return m


def load_digits_784():
    """(x float32 [1797, 784] in [0, 1], y int32 [1797]) from scikit-learn."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    m = _interpolation_matrix(8, 28)
    images = np.einsum("ij,njk,lk->nil", m, digits.images / 16.0, m)
    return images.reshape(len(images), 784).astype(np.float32), digits.target.astype(
        np.int32
    )


def build_mlp(policy, seed=0):
    """The 784-64-64-10 MLP; the softmax stays float32 (as the guides advise)."""
    import keras

    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [
            keras.Input((784,)),
            keras.layers.Dense(64, activation="relu", dtype=policy, name="dense_1"),
            keras.layers.Dense(64, activation="relu", dtype=policy, name="dense_2"),
            keras.layers.Dense(10, dtype=policy, name="logits"),
            keras.layers.Activation("softmax", dtype="float32", name="predictions"),
        ],
        name="mlp",
    )


def train_run(logdir, policy, steps=300, batch_size=64, log_every=1, seed=0,
              precision=False, compare_every=COMPARE_EVERY, run=None):
    """Train one run (directory ``run``, default the policy name) with a
    custom GradientTape loop that logs gradients and the ``loss`` scalar.

    With ``precision`` (and a non-float32 policy) it also logs shadow-step
    comparisons against float32, update statistics and the dtype map, and
    after the last step the precision advisor's one round (``advise_once``).
    """
    import keras
    import tensorflow as tf

    from tb_gradlens import summary
    from tb_gradlens.keras import GradLens

    x, y = load_digits_784()
    model = build_mlp(policy, seed)
    optimizer = keras.optimizers.Adam(1e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy()
    model.compile(optimizer=optimizer, loss=loss_fn)  # compute_loss for comparisons
    writer = tf.summary.create_file_writer(os.path.join(logdir, run or policy))
    rng = np.random.default_rng(seed)
    lens = None
    if precision and policy != "float32":
        lens = GradLens(writer=writer, gradient_every=log_every, compare_every=compare_every)
        lens.log_dtypes(model, tf.constant(x[:batch_size]), step=0)

    @tf.function
    def train_step(xb, yb, step):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        with writer.as_default(), tf.summary.record_if(step % log_every == 0):
            summary.gradients(grads, model.trainable_variables, step=step)
            tf.summary.scalar("loss", loss, step=step)
        if lens is None:
            optimizer.apply(grads, model.trainable_variables)
            return loss
        lens.compare_keras(model, xb, yb, step=step, gradients=grads)  # the step's own: the candidate
        before = [tf.identity(v) for v in model.trainable_variables]
        optimizer.apply(grads, model.trainable_variables)
        lens.log_updates(before, model.trainable_variables, model.trainable_variables, step, grads)
        return loss

    loss = None
    for step in range(steps):
        idx = rng.integers(0, len(x), batch_size)
        loss = train_step(
            tf.constant(x[idx]), tf.constant(y[idx]), tf.constant(step, tf.int64)
        )
    writer.flush()
    writer.close()
    if lens is not None:
        advise_once(model, x[:batch_size], y[:batch_size], os.path.join(logdir, run or policy), steps - 1)
    return float(loss)


def advise_once(model, x, y, run_dir, step):
    """The precision advisor's one round on the trained model, on one batch,
    at the run's last step (its own event file, written after the training's
    is closed: the two share that step only)."""
    import tb_gradlens

    tb_gradlens.advise(model, (x, y), log_dir=run_dir, step=step)


def fit_run(logdir, steps=300, batch_size=64, seed=0, compare_every=COMPARE_EVERY):
    """Train with ``model.fit`` and ``GradLensCallback`` (run ``FIT_RUN``)."""
    import tensorflow as tf

    from tb_gradlens import compare
    from tb_gradlens.keras import GradLensCallback

    x, y = load_digits_784()
    model = build_mlp("mixed_bfloat16", seed)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    data = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .shuffle(len(x), seed=seed)
        .repeat()
        .batch(batch_size)
    )
    gradient_every = max(1, compare_every // 2)
    callback = GradLensCallback(
        os.path.join(logdir, FIT_RUN),
        gradient_every=gradient_every,
        update_every=gradient_every,  # the demo's short run shows its updates at every logged step
        compare_every=compare_every,
        comparisons=[
            ("float32", None),
            (compare.Variant(None), compare.Variant(None, jit_compile=True)),
        ],
    )
    # shuffle=False: the dataset shuffles itself (Keras warns that shuffle=True is ignored for a dataset).
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    # Keras' history holds the epoch's running mean of the loss; the run's last logged step is what the tab shows.
    return last_logged_loss(os.path.join(logdir, FIT_RUN))[1]


def last_logged_loss(run_dir):
    """(step, value) of the last ``loss`` scalar logged in ``run_dir`` (None, NaN if none)."""
    import glob

    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.util import tensor_util

    last = (None, float("nan"))
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        for event in event_file_loader.LegacyEventFileLoader(path).Load():
            for value in event.summary.value:
                if value.tag == "loss" and (last[0] is None or event.step >= last[0]):
                    last = (int(event.step), float(tensor_util.make_ndarray(value.tensor)))
    return last


def write_demo_logdir(logdir, steps=300, log_every=1, precision=False):
    """Train every demo run into ``logdir``; returns {run: final loss}.

    ``precision`` adds the precision-lens records, the float32 noise-floor
    run ``NOISE_RUN`` and the ``FIT_RUN`` run.
    """
    losses = {
        run: train_run(logdir, run, steps, log_every=log_every, precision=precision)
        for run in RUNS
    }
    if precision:
        name, seed = NOISE_RUN
        losses[name] = train_run(logdir, "float32", steps, log_every=log_every, seed=seed, run=name)
        losses[FIT_RUN] = fit_run(logdir, steps)
    return losses


def _entry_point_installed():
    """True when TensorBoard will load gradlens through its entry point."""
    from importlib import metadata as importlib_metadata

    return any(
        e.name == "gradlens"
        for e in importlib_metadata.entry_points(group="tensorboard_plugins")
    )


def demo_runs():
    """The run directories the demo writes."""
    return RUNS + (NOISE_RUN[0], FIT_RUN)


def serve(logdir, port=DEFAULT_PORT, host=HOST):
    """Start TensorBoard with the GradLens tab; returns (program, url)."""
    from tensorboard import default
    from tensorboard import program

    from tb_gradlens.serving import loader

    plugins = default.get_plugins()
    if not _entry_point_installed():
        # Running from a source checkout: TensorBoard does not know the plugin.
        plugins.append(loader.GradLensLoader())
    tb = program.TensorBoard(plugins=plugins)
    tb.configure(argv=[None, "--logdir", logdir, "--host", host, "--port", str(port)])
    url = tb.launch()
    return tb, url


def train(logdir, steps=300, log_every=1):
    """Train every demo run into ``logdir`` and print each run's final loss
    (its last logged step, what the tab shows)."""
    print("tb_gradlens demo: training %s into %s" % (", ".join(demo_runs()), logdir), flush=True)
    losses = write_demo_logdir(logdir, steps, log_every, precision=True)
    width = max(len(name) for name in losses)
    for name in losses:
        step, loss = last_logged_loss(os.path.join(logdir, name))  # what the tab shows as its last step
        print("  %-*s final loss %.4f (step %s, as logged)" % (width, name, loss, step), flush=True)


def serve_until_interrupted(logdir, port=DEFAULT_PORT):
    """Serve ``logdir`` with the tab until Ctrl-C; 0."""
    _, url = serve(logdir, port)
    print("TensorBoard with the GradLens tab: %s#gradlens" % url, flush=True)
    print("Press Ctrl-C to stop.", flush=True)
    try:
        import time

        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    return 0


def next_step_text(logdir):
    """What to run next when the demo does not serve."""
    return ("Next: tensorboard --logdir %s  (then open the GradLens tab), or: tb-gradlens report %s"
            % (logdir, logdir))


def run(logdir, steps=300, port=DEFAULT_PORT, serve_after=True, log_every=1):
    """Train, then (optionally) serve until interrupted (``tb-gradlens demo``
    adds the checks of its logdir and port)."""
    train(logdir, steps, log_every)
    if not serve_after:
        print(next_step_text(logdir), flush=True)
        return 0
    return serve_until_interrupted(logdir, port)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_LOGDIR))

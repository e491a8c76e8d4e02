"""Train a tiny softmax regression with the lens under a tf.distribute strategy.

Run as a subprocess by tests/writing/test_distributed.py (logical devices must be
configured before TensorFlow initializes them, and multi-worker training
needs one process per worker)::

    python -m tests.support.distributed_train STRATEGY LOGDIR OUT.npz   # from the repository root

STRATEGY is ``single`` (no strategy), ``mirrored`` (two logical CPU
devices) or ``multiworker`` (TF_CONFIG set by the caller, one CPU device
per worker).  Two trainings on the same data and initial weights:

* ``LOGDIR/fit`` (not under ``multiworker``): ``model.fit`` with ``GradLensCallback(gradient_every=1, update_every=1,
  replica_divergence=True)`` and a float64-reference comparison;
* ``LOGDIR/loop``: a custom ``strategy.run`` loop with ``GradLens``
  (``replica_divergence=True``) and ``tb_gradlens.summary.gradients``
  under the name ``direct``.

OUT.npz holds the data and the weights before every step of both, for a
float64 NumPy recomputation of what was logged.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

STEPS = 3
GLOBAL_BATCH = 8
FEATURES = 6
CLASSES = 3
LEARNING_RATE = 0.5


def data():
    import numpy as np

    rng = np.random.default_rng(7)
    x = rng.normal(size=(STEPS * GLOBAL_BATCH, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, size=STEPS * GLOBAL_BATCH).astype("int32")
    kernel = (0.5 * rng.normal(size=(FEATURES, CLASSES))).astype("float32")
    bias = (0.1 * rng.normal(size=CLASSES)).astype("float32")
    return x, y, kernel, bias


def main(strategy_name, logdir, out):
    import tensorflow as tf

    if strategy_name == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
    import keras
    keras.config.disable_traceback_filtering()
    import numpy as np

    import tb_gradlens
    from tb_gradlens.keras import GradLens
    from tb_gradlens.keras import GradLensCallback

    if strategy_name == "mirrored":
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    elif strategy_name == "multiworker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.get_strategy()
    x, y, kernel, bias = data()

    def build():
        with strategy.scope():
            model = keras.Sequential(
                [keras.Input((FEATURES,)), keras.layers.Dense(CLASSES, name="dense")], name="net"
            )
            model.set_weights([kernel, bias])
            model.compile(
                optimizer=keras.optimizers.SGD(LEARNING_RATE),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        return model

    # -- model.fit with the callback --------------------------------------
    fit_weights = []

    class Weights(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            fit_weights.append([w.copy() for w in self.model.get_weights()])

        def on_train_end(self, logs=None):
            fit_weights.append([w.copy() for w in self.model.get_weights()])

    # Keras 3.15's model.fit itself fails under MultiWorkerMirroredStrategy,
    # without tb_gradlens too (it reduces the first (x, y) batch with
    # strategy.reduce, then concatenates scalar per-replica logs): the
    # multi-worker run trains with the custom loop only.
    if strategy_name != "multiworker":
        model = build()
        lens = GradLensCallback(
            os.path.join(logdir, "fit"), gradient_every=1, update_every=1, compare_every=2,
            comparisons=["float64"], replica_divergence=True,
        )
        model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0,
                  callbacks=[Weights(), lens])

    # -- custom loop ----------------------------------------------------------
    model = build()
    optimizer = model.optimizer
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    lens = GradLens(os.path.join(logdir, "loop"), gradient_every=1, replica_divergence=True)
    replicas = strategy.num_replicas_in_sync
    per_replica = GLOBAL_BATCH // replicas

    def replica_slice(values, step):
        def fn(context):
            start = step * GLOBAL_BATCH + context.replica_id_in_sync_group * per_replica
            return tf.constant(values[start:start + per_replica])

        if replicas == 1:
            return tf.constant(values[step * GLOBAL_BATCH:(step + 1) * GLOBAL_BATCH])
        return strategy.experimental_distribute_values_from_function(fn)

    @tf.function
    def train_step(xb, yb, step):
        def replica_fn(xb, yb):
            with tf.GradientTape() as tape:
                per_example = loss_fn(yb, model(xb, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
            grads = tape.gradient(loss, model.trainable_variables)
            lens.log_gradients(grads, model.trainable_variables, step)
            with lens.writer.as_default():
                tb_gradlens.summary.gradients(
                    grads, model.trainable_variables, step=step, name="direct", histogram=False
                )
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

        strategy.run(replica_fn, args=(xb, yb))

    loop_weights = []
    for step in range(STEPS):
        loop_weights.append([w.copy() for w in model.get_weights()])
        train_step(replica_slice(x, step), replica_slice(y, step), tf.constant(step, tf.int64))
    loop_weights.append([w.copy() for w in model.get_weights()])
    lens.flush()

    np.savez(
        out, x=x, y=y, replicas=replicas,
        fit_kernels=np.stack([w[0] for w in fit_weights]) if fit_weights else np.zeros(0),
        fit_biases=np.stack([w[1] for w in fit_weights]) if fit_weights else np.zeros(0),
        loop_kernels=np.stack([w[0] for w in loop_weights]),
        loop_biases=np.stack([w[1] for w in loop_weights]),
    )


if __name__ == "__main__":
    main(*sys.argv[1:4])

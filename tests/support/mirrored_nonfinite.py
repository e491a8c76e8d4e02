"""Non-finite steps replayed under MirroredStrategy over two logical CPUs.

Run as a subprocess by tests/writing/test_compiled_forensics.py (logical devices
must be configured before TensorFlow initializes them)::

    python -m tests.support.mirrored_nonfinite LOGDIR OUT.json   # from the repository root

Two faults, each trained twice on the same seed and data (without and with
``GradLensCallback`` at its defaults), global batch 16 (8 per replica),
``jit_compile="auto"`` resolved as on a GPU machine (Keras compiles
nothing under a strategy):

* ``overflow``: the float16 attention logits of ``real_models.unscaled_attention_logits``
  overflow on one outlier batch (step 3), in replica 1's share only;
* ``negative``: log(x + 1) of a negative input, one example of replica 1's
  share of step 2 (bfloat16).

OUT.json: per fault, whether training was bit-identical (losses and every
variable, the optimizer's included), the replays' verdicts and the alert
codes of the run.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

GLOBAL_BATCH = 16


def main(logdir, out):
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np

    from tests.support.readback import source_of
    from tests.support import other_hardware
    from evaluation import real_models
    from tb_gradlens import analysis
    from tb_gradlens.analysis import replays
    from tb_gradlens.keras import GradLensCallback

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    rng = np.random.default_rng(0)
    half = GLOBAL_BATCH // 2
    x_att = rng.normal(size=(6 * GLOBAL_BATCH, 4, 16)).astype(np.float32)
    x_att[3 * GLOBAL_BATCH + half:4 * GLOBAL_BATCH] *= 300.0  # replica 1's share of step 3
    y_att = rng.integers(0, 3, 6 * GLOBAL_BATCH).astype(np.int32)
    x_log, y_log = real_models.digits(6 * GLOBAL_BATCH, np.random.default_rng(0))
    x_log = x_log.copy()
    x_log[2 * GLOBAL_BATCH + half + 1] = -5.0  # replica 1's share of step 2
    faults = {"overflow": (lambda: real_models.unscaled_attention_logits("mixed_float16"), x_att, y_att),
              "negative": (lambda: real_models.log_input_mlp("mixed_bfloat16"), x_log, y_log)}
    found = {}
    for name, (build, x, y) in faults.items():
        states, losses, jit = [], [], []
        for lensed in (False, True):
            with strategy.scope():
                model = build()
                with other_hardware.auto_jit_sees("GPU"):
                    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
            jit.append(bool(model.jit_compile))
            callbacks = [GradLensCallback(os.path.join(logdir, name))] if lensed else []
            history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, verbose=0, shuffle=False,
                                callbacks=callbacks)
            losses.append(history.history["loss"])
            states.append([np.array(v.numpy()) for v in model.variables + model.optimizer.variables])
        identical = np.array_equal(losses[0], losses[1], equal_nan=True) and all(
            np.array_equal(a, b, equal_nan=True) for a, b in zip(*states))
        source = source_of(logdir)
        alerts, problems = analysis.run_alerts(source, [name])
        found[name] = {"bit_identical": bool(identical), "jit_compile": jit,
                       "replicas": strategy.num_replicas_in_sync,
                       "replays": [{k: r[k] for k in ("step", "verdict", "text", "layer")}
                                   for r in replays.run_replays(source, name)],
                       "alerts": sorted({a.code for a in alerts}), "problems": problems,
                       "unsupported": analysis.coverage(source, name)["unsupported"]}
    with open(out, "w") as f:
        json.dump(found, f)
    print("mirrored_nonfinite: done")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

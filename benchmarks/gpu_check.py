"""The lens on the hardware bfloat16 is trained on: one table of checks (issue 39).

On one GPU (and on this CPU, where the GPU rows are marked "not run"):

* the float32 probe with TensorFlow's TF32 switch on and off (significand
  bits per op, what the records say);
* the README demo's comparison (the demo MLP, one batch of its digits, the
  model as configured against the float32 reference) under mixed_float16
  and mixed_bfloat16 with TF32 on and off: the median gradient rel_l2 over
  the variables against the IEEE reference (the default) and against the
  reference as float32 is there (``ieee_reference=False``), and what the
  reference was;
* a NaN model at the defaults (``jit_compile="auto"``: XLA on a GPU, none on
  a CPU): log(x + 1) of a negative input at step 2 in bfloat16, trained by
  ``model.fit`` with ``GradLensCallback()``; the replay's step and verdict;
* one float32 step (the demo MLP's gradients) computed twice, with and
  without ``tf.config.experimental.enable_op_determinism()`` (each in a
  fresh process: determinism cannot be switched off): the largest relative
  difference between the two.

Run: python -m benchmarks.gpu_check [--tiny] [--json PATH]    (rows go to BENCHMARKS.md by hand, naming the card)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from benchmarks.harness import write_rows  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOT_RUN = "not run (no GPU here)"


def _devices():
    import tensorflow as tf

    out = ["CPU"]
    if tf.config.list_physical_devices("GPU"):
        out.append("GPU")
    return out


def _on(device):
    import tensorflow as tf

    return tf.device("/%s:0" % device)


def _tf32(enabled):
    import tensorflow as tf

    tf.config.experimental.enable_tensor_float_32_execution(enabled)


def probe_rows(devices):
    from tb_gradlens import records
    from tb_gradlens.compare import float32_probe

    rows = []
    for tf32 in (True, False):
        for device in ("CPU", "GPU"):
            setting = "TF32 switch %s" % ("on" if tf32 else "off")
            if device not in devices:
                rows.append(("float32 probe", setting, device, NOT_RUN))
                continue
            _tf32(tf32)
            float32_probe.forget()
            found = float32_probe.probe("/%s:0" % device)
            rows.append(("float32 probe", setting, device, "%s; per op %s" % (
                records.measured_text(found), ", ".join("%s %d" % kv for kv in found["ops"].items()))))
    _tf32(True)
    return rows


def _demo_divergence(policy, device, ieee, batch):
    import keras
    import tensorflow as tf

    from tb_gradlens import compare
    from tb_gradlens import demo
    from tb_gradlens import records

    x, y = demo.load_digits_784()
    keras.utils.set_random_seed(0)
    model = demo.build_mlp(policy)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    with _on(device):
        result = compare.compare_keras(model, tf.constant(x[:batch]), tf.constant(y[:batch]), reference="float32",
                                       activations=False, stable=False, ieee_reference=ieee)
    rel = np.asarray(result.gradient_divergence)[:, 0]
    return float(np.median(rel)), records.precision_text(result.reference_extras.get("precision"))


def demo_rows(devices, batch):
    from tb_gradlens.compare import float32_probe

    rows = []
    for policy in ("mixed_float16", "mixed_bfloat16"):
        for tf32 in (True, False):
            for device in ("CPU", "GPU"):
                setting = "%s, TF32 switch %s" % (policy, "on" if tf32 else "off")
                if device not in devices:
                    rows.append(("demo comparison", setting, device, NOT_RUN))
                    continue
                _tf32(tf32)
                float32_probe.forget()
                ieee, said = _demo_divergence(policy, device, True, batch)
                plain, plain_said = _demo_divergence(policy, device, False, batch)
                rows.append(("demo comparison", setting, device,
                             "median gradient rel_l2 %.4g against the IEEE reference (%s); %.4g (%.2fx) against "
                             "the reference as float32 is there (%s)" % (ieee, said, plain, plain / ieee, plain_said)))
    _tf32(True)
    return rows


def nan_rows(devices, batch):
    import keras

    from evaluation import real_models
    from tests.support.readback import multiplexer_provider
    from tb_gradlens.analysis import replays
    from tb_gradlens.serving import reading
    from tb_gradlens.keras import GradLensCallback

    x, y = real_models.digits(6 * batch, np.random.default_rng(0))
    x = x.copy()
    x[2 * batch + 1] = -5.0
    rows = []
    for device in ("CPU", "GPU"):
        if device not in devices:
            rows.append(("NaN model, defaults", "jit_compile='auto'", device, NOT_RUN))
            continue
        logdir = tempfile.mkdtemp(prefix="gradlens_gpu_check_")
        with _on(device):
            model = real_models.log_input_mlp("mixed_bfloat16")
            model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
            model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False,
                      callbacks=[GradLensCallback(os.path.join(logdir, "run"))])
        found = replays.run_replays(reading.Source(multiplexer_provider(logdir)), "run")
        rows.append(("NaN model, defaults", "jit_compile='auto' -> %s" % bool(model.jit_compile), device,
                     "; ".join("replayed step %d: %s (%s)" % (r["step"], r["text"], r["layer"]) for r in found)
                     or "nothing replayed"))
    return rows


def twice(device, deterministic, batch):
    """In a fresh process: the largest relative difference between two float32 gradient computations."""
    import keras
    import tensorflow as tf

    from tb_gradlens import demo

    if deterministic:
        tf.config.experimental.enable_op_determinism()
    x, y = demo.load_digits_784()
    keras.utils.set_random_seed(0)
    model = demo.build_mlp("float32")
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    loss_fn = keras.losses.SparseCategoricalCrossentropy()

    @tf.function
    def grads(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        return tape.gradient(loss, model.trainable_variables)

    with _on(device):
        xb, yb = tf.constant(x[:batch]), tf.constant(y[:batch])
        first, second = grads(xb, yb), grads(xb, yb)
    worst = max(float(np.max(np.abs(a.numpy() - b.numpy()) / np.maximum(np.abs(a.numpy()), 1e-30)))
                for a, b in zip(first, second))
    print(json.dumps({"worst": worst}))


def twice_rows(devices, batch):
    rows = []
    for deterministic in (False, True):
        for device in ("CPU", "GPU"):
            setting = "op determinism %s" % ("on" if deterministic else "off")
            if device not in devices:
                rows.append(("float32 step twice", setting, device, NOT_RUN))
                continue
            done = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--twice", device,
                                   str(int(deterministic)), "--batch", str(batch)],
                                  capture_output=True, text=True, timeout=600, cwd=ROOT)
            if done.returncode:
                rows.append(("float32 step twice", setting, device, "failed: %s" % done.stderr.strip()[-200:]))
                continue
            worst = json.loads(done.stdout.strip().splitlines()[-1])["worst"]
            rows.append(("float32 step twice", setting, device,
                         "largest relative difference of a gradient element %.3g%s"
                         % (worst, " (repeatable)" if worst == 0 else "")))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="a small batch (the test suite)")
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--json", help="also write the results here: a row per check")
    parser.add_argument("--twice", nargs=2, metavar=("DEVICE", "DETERMINISTIC"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    batch = args.batch or (16 if args.tiny else 64)
    if args.twice:
        twice(args.twice[0], bool(int(args.twice[1])), batch)
        return 0
    devices = _devices()
    rows = probe_rows(devices) + demo_rows(devices, batch) + nan_rows(devices, 8) + twice_rows(devices, batch)
    print("devices: %s" % ", ".join(devices))
    print("\n| check | setting | device | result |")
    print("|---|---|---|---|")
    for row in rows:
        print("| %s |" % " | ".join(row))
    write_rows(args.json, [dict(zip(("check", "setting", "device", "result"), row), devices=devices) for row in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main())

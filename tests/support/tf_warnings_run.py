"""Train a few zoo models with the lens, as a user would, for
``test_tf_warnings.py`` (run in a fresh process: AutoGraph and TensorFlow
say most things once per process).

``python tests/support/tf_warnings_run.py LOGDIR`` (the repository root on PYTHONPATH): the Transformer (Dropout, XLA
off and on) and an LSTM under ``model.fit`` with ``GradLensCallback``
logging and comparing at every step, and ``tb_gradlens.compare.compare_keras``
inside ``tf.function`` on an LSTM and a GRU.  ``--control`` runs only a
``tf.function`` AutoGraph cannot convert (two lambdas on one line), to
show the test sees TensorFlow's plea when it is printed.
"""

import os
import sys

import numpy as np


def _fit(logdir):
    from evaluation import real_models
    from tb_gradlens.keras import GradLensCallback

    for name, jit in (("transformer", False), ("transformer", True), ("lstm", False)):
        model = real_models.build_compiled(name, "mixed_bfloat16", jit_compile=jit)
        x, y = real_models.ZOO[name].data(16, np.random.default_rng(0))
        lens = GradLensCallback(os.path.join(logdir, "%s_%s" % (name, jit)), gradient_every=1, update_every=1, compare_every=1)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[lens])


def _compare_in_function():
    import tensorflow as tf

    from evaluation import real_models
    from tb_gradlens.compare import compare_keras

    for name in ("lstm", "gru"):
        model = real_models.build_compiled(name, "mixed_bfloat16")
        x, y = real_models.ZOO[name].data(8, np.random.default_rng(0))
        model(x)

        @tf.function
        def step(x, y, model=model):
            return compare_keras(model, x, y, reference="float32").gradient_divergence

        step(x, y)


def _control():
    import tensorflow as tf

    twice, thrice = (lambda x: x * 2), (lambda x: x * 3)  # two lambdas on a line: AutoGraph cannot tell them apart
    tf.function(twice)(tf.ones([2]))


def main(argv):
    logdir = argv[1]
    if "--control" in argv:
        _control()
    else:
        _fit(logdir)
        _compare_in_function()
    print("tf_warnings_run: done")


if __name__ == "__main__":
    main(sys.argv)

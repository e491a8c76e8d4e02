"""A custom loop's comparison is about the loop's own step (issue 27.2).

When the loop hands over the gradients it applies, they are the candidate;
where the lens recomputes, it recomputes as the loop runs (eager for an
eager loop), and the record says which.  Every divergence is checked
against float64 NumPy on the gradients the loop applied and a float32
reference computed eagerly, as the loop computes.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from evaluation import real_models
from tests.support import twin_step
from tests.support.divergence_reference import np_divergence
from tests.support.divergence_reference import records_of_kind
from tests.support.readback import read_records
from tb_gradlens import metadata
from tb_gradlens.keras import GradLens

STEPS = 6


def _model(policy, seed=0):
    model = real_models.mlp(policy, seed=seed)
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE)
    return model


def _grads(model, x, y):
    with tf.GradientTape() as tape:
        loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True))
    return loss, tape.gradient(loss, model.trainable_variables)


def _eager_loop(tmp_path, call):
    """The README MLP in mixed_bfloat16 trained by an eager loop that logs
    with ``call(lens, model, x, y, grads, step)``; returns the divergence
    records and, per step, (applied gradients, eager float32 gradients)."""
    model, twin = _model("mixed_bfloat16"), _model("float32")
    lens = GradLens(str(tmp_path / "run"), gradient_every=1, compare_every=1)
    optimizer = keras.optimizers.Adam(1e-3)
    rng = np.random.default_rng(0)
    seen = []
    for step in range(STEPS):
        x, y = (tf.constant(a) for a in real_models.digits(16, rng))
        _, grads = _grads(model, x, y)
        twin.set_weights(model.get_weights())
        _, reference = _grads(twin, x, y)
        call(lens, model, x, y, grads, step)
        seen.append(([g.numpy() for g in grads], [r.numpy() for r in reference]))
        optimizer.apply(grads, model.trainable_variables)
    lens.flush()
    (record, data), = records_of_kind(read_records(str(tmp_path)), "run", metadata.DIVERGENCE).values()
    return record, data, seen


def _assert_divergence_of(record, data, seen):
    assert [d.step for d in data] == list(range(STEPS))
    for d, (applied, reference) in zip(data, seen):
        got = d.numpy[:, metadata.DIVERGENCE_COLUMNS.index("rel_l2")]
        want = [np_divergence(c, r, "bfloat16")[0] for c, r in zip(applied, reference)]
        np.testing.assert_allclose(got, want, rtol=2e-6, err_msg="step %d" % d.step)


def test_eager_loop_compares_the_gradients_it_logged(tmp_path):
    """The README loop: log_gradients then compare_keras at the same step."""
    def call(lens, model, x, y, grads, step):
        lens.log_gradients(grads, model.trainable_variables, step)
        lens.compare_keras(model, x, y, step)

    record, data, seen = _eager_loop(tmp_path, call)
    _assert_divergence_of(record, data, seen)
    assert record.extras["candidate"]["gradients"] == "applied"
    assert record.extras["candidate"]["execution"] == "eager"
    assert record.extras["reference"]["execution"] == "eager"


def test_eager_loop_compares_the_gradients_it_hands_over(tmp_path):
    def call(lens, model, x, y, grads, step):
        lens.compare_keras(model, x, y, step, gradients=grads)

    record, data, seen = _eager_loop(tmp_path, call)
    _assert_divergence_of(record, data, seen)
    assert record.extras["candidate"]["gradients"] == "applied"


def test_eager_loop_without_its_gradients_is_recomputed_eagerly(tmp_path):
    """Without the loop's gradients the candidate is recomputed, eagerly as
    the loop runs: the same numbers as the loop's own eager step."""
    def call(lens, model, x, y, grads, step):
        lens.compare_keras(model, x, y, step)

    record, data, seen = _eager_loop(tmp_path, call)
    _assert_divergence_of(record, data, seen)
    assert record.extras["candidate"]["gradients"] == "recomputed"
    assert record.extras["candidate"]["execution"] == "eager"


def test_dropout_loop_hands_over_its_seeds_and_gradients(tmp_path):
    """A model that draws dropout masks: with the seed states read before
    the step, the reference draws the step's masks and the loop's
    gradients are the candidate (checked against twins that share the
    mask, ``twin_step``)."""
    name = "subclassed"
    model = real_models.build_compiled(name, "mixed_bfloat16")
    rng = np.random.default_rng(1)
    x, y = (tf.constant(a) for a in real_models.ZOO[name].data(8, rng))
    model(x)
    before = twin_step.weights_of(model)
    lens = GradLens(str(tmp_path / "run"), gradient_every=1, compare_every=1)
    seeds = lens.seed_states(model)
    _, grads = _grads(model, x, y)  # the loop's step: it draws its masks
    lens.compare_keras(model, x, y, 0, gradients=grads, seeds=seeds)
    lens.flush()

    draws, build, loss = twin_step.SharedDraws(), real_models.ZOO[name].build, real_models.ZOO[name].loss
    candidate = twin_step.build_twin(build, "mixed_bfloat16", before, loss, x=x)
    _, cand = twin_step.twin_step(candidate, x, y, "eager", draws=draws)
    assert draws.draws, "no dropout mask drawn"
    for c, g in zip(cand, grads):
        np.testing.assert_array_equal(c, g.numpy())  # the twin is the loop's step
    reference = twin_step.build_twin(build, "float32", before, loss, x=x)
    _, ref = twin_step.twin_step(reference, x, y, "eager", draws=draws)
    (record, data), = records_of_kind(read_records(str(tmp_path)), "run", metadata.DIVERGENCE).values()
    want = [np_divergence(g.numpy(), r, "bfloat16")[0] for g, r in zip(grads, ref)]
    np.testing.assert_allclose(data[0].numpy[:, 0], want, rtol=2e-6)
    assert record.extras["candidate"]["gradients"] == "applied"


def test_traced_loop_hands_over_its_gradients(tmp_path):
    """Inside tf.function the passes run traced, as the step does, and the
    loop's gradients are still the candidate."""
    model, twin = _model("mixed_bfloat16"), _model("float32")
    lens = GradLens(str(tmp_path / "run"), gradient_every=1, compare_every=1)
    rng = np.random.default_rng(2)
    x, y = (tf.constant(a) for a in real_models.digits(16, rng))

    @tf.function
    def step(x, y, s):
        _, grads = _grads(model, x, y)
        lens.compare_keras(model, x, y, s, gradients=grads)
        return grads

    @tf.function
    def reference_step(x, y):
        return _grads(twin, x, y)[1]

    twin.set_weights(model.get_weights())
    grads = step(x, y, tf.constant(0, tf.int64))
    reference = reference_step(x, y)
    lens.flush()
    (record, data), = records_of_kind(read_records(str(tmp_path)), "run", metadata.DIVERGENCE).values()
    want = [np_divergence(c.numpy(), r.numpy(), "bfloat16")[0] for c, r in zip(grads, reference)]
    np.testing.assert_allclose(data[0].numpy[:, 0], want, rtol=2e-6)
    assert record.extras["candidate"]["gradients"] == "applied"
    assert record.extras["candidate"]["execution"] == "graph"


def test_gradients_of_another_candidate_are_refused():
    model = _model("mixed_bfloat16")
    lens = GradLens(writer=tf.summary.create_noop_writer(), compare_every=1)
    with pytest.raises(ValueError, match="model as configured"):
        lens.compare_keras(model, tf.zeros([2, 784]), tf.zeros([2], tf.int32), 0, candidate="bfloat16",
                           gradients=[None] * len(model.trainable_variables))

"""Nothing the lens adds inside a training step may stop it (issue 27.1).

Every check the lens makes while a step runs either records a finding
about the user's model (an embedding id past its table: the
``gradient_indices`` record and the ``index_out_of_range`` alert) or
reports a failure of its own through the failure policy (a comparison
pair that differs in shape only when the step runs, a compiled kernel out
of memory: NaN rows and a ``GradLensWarning``; strict mode raises), never
an assertion that raises in the step.  One test per kind of check, under
XLA and without.
"""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from evaluation import real_models
from tests.support import twin_step
from tests.support.readback import read_records
from tests.support.readback import source_of
from tests.support.gradient_reference import assert_stats_match
from tests.support.gradient_reference import reference_statistics
from tb_gradlens import analysis
from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import safety
from tb_gradlens.keras import GradLens
from tb_gradlens.keras import GradLensCallback
from tb_gradlens.numerics import library_calls

VOCAB, SEQ = 2000, 8


pytestmark = [pytest.mark.usefixtures("fresh_safety"), pytest.mark.slow]  # conftest.py; trains Keras models


def bfloat16_round(x):
    """float32 -> bfloat16 -> float32 in NumPy (round to nearest even on the bits)."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def _token_batch(rng, n=16):
    """Float token ids (keras-io's float Input) with 1999 in it: 2000 in bfloat16."""
    ids = rng.integers(0, VOCAB, (n, SEQ)).astype(np.float32)
    ids[0, :3] = [1999, 1998, 1997]
    return ids, rng.integers(0, 2, n).astype(np.int32)


def _keras_io_transformer():
    model = real_models.transformer_classifier("mixed_bfloat16", vocab=VOCAB, seq=SEQ, d_model=16, ff=16,
                                               dropout=0.0, input_dtype="float32")
    model.compile(optimizer="adam", loss=real_models.SPARSE_CE, jit_compile=True)
    return model


def _state(model):
    return [np.array(v.numpy()) for v in model.variables + model.optimizer.variables]


def _table_gradient_under_xla(weights, x, y):
    """The token table's gradient of the step, computed under XLA by an
    independent twin: (values, indices)."""
    twin = twin_step.build_twin(lambda p: real_models.transformer_classifier(
        p, vocab=VOCAB, seq=SEQ, d_model=16, ff=16, dropout=0.0, input_dtype="float32"),
        "mixed_bfloat16", weights, real_models.SPARSE_CE)
    (table,) = [v for v in twin.trainable_variables if "token_emb" in v.path]

    @tf.function(jit_compile=True)
    def step(x, y):
        with keras.StatelessScope(), tf.GradientTape() as tape:
            loss = twin.compute_loss(x=x, y=y, y_pred=twin(x, training=True))
        grad = tape.gradient(loss, table)
        return grad.values, grad.indices

    values, indices = step(tf.constant(x), tf.constant(y))
    return values.numpy(), indices.numpy()


def test_xla_keras_io_transformer_with_a_float_id_past_the_table_trains_as_without_the_lens(tmp_path):
    """The issue's crash: a float Input feeding TokenAndPositionEmbedding
    under mixed_bfloat16 and jit_compile=True rounds id 1999 to 2000, one
    past a 2000-row table.  XLA clamps the lookup and fit trains; with the
    lens it trains bit-identically, records the finding and alerts."""
    rng = np.random.default_rng(0)
    x, y = _token_batch(rng)
    plain, lensed = _keras_io_transformer(), _keras_io_transformer()
    lensed(np.zeros((1, SEQ), np.float32)), plain(np.zeros((1, SEQ), np.float32))  # (eager: no id past the table)
    weights = twin_step.weights_of(lensed)
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, compare_every=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", safety.GradLensWarning)  # nothing failed
        got = lensed.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    want = plain.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert got.history["loss"] == want.history["loss"]
    for a, b in zip(_state(lensed), _state(plain)):
        np.testing.assert_array_equal(a, b)

    records = read_records(str(tmp_path))["run"]
    (indices,) = [(r, d) for r, d in records.values() if r.kind == metadata.GRADIENT_INDICES]
    record, data = indices
    assert record.rows == ("embedding/token_emb/embeddings", "embedding/pos_emb/embeddings")
    assert record.extras["table_rows"] == [VOCAB, SEQ]
    first = x[:8].ravel()
    past = int(np.sum(bfloat16_round(first) >= VOCAB))  # independent: NumPy's bfloat16 rounding
    assert past >= 1
    np.testing.assert_array_equal(data[0].numpy, [[first.size, past, 0], [SEQ, 0, 0]])
    assert [d.step for d in data] == [0, 1]

    (stats,) = [(r, d) for r, d in records.values() if r.kind == metadata.GRAD_STATS]
    row = list(stats[0].rows).index("embedding/token_emb/embeddings")
    values, ids = _table_gradient_under_xla(weights, x[:8], y[:8])
    dense = np.zeros((VOCAB, 16), np.float32)
    keep = ids < VOCAB  # the rows the applied gradient holds: XLA drops the rest
    np.add.at(dense, ids[keep], values[keep].astype(np.float32))
    want_stats = reference_statistics(dense)
    got_stats = stats[1][0].numpy[row]
    count = metadata.GRAD_STATS_COLUMNS.index("count")
    zeros = metadata.GRAD_STATS_COLUMNS.index("zero_fraction")
    assert got_stats[count] == want_stats[count]
    assert got_stats[zeros] == np.float32(want_stats[zeros])
    np.testing.assert_allclose(got_stats[0], want_stats[0], rtol=1e-3)  # l2 (XLA fuses twin and probe alike)

    alerts, problems = analysis.run_alerts(source_of(str(tmp_path)))
    assert problems == []
    (alert,) = [a for a in alerts if a.code == analysis.INDEX_OUT_OF_RANGE]
    assert alert.severity == "error" and alert.step_first == 0
    assert alert.variables == ["embedding/token_emb/embeddings"]
    assert "2000 rows" in alert.explanation and "float" in alert.explanation
    assert alert.view["name"] == metadata.GRAD_STATS


def _xla_table_step(table, ids, upstream):
    """A loop's XLA-compiled step on a bfloat16-rounded id lookup: the
    gradient of the table (IndexedSlices naming ids past the table)."""
    @tf.function(jit_compile=True)
    def step():
        with tf.GradientTape() as tape:
            rows = tf.gather(table, tf.cast(tf.cast(ids, tf.bfloat16), tf.int32))
            loss = tf.reduce_sum(rows * upstream)
        grad = tape.gradient(loss, table)
        return grad.values, grad.indices

    values, indices = step()
    return tf.IndexedSlices(values, indices, tf.constant(table.shape, tf.int64))


@pytest.mark.parametrize("mode", ["eager", "graph"])
def test_custom_loop_logs_a_gradient_past_its_table_without_stopping(tmp_path, mode):
    """Without XLA around the lens: a loop whose XLA step returns such a
    gradient logs it eagerly or in tf.function, as the gradient applied
    (rows past the table dropped), with the index counts recorded; the
    comparison of two such gradients never raises either."""
    table = tf.Variable(np.random.default_rng(1).normal(size=(VOCAB, 4)).astype(np.float32), name="table")
    ids = np.array([[1999.0, 3.0, 1999.0], [7.0, 1998.0, 0.0]], np.float32)
    upstream = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    grad = _xla_table_step(table, ids, upstream)
    lens = GradLens(str(tmp_path / "run"), gradient_every=1)

    def log(step):
        return lens.log_gradients([grad], [table], step)

    with warnings.catch_warnings():
        warnings.simplefilter("error", safety.GradLensWarning)
        if mode == "graph":
            tf.function(log)(tf.constant(0, tf.int64))
        else:
            log(0)
        metrics = numerics.divergence_metrics([grad], [grad])
        metrics_tf = numerics.divergence_metrics([grad], [grad], backend="tf")
    lens.flush()

    rounded = bfloat16_round(ids).astype(np.int64).ravel()
    dense = np.zeros((VOCAB, 4), np.float32)
    keep = rounded < VOCAB
    np.add.at(dense, rounded[keep], upstream.reshape(-1, 4)[keep])
    records = read_records(str(tmp_path))["run"]
    (stats,) = [d for r, d in records.values() if r.kind == metadata.GRAD_STATS]
    assert_stats_match(stats[0].numpy[0], reference_statistics(dense))
    (counts,) = [d for r, d in records.values() if r.kind == metadata.GRADIENT_INDICES]
    np.testing.assert_array_equal(counts[0].numpy[0], [6, int(np.sum(~keep)), 0])
    for m in (metrics, metrics_tf):
        np.testing.assert_array_equal(m.numpy()[0, :3], [0.0, 1.0, 1.0])  # the pair with itself


class _AboveThreshold(keras.layers.Layer):
    """The hidden values above a threshold, as a flat vector: its size
    depends on the values (tf.boolean_mask), so a bfloat16 pass and its
    float32 reference can keep a different number of them."""

    def call(self, h):
        return tf.boolean_mask(h, tf.cast(h, tf.float32) > 2.668)


class _ValueSizedModel(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        third = keras.initializers.Constant(1.0 / 3.0)  # 8 x 1/3: 2.6667 in float32, 2.6719 in bfloat16
        self.hidden = keras.layers.Dense(4, kernel_initializer=third, name="hidden")
        self.above = _AboveThreshold(name="above")
        self.head = keras.layers.Dense(3, name="head")
        self.softmax = keras.layers.Activation("softmax", dtype="float32", name="probs")

    def call(self, x):
        h = self.hidden(x)
        kept = self.above(h)
        shift = keras.ops.cast(keras.ops.sum(kept), h.dtype) * keras.ops.cast(1e-3, h.dtype)
        return self.softmax(self.head(h + shift))


def _value_sized_model(policy):
    keras.utils.set_random_seed(0)
    with real_models.global_policy(policy):
        model = _ValueSizedModel(name="value_sized")
    model.compile(optimizer="sgd", loss=real_models.SPARSE_CE)
    return model


def test_a_layer_output_sized_by_its_values_is_reported_not_raised(tmp_path):
    """Without XLA: a layer whose output size differs between the bfloat16
    step and its float32 reference when the step runs.  Its activation row
    is NaN, the failure is one GradLensWarning, training is as without the
    lens; in strict mode the step raises, as strict mode asks.  (Under XLA
    every shape is static: such a pair is refused when traced, through the
    same policy, before a step runs.)"""
    x, y = np.ones((8, 8), np.float32), np.zeros(8, np.int32)
    plain, lensed = _value_sized_model("mixed_bfloat16"), _value_sized_model("mixed_bfloat16")
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, compare_every=1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = lensed.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False, callbacks=[callback])
    want = plain.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False)
    assert got.history["loss"] == want.history["loss"]
    for a, b in zip(_state(lensed), _state(plain)):
        np.testing.assert_array_equal(a, b)
    failures = [str(w.message) for w in caught if issubclass(w.category, safety.GradLensWarning)]
    assert len(failures) == 1 and "differ in shape when the step ran" in failures[0], failures
    records = read_records(str(tmp_path))["run"]
    (act,) = [(r, d) for r, d in records.values() if r.kind == metadata.ACTIVATION_DIVERGENCE]
    rows = list(act[0].rows)
    above = rows.index("value_sized/above")
    assert [d.step for d in act[1]] == [0, 1]
    first, second = (d.numpy for d in act[1])
    assert np.isnan(first[above]).all()  # 32 values above it in bfloat16, none in float32
    assert np.isfinite(first[rows.index("value_sized/hidden"), 0])
    # after the update both keep as many: compared again (a layer output has no half-batch column)
    assert np.isfinite(second[above][: len(metadata.DIVERGENCE_METRICS) + 1]).all()

    strict = _value_sized_model("mixed_bfloat16")
    with safety.strict(), pytest.raises(tf.errors.OpError, match="differ in shape"):
        strict.fit(x, y, batch_size=4, epochs=1, verbose=0,
                   callbacks=[GradLensCallback(str(tmp_path / "strict"), gradient_every=0, compare_every=1)])


@pytest.mark.parametrize("jit", [False, True])
def test_sparse_pairs_of_different_tables_are_reported_not_raised(jit):
    """Two IndexedSlices whose dense shapes differ only when the step runs:
    a NaN row and one warning, never an assertion.  Inside XLA every shape
    is a constant of the compilation: such a pair is a usage error refused
    when the function compiles, before it runs (the lens itself never
    compares inside XLA: its probe's outputs are compared outside)."""
    values = tf.ones([2, 4])
    a = tf.IndexedSlices(values, tf.constant([0, 1], tf.int64), tf.constant([10, 4], tf.int64))

    def pair(rows):
        b = tf.IndexedSlices(values, tf.constant([0, 1], tf.int64), tf.stack([rows, tf.constant(4, tf.int64)]))
        return numerics.divergence_metrics([a, a], [b, a])

    if jit:
        with pytest.raises((ValueError, tf.errors.InvalidArgumentError)):
            tf.function(pair, jit_compile=True)(tf.constant(12, tf.int64))
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = tf.function(pair)(tf.constant(12, tf.int64)).numpy()
    assert np.isnan(out[0]).all() and out[1, 0] == 0.0
    assert [w for w in caught if issubclass(w.category, safety.GradLensWarning)]


def test_a_kernel_out_of_memory_leaves_nan_rows_and_is_reported():
    """The compiled kernel's C calls report failure by their result: the
    rows become NaN and the failure goes to the policy (strict: raised),
    in eager calls and inside tf.numpy_function alike."""
    stats = np.zeros((2, 3), np.float32)
    with pytest.warns(safety.GradLensWarning, match="out of memory"):
        library_calls._check(-1, "gradient statistics", stats)
    assert np.isnan(stats).all()
    with safety.strict(), pytest.raises(MemoryError):
        library_calls._check(-1, "gradient statistics", stats)
    library_calls._check(0, "gradient statistics", np.zeros(2))  # success: nothing said


def _graph_ops(function):
    """Op types of a traced function and of every function in its library."""
    graph_def = function.graph.as_graph_def()
    ops = {node.op for node in graph_def.node}
    for fn in graph_def.library.function:
        ops.update(node.op for node in fn.node_def)
    return ops


RAISING_OPS = {"Assert", "EnsureShape", "CheckNumerics", "CheckNumericsV2"}


def _traced_functions(train_function, depth=3):
    """The tf.functions a Keras train function closes over (its concrete traces)."""
    found, todo = [], [(train_function, 0)]
    while todo:
        fn, level = todo.pop()
        if hasattr(fn, "_list_all_concrete_functions"):
            found.extend(fn._list_all_concrete_functions())
            continue
        if level < depth:
            for cell in getattr(fn, "__closure__", None) or ():
                try:
                    value = cell.cell_contents
                except ValueError:
                    continue
                if callable(value):
                    todo.append((value, level + 1))
    return found


@pytest.mark.parametrize("jit", [False, True])
def test_no_op_that_raises_is_added_to_a_logged_step(tmp_path, jit):
    """The lens's traced train function (gradient statistics, updates and a
    comparison, on a model with an embedding) holds no assertion or shape
    or numerics check Keras' own step does not hold."""
    model = real_models.build_compiled("transformer", "mixed_bfloat16", jit_compile=jit)
    x, y = real_models.ZOO["transformer"].data(8, np.random.default_rng(0))
    callback = GradLensCallback(str(tmp_path / "run"), gradient_every=1, update_every=1, compare_every=1)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[callback])
    lens_ops = set()
    for function in callback._session._traced.values():
        for concrete in _traced_functions(function):
            lens_ops |= _graph_ops(concrete)
    model.make_train_function(force=True)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    plain_ops = set()
    for concrete in _traced_functions(model.train_function):
        plain_ops |= _graph_ops(concrete)
    assert "GradlensGradientStatistics" in lens_ops or "PyFunc" in lens_ops or "EagerPyFunc" in lens_ops \
        or "Unique" in lens_ops  # the lens's pass is in there
    assert (lens_ops - plain_ops) & RAISING_OPS == set()

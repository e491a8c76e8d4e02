"""What the plugin keeps between requests answers as a fresh reader would (issue 43).

Each test reads through one long-lived ``Cache`` while the logdir changes
under it, and compares the answer with that of a reader built afresh on the
same logdir.
"""

import numpy as np
import tensorflow as tf
from tensorboard.backend.event_processing import data_provider as mux_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer

from tb_gradlens import analysis
from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.serving import reading
from tb_gradlens.writing import summary_ops

REFERENCE = records.variant("float32", "float32", "float32", "float32")
CANDIDATE = records.variant("mixed_bfloat16", "mixed_bfloat16", "bfloat16", "float32")
LAYERS = ["dense", "dense_1", "softmax"]


def loaded(logdir):
    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={metadata.PLUGIN_NAME: 0})
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return multiplexer, mux_provider.MultiplexerDataProvider(multiplexer, logdir)


def _loss_row():
    # reference, candidate, abs_error, rel_error, stable_rel_error, half_batch_rel_error (not measured:
    # the loss is then judged by the rounding scale the model output gives it)
    return np.array([[2.0, 2.0 * (1 + 3e-3), 6e-3, 3e-3, 1e-5, np.nan]], np.float32)


def _activation_rows():
    rows = np.zeros((len(LAYERS), len(metadata.DIVERGENCE_COLUMNS)), np.float32)
    rows[:, 0] = [2e-2, 3e-2, 4e-2]  # rel_l2
    rows[:, metadata.DIVERGENCE_COLUMNS.index(metadata.STABLE_REL_L2)] = [1e-2, 1.5e-2, 2e-2]  # the output's: 2e-2, above a rounding
    rows[:, metadata.DIVERGENCE_COLUMNS.index(metadata.HALF_BATCH_REL_L2)] = np.nan
    return rows


def test_a_loss_limit_read_before_its_steps_activation_record_is_judged_again_after_it(tmp_path):
    """The callback writes a comparison step's loss record, then its layer outputs'.  A loss limit
    read in between (measured without the model output's stable divergence) must not be kept
    once the activation record of the same step arrives: it is keyed by both records' versions."""
    logdir = str(tmp_path)
    extras = records.comparison_extras(REFERENCE, CANDIDATE)
    loss_record = metadata.RecordMetadata(metadata.LOSS_COMPARISON, ["loss"], metadata.LOSS_COMPARISON_COLUMNS,
                                          extras)
    act_record = metadata.RecordMetadata(metadata.ACTIVATION_DIVERGENCE, LAYERS, metadata.DIVERGENCE_COLUMNS,
                                         extras)
    writer = tf.summary.create_file_writer(str(tmp_path / "bf16"))
    with writer.as_default():
        loss_tag = summary_ops.write_record("model_vs_float32", loss_record, tf.constant(_loss_row()), 100)
    writer.flush()
    multiplexer, provider = loaded(logdir)
    cache = reading.Cache()
    before = analysis.limits(reading.Source(provider, cache=cache), "bf16", loss_tag)
    worst_before = analysis.worst_divergence(reading.Source(provider, cache=cache), "bf16")
    with writer.as_default():
        summary_ops.write_record("model_vs_float32", act_record, tf.constant(_activation_rows()), 100)
    writer.close()
    multiplexer.Reload()

    kept = analysis.limits(reading.Source(provider, cache=cache), "bf16", loss_tag)
    fresh = analysis.limits(reading.Source(loaded(logdir)[1]), "bf16", loss_tag)
    assert fresh["limits"] != before["limits"]  # the activation record changes the loss's limit
    assert kept == fresh
    worst = analysis.worst_divergence(reading.Source(provider, cache=cache), "bf16")
    assert worst == analysis.worst_divergence(reading.Source(loaded(logdir)[1]), "bf16") != worst_before
    alerts = analysis.run_alerts(reading.Source(provider, cache=cache))
    assert alerts == analysis.run_alerts(reading.Source(loaded(logdir)[1]))

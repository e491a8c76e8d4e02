"""Public summary API: ``tb_gradlens.summary.gradients(...)`` and friends.

Like ``tensorboard.summary``, this re-exports the TF 2 writers of
``summary_ops``, and ``create_file_writer`` (``event_writer``): a
``tf.summary`` file writer that warns when writing fails and starts a new
event file when the disk frees.
"""

from tb_gradlens.writing.event_writer import create_file_writer  # noqa: F401
from tb_gradlens.writing.summary_ops import advice  # noqa: F401
from tb_gradlens.writing.summary_ops import divergence  # noqa: F401
from tb_gradlens.writing.summary_ops import dtypes  # noqa: F401
from tb_gradlens.writing.summary_ops import gradients  # noqa: F401
from tb_gradlens.writing.summary_ops import lens_status  # noqa: F401
from tb_gradlens.writing.summary_ops import loss_comparison  # noqa: F401
from tb_gradlens.writing.summary_ops import replica_divergence  # noqa: F401
from tb_gradlens.writing.summary_ops import update_stats  # noqa: F401

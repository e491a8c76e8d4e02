"""tf.distribute support: who writes, what is described, replica disagreement.

Under ``tf.distribute.MirroredStrategy`` (several devices, one process) and
``MultiWorkerMirroredStrategy`` (several worker processes) the code inside
``strategy.run`` runs once per replica on that replica's share of the
global batch.  tb_gradlens follows three rules there:

* **The applied gradient.**  Statistics describe the gradient the optimizer
  applies: the SUM over replicas of the per-replica gradients (Keras and TF
  optimizers all-reduce with SUM; Keras scales each replica's loss by
  1/replicas, so the sum is the gradient of the global batch).
* **Written once.**  Only the chief process writes (``chief_writer`` gives
  other workers a no-op writer: no event file at all), and within it only
  replica 0 (TensorFlow's summary recording is on for replica 0 only;
  buffers are filled by the first replica, ``is_first_replica``).
* **Collectives outside conditionals.**  An all-reduce inside ``tf.cond``
  fails under these strategies (``merge_call`` in a branch) and a
  collective joined by some replicas only would hang, so reductions run
  unconditionally and only the statistics sit under the step condition.

``replica_divergence`` measures how far each replica's gradient (before the
all-reduce) is from the mean over replicas, as ``divergence`` records.
"""

import os
from typing import Optional
from typing import Union

import tensorflow as tf

from tb_gradlens import metadata
from tb_gradlens import numerics
from tb_gradlens import records
from tb_gradlens.writing import event_writer
from tb_gradlens.writing.cluster import cluster_task, is_chief, is_first_replica, replica_context  # noqa: F401


def chief_writer(log_dir: Union[str, "os.PathLike[str]"],
                 strategy: Optional[tf.distribute.Strategy] = None) -> tf.summary.SummaryWriter:
    """A file writer on ``log_dir`` for the chief (``event_writer.ResilientFileWriter``:
    it survives a disk that fills and frees); a no-op writer elsewhere."""
    if is_chief(strategy):
        return event_writer.create_file_writer(log_dir)
    return tf.summary.create_noop_writer()


def buffer(initial):
    """A non-trainable variable filled inside the step and read outside it.

    ``ON_READ`` with ``ONLY_FIRST_REPLICA``: under a strategy scope each
    replica assigns its own copy without synchronizing and a read outside
    the step returns replica 0's; outside a scope it is a plain variable.
    """
    return tf.Variable(
        initial,
        trainable=False,
        synchronization=tf.VariableSynchronization.ON_READ,
        aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
    )


def _dense(gradient):
    """A dense gradient (an IndexedSlices' rows past its table dropped, never raising)."""
    from tb_gradlens.numerics import sparse

    return sparse.dense(gradient)


def sum_across_replicas(grads):
    """The all-reduced (SUM) gradients, None kept; the input outside ``strategy.run``.

    Every replica must call it (it is a collective): never under ``tf.cond``.
    """
    grads = list(grads)
    context = replica_context()
    if context is None:
        return grads
    grads = [_dense(g) for g in grads]
    present = [i for i, g in enumerate(grads) if g is not None and g.dtype.is_floating]
    if not present:
        return grads
    reduced = context.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in present])
    out = list(grads)
    for i, g in zip(present, reduced):
        out[i] = g
    return out


def replica_divergence(local_grads, reduced_grads, due=True):
    """Every replica's gradient vs the replica mean, gathered on every replica.

    With R replicas, local gradient g_i and the all-reduced sum S (from
    ``sum_across_replicas``), row v of replica i holds
    ``numerics.divergence_metrics(g_i[v], S[v] / R)`` (rel_l2, cosine, ...;
    float64 inside).  Metrics are computed when ``due`` (a bool or boolean
    tensor; zeros otherwise); the all-gather always runs, so call it from
    every replica, never under ``tf.cond``.

    Returns:
      float32 ``[R, V, len(DIVERGENCE_COLUMNS)]`` (the same on every
      replica; no stable-rounding column: NaN), or None outside
      ``strategy.run`` / with one replica.
    """
    context = replica_context()
    if context is None:
        return None
    replicas = context.num_replicas_in_sync
    local = [_dense(g) for g in local_grads]
    mean = [None if g is None else g / tf.cast(replicas, g.dtype) for g in reduced_grads]
    n_columns = len(metadata.DIVERGENCE_COLUMNS)

    def compute():
        return numerics.comparison_values(numerics.divergence_metrics(local, mean))

    if isinstance(due, bool):
        metrics = compute() if due else tf.zeros([len(local), n_columns])
    else:
        metrics = tf.cond(due, compute, lambda: tf.zeros([len(local), n_columns]))
    from tb_gradlens.writing.summary_inputs import with_static_shape

    metrics = with_static_shape(metrics, [len(local), n_columns])
    gathered = context.all_gather(metrics[tf.newaxis], axis=0)
    return with_static_shape(gathered, [replicas, len(local), n_columns])


def replica_devices(strategy=None):
    """The device of each global replica, in replica order (strings)."""
    strategy = strategy or tf.distribute.get_strategy()
    local = list(strategy.extended.worker_devices)
    replicas = strategy.num_replicas_in_sync
    if len(local) >= replicas:
        return local[:replicas]
    _, _, cluster = cluster_task(strategy)
    tasks = [("chief", 0)] if "chief" in cluster else []
    tasks += [("worker", k) for k in range(len(cluster.get("worker", [])))]
    devices = []
    for i in range(replicas):
        worker, d = divmod(i, len(local))
        job, index = tasks[worker] if worker < len(tasks) else ("worker", worker)
        suffix = local[d].split("/device:")[-1]
        devices.append("/job:%s/replica:0/task:%d/device:%s" % (job, index, suffix))
    return devices


def replica_extras(strategy=None, policy="model", jit_compile=False):
    """The ``divergence`` extras of each replica's record (reference: the mean)."""
    strategy = strategy or tf.distribute.get_strategy()
    devices = replica_devices(strategy)
    compute = records.POLICY_COMPUTE_DTYPES.get(policy)
    reference = records.variant(
        "replica mean", policy, compute, device="all %d replicas" % len(devices),
        jit_compile=jit_compile,
    )
    return [
        records.comparison_extras(
            reference,
            records.variant("replica %d" % i, policy, compute, device=device,
                            jit_compile=jit_compile, replica=i),
            numerics.SIGNIFICANCE_FLOOR,
            comparison=records.REPLICA_VS_MEAN,
        )
        for i, device in enumerate(devices)
    ]

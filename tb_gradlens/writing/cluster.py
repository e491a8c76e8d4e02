"""Who writes under tf.distribute: the chief process, and replica 0 within it.

The lowest layer of the writing side: ``event_writer`` (replica 0 flushes)
and ``distribute`` (the chief's writer, replica disagreement) both use it.
"""

import json
import os

import tensorflow as tf


def cluster_task(strategy=None):
    """(task_type, task_id, cluster dict) of this process; (None, None, {}) alone.

    Read from the strategy's cluster resolver, else from ``TF_CONFIG``.
    """
    strategy = strategy or tf.distribute.get_strategy()
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None:
        cluster = resolver.cluster_spec().as_dict()
        if cluster:
            return resolver.task_type, resolver.task_id, cluster
    try:
        config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    except ValueError as error:
        raise ValueError("tb_gradlens: TF_CONFIG is not valid JSON: %s" % error) from None
    task = config.get("task") or {}
    return task.get("type"), task.get("index"), config.get("cluster") or {}


def is_chief(strategy=None):
    """Whether this process writes: the ``chief`` task, else ``worker`` 0.

    A process outside a cluster is its own chief.  Evaluators and
    parameter servers are not.
    """
    task_type, task_id, cluster = cluster_task(strategy)
    if task_type is None or task_type == "chief":
        return True
    if task_type == "worker":
        return "chief" not in cluster and int(task_id or 0) == 0
    return False


def replica_context():
    """The replica context when inside ``strategy.run`` with > 1 replica, else None."""
    if tf.distribute.in_cross_replica_context():
        return None
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return None
    return context


def is_first_replica():
    """Boolean tensor: True on replica 0 (and outside ``strategy.run``)."""
    context = replica_context()
    if context is None:
        return tf.constant(True)
    return tf.equal(tf.cast(context.replica_id_in_sync_group, tf.int32), 0)

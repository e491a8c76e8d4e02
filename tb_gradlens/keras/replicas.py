"""The live tap under ``tf.distribute`` with several replicas.

The statistics describe the all-reduced gradient the optimizer applies:
the optimizer's own all-reduce (``keras_private.all_reduce``) is shadowed,
so they cost no extra communication.  Replica 0 fills the buffers; with
``replica_divergence`` every replica measures its gradient against the
replica mean and the results are all-gathered (outside any condition: a
collective is joined by every replica).  See ``tb_gradlens.writing.distribute``.
"""

import threading

import tensorflow as tf

from tb_gradlens.keras.branches import GRADIENT_KINDS
from tb_gradlens.keras.branches import when
from tb_gradlens.writing import distribute
from tb_gradlens.writing import keras_private
from tb_gradlens.writing import summary_ops


class Replicas:
    """Hooks and buffers of the live tap for several replicas."""

    def __init__(self, tap):
        self.tap = tap
        model = tap.model
        strategy = model.distribute_strategy
        self.replicas = strategy.num_replicas_in_sync
        self.local = threading.local()
        self.var_key = keras_private.var_key(model.optimizer)
        self.keys = {self.var_key(v): k for k, v in enumerate(tap.selected_vars)}
        self.original_all_reduce = None
        self.extras = (distribute.replica_extras(strategy, tap.model_policy, tap.xla)
                       if tap.replica_divergence else None)

    def patch(self, optimizer):
        self.original_all_reduce = keras_private.all_reduce(optimizer)
        if self.original_all_reduce is not None and self.tap.logs_gradients:
            keras_private.shadow_method(optimizer, keras_private.ALL_REDUCE, self.all_reduce)

    def restore(self, optimizer):
        keras_private.unshadow(optimizer, keras_private.ALL_REDUCE)

    def before_update(self, step, chosen):
        """In ``optimizer.apply``, on every replica: the statistics come from
        the optimizer's all-reduce (or, without one, from ours); the weights
        are copied by the caller's logged-step branch."""
        self.local.reduced = chosen
        if self.original_all_reduce is None:
            self.describe(chosen, distribute.sum_across_replicas(chosen), self.tap.step_now())

    def reduced(self):
        """The all-reduced gradients of this replica's step (for update statistics)."""
        return getattr(self.local, "reduced", None)

    def all_reduce(self, grads_and_vars):
        """The optimizer's all-reduce, describing what it returns."""
        local_pairs = list(grads_and_vars)
        reduced_pairs = self.original_all_reduce(local_pairs)
        if distribute.replica_context() is not None:
            step = self.tap.step_now()
            self.describe(self._choose(local_pairs), self._choose(reduced_pairs), step)
        return reduced_pairs

    def _choose(self, pairs):
        chosen = [None] * len(self.tap.selected_vars)
        for g, v in pairs:
            k = self.keys.get(self.var_key(v))
            if k is not None:
                chosen[k] = summary_ops.as_gradient(g)
        return chosen

    def describe(self, local, reduced, step):
        tap = self.tap
        due = tap.gradient_schedule(step)
        self.local.reduced = reduced
        gathered = None
        if tap.replica_divergence:
            gathered = distribute.replica_divergence(local, reduced, due)

        def describe():
            return tap.describe_gradients(step, reduced, gathered, self.extras or ())

        when(tap.status, "gradient statistics", GRADIENT_KINDS,
             tf.logical_and(due, distribute.is_first_replica()), describe, name=tap.status.name)

    def total_loss(self, loss):
        """The step's loss over every replica (Keras scales each replica's
        loss by 1/replicas): a scalar all-reduce, on every step."""
        context = distribute.replica_context()
        if context is None:
            return loss
        return context.all_reduce(tf.distribute.ReduceOp.SUM, loss)

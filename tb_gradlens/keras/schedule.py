"""When the lens logs (``Schedule``), which variables, and which comparisons."""

import tensorflow as tf

from tb_gradlens import compare
from tb_gradlens import patterns
from tb_gradlens.writing import summary_ops

# Defaults from measurement: what each costs is in the README's table and
# docs/benchmarks-history.md (sections 3d-3h and 10).
GRADIENT_EVERY = 20
COMPARE_EVERY = 100
# Update statistics keep a copy of the weights from before the update (the
# optimizer's in-place update then copies them again): every 20 steps also
# when the gradients are logged every step (``update_every``).
UPDATE_EVERY = 20
# Healthy logged steps are flushed together at most this far apart (a call
# with a non-finite step at once): a flush per logged call was most of the
# cost of a logged step on small models (docs/benchmarks-history.md, 10).
FLUSH_SECONDS = 1.0


class Schedule:
    """Steps ``start <= step < stop`` with ``(step - start) % every == 0``.

    ``every`` 0 or None: never.  ``stop`` None: no end.
    """

    def __init__(self, every, start=0, stop=None):
        self.every = int(every or 0)
        self.start = int(start or 0)
        self.stop = None if stop is None else int(stop)

    def __call__(self, step):
        """bool for a Python step; a boolean tensor for a tensor step."""
        if isinstance(step, (int,)) and not isinstance(step, bool):
            return self._python(step)
        if self.every <= 0:
            return tf.constant(False)
        step = tf.cast(step, tf.int64)
        due = tf.logical_and(step >= self.start, (step - self.start) % self.every == 0)
        if self.stop is not None:
            due = tf.logical_and(due, step < self.stop)
        return due

    def _python(self, step):
        if self.every <= 0 or step < self.start:
            return False
        if self.stop is not None and step >= self.stop:
            return False
        return (step - self.start) % self.every == 0

    def any_in(self, first, last):
        """Whether a step in ``[first, last)`` is due (Python ints)."""
        if self.every <= 0:
            return False
        begin = max(first, self.start)
        begin += (self.start - begin) % self.every
        end = last if self.stop is None else min(last, self.stop)
        return begin < end


def update_schedule(gradients, every=None, enabled=True):
    """The steps that log update statistics: steps of the ``gradients``
    schedule (an update is described with the gradient it applied), every
    ``every`` steps.  ``every`` None: the smallest multiple of the gradient
    schedule's ``every`` that is at least ``UPDATE_EVERY``.  ``enabled``
    False, or no gradient steps: never.  ``every`` that is not a multiple of
    the gradient schedule's raises ValueError."""
    if not enabled or gradients.every <= 0:
        return Schedule(0, gradients.start, gradients.stop)
    if every is None:
        every = -(-UPDATE_EVERY // gradients.every) * gradients.every
    every = int(every)
    if every > 0 and every % gradients.every:
        raise ValueError("update_every=%d must be a multiple of gradient_every=%d: update statistics are "
                         "taken on steps that log gradient statistics" % (every, gradients.every))
    return Schedule(every, gradients.start, gradients.stop)


@tf.autograph.experimental.do_not_convert  # plain Python: called from user steps autograph converts
def select(variables, pattern):
    """Indices of the variables whose path matches ``pattern`` (``re.search``
    semantics, bounded time: ``tb_gradlens.patterns``; a refused pattern
    raises ``patterns.PatternError``, a ValueError)."""
    if pattern is None:
        return list(range(len(variables)))
    return patterns.filter_names(pattern, summary_ops.variable_paths(variables))


# Why a model gets no "auto" comparison (said in the run's lens status, the report and the tab).
NO_16_BIT_LAYER = (
    "every layer computes in float32: nothing to compare against (set a 16-bit policy, e.g. "
    "keras.mixed_precision.set_global_policy('mixed_bfloat16'), before building the model; "
    "keras.backend.clear_session() resets the global policy to float32)"
)


def comparison_pairs(model, comparisons):
    """[(reference, candidate)] Variants from the ``comparisons`` argument:
    "auto" is a float32 reference for the model as configured when a layer
    computes in 16 bits."""
    if comparisons == "auto":
        computes = {layer.compute_dtype for layer in compare.model_layers(model)}
        if computes & {"bfloat16", "float16"}:
            return [(compare.Variant("float32"), compare.Variant(None))]
        return []
    pairs = []
    for item in comparisons or []:
        if isinstance(item, (tuple, list)):
            pairs.append((compare.as_variant(item[0]), compare.as_variant(item[1])))
        else:
            pairs.append((compare.as_variant(item), compare.Variant(None)))
    return pairs

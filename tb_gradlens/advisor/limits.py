"""What the advisor cannot attribute, found and said, never guessed.

* several replicas (``tf.distribute``): each replica computes its share of
  the batch; the advisor does not run a distributed round;
* a layer that computes in 16 bits whatever its dtype policy (raw
  TensorFlow ops with a hard-coded ``tf.bfloat16``): found as 16-bit ops
  under the layer's name scope in the traced float32 reference.  Switching
  its policy changes nothing, so its error is not the policy's to fix;
* a unit whose switch changes the structure of the step (other layer
  calls, other output shapes, another number of random draws, a gradient
  that appears or disappears).
"""

from tb_gradlens.compare.graph_dtypes import sixteen_bit_ops


REPLICAS = ("a strategy with %d replicas: each replica computes its share of the batch and the advisor "
            "does not run a distributed round (run tb_gradlens.advise on the model outside the strategy)")
RAW_OPS = ("computes in %s whatever its dtype policy (raw TensorFlow ops: %s): switching the policy "
           "does not change it, so its error is not attributable to the policy; change its code")
STRUCTURE = "switching its policy changes the structure of the step (%s)"


def several_replicas(model):
    """The reason the model is not attributable under a distribution
    strategy with several replicas, or None."""
    replicas = model.distribute_strategy.num_replicas_in_sync
    return REPLICAS % replicas if replicas > 1 else None


def raw_op_reasons(units, graph, model):
    """Per unit, the reason it is not attributable because a layer of it
    computes in 16 bits in the float32 reference (None: attributable)."""
    found = sixteen_bit_ops(graph, model)
    reasons = []
    for unit in units:
        hits = [found[id(layer)] for layer in unit.layers if id(layer) in found]
        if not hits:
            reasons.append(None)
            continue
        ops = [name for _, _, names in hits for name in names]
        shown = ", ".join(ops[:3]) + (" and %d more" % (len(ops) - 3) if len(ops) > 3 else "")
        reasons.append(RAW_OPS % (hits[0][1], shown))
    return reasons, found.get(None)


def structure_change(base, other):
    """Why ``other`` (an Outcome) is not the same step as ``base``, or None."""
    if other.rows != base.rows:
        extra = sorted(set(other.rows) ^ set(base.rows))
        return STRUCTURE % ("other layer calls: %s" % ", ".join(extra[:4]) if extra else "layer calls in another order")
    if other.shapes != base.shapes:
        return STRUCTURE % "other output shapes"
    if [g is None for g in other.gradients] != [g is None for g in base.gradients]:
        return STRUCTURE % "other variables get a gradient"
    return None

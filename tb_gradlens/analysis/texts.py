"""What each alert says: explanations (what was seen, in words) and fixes.

``str.format`` templates filled by ``alerts``; every quantity is named in
words ("the gradients of", "the outputs of the layers", "the training
loss"), never by a record or column name alone.
"""

from tb_gradlens import metadata
from tb_gradlens.analysis import codes

NONE = (
    "The gradient of {vars} is None at every one of {n} logged steps from step {a}: "
    "the loss does not depend on it through the tape, usually because the tensor was "
    "not watched, an op ran outside the GradientTape, a value went through .numpy() "
    "or tf.stop_gradient, or there is no trainable path from it to the loss."
)
NONE_FIX = (
    "Compute the loss from these variables inside the tape with TensorFlow ops only "
    "(no .numpy(), no stop_gradient on the path), or exclude them from the trainable "
    "variables if they are meant to be frozen."
)
ZERO = (
    "The gradient of {vars} is exactly zero for {k} or more consecutive logged steps "
    "(steps {a}-{b}): the variable gets no learning signal, typically dead ReLU units, "
    "a tf.where whose condition is constant, tf.boolean_mask dropping every element, "
    "or a round/cast to integer on the path."
)
ZERO_FIX = (
    "Check the layer's pre-activations: use a smaller learning rate or LeakyReLU/GELU "
    "for dead units, initialize biases near zero, and replace round/cast/boolean_mask "
    "on the gradient path with differentiable operations."
)
NONFINITE = (
    "{what} {vars} first became NaN or infinite at step {a} (non-finite at {m} "
    "logged steps up to step {b}); everything after follows from that step."
)
NONFINITE_FIX = (
    "Look at the ops of these variables at step {a}: guard log/sqrt/division against "
    "zero (tf.math.log(x + eps), tf.math.divide_no_nan), clip gradients, lower the "
    "learning rate, and keep the loss and softmax in float32."
)
NONFINITE_WHAT = {
    metadata.GRAD_STATS: "The gradient of",
    metadata.DIVERGENCE: "In the comparison, the gradient of",
    metadata.ACTIVATION_DIVERGENCE: "In the comparison, the output of",
    metadata.LOSS_COMPARISON: "In the comparison, the training loss",
}

# "{quantity}" of a divergence explanation, by record kind.
QUANTITY = {
    metadata.DIVERGENCE: "the gradients of {vars}",
    metadata.ACTIVATION_DIVERGENCE: "the outputs of the layers {vars}",
    metadata.LOSS_COMPARISON: "the training loss",
}
DIVERGENCE = (
    "Computed in {cand}, {quantity} {differ} from the {ref} computation by more than "
    "rounding explains: {metric} up to {worst:.3g} (step {ws}) against a limit of {limit:.3g} "
    "({basis}), first at step {a}."
)
# Where the damage is born, said after DIVERGENCE: inside a layer, or where
# values cross between layers (the stable-rounding pass, which rounds only
# there, reproduces it).
BORN_INSIDE = (
    " The stable-rounding pass, which rounds only between layers, differs by {stable:.3g} there: the damage is "
    "born inside the computation."
)
BORN_AT_INPUT = (
    " The damage is born where values enter {layer}: the stable-rounding pass, which rounds only between layers, "
    "differs by {stable:.3g} there, {jump:.0f}x what the layers before it carry. Its inputs need more significand "
    "bits than {dtype} holds (a timestamp, a coordinate or an id as a float; a stream with a large common part that "
    "swamps what is added to it)."
)
BORN_BETWEEN = (
    " The stable-rounding pass, which rounds only between layers, differs by {stable:.3g}: the damage is born where "
    "values cross between layers in {dtype}; the first layer output that jumps is where."
)
# A bias gradient far beyond stable rounding: what TensorFlow does with it.
BIAS_SUM = (
    " A bias's gradient is a sum over every position of the layer's output, which TensorFlow accumulates in the "
    "layer's compute dtype ({dtype}); where the positions nearly cancel, the sum keeps few correct digits."
)
BETWEEN_FIX = (
    "Keep the layer where the damage is born, and the layer that feeds it, in float32 (dtype='float32' on the "
    "layer; for a model input, on its first layer), or take the large common part off in float32 before it "
    "(subtract the origin, offset or mean in the data pipeline): {dtype} keeps {bits} significand bits of every "
    "value, so 5000 is held to 32 and a stream of 1000 swamps whatever below 4 is added to it. "
)
BIAS_FIX = (
    "Keep the layer in float32 (dtype='float32'), which sums its bias gradient in float32. "
)
# The precision advisor (README "Precision advisor") finds which layers, verified.
ADVISOR = (
    "To find which layers to keep in float32, and check that it is enough, run the precision "
    "advisor: tb_gradlens.advise(model, (x, y), log_dir=...) or GradLensCallback(..., "
    "advisor=tb_gradlens.Advisor((x, y))); its recommendation is in the Advisor view and in "
    "'tb-gradlens advise LOGDIR'."
)
DIVERGENCE_FIX = {
    codes.BF16_DIVERGENCE: (
        "Keep these layers in float32 (dtype='float32' on the layer), keep the last "
        "activation and the loss in float32, and check for reductions over many elements "
        "or differences of large numbers in bfloat16 (normalization statistics, softmax, "
        "large sums, x + b - b). " + ADVISOR
    ),
    codes.F16_DIVERGENCE: (
        "Use loss scaling (keras.mixed_precision.LossScaleOptimizer), keep these layers "
        "and the loss in float32, or switch to bfloat16. " + ADVISOR
    ),
    codes.F32_F64_MISMATCH: (
        "float32 loses digits here to catastrophic cancellation (subtracting nearly equal "
        "numbers): reformulate (e.g. log-sum-exp, Welford variance, subtract the mean first) "
        "or compute this part in float64."
    ),
    codes.DIVERGENCE: (
        "Compare with a noise-floor run (same precision, another seed or device) before "
        "trusting the difference, and pin the device or disable XLA on these layers to locate it."
    ),
}
FLUSH = (
    "Computed in {cand}, {share:.1%} of the nonzero elements of {vars} in the {ref} "
    "computation become exactly zero (first above {limit:.3g}, the floor or the row's own "
    "relative error, at step {a}): more than rounding can zero, so they underflow or are "
    "swamped by larger terms."
)
FLUSH_FIX = (
    "Scale the values up (loss scaling, a different normalization) or keep these layers in "
    "float32; check for tiny values in the gradient histogram."
)
UNDERFLOW = (
    "Up to {share:.1%} of the gradient elements of {vars} lie within {k} binades of the "
    "smallest normal {dtype} number (2^{e}) from step {a}: values below it are flushed "
    "to zero on this hardware ({zero:.1%} exact zeros at that step)."
)
UNDERFLOW_FIX = (
    "Do not scale the loss down; if you scale it, scale it up (loss scaling) so gradients "
    "stay well inside the normal range, and check normalizations that divide by large numbers."
)
LOST = (
    "{share:.0%} of the elements of {vars} did not move at a step although their gradient "
    "was nonzero (first above {thr:.0%} at step {a}): these weights are stored in {dtype}, "
    "whose spacing near the weight is larger than twice the update, so the update is lost."
)
LOST_UNKNOWN = (
    "Up to {share:.0%} of the elements of {vars} would not move at a step if the weights "
    "were stored in bfloat16 (above {thr:.0%} from step {a}); the record does not say how "
    "they are stored (a tb_gradlens before the record contract): with float32 master "
    "weights nothing is lost."
)
LOST_FIX = (
    "Keep float32 master weights (Keras' mixed_bfloat16 policy does), or raise the "
    "learning rate / use stochastic rounding if weights must be bfloat16."
)
OUTPUT = (
    "The model output ({vars}) is {dtype} and is fed to the loss from step {a}: the loss "
    "and its gradient see only {bits} significand bits."
)
OUTPUT_FIX = (
    "Give the last layer or activation dtype='float32' (e.g. "
    "keras.layers.Activation('softmax', dtype='float32')), as the mixed precision guide advises."
)

INDEX_OUT_OF_RANGE = (
    "The gradient of {vars} names rows past the end of its table ({n} rows) at {m} logged steps "
    "from step {a} (up to {k:.0f} indices in a step): an input id is out of range. XLA clamps such a "
    "lookup to the last row and the update of those rows is dropped (TensorFlow's CPU kernels raise): "
    "the model trains on other ids than the data holds. A common cause is token ids fed as floats "
    "under a 16-bit policy: Keras casts a float input to bfloat16/float16, which rounds ids above "
    "256/2048 to other integers (1999 becomes 2000 in bfloat16)."
)
INDEX_OUT_OF_RANGE_FIX = (
    "Feed ids as integers (keras.Input(..., dtype='int32'), or cast before the embedding) and keep "
    "them below the embedding's input_dim; check the vocabulary size against the largest id."
)

LOSS_SCALE_SKIP = (
    "The float16 loss scale overflowed at {n} step(s) ({steps}): the optimizer skipped those updates and "
    "halved the scale ({first} -> {last}), which is how dynamic loss scaling finds its level; the "
    "gradients logged there are the overflowed ones it did not apply, not an error."
)
LOSS_SCALE_SKIP_FIX = (
    "Nothing to do. Fewer skips at the start: a lower initial_scale of the LossScaleOptimizer."
)
LOSS_SCALE_FAILURE = (
    "Loss scaling cannot explain the non-finite gradients from step {a} ({steps}): {why} The scale is "
    "{scale} after it."
)
LOSS_SCALE_LOSS = "the loss itself was not finite, which no loss scale causes or fixes."
# One non-finite event, one alert: where else it shows.
SAME_EVENT = "The same event shows in {where}."
EVENT_WHERE = {
    metadata.GRAD_STATS: "the gradients ({vars})",
    metadata.NONFINITE_REPLAY: "the replay of step {a}",
    metadata.DIVERGENCE: "the comparison's gradients ({vars})",
    metadata.ACTIVATION_DIVERGENCE: "the comparison's layer outputs ({vars})",
    metadata.LOSS_COMPARISON: "the comparison's loss",
    metadata.OPTIMIZER_STEP: "the optimizer's loss-scale skips from step {a} (loss scaling cannot explain them)",
}
LOSS_SCALE_FLOOR = ("the scale fell below {floor:g}, where it shrinks the gradients it should protect: the "
                    "gradients are NaN or infinite at any scale.")
LOSS_SCALE_IN_ROW = ("more than {k} skips came in a row after updates were applied (the scale grows one "
                     "binade at a time, so a healthy overflow costs one skip): the gradients left the float16 "
                     "range or are NaN.")
LOSS_SCALE_FAILURE_FIX = (
    "Look at the nonfinite alert and its replay (the layer where the NaN starts, and whether float32 is "
    "finite there); guard log/sqrt/division, lower the learning rate, keep the loss and softmax in "
    "float32, or switch to bfloat16."
)
REPLAY = (
    "Train step {a} was not finite: in {cand}, the first non-finite value is {where}. {summary}"
)
REPLAY_FIX = {
    "precision": (
        "Compute {layer} in float32 (dtype='float32' on the layer), or scale its inputs down, or train in "
        "bfloat16 (its range is float32's). " + ADVISOR
    ),
    "not_precision": NONFINITE_FIX,
    "not_reproduced": NONFINITE_FIX,
}


def names(rows, index, limit=4):
    """``rows[i]`` for i in ``index``, at most ``limit`` named."""
    picked = [rows[i] for i in index]
    if len(picked) <= limit:
        return ", ".join(picked)
    return "%s and %d more" % (", ".join(picked[:limit]), len(picked) - limit)

HARDCODED = (
    "The layers {vars} compute in {dtype} whatever their dtype policy (raw TensorFlow ops with a hard-coded "
    "16-bit dtype, found in the traced {ref} pass): the {ref} reference computes them in {dtype} too, so no "
    "comparison measures their error, and switching their policy (the precision advisor) changes nothing "
    "(steps {a}-{b})."
)
HARDCODED_FIX = (
    "If it matters, compute in the layer's own dtype: cast to self.compute_dtype (or keras.ops.cast(x, self.compute_dtype)) "
    "instead of a hard-coded tf.bfloat16/tf.float16, so its dtype policy decides; then the comparisons measure "
    "it and dtype='float32' on the layer keeps it in float32."
)

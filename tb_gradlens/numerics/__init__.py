"""Pure TensorFlow numerics (and an optional compiled kernel) for the lens.

One module per family of formulas, each formula a function with the formula
in its docstring:

* ``bits``: IEEE-754 bits (exact zeros, exact float64 widening, ULP
  spacing, log2 histogram bins);
* ``gradient_stats``: per-variable gradient statistics;
* ``histogram``: the log2-magnitude histogram;
* ``divergence``: divergence of a candidate from a reference;
* ``updates``: what an optimizer step did to each variable;
* ``loss``: the loss of both sides of a comparison.

The statistics, divergence and update passes reduce every element once
into raw sums, then apply the formulas.  ``backend`` chooses who does it:
the compiled kernel (``_kernel.c``: found and built by ``kernel``, run as
TensorFlow ops from ``_op.cc`` or through ``library_calls``) on CPU, or
TensorFlow ops (``packing`` groups tensors for row-wise reductions;
``sparse`` turns IndexedSlices into their rows, never raising on an index
past the table: ``gradient_index_counts`` counts them).  Every function works in
eager mode and inside ``tf.function``; inside an XLA-compiled function the
TensorFlow ops are used.
"""

from tb_gradlens.numerics.bits import DTYPE_PRECISION  # noqa: F401
from tb_gradlens.numerics.bits import exact_float64  # noqa: F401
from tb_gradlens.numerics.bits import is_zero  # noqa: F401
from tb_gradlens.numerics.bits import log2_bin_index  # noqa: F401
from tb_gradlens.numerics.bits import spacing  # noqa: F401
from tb_gradlens.numerics.divergence import SIGNIFICANCE_FLOOR  # noqa: F401
from tb_gradlens.numerics.divergence import comparison_values  # noqa: F401
from tb_gradlens.numerics.divergence import divergence_metrics  # noqa: F401
from tb_gradlens.numerics.divergence import tensor_divergence  # noqa: F401
from tb_gradlens.numerics.gradient_stats import gradient_statistics  # noqa: F401
from tb_gradlens.numerics.loss import loss_comparison  # noqa: F401
from tb_gradlens.numerics.sparse import gradient_index_counts  # noqa: F401
from tb_gradlens.numerics.sparse import sparse_positions  # noqa: F401
from tb_gradlens.numerics.updates import keep_if  # noqa: F401
from tb_gradlens.numerics.updates import kept_by_op_possible  # noqa: F401
from tb_gradlens.numerics.updates import update_statistics  # noqa: F401

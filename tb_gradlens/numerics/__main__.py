"""``python -m tb_gradlens.numerics``: build the compiled kernel now and say how it runs."""

import sys

from tb_gradlens.numerics import kernel

print(kernel.status())
sys.exit(0 if kernel.library() is not None else 1)

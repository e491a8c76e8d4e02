"""tb_gradlens: see where bfloat16 training numbers go wrong, in TensorBoard.

Importing the package is light and TensorFlow-free; the logging modules
(``tb_gradlens.summary``, ``tb_gradlens.keras``, ...) import TensorFlow when
first used.
"""

import importlib

__version__ = "0.1.0"

_LAZY_SUBMODULES = ("summary", "numerics", "metadata", "compare", "keras", "analysis", "reading",
                    "distribute")


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        return importlib.import_module("tb_gradlens." + name)
    raise AttributeError("module 'tb_gradlens' has no attribute %r" % name)

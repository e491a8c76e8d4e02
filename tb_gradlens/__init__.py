"""tb_gradlens: see where bfloat16 training numbers go wrong, in TensorBoard.

Importing the package is light and TensorFlow-free; the logging modules
(``tb_gradlens.summary``, ``tb_gradlens.keras``, ...) import TensorFlow when
first used.
"""

import importlib

__version__ = "0.1.0"

_LAZY_SUBMODULES = {name: "tb_gradlens." + name for name in (
    "summary", "numerics", "metadata", "compare", "keras", "analysis", "advisor", "writing", "serving")}
# The reading and distribute modules live on their sides; kept under their old names.
_LAZY_SUBMODULES.update(reading="tb_gradlens.serving.reading", distribute="tb_gradlens.writing.distribute")
# Functions and classes of submodules, imported when first used.
_LAZY_NAMES = {"advise": "advisor", "Advisor": "advisor", "keep_in_float32": "advisor"}


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(_LAZY_SUBMODULES[name])
    if name in _LAZY_NAMES:
        return getattr(importlib.import_module("tb_gradlens." + _LAZY_NAMES[name]), name)
    raise AttributeError("module 'tb_gradlens' has no attribute %r" % name)

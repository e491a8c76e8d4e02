"""The one path setup of benchmarks/: ``import _paths`` first in a benchmark script.

A benchmark runs as a script (``python benchmarks/bench_x.py``, so benchmarks/ is
already ``sys.path[0]``) or is imported by a test (``tests/conftest.py`` puts
benchmarks/ on the path).  This puts the repository root first, so that
``tb_gradlens`` is the checkout's source and the test helpers import as
``tests.support.<module>`` (tests/support/__init__.py), and keeps benchmarks/
on the path for the sibling modules (``models``, ``zoo_models``, ...).
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

for _path in (HERE, ROOT):  # ROOT ends up first
    if _path not in sys.path:
        sys.path.insert(0, _path)

"""The judges and the models they judge, importable from the repository root without path edits.

The model zoo: ``real_models`` (real models at tiny sizes, the healthy ``ZOO``
and ``FAULT_ZOO``), ``zoo_models`` (more healthy models, split into
calibration and held-out) and ``benchmark_models`` (the models the benchmarks
time, at full and tiny sizes).  The fault zoo: ``zoo_faults``.  The judges:
``alert_zoo``, ``verdict_zoo``, ``advisor_zoo``, ``compare_noise`` and
``compare_zoo``, each run from the repository root as
``python -m evaluation.<name>`` (``--help`` for the options).  Tests import them
as ``from evaluation import real_models``; benchmarks/ (``python -m
benchmarks.<name>``) time, and import these models from here.
"""

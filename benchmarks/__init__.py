"""Timing only: each benchmark runs from the repository root as ``python -m
benchmarks.<name>``; ``python -m benchmarks.run`` runs them all (``--tiny``: seconds).
The models they time are in ``evaluation.benchmark_models`` and ``evaluation.real_models``.
"""

"""Helpers of the tests (and of some benchmarks): not tests themselves.

Logdirs with known answers (``gradlens_logs``, ``bad_logs``, ``hostile_logs``,
``frontend_questions_logs``), a real TensorBoard process (``tb_server``), the
browser page (``frontend_page``), the plugin over a real data provider
(``plugin_client``), the command line and its logdir (``cli_logs``), twin
training steps (``twin_step``), float64 references (``divergence_reference``,
``gradient_reference``) and record readers (``readback``); and the scripts
some tests run in a fresh process (``distributed_train`` and ``mirrored_nonfinite``: ``python -m
tests.support.<name> ...`` from the repository root; ``disk_full_train``,
``tf_warnings_run``, ``install_check_lens``: ``python tests/support/<name>.py ...``).

Test modules import what they share from here (``from tests.support import
readback``), never from one another.  The model zoo and the judges are the
``evaluation`` package.  The repository root is on ``sys.path``: ``tests/conftest.py``
puts it there for the tests, ``python -m`` from the root for the benchmarks and
the scripts run that way, and each other script here for itself
(``install_check_lens`` last, after the installed ``tb_gradlens`` is imported).
"""

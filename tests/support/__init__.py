"""Helpers of the tests (and of some benchmarks): not tests themselves.

Logdirs with known answers (``gradlens_logs``, ``bad_logs``, ``hostile_logs``,
``frontend_questions_logs``), a real TensorBoard process (``tb_server``), the
browser page (``frontend_page``), the zoo of real models (``real_models``,
``twin_step``), float64 references (``divergence_reference``) and record readers
(``readback``); and the scripts some tests run in a fresh process
(``distributed_train``, ``disk_full_train``, ``tf_warnings_run``,
``install_check_lens``: ``python tests/support/<name>.py ...``).

Import them as ``from tests.support import real_models``, with the repository
root on ``sys.path``: ``tests/conftest.py`` puts it there for the tests,
``benchmarks/_paths.py`` for the benchmarks, and each script here for itself
(``install_check_lens`` last, after the installed ``tb_gradlens`` is imported).
"""

"""The annotated public API type-checks: the same ``python -m mypy`` as
``.ci/run`` (mypy.ini names the files), so ``pytest`` alone checks it too.

mypy is in the ``test`` extra; without it this test skips, except in CI
(``CI`` set), where it fails.  ``test_checker_*`` shows the check failing
on a type error: a check that cannot fail checks nothing.
"""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_mypy(*args, cwd=ROOT):
    try:
        import mypy  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("mypy is not installed (pip install .[test])")
    return subprocess.run([sys.executable, "-m", "mypy", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_public_api_type_checks():
    done = run_mypy()
    assert done.returncode == 0, done.stdout + done.stderr


def test_checker_fails_on_a_type_error(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from tb_gradlens import analysis\n"
        "from tb_gradlens import cli\n"
        "analysis.compare_runs(object(), 'a', 'b')\n"
        "cli.main(['report', 3])\n",
        encoding="utf-8",
    )
    done = run_mypy("--config-file", os.path.join(ROOT, "mypy.ini"), str(probe))
    assert done.returncode == 1, done.stdout + done.stderr
    assert '"compare_runs" has incompatible type "object"; expected "RecordSource"' in done.stdout
    assert 'List item 1 has incompatible type "int"; expected "str"' in done.stdout  # cli.main's argv

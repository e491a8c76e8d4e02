"""Name patterns (tb_gradlens.patterns): Python regex meaning, bounded cost.

What a user needs: the pattern they type in the tab's filter box, in
``--run`` or in the callback's ``variables=`` selects what ``re.search``
would select, and no pattern can make the server (or the command line)
run unboundedly: it answers, or refuses the pattern with a message.
(Differential fuzzing against ``re``: tests/serving/test_fuzz.py.)
"""

import random
import re

import pytest

from tests.support import hostile_logs
from tb_gradlens import patterns


def test_catastrophic_patterns_answer_like_re_would():
    names = list(hostile_logs.LONG_NAMES) + ["L" * 9990 + "/long/name", "a" * 40, "", "aab", "xxy", "ab!", "k_k"]
    for pattern in (r"^(\w+)+!", r"(.+)+!", r"(a|aa)*b", r"(x+x+)+y", r"(\w*)*$", r"(.*){1,30}!"):
        matcher = patterns.compile(pattern)
        got = matcher.filter(names)
        # re agrees on the names short enough for it to finish.
        for i, name in enumerate(names):
            if len(name) <= 12:
                assert (re.search(pattern, name) is not None) == (i in got), (pattern, name[:20])
    assert patterns.compile(r"^(\w+)+_k").filter(hostile_logs.LONG_NAMES) == list(range(8))


def test_every_search_has_a_step_budget():
    rng = random.Random(0)
    names = ["".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(200)) for _ in range(50)]
    with pytest.raises(patterns.PatternTooComplex, match="matching steps"):
        patterns.filter_names("(.?){999}!", names)
    # The same pattern on few short names fits its budget.
    assert patterns.filter_names("(.?){999}!", ["ab", "c!"]) == [1]


@pytest.mark.parametrize("pattern, message", [
    ("a{99999999999}", "repetition number is too large"),
    ("(a)\\1", "backreferences"),
    ("(?=a)", "lookahead/lookbehind"),
    ("(?<!a)b", "lookahead/lookbehind"),
    ("(a)?(?(1)b|c)", "conditional groups"),
    ("a*+", "possessive"),
    ("(?>a)", "atomic groups"),
    ("a{5000}", "repetition count"),
    ("((a{60}){70})", "pattern too large"),
    ("x" * 1001, "at most 1000"),
    ("(", "missing )"),
    ("[z-a]", "bad character range"),
])
def test_refused_patterns_say_why(pattern, message):
    with pytest.raises(patterns.PatternError, match=re.escape(message)):
        patterns.compile(pattern)


def test_flags_anchors_and_classes_follow_re():
    cases = {
        "(?i)DENSE": ["Dense/kernel", "x"],
        "(?m)^b": ["a\nb", "ab"],
        "a$": ["a\n", "a\nb", "ba"],
        "a\\Z": ["a\n", "ba"],
        "\\bker": ["dense/kernel", "dense_kernel"],
        "\\Bern": ["kernel", "ern"],
        "(?s)a.b": ["a\nb"],
        "a.b": ["a\nb", "axb"],
        "[^\\W\\d]+$": ["abc", "ab1", "日本"],
        "(?a)\\w+$": ["日本", "ab"],
        "\\d{2,3}x": ["1x", "12x", "1234x"],
        "Ǆ": ["ǅ"],
        "(?i)Ǆ": ["ǆ", "ǅ"],
        "(?i)ß": ["SS", "ẞ"],
        "": ["", "x"],
        "\\B": ["", "x"],
        "^$": ["", "\n", "x"],
    }
    for pattern, texts in cases.items():
        matcher = patterns.compile(pattern)
        for text in texts:
            assert matcher.search(text) == (re.search(pattern, text) is not None), (pattern, text)


@pytest.mark.slow
def test_cli_and_callback_use_the_safe_matcher(tmp_path):
    import subprocess
    import sys

    logdir = tmp_path / "logs"
    hostile_logs.long_names_run(str(logdir / ("k" * 60)))
    hostile_logs.long_names_run(str(logdir / "other"))
    root = hostile_logs.__file__.rsplit("/tests/", 1)[0]

    def report(run):
        return subprocess.run([sys.executable, "-m", "tb_gradlens", "report", str(logdir), "--run", run, "-q"],
                              capture_output=True, text=True, timeout=300, cwd=root)

    hostile = report("^(k+)+!")
    assert hostile.returncode == 3 and "no run with gradlens records matching" in hostile.stderr
    refused = report("(k)\\1")
    assert refused.returncode == 2 and "backreferences" in refused.stderr
    assert "Traceback" not in hostile.stderr + refused.stderr
    found = report("^(k+)+$")
    assert found.returncode == 0 and "run " + "k" * 60 in found.stdout and "run other" not in found.stdout


def test_callback_variables_pattern_is_the_safe_matcher():
    """The callback selects variables with the same matcher (a refused pattern is
    a setup failure: warned, training goes on; strict mode raises it)."""
    import numpy as np
    import keras

    from tb_gradlens import safety
    from tb_gradlens.keras.schedule import select as _select

    variables = [keras.Variable(np.zeros(2, np.float32), name=n) for n in ("k" * 62, "bias")]
    assert _select(variables, r"^(\w+)+!") == []
    assert _select(variables, r"^(k+)+$") == [0]
    with safety.strict(), pytest.raises(ValueError, match="backreferences"):
        _select(variables, "(k)\\1")

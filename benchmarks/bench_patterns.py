"""Name patterns: catastrophic patterns answered, the worst case refused, in ms.

Catastrophic-backtracking patterns (Python's ``re`` does not finish them)
over 200 62-character names and one of 10,000 characters, ``(a+)+$`` on
10,000 characters, and the worst case the budget admits or refuses (about
4,000 NFA states over 50 names of 200 distinct CJK characters).  Each row:
the median of ``--rounds`` runs, the pattern compiled afresh each round.

    python benchmarks/bench_patterns.py [--rounds 5]
"""

import argparse
import random
import statistics
import time

import _paths  # noqa: F401 - the repository root and benchmarks/ on sys.path


def timed(fn, rounds):
    seconds = []
    outcome = None
    for _ in range(rounds):
        start = time.perf_counter()
        try:
            outcome = fn()
        except Exception as e:  # a refusal is an outcome here
            outcome = type(e).__name__
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), outcome


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    from tb_gradlens import patterns

    rng = random.Random(0)
    words = "abcdefghijklmnopqrstuvwxyz_/0123456789"
    names = ["".join(rng.choice(words) for _ in range(62)) for _ in range(200)] + ["L" * 9990 + "/long/name"]
    cjk = ["".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(200)) for _ in range(50)]
    patterns.compile(r"(?i)\w")  # the Unicode tables, built once per process, outside the rows
    rows = [
        ("(a+)+$ on 'a' x 10,000 + '!'", r"(a+)+$", ["a" * 10000 + "!"]),
        ("(a+)+$ on 'a' x 10,000", r"(a+)+$", ["a" * 10000]),
    ]
    for pattern in (r"^(\w+)+!", r"(.+)+!", r"(a|aa)*b", r"(x+x+)+y", r"(\w*)*$", r"(.*){1,30}!",
                    r"(?i)^(\w+)+_k\b", r"(\d+|\w+)*\.$"):
        rows.append(("%s on 200 x 62 + 10,000 chars" % pattern, pattern, names))
    rows.append(("(.?){999}! on 50 x 200 CJK (worst case)", r"(.?){999}!", cjk))
    rows.append(("(.?){999}! on 10 x 200 CJK", r"(.?){999}!", cjk[:10]))
    for label, pattern, texts in rows:
        seconds, outcome = timed(lambda: len(patterns.filter_names(pattern, texts)), args.rounds)
        print("%-50s %8.1f ms  %s" % (label, seconds * 1e3,
                                       outcome if isinstance(outcome, str) else "%d matched" % outcome), flush=True)


if __name__ == "__main__":
    main()

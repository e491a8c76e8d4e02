"""`tb-gradlens report` on a large logdir: reading with and without the checked records, side by side.

The command line checks every record of a logdir once (``event_files.FileScan``:
both CRCs, batched), then TensorBoard's TF-free loader reads it.  That loader
(the TensorFlow stub's ``PyRecordReader_New``) checks both CRCs again, one byte
at a time in Python; ``checked_reader`` lets it read the records the scan found
good without checking them again.  Each round runs ``report`` in a fresh process
(TensorBoard's TensorFlow stub, as the console script runs), alternating the two
ways; the figure is the median of the rounds' wall times.

    python -m benchmarks.bench_cli --logdir DIR [--rounds 2]    # e.g. frontend_logdir.py's 128 x 3,000
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The report as the console script runs it; "unchecked" leaves TensorBoard's own reader in place.
CODE = """
import sys
from tb_gradlens import cli
from tb_gradlens.serving import checked_reader
if sys.argv[1] == "unchecked":
    checked_reader.install = lambda: None
sys.exit(cli.main(["report", sys.argv[2], "-q"]))
"""


def one(way, logdir):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CODE, way, logdir], capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr[-2000:])
    return elapsed, done.stdout


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logdir", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(args.logdir) for f in files)
    times = {"checked": [], "unchecked": []}
    outputs = {}
    for _ in range(args.rounds):
        for way in ("checked", "unchecked"):
            elapsed, out = one(way, args.logdir)
            times[way].append(elapsed)
            outputs[way] = out
    assert outputs["checked"] == outputs["unchecked"], "the two ways must report the same"
    checked, unchecked = (statistics.median(times[w]) for w in ("checked", "unchecked"))
    print("report on %s (%.0f MB), median of %d rounds each:" % (args.logdir, size / 1e6, args.rounds))
    print("| reading | report wall time |")
    print("|---|---|")
    print("| TensorBoard's stub checks every CRC again (before) | %.1f s |" % unchecked)
    print("| records the scan checked read as they are (now) | %.1f s |" % checked)
    print("ratio: %.1fx faster; the reports are identical" % (unchecked / checked))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""CRC-32C of one long record: seconds and MB/s by size, against an older tree.

``--before DIR`` loads DIR/tb_gradlens/crc32c.py (``git archive <commit> |
tar -x -C DIR``) and times the same data in alternating rounds; TensorBoard's
own byte-by-byte ``masked_crc32c`` (its TF-free reader's) is timed on 1 MB.

    python benchmarks/bench_crc32c.py --before /tmp/old_tree --sizes 1,8,32,64
"""

import argparse
import importlib.util
import os
import time

HERE = os.path.dirname(os.path.abspath(__file__))
import _paths  # noqa: E402,F401 - the repository root and benchmarks/ on sys.path


def load(path):
    spec = importlib.util.spec_from_file_location("crc32c_%d" % abs(hash(path)), path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def seconds(fn, data, rounds):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn(data)
        best = min(best, time.perf_counter() - start)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before")
    parser.add_argument("--sizes", default="1,8,32,64", help="MB")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    from tb_gradlens import crc32c

    trees = {"now": crc32c}
    if args.before:
        trees["before"] = load(os.path.join(args.before, "tb_gradlens", "crc32c.py"))
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

    data = os.urandom(1 << 20)
    print("tensorboard stub, 1 MB: %.3f s" % seconds(pywrap_tensorflow.masked_crc32c, data, 1))
    for size in [int(s) for s in args.sizes.split(",")]:
        data = os.urandom(size << 20)
        row = []
        for name, module in trees.items():
            s = seconds(module.masked_crc32c, data, args.rounds)
            row.append("%s %.3f s (%.0f MB/s)" % (name, s, size / s))
        print("%4d MB: %s" % (size, ", ".join(row)), flush=True)


if __name__ == "__main__":
    main()

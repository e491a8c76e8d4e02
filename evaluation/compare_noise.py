"""How often does Compare runs call a run "beyond noise" when it is not?

Trains float32 runs of several seeds (each seed: its own initial weights and
batch order) and mixed_bfloat16 runs, healthy and with an injected fault,
logging the loss every step, then asks ``analysis.compare_runs`` (the verdict
the tab and ``tb-gradlens compare`` show) about:

* the null: A = float32 seed 0, noise run = float32 seed 1, B = float32 seed
  k for every other seed: B is just another seed, so "beyond" is a false alarm;
* healthy bfloat16: A = float32 seed k, noise = float32 seed k+1, B =
  mixed_bfloat16 seed k;
* faults: the same with a model whose bfloat16 step is damaged (a variance as
  E[x^2]-E[x]^2 in bfloat16): "within" is a miss.

Run (from the repository root)::

    python -m evaluation.compare_noise               # 22 seeds of the MLP, the transformer, the LSTM
    python -m evaluation.compare_noise --tiny        # 6 seeds of the MLP, 60 steps (seconds)
"""

import argparse
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from evaluation import real_models  # noqa: E402

MODELS = {
    "mlp": (lambda p, s: real_models.mlp(p, seed=s), real_models.digits, 64, 300),
    "transformer": (lambda p, s: real_models.transformer_classifier(p, seed=s), real_models.tokens(), 16, 200),
    "lstm": (lambda p, s: real_models.recurrent(p, seed=s), real_models.sequences(), 16, 200),
}
FAULTS = {
    "naive_norm_mlp": (lambda p, s: real_models.naive_norm_mlp(p, seed=s),
                       real_models.FAULT_ZOO["naive_norm_mlp"].data, 64, 300),
    "advisor_mlp": (lambda p, s: real_models.advisor_mlp(p, seed=s),
                    real_models.FAULT_ZOO["advisor_mlp"].data, 64, 300),
}


def losses(build, data, policy, seed, steps, batch):
    """The training loss of every step of one run (Adam 1e-3, train_on_batch)."""
    import keras

    keras.utils.set_random_seed(seed)
    model = build(policy, seed)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=real_models.SPARSE_CE)
    rng = np.random.default_rng(seed)
    return np.array([float(model.train_on_batch(*data(batch, rng))) for _ in range(steps)])


class _Runs:
    """A source of ``loss`` scalars (what ``compare_runs`` reads) from arrays."""

    def __init__(self, runs):
        self.runs = runs

    def scalar_listing(self):
        return {run: {"loss": None} for run in self.runs}

    def scalars(self, run, tag):
        values = np.asarray(self.runs[run], np.float64)
        steps = np.arange(len(values))
        return steps, steps.astype(np.float64), values


def verdict(a, b, noise):
    from tb_gradlens import analysis

    summary = analysis.compare_runs(_Runs({"a": a, "b": b, "n": noise}), "a", "b", noise_run="n").summary
    return summary.exceeds_noise, summary.first_exceeding_step, summary.noise


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=22)
    parser.add_argument("--tiny", action="store_true", help="6 seeds of the MLP, 60 steps")
    args = parser.parse_args(argv)
    models = {"mlp": MODELS["mlp"][:3] + (60,)} if args.tiny else MODELS
    seeds = 6 if args.tiny else args.seeds
    faults = {} if args.tiny else FAULTS
    print("| model | false 'beyond' (B another float32 seed) | healthy bfloat16 'beyond' |")
    print("|---|---|---|")
    total = pairs = 0
    for name, (build, data, batch, steps) in models.items():
        f32 = [losses(build, data, "float32", s, steps, batch) for s in range(seeds)]
        false = sum(bool(verdict(f32[0], f32[k], f32[1])[0]) for k in range(2, seeds))
        bf16 = [bool(verdict(f32[k], losses(build, data, "mixed_bfloat16", k, steps, batch), f32[k + 1])[0])
                for k in range(3)]
        total, pairs = total + false, pairs + seeds - 2
        print("| %s (%d steps) | %d of %d | %d of 3 |" % (name, steps, false, seeds - 2, sum(bf16)))
    print("\nfalse 'beyond' in all: %d of %d seed pairs" % (total, pairs))
    for name, (build, data, batch, steps) in faults.items():
        for k in range(3):
            a = losses(build, data, "float32", k, steps, batch)
            n = losses(build, data, "float32", k + 1, steps, batch)
            b = losses(build, data, "mixed_bfloat16", k, steps, batch)
            beyond, first, noise = verdict(a, b, n)
            print("fault %s seed %d: %s from step %s (B %.3gx the noise run's mean there)"
                  % (name, k, "beyond" if beyond else "MISSED, within", first, noise["ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

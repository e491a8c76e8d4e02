"""The lens under tf.distribute: MirroredStrategy over two logical CPU devices
and MultiWorkerMirroredStrategy with two worker processes on 127.0.0.1.

Each training runs in a subprocess (tests/support/distributed_train.py): logical
devices must be set before TensorFlow initializes them, and each worker is
its own process.  A softmax regression (6 features, 3 classes, global batch
8, 3 SGD steps) is trained by ``model.fit`` with ``GradLensCallback`` and by
a custom ``strategy.run`` loop with ``GradLens`` and
``tb_gradlens.summary.gradients``.  What was logged is checked against a
float64 NumPy recomputation of the global-batch gradient from the weights
the script saved before every step, and against the single-device run.

Tolerances: the logged statistics are float32 sums of 8 examples (and of
the replicas' shares), so they match float64 to rtol 1e-5 (we allow 1e-4);
the single-device and distributed runs differ only in summation order
(allowed: rtol 1e-5, atol 1e-7).
"""

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

from tests.support.readback import read_records
from tb_gradlens import metadata

pytestmark = [pytest.mark.slow]  # trains under tf.distribute in subprocesses

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = ["-m", "tests.support.distributed_train"]  # run from ROOT: tb_gradlens and tests.support of this checkout
GLOBAL_BATCH = 8
LEARNING_RATE = 0.5
TIMEOUT = 300
RTOL_NUMPY = 1e-4
RTOL_SINGLE = 1e-5


def _env(tf_config=None):
    env = dict(os.environ, TB_GRADLENS_STRICT="1", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


def _run(strategy, logdir, out):
    proc = subprocess.run(
        [sys.executable, *SCRIPT, strategy, str(logdir), str(out)],
        env=_env(), capture_output=True, text=True, timeout=TIMEOUT, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return dict(np.load(out))


def _free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _run_workers(tmp_path):
    """Two MultiWorkerMirroredStrategy workers; each gets its own logdir."""
    cluster = {"worker": ["127.0.0.1:%d" % p for p in _free_ports(2)]}
    procs = []
    try:
        for index in range(2):
            config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
            procs.append(subprocess.Popen(
                [sys.executable, *SCRIPT, "multiworker", str(tmp_path / ("worker%d" % index)),
                 str(tmp_path / ("worker%d.npz" % index))],
                env=_env(config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            ))
        for proc in procs:
            _, err = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, err[-4000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return dict(np.load(tmp_path / "worker0.npz"))


# -- float64 NumPy recomputation -----------------------------------------------


def _share_gradients(kernel, bias, x, y):
    """Gradient of sum(CE over these examples) / GLOBAL_BATCH (one replica's share)."""
    x, kernel, bias = x.astype(np.float64), kernel.astype(np.float64), bias.astype(np.float64)
    logits = x @ kernel + bias
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    p /= GLOBAL_BATCH
    return [x.T @ p, p.sum(axis=0)]


def _step_batch(saved, step):
    rows = slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
    return saved["x"][rows], saved["y"][rows]


def _expected_gradients(saved, prefix, step):
    x, y = _step_batch(saved, step)
    return _share_gradients(saved[prefix + "_kernels"][step], saved[prefix + "_biases"][step], x, y)


def _grad_stats(g):
    g = np.ravel(g)
    n = g.size
    return {
        "l2_norm": np.sqrt(np.sum(g * g)), "mean": g.mean(), "std": g.std(), "min": g.min(),
        "max": g.max(), "max_abs": np.abs(g).max(), "rms": np.sqrt(np.mean(g * g)),
        "zero_fraction": np.mean(g == 0), "count": n, "is_none": 0, "nan_count": 0,
    }


def _replica_divergence(saved, prefix, step, replicas):
    """[R, V, (rel_l2, cosine, norm_ratio, max_abs)]: replica share vs replica mean."""
    x, y = _step_batch(saved, step)
    kernel, bias = saved[prefix + "_kernels"][step], saved[prefix + "_biases"][step]
    per = GLOBAL_BATCH // replicas
    shares = [_share_gradients(kernel, bias, x[i * per:(i + 1) * per], y[i * per:(i + 1) * per])
              for i in range(replicas)]
    out = np.zeros((replicas, 2, 4))
    for v in range(2):
        mean = sum(s[v] for s in shares) / replicas
        for i, s in enumerate(shares):
            c, r = np.ravel(s[v]), np.ravel(mean)
            out[i, v] = [np.linalg.norm(c - r) / np.linalg.norm(r),
                         c @ r / (np.linalg.norm(c) * np.linalg.norm(r)),
                         np.linalg.norm(c) / np.linalg.norm(r), np.abs(c - r).max()]
    return out


# -- checks --------------------------------------------------------------------


def _of_kind(records, run, kind, name=None):
    return {tag: value for tag, value in records[run].items()
            if value[0].kind == kind and (name is None or tag.startswith(name + "/"))}


def _one(records, run, kind, name):
    found = _of_kind(records, run, kind, name)
    assert len(found) == 1, (run, kind, name, list(records[run]))
    return next(iter(found.values()))


def _check_grad_stats(records, run, name, saved, prefix):
    record, data = _one(records, run, metadata.GRAD_STATS, name)
    assert record.rows == ("net/dense/kernel", "net/dense/bias")
    assert [d.step for d in data] == [0, 1, 2]
    columns = list(metadata.GRAD_STATS_COLUMNS)
    for datum in data:
        expected = _expected_gradients(saved, prefix, datum.step)
        for v, g in enumerate(expected):
            for column, value in _grad_stats(g).items():
                got = datum.numpy[v, columns.index(column)]
                np.testing.assert_allclose(got, value, rtol=RTOL_NUMPY, atol=1e-7,
                                           err_msg="%s %s step %d" % (record.rows[v], column, datum.step))
    return data


def _check_histogram(records, run, name, saved, prefix):
    _, data = _one(records, run, metadata.GRAD_HISTOGRAM, name)
    for datum in data:
        for v, g in enumerate(_expected_gradients(saved, prefix, datum.step)):
            g = np.ravel(g).astype(np.float32)
            exponents = np.floor(np.log2(np.abs(g[g != 0]))).astype(int)
            expected = np.zeros(metadata.N_EXP_BINS)
            np.add.at(expected, exponents - metadata.MIN_EXPONENT, 1)
            got = datum.numpy[v, :metadata.N_EXP_BINS]
            # An element within float32 rounding of a power of two may land
            # one bin over; a per-replica (halved) gradient would move all.
            assert np.abs(got - expected).sum() <= 2, (datum.step, v, got.nonzero(), exponents)
            assert datum.numpy[v].sum() == g.size


def _check_updates(records, run, saved, prefix):
    _, data = _one(records, run, metadata.UPDATE_STATS, "model")
    for datum in data:
        s = datum.step
        before = [saved[prefix + "_kernels"][s], saved[prefix + "_biases"][s]]
        after = [saved[prefix + "_kernels"][s + 1], saved[prefix + "_biases"][s + 1]]
        for v, g in enumerate(_expected_gradients(saved, prefix, s)):
            delta = after[v].astype(np.float64) - before[v]
            np.testing.assert_allclose(datum.numpy[v, 0], np.sqrt(np.mean(delta ** 2)), rtol=1e-5)
            # SGD: the applied update is -lr * (the all-reduced gradient).
            np.testing.assert_allclose(delta, -LEARNING_RATE * g, rtol=1e-3, atol=1e-6)


def _check_replicas(records, run, saved, prefix, replicas):
    found = _of_kind(records, run, metadata.DIVERGENCE, "replicas")
    assert len(found) == replicas
    by_replica = {}
    for record, data in found.values():
        assert record.extras["reference"]["label"] == "replica mean"
        by_replica[record.extras["candidate"]["replica"]] = (record, data)
    assert sorted(by_replica) == list(range(replicas))
    columns = list(metadata.DIVERGENCE_COLUMNS)
    for i, (record, data) in by_replica.items():
        assert record.extras["candidate"]["label"] == "replica %d" % i
        device = record.extras["candidate"]["device"].lower()
        assert device.endswith("cpu:%d" % i) or "task:%d/" % i in device, device
        assert [d.step for d in data] == [0, 1, 2]
        for datum in data:
            expected = _replica_divergence(saved, prefix, datum.step, replicas)[i]
            got = datum.numpy[:, [columns.index(c) for c in ("rel_l2", "cosine", "norm_ratio", "max_abs")]]
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6)
            assert (datum.numpy[:, columns.index("nonfinite")] == 0).all()


def _same_as_single(records, single, kind, name):
    _, data = _one(records, "fit", kind, name)
    _, reference = _one(single, "fit", kind, name)
    for datum, ref in zip(data, reference):
        np.testing.assert_allclose(datum.numpy, ref.numpy, rtol=RTOL_SINGLE, atol=1e-7)


def _check_loop(records, saved, replicas):
    for name in ("model", "direct"):
        _check_grad_stats(records, "loop", name, saved, "loop")
    _check_histogram(records, "loop", "model", saved, "loop")
    _check_replicas(records, "loop", saved, "loop", replicas)


def _check_fit(records, saved, single, replicas):
    _check_grad_stats(records, "fit", "model", saved, "fit")
    _check_histogram(records, "fit", "model", saved, "fit")
    _check_replicas(records, "fit", saved, "fit", replicas)
    _check_updates(records, "fit", saved, "fit")
    for kind in (metadata.GRAD_STATS, metadata.GRAD_HISTOGRAM, metadata.UPDATE_STATS):
        _same_as_single(records, single, kind, "model")
    # The comparison ran (on replica 0's share) and found float32 = float64
    # to float32 accuracy on this small problem.
    found = [v for t, v in _of_kind(records, "fit", metadata.DIVERGENCE).items() if "_vs_float64/" in t]
    assert len(found) == 1, list(records["fit"])
    _, data = found[0]
    assert [d.step for d in data] == [0, 2]
    assert (data[0].numpy[:, 0] < 1e-5).all()


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("single")
    saved = _run("single", tmp / "logs", tmp / "saved.npz")
    records = read_records(str(tmp / "logs"))
    # One replica: statistics as without a strategy, no replica records.
    _check_grad_stats(records, "fit", "model", saved, "fit")
    assert not _of_kind(records, "fit", metadata.DIVERGENCE, "replicas")
    return records


def test_mirrored_strategy_two_devices(single, tmp_path):
    saved = _run("mirrored", tmp_path / "logs", tmp_path / "saved.npz")
    assert int(saved["replicas"]) == 2
    records = read_records(str(tmp_path / "logs"))
    _check_loop(records, saved, replicas=2)
    _check_fit(records, saved, single, replicas=2)
    # One event file per run: written once, by one writer.
    for run in ("fit", "loop"):
        assert len(os.listdir(tmp_path / "logs" / run)) == 1


def test_multi_worker_two_processes(single, tmp_path):
    saved = _run_workers(tmp_path)
    assert int(saved["replicas"]) == 2
    # Only the chief's directory holds anything.
    assert not os.path.exists(tmp_path / "worker1") or not any(
        files for _, _, files in os.walk(tmp_path / "worker1")
    )
    records = read_records(str(tmp_path / "worker0"))
    assert sorted(records) == ["loop"]  # model.fit: see distributed_train.py
    _check_loop(records, saved, replicas=2)
    assert len(os.listdir(tmp_path / "worker0" / "loop")) == 1

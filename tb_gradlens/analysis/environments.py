"""The environment each run trained in, and runs compared across environments.

TensorFlow-free.  A writer states its run's environment (device, TF32
switch, op determinism, ``jit_compile``, oneDNN and its fpmath mode,
replicas, versions) and what float32 measured to be where its references
run, in its ``lens_status`` record (``records.environments``).  The report
and the tab show them; a run comparison (``runs.compare_runs``) whose runs
differ in any of it says so and gives no precision verdict: another GPU,
driver, TF32 or XLA setting changes float32 itself.
"""

from typing import Any
from typing import Dict
from typing import Optional

from tensorboard import errors

from tb_gradlens import metadata
from tb_gradlens import records

NOT_A_VERDICT = ("not a precision verdict: the runs' environments differ (%s), and another device, TF32, XLA or "
                 "determinism setting changes float32 itself")


def run_environment(source, run: str) -> Dict[str, Any]:
    """``{"environment", "float32", "text", "float32_text"}`` of ``run``: the
    last environment and float32 precision its lens statuses state (None
    when none does, e.g. records of an older tb_gradlens) and both in words."""
    env = float32 = None
    listing = getattr(source, "entries_of_kind", None)  # (a source of scalars only has none)
    try:
        entries = listing(run, metadata.LENS_STATUS) if listing is not None else []
    except errors.NotFoundError:
        entries = []
    for entry in entries:
        for point in source.lens_statuses(run, entry.tag):
            status = point.get("status")
            if status is None:
                continue
            env = status.environment if status.environment is not None else env
            float32 = status.float32 if status.float32 is not None else float32
    return {"environment": env, "float32": float32,
            "text": None if env is None else records.environment_text(env),
            "float32_text": None if float32 is None else float32_text(float32)}


def float32_text(precision):
    """What float32 measured to be where the references run, and under which
    compilation, e.g. "TF32 in matmul/conv, 11 bits (measured under XLA)"."""
    how = "under XLA" if precision.get("jit_compile") else "without XLA"
    where = "" if precision.get("device") in (None, "default") else " on %s" % precision["device"]
    return "%s (measured%s %s)" % (records.measured_text(precision), where, how)


def differences(source, runs: Dict[str, Optional[str]]):
    """``[{"field", "name", "values": {label: text}}]``: where the recorded
    environments of ``runs`` (``{label: run or None}``) differ."""
    envs = {label: run_environment(source, run)["environment"] for label, run in runs.items() if run is not None}
    return records.environment_differences(envs)


def differences_text(found):
    """The differences in words, e.g. "device: A GPU ..., B CPU ...; TF32
    switch: A on, B off"."""
    return "; ".join("%s: %s" % (d["name"], ", ".join("%s %s" % (label, value)
                                                       for label, value in d["values"].items()))
                     for d in found)


def not_a_verdict(summary, differing):
    """``summary`` of runs whose environments differ: no precision verdict
    (``exceeds_noise`` None), what the numbers alone say kept in words."""
    return summary._replace(exceeds_noise=None, first_exceeding_step=None, verdict="%s; the numbers alone: %s" % (
        NOT_A_VERDICT % differences_text(differing), summary.verdict))

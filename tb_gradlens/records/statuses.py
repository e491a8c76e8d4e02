"""The lens status: the payload of a ``lens_status`` record."""

import collections

from tb_gradlens import metadata
from tb_gradlens.records import checks
from tb_gradlens.records.environments import read_environment
from tb_gradlens.records.environments import read_float32_precision

FormatError = metadata.FormatError


Expectation = collections.namedtuple("Expectation", ("kind", "name", "every", "start", "stop"))
Unsupported = collections.namedtuple("Unsupported", ("what", "kinds", "reason", "step"))
LensStatus = collections.namedtuple(
    "LensStatus", ("writer", "expected", "unsupported", "step_offset", "environment", "float32"),
    defaults=(0, None, None))


def expectation(kind, name, every, start=0, stop=None):
    """One kind of record a writer was asked for: kind ``kind`` under tag
    prefix ``name`` at every step ``s`` with ``start <= s < stop`` and
    ``(s - start) % every == 0`` (``every`` 0: never)."""
    if kind not in metadata.KINDS:
        raise ValueError("tb_gradlens: unknown kind %r" % (kind,))
    return {"kind": kind, "name": str(name), "every": int(every or 0), "start": int(start or 0),
            "stop": None if stop is None else int(stop)}


def unsupported(what, kinds, reason, step=None):
    """Something asked for that the lens cannot log for this model, and why
    (e.g. a comparison of a model whose layers cannot switch policy)."""
    return {"what": str(what), "kinds": [str(k) for k in kinds], "reason": str(reason),
            "step": None if step is None else int(step)}


def lens_status(writer, expected, unsupported_features=(), step_offset=0, environment=None, float32=None):
    """The JSON-ready lens status a writer records at its start and when it
    changes: ``{"writer", "expected": [expectation], "unsupported":
    [unsupported]}``, and ``"step_offset"`` when not 0: the writer's records
    are at optimizer step + step_offset (a training whose optimizer
    restarted at 0, e.g. after ``compile``, continues the run's steps; the
    expectations' start and stop are record steps); ``"environment"``
    (``environments.environment``: the hardware and settings the run
    trained with) and ``"float32"`` (``environments.float32_precision``:
    what float32 measured to be where the references run) when known."""
    out = {"writer": str(writer), "expected": [dict(e) for e in expected],
           "unsupported": [dict(u) for u in unsupported_features]}
    if step_offset:
        out["step_offset"] = int(step_offset)
    if environment is not None:
        out["environment"] = environment
    if float32 is not None:
        out["float32"] = float32
    return out


def read_lens_status(obj):
    """A LensStatus from a decoded ``lens_status`` payload; ValueError if malformed."""
    if not isinstance(obj, dict) or not isinstance(obj.get("writer"), str):
        raise ValueError("a lens status must be an object with a string 'writer'")
    expected, missing = obj.get("expected", []), obj.get("unsupported", [])
    if not isinstance(expected, list) or not isinstance(missing, list):
        raise ValueError("lens status 'expected' and 'unsupported' must be lists")
    out_expected = []
    for e in expected:
        if not (isinstance(e, dict) and isinstance(e.get("kind"), str) and isinstance(e.get("name"), str)
                and checks.is_int(e.get("every")) and checks.is_int(e.get("start", 0))
                and (e.get("stop") is None or checks.is_int(e.get("stop")))):
            raise ValueError("lens status expectations need kind, name, every, start, stop")
        out_expected.append(Expectation(e["kind"], e["name"], e["every"], e.get("start", 0), e.get("stop")))
    out_missing = []
    for u in missing:
        if not (isinstance(u, dict) and all(isinstance(u.get(k), str) for k in ("what", "reason"))
                and isinstance(u.get("kinds", []), list)
                and all(isinstance(k, str) for k in u.get("kinds", []))
                and (u.get("step") is None or checks.is_int(u.get("step")))):
            raise ValueError("lens status 'unsupported' entries need what, kinds, reason, step")
        out_missing.append(Unsupported(u["what"], tuple(u.get("kinds", [])), u["reason"], u.get("step")))
    offset = obj.get("step_offset", 0)
    if not checks.is_int(offset):
        raise ValueError("lens status 'step_offset' must be an integer")
    environment = read_environment(obj.get("environment"))  # (a FormatError is a ValueError)
    float32 = read_float32_precision(obj.get("float32"), where="float32")
    return LensStatus(obj["writer"], tuple(out_expected), tuple(out_missing), offset, environment, float32)


def expected_steps(expectation_, first_step, last_step):
    """The steps in [first_step, last_step] at which ``expectation_`` asks for a record."""
    e = expectation_
    if e.every <= 0:
        return range(0)
    begin = max(first_step, e.start)
    begin += (e.start - begin) % e.every
    end = last_step + 1 if e.stop is None else min(last_step + 1, e.stop)
    return range(begin, max(begin, end), e.every)

"""The extras of the records of non-finite steps: ``optimizer_step`` (what
the optimizer did at a train step: its own step, the loss scale, a skipped
update) and ``nonfinite_replay`` (the first non-finite step replayed in a
more precise dtype)."""

import collections

from tb_gradlens import metadata
from tb_gradlens.records import checks
from tb_gradlens.records.variants import read_variant

FormatError = metadata.FormatError

# Row kinds of a nonfinite_replay record, in forward order.
OUTPUT = "output"
LOSS = "loss"
GRADIENT = "gradient"
ROW_KINDS = (OUTPUT, LOSS, GRADIENT)

ReplayInfo = collections.namedtuple("ReplayInfo", ("row_kinds", "candidate", "reference"))


def optimizer_step_extras(loss_scaling):
    """Extras of an ``optimizer_step`` record: whether the optimizer scales
    the loss (a ``LossScaleOptimizer``: its skipped steps are its own)."""
    return {"loss_scaling": bool(loss_scaling)}


def read_optimizer_step(record, tag=None):
    """Whether the writer's optimizer scales the loss (False when not stated)."""
    value = record.extras.get("loss_scaling", False)
    if not isinstance(value, bool):
        raise FormatError("loss_scaling must be true or false", tag)
    return value


def replay_extras(row_kinds, candidate, reference):
    """Extras of a ``nonfinite_replay`` record: per row its kind (``OUTPUT``
    of a layer, the ``LOSS``, the ``GRADIENT`` of a variable) and the two
    sides (``variant`` dicts): the step as configured and the reference."""
    kinds = [str(k) for k in row_kinds]
    if any(k not in ROW_KINDS for k in kinds):
        raise ValueError("tb_gradlens: row kinds must be among %s" % (ROW_KINDS,))
    return {"row_kinds": kinds, "candidate": dict(candidate), "reference": dict(reference)}


def read_replay(record, tag=None):
    """The ReplayInfo of a ``nonfinite_replay`` record."""
    kinds = checks.str_list(record.extras.get("row_kinds", []), record, "row_kinds", tag)
    if len(kinds) != len(record.rows) or any(k not in ROW_KINDS for k in kinds):
        raise FormatError("row_kinds must give one of %s per row" % (ROW_KINDS,), tag)
    return ReplayInfo(tuple(kinds), read_variant(record.extras.get("candidate"), tag, "candidate"),
                      read_variant(record.extras.get("reference"), tag, "reference"))

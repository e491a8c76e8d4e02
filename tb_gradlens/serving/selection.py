"""Which steps, rows and columns of a series an answer holds (pure functions).

TensorFlow-free.  Row patterns are matched by ``tb_gradlens.patterns``
(Python regex syntax, bounded time), never by ``re``.
"""

import numpy as np
from tensorboard import errors

from tb_gradlens import patterns


def thin_indices(n, max_steps):
    """At most ``max_steps`` evenly spaced indices of range(n), first and last kept."""
    if max_steps is None or max_steps >= n:
        return np.arange(n)
    if max_steps <= 1:
        return np.array([n - 1]) if n else np.arange(0)
    return np.unique(np.round(np.linspace(0, n - 1, max_steps)).astype(np.int64))


def select_steps(steps, step_min=None, step_max=None, max_steps=None):
    """Indices into ``steps`` within [step_min, step_max], evenly thinned."""
    steps = np.asarray(steps)
    mask = np.ones(len(steps), bool)
    if step_min is not None:
        mask &= steps >= step_min
    if step_max is not None:
        mask &= steps <= step_max
    index = np.nonzero(mask)[0]
    return index[thin_indices(len(index), max_steps)]


def row_filter(pattern):
    """A ``patterns.NameFilter`` of ``pattern`` for one request (one budget
    for every name it meets); InvalidArgumentError if refused."""
    try:
        return patterns.NameFilter(pattern)
    except patterns.PatternError as e:
        raise errors.InvalidArgumentError("rows pattern %r: %s" % (pattern[:200], e)) from None


def select_rows(rows, pattern=None, names=()):
    """Indices of ``rows`` named in ``names`` or matching ``pattern``.

    ``pattern`` has Python regex syntax and ``re.search`` semantics, matched
    in bounded time (``tb_gradlens.patterns``), or is a ``row_filter`` shared
    by the calls of one request (one budget for all).  No filter selects every
    row.  A refused pattern (invalid, unsupported, too large or too costly
    on these names) raises InvalidArgumentError; a name not in ``rows``
    raises NotFoundError.
    """
    rows = list(rows)
    names = list(names or ())
    if pattern is None and not names:
        return list(range(len(rows)))
    missing = [n for n in names if n not in rows]
    if missing:
        raise errors.NotFoundError("no row %r (rows: %d)" % (missing[0], len(rows)))
    wanted = set(names)
    matched = set()
    if pattern is not None:
        found = pattern if isinstance(pattern, patterns.NameFilter) else row_filter(pattern)
        try:
            matched = set(found.indices(rows))
        except patterns.PatternError as e:
            raise errors.InvalidArgumentError("rows pattern %r: %s" % (found.pattern[:200], e)) from None
    return [i for i, r in enumerate(rows) if r in wanted or i in matched]


def select_columns(columns, names=None):
    """Indices of the named columns (all if None); InvalidArgumentError if unknown."""
    columns = list(columns)
    if not names:
        return list(range(len(columns)))
    out = []
    for n in names:
        if n not in columns:
            raise errors.InvalidArgumentError(
                "no column %r; columns are %s" % (n, ", ".join(columns[:20]))
            )
        out.append(columns.index(n))
    return out

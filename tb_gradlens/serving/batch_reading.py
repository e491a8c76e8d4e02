"""Reading a data provider's tensors into Series: pure functions, one tag or many per call.

TensorFlow-free; ``reading.Source`` calls them and keeps what they return in
its cache.  Each function is given where to read (a ``ProviderRequest``:
data provider, request context, experiment id) and the ``TagEntry``s to
read, and returns what it read; none calls back into the ``Source``.

With TensorBoard's Rust data server every ``read_tensors`` call is a gRPC
round trip: an ``overview`` of 2,000 runs made 2,000 of them.  A sweep's
runs share their tag names (the digest is of the rows and columns), so when
one tag is missing from the cache, ``read_alike`` reads that tag of every
run whose copy is missing too (``alike`` lists them), in calls of at most
``MAX_BATCH_BYTES`` (estimated from the listing).
"""

import logging
from typing import Any
from typing import Dict
from typing import Iterable
from typing import Iterator
from typing import List
from typing import NamedTuple
from typing import Sequence
from typing import Tuple

import numpy as np
from tensorboard import errors
from tensorboard.data import provider as tb_provider

from tb_gradlens import metadata
from tb_gradlens.records.tag_data import Series
from tb_gradlens.records.tag_data import TagEntry

logger = logging.getLogger(__name__)

# ``downsample`` for "every stored point": 0 would return nothing.
DOWNSAMPLE_ALL = 10**9

# A gRPC answer of the Rust data server holds at most 256 MiB; a record
# larger than this many bytes in total is read downsampled (see read_series).
MAX_READ_BYTES = 192 * 1024 * 1024

# Estimated bytes of tensors one batched read_tensors call may return (a
# gRPC answer of the Rust data server holds at most 256 MiB).
MAX_BATCH_BYTES = 64 * 1024 * 1024


class ProviderRequest(NamedTuple):
    """Where a read goes: one experiment of one data provider, under one request's context."""

    data_provider: Any
    ctx: Any
    experiment_id: str


def read_tensor_points(where: ProviderRequest, entry: TagEntry, downsample: int) -> list:
    """The data provider's tensor points of ``entry`` (``downsample`` of them at most)."""
    flt = tb_provider.RunTagFilter(runs=[entry.run], tags=[entry.tag])
    data = where.data_provider.read_tensors(
        where.ctx,
        experiment_id=where.experiment_id,
        plugin_name=metadata.PLUGIN_NAME,
        downsample=downsample,
        run_tag_filter=flt,
    )
    points = data.get(entry.run, {}).get(entry.tag)
    if points is None:
        raise errors.NotFoundError("run %r has no gradlens tag %r" % (entry.run, entry.tag))
    return points


def read_series(where: ProviderRequest, entry: TagEntry, downsample: int = DOWNSAMPLE_ALL) -> Series:
    """The Series of a float record, at most ``downsample`` steps of it (the
    data provider's own sampling); a record whose full read fails (e.g. a gRPC
    answer over its size limit) is read sampled to MAX_READ_BYTES."""
    record = entry.record
    n_rows, n_cols = len(record.rows), len(record.columns)
    try:
        points = read_tensor_points(where, entry, downsample)
        sampled = downsample != DOWNSAMPLE_ALL and len(points) >= downsample
    except errors.PublicError:
        raise
    except Exception as e:  # noqa: BLE001 - e.g. a gRPC answer over its size limit
        per_point = max(1, n_rows * n_cols * 4)
        budget = min(downsample, max(2, MAX_READ_BYTES // per_point))
        logger.warning(
            "gradlens: reading %s/%s in full failed (%s); reading %d sampled steps",
            entry.run, entry.tag, e, budget,
        )
        points = read_tensor_points(where, entry, budget)
        sampled = True
    return series_of_points(entry, points, sampled)


def series_of_points(entry: TagEntry, points: Sequence[Any], sampled: bool) -> Series:
    """The Series of the tensor ``points`` of ``entry``; InvalidArgumentError
    for a tensor of the wrong shape or not numbers."""
    record = entry.record
    n_rows, n_cols = len(record.rows), len(record.columns)
    steps = np.fromiter((p.step for p in points), np.int64, len(points))
    wall_times = np.fromiter((p.wall_time for p in points), np.float64, len(points))
    values = np.empty((len(points), n_rows, n_cols), np.float32)
    for i, p in enumerate(points):
        array = np.asarray(p.numpy)
        if array.shape != (n_rows, n_cols):
            try:
                metadata.check_tensor_shape(record, array.shape, entry.tag)
            except metadata.FormatError as e:
                raise errors.InvalidArgumentError("%s (step %d)" % (e, p.step)) from None
        if array.dtype.kind not in "fiub":
            raise errors.InvalidArgumentError(
                "gradlens record %r: tensor of dtype %s at step %d, not numbers" % (entry.tag, array.dtype, p.step))
        values[i] = array
    order = np.argsort(steps, kind="stable")
    if np.any(order != np.arange(len(order))):
        steps, wall_times, values = steps[order], wall_times[order], values[order]
    return Series(entry.run, entry.tag, record, steps, wall_times, values, sampled)


def estimated_bytes(entry: TagEntry) -> int:
    """An upper estimate of a tag's tensor bytes (one point per step up to its last)."""
    steps = (entry.max_step + 1) if entry.max_step is not None and entry.max_step >= 0 else 1
    return len(entry.record.rows) * len(entry.record.columns) * 4 * steps


def batches(entries: Iterable[TagEntry], limit: int = MAX_BATCH_BYTES) -> Iterator[List[TagEntry]]:
    """``entries`` in consecutive groups of at most ``limit`` estimated bytes
    (a group holds at least one entry)."""
    group: List[TagEntry] = []
    size = 0
    for entry in entries:
        cost = estimated_bytes(entry)
        if group and size + cost > limit:
            yield group
            group, size = [], 0
        group.append(entry)
        size += cost
    if group:
        yield group


def alike(entry: TagEntry, listing: Dict[str, List[TagEntry]]) -> List[TagEntry]:
    """The readable entries of the other runs of ``listing`` ({run: [TagEntry]})
    with ``entry``'s tag and kind, by run."""
    return [
        e for run in sorted(listing) for e in listing[run]
        if e.tag == entry.tag and e.run != entry.run and e.record is not None and e.kind == entry.kind
    ]


def read_alike(where: ProviderRequest, entry: TagEntry,
               others: Sequence[TagEntry]) -> List[Tuple[TagEntry, Series]]:
    """(TagEntry, Series) of ``entry`` and of ``others`` (the same tag of other runs),
    a batch per provider call.  Nothing when there are no others or ``entry``
    alone is over MAX_BATCH_BYTES; entries whose tensors cannot be read are
    left out (the caller's own read of ``entry`` raises for it)."""
    together = [entry] + list(others)
    if len(together) == 1 or estimated_bytes(entry) > MAX_BATCH_BYTES:
        return []
    found: List[Tuple[TagEntry, Series]] = []
    for group in batches(together):
        if len(group) == 1 and group[0] is not entry:
            continue
        flt = tb_provider.RunTagFilter(runs=[e.run for e in group], tags=[entry.tag])
        try:
            data = where.data_provider.read_tensors(
                where.ctx, experiment_id=where.experiment_id, plugin_name=metadata.PLUGIN_NAME,
                downsample=DOWNSAMPLE_ALL, run_tag_filter=flt)
        except Exception:  # noqa: BLE001 - each tag is read alone then, with its own errors
            return found
        for e in group:
            points = data.get(e.run, {}).get(e.tag)
            if points is None:
                continue
            try:
                found.append((e, series_of_points(e, points, False)))
            except errors.InvalidArgumentError:
                continue  # its own read says so
    return found

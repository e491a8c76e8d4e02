"""Turning the data provider's tensor points into Series, many tags per call.

TensorFlow-free; used by ``reading.Source``.  With TensorBoard's Rust data
server every ``read_tensors`` call is a gRPC round trip: an ``overview`` of
2,000 runs made 2,000 of them.  A sweep's
runs share their tag names (the digest is of the rows and columns), so when
one tag is missing from the cache, ``read_alike`` reads that tag of every
run whose copy is missing too, in calls of at most ``MAX_BATCH_BYTES``
(estimated from the listing), and stores each Series in the cache.
"""

import numpy as np
from tensorboard import errors
from tensorboard.data import provider as tb_provider

from tb_gradlens import metadata

# Estimated bytes of tensors one batched read_tensors call may return (a
# gRPC answer of the Rust data server holds at most 256 MiB).
MAX_BATCH_BYTES = 64 * 1024 * 1024


def series_of_points(entry, points, sampled, series_type):
    """A ``series_type`` (reading.Series) of the tensor ``points`` of ``entry``;
    InvalidArgumentError for a tensor of the wrong shape or not numbers."""
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
    return series_type(entry.run, entry.tag, record, steps, wall_times, values, sampled)


def estimated_bytes(entry):
    """An upper estimate of a tag's tensor bytes (one point per step up to its last)."""
    steps = (entry.max_step + 1) if entry.max_step is not None and entry.max_step >= 0 else 1
    return len(entry.record.rows) * len(entry.record.columns) * 4 * steps


def batches(entries, limit=MAX_BATCH_BYTES):
    """``entries`` in consecutive groups of at most ``limit`` estimated bytes
    (a group holds at least one entry)."""
    group, size = [], 0
    for entry in entries:
        cost = estimated_bytes(entry)
        if group and size + cost > limit:
            yield group
            group, size = [], 0
        group.append(entry)
        size += cost
    if group:
        yield group


def read_alike(source, entry, missing, store, series_type):
    """Read ``entry`` and the other runs' entries of the same tag and kind for
    which ``missing(e)`` holds, a batch per provider call; ``store(e, series)``
    each.  Entries whose tensors cannot be read are left to the caller's
    own read (which raises for them).  Returns nothing."""
    alike = [entry] + [
        e for run in source.runs() for e in source.entries(run)
        if e.tag == entry.tag and e.run != entry.run and e.record is not None and e.kind == entry.kind
        and missing(e)
    ]
    if len(alike) == 1 or estimated_bytes(entry) > MAX_BATCH_BYTES:
        return
    for group in batches(alike):
        if len(group) == 1 and group[0] is not entry:
            continue
        flt = tb_provider.RunTagFilter(runs=[e.run for e in group], tags=[entry.tag])
        try:
            data = source.data_provider.read_tensors(
                source.ctx, experiment_id=source.experiment_id, plugin_name=metadata.PLUGIN_NAME,
                downsample=source.DOWNSAMPLE_ALL, run_tag_filter=flt)
        except Exception:  # noqa: BLE001 - each tag is read alone then, with its own errors
            return
        for e in group:
            points = data.get(e.run, {}).get(e.tag)
            if points is None:
                continue
            try:
                store(e, series_of_points(e, points, False, series_type))
            except errors.InvalidArgumentError:
                continue  # its own read says so

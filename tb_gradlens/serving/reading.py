"""Reading gradlens records through a TensorBoard data provider.

TensorFlow-free and shared by the plugin and the command line: both build a
``tensorboard.data.provider.DataProvider`` (the plugin gets TensorBoard's,
the CLI builds one over an ``EventMultiplexer``) and read through a
``Source`` made here.

A ``Source`` answers: runs, tags by kind, a record's series as NumPy arrays
(``values[step, row, column]`` with steps and wall times), dtype maps and
scalars.  Reads are cached in a ``Cache`` keyed by (data location, run,
tag) and invalidated when the tag's ``max_step``/``max_wall_time`` changes,
so a logdir that is not growing is fetched once (with the Rust data server
every ``read_tensors`` ships each tensor over gRPC), whatever the
experiment id (URL prefix) it is asked under.

The ``Source`` holds the listing and the cache; what it reads from the
data provider it reads with the pure functions of ``batch_reading`` (and
``read_scalar_arrays`` here), given where to read and the entries, which
return what they read and never call back into it.
"""

import numpy as np
from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard.data import provider as tb_provider

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.serving import batch_reading
from tb_gradlens.serving import json_points
from tb_gradlens.serving.entries import Series, TagEntry, list_records, request_context  # noqa: F401 (reading.Series)
from tb_gradlens.serving.entries import require_readable
from tb_gradlens.serving.read_cache import Cache  # noqa: F401 (reading.Cache)
from tb_gradlens.serving.selection import row_filter  # noqa: F401
from tb_gradlens.serving.selection import select_columns  # noqa: F401
from tb_gradlens.serving.selection import select_rows  # noqa: F401
from tb_gradlens.serving.selection import select_steps  # noqa: F401
from tb_gradlens.serving.selection import thin_indices  # noqa: F401

# ``downsample`` for "every stored point" (batch_reading's).
DOWNSAMPLE_ALL = batch_reading.DOWNSAMPLE_ALL

# TensorBoard's own plugin name for tf.summary.scalar data.
SCALARS_PLUGIN = "scalars"


class Source:
    """Everything the analysis reads, for one experiment of one provider.

    Build one per request (it memoizes the tag listing for its lifetime)
    and share one ``Cache`` between requests.
    """

    def __init__(self, data_provider, ctx=None, experiment_id="", cache=None, tails=None):
        self.data_provider = data_provider
        self.ctx = ctx if ctx is not None else tb_context.RequestContext()
        self.experiment_id = experiment_id
        self.cache = cache if cache is not None else Cache()
        self.tails = tails  # live_tail.LiveTails of a local logdir, or None
        self._records = None
        self._scalars = None
        self._location = None

    @property
    def where(self):
        """Where this source's reads go (``batch_reading.ProviderRequest``)."""
        return batch_reading.ProviderRequest(self.data_provider, self.ctx, self.experiment_id)

    @classmethod
    def from_request(cls, data_provider, request, cache=None, tails=None):
        ctx, experiment_id = request_context(request)
        return cls(data_provider, ctx, experiment_id, cache, tails)

    def restricted(self, runs):
        """A Source over the same data that sees only ``runs`` (others are never read)."""
        keep = set(runs)
        other = Source(self.data_provider, self.ctx, self.experiment_id, self.cache, self.tails)
        other._records = {run: e for run, e in self.records().items() if run in keep}
        return other

    # -- listing -----------------------------------------------------------

    def records(self):
        """{run: [TagEntry]} of every gradlens tag (sorted by tag)."""
        if self._records is None:
            self._records = list_records(self.data_provider, self.ctx, self.experiment_id)
        return self._records

    def runs(self):
        """Sorted names of the runs that hold gradlens records."""
        return sorted(self.records())

    def entries(self, run):
        """The TagEntries of ``run``; NotFoundError for an unknown run."""
        try:
            return self.records()[run]
        except KeyError:
            raise errors.NotFoundError("no gradlens data for run %r" % (run,)) from None

    def entry(self, run, tag):
        """The TagEntry of (run, tag); NotFoundError if either is unknown."""
        for e in self.entries(run):
            if e.tag == tag:
                return e
        raise errors.NotFoundError("run %r has no gradlens tag %r" % (run, tag))

    def entries_of_kind(self, run, kind):
        """Readable TagEntries of ``run`` whose record is of ``kind``."""
        return [e for e in self.entries(run) if e.kind == kind]

    # -- reading -----------------------------------------------------------

    @property
    def location(self):
        """What the data is, for the cache: the provider's data location
        (TensorBoard serves one logdir under any experiment id), else the
        experiment id."""
        if self._location is None:
            self._location = ("experiment", self.experiment_id)
            try:
                found = self.data_provider.experiment_metadata(self.ctx, experiment_id=self.experiment_id)
                if found is not None and getattr(found, "data_location", ""):
                    self._location = ("location", found.data_location)
            except Exception:  # noqa: BLE001 - no metadata: keyed by experiment id
                pass
        return self._location

    def key(self, name, run, tag):
        """The cache key of ``name`` (what is kept) for one tag of one run of
        this source's data: (name, data location, run, tag).  Every key of a
        tag's cache entries is made here."""
        return (name, self.location, run, tag)

    def cached(self, name, entry, compute, pool="derived", reads=()):
        """``compute()`` memoized under ``key(name, run, tag)`` until the tag, or
        one of the other entries ``compute`` reads (``reads``), changes."""
        return self.cache.get(self.key(name, entry.run, entry.tag), read_version(entry, reads), compute, pool)

    def series(self, run, tag):
        """The Series of a float record (cached).

        Raises NotFoundError for an unknown run or tag, and
        InvalidArgumentError for a tag this version cannot read (its
        metadata error, a ``dtypes`` record, or a tensor of the wrong shape).
        """
        entry = self.entry(run, tag)
        require_readable(entry)
        if entry.kind in metadata.JSON_KINDS:
            raise errors.InvalidArgumentError(
                "tag %r holds %s JSON, not a series" % (tag, entry.kind)
            )
        key = self.key("series", entry.run, entry.tag)
        if not self.cache.holds(key, entry.version, "data"):
            if self.tails is not None and self.cache.holds(key, None, "data"):  # read before: it grows
                found = self.tails.series(entry, Series)
                if found is not None:  # the new records only (live_tail)
                    self.cache.put(key, entry.version, found, "data")
                    return found
            self._read_alike(entry)
        return self.cached("series", entry, lambda: batch_reading.read_series(self.where, entry), "data")

    def _read_alike(self, entry):
        """Read ``entry`` with the same tag of the other runs whose Series the
        cache lacks, a batch per provider call, into the cache."""
        others = [e for e in batch_reading.alike(entry, self.records())
                  if not self.cache.holds(self.key("series", e.run, e.tag), e.version, "data")]
        for e, series in batch_reading.read_alike(self.where, entry, others):
            self.cache.put(self.key("series", e.run, e.tag), e.version, series, "data")

    def sampled_series(self, run, tag, max_steps):
        """A Series of at most ``max_steps`` steps of a float record, read with
        the data provider's own downsampling (the last step and a uniform
        sample of the others, as TensorBoard reads its histograms), cached per
        ``max_steps``.  For views that need no single step exactly (the log2
        histogram heatmap): a cold read of a large record costs a fraction.
        """
        entry = self.entry(run, tag)
        require_readable(entry)
        if entry.kind in metadata.JSON_KINDS:
            raise errors.InvalidArgumentError(
                "tag %r holds %s JSON, not a series" % (tag, entry.kind)
            )
        return self.cached(
            ("sampled_series", int(max_steps)), entry,
            lambda: batch_reading.read_series(self.where, entry, int(max_steps)), "data",
        )

    def dtype_maps(self, run, tag):
        """[{"step","wall_time","map"[, "error"]}] of a ``dtypes`` tag, oldest first."""
        return self._json_points(run, tag, metadata.DTYPES, "map", records.read_dtype_map)

    def lens_statuses(self, run, tag):
        """[{"step","wall_time","status"[, "error"]}] of a ``lens_status`` tag,
        oldest first; ``status`` is a ``records.LensStatus``."""
        return self._json_points(run, tag, metadata.LENS_STATUS, "status", records.read_lens_status)

    def advice(self, run, tag):
        """[{"step","wall_time","advice"[, "error"]}] of an ``advice`` tag,
        oldest first; ``advice`` is a ``records.Advice``."""
        return self._json_points(run, tag, metadata.ADVICE, "advice", records.read_advice)

    def _json_points(self, run, tag, kind, key, parse):
        """[{"step", "wall_time", key[, "error"]}] of a ``kind`` tag, oldest first,
        ``key`` holding ``parse(JSON)`` of each point (cached per tag version)."""
        entry = self.entry(run, tag)
        require_readable(entry)
        if entry.kind != kind:
            raise errors.InvalidArgumentError("tag %r is not a %s record" % (tag, kind))
        return list(self.cached(kind, entry, lambda: json_points.json_points(
            batch_reading.read_tensor_points(self.where, entry, DOWNSAMPLE_ALL), key, parse)))

    def point_errors(self, runs=None):
        """[{"run","tag","error"}] of the dtype maps, lens statuses and advice of
        ``runs`` (default: all) that cannot be read (``json_points.unreadable_points``)."""
        return json_points.unreadable_points(self, runs)

    def scalars(self, run, tag):
        """(steps int64, wall_times float64, values float64) of a scalar tag."""
        ts = self.scalar_listing().get(run, {}).get(tag)
        if ts is None:
            raise errors.NotFoundError("run %r has no scalar tag %r" % (run, tag))
        entry = TagEntry(run, tag, max_step=ts.max_step, last_wall_time=ts.max_wall_time)
        return tuple(self.cached("scalars", entry, lambda: read_scalar_arrays(self.where, run, tag), "data"))

    def scalar_listing(self):
        """{run: {tag: ScalarTimeSeries}} of TensorBoard's scalar summaries."""
        if self._scalars is None:
            self._scalars = self.data_provider.list_scalars(
                self.ctx, experiment_id=self.experiment_id, plugin_name=SCALARS_PLUGIN
            )
        return self._scalars


def read_version(entry, reads=()):
    """The cache version of what is computed from ``entry`` and the entries ``reads``:
    the versions of every record read (a judgment read again when any of them changes)."""
    if not reads:
        return entry.version
    return (entry.version,) + tuple(sorted((e.tag, e.version) for e in reads))


def read_scalar_arrays(where, run, tag):
    """(steps int64, wall_times float64, values float64) of a TensorBoard scalar
    tag, read from the data provider (``where``: a ``batch_reading.ProviderRequest``)."""
    flt = tb_provider.RunTagFilter(runs=[run], tags=[tag])
    data = where.data_provider.read_scalars(
        where.ctx,
        experiment_id=where.experiment_id,
        plugin_name=SCALARS_PLUGIN,
        downsample=DOWNSAMPLE_ALL,
        run_tag_filter=flt,
    )
    points = data.get(run, {}).get(tag, [])
    return _Arrays(
        (
            np.fromiter((p.step for p in points), np.int64, len(points)),
            np.fromiter((p.wall_time for p in points), np.float64, len(points)),
            np.fromiter((p.value for p in points), np.float64, len(points)),
        )
    )


class _Arrays(tuple):
    """A tuple of arrays with ``nbytes`` (for the Cache)."""

    @property
    def nbytes(self):
        return sum(a.nbytes for a in self)

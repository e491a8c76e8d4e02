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
"""

import json
import logging

import numpy as np
from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard import plugin_util
from tensorboard.data import provider as tb_provider

from tb_gradlens import metadata
from tb_gradlens import records
from tb_gradlens.serving import batch_reading
from tb_gradlens.serving.read_cache import Cache  # noqa: F401 (reading.Cache)
from tb_gradlens.serving.selection import row_filter  # noqa: F401
from tb_gradlens.serving.selection import select_columns  # noqa: F401
from tb_gradlens.serving.selection import select_rows  # noqa: F401
from tb_gradlens.serving.selection import select_steps  # noqa: F401
from tb_gradlens.serving.selection import thin_indices  # noqa: F401

logger = logging.getLogger(__name__)

# ``downsample`` for "every stored point": 0 would return nothing.
DOWNSAMPLE_ALL = 10**9

# TensorBoard's own plugin name for tf.summary.scalar data.
SCALARS_PLUGIN = "scalars"

# A gRPC answer of the Rust data server holds at most 256 MiB; a record
# larger than this many bytes in total is read downsampled (see _read_series).
MAX_READ_BYTES = 192 * 1024 * 1024



class TagEntry:
    """One gradlens tag of a run: its parsed metadata or its error."""

    __slots__ = ("run", "tag", "record", "error", "max_step", "last_wall_time")

    def __init__(self, run, tag, record=None, error=None, max_step=None, last_wall_time=None):
        self.run = run
        self.tag = tag
        self.record = record
        self.error = error
        self.max_step = max_step
        self.last_wall_time = last_wall_time

    @property
    def kind(self):
        return self.record.kind if self.record is not None else None

    @property
    def version(self):
        """What changes when the tag gets new data (the cache key's version)."""
        return (self.max_step, self.last_wall_time)

    def to_json(self):
        out = {"tag": self.tag, "max_step": self.max_step}
        if self.record is not None:
            out.update(
                kind=self.record.kind,
                rows=list(self.record.rows),
                columns=list(self.record.columns),
                extras=self.record.extras,
                error=None,
            )
        else:
            out.update(kind=None, rows=[], columns=[], extras={}, error=self.error)
        return out


class Series:
    """All logged steps of one float record.

    Attributes:
      run, tag: where it comes from.
      record: its RecordMetadata.
      steps: int64 ``[S]``, ascending.
      wall_times: float64 ``[S]``.
      values: float32 ``[S, rows, columns]``.
      sampled: True if the provider returned only a sample of the steps.
    """

    __slots__ = ("run", "tag", "record", "steps", "wall_times", "values", "sampled")

    def __init__(self, run, tag, record, steps, wall_times, values, sampled=False):
        self.run = run
        self.tag = tag
        self.record = record
        self.steps = steps
        self.wall_times = wall_times
        self.values = values
        self.sampled = sampled

    @property
    def nbytes(self):
        return self.steps.nbytes + self.wall_times.nbytes + self.values.nbytes

    def column(self, name):
        """values[:, :, column] as a float32 ``[S, rows]`` view."""
        return self.values[:, :, self.record.columns.index(name)]


def request_context(request):
    """(RequestContext, experiment_id) of a Werkzeug request."""
    ctx = tb_context.from_environ(request.environ)
    return ctx, plugin_util.experiment_id(request.environ)


def list_records(data_provider, ctx, experiment_id):
    """{run: [TagEntry]} for every gradlens tag; bad metadata -> error entry."""
    mapping = data_provider.list_tensors(
        ctx, experiment_id=experiment_id, plugin_name=metadata.PLUGIN_NAME
    )
    result = {}
    for run, tags in mapping.items():
        entries = []
        for tag, ts in sorted(tags.items()):
            try:
                record = metadata.parse_plugin_content(ts.plugin_content, tag)
                records.validate(record, tag)
                error = None
            except metadata.FormatError as e:
                record, error = None, str(e)
            except Exception as e:  # noqa: BLE001 - one bad record is an error entry, never a 500
                record, error = None, "gradlens record %r: unreadable metadata (%s)" % (tag, type(e).__name__)
            entries.append(
                TagEntry(run, tag, record, error, ts.max_step, ts.max_wall_time)
            )
        result[run] = entries
    return result


class Source:
    """Everything the analysis reads, for one experiment of one provider.

    Build one per request (it memoizes the tag listing for its lifetime)
    and share one ``Cache`` between requests.
    """

    DOWNSAMPLE_ALL = DOWNSAMPLE_ALL

    def __init__(self, data_provider, ctx=None, experiment_id="", cache=None, tails=None):
        self.data_provider = data_provider
        self.ctx = ctx if ctx is not None else tb_context.RequestContext()
        self.experiment_id = experiment_id
        self.cache = cache if cache is not None else Cache()
        self.tails = tails  # live_tail.LiveTails of a local logdir, or None
        self._records = None
        self._scalars = None
        self._location = None

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

    def cached(self, name, entry, compute, pool="derived"):
        """``compute()`` memoized under (name, data location, run, tag) until the tag grows."""
        key = (name, self.location, entry.run, entry.tag)
        return self.cache.get(key, entry.version, compute, pool)

    def series(self, run, tag):
        """The Series of a float record (cached).

        Raises NotFoundError for an unknown run or tag, and
        InvalidArgumentError for a tag this version cannot read (its
        metadata error, a ``dtypes`` record, or a tensor of the wrong shape).
        """
        entry = self.entry(run, tag)
        _require_readable(entry)
        if entry.kind in metadata.JSON_KINDS:
            raise errors.InvalidArgumentError(
                "tag %r holds %s JSON, not a series" % (tag, entry.kind)
            )
        key = ("series", self.location, entry.run, entry.tag)
        if not self.cache.holds(key, entry.version, "data"):
            if self.tails is not None and self.cache.holds(key, None, "data"):  # read before: it grows
                found = self.tails.series(entry, Series)
                if found is not None:  # the new records only (live_tail)
                    self.cache.put(key, entry.version, found, "data")
                    return found
            batch_reading.read_alike(
                self, entry,
                lambda e: not self.cache.holds(("series", self.location, e.run, e.tag), e.version, "data"),
                lambda e, series: self.cache.put(("series", self.location, e.run, e.tag), e.version, series, "data"),
                Series)
        return self.cached("series", entry, lambda: self._read_series(entry), "data")

    def sampled_series(self, run, tag, max_steps):
        """A Series of at most ``max_steps`` steps of a float record, read with
        the data provider's own downsampling (the last step and a uniform
        sample of the others, as TensorBoard reads its histograms), cached per
        ``max_steps``.  For views that need no single step exactly (the log2
        histogram heatmap): a cold read of a large record costs a fraction.
        """
        entry = self.entry(run, tag)
        _require_readable(entry)
        if entry.kind in metadata.JSON_KINDS:
            raise errors.InvalidArgumentError(
                "tag %r holds %s JSON, not a series" % (tag, entry.kind)
            )
        return self.cached(
            ("sampled_series", int(max_steps)), entry,
            lambda: self._read_series(entry, int(max_steps)), "data",
        )

    def _read_tensor_points(self, entry, downsample):
        flt = tb_provider.RunTagFilter(runs=[entry.run], tags=[entry.tag])
        data = self.data_provider.read_tensors(
            self.ctx,
            experiment_id=self.experiment_id,
            plugin_name=metadata.PLUGIN_NAME,
            downsample=downsample,
            run_tag_filter=flt,
        )
        points = data.get(entry.run, {}).get(entry.tag)
        if points is None:
            raise errors.NotFoundError("run %r has no gradlens tag %r" % (entry.run, entry.tag))
        return points

    def _read_series(self, entry, downsample=DOWNSAMPLE_ALL):
        record = entry.record
        n_rows, n_cols = len(record.rows), len(record.columns)
        try:
            points = self._read_tensor_points(entry, downsample)
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
            points = self._read_tensor_points(entry, budget)
            sampled = True
        return batch_reading.series_of_points(entry, points, sampled, Series)

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

    def point_errors(self, runs=None):
        """[{"run","tag","error"}] of the dtype maps, lens statuses and advice of
        ``runs`` (default: all) that cannot be read, one per tag (the first
        unreadable point; the others of the tag are still served)."""
        readers = {metadata.DTYPES: self.dtype_maps, metadata.LENS_STATUS: self.lens_statuses,
                   metadata.ADVICE: self.advice}
        out = []
        for run in self.runs() if runs is None else runs:
            for entry in self.entries(run):
                if entry.kind in readers:
                    bad = [p["error"] for p in readers[entry.kind](run, entry.tag) if "error" in p]
                    if bad:
                        more = " (and %d more point(s))" % (len(bad) - 1) if len(bad) > 1 else ""
                        out.append({"run": run, "tag": entry.tag, "error": bad[0] + more})
        return out

    def _json_points(self, run, tag, kind, key, parse):
        entry = self.entry(run, tag)
        _require_readable(entry)
        if entry.kind != kind:
            raise errors.InvalidArgumentError("tag %r is not a %s record" % (tag, kind))

        def read():
            points = self._read_tensor_points(entry, DOWNSAMPLE_ALL)
            return _JsonPoints(_decode_json_point(p, key, parse) for p in points)

        return list(self.cached(kind, entry, read))

    def scalar_listing(self):
        """{run: {tag: ScalarTimeSeries}} of TensorBoard's scalar summaries."""
        if self._scalars is None:
            self._scalars = self.data_provider.list_scalars(
                self.ctx, experiment_id=self.experiment_id, plugin_name=SCALARS_PLUGIN
            )
        return self._scalars

    def scalars(self, run, tag):
        """(steps int64, wall_times float64, values float64) of a scalar tag."""
        ts = self.scalar_listing().get(run, {}).get(tag)
        if ts is None:
            raise errors.NotFoundError("run %r has no scalar tag %r" % (run, tag))
        entry = TagEntry(run, tag, max_step=ts.max_step, last_wall_time=ts.max_wall_time)

        def read():
            flt = tb_provider.RunTagFilter(runs=[run], tags=[tag])
            data = self.data_provider.read_scalars(
                self.ctx,
                experiment_id=self.experiment_id,
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

        return tuple(self.cached("scalars", entry, read, "data"))


class _Arrays(tuple):
    """A tuple of arrays with ``nbytes`` (for the Cache)."""

    @property
    def nbytes(self):
        return sum(a.nbytes for a in self)


class _JsonPoints(list):
    @property
    def nbytes(self):
        return 1024 * (1 + len(self))


def _require_readable(entry):
    if entry.record is None:
        raise errors.InvalidArgumentError(entry.error or "unreadable gradlens record")


def _decode_json_point(point, key, parse):
    """{"step", "wall_time", key: parse(JSON) or None [, "error"]} of one point."""
    out = {"step": int(point.step), "wall_time": float(point.wall_time), key: None}
    try:
        raw = np.asarray(point.numpy).item()
        if isinstance(raw, bytes):
            raw = raw.decode("utf-8")
        out[key] = parse(json.loads(raw))
    except Exception as e:  # noqa: BLE001 - one bad point is an error entry, never a 500
        what = {"map": "dtype map", "status": "lens status"}.get(key, key)
        detail = str(e) if isinstance(e, (ValueError, TypeError)) else type(e).__name__
        out["error"] = "unreadable %s at step %d: %s" % (what, point.step, detail[:300])
    return out

"""The gradlens summary format, shared by the writer and every reader.

TensorFlow-free: the TensorBoard plugin, the command line and the writer all
import this module.

A gradlens record is one TensorBoard tensor summary:

* ``SummaryMetadata.plugin_data.plugin_name == "gradlens"``;
* ``SummaryMetadata.data_class == DATA_CLASS_TENSOR`` (mandatory: without it
  neither TensorBoard loader returns the tag);
* ``plugin_data.content`` is UTF-8 JSON::

      {"version": 1, "kind": "grad_stats",
       "rows": ["dense/kernel", ...],      # variable or layer paths
       "columns": ["l2_norm", ...],        # statistic or metric names
       ...kind-specific keys (see KINDS)}

* the tensor is float32 ``[len(rows), len(columns)]``, one per step per tag
  (the ``JSON_KINDS``, ``dtypes``, ``lens_status`` and ``advice``, hold a
  scalar UTF-8 JSON string).

TensorBoard keeps the metadata of a tag's first event, so rows and columns of
a tag never change: the writer derives the tag from a digest of them
(``tag_for``), and a changed variable set gets a new tag.
"""

import collections
import hashlib
import json

from tensorboard.compat.proto import summary_pb2

from tb_gradlens.metadata.kinds import (  # noqa: F401 (metadata.<name>)
    ACTIVATION_DIVERGENCE, ADVICE, DIVERGENCE, DIVERGENCE_COLUMNS, DIVERGENCE_COLUMNS_V1,
    DIVERGENCE_METRICS, DTYPES, DTYPE_EXPONENT_LIMITS, FORMAT_VERSION, GRADIENT_INDICES,
    GRADIENT_INDICES_COLUMNS, GRAD_HISTOGRAM, GRAD_STATS, GRAD_STATS_COLUMNS, HALF_BATCH_REL_ERROR,
    HALF_BATCH_REL_L2, HISTOGRAM_COLUMNS, HISTOGRAM_SPECIAL_COLUMNS, JSON_KINDS, KINDS,
    KIND_COLUMNS, KIND_COLUMNS_V1, LENS_STATUS, LOSS_COMPARISON, LOSS_COMPARISON_COLUMNS,
    LOSS_COMPARISON_COLUMNS_V1, MAX_EXPONENT, MIN_EXPONENT, NONFINITE_REPLAY,
    NONFINITE_REPLAY_COLUMNS, N_EXP_BINS, OPTIMIZER_STEP, OPTIMIZER_STEP_COLUMNS, STABLE_REL_ERROR,
    STABLE_REL_L2, UPDATE_STATS, UPDATE_STATS_COLUMNS, kind_columns,
)

PLUGIN_NAME = "gradlens"


class FormatError(ValueError):
    """A gradlens record this code cannot read (malformed or newer)."""

    def __init__(self, message, tag=None):
        self.tag = tag
        prefix = "gradlens record %r: " % tag if tag is not None else ""
        super().__init__(prefix + message)


class RecordMetadata:
    """The parsed plugin content of one gradlens tag.

    Attributes:
      version: format version the record was written with.
      kind: one of KINDS.
      rows: tuple of row names (variable or layer paths).
      columns: tuple of column names.
      extras: dict of the kind-specific keys (e.g. ``reference``).
    """

    __slots__ = ("version", "kind", "rows", "columns", "extras")

    def __init__(self, kind, rows, columns, extras=None, version=FORMAT_VERSION):
        self.version = version
        self.kind = kind
        self.rows = tuple(rows)
        self.columns = tuple(columns)
        self.extras = dict(extras or {})

    def to_json(self):
        """The JSON-ready dict of this record (what ``content`` holds)."""
        out = dict(self.extras)
        out.update(
            version=self.version,
            kind=self.kind,
            rows=list(self.rows),
            columns=list(self.columns),
        )
        return out

    def __eq__(self, other):
        return isinstance(other, RecordMetadata) and self.to_json() == other.to_json()

    def __repr__(self):
        return "RecordMetadata(kind=%r, rows=%d, columns=%d, version=%d)" % (
            self.kind,
            len(self.rows),
            len(self.columns),
            self.version,
        )


def serialize_content(record):
    """UTF-8 JSON bytes of a RecordMetadata (key order fixed for digests)."""
    return json.dumps(record.to_json(), sort_keys=True, ensure_ascii=False).encode(
        "utf-8"
    )


def create_summary_metadata(record, display_name=None, description=None):
    """A ``SummaryMetadata`` proto for one gradlens tag.

    Args:
      record: a RecordMetadata.
      display_name: optional display name.
      description: optional description.
    """
    validate(record)
    return summary_pb2.SummaryMetadata(
        display_name=display_name or "",
        summary_description=description or "",
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=serialize_content(record)
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


def tag_for(name, record):
    """The tag of a record: ``<name>/<kind>/<digest of rows and columns>``.

    The digest makes a tag's metadata immutable, as TensorBoard requires:
    another variable set (or another comparison) is another tag.
    """
    digest = hashlib.sha1(serialize_content(record)).hexdigest()[:8]
    return "%s/%s/%s" % (name, record.kind, digest)


TagParts = collections.namedtuple("TagParts", ("name", "kind", "digest"))


def parse_tag(tag):
    """The ``TagParts(name, kind, digest)`` of a tag made by ``tag_for``
    (the name may hold "/" itself).  A tag of another shape, with fewer
    than two "/" (e.g. a scalar's), is all name: kind and digest are None."""
    if tag.count("/") < 2:
        return TagParts(tag, None, None)
    return TagParts(*tag.rsplit("/", 2))


def tag_name(tag, kind):
    """The name a tag was made from (``tag_for``): ``"model_vs_float32"`` of
    ``"model_vs_float32/divergence/1a2b3c4d"``; the whole tag when it is not
    a tag of ``kind`` (``parse_tag``)."""
    parts = parse_tag(tag)
    return parts.name if kind and parts.kind == kind else tag


def validate(record, tag=None):
    """Raise FormatError unless ``record`` is a well-formed known record."""
    if record.kind not in KINDS:
        raise FormatError("unknown kind %r" % (record.kind,), tag)
    for what, names in (("rows", record.rows), ("columns", record.columns)):
        if not all(isinstance(n, str) for n in names):
            raise FormatError("%s must be a list of strings" % what, tag)
    expected = kind_columns(record.kind, record.version)
    if record.kind not in JSON_KINDS and record.columns != tuple(expected):
        raise FormatError(
            "kind %r must have columns %s, not %s"
            % (record.kind, list(expected), list(record.columns)),
            tag,
        )


def parse_plugin_content(content, tag=None):
    """Parse ``plugin_data.content`` bytes into a RecordMetadata.

    Reads every version up to FORMAT_VERSION.  Raises FormatError, naming
    the tag, for content that is not JSON, misses a field, has a wrong
    type, or was written by a newer tb_gradlens (upgrade to read it).
    """
    if not isinstance(content, (bytes, bytearray)):
        raise FormatError("content must be bytes, not %s" % type(content).__name__, tag)
    try:
        obj = json.loads(bytes(content).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError("content is not UTF-8 JSON (%s)" % e, tag) from None
    except RecursionError:
        raise FormatError("content is JSON nested too deeply", tag) from None
    if not isinstance(obj, dict):
        raise FormatError("content must be a JSON object", tag)
    version = obj.get("version")
    if type(version) is not int or version < 1:
        raise FormatError("missing or invalid format version %r" % (version,), tag)
    if version > FORMAT_VERSION:
        raise FormatError(
            "written in format version %d, newer than this tb_gradlens reads (%d): "
            "upgrade tb_gradlens" % (version, FORMAT_VERSION),
            tag,
        )
    for key in ("kind", "rows", "columns"):
        if key not in obj:
            raise FormatError("missing field %r" % key, tag)
    if not isinstance(obj["kind"], str):
        raise FormatError("kind must be a string", tag)
    if not isinstance(obj["rows"], list) or not isinstance(obj["columns"], list):
        raise FormatError("rows and columns must be lists", tag)
    extras = {
        k: v for k, v in obj.items() if k not in ("version", "kind", "rows", "columns")
    }
    record = RecordMetadata(obj["kind"], obj["rows"], obj["columns"], extras, version)
    validate(record, tag)
    return record


def parse_summary_metadata(metadata, tag=None):
    """Parse a ``SummaryMetadata`` proto (or the plugin content bytes)."""
    if isinstance(metadata, (bytes, bytearray)):
        return parse_plugin_content(metadata, tag)
    if metadata.plugin_data.plugin_name != PLUGIN_NAME:
        raise FormatError(
            "not a gradlens record (plugin %r)" % metadata.plugin_data.plugin_name, tag
        )
    return parse_plugin_content(metadata.plugin_data.content, tag)


def check_tensor_shape(record, shape, tag=None):
    """Raise FormatError unless a tensor of ``shape`` fits ``record``."""
    shape = tuple(int(d) for d in shape)
    expected = () if record.kind in JSON_KINDS else (len(record.rows), len(record.columns))
    if shape != expected:
        raise FormatError(
            "tensor shape %s does not match its metadata %s" % (list(shape), list(expected)),
            tag,
        )

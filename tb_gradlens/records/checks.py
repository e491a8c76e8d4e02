"""Type checks shared by the record readers (``FormatError`` naming the tag)."""

import numbers

from tb_gradlens import metadata

FormatError = metadata.FormatError
UNKNOWN = "unknown"


def is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def optional_float(value):
    return None if value is None else float(value)


def optional_str(obj, key, tag, side):
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise FormatError("%s.%s must be a string" % (side, key), tag)
    return value


def str_list(value, record, key, tag, allow_none=False):
    ok = isinstance(value, list) and all(
        isinstance(x, str) or (allow_none and x is None) for x in value
    )
    if not ok or len(value) > len(record.rows):
        raise FormatError("%s must be a list of at most %d strings" % (key, len(record.rows)), tag)
    return value


def str_or_unknown(value):
    return UNKNOWN if value is None else str(value)

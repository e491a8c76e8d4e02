"""Binary floating-point formats: the one table of their limits.

TensorFlow-free.  The writer (numerics: ULP spacing, histogram bins), the
reader (alert thresholds) and the tab (histogram limit lines, sent in the
histogram record's extras) all take dtype limits from here.

For a format with ``mantissa_bits`` p explicit fraction bits:

* normal numbers have exponents ``min_normal .. max`` (value in
  ``[2^e, 2^(e+1))``), spacing ``2^(e - p)``;
* subnormals lie below ``2^min_normal`` with spacing
  ``2^(min_normal - p)``; the smallest is ``2^min_subnormal`` with
  ``min_subnormal = min_normal - p``;
* ``unit_roundoff = 2^-(p + 1)``: the largest relative error of one
  round-to-nearest;
* stored (IEEE-754 binary interchange formats, bfloat16 alike): a sign bit,
  an exponent field of ``exponent_bits`` holding ``e + bias`` with
  ``bias = max`` (field 0: zero and subnormals, all ones: Inf and NaN),
  then the ``p`` fraction bits.
"""

import collections

FloatFormat = collections.namedtuple(
    "FloatFormat", ("name", "mantissa_bits", "min_normal", "min_subnormal", "max")
)


def _format(name, mantissa_bits, min_normal, max_exponent):
    return FloatFormat(name, mantissa_bits, min_normal, min_normal - mantissa_bits, max_exponent)


FORMATS = {
    f.name: f
    for f in (
        _format("float64", 52, -1022, 1023),
        _format("float32", 23, -126, 127),
        _format("bfloat16", 7, -126, 127),
        _format("float16", 10, -14, 15),
    )
}

# Formats whose arithmetic tb_gradlens calls "low precision" (16 bits).
LOW_PRECISION = ("bfloat16", "float16")


def get(name):
    """The FloatFormat of a dtype name; ValueError for an unknown one."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(
            "tb_gradlens: no float format %r (known: %s)" % (name, ", ".join(FORMATS))
        ) from None


def unit_roundoff(name):
    """u = 2^-(p + 1): the largest relative error of one rounding to ``name``."""
    return 2.0 ** -(get(name).mantissa_bits + 1)


def exponent_limits(names=("float32", "bfloat16", "float16")):
    """{name: {"min_subnormal", "min_normal", "max"}}: floor(log2) of the
    smallest subnormal, the smallest normal and the largest finite value
    (the lines a histogram view draws)."""
    return {
        n: {"min_subnormal": get(n).min_subnormal, "min_normal": get(n).min_normal, "max": get(n).max}
        for n in names
    }


def bias(name):
    """The exponent bias: 2^e is stored with exponent field e + bias (= max)."""
    return get(name).max


def exponent_bits(name):
    """Width of the exponent field: the all-ones field 2 * bias + 1 is Inf/NaN."""
    return (2 * bias(name) + 1).bit_length()


def total_bits(name):
    """Storage width: sign, exponent field and fraction bits."""
    return 1 + exponent_bits(name) + get(name).mantissa_bits

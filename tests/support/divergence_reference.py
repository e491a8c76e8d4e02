"""Independent float64 NumPy recomputations of the divergence metrics (tests)."""

import numpy as np

PRECISION = {"bfloat16": (7, -126), "float16": (10, -14), "float32": (23, -126), "float64": (52, -1022)}


def np_spacing(x, dtype):
    """Spacing of ``dtype`` at |x| (float64), from frexp."""
    p, emin = PRECISION[dtype]
    x = np.abs(np.asarray(x, np.float64))
    _, e = np.frexp(x)
    e = np.where(x == 0, emin, e - 1)  # floor(log2 x) = frexp exponent - 1
    return np.ldexp(1.0, np.maximum(np.maximum(e, emin) - p, -1022))


def np_divergence(c, r, dtype, floor_fraction=0.1):
    """The nine divergence metrics (README "Precision lens"), in float64."""
    c = np.asarray(c).astype(np.float64).ravel()
    r = np.asarray(r).astype(np.float64).ravel()
    finite = np.isfinite(c) & np.isfinite(r)
    nonfinite = float(np.sum(~finite))
    c, r = c[finite], r[finite]
    if c.size == 0:
        return np.array([np.nan] * 8 + [nonfinite])
    d = c - r
    nd, nr, nc = np.linalg.norm(d), np.linalg.norm(r), np.linalg.norm(c)
    rel_l2 = nd / nr if nr > 0 else (np.inf if nd > 0 else 0.0)
    norm_ratio = nc / nr if nr > 0 else (np.inf if nc > 0 else 1.0)
    if nc > 0 and nr > 0:
        cosine = np.dot(c, r) / (nc * nr)
    else:
        cosine = 1.0 if nc == 0 and nr == 0 else 0.0
    floor = floor_fraction * np.sqrt(np.mean(r * r))
    denom = np.maximum(np.abs(r), floor)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(np.abs(d) == 0, 0.0, np.abs(d) / denom)
    ulp = d / np_spacing(denom, dtype)
    significant = np.abs(r) > floor
    flips = np.sum(significant & (np.sign(c) != np.sign(r)))
    sign_flip = flips / np.sum(significant) if np.sum(significant) else 0.0
    flush = np.sum((r != 0) & (c == 0)) / c.size
    return np.array(
        [rel_l2, cosine, norm_ratio, np.max(np.abs(d)), np.max(rel),
         np.sqrt(np.mean(ulp * ulp)), sign_flip, flush, nonfinite]
    )


def records_of_kind(records, run, kind):
    """{tag: (RecordMetadata, data)} of one kind in one run (readback format)."""
    return {tag: v for tag, v in records[run].items() if v[0].kind == kind}

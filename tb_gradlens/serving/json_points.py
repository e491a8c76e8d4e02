"""The JSON records (dtype maps, lens statuses, advice): one point per logged step.

TensorFlow-free.  One unreadable point is an error entry of its own; the
others of its tag are still served (``unreadable_points`` names the first
of each tag).
"""

import json

import numpy as np

from tb_gradlens import metadata


def json_points(points, key, parse):
    """[{"step", "wall_time", key[, "error"]}] of a JSON record's tensor
    ``points``, ``key`` holding ``parse(JSON)`` of each (sized for the cache)."""
    return _JsonPoints(_decode_json_point(p, key, parse) for p in points)


def unreadable_points(source, runs=None):
    """[{"run","tag","error"}] of the dtype maps, lens statuses and advice of
    ``runs`` (default: all) that cannot be read, one per tag (the first
    unreadable point; the others of the tag are still served)."""
    readers = {metadata.DTYPES: source.dtype_maps, metadata.LENS_STATUS: source.lens_statuses,
               metadata.ADVICE: source.advice}
    out = []
    for run in source.runs() if runs is None else runs:
        for entry in source.entries(run):
            if entry.kind in readers:
                bad = [p["error"] for p in readers[entry.kind](run, entry.tag) if "error" in p]
                if bad:
                    more = " (and %d more point(s))" % (len(bad) - 1) if len(bad) > 1 else ""
                    out.append({"run": run, "tag": entry.tag, "error": bad[0] + more})
    return out


class _JsonPoints(list):
    @property
    def nbytes(self):
        return 1024 * (1 + len(self))


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

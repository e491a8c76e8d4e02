"""The sentences of the answers (``answers``): segments, numbers as the tab writes them.

TensorFlow-free.  A sentence is a list of segments ``{"text", "role"?}``: a
role marks a name or a number the tab sets apart (``<strong class="gl-ROLE">``)
and the command line prints as text.  Numbers are written as the tab's
``format.js`` writes them, so a sentence reads the same in both.
"""

import math
from typing import Any
from typing import Dict
from typing import List
from typing import Optional
from typing import Sequence

QUESTIONS = (
    ("beyond_noise", "Beyond float32's own noise?"),
    ("diverges_most", "Which part diverges most?"),
    ("broken", "Any NaN, None or all-zero gradient?"),
    ("keep_float32", "What to keep in float32?"),
    ("over_training", "Better or worse over training?"),
)
QUESTION = dict(QUESTIONS)

HOW_TO_COMPARE = ("compare a 16-bit step with float32 with GradLensCallback (it compares every 100th step "
                  "from step 100) or tb_gradlens.keras.GradLens(...).compare_keras(model, x, y, step)")
HOW_TO_ADVISE = ("run the precision advisor once, tb_gradlens.advise(model, (x, y), log_dir=...), or during "
                 "training with GradLensCallback(..., advisor=tb_gradlens.Advisor((x, y)))")




def segment(text: Any, role: Optional[str] = None) -> Dict[str, str]:
    """One piece of a sentence; ``role`` names what it is (the tab sets it apart)."""
    out = {"text": str(text)}
    if role:
        out["role"] = role
    return out


def segments(parts: Sequence[Any]) -> List[Dict[str, str]]:
    """Strings and segments as segments (neighbouring plain strings joined)."""
    out: List[Dict[str, str]] = []
    for part in flatten(parts):
        seg = segment(part) if isinstance(part, str) else dict(part)
        if not seg["text"]:
            continue
        if "role" not in seg and out and "role" not in out[-1]:
            out[-1] = {"text": out[-1]["text"] + seg["text"]}
        else:
            out.append(seg)
    return out


def answer(qid: str, verdict: str, short: str, parts: Sequence[Any], details: Sequence[str] = (),
           **extra: Any) -> Dict[str, Any]:
    """An answer (see the module doc)."""
    sentence = segments(parts)
    out = {"id": qid, "question": QUESTION.get(qid, ""), "verdict": verdict, "short": short,
           "sentence": sentence, "text": "".join(s["text"] for s in sentence).strip(),
           "details": [d for d in details if d]}
    out.update(extra)
    return out


def fmt(value: Any) -> str:
    """A number as the tab's ``fmt`` writes it: 4 significant digits, integers
    as they are, exponent notation outside [1e-3, 1e5)."""
    if value is None:
        return "NaN"
    x = float(value)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e9:
        return str(int(x))
    if 1e-3 <= abs(x) < 1e5:
        return _shortest(precision(x, 4))
    return _exponent(x, 3)


def fmt_ratio(value: Any) -> str:
    """A ratio as the tab's ``fmtRatio`` writes it: 2 significant digits, 3 where
    2 would make a ratio that is not whole look whole ("1.02", not "1")."""
    x = float(value)
    if not math.isfinite(x):
        return fmt(x)
    if x == 0:
        return "0"
    if not 1e-3 <= abs(x) < 1e5:
        return _exponent(x, 1)
    two = precision(x, 2)
    if two.is_integer() and two != x and abs(x) < 100:
        return _shortest(precision(x, 3))
    return _shortest(two)


def _digits(x: float, digits: int):
    """(sign, mantissa digits, exponent) of ``x`` to ``digits`` significant digits
    as JavaScript's toPrecision/toExponential round: the exact value, a tie
    away from zero (Python's "%g" rounds a tie to even)."""
    import decimal

    exact = decimal.Decimal(abs(x))
    exponent = exact.adjusted()
    scaled = exact.scaleb(digits - 1 - exponent).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP)
    if scaled >= 10 ** digits:
        scaled, exponent = (scaled / 10).quantize(decimal.Decimal(1), rounding=decimal.ROUND_HALF_UP), exponent + 1
    return ("-" if x < 0 else ""), str(int(scaled)), exponent


def precision(x: float, digits: int) -> float:
    """``Number(x.toPrecision(digits))``."""
    sign, mantissa, exponent = _digits(x, digits)
    return float("%s%s.%se%d" % (sign, mantissa[0], mantissa[1:] or "0", exponent))


def _shortest(x: float) -> str:
    return str(int(x)) if x.is_integer() else repr(x)


def _exponent(x: float, digits: int) -> str:
    """``x.toExponential(digits)``: "1.235e+5"."""
    sign, mantissa, exponent = _digits(x, digits + 1)
    return "%s%s%s%se%s%d" % (sign, mantissa[0], "." if digits else "", mantissa[1:], "-" if exponent < 0 else "+",
                              abs(exponent))


def percent(x: float) -> str:
    return "%s%%" % _shortest(precision(100 * x, 2)) if math.isfinite(x) else fmt(x)


def names(names: Sequence[str], limit: int = 4) -> str:
    names = list(names)
    if len(names) <= limit:
        return ", ".join(names)
    return "%s and %d more" % (", ".join(names[:limit]), len(names) - limit)


def capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def first_clause(text: str) -> str:
    """The first clause of a writer's reason (before a colon, a parenthesis or
    a semicolon): a plain sentence of it; the whole goes to the details."""
    cut = len(text)
    for mark in (": ", " (", "; ", ". "):
        i = text.find(mark)
        if 0 < i < cut:
            cut = i
    return text[:cut].rstrip(".")



def flatten(parts):
    """Nested lists of parts as one list."""
    out = []
    for p in parts:
        out.extend(flatten(p) if isinstance(p, (list, tuple)) else [p])
    return out

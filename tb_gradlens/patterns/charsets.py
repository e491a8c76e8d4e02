"""Name patterns: what one character item matches, as an explicit RE2 class.

A set of code points is a sorted, merged list of inclusive ``(low, high)``
ranges.  ``char_set`` asks Python's ``re`` which code points an item
matches (Unicode classes from one scan of every code point, case folding
from ``re``'s own case tables), ``write_class`` writes the set for RE2.

TensorFlow-free.
"""

import re

import _sre as _sre_c  # re's own case tables

from tb_gradlens.patterns.errors import PatternError

_MAX_CODE = 0x10FFFF
NEVER = "[^\\x{0}-\\x{10ffff}]"
_CATEGORY_SOURCE = {
    "CATEGORY_DIGIT": r"\d",
    "CATEGORY_NOT_DIGIT": r"\D",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w",
    "CATEGORY_NOT_WORD": r"\W",
}


def _merge(ranges):
    out = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1] + 1:
            if high > out[-1][1]:
                out[-1] = (out[-1][0], high)
        else:
            out.append((low, high))
    return out


def _complement(ranges):
    out, start = [], 0
    for low, high in ranges:
        if low > start:
            out.append((start, low - 1))
        start = high + 1
    if start <= _MAX_CODE:
        out.append((start, _MAX_CODE))
    return out


def _subtract(ranges, removed):
    return _complement(_merge(_complement(ranges) + list(removed)))


_TABLES = {}


def _every_code_point():
    text = _TABLES.get("all")
    if text is None:
        text = _TABLES["all"] = "".join(map(chr, range(_MAX_CODE + 1)))
    return text


def _category(category, ascii_only):
    """The code points ``re`` matches with a category (``\\w`` ...), as ranges."""
    key = (category, ascii_only)
    found = _TABLES.get(key)
    if found is None:
        source = _CATEGORY_SOURCE.get(category)
        if source is None:
            raise PatternError("unsupported character category %s" % category)
        regex = re.compile(source + "+", re.ASCII if ascii_only else 0)
        found = _TABLES[key] = [(m.start(), m.end() - 1) for m in regex.finditer(_every_code_point())]
    return found


def _cased(ascii_only):
    """The code points case folding can touch (``re``'s own case tables), as a
    string: every other code point is matched the same with and without
    IGNORECASE."""
    key = ("cased", ascii_only)
    found = _TABLES.get(key)
    if found is None:
        iscased = _sre_c.ascii_iscased if ascii_only else _sre_c.unicode_iscased
        tolower = _sre_c.ascii_tolower if ascii_only else _sre_c.unicode_tolower
        codes = set()
        for code in range(0x80 if ascii_only else _MAX_CODE + 1):
            lower = tolower(code)
            if lower != code or iscased(code):
                codes.add(code)
                codes.add(lower)
        found = _TABLES[key] = "".join(map(chr, sorted(codes)))
    return found


def _char(code):
    return "\\U%08x" % code


def _item_source(name, av):
    """``re`` source of one character item of the parse tree (or of a class member)."""
    if name == "LITERAL":
        return _char(av)
    if name == "NOT_LITERAL":
        return "[^%s]" % _char(av)
    if name == "ANY":
        return "."
    if name == "RANGE":
        return "%s-%s" % (_char(av[0]), _char(av[1]))
    if name == "CATEGORY":
        source = _CATEGORY_SOURCE.get(str(av))
        if source is None:
            raise PatternError("unsupported character category %s" % av)
        return source
    if name == "IN":
        members, negate = [], ""
        for member_op, member_av in av:
            if str(member_op) == "NEGATE":
                negate = "^"
            else:
                members.append(_item_source(str(member_op), member_av))
        return "[%s%s]" % (negate, "".join(members))
    raise PatternError("unsupported pattern item %s" % name)


def _plain_set(name, av, flags):
    """What one item matches without IGNORECASE."""
    if name == "LITERAL":
        return [(av, av)]
    if name == "NOT_LITERAL":
        return _complement([(av, av)])
    if name == "ANY":
        return [(0, _MAX_CODE)] if flags & re.DOTALL else _complement([(10, 10)])
    if name == "RANGE":
        if av[0] > av[1]:
            raise PatternError("invalid pattern item: bad character range")  # pragma: no cover - the parser refuses it
        return [(av[0], av[1])]
    if name == "CATEGORY":
        return list(_category(str(av), bool(flags & re.ASCII)))
    if name == "IN":
        members, negate = [], False
        for member_op, member_av in av:
            if str(member_op) == "NEGATE":
                negate = True
            else:
                members.extend(_plain_set(str(member_op), member_av, flags))
        members = _merge(members)
        return _complement(members) if negate else members
    raise PatternError("unsupported pattern item %s" % name)


def char_set(name, av, flags):
    """The code points ``re`` matches with one character item under ``flags``."""
    found = _merge(_plain_set(name, av, flags))
    if not flags & re.IGNORECASE:
        return found
    cased = _cased(bool(flags & re.ASCII))
    try:
        item = re.compile(_item_source(name, av), flags)
    except re.error as e:  # pragma: no cover - the parser refused it first
        raise PatternError("invalid pattern item: %s" % e) from None
    folded = [(ord(c), ord(c)) for c in item.findall(cased)]
    return _merge(_subtract(found, [(ord(c), ord(c)) for c in cased]) + folded)


def write_class(ranges):
    if not ranges:
        return NEVER
    if len(ranges) == 1 and ranges[0][0] == ranges[0][1]:
        return "\\x{%x}" % ranges[0][0]
    if len(ranges) == 2 and ranges[0][0] == ranges[0][1] and ranges[1] == (ranges[0][0] + 32,) * 2 \
            and 0x41 <= ranges[0][0] <= 0x5A:
        # RE2 reads a class [Kk] as a case-folded k, which, merged into a
        # neighbouring class, brings the rest of k's fold orbit with it (the
        # Kelvin sign; long s for [Ss]): an alternation keeps it two letters.
        return "(?:\\x{%x}|\\x{%x})" % (ranges[0][0], ranges[1][0])
    return "[%s]" % "".join(
        ("\\x{%x}" % low) if low == high else ("\\x{%x}-\\x{%x}" % (low, high)) for low, high in ranges)

"""Name patterns, part one: Python regex syntax translated into RE2 syntax.

The pattern is parsed by Python's own regex parser (so the syntax and its
error messages are Python's) and written out again for RE2 with Python's
meaning: every character item becomes an explicit RE2 class of the code
points Python's ``re`` matches with it (case folding, Unicode ``\\w``/``\\d``/
``\\s`` and ``.`` decided by ``re`` itself), and the zero-width assertions RE2
cannot say with Python's meaning (``$`` before a final newline, Unicode
``\\b``/``\\B``) are read from markers put between the name's characters
(``matching.Matcher`` writes them; ``Translation.markers`` says which).
Constructs whose meaning needs backtracking are refused.

TensorFlow-free.
"""

import re
import warnings

try:  # Python >= 3.11
    from re import _constants as _sre
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.9/3.10
    import sre_constants as _sre
    import sre_parse as _sre_parse

from tb_gradlens.patterns.charsets import NEVER, char_set, write_class
from tb_gradlens.patterns.errors import PatternError, PatternTooComplex  # noqa: F401 - re-exported

MAX_PATTERN_LENGTH = 1000
MAX_STATES = 4000
# The marker characters between a name's characters (context mode): "\n" where
# a newline-anchor holds, "a" / "!" (word / not) so that RE2's ASCII \b there is
# Python's \b at that position.
MARKER_CLASS = "[\\n!a]"


_UNSUPPORTED = {
    "GROUPREF": "backreferences",
    "GROUPREF_EXISTS": "conditional groups",
    "ASSERT": "lookahead/lookbehind assertions",
    "ASSERT_NOT": "lookahead/lookbehind assertions",
    "POSSESSIVE_REPEAT": "possessive quantifiers",
    "ATOMIC_GROUP": "atomic groups",
}
_CHAR_FLAGS = re.IGNORECASE | re.DOTALL | re.ASCII


class Translation:
    """A pattern in RE2 syntax and what its names need.

    ``source``: the RE2 pattern; ``empty_source``: the same for the empty name
    (Python's ``\\b`` and ``\\B`` never hold there; RE2's ``\\B`` does).
    ``markers``: None (the name is searched as it is) or a tuple
    ``(newline_after, dollar, boundary)`` saying what the markers between
    characters encode: ``newline_after`` (multiline ``^``), ``dollar`` (None,
    ``"m"`` multiline ``$``, ``"single"`` Python's ``$``: at the end or before
    a final newline), ``boundary`` (None, ``"unicode"`` or ``"ascii"``).
    """

    def __init__(self, pattern):
        if not isinstance(pattern, str):
            raise PatternError("a pattern must be text")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise PatternError(
                "pattern of %d characters; at most %d are accepted" % (len(pattern), MAX_PATTERN_LENGTH))
        try:
            with warnings.catch_warnings():  # "possible set union" FutureWarnings: the meaning is Python's today
                warnings.simplefilter("ignore", FutureWarning)
                parsed = _sre_parse.parse(pattern, 0)
        except re.error as e:
            raise PatternError("invalid pattern: %s" % e) from None
        except (OverflowError, RecursionError, ValueError) as e:
            raise PatternError("invalid pattern: %s" % e) from None
        flags = parsed.state.flags
        try:
            if _states(parsed.data) + 1 > MAX_STATES:  # + the match state, as an NFA counts them
                raise PatternError(
                    "pattern too large: more than %d states once repeats are expanded" % MAX_STATES)
            self._newline_after = False
            self._dollars = set()
            self._boundaries = set()
            self._classes = {}
            _scan_assertions(self, parsed.data, flags)
            if len(self._dollars) > 1:
                raise PatternError("'$' both with and without the multiline flag in one pattern is not supported")
            if len(self._boundaries) > 1:
                raise PatternError("\\b or \\B both with and without the ASCII flag in one pattern is not supported")
            context = self._newline_after or self._dollars or self._boundaries
            self.markers = (self._newline_after, min(self._dollars, default=None),
                            min(self._boundaries, default=None)) if context else None
            self.source = self._sequence(parsed.data, flags, empty=False, counted=True)
            self._parsed = parsed
            self.empty_source = (self._sequence(parsed.data, flags, empty=True, counted=True)
                                 if self._boundaries else self.source)
        except RecursionError:
            raise PatternError("pattern nested too deeply") from None

    def written_out(self, empty):
        """The source with every counted repeat written out (RE2 refuses counts
        over 1,000, nested ones included)."""
        try:
            return self._sequence(self._parsed.data, self._parsed.state.flags, empty=empty, counted=False)
        except RecursionError:
            raise PatternError("pattern nested too deeply") from None

    # -- writing RE2 -----------------------------------------------------------

    def _sequence(self, items, flags, empty, counted):
        return "".join(self._item(op, av, flags, empty, counted) for op, av in items)

    def _item(self, op, av, flags, empty, counted):
        name = str(op)
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            found = self._class(name, av, flags)
            return (MARKER_CLASS + found + MARKER_CLASS) if self.markers else found
        if name == "AT":
            return _assertion(str(av), flags, empty)
        if name == "BRANCH":
            return "(?:%s)" % "|".join(self._sequence(alt, flags, empty, counted) for alt in av[1])
        if name == "SUBPATTERN":
            _group, add_flags, del_flags, items = av
            return "(?:%s)" % self._sequence(items, (flags | add_flags) & ~del_flags, empty, counted)
        low, high, items = av  # MAX_REPEAT / MIN_REPEAT: greedy or not, a search finds the same names
        body = "(?:%s)" % self._sequence(items, flags, empty, counted)
        unbounded = high == _sre.MAXREPEAT
        if counted:
            if unbounded:
                return body + ("*" if low == 0 else "+" if low == 1 else "{%d,}" % low)
            return body + ("?" if (low, high) == (0, 1) else "{%d,%d}" % (low, high))
        out = body * low
        if unbounded:
            return out + body + "*"
        optional = ""
        for _ in range(high - low):
            optional = "(?:%s%s)?" % (body, optional)
        return out + optional

    def _class(self, name, av, flags):
        char_flags = flags & _CHAR_FLAGS
        key = (name, repr(av), char_flags)
        found = self._classes.get(key)
        if found is None:
            found = self._classes[key] = write_class(char_set(name, av, char_flags))
        return found


def _states(items):
    """NFA states of ``items`` with counted repeats expanded (refusing what is unsupported)."""
    total = 0
    for op, av in items:
        name = str(op)
        if name in _UNSUPPORTED:
            raise PatternError("%s are not supported in name patterns" % _UNSUPPORTED[name])
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN", "AT"):
            total += 1
        elif name == "BRANCH":
            total += 1 + sum(_states(alt) for alt in av[1])
        elif name == "SUBPATTERN":
            total += _states(av[3])
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            low, high, body = av
            unbounded = high == _sre.MAXREPEAT
            copies = low if unbounded else high
            if copies >= MAX_STATES:
                raise PatternError("repetition count %d too large for a name pattern" % copies)
            inner = _states(body)
            total += (1 + inner * (low + 1)) if unbounded else ((high - low) * (inner + 1) + low * inner)
        else:
            raise PatternError("unsupported pattern item %s" % name)
        if total > MAX_STATES:
            return total
    return total


def _scan_assertions(translation, items, flags):
    for op, av in items:
        name = str(op)
        if name == "AT":
            at = str(av)
            if at == "AT_BEGINNING" and flags & re.MULTILINE:
                translation._newline_after = True
            elif at == "AT_END":
                translation._dollars.add("m" if flags & re.MULTILINE else "single")
            elif at in ("AT_BOUNDARY", "AT_NON_BOUNDARY"):
                translation._boundaries.add("ascii" if flags & re.ASCII else "unicode")
        elif name == "BRANCH":
            for alt in av[1]:
                _scan_assertions(translation, alt, flags)
        elif name == "SUBPATTERN":
            _scan_assertions(translation, av[3], (flags | av[1]) & ~av[2])
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            _scan_assertions(translation, av[2], flags)


def _assertion(at, flags, empty):
    if at == "AT_BEGINNING_STRING":
        return "\\A"
    if at == "AT_END_STRING":
        return "\\z"
    if at == "AT_BEGINNING":
        return "(?m:^)" if flags & re.MULTILINE else "\\A"
    if at == "AT_END":  # the markers make RE2's multiline $ Python's (either kind)
        return "(?m:$)"
    if at in ("AT_BOUNDARY", "AT_NON_BOUNDARY"):
        if empty:  # Python: neither holds in an empty name
            return NEVER
        return "\\b" if at == "AT_BOUNDARY" else "\\B"
    raise PatternError("unsupported anchor %s" % at)  # pragma: no cover

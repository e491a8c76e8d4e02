"""Name patterns, part one: the parse tree of Python's regex parser as a Thompson NFA.

The NFA is a list of tuples (``CHAR``, ``SPLIT``, ``ASSERT``, ``MATCH``
nodes); ``matching.Matcher`` simulates it.  What one character matches is
decided by ``re`` on that one character (``_CharClass``).
"""

import re

try:  # Python >= 3.11
    from re import _constants as _sre
except ImportError:  # pragma: no cover - Python 3.9/3.10
    import sre_constants as _sre

MAX_PATTERN_LENGTH = 1000
MAX_STATES = 4000


class PatternError(ValueError):
    """A pattern this matcher refuses (invalid, unsupported or too large)."""


class PatternTooComplex(PatternError):
    """A search that would take more steps than its budget."""


# NFA node kinds.
CHAR, SPLIT, ASSERT, MATCH = range(4)

_UNSUPPORTED = {
    "GROUPREF": "backreferences",
    "GROUPREF_EXISTS": "conditional groups",
    "ASSERT": "lookahead/lookbehind assertions",
    "ASSERT_NOT": "lookahead/lookbehind assertions",
    "POSSESSIVE_REPEAT": "possessive quantifiers",
    "ATOMIC_GROUP": "atomic groups",
}
_CATEGORY_SOURCE = {
    "CATEGORY_DIGIT": r"\d",
    "CATEGORY_NOT_DIGIT": r"\D",
    "CATEGORY_SPACE": r"\s",
    "CATEGORY_NOT_SPACE": r"\S",
    "CATEGORY_WORD": r"\w",
    "CATEGORY_NOT_WORD": r"\W",
}
# Flags that change what one character matches.
_CHAR_FLAGS = (("i", re.IGNORECASE), ("s", re.DOTALL), ("a", re.ASCII))


class CharClass:
    """One character-consuming item, decided by ``re`` on one character (memoized)."""

    __slots__ = ("_regex", "_memo")

    def __init__(self, source, flags):
        self._regex = re.compile(source, flags)
        self._memo = {}

    def __call__(self, char):
        hit = self._memo.get(char)
        if hit is None:
            hit = self._regex.fullmatch(char) is not None
            if len(self._memo) < 4096:
                self._memo[char] = hit
        return hit


def _char(code):
    return "\\U%08x" % code


def _item_source(op, av):
    """``re`` source of one character item of the parse tree (or of a class member)."""
    name = str(op)
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
        members = []
        negate = ""
        for member_op, member_av in av:
            if str(member_op) == "NEGATE":
                negate = "^"
            else:
                members.append(_item_source(member_op, member_av))
        return "[%s%s]" % (negate, "".join(members))
    raise PatternError("unsupported pattern item %s" % name)


class Builder:
    """Builds the NFA (a list of tuples) from the parse tree, back to front."""

    def __init__(self):
        self.nodes = []
        self._classes = {}

    def node(self, kind, *fields):
        if len(self.nodes) >= MAX_STATES:
            raise PatternError(
                "pattern too large: more than %d states once repeats are expanded" % MAX_STATES
            )
        self.nodes.append((kind,) + fields)
        return len(self.nodes) - 1

    def sequence(self, items, flags, following):
        """Entry node of ``items`` (a parse-tree sequence) continuing to ``following``."""
        for op, av in reversed(list(items)):
            following = self.item(op, av, flags, following)
        return following

    def item(self, op, av, flags, following):
        name = str(op)
        if name in _UNSUPPORTED:
            raise PatternError("%s are not supported in name patterns" % _UNSUPPORTED[name])
        if name in ("LITERAL", "NOT_LITERAL", "ANY", "IN"):
            return self.node(CHAR, self._class(_item_source(op, av), flags), following)
        if name == "AT":
            return self.node(ASSERT, str(av), following, bool(flags & re.MULTILINE))
        if name == "BRANCH":
            return self.node(SPLIT, tuple(self.sequence(alt, flags, following) for alt in av[1]))
        if name == "SUBPATTERN":
            _group, add_flags, del_flags, items = av
            return self.sequence(items, (flags | add_flags) & ~del_flags, following)
        if name in ("MAX_REPEAT", "MIN_REPEAT"):
            return self.repeat(av, flags, following)
        raise PatternError("unsupported pattern item %s" % name)

    def repeat(self, av, flags, following):
        low, high, items = av
        unbounded = high == _sre.MAXREPEAT
        copies = low if unbounded else high
        if copies >= MAX_STATES:
            raise PatternError("repetition count %d too large for a name pattern" % copies)
        if unbounded:
            # x* : a loop node that either enters x (which returns to it) or leaves.
            loop = self.node(SPLIT, ())
            body = self.sequence(items, flags, loop)
            self.nodes[loop] = (SPLIT, (body, following))
            following = loop
        else:
            for _ in range(high - low):  # optional copies: x? ... x?
                body = self.sequence(items, flags, following)
                following = self.node(SPLIT, (body, following))
        for _ in range(low):
            following = self.sequence(items, flags, following)
        return following

    def _class(self, source, flags):
        char_flags = 0
        for _, flag in _CHAR_FLAGS:
            char_flags |= flags & flag
        key = (source, char_flags)
        found = self._classes.get(key)
        if found is None:
            try:
                found = CharClass(source, char_flags)
            except re.error as e:
                raise PatternError("invalid pattern item: %s" % e) from None
            self._classes[key] = found
        return found

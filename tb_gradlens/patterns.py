"""User patterns (Python regex syntax) matched against names in bounded time.

Python's ``re`` backtracks: ``^(\\w+)+!`` against a 62-character variable
name takes longer than the age of the universe, and a serving thread that
runs it holds TensorBoard's whole server.  Every pattern a user gives
(the ``rows=`` route parameter the tab's filter box sends, the command
line's ``--run``, the Keras callback's ``variables=``) is matched here
instead, with ``re.search`` semantics and a cost bounded by construction:

* The pattern is parsed by Python's own regex parser (so the syntax, and
  its error messages, are Python's) and compiled into a Thompson NFA.
  Backreferences, lookaround, conditionals, possessive quantifiers and
  atomic groups (whose meaning needs backtracking) are refused with a
  ``PatternError``, as are patterns longer than ``MAX_PATTERN_LENGTH`` or
  whose NFA (counted repeats expanded) exceeds ``MAX_STATES`` states.
* Matching simulates the NFA over the name, one character at a time, with
  the set of live states as the state of a lazily built DFA: every
  character costs at most one pass over the NFA (O(states)), or one
  dictionary lookup once that transition was seen.  Each call has a
  budget of such steps (``DEFAULT_BUDGET``); a search that would exceed it
  raises ``PatternTooComplex`` instead of running on.  A request that
  matches one pattern against many tags shares one budget
  (``NameFilter``: each distinct name once).
* What one character matches (a literal, a class, ``.``, with the
  ``i``/``s``/``a`` flags in force) is decided by compiling that single
  item with ``re`` and applying it to that single character: Python's own
  case folding and Unicode classes, at constant cost.

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

MAX_PATTERN_LENGTH = 1000
MAX_STATES = 4000
# NFA steps one search call may take (a step: one NFA state visited, or one
# cached DFA transition); ~1 s of pure Python at worst.
DEFAULT_BUDGET = 3_000_000
# Lazily built DFA: cleared (not grown) past this many transitions.
_MAX_TRANSITIONS = 100_000


class PatternError(ValueError):
    """A pattern this matcher refuses (invalid, unsupported or too large)."""


class PatternTooComplex(PatternError):
    """A search that would take more steps than its budget."""


# NFA node kinds.
_CHAR, _SPLIT, _ASSERT, _MATCH = range(4)

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


def compile(pattern):  # noqa: A001 - mirrors re.compile
    """A ``Matcher`` for ``pattern``; PatternError if it is refused."""
    return Matcher(pattern)


def filter_names(pattern, names, budget=None):
    """Indices of ``names`` that ``pattern`` matches anywhere (``re.search``).

    One budget (default ``DEFAULT_BUDGET``) covers all names.  Raises
    PatternError / PatternTooComplex.
    """
    return compile(pattern).filter(names, budget)


class NameFilter:
    """One pattern for everything one request matches: compiled once, each
    distinct name searched once, one ``Budget`` for all of it.

    The routes that analyse many tags (``overview``, ``alerts``) match the
    same ``rows=`` pattern against the rows of every tag of every run: with
    a budget per tag, a costly pattern would cost the budget times the
    number of tags.  ``indices(names)`` answers like ``filter_names``.
    """

    def __init__(self, pattern, budget=None):
        self.pattern = pattern
        self._matcher = compile(pattern)
        self._budget = Budget(DEFAULT_BUDGET if budget is None else budget, pattern)
        self._found = {}

    def indices(self, names):
        """Indices of ``names`` the pattern matches (PatternTooComplex past the budget)."""
        out = []
        for i, name in enumerate(names):
            name = str(name)
            hit = self._found.get(name)
            if hit is None:
                hit = self._found[name] = self._matcher.search_within(name, self._budget)
            if hit:
                out.append(i)
        return out


class Matcher:
    """A compiled pattern: ``search(text)`` answers like ``re.search(...) is not None``."""

    def __init__(self, pattern):
        if not isinstance(pattern, str):
            raise PatternError("a pattern must be text")
        if len(pattern) > MAX_PATTERN_LENGTH:
            raise PatternError(
                "pattern of %d characters; at most %d are accepted" % (len(pattern), MAX_PATTERN_LENGTH)
            )
        self.pattern = pattern
        try:
            with warnings.catch_warnings():  # "possible set union" FutureWarnings: the meaning is Python's today
                warnings.simplefilter("ignore", FutureWarning)
                parsed = _sre_parse.parse(pattern, 0)
        except re.error as e:
            raise PatternError("invalid pattern: %s" % e) from None
        except (OverflowError, RecursionError, ValueError) as e:
            raise PatternError("invalid pattern: %s" % e) from None
        builder = _Builder()
        try:
            start = builder.sequence(parsed.data, parsed.state.flags, builder.node(_MATCH))
        except RecursionError:
            raise PatternError("pattern nested too deeply") from None
        self._nodes = builder.nodes
        self._start = start
        self._word = _CharClass(r"\w", re.ASCII if parsed.state.flags & re.ASCII else 0)
        self._state_ids = {}
        self._states = []
        self._closures = {}
        self._transitions = {}

    # -- public --------------------------------------------------------------

    def search(self, text, budget=None):
        """Whether the pattern matches somewhere in ``text``."""
        return self.filter([text], budget) == [0]

    def filter(self, names, budget=None):
        """Indices of ``names`` the pattern matches; one budget (steps, default
        ``DEFAULT_BUDGET``) for all."""
        counter = Budget(DEFAULT_BUDGET if budget is None else budget, self.pattern)
        return [i for i, name in enumerate(names) if self._search(str(name), counter)]

    def search_within(self, text, budget):
        """``search`` spending from ``budget`` (a ``Budget`` shared by several calls)."""
        return self._search(str(text), budget)

    # -- simulation ----------------------------------------------------------

    def _context(self, text, i):
        """What the zero-width assertions at position ``i`` of ``text`` depend on."""
        n = len(text)
        prev = text[i - 1] if i > 0 else None
        nxt = text[i] if i < n else None
        return (
            n == 0,
            prev is None,
            prev == "\n",
            prev is not None and self._word(prev),
            nxt is None,
            nxt == "\n",
            nxt == "\n" and i == n - 1,
            nxt is not None and self._word(nxt),
        )

    def _search(self, text, counter):
        state = self._closure((self._start,), self._context(text, 0), counter)
        for i, char in enumerate(text):
            if self._states[state][1]:
                return True
            context = self._context(text, i + 1)
            key = (state, char, context)
            counter.spend(1)
            following = self._transitions.get(key)
            if following is None:
                nodes = self._nodes
                targets = [self._start]
                for index in self._states[state][0]:
                    node = nodes[index]
                    counter.spend(1)
                    if node[0] == _CHAR and node[1](char):
                        targets.append(node[2])
                following = self._closure(tuple(targets), context, counter)
                if len(self._transitions) >= _MAX_TRANSITIONS:
                    self._transitions.clear()
                self._transitions[key] = following
            state = following
        return self._states[state][1]

    def _closure(self, roots, context, counter):
        """The DFA state (id) of the NFA states reachable from ``roots`` by
        epsilon moves whose assertions hold in ``context``."""
        key = (roots, context)
        found = self._closures.get(key)
        if found is not None:
            counter.spend(1)
            return found
        nodes = self._nodes
        seen = set()
        stack = list(roots)
        chars = []
        matched = False
        while stack:
            index = stack.pop()
            if index in seen:
                continue
            seen.add(index)
            counter.spend(1)
            node = nodes[index]
            kind = node[0]
            if kind == _CHAR:
                chars.append(index)
            elif kind == _SPLIT:
                stack.extend(node[1])
            elif kind == _ASSERT:
                if _holds(node[1], node[3], context):
                    stack.append(node[2])
            else:
                matched = True
        state = (tuple(sorted(chars)), matched)
        sid = self._state_ids.get(state)
        if sid is None:
            if len(self._states) >= _MAX_TRANSITIONS:
                self._state_ids.clear()
                self._states.clear()
                self._closures.clear()
                self._transitions.clear()
            sid = len(self._states)
            self._state_ids[state] = sid
            self._states.append(state)
        if len(self._closures) >= _MAX_TRANSITIONS:
            self._closures.clear()
        self._closures[key] = sid
        return sid


def _holds(at, multiline, context):
    """Whether the zero-width assertion ``at`` holds in ``context``."""
    empty, at_start, after_newline, after_word, at_end, before_newline, before_last_newline, before_word = context
    if at == "AT_BEGINNING_STRING":
        return at_start
    if at == "AT_END_STRING":
        return at_end
    if at == "AT_BEGINNING":
        return at_start or (multiline and after_newline)
    if at == "AT_END":
        return at_end or (before_newline if multiline else before_last_newline)
    if at == "AT_BOUNDARY":
        return not empty and after_word != before_word
    if at == "AT_NON_BOUNDARY":
        return not empty and after_word == before_word
    raise PatternError("unsupported anchor %s" % at)  # pragma: no cover


class Budget:
    """Matching steps left to spend; PatternTooComplex when spent."""

    __slots__ = ("left", "total", "pattern")

    def __init__(self, total, pattern):
        self.left = total
        self.total = total
        self.pattern = pattern

    def spend(self, n):
        self.left -= n
        if self.left < 0:
            raise PatternTooComplex(
                "pattern %r needs more than %d matching steps on these names; "
                "simplify it (e.g. fewer nested repeats)" % (self.pattern[:80], self.total)
            )


class _CharClass:
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


class _Builder:
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
            return self.node(_CHAR, self._class(_item_source(op, av), flags), following)
        if name == "AT":
            return self.node(_ASSERT, str(av), following, bool(flags & re.MULTILINE))
        if name == "BRANCH":
            return self.node(_SPLIT, tuple(self.sequence(alt, flags, following) for alt in av[1]))
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
            loop = self.node(_SPLIT, ())
            body = self.sequence(items, flags, loop)
            self.nodes[loop] = (_SPLIT, (body, following))
            following = loop
        else:
            for _ in range(high - low):  # optional copies: x? ... x?
                body = self.sequence(items, flags, following)
                following = self.node(_SPLIT, (body, following))
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
                found = _CharClass(source, char_flags)
            except re.error as e:
                raise PatternError("invalid pattern item: %s" % e) from None
            self._classes[key] = found
        return found

"""Name patterns, part two: matching an NFA against names within a budget.

``Matcher`` simulates ``nfa.Builder``'s NFA one character at a time, the
set of live states being the state of a lazily built DFA; ``Budget``
bounds the steps one request may take.
"""

import re
import warnings

try:  # Python >= 3.11
    from re import _parser as _sre_parse
except ImportError:  # pragma: no cover - Python 3.9/3.10
    import sre_parse as _sre_parse

from tb_gradlens.patterns.nfa import ASSERT, CHAR, MATCH, MAX_PATTERN_LENGTH, SPLIT, Builder, CharClass
from tb_gradlens.patterns.nfa import PatternError
from tb_gradlens.patterns.nfa import PatternTooComplex

# NFA steps one search call may take (a step: one NFA state visited, or one
# cached DFA transition); ~1 s of pure Python at worst.
DEFAULT_BUDGET = 3_000_000
# Lazily built DFA: cleared (not grown) past this many transitions.
_MAX_TRANSITIONS = 100_000


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
        builder = Builder()
        try:
            start = builder.sequence(parsed.data, parsed.state.flags, builder.node(MATCH))
        except RecursionError:
            raise PatternError("pattern nested too deeply") from None
        self._nodes = builder.nodes
        self._start = start
        self._word = CharClass(r"\w", re.ASCII if parsed.state.flags & re.ASCII else 0)
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
                    if node[0] == CHAR and node[1](char):
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
            if kind == CHAR:
                chars.append(index)
            elif kind == SPLIT:
                stack.extend(node[1])
            elif kind == ASSERT:
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

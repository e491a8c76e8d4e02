"""Name patterns, part two: searching names with RE2 within a budget.

``Matcher`` compiles ``translate.Translation``'s RE2 pattern once and
searches each name with it (RE2 runs in time linear in the name: at most
its program's size per byte); ``Budget`` bounds that work for one request.
"""

from re2 import _re2

from tb_gradlens.patterns.translate import PatternError, PatternTooComplex, Translation  # noqa: F401 - re-exported

# Matching steps one request may take, a step being one RE2 instruction on one
# byte of a name (with its markers): the worst case RE2 can be driven to (its
# DFA giving up, its NFA run over every instruction per byte): measured at up
# to 7 ns a step here (``(.?){999}!`` on CJK names), so at most about 0.7 s.
# Charged before a name is searched.
DEFAULT_BUDGET = 100_000_000
# RE2's memory per pattern (its default): a larger program is refused.
_MAX_MEM = 8 << 20
_UNANCHORED = _re2.RE2.Anchor.UNANCHORED
_NO_MATCH = (-1, -1)


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


def _options():
    options = _re2.RE2.Options()
    options.max_mem = _MAX_MEM
    options.log_errors = False
    return options


def _compiled(source, written_out):
    """RE2 of ``source`` (a string), or None where RE2 refuses a counted
    repeat (over 1,000, nested ones multiplied) that writing out may fix."""
    regexp = _re2.RE2(source.encode("utf-8"), _options())
    if regexp.ok():
        return regexp
    error = regexp.error()
    if "repetition" in error and not written_out:
        return None
    raise PatternError("pattern too large for the matcher (RE2: %s)" % error)


class Matcher:
    """A compiled pattern: ``search(text)`` answers like ``re.search(...) is not None``."""

    def __init__(self, pattern):
        translation = Translation(pattern)
        self.pattern = pattern
        self._markers = translation.markers
        self._translation = translation
        self._regexp = self._make(translation.source, empty=False)
        self._empty = self._regexp if translation.empty_source == translation.source else None
        self._size = self._regexp.ProgramSize()

    def _make(self, source, empty):
        prefix = ("\\A(?s:...)*?" if self._markers else "")  # a search starts between two characters' markers
        regexp = _compiled(prefix + source, False)
        if regexp is None:
            regexp = _compiled(prefix + self._translation.written_out(empty), True)
        return regexp

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

    # -- searching -----------------------------------------------------------

    def _search(self, text, counter):
        data = (self._marked(text) if self._markers else text).encode("utf-8", "surrogatepass")
        regexp = self._regexp
        if not text:
            if self._empty is None:
                self._empty = self._make(self._translation.empty_source, empty=True)
            regexp = self._empty
        counter.spend(regexp.ProgramSize() * (len(data) + 1))
        return regexp.Match(_UNANCHORED, data, 0, len(data))[0] != _NO_MATCH

    def _marked(self, text):
        """``text`` with two markers between characters (one at either end):
        before position p a marker that is a newline where multiline ``^``
        holds at p, after it one that is a newline where the pattern's ``$``
        holds at p, and of such word-ness that RE2's ``\\b`` between them is
        Python's at p.  The markers are ``translate.MARKER_CLASS``'s characters."""
        newline_after, dollar, boundary = self._markers
        n = len(text)
        if boundary:
            word = _word_flags(text, boundary == "ascii")
        out = []
        for p in range(n + 1):
            before = text[p - 1] if p else None
            after = text[p] if p < n else None
            left = "\n" if (newline_after and before == "\n") else None
            if dollar == "m":
                right = "\n" if after == "\n" else None
            elif dollar == "single":
                right = "\n" if (p == n - 1 and after == "\n") else None
            else:
                right = None
            cut = bool(boundary) and (p > 0 and word[p - 1]) != (p < n and word[p])
            if p == 0:
                if right is None:
                    right = "a" if cut else "!"
            elif p == n:
                if left is None:
                    left = "a" if cut else "!"
            elif left is None and right is None:
                left, right = "!", ("a" if cut else "!")
            elif left is None:  # right is a newline (not a word character)
                left = "a" if cut else "!"
            elif right is None:  # left is a newline
                right = "a" if cut else "!"
            if p:
                out.append(left)
            if p < n:
                out.append(right)
                out.append(after)
        return "".join(out)


def _word_flags(text, ascii_only):
    import re

    flags = [False] * len(text)
    for m in re.finditer(r"\w+", text, re.ASCII if ascii_only else 0):
        for i in range(m.start(), m.end()):
            flags[i] = True
    return flags


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

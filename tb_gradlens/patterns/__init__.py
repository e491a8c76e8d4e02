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

from tb_gradlens.patterns.matching import DEFAULT_BUDGET, Budget, Matcher, NameFilter  # noqa: F401
from tb_gradlens.patterns.matching import compile, filter_names  # noqa: F401
from tb_gradlens.patterns.nfa import MAX_PATTERN_LENGTH, MAX_STATES, PatternError, PatternTooComplex  # noqa: F401

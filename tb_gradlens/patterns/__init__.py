"""User patterns (Python regex syntax) matched against names in bounded time.

Python's ``re`` backtracks: ``^(\\w+)+!`` against a 62-character variable
name takes longer than the age of the universe, and a serving thread that
runs it holds TensorBoard's whole server.  Every pattern a user gives
(the ``rows=`` route parameter the tab's filter box sends, the command
line's ``--run``, the Keras callback's ``variables=``) is matched here
instead, with ``re.search`` semantics and a cost bounded by construction:

* The pattern is parsed by Python's own regex parser (so the syntax, and
  its error messages, are Python's) and written out in RE2's syntax with
  Python's meaning (``translate``).  Backreferences, lookaround,
  conditionals, possessive quantifiers and atomic groups (whose meaning
  needs backtracking) are refused with a ``PatternError``, as are patterns
  longer than ``MAX_PATTERN_LENGTH`` or whose NFA (counted repeats
  expanded) would exceed ``MAX_STATES`` states.
* google-re2 searches each name in time linear in its length: at most the
  compiled program's size per byte.  That product is charged to a budget
  (``DEFAULT_BUDGET``) before each name is searched; a search that would
  exceed it raises ``PatternTooComplex`` instead of running.  A request
  that matches one pattern against many tags shares one budget
  (``NameFilter``: each distinct name once).
* What one character item matches (a literal, a class, ``.``, with the
  ``i``/``s``/``a`` flags in force) is the set of code points Python's
  ``re`` matches with it, written as an explicit RE2 class: Python's own
  case folding and Unicode classes.

TensorFlow-free.
"""

from tb_gradlens.patterns.matching import DEFAULT_BUDGET, Budget, Matcher, NameFilter  # noqa: F401
from tb_gradlens.patterns.matching import compile, filter_names  # noqa: F401
from tb_gradlens.patterns.translate import MAX_PATTERN_LENGTH, MAX_STATES, PatternError, PatternTooComplex  # noqa: F401

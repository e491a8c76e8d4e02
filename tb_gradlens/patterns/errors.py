"""Name patterns: the errors (TensorFlow-free)."""


class PatternError(ValueError):
    """A pattern this matcher refuses (invalid, unsupported or too large)."""


class PatternTooComplex(PatternError):
    """A search that would take more steps than its budget."""

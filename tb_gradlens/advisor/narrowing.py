"""From a group of layers to the layer: narrowing a recommendation, each step verified.

A deep model's units are groups of consecutive top-level layers (at most
``max_units``), so a recommendation first names groups.  Each recommended
group is then halved while one half alone in float32 (the rest of the
recommendation unchanged) keeps the verified harm index within
``max(tolerance, the index verified with the whole group)``: one pass per
half tried, at most ``2 log2(group size)`` per group.  When neither half is
enough on its own, the group stays whole.
"""


def _halves(tops):
    middle = len(tops) // 2
    return tops[:middle], tops[middle:]


def narrow(groups, verify, tolerance, achieved, max_passes):
    """The narrowed groups (lists of top-level layers) and the passes spent.

    Args:
      groups: the recommended groups, each a list of top-level layers.
      verify: ``verify(groups) -> harm index`` of a pass with exactly the
        layers of ``groups`` in float32 (one pass).
      tolerance: the harm index to reach.
      achieved: the harm index verified with ``groups`` as they are.
      max_passes: verification passes at most.
    """
    bound = max(tolerance, achieved)
    groups = [list(g) for g in groups]
    passes = 0
    for i in range(len(groups)):
        while len(groups[i]) > 1 and passes < max_passes:
            narrowed = None
            for half in _halves(groups[i]):
                if passes >= max_passes:
                    break
                passes += 1
                if verify(groups[:i] + [half] + groups[i + 1:]) <= bound:
                    narrowed = half
                    break
            if narrowed is None:
                break  # neither half alone is enough: both are needed
            groups[i] = narrowed
    return groups, passes

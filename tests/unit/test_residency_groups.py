"""Which tiers run together: the maximal groups, equal to walking every subset on small graphs, and polynomial
where that walk was not (30 tiers)."""

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from clusterbook.pure.planner.residency import groups


def groups_by_every_subset(names, excluded):
    """The definition, walked the slow way (what groups() did before)."""
    found = []
    for size in range(len(names), 0, -1):
        for combo in combinations(names, size):
            if any(frozenset(p) in excluded for p in combinations(combo, 2)):
                continue
            if not any(set(combo) <= set(g) for g in found):
                found.append(combo)
    return found


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.just([f"t{i}" for i in range(n)]),
    st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)).filter(lambda p: p[0] != p[1])))))
def test_groups_are_the_maximal_sets_that_run_together(case):
    names, pairs = case
    excluded = {frozenset((names[a], names[b])) for a, b in pairs}
    assert sorted(groups(names, excluded)) == sorted(groups_by_every_subset(names, excluded))


def test_thirty_tiers_are_grouped_at_once():
    names = [f"r{i}" for i in range(30)]
    assert groups(names, set()) == [tuple(names)]
    excluded = {frozenset((names[i], names[i + 1])) for i in range(0, 30, 2)}  # 15 exclusive pairs: 2^15 groups
    assert len(groups(names, excluded)) == 2 ** 15

"""The min-cut solver against brute force."""

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from texscope.planner.mincut import INFINITE, BinaryEnergy


def brute_force(n, unary, pairs):
    return min(
        sum(unary[i][xs[i]] for i in range(n)) + sum(t[(xs[a], xs[b])] for a, b, t in pairs)
        for xs in itertools.product([0, 1], repeat=n)
    )


@st.composite
def terms(draw):
    """A submodular pairwise table; a third are forbidden pairs or equalities,
    as the planner makes."""
    if draw(st.integers(0, 9)) < 3:
        kind = draw(st.sampled_from([(0, 1), (1, 0), "equal"]))
        table = {(0, 0): 0, (0, 1): 0, (1, 0): 0, (1, 1): 0}
        for pair in ([(0, 1), (1, 0)] if kind == "equal" else [kind]):
            table[pair] = INFINITE
        return table
    e01, e10 = draw(st.integers(0, 15)), draw(st.integers(0, 15))
    e00 = draw(st.integers(0, e01 + e10))
    return {(0, 0): e00, (0, 1): e01, (1, 0): e10, (1, 1): draw(st.integers(0, e01 + e10 - e00))}


@st.composite
def energies(draw):
    n = draw(st.integers(2, 7))
    unary = [[draw(st.integers(0, 20)), draw(st.integers(0, 20))] for _ in range(n)]
    pairs = []
    for _ in range(draw(st.integers(0, 10))):
        a = draw(st.integers(0, n - 1))
        b = draw(st.integers(0, n - 2))
        pairs.append((a, b + (b >= a), draw(terms())))
    return n, unary, pairs


@settings(max_examples=400, deadline=None)
@given(energies())
def test_min_cut_finds_the_minimum(energy_terms):
    n, unary, pairs = energy_terms
    energy = BinaryEnergy()
    variables = [energy.variable() for _ in range(n)]
    for x, costs in zip(variables, unary):
        energy.unary(x, *costs)
    for a, b, table in pairs:
        energy.pairwise(variables[a], variables[b],
                        table[(0, 0)], table[(0, 1)], table[(1, 0)], table[(1, 1)])
    found, minimum = energy.minimise()
    labels = [found[x] for x in variables]
    best = brute_force(n, unary, pairs)
    achieved = sum(unary[i][labels[i]] for i in range(n)) + sum(
        t[(labels[a], labels[b])] for a, b, t in pairs
    )
    if best >= INFINITE:
        assert minimum >= INFINITE
    else:
        assert minimum == best == achieved


def test_a_term_that_is_not_submodular_is_refused():
    energy = BinaryEnergy()
    x, y = energy.variable(), energy.variable()
    with pytest.raises(ValueError, match="not submodular"):
        energy.pairwise(x, y, 5, 0, 0, 5)


@pytest.mark.parametrize("forbidden", [(0, 1), (1, 0)])
def test_forbid_rules_out_exactly_one_pair(forbidden):
    energy = BinaryEnergy()
    x, y = energy.variable(), energy.variable()
    # Unaries that make the forbidden pair the free optimum (cost 0), every
    # other pair cost 5 at least.
    for var, value in zip((x, y), forbidden):
        energy.unary(var, *((0, 5) if value == 0 else (5, 0)))
    energy.forbid(x, y, *forbidden)
    labels, minimum = energy.minimise()
    assert (labels[x], labels[y]) != forbidden and minimum == 5


@pytest.mark.parametrize("pair", [(0, 0), (1, 1)])
def test_forbidding_an_equal_pair_is_not_submodular(pair):
    energy = BinaryEnergy()
    x, y = energy.variable(), energy.variable()
    with pytest.raises(ValueError, match="not submodular"):
        energy.forbid(x, y, *pair)

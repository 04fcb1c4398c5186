"""SumTree against a plain list of priorities (the model), and its sampling law."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember_np import Rng
from ember_np.dqn.replay.sumtree import SumTree


def naive_find(priorities: list[float], mass: float) -> int:
    """First index whose running sum exceeds ``mass``, by a linear scan."""
    running = 0.0
    for i, p in enumerate(priorities):
        running += p
        if mass < running:
            return i
    raise AssertionError("mass past the total")


priority = st.one_of(st.just(0.0), st.floats(1e-6, 1e6))
ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.lists(st.tuples(st.integers(0, 63), priority), max_size=8)),
        st.tuples(st.just("find"), st.floats(0.0, 1.0, exclude_max=True)),
        st.tuples(st.just("sample"), st.integers(1, 16)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 64), ops, st.integers(0, 2**32))
def test_sum_tree_matches_a_list_of_priorities(capacity, operations, seed):
    tree = SumTree(capacity)
    model = [0.0] * capacity
    rng = Rng(seed)
    for op in operations:
        if op[0] == "set":
            pairs = [(i % capacity, p) for i, p in op[1]]
            tree.set([i for i, _ in pairs], [p for _, p in pairs])
            for i, p in pairs:  # later entries win, as in the tree
                model[i] = p
        elif op[0] == "find" and sum(model) > 0:
            mass = op[1] * sum(model)
            got = tree.find(mass) if mass < tree.total else None
            # Away from a boundary (where float sums may round either way),
            # the tree and the scan agree; at one, the tree picks a neighbour.
            cums = np.cumsum(model)
            if got is not None and np.min(np.abs(cums - mass)) > 1e-9 * cums[-1]:
                assert got == naive_find(model, mass)
            if got is not None:
                assert model[got] > 0.0
        elif op[0] == "sample" and sum(model) > 0:
            drawn = tree.sample(op[1], rng)
            assert drawn.dtype == np.int64 and drawn.shape == (op[1],)
            assert all(model[i] > 0.0 for i in drawn), "a zero priority was drawn"
        assert tree.total == pytest.approx(sum(model), rel=1e-12, abs=1e-300)
        np.testing.assert_array_equal(tree.get(np.arange(capacity)), model)
    # Every inner node is exactly the sum of its children.
    t = tree.tree
    size = t.shape[0] // 2
    np.testing.assert_array_equal(t[1:size], t[2 : 2 * size : 2] + t[3 : 2 * size : 2])


def test_sampling_frequencies_follow_priorities_chi_square():
    rng = Rng(0)
    priorities = np.random.default_rng(1).uniform(0.0, 3.0, size=37) ** 2
    priorities[[3, 20]] = 0.0  # never drawn
    tree = SumTree(37)
    tree.set(np.arange(37), priorities)
    n_batches, batch = 4000, 32
    counts = np.zeros(37)
    for _ in range(n_batches):
        np.add.at(counts, tree.sample(batch, rng), 1)
    assert counts[3] == 0 and counts[20] == 0
    expected = priorities / priorities.sum() * n_batches * batch
    keep = expected > 0
    chi2 = float(np.sum((counts[keep] - expected[keep]) ** 2 / expected[keep]))
    # 34 degrees of freedom: the 0.999 quantile of chi-square(34) is 65.2.
    # Stratified draws only lower the variance, so this is conservative.
    assert chi2 < 65.2, chi2


def test_stratified_sample_covers_each_slice():
    tree = SumTree(4)
    tree.set([0, 1, 2, 3], [1.0, 1.0, 1.0, 1.0])
    # Four slices of a uniform total: each leaf exactly once per batch.
    for _ in range(20):
        assert sorted(tree.sample(4, Rng(7)).tolist()) == [0, 1, 2, 3]


def test_sampling_is_deterministic_for_a_seed():
    tree = SumTree(100)
    tree.set(np.arange(100), np.linspace(0.1, 5.0, 100))
    a = tree.sample(64, Rng(3))
    b = tree.sample(64, Rng(3))
    np.testing.assert_array_equal(a, b)


def test_many_updates_do_not_drift():
    tree = SumTree(1000)
    gen = np.random.default_rng(0)
    idx = gen.integers(0, 1000, size=200_000)
    p = gen.uniform(0.0, 1e3, size=200_000)
    for lo in range(0, 200_000, 10_000):
        tree.set(idx[lo : lo + 10_000], p[lo : lo + 10_000])
    model = np.zeros(1000)
    for i, v in zip(idx, p):
        model[i] = v
    np.testing.assert_array_equal(tree.get(np.arange(1000)), model)
    assert tree.total == pytest.approx(model.sum(), rel=1e-12)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda t: SumTree(0), "capacity must be a positive integer"),
        (lambda t: t.set([5], [1.0]), r"indices must be in \[0, 5\)"),
        (lambda t: t.set([-1], [1.0]), r"indices must be in \[0, 5\)"),
        (lambda t: t.set([0.5], [1.0]), "indices must be integers"),
        (lambda t: t.set([0, 1], [1.0]), "must match indices in length"),
        (lambda t: t.set([0], [-1.0]), "finite and >= 0"),
        (lambda t: t.set([0], [np.nan]), "finite and >= 0"),
        (lambda t: t.sample(4, Rng(0)), "all 0"),
        (lambda t: t.find(0.0), "all 0"),
        (lambda t: t.sample(0, Rng(0)), "batch_size must be a positive integer"),
    ],
)
def test_bad_input_is_a_clear_error(call, match):
    tree = SumTree(5)
    with pytest.raises(ValueError, match=match):
        call(tree)
    assert tree.total == 0.0


def test_failed_set_changes_nothing():
    tree = SumTree(5)
    tree.set([1], [2.0])
    with pytest.raises(ValueError):
        tree.set([0, 2], [1.0, -3.0])
    np.testing.assert_array_equal(tree.get(np.arange(5)), [0, 2, 0, 0, 0])

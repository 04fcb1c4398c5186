"""Rng: NumPy-compatible PCG64 streams with saveable state."""

from __future__ import annotations

import naive
import numpy as np
import pytest

from ember_np import Rng
from ember_np import rng as rng_mod


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**40])
def test_matches_numpy_pcg64_bit_for_bit(seed):
    ours = Rng(seed)
    theirs = np.random.default_rng(seed)
    assert np.array_equal(ours.random(1000), theirs.random(1000))
    assert ours.random() == theirs.random()


def test_raw_u64_matches_numpy_random_raw():
    ours = Rng(9)
    raw = np.random.PCG64(9).random_raw(100)
    assert [int(rng_mod.next_u64(ours.state)) for _ in range(100)] == raw.tolist()


def test_mul_hi_lo_is_exact_128_bit_product():
    rng = np.random.default_rng(0)
    values = rng.integers(0, 2**63, 200, dtype=np.uint64).tolist() + [2**64 - 1, 0, 1, 2**32]
    for a, b in zip(values, reversed(values)):
        hi, lo = rng_mod.mul_hi_lo(np.uint64(a), np.uint64(b))
        assert (int(hi) << 64) | int(lo) == a * b


def test_save_and_restore_state_continues_the_stream():
    a = Rng(5)
    a.random(17)
    saved = a.state.copy()
    first = a.random(50)
    b = Rng.from_state(saved)
    assert np.array_equal(b.random(50), first)


def test_integers_in_range_and_uniform():
    rng = Rng(3)
    draws = rng.integers(7, 70_000)
    assert draws.min() == 0 and draws.max() == 6
    assert naive.chi_square_pvalue(np.bincount(draws, minlength=7)) > 1e-3
    assert all(0 <= rng.integers(3) < 3 for _ in range(100))
    # a bound that is not a power of two and close to 2**63 still stays in range
    big = 2**63 - 25
    assert all(0 <= int(rng_mod.next_below(rng.state, big)) < big for _ in range(100))


def test_streams_are_independent_and_reproducible():
    s1 = Rng.streams(42, 3)
    s2 = Rng.streams(42, 3)
    draws = [s.random(20) for s in s1]
    for s, d in zip(s2, draws):
        assert np.array_equal(s.random(20), d)
    assert not np.array_equal(draws[0], draws[1])


@pytest.mark.parametrize("bad", [-1, 1.5, "seed", None, True])
def test_bad_seed(bad):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        Rng(bad)


def test_bad_state_and_bounds():
    with pytest.raises(ValueError, match=r"4 uint64 words, got an array of shape \(3,\)"):
        Rng.from_state(np.zeros(3, np.uint64))
    with pytest.raises(ValueError, match="increment"):
        Rng.from_state(np.zeros(4, np.uint64))
    with pytest.raises(ValueError, match="n must be an integer >= 1, got 0"):
        Rng(0).integers(0)

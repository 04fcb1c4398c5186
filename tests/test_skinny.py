"""``nn.skinny.product``: the loops for products with few output columns or few inner
terms, against NumPy and against BLAS."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import product_case, product_expected

from ember_np.nn._blas import gemm
from ember_np.nn.skinny import SHORT, SKINNY, product


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
# the PPO heads' shapes (a value, two logits; forward and weight gradient), their
# input gradients and an observation layer's product (SHORT inner terms), a product
# BLAS takes (SKINNY columns), and odd sizes
@pytest.mark.parametrize("m,n,k", [(256, 1, 64), (256, 2, 64), (64, 2, 256), (256, 64, 1),
                                   (256, 64, 2), (256, 64, 3), (256, 64, 4), (5, 3, 7),
                                   (37, SKINNY, 19), (1, 1, 1)])  # fmt: skip
def test_product_matches_numpy(dtype, trans_a, trans_b, beta, m, n, k):
    a, b, c = product_case(m, n, k, trans_a, trans_b, dtype, seed=m * 100 + n * 10 + k)
    expected = product_expected(a, b, c, trans_a, trans_b, beta)
    if beta == 0.0:
        c[:] = np.nan  # beta 0 never reads c, as BLAS
    product(a, b, c, trans_a, trans_b, beta)
    tol = 2e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c, expected, rtol=tol, atol=tol)


def test_product_on_blocks_of_a_flat_workspace_writes_only_its_block():
    """The network kernels pass reshaped blocks of one flat array."""
    rng = np.random.default_rng(3)
    h = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((5, 2)).astype(np.float32)
    flat = np.zeros(40, np.float32)
    out = flat[10:22].reshape(6, 2)
    product(h, w, out, False, False, 0.0)
    np.testing.assert_allclose(out, h @ w, rtol=1e-5, atol=1e-6)
    assert not flat[:10].any() and not flat[22:].any()


def test_product_gives_the_same_bits_every_time():
    rng = np.random.default_rng(4)
    a = rng.standard_normal((256, 64)).astype(np.float32)
    b = rng.standard_normal((64, 2)).astype(np.float32)
    first, second = np.empty((256, 2), np.float32), np.empty((256, 2), np.float32)
    product(a, b, first, False, False, 0.0)
    product(a, b, second, False, False, 0.0)
    assert first.tobytes() == second.tobytes()


@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("k", range(1, SHORT + 1))
def test_short_products_have_blas_bits(trans_b, k):
    """Products of SHORT inner terms run in loops that sum as BLAS does: bit for bit
    its result, so a training run's bits do not depend on the path."""
    a, b, _ = product_case(256, 64, k, False, trans_b, np.float32, seed=7 + k)
    loops, blas = np.empty((256, 64), np.float32), np.empty((256, 64), np.float32)
    product(a, b, loops, False, trans_b, 0.0)
    gemm(a, b, blas, False, trans_b, 0.0)
    assert loops.tobytes() == blas.tobytes()


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("m,n,k", [(256, 2, 64), (256, 64, 2)])
def test_float64_products_are_dgemms(trans_a, m, n, k):
    """The loops are float32 only: a float64 product (the gradient tests) is BLAS's."""
    a, b, _ = product_case(m, n, k, trans_a, True, np.float64, seed=11)
    ours, blas = np.empty((m, n)), np.empty((m, n))
    product(a, b, ours, trans_a, True, 0.0)
    gemm(a, b, blas, trans_a, True, 0.0)
    assert ours.tobytes() == blas.tobytes()


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize("m,n,k", [(9, 2, 6), (6, 11, 3)])
def test_loops_read_and_write_only_their_columns_of_wider_rows(trans_a, trans_b, beta, m, n, k):
    """Operands whose rows are longer than their columns (leading dimensions above
    the column count, as BLAS takes them): the loops index rows by the leading
    dimension and leave the rest of each row as it was."""
    rng = np.random.default_rng(12)

    def wide(rows, cols):
        whole = rng.standard_normal((rows, cols + 5)).astype(np.float32)
        return whole, whole[:, :cols]

    _, a = wide(*((k, m) if trans_a else (m, k)))
    _, b = wide(*((n, k) if trans_b else (k, n)))
    c_whole, c = wide(m, n)
    before = c_whole.copy()
    expected = product_expected(a, b, c, trans_a, trans_b, beta)
    product(a, b, c, trans_a, trans_b, beta)
    np.testing.assert_allclose(c, expected, rtol=2e-5, atol=2e-5)
    assert c_whole[:, n:].tobytes() == before[:, n:].tobytes()

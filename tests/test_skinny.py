"""``nn.skinny.product``: the loops for products with few output columns, against NumPy."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import product_case, product_expected

from ember_np.nn.skinny import SKINNY, product


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
# the PPO heads' shapes (a value, two logits; forward and weight gradient), a product
# BLAS takes (SKINNY columns), and odd sizes
@pytest.mark.parametrize("m,n,k", [(256, 1, 64), (256, 2, 64), (64, 2, 256), (5, 3, 7),
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

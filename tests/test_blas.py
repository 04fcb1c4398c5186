"""The direct BLAS binding used by the kernels, against NumPy's matmul."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ember_np._blas import BLAS_LIBRARY, gemm


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
def test_gemm_matches_numpy(dtype, trans_a, trans_b, beta):
    rng = np.random.default_rng(0)
    m, n, k = 37, 19, 64
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    c = rng.standard_normal((m, n)).astype(dtype)
    expected = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b) + beta * c
    gemm(a, b, c, trans_a, trans_b, beta)
    tol = 1e-4 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(c, expected, rtol=tol, atol=tol)


def test_gemm_on_row_views_of_larger_arrays():
    """Kernels pass blocks of a flat workspace and column slices with row strides."""
    rng = np.random.default_rng(1)
    big_a = rng.standard_normal((10, 12)).astype(np.float32)
    a = big_a[2:7, 1:9]  # 5 x 8, row stride 12
    b = rng.standard_normal((8, 3)).astype(np.float32)
    flat = np.zeros(100, np.float32)
    c = flat[10:25].reshape(5, 3)
    gemm(a, b, c, False, False, 0.0)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    assert not flat[:10].any() and not flat[25:].any()


def test_library_found_and_no_scipy_linalg_import():
    assert "gemm" in BLAS_LIBRARY.lower()
    code = (
        "import sys, numpy as np\n"
        "from ember_np import QNetwork\n"
        "net = QNetwork((4, 8, 2), seed=0)\n"
        "net.update(np.zeros((4, 4)), [0, 1, 0, 1], np.zeros(4), np.zeros((4, 4)), np.ones(4),"
        " net.copy(), gamma=0.9, learning_rate=1e-3)\n"
        "print('scipy.linalg' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    scipy_installed = (
        subprocess.run([sys.executable, "-c", "import scipy"], capture_output=True).returncode == 0
    )
    # numba itself imports scipy.linalg whenever SciPy is installed; ember_np never needs it
    assert out.stdout.strip().splitlines()[-1] == str(scipy_installed)

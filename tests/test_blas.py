"""The direct BLAS binding used by the kernels, against NumPy's matmul."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from helpers import product_case, product_expected

from ember_np.nn._blas import BLAS_LIBRARY, gemm


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("beta", [0.0, 1.0, -0.5])
def test_gemm_matches_numpy(dtype, trans_a, trans_b, beta):
    a, b, c = product_case(37, 19, 64, trans_a, trans_b, dtype)
    expected = product_expected(a, b, c, trans_a, trans_b, beta)
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
        "from ember_np import Batch, QNetwork, UpdateOptions\n"
        "net = QNetwork((4, 8, 2), seed=0)\n"
        "net.update(Batch(np.zeros((4, 4)), [0, 1, 0, 1], np.zeros(4), np.zeros((4, 4)),"
        " np.ones(4)), net.copy(), UpdateOptions(gamma=0.9, learning_rate=1e-3))\n"
        "print('scipy.linalg' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    scipy_installed = (
        subprocess.run([sys.executable, "-c", "import scipy"], capture_output=True).returncode == 0
    )
    # numba itself imports scipy.linalg whenever SciPy is installed; ember_np never needs it
    assert out.stdout.strip().splitlines()[-1] == str(scipy_installed)


# --- Threads (issue 23): the kernels' products run on the calling thread ---------------------

#: Measures, in a fresh process, how much CPU the threads other than the caller
#: spend while the caller runs 20 products of 640x640x640 (OpenBLAS threads
#: anything this size), once through the kernels' ``gemm`` and once through
#: NumPy's own matmul. Prints a JSON line. ``time.process_time`` counts every
#: thread, ``time.thread_time`` the caller alone; the gaps let OpenBLAS's idle
#: workers stop spinning (they spin about 0.1 s after their last job) before
#: the next measurement.
_WORKER_SHARE = """
import json, sys, time
import numpy as np
import ember_np.nn._blas as blas
from ember_np.nn._blas import gemm, set_blas_threads
process_threads, kernel = int(sys.argv[1]), int(sys.argv[2])
set_blas_threads(process_threads)
if kernel:
    from ember_np import set_kernel_threads
    set_kernel_threads(kernel)
rng = np.random.default_rng(0)
a = rng.standard_normal((640, 640)).astype(np.float32)
b = rng.standard_normal((640, 640)).astype(np.float32)
c = np.zeros((640, 640), np.float32)

def others_share(product):
    product()  # warm-up (compiles gemm or loads it from the cache)
    time.sleep(0.5)
    p0, t0 = time.process_time(), time.thread_time()
    for _ in range(20):
        product()
    mine = time.thread_time() - t0
    return (time.process_time() - p0 - mine) / mine

out = {"kernels": others_share(lambda: gemm(a, b, c, False, False, 0.0)),
       "numpy": others_share(lambda: np.matmul(a, b, out=c)),
       "kernel_threads": blas.kernel_threads() if hasattr(blas, "kernel_threads") else None}
print(json.dumps(out))
"""


def _worker_share(process_threads: int, kernel_threads: int = 0) -> dict:
    import json

    out = subprocess.run(
        [sys.executable, "-c", _WORKER_SHARE, str(process_threads), str(kernel_threads)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(sys.platform == "win32", reason="process_time and thread_time differ here")
def test_kernel_products_run_on_the_calling_thread_whatever_the_process_setting():
    """With the process's OpenBLAS on 2 threads, the kernels' products still run on
    the caller alone (their workers would otherwise do about half of each
    product), while NumPy's own matmul in the same process uses the 2 threads."""
    share = _worker_share(process_threads=2)
    assert share["kernels"] < 0.1, share
    assert share["numpy"] > 0.3, share  # the measurement sees OpenBLAS's workers
    assert share["kernel_threads"] == 1


@pytest.mark.skipif(sys.platform == "win32", reason="process_time and thread_time differ here")
def test_set_kernel_threads_opts_the_kernels_alone_into_threads():
    """set_kernel_threads(2) with the process on 1 thread: the kernels' products
    use a worker, NumPy's matmul does not."""
    share = _worker_share(process_threads=1, kernel_threads=2)
    assert share["kernel_threads"] == 2
    assert share["kernels"] > 0.3, share
    assert share["numpy"] < 0.1, share


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2", None])
def test_set_kernel_threads_rejects_what_is_not_a_count(bad):
    from ember_np import set_kernel_threads

    with pytest.raises(ValueError, match=rf"whole number of threads >= 1 \(got {bad!r}\)"):
        set_kernel_threads(bad)


def _process_blas_threads() -> int:
    """The thread count of the OpenBLAS NumPy loaded, read by its own getter."""
    import ctypes

    lib = ctypes.CDLL(BLAS_LIBRARY.rsplit(":", 1)[0])
    for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                 "openblas_get_num_threads64_", "openblas_get_num_threads"):  # fmt: skip
        getter = getattr(lib, name, None)
        if getter is not None:
            getter.restype = ctypes.c_int
            return int(getter())
    pytest.skip("the BLAS NumPy loaded is not OpenBLAS")


@pytest.fixture
def process_blas_threads():
    """Restores the process's BLAS thread count after the test."""
    from ember_np.nn._blas import set_blas_threads

    before = _process_blas_threads()
    yield set_blas_threads
    set_blas_threads(before)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("trans_a, trans_b", [(False, False), (True, False), (False, True)])
def test_products_match_numpy_at_any_process_thread_count(
    process_blas_threads, threads, trans_a, trans_b
):
    """Products OpenBLAS would split between threads (m*n*k far above its threshold)."""
    process_blas_threads(threads)
    rng = np.random.default_rng(threads)
    m, n, k = 160, 96, 200
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = np.empty((m, n), np.float32)
    gemm(a, b, c, trans_a, trans_b, 0.0)
    expected = (a.T if trans_a else a).astype(np.float64) @ (b.T if trans_b else b)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)
    assert _process_blas_threads() == threads


def test_training_leaves_the_process_blas_thread_count_unchanged(process_blas_threads):
    """DqnTrainer.train with the CartPole rainbow preset (64-wide, batch 128)."""
    import gymnasium as gym

    from ember_np import DqnAgent, DqnTrainer, kernel_threads
    from ember_np.presets import get_preset

    process_blas_threads(2)
    config = get_preset("rainbow", "CartPole-v1").config.replace(min_replay_size=128)
    env = gym.make("ember_np/CartPole-v1")
    DqnTrainer(env, DqnAgent.for_env(env, config, seed=0), seed=0).train(400)
    assert _process_blas_threads() == 2
    assert kernel_threads() == 1


def test_without_a_private_directory_the_kernels_share_the_process_blas(monkeypatch):
    import ember_np.nn._blas as blas

    if blas.KERNELS.shared is None:
        pytest.skip("the BLAS NumPy loaded is not OpenBLAS")
    monkeypatch.setattr(blas, "private_dir", lambda name: None)
    lib, why = blas.private_copy(BLAS_LIBRARY.rsplit(":", 1)[0], blas.KERNELS.shared)
    assert lib is None and "no private writable cache directory" in why


def test_the_copy_is_a_second_instance_written_once(tmp_path, monkeypatch):
    """Its own thread count; a second import loads the file the first one wrote."""
    from pathlib import Path

    import ember_np.nn._blas as blas

    shared = blas.KERNELS.shared
    if shared is None:
        pytest.skip("the BLAS NumPy loaded is not OpenBLAS")
    monkeypatch.setattr(blas, "private_dir", lambda name: tmp_path)
    source = BLAS_LIBRARY.rsplit(":", 1)[0]
    lib, where = blas.private_copy(source, shared)
    assert lib is not None and Path(where).parent == tmp_path, where
    written = Path(where).stat().st_mtime_ns
    assert blas.private_copy(source, shared)[1] == where
    assert Path(where).stat().st_mtime_ns == written
    assert [p.name for p in tmp_path.iterdir()] == [Path(where).name]  # no temporary left
    copy = blas.thread_switch(lib)
    before = shared.get()
    copy.set(3)
    assert copy.get() == 3 and shared.get() == before
    copy.set(1)

"""Numba hygiene: every kernel cached, NaN-safe fast-math, warm second process."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys
import textwrap

import numpy as np
from numba.core.caching import NullCache
from numba.core.registry import CPUDispatcher

import ember_np
from ember_np import CircularBuffer, QNetwork
from ember_np._jit import FASTMATH_FLAGS, ORDERED_FASTMATH_FLAGS


def all_kernels() -> dict[str, CPUDispatcher]:
    kernels = {}
    for info in pkgutil.walk_packages(ember_np.__path__, "ember_np."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == info.name:
                kernels[f"{info.name}.{name}"] = obj
    return kernels


def test_every_kernel_is_cached_with_safe_fastmath():
    kernels = all_kernels()
    assert len(kernels) >= 15, sorted(kernels)
    exact = set()
    for name, k in kernels.items():
        assert k.targetoptions.get("cache") is not False, name
        assert not isinstance(k._cache, NullCache), f"{name} is not cached"
        flags = set(k.targetoptions.get("fastmath") or ())
        assert "nnan" not in flags and "ninf" not in flags, name
        if flags:  # kernel, or ordered_kernel (no reassoc: sums in the order written)
            assert flags in (set(FASTMATH_FLAGS), set(ORDERED_FASTMATH_FLAGS)), name
        else:  # exact_kernel: strict IEEE, for the environments that mirror gymnasium
            exact.add(name.rsplit(".", 1)[0])  # and for rng.fill_normals (noisy networks'
            # normals: the same bits on every machine, as a reference computes them)
    assert exact == {
        "ember_np.envs._cartpole", "ember_np.envs._acrobot", "ember_np.envs._mountaincar",
        "ember_np.envs._dispatch", "ember_np.rng",
    }  # fmt: skip


def test_nan_checks_survive_fastmath():
    buf = CircularBuffer(4, 2, 2)
    try:
        buf.push([np.nan, 0.0], 0, 0.0, [0.0, 0.0], 0)
    except ValueError:
        pass
    else:
        raise AssertionError("a NaN observation was stored: fast-math dropped the isfinite check")
    assert len(buf) == 0


def test_importing_compiles_nothing():
    code = textwrap.dedent(
        """
        import json
        import ember_np
        from numba.core.registry import CPUDispatcher
        import sys
        compiled = []
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("ember_np"):
                for name, obj in vars(mod).items():
                    if isinstance(obj, CPUDispatcher) and obj.signatures:
                        compiled.append(name)
        print(json.dumps(compiled))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


_FIRST_UPDATE = textwrap.dedent(
    """
    import json
    import numpy as np
    from ember_np import QNetwork, CircularBuffer, Rng, UpdateOptions
    from ember_np.dqn import replay
    from ember_np.dqn.learner import network
    net = QNetwork((4, 64, 64, 2), seed=0)
    target = net.copy()
    buf = CircularBuffer(100, 4, 2)
    for i in range(64):
        buf.push(np.full(4, i, np.float32), i % 2, 1.0, np.zeros(4, np.float32), 0)
    batch = buf.sample(64, Rng(0))
    net.update(batch, target, UpdateOptions(gamma=0.99, learning_rate=1e-3, max_grad_norm=10.0))
    net.forward(np.zeros(4, np.float32))
    print(json.dumps({
        name: [k.stats.cache_hits.total(), k.stats.cache_misses.total()]
        for name, k in [("update", network.checked_update), ("push", replay.push_transition),
                        ("sample", replay.sample_into), ("forward_one", network.q_values_checked)]
    }))
    """
)


def test_second_process_loads_kernels_from_cache():
    env = dict(os.environ)

    def run() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _FIRST_UPDATE],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    run()  # fills the cache if this checkout never compiled these kernels
    second = run()
    for name, (hits, misses) in second.items():
        assert hits >= 1 and misses == 0, f"{name}: {hits} cache hits, {misses} misses"


def test_qnetwork_forward_single_specialization_per_dtype():
    net = QNetwork((3, 4, 2), seed=0)
    for x in (np.zeros(3), np.zeros(3, np.float32), [0, 0, 0], np.zeros(3, np.int64)):
        net.forward(x)
    from ember_np.dqn.learner import network

    sigs = network.q_values_checked.signatures  # forward's kernel (checks, then forward_one)
    assert all(str(s[0].dtype) == "float32" for s in sigs), sigs

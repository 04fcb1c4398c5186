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
import pytest
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


_COLD_FUSED_RUN = textwrap.dedent(
    """
    import contextlib, importlib, io, json, re, sys, tempfile
    from numba.core import event

    compiled = []  # (kernel, argument types) of every compile of an ember_np kernel


    class Record(event.Listener):
        def on_start(self, ev):
            fn = ev.data["dispatcher"].py_func
            if fn.__module__.startswith("ember_np"):
                compiled.append([f"{fn.__module__}.{fn.__qualname__}",
                                 [str(t) for t in ev.data["args"]]])

        def on_end(self, ev):
            pass


    event.register("numba:compile", Record())
    from ember_np.cli import main

    # the Quick start's command, which trains in the fused loop: the first process
    # compiles the fused trainer, env dynamics included (and says so first), the
    # second loads it all
    with contextlib.redirect_stdout(io.StringIO()):
        status = main(["train", "CartPole-v1", "--steps", "1100", "--root", tempfile.mkdtemp(),
                       "--quiet", "--eval-episodes", "1"])
    run_compiles = list(compiled)  # the run's (the checks below call kernels from Python)
    # the env kernels compiled inside the fast-math fused kernel: a fast-math flag on an
    # instruction of their own (fadd reassoc ..., call afn ...) is the inherited flag set.
    # Not on one that LLVM inlined from a callee (its name ends in .i, .i40, ...): numba's
    # own helpers (the RNG's next_double) take the flags of the kernel compiled first.
    flag = re.compile(r"^\\s*(%\\S+) = (?:fadd|fsub|fmul|fdiv|frem|fneg|fcmp|call) "
                      r"(?:fast|reassoc|nnan|ninf|nsz|arcp|contract|afn)\\b", re.M)
    fast = []
    for name in dict.fromkeys(name for name, _ in run_compiles):  # each kernel once
        module, _, attr = name.rpartition(".")
        # (an overload's implementation, "_stepper.<locals>.impl", is no module attribute:
        # it is compiled with the jit_options of its overload, exact, and the dynamics it
        # calls are kernels of their own, checked here)
        if module.startswith("ember_np.envs") and "<locals>" not in name:
            kernel = getattr(importlib.import_module(module), attr)
            for sig, ir in kernel.inspect_llvm().items():  # the kernel's own function only
                own = re.escape(kernel.overloads[sig].fndesc.mangled_name)
                start = re.search(f'^define [^\\n]*@"?{own}"?[(]', ir, re.M).start()
                body = ir[start:].split("\\n}\\n", 1)[0]
                if any(not re.search(r"[.]i\\d*$", m[1]) for m in flag.finditer(body)):
                    fast.append(name)
    sys.path.insert(0, sys.argv[1])
    from test_envs_classic import test_one_step_from_arbitrary_states

    for env_id in ("Acrobot-v1", "MountainCar-v0"):  # bit for bit gymnasium's
        test_one_step_from_arbitrary_states(env_id)
    print(json.dumps({"status": status, "compiled": run_compiles, "fast_env_kernels": fast}))
    """
)

# Kernels that a cold fused CartPole run compiles more than once on purpose: a flag
# passed as a constant, so each copy is compiled without the other's branch.
_INTENDED_SPECIALIZATIONS = {
    "ember_np.dqn.replay.replay_kernels.gather_one_step": 2,  # draw=True (plain) / False (n-step)
    "ember_np.nn._blas.gemm": 3,  # the transposes of the forward and backward products
    "ember_np.envs._acrobot._np_sincos_f32": 2,  # a constant flag
    "ember_np.nn.mlp.layer": 2,  # the first layer (Literal 0) and the others
    "ember_np.nn.mlp.bias_act": 2,  # the output layer (Literal False) and hidden ones
    "ember_np.nn.mlp.lane_sum": 2,  # float32 rows (LayerNorm forward), float64 (backward)
}


@pytest.mark.timeout(1800)  # two subprocesses, each given up to 900 s
def test_a_cold_fused_run_compiles_each_kernel_once_and_env_dynamics_stay_exact(tmp_path):
    """From an empty cache, ``ember-np train CartPole-v1`` (the fused trainer) first, then
    the bit-for-bit checks of test_envs_classic, in that process and in a second one that
    loads the cache. Two bugs this run would show:

    - A stray second specialization (an int32 or a Literal where int64 was, a readonly or
      non-contiguous array, ...) compiles a kernel and every kernel above it again: a cold
      first run pays for it in seconds. Each ember_np kernel must compile for one
      signature only, but for the specializations listed as intended.
    - numba lets a callee that leaves ``fastmath`` unset inherit its caller's, and its
      cache keys on the signature alone: compiled first inside the fast-math fused kernel,
      the env dynamics once came out with fast-math, and every later process loaded that
      version (Acrobot and MountainCar then differed from gymnasium by an ulp).

    The first process's first line of output says that the kernels are compiling; the
    second's does not. Besides the bit-for-bit checks, the env kernels' own instructions
    are checked for fast-math flags in their LLVM IR."""
    # compiled in this process (not by the first run's worker processes), to be recorded
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"), EMBER_NP_PRECOMPILE="0")
    tests_dir = os.path.dirname(__file__)
    for first in (True, False):
        out = subprocess.run([sys.executable, "-c", _COLD_FUSED_RUN, tests_dir],
                             capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        said = out.stderr.startswith("compiling ember_np's kernels for the first time: about")
        assert said == first, out.stderr[:500]
        if first:
            cold = out
    out = cold
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["status"] == 0
    envs = [name for name, _ in result["compiled"] if name.startswith("ember_np.envs")]
    assert "ember_np.envs._cartpole.cartpole_step" in envs, envs
    assert result["fast_env_kernels"] == [], "env kernels compiled with fast-math flags"
    signatures: dict[str, list] = {}
    for name, args in result["compiled"]:
        signatures.setdefault(name, []).append(args)
    for name in ("ember_np.training._fused.fused_steps", "ember_np.dqn.replay.replay_kernels.sample_into",
                 "ember_np.nn.backprop.backward", "ember_np.nn.mlp.forward_into"):  # fmt: skip
        assert name in signatures, f"{name} was not compiled: {sorted(signatures)}"
    # what a CartPole run with a plain head does not use, it does not compile: the other
    # envs' dynamics (picked by the env state's class) and a distributional output layer
    unused = [name for name in signatures
              if name.startswith(("ember_np.envs._acrobot", "ember_np.envs._mountaincar"))
              or name in ("ember_np.nn.backprop.head_backward",
                          "ember_np.nn.backprop.distributional_backward")]  # fmt: skip
    assert unused == [], unused
    for name, sigs in signatures.items():
        expected = _INTENDED_SPECIALIZATIONS.get(name, 1)
        assert len(sigs) <= expected, f"{name} compiled {len(sigs)} times: {sigs}"

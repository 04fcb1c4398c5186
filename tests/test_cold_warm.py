"""Runs from an empty numba cache and from a full one: the kernels a cold run compiles
(each once, the env dynamics without fast-math) and the bytes it writes (the same as a
warm run's).

Both tests check the same four processes, run once for this module (compiling the
default CartPole kernel tree from nothing takes a minute or two; each run itself a few
seconds): CartPole-v1 then Acrobot-v1 trained into an empty cache, each compiling its
kernels in its own process, then both again loading them from that cache. The module
is one pytest-xdist group, so that both tests run on the worker that ran the processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from helpers import files_of

pytestmark = pytest.mark.xdist_group("cold_cache")

#: The default preset of CartPole-v1 (LayerNorm, dueling, prioritized n-step replay, the
#: fused trainer) and Acrobot-v1's ``zoo`` with a C51 head: short runs, but long enough
#: that an evaluation and a few hundred updates pass (from an empty cache they once
#: diverged after those).
RUNS = {
    "CartPole-v1": ["--steps", "2500"],
    "Acrobot-v1": ["--preset", "zoo", "--steps", "1500",
                   "--set", "distributional=c51", "v_min=-100", "v_max=0"],
}  # fmt: skip
COMMON = ["--seed", "3", "--eval-every", "700", "--eval-episodes", "2",
          "--checkpoint-freq", "600", "--keep", "2", "--quiet"]  # fmt: skip

#: What every process runs: ``ember-np train`` (the command line's ``main``, as
#: ``python -m ember_np``) recording each compile of an ember_np kernel, then the LLVM IR
#: of the env kernels it compiled, then (asked by its third argument) test_envs_classic's
#: bit-for-bit checks of Acrobot's and MountainCar's dynamics against gymnasium.
_RUN = textwrap.dedent(
    """
    import contextlib, importlib, io, json, re, sys
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

    with contextlib.redirect_stdout(io.StringIO()):
        status = main(json.loads(sys.argv[2]))
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
    if sys.argv[3] == "check envs":
        sys.path.insert(0, sys.argv[1])
        from test_envs_classic import test_one_step_from_arbitrary_states

        for env_id in ("Acrobot-v1", "MountainCar-v0"):  # bit for bit gymnasium's
            test_one_step_from_arbitrary_states(env_id)
    print(json.dumps({"status": status, "compiled": run_compiles, "fast_env_kernels": fast}))
    """
)


def _train_all(root: Path, cache: Path, first: bool) -> dict[str, dict[str, Any]]:
    """Train every run of RUNS under ``root``, one process each (as ``ember-np train``),
    with ``cache`` as numba's cache. Per env id: every file the run wrote ("files"), its
    process's stderr and what ``_RUN`` printed ("result"). Every process but the first of
    a ``first`` (cold) round checks the env dynamics after its run: the first would fill
    the cache with Acrobot's kernels before Acrobot's cold run compiles them."""
    # compiled in the run's own process, not by a first run's worker processes (the
    # run would then load every kernel from the cache, as a warm one does)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), EMBER_NP_PRECOMPILE="0")
    tests_dir = os.path.dirname(__file__)
    found = {}
    for i, (env_id, args) in enumerate(RUNS.items()):
        command = ["train", env_id, *args, *COMMON, "--root", str(root)]
        checks = "skip" if first and i == 0 else "check envs"
        out = subprocess.run([sys.executable, "-c", _RUN, tests_dir, json.dumps(command), checks],
                             capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        (run_dir,) = (p.parent for p in (root / env_id).rglob("config.json"))
        found[env_id] = {"files": files_of(run_dir), "stderr": out.stderr,
                         "result": json.loads(out.stdout.strip().splitlines()[-1])}  # fmt: skip
    return found


@pytest.fixture(scope="module")
def cold_then_warm(tmp_path_factory) -> dict[str, Any]:
    """Every run of RUNS from an empty cache, then again from the cache they filled."""
    tmp = tmp_path_factory.mktemp("cold_cache")
    cache = tmp / "numba_cache"
    cache.mkdir()
    cold = _train_all(tmp / "cold", cache, first=True)
    filled = bool(list(cache.rglob("*.nbi")))
    warm = _train_all(tmp / "warm", cache, first=False)
    return {"cold": cold, "filled": filled, "warm": warm}


@pytest.mark.timeout(3000)  # compiles every kernel of both runs from scratch
def test_runs_from_an_empty_cache_and_a_full_one_write_the_same_bytes(cold_then_warm):
    """numba links each compiled kernel into every compiled caller and LLVM optimises it
    there again; under fast-math's ``reassoc`` a sum could be vectorised differently in
    each copy, and which copy ran depended on what the process compiled and what it
    loaded. CartPole-v1's default preset (LayerNorm) and Acrobot-v1 with a C51 head then
    wrote other checkpoints and logs from an empty cache than from a full one."""
    cold, warm = cold_then_warm["cold"], cold_then_warm["warm"]
    assert cold_then_warm["filled"], "the first processes filled the cache"
    for env_id in RUNS:
        assert any(name.endswith(".npz") for name in cold[env_id]["files"]), cold[env_id].keys()
        assert sorted(cold[env_id]["files"]) == sorted(warm[env_id]["files"])
        differ = [name for name in cold[env_id]["files"]
                  if cold[env_id]["files"][name] != warm[env_id]["files"][name]]  # fmt: skip
        assert differ == [], f"{env_id}: these files differ cold/warm: {differ}"


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


@pytest.mark.timeout(3000)  # the same processes as the test above, whichever runs first
def test_a_cold_fused_run_compiles_each_kernel_once_and_env_dynamics_stay_exact(
    cold_then_warm,
):
    """From an empty cache, ``ember-np train CartPole-v1`` (the fused trainer), then the
    bit-for-bit checks of test_envs_classic in the cold Acrobot process (whose fused run
    compiled Acrobot's dynamics) and in the processes that load the cache. Two bugs this
    run would show:

    - A stray second specialization (an int32 or a Literal where int64 was, a readonly or
      non-contiguous array, ...) compiles a kernel and every kernel above it again: a cold
      first run pays for it in seconds. Each ember_np kernel must compile for one
      signature only, but for the specializations listed as intended.
    - numba lets a callee that leaves ``fastmath`` unset inherit its caller's, and its
      cache keys on the signature alone: compiled first inside the fast-math fused kernel,
      the env dynamics once came out with fast-math, and every later process loaded that
      version (Acrobot and MountainCar then differed from gymnasium by an ulp).

    The first process's first line of output says that the kernels are compiling; the
    CartPole run's from the full cache does not. Besides the bit-for-bit checks, the env
    kernels' own instructions are checked for fast-math flags in their LLVM IR."""
    cold, warm = cold_then_warm["cold"]["CartPole-v1"], cold_then_warm["warm"]["CartPole-v1"]
    for out, first in ((cold, True), (warm, False)):
        said = out["stderr"].startswith("compiling ember_np's kernels for the first time: about")
        assert said == first, out["stderr"][:500]
    result = cold["result"]
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

"""PPO's speed side by side: SB3, a CleanRL-style torch PPO, PureJaxRL's PPO on CPU, and
ember_np's Python and fused loops, on one set of hyperparameters, in one run.

The hyperparameters are the RL Zoo's CartPole-v1 PPO preset (rl-baselines3-zoo
``hyperparams/ppo.yml``): 8 envs, ``n_steps`` 32, ``batch_size`` 256, ``n_epochs`` 20,
``gamma`` 0.98, ``gae_lambda`` 0.8, ``ent_coef`` 0, learning rate linear from 1e-3,
clip range linear from 0.2, 100,000 env steps; SB3's MlpPolicy (separate 64x64 tanh
actor and critic), Adam eps 1e-5, ``max_grad_norm`` 0.5, ``vf_coef`` 0.5 on SB3's
(unclipped) mean squared value loss. The contestants:

``sb3``
    stable-baselines3's ``PPO`` on gymnasium's CartPole-v1 in a ``DummyVecEnv`` of 8.
``cleanrl``
    CleanRL's ``ppo.py`` formulation in eager torch (``bench/ppo_cleanrl_style.py``) on
    gymnasium's ``SyncVectorEnv`` of 8.
``purejaxrl``
    PureJaxRL's ``ppo.py`` formulation: the whole run, gymnax's CartPole-v1 included,
    as one jitted JAX program on the CPU (``bench/ppo_purejaxrl_style.py``; gymnax
    0.0.9's API, the one PureJaxRL's code is written for). It runs in the Python of
    ``--jax-python`` (a virtual environment with jax, gymnax 0.0.9, flax, optax, distrax).
``ember_np``
    ``DqnTrainer`` driving ``PPOAgent`` in the Python loop over gymnasium's CartPole-v1,
    8 sync envs.
``ember_np-fused``
    ``PPOAgent`` in the compiled loop over ``NativeVecEnv("ember_np/CartPole-v1", 8)``;
    reported as not available while ``PPOAgent.can_fuse`` refuses that env.

Each measurement is a fresh process, the contestants alternating (A B C ... A B C ...)
so they see the same machine state, after one untimed warm-up round (numba's cache,
the file cache). One thread each: ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``NUMBA_NUM_THREADS`` 1, ``torch.set_num_threads(1)``,
``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1``; the
children's environment has ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` unset (OpenBLAS
picks its kernel for the CPU). And every child is pinned to one CPU (``--core``, 0 by
default; ``sched_setaffinity``, as ``taskset -c 0``): XLA compiles on a thread pool of
its own whatever its flags say, and the pin keeps its compile to one core as well. Each
row's CPU time over wall time shows the rest: at most 1 on one core.

Measured per contestant (medians over ``--reps``): the whole command's wall time
(process start to exit: imports, compilation, training and a 10-episode greedy
evaluation); steady-state env steps/s, the same window for all: from the end of the
2nd rollout's update to the end of training, divided by the env steps taken in it
(past every compilation: PureJaxRL's is reported on its own); the greedy evaluation's
mean return over 10 episodes (500 is CartPole-v1's cap). Ratios to SB3 are of the
medians of this run.

Run (about 10 minutes at the full budget)::

    python -m venv jaxvenv && jaxvenv/bin/pip install jax "gymnax==0.0.9" flax optax distrax
    python bench/ppo_speed.py --jax-python jaxvenv/bin/python

It writes ``bench/results_ppo_speed.md`` and ``bench/results/ppo_speed.json``
(``--out`` and ``--json`` elsewhere; ``--only`` for some contestants).
"""

from __future__ import annotations

# Only the standard library at module level: the JAX worker imports this module in a
# virtual environment without ember_np, NumPy's other users or torch.
import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from machine_info import cpu_model

BENCH = Path(__file__).resolve().parent

#: The RL Zoo's CartPole-v1 PPO preset and SB3's PPO defaults it keeps.
ZOO: dict[str, Any] = dict(
    n_envs=8, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8,
    ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, vf_coef=0.5, max_grad_norm=0.5,
    adam_eps=1e-5, hidden=(64, 64),
)  # fmt: skip
#: The steady-state window starts when this many rollouts (and their updates) are done.
WARM_ROLLOUTS = 2
EVAL_EPISODES = 10
CONTESTANTS = ("sb3", "cleanrl", "purejaxrl", "ember_np", "ember_np-fused")
LABELS = {
    "sb3": "SB3 PPO (torch, DummyVecEnv x 8)",
    "cleanrl": "CleanRL-style PPO (torch, SyncVectorEnv x 8)",
    "purejaxrl": "PureJaxRL-style PPO (JAX on CPU, gymnax x 8)",
    "ember_np": "ember_np, Python loop (gymnasium SyncVectorEnv x 8)",
    "ember_np-fused": "ember_np, fused loop (NativeVecEnv x 8)",
}
#: XLA on one thread (JAX's CPU backend).
XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
WARM_UP_STEPS = 2_048  # the untimed round: enough for two rollouts and the window


def rollout_steps() -> int:
    """Env steps per rollout (all envs)."""
    return int(ZOO["n_envs"]) * int(ZOO["n_steps"])


def window(t_mark: float, t_end: float, steps_mark: int, steps_end: int) -> dict[str, Any]:
    """The steady-state figures of a run: env steps and seconds after the mark."""
    seconds = t_end - t_mark
    steps = steps_end - steps_mark
    return {"window_steps": steps, "window_s": seconds, "steps_per_s": steps / seconds}


def numpy_blas() -> str:
    """The OpenBLAS kernel NumPy's BLAS picked (threadpoolctl when installed)."""
    try:
        import threadpoolctl

        for info in threadpoolctl.threadpool_info():
            if info.get("internal_api") == "openblas":
                return f"OpenBLAS {info.get('version')} {info.get('architecture')} (threadpoolctl)"
    except ImportError:
        pass
    import ctypes

    import numpy as np  # noqa: F401  (loads its OpenBLAS)

    # no threadpoolctl: ask the OpenBLAS NumPy loaded for its core name directly
    with open("/proc/self/maps") as maps:
        libs = sorted({line.split()[-1] for line in maps if "openblas" in line.lower()})
    for path in sorted(libs, key=lambda p: "site-packages" not in p):  # NumPy's own first
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_corename64_", "openblas_get_corename64_",
                     "scipy_openblas_get_corename", "openblas_get_corename"):  # fmt: skip
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                return f"OpenBLAS {fn().decode()} ({Path(path).name}; no threadpoolctl)"
    return "no OpenBLAS found"


# -- workers (each in a fresh process) -------------------------------------------------


def worker_sb3(steps: int, seed: int) -> dict[str, Any]:
    import gymnasium as gym
    import stable_baselines3
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    z = ZOO
    marks: dict[str, float] = {}

    class Mark(BaseCallback):
        """Times the start of rollout WARM_ROLLOUTS + 1: after the 2nd update."""

        rollouts = 0

        def _on_rollout_start(self) -> None:
            self.rollouts += 1
            if self.rollouts == WARM_ROLLOUTS + 1:
                marks["t"], marks["steps"] = time.perf_counter(), self.num_timesteps

        def _on_step(self) -> bool:
            return True

    env = make_vec_env("CartPole-v1", n_envs=z["n_envs"], seed=seed, vec_env_cls=DummyVecEnv)
    model = PPO(
        "MlpPolicy", env, n_steps=z["n_steps"], batch_size=z["batch_size"],
        n_epochs=z["n_epochs"], gamma=z["gamma"], gae_lambda=z["gae_lambda"],
        ent_coef=z["ent_coef"], vf_coef=z["vf_coef"], max_grad_norm=z["max_grad_norm"],
        learning_rate=lambda progress: progress * z["learning_rate"],
        clip_range=lambda progress: progress * z["clip_range"],
        policy_kwargs=dict(net_arch=list(z["hidden"])), seed=seed, device="cpu", verbose=0,
    )  # fmt: skip
    assert model.policy.optimizer.defaults["eps"] == z["adam_eps"]  # SB3's PPO default
    t0 = time.perf_counter()
    model.learn(steps, callback=Mark())
    t_end = time.perf_counter()
    eval_env = Monitor(gym.make("CartPole-v1"))
    mean, _ = evaluate_policy(model, eval_env, EVAL_EPISODES, deterministic=True)
    return {
        **window(marks["t"], t_end, marks["steps"], model.num_timesteps),
        "steps": model.num_timesteps, "train_s": t_end - t0, "compile_s": None,
        "eval_mean": float(mean), "blas": f"numpy: {numpy_blas()}; {torch_blas()}",
        "versions": {"stable-baselines3": stable_baselines3.__version__,
                     "torch": torch.__version__, "gymnasium": gym.__version__},
    }  # fmt: skip


def torch_blas() -> str:
    import torch

    return f"torch {torch.__version__}: MKL {'yes' if torch.backends.mkl.is_available() else 'no'}"


def worker_cleanrl(steps: int, seed: int) -> dict[str, Any]:
    import gymnasium as gym
    import torch
    from ppo_cleanrl_style import train  # bench/, beside this file

    result = train(ZOO, steps, seed, WARM_ROLLOUTS, EVAL_EPISODES)
    return result | {
        "blas": f"numpy: {numpy_blas()}; {torch_blas()}",
        "versions": {"torch": torch.__version__, "gymnasium": gym.__version__},
    }


def worker_purejaxrl(steps: int, seed: int) -> dict[str, Any]:
    from importlib.metadata import version

    from ppo_purejaxrl_style import train  # bench/, beside this file

    result = train(ZOO, steps, seed, WARM_ROLLOUTS, EVAL_EPISODES)
    names = ("jax", "jaxlib", "gymnax", "flax", "optax", "distrax")
    return result | {"blas": "XLA's own CPU kernels (Eigen)",
                     "versions": {name: version(name) for name in names}}  # fmt: skip


def zoo_ppo_config(steps: int) -> Any:
    from ember_np.ppo.config import PPOConfig

    z = ZOO
    return PPOConfig(
        hidden_sizes=tuple(z["hidden"]), activation="tanh", n_steps=z["n_steps"],
        batch_size=z["batch_size"], n_epochs=z["n_epochs"], gamma=z["gamma"],
        gae_lambda=z["gae_lambda"], ent_coef=z["ent_coef"], vf_coef=z["vf_coef"],
        max_grad_norm=z["max_grad_norm"], adam_eps=z["adam_eps"],
        learning_rate=z["learning_rate"], lr_schedule="linear", clip_range=z["clip_range"],
        clip_schedule="linear", schedule_steps=steps,
    )  # fmt: skip


def worker_ember(steps: int, seed: int, fused: bool) -> dict[str, Any]:
    import gymnasium as gym

    import ember_np
    from ember_np import DqnTrainer
    from ember_np.encoding import IndexActionMapper, encoder_for_space
    from ember_np.envs import NativeVecEnv
    from ember_np.nn._blas import KERNEL_BLAS
    from ember_np.ppo.agent import PPOAgent

    n = ZOO["n_envs"]
    if fused:
        env: Any = NativeVecEnv("ember_np/CartPole-v1", n, seed=seed)
        obs_space, act_space = env.observation_space, env.action_space
    else:
        env = gym.make_vec("CartPole-v1", num_envs=n, vectorization_mode="sync")
        obs_space, act_space = env.single_observation_space, env.single_action_space
    agent = PPOAgent(encoder_for_space(obs_space), IndexActionMapper.for_space(act_space),
                     zoo_ppo_config(steps), seed=seed)  # fmt: skip
    if fused and not agent.can_fuse(env):
        reason = "PPOAgent.can_fuse(NativeVecEnv) is False: no fused PPO loop yet"
        return {"available": False, "reason": reason}
    trainer = DqnTrainer(env, agent, seed=seed, eval_env=gym.make("CartPole-v1"))
    assert trainer.fused == fused, (trainer.fused, fused)
    t0 = time.perf_counter()
    # one vector step at a time until the 2nd update is done (rows after an episode's
    # end are resets, not env steps, so a rollout is not a fixed number of env steps)
    while agent.n_updates < WARM_ROLLOUTS * ZOO["n_epochs"]:  # n_updates counts epochs
        trainer.train(n)
    t_mark, steps_mark = time.perf_counter(), agent.total_steps
    trainer.train(steps - steps_mark)
    t_end = time.perf_counter()
    report = trainer.eval(EVAL_EPISODES)
    kernels = re.sub(r"/\S*/", "", KERNEL_BLAS)  # the library's name, not where it is
    return {
        **window(t_mark, t_end, steps_mark, agent.total_steps),
        "steps": agent.total_steps, "train_s": t_end - t0, "compile_s": None,
        "eval_mean": float(report.mean_reward),
        "blas": f"numpy: {numpy_blas()}; kernels: {kernels}",
        "versions": {"ember_np": ember_np.__version__, "gymnasium": gym.__version__},
    }  # fmt: skip


WORKERS: dict[str, Callable[[int, int], dict[str, Any]]] = {
    "sb3": worker_sb3,
    "cleanrl": worker_cleanrl,
    "purejaxrl": worker_purejaxrl,
    "ember_np": lambda steps, seed: worker_ember(steps, seed, fused=False),
    "ember_np-fused": lambda steps, seed: worker_ember(steps, seed, fused=True),
}
#: The packages a contestant needs: missing ones make it "not available", not an error.
NEEDS = {
    "sb3": ("stable_baselines3", "torch"),
    "cleanrl": ("torch",),
    "purejaxrl": ("jax", "gymnax", "flax", "optax", "distrax"),
    "ember_np": ("ember_np",),
    "ember_np-fused": ("ember_np",),
}


def run_worker(name: str, steps: int, seed: int) -> dict[str, Any]:
    import importlib.util

    missing = [m for m in NEEDS[name] if importlib.util.find_spec(m) is None]
    if missing:
        return {"available": False,
                "reason": f"not installed in {sys.executable}: {', '.join(missing)}"}  # fmt: skip
    return {"available": True} | WORKERS[name](steps, seed)


# -- the parent: alternate fresh processes, then write the table --------------------------


def child_env() -> dict[str, str]:
    """This process's environment with one thread everywhere and OpenBLAS unpinned."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}  # fmt: skip
    env |= {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "NUMBA_NUM_THREADS": "1", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": XLA_FLAGS}  # fmt: skip
    return env


def measure(python: str, name: str, steps: int, seed: int, core: int) -> dict[str, Any]:
    """One fresh process (on CPU ``core`` alone, unless it is -1): its JSON line, plus
    wall time and CPU time from outside."""
    cmd = [python, str(BENCH / "ppo_speed.py"), "--worker", name, "--steps", str(steps),
           "--seed", str(seed)]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    pin = None if core < 0 else lambda: os.sched_setaffinity(0, {core})
    out = subprocess.run(cmd, capture_output=True, text=True, env=child_env(),
                         cwd=BENCH.parent, preexec_fn=pin)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return result | {"wall_s": wall, "cpu_s": cpu}


def machine() -> dict[str, Any]:
    return {"cpu": cpu_model() or "unknown CPU", "nproc": os.cpu_count(),
            "python": platform.python_version(), "load": os.getloadavg()}  # fmt: skip


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the repetitions of one contestant (None when it never ran)."""
    if not runs or not runs[0]["available"]:
        return {"available": False, "reason": runs[0]["reason"] if runs else "not run"}
    med = {key: statistics.median(r[key] for r in runs)
           for key in ("wall_s", "cpu_s", "steps_per_s", "eval_mean", "window_s")}  # fmt: skip
    compile_s = [r["compile_s"] for r in runs if r.get("compile_s") is not None]
    med["compile_s"] = statistics.median(compile_s) if compile_s else None
    med["cpu_per_wall"] = statistics.median(r["cpu_s"] / r["wall_s"] for r in runs)
    first = runs[0]
    return {"available": True, "median": med, "runs": runs, "steps": first["steps"],
            "window_steps": first["window_steps"], "blas": first["blas"],
            "versions": first["versions"]}  # fmt: skip


def ratios(summary: dict[str, dict[str, Any]]) -> None:
    """Each contestant's ratios to SB3 in this run: steady steps/s and whole command."""
    base = summary.get("sb3", {})
    for s in summary.values():
        if not (s["available"] and base.get("available")):
            continue
        m, b = s["median"], base["median"]
        # and repetition by repetition: SB3's run k and this contestant's run k were
        # minutes apart, so on a busy machine they saw much the same load
        pairs = list(zip(s["runs"], base["runs"]))
        s["vs_sb3"] = {"steady": m["steps_per_s"] / b["steps_per_s"],
                       "whole": b["wall_s"] / m["wall_s"],
                       "steady_per_rep": [r["steps_per_s"] / q["steps_per_s"] for r, q in pairs],
                       "whole_per_rep": [q["wall_s"] / r["wall_s"] for r, q in pairs]}  # fmt: skip


def table(summary: dict[str, dict[str, Any]], meta: dict[str, Any]) -> str:
    m, core = meta["machine"], meta["threads"]["core"]
    pinned = "not pinned" if core < 0 else f"each run pinned to CPU {core}"
    lines = [
        f"Command: `{meta['command']}`",
        "",
        f"Machine: {m['cpu']}, {m['nproc']} cores, Python {m['python']}; load average "
        f"{', '.join(f'{x:.2f}' for x in meta['load_before'])} before and "
        f"{', '.join(f'{x:.2f}' for x in meta['load_after'])} after "
        f"({meta['reps']} repetitions, {meta['steps']:,} env steps each, alternating, "
        f"{pinned}).",
        "",
        "| contestant | whole command (s) | steady env steps/s | vs SB3, steady | "
        "vs SB3, whole | compile (s) | greedy eval, 10 ep | CPU / wall |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name, s in summary.items():
        if not s["available"]:
            lines.append(f"| {LABELS[name]} | not available | | | | | | |")
            notes.append(f"- {LABELS[name]}: {s['reason']}.")
            continue
        med, vs = s["median"], s.get("vs_sb3")
        compile_s = "" if med["compile_s"] is None else f"{med['compile_s']:.1f}"
        per_rep = ", ".join(f"{x:.1f}" for x in vs["steady_per_rep"]) if vs else ""
        steady = f"{vs['steady']:.2f}x ({per_rep})" if vs else ""
        whole = f"{vs['whole']:.2f}x" if vs else ""
        lines.append(
            f"| {LABELS[name]} | {med['wall_s']:.1f} | {med['steps_per_s']:,.0f} | {steady} | "
            f"{whole} | {compile_s} | {med['eval_mean']:.1f} | {med['cpu_per_wall']:.2f} |"
        )
        notes.append(f"- {LABELS[name]}: {s['steps']:,} env steps ({s['window_steps']:,} in "
                     f"the window); BLAS: {s['blas']}; "
                     + ", ".join(f"{k} {v}" for k, v in s["versions"].items()) + ".")  # fmt: skip
    lines += ["", "Medians. Whole command: process start to exit (imports, compilation, "
              "training, a 10-episode greedy evaluation). Steady: env steps/s from the end "
              "of the 2nd rollout's update to the end of training. vs SB3, steady: the "
              "ratio of the medians (in brackets, repetition k's over SB3's k-th). vs SB3, "
              "whole: SB3's wall time over the row's. Compile: PureJaxRL's jit of the whole "
              "run, apart from its steady rate. CPU / wall: the process's CPU seconds over "
              "its wall seconds (below 1: it waited for the core).", "", *notes]  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100_000, help="env steps per run")
    parser.add_argument("--reps", type=int, default=3, help="timed runs per contestant")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", default=",".join(CONTESTANTS),
                        help="comma-separated contestants (default: all)")  # fmt: skip
    parser.add_argument("--jax-python", default=sys.executable,
                        help="the Python with jax, gymnax 0.0.9, flax, optax, distrax")  # fmt: skip
    parser.add_argument("--core", type=int, default=0,
                        help="the one CPU every run is pinned to (-1: no pinning)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=BENCH / "results_ppo_speed.md")
    parser.add_argument("--json", type=Path, default=BENCH / "results" / "ppo_speed.json")
    parser.add_argument("--worker", choices=CONTESTANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:  # a child: one run, one JSON line
        print(json.dumps(run_worker(args.worker, args.steps, args.seed)))
        return 0
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(CONTESTANTS))
    if unknown:
        parser.error(f"--only: unknown contestants {unknown}; choose from {list(CONTESTANTS)}")
    least = (WARM_ROLLOUTS + 1) * rollout_steps()
    if args.steps < least:
        parser.error(f"--steps must be at least {least} (the window starts after "
                     f"{WARM_ROLLOUTS} rollouts), got {args.steps}")  # fmt: skip

    def python(name: str) -> str:
        return args.jax_python if name == "purejaxrl" else sys.executable

    load_before = os.getloadavg()
    available = {}
    for name in names:  # the untimed round: numba's cache, the file cache, availability
        warm = measure(python(name), name, WARM_UP_STEPS, args.seed, args.core)
        available[name] = warm
        print(f"warm-up {name}: " + ("ok" if warm["available"] else warm["reason"]),
              file=sys.stderr)  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for rep in range(args.reps):
        for name in names:
            if not available[name]["available"]:
                continue
            r = measure(python(name), name, args.steps, args.seed, args.core)
            runs[name].append(r)
            print(f"rep {rep + 1} {name}: {r['steps_per_s']:,.0f} steps/s, "
                  f"{r['wall_s']:.1f} s, eval {r['eval_mean']:.1f}", file=sys.stderr)  # fmt: skip
    summary = {n: summarize(runs[n] or [available[n]]) for n in names}
    ratios(summary)
    argv_text = " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": f"python bench/ppo_speed.py {argv_text}".strip(), "steps": args.steps,
            "reps": args.reps, "machine": machine(), "load_before": load_before,
            "load_after": os.getloadavg(), "preset": ZOO,
            "threads": child_env_threads() | {"core": args.core}}  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table(summary, meta))
    args.json.write_text(json.dumps({"meta": meta, "contestants": summary}, indent=1) + "\n")
    print(args.out.read_text())
    return 0


def child_env_threads() -> dict[str, str]:
    """The thread settings the children ran with (for the JSON)."""
    env = child_env()
    keys = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
            "XLA_FLAGS")  # fmt: skip
    return {k: env[k] for k in keys} | {"unset": "OPENBLAS_CORETYPE OPENBLAS_L2_SIZE"}


if __name__ == "__main__":
    sys.exit(main())

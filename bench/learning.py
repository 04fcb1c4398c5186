"""Learning results: every RL Zoo preset on 5 seeds at the Zoo's step budget.

Usage::

    python bench/learning.py                       # all presets whose env is installed
    python bench/learning.py --envs CartPole-v1 --seeds 5 --jobs 2

Each (preset, seed) trains in its own process (``--jobs`` at a time) with the
preset's config and budget, a greedy evaluation of 10 episodes every tenth of
the budget (kept as ``best.npz``), then a final greedy evaluation of 20
episodes of the final policy and of ``best.npz``. Writes a markdown table
(mean and std across seeds of the per-seed means, wall time per run) to
``bench/results_learning.md`` and the learning curves to
``bench/learning_curves.png`` (needs matplotlib).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Bars of issue 5, and the published figures quoted in ANCHORS.md.
REFERENCE = {
    "CartPole-v1": {"bar": 475.0, "zoo": "500.0 ± 0.0", "cleanrl": "488.7 ± 16.1"},
    "Acrobot-v1": {"bar": -90.0, "zoo": "-76.6 ± 11.8", "cleanrl": "-91.5 ± 7.2"},
    "MountainCar-v0": {"bar": -120.0, "zoo": "-100.8 ± 9.9", "cleanrl": "-195.0 ± 8.5"},
    "LunarLander-v3": {"bar": 150.0, "zoo": "154.4 ± 79.2 (v2)", "cleanrl": "n/a"},
}
FINAL_EPISODES = 20
EVAL_EPISODES = 10


def evaluate(policy, env_id: str, episodes: int, seed: int) -> list[float]:
    import gymnasium as gym

    env = gym.make(env_id)
    returns = []
    for episode in range(episodes):
        obs, _ = env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy.act(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return returns


def worker(env_id: str, seed: int, steps: int) -> dict:
    import gymnasium as gym

    from ember_np import DqnAgent, DqnPolicy, DqnTrainer, TrainingRun
    from ember_np.presets import get_preset

    preset = get_preset(env_id)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        run = TrainingRun.create(env_id, "bench", root=root)
        env = gym.make(env_id)
        agent = DqnAgent.for_env(env, preset.config, seed=seed)
        trainer = DqnTrainer(env, agent, seed=seed, run=run, checkpoint_freq=steps)
        curve = []
        chunk = steps // 10
        while agent.total_steps < steps:
            trainer.train(min(chunk, steps - agent.total_steps))
            curve.append((agent.total_steps, trainer.eval(EVAL_EPISODES).mean_reward))
        train_seconds = time.perf_counter() - t0
        eval_seed = 10_000 + 100 * seed  # episodes never seen in training
        final = evaluate(agent.into_policy(), env_id, FINAL_EPISODES, eval_seed)
        best = evaluate(DqnPolicy.load(run.best_checkpoint_path()), env_id, FINAL_EPISODES,
                        eval_seed)  # fmt: skip
    return {
        "env_id": env_id,
        "seed": seed,
        "final_mean": statistics.fmean(final),
        "best_mean": statistics.fmean(best),
        "curve": curve,
        "train_seconds": train_seconds,
    }


def worker_sb3(env_id: str, seed: int, steps: int) -> dict:
    """The same protocol with Stable-Baselines3's DQN and the Zoo's own arguments."""
    import copy

    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import BaseCallback

    from ember_np.presets import get_preset

    torch.set_num_threads(1)
    preset = get_preset(env_id)
    chunk = steps // 10
    curve: list[tuple[int, float]] = []
    best: dict = {"mean": -float("inf"), "state": None}

    class Greedy:
        def __init__(self, policy):
            self.policy = policy

        def act(self, obs):
            return int(self.policy.predict(obs, deterministic=True)[0])

    class PeriodicEval(BaseCallback):
        def _on_step(self) -> bool:
            if self.num_timesteps % chunk == 0:
                mean = statistics.fmean(
                    evaluate(Greedy(self.model.policy), env_id, EVAL_EPISODES, 5_000 + seed)
                )
                curve.append((self.num_timesteps, mean))
                if mean > best["mean"]:
                    best["mean"] = mean
                    best["state"] = copy.deepcopy(self.model.policy.state_dict())
            return True

    t0 = time.perf_counter()
    model = DQN("MlpPolicy", gym.make(env_id), seed=seed, device="cpu", verbose=0,
                **preset.sb3_kwargs)  # fmt: skip
    model.learn(steps, callback=PeriodicEval())
    train_seconds = time.perf_counter() - t0
    eval_seed = 10_000 + 100 * seed
    final = evaluate(Greedy(model.policy), env_id, FINAL_EPISODES, eval_seed)
    model.policy.load_state_dict(best["state"])
    best_returns = evaluate(Greedy(model.policy), env_id, FINAL_EPISODES, eval_seed)
    return {
        "env_id": env_id,
        "seed": seed,
        "final_mean": statistics.fmean(final),
        "best_mean": statistics.fmean(best_returns),
        "curve": curve,
        "train_seconds": train_seconds,
    }


def run_worker(env_id: str, seed: int, library: str, steps: int) -> dict:
    # One BLAS thread per process: --jobs processes share the cores, and
    # OpenBLAS threads spinning against each other slow everything down ~10x.
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, __file__, "--worker", env_id, str(seed), library, str(steps)],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"{env_id} seed {seed} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def installed(env_id: str) -> bool:
    import gymnasium as gym

    try:
        gym.make(env_id).close()
        return True
    except Exception:
        return False


def mean_std(values: list[float]) -> str:
    return f"{statistics.fmean(values):.1f} ± {statistics.pstdev(values):.1f}"


def chance_of_bar(finals: list[float], bar: float, k: int = 5) -> float:
    """Share of the k-seed subsets of ``finals`` whose mean reaches ``bar``.

    With more seeds than the bar's five, this says how likely a five-seed
    run is to clear the bar, given the spread of final policies these seeds
    show: every subset when there are at most 20,000, else 20,000 random ones.
    """
    import itertools
    import math
    import random

    if len(finals) < k:
        return float("nan")
    if math.comb(len(finals), k) <= 20_000:
        subsets = list(itertools.combinations(finals, k))
    else:
        draw = random.Random(0)
        subsets = [draw.sample(finals, k) for _ in range(20_000)]
    return sum(statistics.fmean(c) >= bar for c in subsets) / len(subsets)


def plot(results: dict[str, list[dict]], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, len(results), figsize=(4.5 * len(results), 3.6), squeeze=False)
    for ax, (env_id, runs) in zip(axes[0], results.items()):
        for r in runs:
            xs, ys = zip(*r["curve"])
            ax.plot(xs, ys, alpha=0.35, lw=1)
        steps = [x for x, _ in runs[0]["curve"]]
        means = [statistics.fmean(r["curve"][i][1] for r in runs) for i in range(len(steps))]
        ax.plot(steps, means, "k-", lw=2, label="mean of seeds")
        ax.axhline(REFERENCE[env_id]["bar"], color="r", ls="--", lw=1, label="bar")
        ax.set_title(env_id)
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("greedy eval reward (10 episodes)")
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--envs", default=",".join(REFERENCE))
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path, default=HERE / "results_learning.md")
    p.add_argument("--plot", type=Path, default=HERE / "learning_curves.png")
    p.add_argument(
        "--library",
        choices=["ember_np", "sb3"],
        default="ember_np",
        help="sb3: the same protocol with Stable-Baselines3 (needs the bench extra)",
    )
    p.add_argument(
        "--steps",
        type=int,
        help="train this many steps instead of each preset's Zoo budget (a quick check: "
        "the bars apply at the Zoo's budget)",
    )
    p.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        env_id, seed, library, steps = args.worker
        run = worker_sb3 if library == "sb3" else worker
        print(json.dumps(run(env_id, int(seed), int(steps))))
        return
    if args.library == "sb3":
        args.out = args.out.with_name(args.out.stem + "_sb3.md")
        args.plot = args.plot.with_name(args.plot.stem + "_sb3.png")
    envs = [e for e in args.envs.split(",") if e]
    skipped = [e for e in envs if not installed(e)]
    envs = [e for e in envs if e not in skipped]
    jobs = [(e, s) for e in envs for s in range(args.seeds)]

    def budget(env_id: str) -> int:
        from ember_np.presets import get_preset

        return args.steps or get_preset(env_id).steps

    results: dict[str, list[dict]] = {e: [] for e in envs}
    with ThreadPoolExecutor(args.jobs) as pool:
        for r in pool.map(lambda job: run_worker(*job, args.library, budget(job[0])), jobs):
            results[r["env_id"]].append(r)
            print(
                f"{r['env_id']} seed {r['seed']}: final {r['final_mean']:.1f}, "
                f"best {r['best_mean']:.1f}, {r['train_seconds']:.0f} s",
                file=sys.stderr,
            )
    lines = [
        f"Command: python bench/learning.py --seeds {args.seeds} --jobs {args.jobs}"
        + (f" --envs {args.envs}" if args.envs != ",".join(REFERENCE) else "")
        + (f" --steps {args.steps}" if args.steps else "")
        + (" --library sb3" if args.library == "sb3" else ""),
        "",
        f"Greedy evaluation, {FINAL_EPISODES} episodes per seed; mean ± std across {args.seeds} "
        "seeds of the per-seed means. 'final' is the policy at the end of the budget, 'best' "
        "the best periodic evaluation (best.npz), re-evaluated on fresh episodes.",
        "",
        f"| env (budget) | bar | {args.library} final | {args.library} best | RL Zoo | CleanRL "
        "| wall time per run |" + (" P(5-seed final mean >= bar) |" if args.seeds > 5 else ""),
        "|---|---|---|---|---|---|---|" + ("---|" if args.seeds > 5 else ""),
    ]
    for env_id, runs in results.items():
        ref = REFERENCE[env_id]
        finals = [r["final_mean"] for r in runs]
        bests = [r["best_mean"] for r in runs]
        wall = statistics.median(r["train_seconds"] for r in runs)
        steps = budget(env_id)
        ok = "meets" if statistics.fmean(finals) >= ref["bar"] else "misses"
        chance = f" {chance_of_bar(finals, ref['bar']):.2f} |" if args.seeds > 5 else ""
        lines.append(
            f"| {env_id} ({steps:,}) | >= {ref['bar']:g} | {mean_std(finals)} ({ok}) | "
            f"{mean_std(bests)} | {ref['zoo']} | {ref['cleanrl']} | {wall:.0f} s |{chance}"
        )
    lines.append("")
    for env_id, runs in results.items():
        ordered = sorted(runs, key=lambda r: r["seed"])
        finals = ", ".join(f"{r['final_mean']:.1f}" for r in ordered)
        bests = ", ".join(f"{r['best_mean']:.1f}" for r in ordered)
        lines.append(f"- {env_id} per seed: final {finals}; best {bests}")
    for env_id in skipped:
        lines.append(f"- {env_id}: not run (environment not installed)")
    if plot(results, args.plot):
        lines += ["", f"Learning curves: {args.plot.name}"]
    table = "\n".join(lines)
    print(table)
    args.out.write_text(table + "\n")
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()

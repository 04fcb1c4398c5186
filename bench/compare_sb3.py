"""Side-by-side speed and memory: ember_np vs Stable-Baselines3 DQN.

Usage (needs the ``bench`` extra: torch==2.13.0 and stable-baselines3)::

    python bench/compare_sb3.py                 # S1 and S2, 3 repetitions, memory
    python bench/compare_sb3.py --reps 5 --out results.md

Each measurement runs in a fresh subprocess, alternating ember_np and SB3
(A B A B ...), so both see the same machine state. Both libraries get the same
hyperparameters (S1 / S2 of bench/settings.py), the same gymnasium CartPole-v1, one
thread each (``torch.set_num_threads(1)``; ``OPENBLAS_NUM_THREADS=1`` for
ember_np's BLAS), and SB3's default ``max_grad_norm`` of 10.

Reported per setting: median env steps/s after the warm-up (once learning has
started: compilation, imports and replay warm-up are excluded), median wall
time of the whole run (process start to exit), median peak RSS, and the
ember_np / SB3 ratio. The memory part fills a 1,000,000-transition replay
buffer in each library, trains 2,000 steps, and reports peak RSS and bytes per
stored transition (CartPole's 4 floats, and an 8-float observation).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from machine_info import cpu_model

SETTINGS = {
    "S1": dict(
        net=(64, 64), lr=1e-3, batch=64, buffer=10_000, learning_starts=1_000, gamma=0.99,
        target_update=200, train_freq=1, gradient_steps=1, eps_start=1.0, eps_end=0.01,
        eps_steps=10_000, total=20_000,
    ),
    "S1-tf4": dict(
        net=(64, 64), lr=1e-3, batch=64, buffer=10_000, learning_starts=1_000, gamma=0.99,
        target_update=200, train_freq=4, gradient_steps=1, eps_start=1.0, eps_end=0.01,
        eps_steps=10_000, total=40_000,
    ),
    "S2": dict(
        net=(256, 256), lr=2.3e-3, batch=64, buffer=100_000, learning_starts=1_000, gamma=0.99,
        target_update=10, train_freq=256, gradient_steps=128, eps_start=1.0, eps_end=0.04,
        eps_steps=8_000, total=20_480,
    ),
}  # fmt: skip
MAX_GRAD_NORM = 10.0  # SB3's default; applied to both


def peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


# -- workers (run in a fresh process) ----------------------------------------------


def ember_config(s: dict, buffer: int | None = None):
    from ember_np import DqnConfig

    return DqnConfig(
        hidden_sizes=s["net"], learning_rate=s["lr"], batch_size=s["batch"],
        buffer_capacity=buffer or s["buffer"], min_replay_size=s["learning_starts"],
        gamma=s["gamma"], target_update_freq=s["target_update"], train_freq=s["train_freq"],
        gradient_steps=s["gradient_steps"], epsilon_start=s["eps_start"], epsilon_end=s["eps_end"],
        epsilon_decay_steps=s["eps_steps"], max_grad_norm=MAX_GRAD_NORM,
    )  # fmt: skip


def sb3_model(s: dict, total: int, buffer: int | None = None):
    import gymnasium as gym
    import torch
    from stable_baselines3 import DQN

    torch.set_num_threads(1)
    return DQN(
        "MlpPolicy", gym.make("CartPole-v1"), learning_rate=s["lr"],
        buffer_size=buffer or s["buffer"], learning_starts=s["learning_starts"],
        batch_size=s["batch"], tau=1.0, gamma=s["gamma"], train_freq=s["train_freq"],
        gradient_steps=s["gradient_steps"], target_update_interval=s["target_update"],
        exploration_fraction=s["eps_steps"] / total, exploration_initial_eps=s["eps_start"],
        exploration_final_eps=s["eps_end"], max_grad_norm=MAX_GRAD_NORM,
        policy_kwargs=dict(net_arch=list(s["net"])), seed=0, device="cpu", verbose=0,
    )  # fmt: skip


def worker_speed(lib: str, setting: str) -> dict:
    s = SETTINGS[setting]
    total, warm = s["total"], s["learning_starts"]
    if lib.startswith("ember_np"):
        import gymnasium as gym

        from ember_np import DqnAgent, DqnTrainer

        # ember_np-fused: the native CartPole and the compiled training loop
        env = gym.make("ember_np/CartPole-v1" if lib == "ember_np-fused" else "CartPole-v1")
        trainer = DqnTrainer(env, DqnAgent.for_env(env, ember_config(s), seed=0), seed=0)
        assert trainer.fused == (lib == "ember_np-fused")
        trainer.train(warm)
        t0 = time.perf_counter()
        trainer.train(total - warm)
        elapsed = time.perf_counter() - t0
    else:
        from stable_baselines3.common.callbacks import BaseCallback

        class Timer(BaseCallback):
            t0 = 0.0

            def _on_step(self) -> bool:
                if self.num_timesteps == warm:
                    Timer.t0 = time.perf_counter()
                return True

        model = sb3_model(s, total)
        model.learn(total, callback=Timer())
        elapsed = time.perf_counter() - Timer.t0
    return {"steps_per_s": (total - warm) / elapsed, "peak_rss_mb": peak_rss_mb()}


def worker_memory(lib: str, obs_size: int) -> dict:
    """Fill a 1M-transition buffer, train 2,000 steps; report RSS and bytes/transition.

    Both buffers hold the same stream: episodes of 50 steps (streams.episode_stream).
    ember_np's is filled through ``push``, as training fills it; SB3's arrays are
    written directly (its ``add`` is slower, and holds the same bytes).
    """

    from streams import episode_stream, fill  # bench/streams.py: NumPy only

    s = SETTINGS["S1"]
    capacity = 1_000_000 if obs_size == 4 else 100_000  # bytes/transition don't depend on it
    if lib == "ember_np":
        from ember_np import CircularBuffer, DqnAgent, DqnTrainer

        if obs_size != 4:
            buf = CircularBuffer(capacity, obs_size, 2)
            fill(buf, capacity, obs_size)
            return {"bytes_per_transition": buf.nbytes_per_transition}
        import gymnasium as gym

        env = gym.make("CartPole-v1")
        agent = DqnAgent.for_env(env, ember_config(s, buffer=capacity), seed=0)
        buf = agent.buffer
        fill(buf, capacity, obs_size)
        DqnTrainer(env, agent, seed=0).train(2_000)
        return {"bytes_per_transition": buf.nbytes_per_transition, "peak_rss_mb": peak_rss_mb()}
    from gymnasium import spaces
    from stable_baselines3.common.buffers import ReplayBuffer

    if obs_size != 4:
        rb = ReplayBuffer(
            capacity, spaces.Box(-1, 1, (obs_size,)), spaces.Discrete(2), device="cpu"
        )
        return {"bytes_per_transition": sb3_bytes(rb, capacity)}
    model = sb3_model(s, 2_000, buffer=capacity)
    rb = model.replay_buffer
    for i, (obs, action, reward, next_obs, status) in enumerate(episode_stream(capacity, obs_size)):
        rb.observations[i, 0] = obs
        rb.next_observations[i, 0] = next_obs
        rb.actions[i] = action
        rb.rewards[i] = reward
        rb.dones[i] = status
    rb.timeouts[:] = 0.0
    rb.full = True
    model.learning_starts = 0
    model.learn(2_000)
    return {"bytes_per_transition": sb3_bytes(rb, capacity), "peak_rss_mb": peak_rss_mb()}


def sb3_bytes(rb, capacity: int) -> float:
    arrays = [rb.observations, rb.actions, rb.rewards, rb.dones, rb.timeouts]
    if getattr(rb, "next_observations", None) is not None:
        arrays.append(rb.next_observations)
    return sum(a.nbytes for a in arrays) / capacity


# -- driver ------------------------------------------------------------------------


def run_worker(args: list[str]) -> tuple[dict, float]:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, __file__, "--worker", *args], capture_output=True, text=True, env=env
    )
    wall = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"worker {args} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1]), wall


def machine() -> str:
    import platform

    cpu = cpu_model() or "unknown CPU"
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()}"


def versions() -> str:
    import importlib.metadata as md

    def version(name: str) -> str:
        try:
            return md.version(name)
        except md.PackageNotFoundError:
            return "not installed"

    names = ["numpy", "numba", "scipy", "gymnasium", "torch", "stable-baselines3"]
    return ", ".join(f"{n} {version(n)}" for n in names)


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--reps", type=int, default=3, help="repetitions per library and setting (>= 3)")
    p.add_argument("--settings", default="S1,S1-tf4,S2")
    p.add_argument("--no-memory", action="store_true", help="skip the 1M-buffer memory runs")
    p.add_argument("--out", type=Path, help="also write the markdown table here")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        kind, lib, what = args.worker
        result = worker_speed(lib, what) if kind == "speed" else worker_memory(lib, int(what))
        print(json.dumps(result))
        return

    libs = ["ember_np", "ember_np-fused", "sb3"]
    lines = [
        f"Machine: {machine()}",
        f"Versions: {versions()}",
        f"Command: python bench/compare_sb3.py --reps {args.reps}",
        "",
        "| setting | library | env steps/s (median) | wall time, whole run | peak RSS "
        "| speed ratio |",
        "|---|---|---|---|---|---|",
    ]
    for setting in args.settings.split(","):
        results: dict[str, list[tuple[dict, float]]] = {lib: [] for lib in libs}
        for rep in range(args.reps):
            for lib in libs:  # A B A B ...
                res, wall = run_worker(["speed", lib, setting])
                results[lib].append((res, wall))
                print(f"{setting} rep {rep} {lib}: {res['steps_per_s']:,.0f} steps/s, "
                      f"{wall:.1f} s, {res['peak_rss_mb']:.0f} MB", file=sys.stderr)  # fmt: skip
        med = {
            lib: (
                statistics.median(r["steps_per_s"] for r, _ in results[lib]),
                statistics.median(w for _, w in results[lib]),
                statistics.median(r["peak_rss_mb"] for r, _ in results[lib]),
            )
            for lib in libs
        }
        total = SETTINGS[setting]["total"]
        for lib in libs:
            sps, wall, rss = med[lib]
            shown = f"**{sps / med['sb3'][0]:.1f}x**" if lib != "sb3" else "1x"
            lines.append(
                f"| {setting} ({total:,} steps) | {lib} | {sps:,.0f} | {wall:.1f} s "
                f"| {rss:.0f} MB | {shown} |"
            )
    if not args.no_memory:
        lines += ["", "| memory | ember_np | SB3 | ratio |", "|---|---|---|---|"]
        pair = ["ember_np", "sb3"]
        mem: dict[str, list[dict]] = {lib: [] for lib in pair}
        for _ in range(args.reps):
            for lib in pair:
                mem[lib].append(run_worker(["memory", lib, "4"])[0])
        small = {lib: run_worker(["memory", lib, "8"])[0]["bytes_per_transition"] for lib in pair}
        b4 = {lib: mem[lib][0]["bytes_per_transition"] for lib in pair}
        rss = {lib: statistics.median(m["peak_rss_mb"] for m in mem[lib]) for lib in pair}
        lines.append(f"| bytes per transition, CartPole (4 floats) | {b4['ember_np']:.0f} | "
                     f"{b4['sb3']:.0f} | {b4['ember_np'] / b4['sb3']:.2f} |")  # fmt: skip
        lines.append(f"| bytes per transition, 8-float observation | {small['ember_np']:.0f} | "
                     f"{small['sb3']:.0f} | {small['ember_np'] / small['sb3']:.2f} |")  # fmt: skip
        lines.append(f"| peak RSS, full 1,000,000-transition buffer + 2,000 steps | "
                     f"{rss['ember_np']:.0f} MB | {rss['sb3']:.0f} MB | "
                     f"{rss['ember_np'] / rss['sb3']:.2f} |")  # fmt: skip
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()

"""How far ember_np runs from the machine's floor: achieved speed as a fraction of FLOPs.

The *floor* of a DQN update is the time its matrix products would take at the
single-thread sgemm rate of the BLAS the kernels call (measured here, in the
same run, on a 1024x1024x1024 float32 product): the forward passes (online on
``obs``; target on ``next_obs``; with double DQN, online on ``next_obs`` too) and
the backward pass (a weight gradient for every layer, an input gradient for
every layer but the first). Everything else an update does (ReLU, LayerNorm,
the dueling combination, the loss, Adam) is counted as costing nothing, so the
floor is a bound no implementation reaches; ``floor / time`` is the fraction of
the machine's matrix speed achieved, ``time / floor`` how many floors it takes.

Measured here, one after another in one process, with the sgemm rate taken
before and after each case and averaged (this machine's speed drifts by up to
50% from minute to minute, so only the ratio is quoted):

* ``QNetwork.update`` for the S1 and S2 settings and each env's ``rainbow`` preset;
* one fused training step of CartPole's ``rainbow`` preset, per update (the
  whole env step, acting, pushes, sampling and the update);
* ``--seeds``: a whole ``ember-np train CartPole-v1 --seeds 20 --quiet`` (warm
  cache) against the FLOPs of its 20 runs' updates spread over the machine's cores
  (with ``--seeds-run``; it takes about a minute).

Run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/floor.py [--seeds-run]``.
``bench/test_bench_floor.py`` times the same cases under pytest-benchmark.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import NamedTuple

import gymnasium as gym
import numpy as np
from machine_info import cpu_model

import ember_np.envs  # noqa: F401  (registers the native env ids)
from ember_np import (
    Batch,
    CircularBuffer,
    DqnAgent,
    DqnConfig,
    DqnTrainer,
    QNetwork,
    Rng,
    UpdateOptions,
)
from ember_np.nn._blas import KERNEL_BLAS, gemm
from ember_np.presets import get_preset

SGEMM_SIZE = 1024
ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")


def layer_shapes(config: DqnConfig, obs_size: int, n_actions: int) -> list[tuple[int, int]]:
    """(inputs, outputs) of every linear layer of ``config``'s network.

    A dueling network's two heads (value: 1 unit, advantages: ``n_actions``)
    read the same last hidden layer: counted as one layer of ``1 + n_actions``.
    """
    sizes = [obs_size, *config.hidden_sizes]
    shapes = list(zip(sizes[:-1], sizes[1:]))
    shapes.append((sizes[-1], n_actions + (1 if config.dueling else 0)))
    return shapes


def update_flops(config: DqnConfig, obs_size: int, n_actions: int) -> int:
    """Floating-point operations of the matrix products of one update (module docstring)."""
    b = config.batch_size
    per_pass = [2 * b * i * o for i, o in layer_shapes(config, obs_size, n_actions)]
    forwards = 3 if config.double_dqn else 2
    backward = 2 * sum(per_pass) - per_pass[0]  # no input gradient for the first layer
    return forwards * sum(per_pass) + backward


def updates_per_run(config: DqnConfig, steps: int) -> int:
    """Gradient steps a run of ``steps`` env steps takes (the agent's train schedule:
    every ``train_freq`` steps once ``learning_starts`` transitions are stored)."""
    t = np.arange(1, steps + 1)
    stored = np.minimum(t, config.buffer_capacity)
    due = (t % config.train_freq == 0) & (stored >= config.learning_starts)
    return int(due.sum()) * config.gradient_steps_per_train


def best_seconds(fn: Callable[[], object], calls: int, rounds: int = 5) -> float:
    """The fastest of ``rounds`` rounds, in seconds per call (``fn`` warmed up first)."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def sgemm_rate(n: int = SGEMM_SIZE) -> float:
    """FLOP/s of an ``n``-cubed float32 product through the kernels' own BLAS (one thread)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    seconds = best_seconds(lambda: gemm(a, b, c, False, False, 0.0), calls=3)
    return 2.0 * n**3 / seconds


def sample_batch(config: DqnConfig, obs_size: int, n_actions: int) -> Batch:
    """A batch as ``config``'s agent samples it (its n-step returns), from random transitions."""
    buffer = CircularBuffer(1_000, obs_size, n_actions, n_step=config.n_step, gamma=config.gamma)
    rng = np.random.default_rng(1)
    for t in range(max(config.batch_size, 256)):
        obs = rng.standard_normal(obs_size).astype(np.float32)
        nxt = rng.standard_normal(obs_size).astype(np.float32)
        buffer.push(obs, int(rng.integers(n_actions)), 1.0, nxt, int(t % 50 == 49))
    return buffer.sample(config.batch_size, Rng(0))


def update_call(config: DqnConfig, obs_size: int, n_actions: int) -> Callable[[], object]:
    """One ``QNetwork.update`` of ``config``'s network on a batch of its size, as a
    call without arguments (made once: the first call compiles or loads the kernel)."""
    net = QNetwork((obs_size, *config.hidden_sizes, n_actions), seed=0,
                   dueling=config.dueling, layer_norm=config.layer_norm)  # fmt: skip
    target = net.copy()
    batch = sample_batch(config, obs_size, n_actions)
    options = UpdateOptions(gamma=config.gamma, learning_rate=config.learning_rate,
                            huber_delta=config.huber_delta, double_dqn=config.double_dqn,
                            max_grad_norm=config.max_grad_norm)  # fmt: skip
    return lambda: net.update(batch, target, options)


def time_fused_step(env_id: str, config: DqnConfig, steps: int = 6_000) -> float:
    """Seconds of fused training per update, past ``learning_starts`` (native env)."""
    env = gym.make(f"ember_np/{env_id}")
    agent = DqnAgent.for_env(env, config, seed=0)
    trainer = DqnTrainer(env, agent, seed=0)
    assert trainer.fused, "the native env should train in the fused loop"
    trainer.train(config.learning_starts + 200)  # compile / load, fill the buffer
    best = float("inf")
    for _ in range(3):
        before = agent.n_updates
        start = time.perf_counter()
        trainer.train(steps)
        best = min(best, (time.perf_counter() - start) / (agent.n_updates - before))
    return best


class Row(NamedTuple):
    case: str
    flops: int
    seconds: float
    rate: float  # FLOP/s of sgemm around this case

    @property
    def floor(self) -> float:
        return self.flops / self.rate


def measured(case: str, flops: int, run: Callable[[], float]) -> Row:
    """``run()``'s seconds, with the sgemm rate measured before and after it."""
    before = sgemm_rate()
    seconds = run()
    return Row(case, flops, seconds, (before + sgemm_rate()) / 2)


def env_sizes(env_id: str) -> tuple[int, int]:
    env = gym.make(env_id)
    return int(env.observation_space.shape[0]), int(env.action_space.n)


def update_rows() -> list[Row]:
    """The S1 / S2 updates, each env's ``rainbow`` update and CartPole's fused step."""
    cases = [("update S1 (ember, 4-64-64-2, batch 64)", get_preset("ember").config, "CartPole-v1"),
             ("update S2 (zoo, 4-256-256-2, batch 64)", get_preset("zoo", "CartPole-v1").config,
              "CartPole-v1")]  # fmt: skip
    for env_id in ENVS:
        cases.append((f"update rainbow {env_id}", get_preset("rainbow", env_id).config, env_id))
    rows = []
    for case, config, env_id in cases:
        obs_size, n_actions = env_sizes(env_id)
        flops = update_flops(config, obs_size, n_actions)
        call = update_call(config, obs_size, n_actions)
        rows.append(measured(case, flops, lambda call=call: best_seconds(call, calls=200)))
    config = get_preset("rainbow", "CartPole-v1").config
    flops = update_flops(config, *env_sizes("CartPole-v1"))
    rows.append(measured("fused training step, rainbow CartPole-v1, per update", flops,
                         lambda: time_fused_step("CartPole-v1", config)))  # fmt: skip
    return rows


def seeds_row(n_seeds: int = 20, env_id: str = "CartPole-v1") -> Row:
    """A whole ``ember-np train ENV --seeds N --quiet`` (default preset), against the
    FLOPs of all its updates at the sgemm rate of every core (``os.cpu_count()``)."""
    preset = get_preset("rainbow", env_id)
    flops = n_seeds * updates_per_run(preset.config, preset.steps)
    flops *= update_flops(preset.config, *env_sizes(env_id))
    cores = os.cpu_count() or 1

    def run() -> float:
        with tempfile.TemporaryDirectory() as root:
            command = [sys.executable, "-m", "ember_np", "train", env_id, "--seeds", str(n_seeds),
                       "--quiet", "--root", root]  # fmt: skip
            start = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
            return time.perf_counter() - start

    row = measured(f"ember-np train {env_id} --seeds {n_seeds} (whole run, {cores} cores)",
                   flops, run)  # fmt: skip
    return row._replace(rate=row.rate * cores)


def table(rows: list[Row]) -> str:
    lines = [
        "| case | MFLOP | sgemm GFLOP/s | floor | measured | fraction of floor speed | x floor |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        unit, scale = ("s", 1.0) if r.seconds > 1 else ("us", 1e6)
        cells = [r.case, f"{r.flops / 1e6:,.2f}", f"{r.rate / 1e9:.1f}",
                 f"{r.floor * scale:,.1f} {unit}", f"{r.seconds * scale:,.1f} {unit}",
                 f"{r.floor / r.seconds:.0%}", f"{r.seconds / r.floor:.2f}"]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine() -> str:
    cpu = cpu_model() or "unknown CPU"
    pinned = os.environ.get("OPENBLAS_CORETYPE")
    return (f"{cpu}, {os.cpu_count()} cores; kernels' BLAS: {KERNEL_BLAS}; "
            f"OPENBLAS_CORETYPE={pinned or 'unset'}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds-run", action="store_true",
        help="also time a whole `ember-np train CartPole-v1 --seeds 20`",
    )  # fmt: skip
    args = parser.parse_args(argv)
    rows = update_rows()
    if args.seeds_run:
        rows.append(seeds_row())
    print(machine())
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

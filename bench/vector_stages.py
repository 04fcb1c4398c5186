"""Where the time of a fused vector step goes, stage by stage, N = 1 against N = 16.

Usage::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/vector_stages.py
    python bench/vector_stages.py --quick         # fewer steps (a smoke run)

Native CartPole, the 64x64 network of setting S1, ``train_freq`` 64 and
batch 32 (one update per 64 transitions, so acting, stepping and the
bookkeeping dominate). Prints, per transition:

* the whole ``DqnTrainer.train`` of N = 1 (the single env's fused loop) and
  N = 16 (a ``NativeVecEnv`` in the compiled vector loop), side by side in
  interleaved rounds, split into the compiled loop and the Python between
  its calls (each finished episode's record, stats and log row);
* each stage alone, in a compiled loop over the kernels the fused loops
  call: the env steps, the acting (16 observations in one
  ``act_batch_explore`` against 16 one-observation ``epsilon_greedy``
  calls, the N = 1 loop's acting), the pushes (``observe_one`` with
  training off) and one update (``train_from_buffer``) over 64.

CPU seconds of this process (``time.process_time``), so that other
processes on a shared machine disturb the figures less than wall time would;
the wall-clock transitions/s of the same rounds are printed beside them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from numba import njit

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from settings import S1  # noqa: E402
from vector_speed import native_trainer  # noqa: E402

from ember_np.dqn.agent_kernels import (  # noqa: E402
    act_batch_explore,
    epsilon_greedy,
    observe_one,
    per_beta,
    train_from_buffer,
    update_settings_now,
)
from ember_np.dqn.learner.noisy import acting_params  # noqa: E402
from ember_np.envs._dispatch import reset_copy, step_copy  # noqa: E402
from ember_np.training import drivers  # noqa: E402

TRAIN_FREQ, BATCH, N_VEC = 64, 32, 16


def trainer(n_envs: int, train_freq: int = TRAIN_FREQ) -> Any:
    """A fused trainer on compiled CartPole with ``n_envs`` envs (1: the single env),
    past its replay warm-up and exploration decay."""
    return native_trainer(n_envs, train_freq, BATCH, warmup=S1.epsilon_decay_steps)


def side_by_side(trainers: dict[int, Any], steps: int, rounds: int) -> dict[int, dict[str, float]]:
    """Median CPU microseconds per transition of ``train(steps)`` per N, rounds
    interleaved: ``total``, ``kernel`` (inside the compiled loop) and ``python``
    (the rest); ``wall``: the median wall-clock transitions/s."""
    inside = dict.fromkeys(trainers, 0.0)
    for n in trainers:  # the compiled loop the fused driver of each N calls
        name = "fused_steps" if n == 1 else "fused_vec_steps"
        run = getattr(drivers, name)

        def timed(*args: Any, run: Callable[..., int] = run, n: int = n) -> int:
            t0 = time.process_time()
            try:
                return run(*args)
            finally:
                inside[n] += time.process_time() - t0

        setattr(drivers, name, timed)
    rows: dict[int, list[tuple[float, float, float]]] = {n: [] for n in trainers}
    for _ in range(rounds):
        for n, tr in trainers.items():
            inside[n] = 0.0
            before = tr.agent.total_steps
            t0, w0 = time.process_time(), time.perf_counter()
            tr.train(steps)
            total, wall = time.process_time() - t0, time.perf_counter() - w0
            done = tr.agent.total_steps - before
            rows[n].append((total * 1e6 / done, inside[n] * 1e6 / done, done / wall))
    med = statistics.median
    return {n: {"total": med(t for t, _, _ in r), "kernel": med(k for _, k, _ in r),
                "python": med(t - k for t, k, _ in r), "wall": med(w for _, _, w in r)}
            for n, r in rows.items()}  # fmt: skip


@njit
def _act_batch(k, net, epsilon, rng, obs, masks, acting, out):  # noqa: ANN001, ANN202
    for _ in range(k):
        act_batch_explore(net, epsilon, rng, obs, masks, acting, out)


@njit
def _act_each(k, net, epsilon, rng, obs, masks, out):  # noqa: ANN001, ANN202
    for _ in range(k):
        for e in range(obs.shape[0]):
            params = acting_params(net, rng)
            out[e] = epsilon_greedy(params, net.sizes, obs[e], epsilon, rng, masks[e])


@njit
def _env_steps(k, env, actions, next_obs):  # noqa: ANN001, ANN202
    for _ in range(k):
        for e in range(next_obs.shape[0]):
            _, terminated, truncated = step_copy(env, e, actions[e], next_obs[e])
            if terminated or truncated:
                reset_copy(env, e, next_obs[e])


@njit
def _pushes(k, agent, step):  # noqa: ANN001, ANN202
    for _ in range(k):
        for e in range(step.obs.shape[0]):
            observe_one(agent, e, step.obs[e], step.actions[e], step.rewards[e],
                        step.next_obs[e], 0, step.next_masks[e])  # fmt: skip


@njit
def _updates(k, agent):  # noqa: ANN001, ANN202
    s = agent.settings
    for _ in range(k):
        train_from_buffer(agent.replay, agent.replay_rng, agent.net, 1, s.batch_size,
                          update_settings_now(s, 100_000), per_beta(s, 100_000))  # fmt: skip


def stage_calls(vec_trainer: Any) -> dict[str, tuple[Callable[[int], None], int]]:
    """Each stage as ``(run(k), transitions per call)``, on a copy of the N = 16
    trainer's state (its agent and envs are not advanced)."""
    agent = vec_trainer.agent
    state = agent._state
    net = state.net._replace(params=state.net.params.copy(), target=state.net.target.copy())
    step = vec_trainer._vec.step_arrays
    n = step.obs.shape[0]
    obs = step.act_obs.copy()
    masks, acting = np.ones((n, 0), np.bool_), np.ones(n, np.bool_)
    out, rng = np.zeros(n, np.int64), state.explore_rng.copy()
    eps = agent.epsilon
    env = vec_trainer.env.kernel_state
    env = env._replace(states=env.states.copy(), counters=env.counters.copy(),
                       rngs=env.rngs.copy())  # fmt: skip
    actions, next_obs = np.zeros(n, np.int64), np.zeros_like(obs)
    # pushes into a copy of the buffer, training off; updates on a copy of the net
    replay = state.replay._replace(storage=state.replay.storage.copy(),
                                   finals=state.replay.finals.copy(),
                                   cursor=state.replay.cursor.copy())  # fmt: skip
    no_train = state.settings._replace(train_freq=2**62)
    pushing = state._replace(net=net, replay=replay, settings=no_train,
                             counters=state.counters.copy())  # fmt: skip
    updating = state._replace(net=net, replay=replay, replay_rng=state.replay_rng.copy())
    push_step = step._replace(obs=obs, next_obs=obs + np.float32(0.01))
    return {
        f"env steps ({n})": (lambda k: _env_steps(k, env, actions, next_obs), n),
        f"acting, {n} obs in one act_batch_explore": (
            lambda k: _act_batch(k, net, eps, rng, obs, masks, acting, out), n),
        f"acting, {n} x one obs (epsilon_greedy)": (
            lambda k: _act_each(k, net, eps, rng, obs, masks, out), n),
        f"pushes ({n}, observe_one, no training)": (lambda k: _pushes(k, pushing, push_step), n),
        f"one update (batch {BATCH}) / {TRAIN_FREQ}": (lambda k: _updates(k, updating), TRAIN_FREQ),
    }  # fmt: skip


def time_stage(run: Callable[[int], None], per_call: int, calls: int) -> float:
    """Best of 5 of ``run(calls)``, in microseconds per transition (compiled first)."""
    run(2)
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        run(calls)
        best = min(best, time.process_time() - t0)
    return best * 1e6 / (calls * per_call)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--quick", action="store_true", help="a tenth of the steps")
    args = p.parse_args()
    from ember_np.nn._blas import set_blas_threads

    set_blas_threads(1)
    scale = 0.1 if args.quick else 1.0
    trainers = {1: trainer(1), N_VEC: trainer(N_VEC)}
    whole = side_by_side(trainers, int(160_000 * scale), 5)
    print(f"train_freq {TRAIN_FREQ}, batch {BATCH}, 64x64, native CartPole: CPU us per transition")
    print("| N | total | compiled loop | Python between calls | transitions/s CPU | wall |")
    print("|---|---|---|---|---|---|")
    for n, r in whole.items():
        print(f"| {n} | {r['total']:.3f} | {r['kernel']:.3f} | {r['python']:.3f} | "
              f"{1e6 / r['total']:,.0f} | {r['wall']:,.0f} |")  # fmt: skip
    print(
        f"\nN={N_VEC} / N=1: {whole[1]['total'] / whole[N_VEC]['total']:.2f}x CPU, "
        f"{whole[N_VEC]['wall'] / whole[1]['wall']:.2f}x wall\n"
    )
    print("| stage alone | us per transition |")
    print("|---|---|")
    for name, (run, per_call) in stage_calls(trainers[N_VEC]).items():
        calls = max(int(20_000 * scale) * 16 // per_call, 50)
        print(f"| {name} | {time_stage(run, per_call, calls):.3f} |")


if __name__ == "__main__":
    main()

"""The whole training step in compiled code, for native environments.

:func:`fused_steps` runs ``n`` iterations of what the single-env driver does in
Python: step the env (``step_env``), store / sync / train / pick the next
action (``agent_step``, the very kernel the Python path calls), count the
episode, and at an episode end record it, reset the env (``reset_env``) and
pick the first action of the next one. Python takes over between calls for
what needs Python: episode records into stats and JSONL, checkpoints, the
progress bar. Same kernels in the same order: the same results.

:func:`fused_vec_steps` does the same for N native envs (a ``NativeVecEnv``):
each iteration steps the N envs, then ``agent_vec_step`` (the kernel the
Python path's ``DqnAgent.observe_vector`` calls) learns from the N
transitions and picks the N next actions in one forward pass.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ember_np._jit import inlined_kernel, kernel
from ember_np.dqn.agent_kernels import (
    AgentState,
    VecStep,
    agent_step,
    agent_vec_step,
    epsilon_greedy,
    epsilon_now,
)
from ember_np.dqn.learner.noisy import acting_params
from ember_np.envs._dispatch import (
    EnvState,
    VecEnvState,
    reset_copy,
    reset_env,
    step_copy,
    step_env,
)
from ember_np.nn.optim import copy_into

# loop.ints[]: the trainer's episode bookkeeping, read and written in place.
INDEX, EPISODE_STEP, EPISODE, N_RECORDS = range(4)


class FusedLoop(NamedTuple):
    """The trainer's side of a fused chunk, as one value.

    x : ndarray of float32, shape (obs_size,)
        The current observation (updated in place); ``ints[INDEX]`` its chosen action.
    nx : ndarray of float32, shape (obs_size,)
        Scratch for the next observation.
    ints : ndarray of int64, shape (4,)
        INDEX (action chosen for x), EPISODE_STEP, EPISODE, N_RECORDS (records written).
    episode_reward : ndarray of float64, shape (1,)
        Reward of the episode in progress.
    rec_floats : ndarray of float64, shape (n, 2)
        Each finished episode's total reward and the latest training loss
        (``agent.out[0]``, NaN before the first update).
    rec_ints : ndarray of int64, shape (n, 4)
        Length, status, total_steps and episode index of each finished episode.
    """

    x: np.ndarray
    nx: np.ndarray
    ints: np.ndarray
    episode_reward: np.ndarray
    rec_floats: np.ndarray
    rec_ints: np.ndarray


@kernel
def fused_steps(n_steps: int, env: EnvState, loop: FusedLoop, agent: AgentState) -> int:
    """Run ``n_steps`` env steps of training; returns 0, or -code on a rejected step.

    n_steps : int, at most ``loop.rec_floats.shape[0]`` (one record per step at most).
    env : EnvState of a native env that has been reset (updated in place).
    loop : FusedLoop (updated in place); ``loop.x`` is env's current observation.
    agent : AgentState with a ReplayState (updated in place), sized for env's
        observations and actions.
    """
    x = loop.x
    nx = loop.nx
    ints = loop.ints
    episode_reward = loop.episode_reward
    counters = agent.counters
    all_legal = np.zeros(0, dtype=np.bool_)  # native envs have no action masks
    for _ in range(n_steps):
        index = ints[INDEX]
        reward, terminated, truncated = step_env(env, index, nx)
        code = 1 if terminated else (2 if truncated else 0)
        next_index = agent_step(agent, x, index, reward, nx, code, code == 0, all_legal)
        if next_index < 0:
            return next_index
        episode_reward[0] += reward
        ints[EPISODE_STEP] += 1
        if code == 0:
            copy_into(x, nx)
            ints[INDEX] = next_index
            continue
        r = ints[N_RECORDS]
        loop.rec_floats[r, 0] = episode_reward[0]
        loop.rec_floats[r, 1] = agent.out[0]
        loop.rec_ints[r, 0] = ints[EPISODE_STEP]
        loop.rec_ints[r, 1] = code
        loop.rec_ints[r, 2] = counters[0]
        loop.rec_ints[r, 3] = ints[EPISODE]
        ints[N_RECORDS] = r + 1
        ints[EPISODE] += 1
        reset_env(env, x)
        ints[EPISODE_STEP] = 0
        episode_reward[0] = 0.0
        net = agent.net
        params = acting_params(net, agent.explore_rng)  # noisy layers: a new acting sample
        ints[INDEX] = epsilon_greedy(
            params, net.sizes, x, epsilon_now(agent.settings, counters[0]), agent.explore_rng,
            all_legal,
        )  # fmt: skip
    return 0


@inlined_kernel
def copy_rows(dst: np.ndarray, src: np.ndarray, start: int, stop: int) -> None:
    """dst[start:stop] = src[start:stop] for 2-d arrays of one shape, row by row
    (:func:`~ember_np.nn.optim.copy_into`: no slice assignment)."""
    for i in range(start, stop):
        copy_into(dst[i], src[i])


# loop.ints[] of the vector loop: the next episode's index, records written.
VEC_EPISODE, VEC_N_RECORDS = range(2)


class FusedVecLoop(NamedTuple):
    """The trainer's side of a fused chunk of N native envs, as one value.

    step : VecStep (``ember_np.dqn.agent_kernels``)
        ``step.obs`` holds each env's current observation and
        ``step.actions`` the action already chosen for it (both updated in
        place); the other arrays are scratch (masks of width 0, acting all True).
    ints : ndarray of int64, shape (2,)
        VEC_EPISODE (index of the next episode to finish), VEC_N_RECORDS.
    episode_steps : ndarray of int64, shape (N,)
        Steps of each env's episode in progress.
    episode_rewards : ndarray of float64, shape (N,)
        Reward of each env's episode in progress.
    rec_floats : ndarray of float64, shape (R, 2)
        Each finished episode's total reward and the latest training loss
        (NaN before the first update).
    rec_ints : ndarray of int64, shape (R, 5)
        Length, status, total_steps (at its last transition), episode index
        and env index of each finished episode. R >= N * the vector steps run.
    """

    step: VecStep
    ints: np.ndarray
    episode_steps: np.ndarray
    episode_rewards: np.ndarray
    rec_floats: np.ndarray
    rec_ints: np.ndarray


@kernel
def fused_vec_steps(until: int, env: VecEnvState, loop: FusedVecLoop, agent: AgentState) -> int:
    """Vector steps of N native envs until ``agent.counters[0]`` (transitions) reaches ``until``.

    Each vector step steps every env (an env whose episode ends is reset at
    once: its transition keeps the real last observation, its next action is
    for the new episode's first one), then :func:`agent_vec_step` learns from
    the N transitions and picks N actions, then the finished episodes are
    recorded. With N = 1 this is :func:`fused_steps`, bit for bit.

    until : int; env : VecEnvState of N copies that have been reset (updated
    in place); loop : FusedVecLoop, ``loop.step.obs`` the copies' current
    observations (updated in place); agent : AgentState whose ReplayState
    has N streams. Returns 0, or :func:`agent_vec_step`'s negative code.
    """
    step = loop.step
    n_envs = step.obs.shape[0]
    ints = loop.ints
    counters = agent.counters
    while counters[0] < until:
        before = counters[0]
        for e in range(n_envs):
            reward, terminated, truncated = step_copy(env, e, step.actions[e], step.next_obs[e])
            code = 1 if terminated else (2 if truncated else 0)
            step.rewards[e] = reward
            step.statuses[e] = code
            loop.episode_rewards[e] += reward
            loop.episode_steps[e] += 1
            if code == 0:
                copy_rows(step.act_obs, step.next_obs, e, e + 1)
            else:
                reset_copy(env, e, step.act_obs[e])
        result = agent_vec_step(agent, step)
        if result < 0:
            return result
        for e in range(n_envs):
            if step.statuses[e] == 0:
                continue
            r = ints[VEC_N_RECORDS]
            loop.rec_floats[r, 0] = loop.episode_rewards[e]
            loop.rec_floats[r, 1] = agent.out[0]
            loop.rec_ints[r, 0] = loop.episode_steps[e]
            loop.rec_ints[r, 1] = step.statuses[e]
            loop.rec_ints[r, 2] = before + e + 1
            loop.rec_ints[r, 3] = ints[VEC_EPISODE]
            loop.rec_ints[r, 4] = e
            ints[VEC_N_RECORDS] = r + 1
            ints[VEC_EPISODE] += 1
            loop.episode_rewards[e] = 0.0
            loop.episode_steps[e] = 0
        copy_rows(step.obs, step.act_obs, 0, n_envs)
        copy_into(step.actions, step.next_actions)
    return 0

"""The whole training step in compiled code, for native environments.

:func:`fused_steps` runs ``n`` iterations of what ``DqnTrainer._step`` does in
Python: step the env (``env_step``), store / sync / train / pick the next
action (``_agent_step``, the very kernel the Python path calls), count the
episode, and at an episode end record it, reset the env (``env_reset``) and
pick the first action of the next one. Python takes over between calls for
what needs Python: episode records into stats and JSONL, checkpoints, the
progress bar. Same kernels in the same order: the same results.
"""

from __future__ import annotations

import numpy as np

from ember_np._jit import kernel
from ember_np.dqn.agent import _agent_step, _epsilon_at, _epsilon_greedy
from ember_np.envs._dispatch import env_reset, env_step

# loop[]: the trainer's episode bookkeeping, read and written in place.
INDEX, EPISODE_STEP, EPISODE, N_RECORDS = range(4)


@kernel
def fused_steps(
    n_steps: int,
    kind: int,
    env_state: np.ndarray,
    env_counters: np.ndarray,
    env_rng: np.ndarray,
    max_steps: int,
    x: np.ndarray,
    nx: np.ndarray,
    loop: np.ndarray,
    episode_reward: np.ndarray,
    rec_floats: np.ndarray,
    rec_ints: np.ndarray,
    step_log: np.ndarray,
    storage: np.ndarray,
    finals: np.ndarray,
    cursor: np.ndarray,
    n_actions: int,
    counters: np.ndarray,
    cfg_i: np.ndarray,
    cfg_f: np.ndarray,
    replay_state: np.ndarray,
    explore_state: np.ndarray,
    params: np.ndarray,
    target: np.ndarray,
    sizes: np.ndarray,
    grads: np.ndarray,
    adam_m: np.ndarray,
    adam_v: np.ndarray,
    adam_t: np.ndarray,
    out: np.ndarray,
) -> int:
    """Run ``n_steps`` env steps of training; returns 0, or -code on a rejected step.

    x : float32 (obs_size,)
        The current observation (updated in place); ``loop[INDEX]`` its chosen action.
    rec_floats, rec_ints : float64 (n, 2), int64 (n, 4)
        Finished episodes: total reward, the latest training loss (``out[0]``,
        NaN before the first update); length, status, total_steps, episode index.
    step_log : float64 (n, 2) or (0, 2)
        When it has n rows: each step's reward and (did_update * 4 + status).
    """
    log = step_log.shape[0] > 0
    for s in range(n_steps):
        index = loop[INDEX]
        reward, terminated, truncated = env_step(kind, env_state, env_counters, index, nx,
                                                 max_steps)  # fmt: skip
        code = 1 if terminated else (2 if truncated else 0)
        next_index = _agent_step(
            storage, finals, cursor, n_actions, x, index, reward, nx, code, code == 0,
            counters, cfg_i, cfg_f, replay_state, explore_state,
            params, target, sizes, grads, adam_m, adam_v, adam_t, out,
        )  # fmt: skip
        if next_index < 0:
            return next_index
        episode_reward[0] += reward
        loop[EPISODE_STEP] += 1
        if log:
            step_log[s, 0] = reward
            step_log[s, 1] = out[1] * 4.0 + code
        if code == 0:
            x[:] = nx
            loop[INDEX] = next_index
            continue
        r = loop[N_RECORDS]
        rec_floats[r, 0] = episode_reward[0]
        rec_floats[r, 1] = out[0]
        rec_ints[r, 0] = loop[EPISODE_STEP]
        rec_ints[r, 1] = code
        rec_ints[r, 2] = counters[0]
        rec_ints[r, 3] = loop[EPISODE]
        loop[N_RECORDS] = r + 1
        loop[EPISODE] += 1
        env_reset(kind, env_state, env_counters, env_rng, x)
        loop[EPISODE_STEP] = 0
        episode_reward[0] = 0.0
        loop[INDEX] = _epsilon_greedy(
            params, sizes, x, _epsilon_at(counters[0], cfg_i, cfg_f), explore_state
        )
    return 0

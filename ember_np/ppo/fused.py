"""PPO's whole training loop in compiled code, over ember_np's native vector envs.

:func:`fused_ppo_steps` runs, for a :class:`~ember_np.envs.NativeVecEnv` of N copies,
what the trainer's Python vector driver and :meth:`PPOAgent.observe_vector
<ember_np.ppo.agent.PPOAgent.observe_vector>` do per vector step, in one call and with
the very kernels the Python path calls, in the same order on arrays of the same shapes
(so the same numbers, bit for bit):

1. step each copy (``step_copy``); a copy whose episode ends keeps its real last
   observation for the transition and is reset at once (``reset_copy``);
2. normalise the rewards when asked (:func:`~ember_np.ppo.normalize_kernels.normalize_rewards`);
   a truncated episode bootstraps from the critic's value of its real last observation
   (normalised with the statistics frozen, :func:`~ember_np.ppo.network.act_batch`
   greedy); store the step (:func:`~ember_np.ppo.rollout.store_step`);
3. normalise the observations the envs act on next
   (:func:`~ember_np.ppo.normalize_kernels.normalize_obs_rows`); at a full rollout the
   critic values them, :func:`~ember_np.ppo.rollout.compute_gae` gives the advantages
   and :func:`~ember_np.ppo.update.train_epochs` runs every epoch, with the learning
   rate and clip range of this point of the run (their linear schedules, as
   :meth:`PPOConfig.learning_rate_at <ember_np.ppo.config.PPOConfig.learning_rate_at>`);
4. sample the next actions (``act_batch``, the agent's action stream) and record the
   episodes that ended in the trainer's loop record (``training/_fused.py``'s
   ``FusedVecLoop``, the layout DQN's compiled loop fills).

The trainer's :class:`~ember_np.training.drivers.FusedVectorDriver` calls it through
:meth:`PPOAgent.fused_vec_run <ember_np.ppo.agent.PPOAgent.fused_vec_run>`; Python
takes over between calls for the logs, checkpoints, evaluation and the progress bar.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from ember_np._jit import kernel
from ember_np.encoding import IndexActionMapper, VecEncoder
from ember_np.envs._dispatch import VecEnvState, reset_copy, step_copy
from ember_np.ppo.network import PPONet, act_batch
from ember_np.ppo.normalize_kernels import normalize_obs_rows, normalize_rewards
from ember_np.ppo.normalize_stats import NormStats, norm_stats
from ember_np.ppo.rollout import RolloutArrays, compute_gae, store_step
from ember_np.ppo.update import N_STATS, STAT_NAMES, Rollout, UpdateSettings, train_epochs
from ember_np.ppo.update import update_settings as make_settings

__all__ = [
    "FusedPPO",
    "fusable",
    "fused_ppo_steps",
    "fused_state",
    "last_stats",
    "vec_error",
]

# loop.ints[] of the trainer's FusedVecLoop: the next episode's index, records written
# (the layout of training/_fused.py's VEC_EPISODE, VEC_N_RECORDS, which the driver reads;
# training is a layer above the algorithms, so they are restated, and a test holds them equal).
VEC_EPISODE, VEC_N_RECORDS = range(2)
# FusedPPO.counters[]: the agent's transitions, its epochs begun, the schedules' span,
# the valid rows of the last rollout updated on (their values and returns in last_rollout).
TOTAL, UPDATES, SPAN, LAST_ROWS = range(4)
# FusedPPO.out[]: the latest loss, whether the last step updated, updates in this call,
# the last update's learning rate and clip range.
LAST_LOSS, TRAINED, ROLLOUTS, LAST_LR, LAST_CLIP = range(5)
# fused_ppo_steps' negative returns: what the Python path would raise ValueError for.
BAD_REWARD, BAD_STEP, BAD_LAST_VALUE = -1, -2, -3


class FusedPPO(NamedTuple):
    """A PPO agent's state as the compiled loop reads and writes it (views of the
    agent's arrays, built by :func:`fused_state`).

    net : PPONet
        Parameters and Adam state (float32).
    buf : RolloutArrays
        The rollout in progress (``"same"`` autoreset).
    norm : NormStats
        The normaliser's statistics, or unused ones (both flags off) without one.
    hp : UpdateSettings
        The config's update settings, learning rate and clip range at the run's start.
    linear : ndarray of bool, shape (2,)
        Whether the learning rate, the clip range follow a linear schedule.
    counters : ndarray of int64, shape (4,)
        TOTAL (transitions), UPDATES (epochs begun), SPAN (``schedule_steps``, 0: None),
        LAST_ROWS (the valid rows of the last rollout updated on).
    act_rng, update_rng : ndarray of uint64, shape (4,)
        The action and the minibatch-shuffle streams (advanced in place).
    pending_obs : ndarray of float32, shape (N, obs_dim)
        The normalised observations the envs act on; ``pending_values`` and
        ``pending_logp`` (float32 (N,)) the critic's values and the actions'
        log-probabilities there.
    out : ndarray of float64, shape (5,)
        LAST_LOSS (NaN before the first update), TRAINED (1.0 if the last vector step
        ended a rollout), ROLLOUTS (updates run by this call), LAST_LR and LAST_CLIP
        (the last update's learning rate and clip range).
    stats : ndarray of float64, shape (N_STATS,)
        The last update's :data:`~ember_np.ppo.update.STAT_NAMES`.
    last_rollout : ndarray of float32, shape (2, n_steps * N)
        The values and the returns of the last rollout updated on, its valid rows
        first (``counters[LAST_ROWS]``), in sample order: the rollout buffer is refilled
        after it, so they are kept for its explained variance.
    """

    net: PPONet
    buf: RolloutArrays
    norm: NormStats
    hp: UpdateSettings
    linear: np.ndarray
    counters: np.ndarray
    act_rng: np.ndarray
    update_rng: np.ndarray
    pending_obs: np.ndarray
    pending_values: np.ndarray
    pending_logp: np.ndarray
    out: np.ndarray
    stats: np.ndarray
    last_rollout: np.ndarray


def fusable(agent: Any, env: Any) -> bool:
    """Whether :func:`fused_ppo_steps` can drive ``env`` for the PPOAgent ``agent``: a
    ``NativeVecEnv`` of the agent's observation and action sizes, the agent with a
    ``VecEncoder`` of a flat shape (encoding is a cast), ``IndexActionMapper(start=0)``
    (an action is its index) and no action masks (native envs give none)."""
    from ember_np.envs.native import NativeVecEnv

    if not isinstance(env, NativeVecEnv):
        return False
    encoder, mapper = agent.encoder, agent.action_mapper
    return (
        not getattr(agent, "action_masks", False)
        and agent.buffer.n_actions_masked == 0
        and type(encoder) is VecEncoder
        and tuple(encoder.shape) == (agent.obs_size,)
        and type(mapper) is IndexActionMapper
        and mapper.start == 0
        and env.single.obs_size == agent.obs_size
        and env.single.n_actions == agent.n_actions
    )


def fused_state(agent: Any, pending: tuple[np.ndarray, np.ndarray, np.ndarray]) -> FusedPPO:
    """The :class:`FusedPPO` of a PPOAgent: views of its network, rollout, normaliser and
    random streams, its counters and latest loss copied in (``pending``: its acting
    observations, values and log-probabilities, float32 (N, obs_dim), (N,), (N,))."""
    c = agent.config
    normalizer = agent.normalizer
    norm = (
        normalizer.stats
        if normalizer is not None
        else norm_stats(agent.obs_size, agent.num_envs, False, False, gamma=c.gamma)
    )
    span = 0 if c.schedule_steps is None else int(c.schedule_steps)
    return FusedPPO(
        agent.net.state, agent.buffer.arrays, norm,
        make_settings(c, float(c.learning_rate), float(c.clip_range)),
        np.array([c.lr_schedule == "linear", c.clip_schedule == "linear"], np.bool_),
        np.array([agent.total_steps, agent.n_updates, span, 0], np.int64),
        agent.act_rng.state, agent.update_rng.state, pending[0], pending[1], pending[2],
        np.array([agent.last_loss, 0.0, 0.0, 0.0, 0.0]), np.zeros(N_STATS),
        np.zeros((2, agent.buffer.n_steps * agent.num_envs), np.float32),
    )  # fmt: skip


def last_stats(
    state: FusedPPO, explained_variance: Callable[[np.ndarray, np.ndarray], float]
) -> dict[str, float]:
    """The last update's statistics, as the Python loop keeps them (``PPOAgent.last_stats``):
    :func:`~ember_np.ppo.update.update`'s, then ``explained_variance(values, returns)`` of
    the rollout's valid rows, the learning rate and the clip range."""
    stats = dict(zip(STAT_NAMES, (float(v) for v in state.stats)))
    k = int(state.counters[LAST_ROWS])
    stats.update(
        explained_variance=explained_variance(state.last_rollout[0, :k], state.last_rollout[1, :k]),
        learning_rate=float(state.out[LAST_LR]), clip_range=float(state.out[LAST_CLIP]),
    )  # fmt: skip
    return stats


def vec_error(code: int) -> ValueError:
    """The ValueError of :func:`fused_ppo_steps`' negative return ``code``."""
    what = {
        BAD_REWARD: "a non-finite reward",
        BAD_STEP: "a non-finite observation, value or log-probability (the network "
        "diverged: lower the learning rate)",
        BAD_LAST_VALUE: "a non-finite value of the observations after a rollout (the "
        "network diverged: lower the learning rate)",
    }.get(code, f"error {code}")
    return ValueError(f"PPO's rollout buffer takes finite numbers only: the compiled loop met "
                      f"{what}")  # fmt: skip


@kernel
def fused_ppo_steps(until: int, env: VecEnvState, loop: Any, ppo: FusedPPO) -> int:
    """Vector steps of N native envs until ``ppo.counters[TOTAL]`` reaches ``until``.

    Parameters
    ----------
    until : int
        Stop at the first vector step that reaches it (N transitions each).
    env : VecEnvState
        N copies that have been reset (updated in place).
    loop : FusedVecLoop (``ember_np.training._fused``)
        ``loop.step`` a :class:`~ember_np.ppo.agent.PPOStep`: ``obs`` each copy's
        current observation (raw) and ``actions`` the action sampled for it (both
        updated in place); the records of the episodes that end are appended.
    ppo : FusedPPO
        Updated in place.

    Returns
    -------
    int
        0, or BAD_REWARD, BAD_STEP, BAD_LAST_VALUE (:func:`vec_error`) when a number
        the rollout buffer takes is not finite (that vector step is not stored).
    """
    step = loop.step
    n, d = step.obs.shape
    ints = loop.ints
    counters = ppo.counters
    net = ppo.net
    buf = ppo.buf
    norm = ppo.norm
    hp = ppo.hp
    out = ppo.out
    t_max = buf.obs.shape[0]
    m = t_max * n
    # workspaces, by np.empty alone: each allocator (zeros, ones, ...) of each dtype and
    # rank is compiled into the kernel. ``sample`` is act_batch's flag read at run time
    # (one compiled signature for the greedy and the sampled calls).
    sample = np.empty(2, np.bool_)
    sample[0] = False
    sample[1] = True
    no_masks = np.empty((n, 0), np.bool_)
    every_row = np.empty(n, np.bool_)
    no_row = np.empty(n, np.bool_)
    terminated = np.empty(n, np.bool_)
    truncated = np.empty(n, np.bool_)
    dones = np.empty(n, np.bool_)
    for e in range(n):
        every_row[e] = True
        no_row[e] = False
    x_act = np.empty((n, d), np.float32)
    x_final = np.empty((n, d), np.float32)
    rewards = np.empty(n, np.float64)
    values = np.empty(n, np.float32)
    final_values = np.empty(n, np.float32)
    logp = np.empty(n, np.float32)
    actions = np.empty(n, np.int64)
    rollout = Rollout(
        buf.obs.reshape((m, d)), buf.actions.reshape((m,)), buf.log_probs.reshape((m,)),
        buf.advantages.reshape((m,)), buf.returns.reshape((m,)), buf.values.reshape((m,)),
        buf.valid.reshape((m,)), np.empty((m, 0), np.bool_),
    )  # fmt: skip
    out[ROLLOUTS] = 0.0
    while counters[TOTAL] < until:
        before = counters[TOTAL]
        out[TRAINED] = 0.0
        any_truncated = False
        for e in range(n):
            reward, term, trunc = step_copy(env, e, step.actions[e], step.next_obs[e])
            code = 1 if term else (2 if trunc else 0)
            step.rewards[e] = reward
            step.statuses[e] = code
            terminated[e] = code == 1
            truncated[e] = code == 2
            dones[e] = code != 0
            any_truncated = any_truncated or code == 2
            if code == 0:
                for j in range(d):
                    step.act_obs[e, j] = step.next_obs[e, j]
            else:
                reset_copy(env, e, step.act_obs[e])
        # -- store the transitions (PPOAgent._store) --
        for e in range(n):
            if not math.isfinite(step.rewards[e]):
                return BAD_REWARD
        if norm.norm_reward:
            normalize_rewards(norm, step.rewards, dones, no_row, rewards)
        else:
            for e in range(n):
                rewards[e] = step.rewards[e]
        for e in range(n):
            final_values[e] = 0.0
        if any_truncated:  # the critic's values of all N real last observations, as Python
            normalize_obs_rows(norm, step.next_obs, no_row, x_final)
            act_batch(net.params, net.layers, x_final, no_masks, sample[0], ppo.act_rng,
                      actions, logp, values)  # fmt: skip
            for e in range(n):
                if truncated[e]:
                    final_values[e] = values[e]
        for e in range(n):  # what RolloutBuffer.store refuses
            finite = (math.isfinite(ppo.pending_values[e]) and math.isfinite(ppo.pending_logp[e])
                      and math.isfinite(rewards[e]) and math.isfinite(final_values[e]))  # fmt: skip
            for j in range(d):
                finite = finite and math.isfinite(ppo.pending_obs[e, j])
            if not finite:
                return BAD_STEP
        store_step(buf, ppo.pending_obs, step.actions, ppo.pending_values, ppo.pending_logp,
                   no_masks, rewards, terminated, truncated, final_values)  # fmt: skip
        counters[TOTAL] += n
        # -- the observations acted on next; a full rollout learns (PPOAgent._learn) --
        normalize_obs_rows(norm, step.act_obs, every_row, x_act)
        if buf.cursor[0] == t_max:
            act_batch(net.params, net.layers, x_act, no_masks, sample[0], ppo.act_rng,
                      actions, logp, values)  # fmt: skip
            for e in range(n):
                if not math.isfinite(values[e]):
                    return BAD_LAST_VALUE
            compute_gae(buf, values)
            progress = 1.0
            if counters[SPAN] > 0:
                progress = max(1.0 - counters[TOTAL] / counters[SPAN], 0.0)
            lr = progress * hp.learning_rate if ppo.linear[0] else hp.learning_rate
            clip = progress * hp.clip_range if ppo.linear[1] else hp.clip_range
            settings = UpdateSettings(
                lr, clip, hp.clip_range_vf, hp.ent_coef, hp.vf_coef, hp.max_grad_norm,
                hp.target_kl, hp.adam_eps, hp.normalize_advantage, hp.batch_size, hp.n_epochs,
            )  # fmt: skip
            train_epochs(net, rollout, settings, ppo.update_rng, ppo.stats)
            k = 0
            for i in range(m):  # kept for the explained variance (the buffer is refilled)
                if rollout.valid[i]:
                    ppo.last_rollout[0, k] = rollout.old_values[i]
                    ppo.last_rollout[1, k] = rollout.returns[i]
                    k += 1
            counters[LAST_ROWS] = k
            out[LAST_LR] = lr
            out[LAST_CLIP] = clip
            out[LAST_LOSS] = ppo.stats[5]
            counters[UPDATES] += np.int64(ppo.stats[6])
            out[TRAINED] = 1.0
            out[ROLLOUTS] += 1.0
            buf.cursor[0] = 0
        # -- the next actions (PPOAgent._pick) --
        act_batch(net.params, net.layers, x_act, no_masks, sample[1], ppo.act_rng,
                  step.next_actions, ppo.pending_logp, ppo.pending_values)  # fmt: skip
        for e in range(n):
            for j in range(d):
                ppo.pending_obs[e, j] = x_act[e, j]
        # -- the episodes that ended (VectorDriver._count) --
        for e in range(n):
            loop.episode_rewards[e] += step.rewards[e]
            loop.episode_steps[e] += 1
            if step.statuses[e] == 0:
                continue
            r = ints[VEC_N_RECORDS]
            loop.rec_floats[r, 0] = loop.episode_rewards[e]
            loop.rec_floats[r, 1] = out[LAST_LOSS]
            loop.rec_ints[r, 0] = loop.episode_steps[e]
            loop.rec_ints[r, 1] = step.statuses[e]
            loop.rec_ints[r, 2] = before + e + 1
            loop.rec_ints[r, 3] = ints[VEC_EPISODE]
            loop.rec_ints[r, 4] = e
            ints[VEC_N_RECORDS] = r + 1
            ints[VEC_EPISODE] += 1
            loop.episode_rewards[e] = 0.0
            loop.episode_steps[e] = 0
        for e in range(n):
            step.actions[e] = step.next_actions[e]
            for j in range(d):
                step.obs[e, j] = step.act_obs[e, j]
    return 0

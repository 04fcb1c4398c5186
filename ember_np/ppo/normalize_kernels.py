"""Compiled normalisation: SB3's ``VecNormalize`` applied to one vector step.

Two kernels, each compiled once, callable from Python (:class:`~ember_np.ppo.
normalize.VecNormalizer`) or from a compiled training loop, on a
:class:`~ember_np.ppo.normalize_stats.NormStats`:

* :func:`normalize_obs_rows`: update the observation statistics from a batch's
  chosen rows (when training), then normalise the batch;
* :func:`normalize_rewards`: update each env's discounted return and the returns'
  statistics (when training), scale the rewards, reset the returns of ended episodes.

Both merge a batch into the running statistics with :func:`merge_moments`, SB3's
``RunningMeanStd.update_from_moments`` operation for operation. They are
``ordered_kernel``s: every sum in the order written, whichever caller they are
compiled into (the same numbers from any numba cache).
"""

from __future__ import annotations

import math

import numpy as np

from ember_np._jit import ordered_kernel
from ember_np.ppo.normalize_stats import NormStats

__all__ = ["merge_moments", "normalize_obs_rows", "normalize_rewards"]


@ordered_kernel
def merge_moments(
    mean: np.ndarray, var: np.ndarray, counts: np.ndarray, which: int,
    batch_mean: np.ndarray, batch_var: np.ndarray, batch_count: float,
) -> None:  # fmt: skip
    """Merge a batch's moments into running ones, in place (SB3's ``update_from_moments``).

    mean, var : float64 (k,), updated; counts : float64, ``counts[which]`` the running
    count, updated; batch_mean, batch_var : float64 (k,), the batch's mean and
    population variance; batch_count : float > 0.
    """
    count = counts[which]
    total = count + batch_count
    for i in range(mean.shape[0]):
        delta = batch_mean[i] - mean[i]
        m_2 = (
            var[i] * count
            + batch_var[i] * batch_count
            + delta * delta * count * batch_count / total
        )
        mean[i] = mean[i] + delta * batch_count / total
        var[i] = m_2 / total
    counts[which] = batch_count + count


@ordered_kernel
def normalize_obs_rows(stats: NormStats, obs: np.ndarray, update_rows: np.ndarray,
                       out: np.ndarray) -> None:  # fmt: skip
    """Normalise a batch of observations, first counting its chosen rows (when training).

    Parameters
    ----------
    stats : NormStats
        ``obs_mean``, ``obs_var``, ``counts[0]`` updated when ``training[0]`` and
        ``norm_obs`` and at least one row is chosen.
    obs : float32 (B, obs_dim)
    update_rows : bool (B,)
        The rows the statistics take (their mean and population variance, in float64,
        merged as one batch).
    out : float32 (B, obs_dim)
        Written: ``clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)`` in
        float64, rounded to float32; ``obs`` itself when ``norm_obs`` is off.
    """
    b, d = obs.shape
    if not stats.norm_obs:
        for i in range(b):  # a loop: ``out[:] = obs`` compiles numba's shape-error formatting
            for j in range(d):
                out[i, j] = obs[i, j]
        return
    if stats.training[0]:
        n = 0
        bmean = np.zeros(d)
        for i in range(b):
            if update_rows[i]:
                n += 1
                for j in range(d):
                    bmean[j] += obs[i, j]
        if n > 0:
            for j in range(d):
                bmean[j] /= n
            bvar = np.zeros(d)
            for i in range(b):
                if update_rows[i]:
                    for j in range(d):
                        c = np.float64(obs[i, j]) - bmean[j]
                        bvar[j] += c * c
            for j in range(d):
                bvar[j] /= n
            # np.int64(0), not 0: a literal would compile merge_moments once per value
            merge_moments(stats.obs_mean, stats.obs_var, stats.counts, np.int64(0), bmean, bvar,
                          np.float64(n))  # fmt: skip
    clip = stats.clip_obs
    for j in range(d):
        scale = math.sqrt(stats.obs_var[j] + stats.epsilon)
        m = stats.obs_mean[j]
        for i in range(b):
            z = (np.float64(obs[i, j]) - m) / scale
            out[i, j] = min(max(z, -clip), clip)


@ordered_kernel
def normalize_rewards(stats: NormStats, rewards: np.ndarray, dones: np.ndarray,
                      skip: np.ndarray, out: np.ndarray) -> None:  # fmt: skip
    """One vector step's rewards, as SB3's ``VecNormalize.step_wait`` treats them.

    Parameters
    ----------
    stats : NormStats
        When ``training[0]``: ``returns[e] = gamma * returns[e] + rewards[e]`` for each
        env not skipped, then ``ret_mean``, ``ret_var``, ``counts[1]`` take those
        returns as one batch. Then ``returns[e] = 0`` where ``dones[e]`` (always).
    rewards : float64 (N,)
    dones : bool (N,)
        Terminated or truncated at this step.
    skip : bool (N,)
        Rows that are no transition (``NEXT_STEP`` autoreset's reset rows): not counted.
    out : float64 (N,)
        Written: ``clip(rewards / sqrt(ret_var + epsilon), -clip_reward, clip_reward)``
        (after the update); ``rewards`` when ``norm_reward`` is off; 0 on skipped rows.
    """
    n_envs = rewards.shape[0]
    if stats.training[0]:
        n = 0
        total = 0.0
        for e in range(n_envs):
            if not skip[e]:
                stats.returns[e] = stats.returns[e] * stats.gamma + rewards[e]
                total += stats.returns[e]
                n += 1
        if n > 0:
            moments = np.empty(2)  # the batch's mean and variance (one column each)
            moments[0] = total / n
            sq = 0.0
            for e in range(n_envs):
                if not skip[e]:
                    c = stats.returns[e] - moments[0]
                    sq += c * c
            moments[1] = sq / n
            merge_moments(stats.ret_mean, stats.ret_var, stats.counts, np.int64(1), moments[:1],
                          moments[1:], np.float64(n))  # fmt: skip
    scale = math.sqrt(stats.ret_var[0] + stats.epsilon)
    clip = stats.clip_reward
    for e in range(n_envs):
        if skip[e]:
            out[e] = 0.0
            continue
        if stats.norm_reward:
            out[e] = min(max(rewards[e] / scale, -clip), clip)
        else:
            out[e] = rewards[e]
        if dones[e]:
            stats.returns[e] = 0.0

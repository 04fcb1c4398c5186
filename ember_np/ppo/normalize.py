"""Running observation and reward normalisation, as Stable-Baselines3's ``VecNormalize``.

:class:`VecNormalizer` normalises a vector step's observations and rewards for a
training loop, with the compiled apply (:mod:`ember_np.ppo.normalize_kernels`) on
the statistics of :mod:`ember_np.ppo.normalize_stats` (whose module docstring gives
the formulas: SB3's ``RunningMeanStd`` and ``VecNormalize``, exactly). A deployed
policy imports ``normalize_stats`` alone (NumPy only) and normalises with
:func:`~ember_np.ppo.normalize_stats.normalize_obs_numpy`, re-exported here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_np.ppo.normalize_kernels import normalize_obs_rows, normalize_rewards
from ember_np.ppo.normalize_stats import (
    NORM_EPSILON,
    STATE_KEYS,
    checked_state,
    norm_stats,
    normalize_obs_numpy,
)

__all__ = ["STATE_KEYS", "VecNormalizer", "normalize_obs_numpy"]


class VecNormalizer:
    """SB3's ``VecNormalize`` for n_envs envs, on arrays (no env wrapped).

    Parameters
    ----------
    obs_dim, n_envs : int
    norm_obs, norm_reward : bool
        Normalise observations (default True) and rewards (default True).
    clip_obs, clip_reward : float
        10 and 10, as SB3.
    gamma : float
        The agent's discount (the returns the reward scale is taken from).
    epsilon : float
        1e-8, as SB3.

    Attributes
    ----------
    stats : NormStats
        The kernels' argument (a compiled loop passes it to
        :mod:`~ember_np.ppo.normalize_kernels` directly).
    """

    def __init__(
        self, obs_dim: int, n_envs: int, norm_obs: bool = True, norm_reward: bool = True,
        clip_obs: float = 10.0, clip_reward: float = 10.0, gamma: float = 0.99,
        epsilon: float = NORM_EPSILON,
    ) -> None:  # fmt: skip
        self.stats = norm_stats(obs_dim, n_envs, norm_obs, norm_reward, clip_obs, clip_reward,
                                gamma, epsilon)  # fmt: skip
        self.obs_dim, self.n_envs = int(obs_dim), int(n_envs)

    @property
    def training(self) -> bool:
        """Whether normalising updates the statistics (set False to freeze them)."""
        return bool(self.stats.training[0])

    @training.setter
    def training(self, value: bool) -> None:
        self.stats.training[0] = bool(value)

    def _obs(self, obs: Any) -> np.ndarray:
        x = np.asarray(obs)
        if x.dtype.kind not in "biuf":
            raise ValueError(f"obs must be real numbers, got dtype {x.dtype}")
        x = np.ascontiguousarray(x, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ValueError(f"expected obs of shape (batch, {self.obs_dim}), got shape "
                             f"{x.shape}")  # fmt: skip
        return x

    def _rows(self, rows: Any, n: int, name: str, default: bool) -> np.ndarray:
        if rows is None:
            return np.full(n, default, np.bool_)
        arr = np.asarray(rows)
        if arr.dtype.kind not in "bi" or arr.shape != (n,):
            raise ValueError(f"expected {name} as {n} booleans (one per row), got dtype "
                             f"{arr.dtype} shape {arr.shape}")  # fmt: skip
        return np.ascontiguousarray(arr, dtype=np.bool_)

    def normalize_obs(self, obs: Any, update_rows: Any = None) -> np.ndarray:
        """Update the statistics from ``obs`` (when training), then normalise it.

        obs : float (B, obs_dim). update_rows : bool (B,), the rows the statistics
        take (default all; under ``NEXT_STEP`` autoreset pass ``~(terminated |
        truncated)``, so an ended episode's last observation is not counted, as in
        SB3). Returns float32 (B, obs_dim), a new array.
        """
        x = self._obs(obs)
        rows = self._rows(update_rows, x.shape[0], "update_rows", True)
        out = np.empty_like(x)
        normalize_obs_rows(self.stats, x, rows, out)
        return out

    def apply_obs(self, obs: Any) -> np.ndarray:
        """Normalise ``obs`` (float (B, obs_dim)) without updating the statistics:
        float32 (B, obs_dim). For the real last observations of ended episodes."""
        x = self._obs(obs)
        out = np.empty_like(x)
        normalize_obs_rows(self.stats, x, np.zeros(x.shape[0], np.bool_), out)
        return out

    def normalize_reward(self, rewards: Any, terminated: Any, truncated: Any,
                         skip: Any = None) -> np.ndarray:  # fmt: skip
        """One vector step's rewards, normalised (float64 (n_envs,), a new array).

        When training, each env's discounted return takes the reward and the returns'
        statistics take the returns; envs whose episode ended have their return reset
        after. ``skip``: bool (n_envs,), the rows that are no transition (``NEXT_STEP``
        autoreset's reset rows: :class:`~ember_np.ppo.rollout.RolloutBuffer`'s
        ``arrays.ended`` before storing the step); they change nothing.
        """
        n = self.n_envs
        r = np.asarray(rewards)
        if r.dtype.kind not in "biuf" or r.shape != (n,):
            raise ValueError(f"expected rewards as {n} real numbers (one per env), got dtype "
                             f"{r.dtype} shape {r.shape}")  # fmt: skip
        r = np.ascontiguousarray(r, dtype=np.float64)
        if not np.isfinite(r).all():
            raise ValueError(f"rewards hold NaN or inf: {r!r}")
        term = self._rows(terminated, n, "terminated", False)
        trunc = self._rows(truncated, n, "truncated", False)
        sk = self._rows(skip, n, "skip", False)
        out = np.empty(n, np.float64)
        normalize_rewards(self.stats, r, term | trunc, sk, out)
        return out

    def obs_numpy(self, obs: Any) -> np.ndarray:
        """:func:`normalize_obs_numpy` with these statistics (no update; NumPy only);
        ``obs`` passed through as float32 when observations are not normalised."""
        if not self.stats.norm_obs:
            return np.asarray(obs, dtype=np.float32)
        s = self.stats
        return normalize_obs_numpy(obs, s.obs_mean, s.obs_var, s.clip_obs, s.epsilon)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """The statistics as plain float64 arrays (copies), keys :data:`STATE_KEYS`."""
        return {key: getattr(self.stats, key).copy() for key in STATE_KEYS}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore :meth:`state_arrays`; nothing changes unless every array is valid
        (ValueError from :func:`~ember_np.ppo.normalize_stats.checked_state`)."""
        for key, value in checked_state(self.stats, arrays).items():
            getattr(self.stats, key)[:] = value

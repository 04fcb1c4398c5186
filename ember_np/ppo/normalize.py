"""Running observation and reward normalisation, as Stable-Baselines3's ``VecNormalize``.

NumPy only at import (a deployed policy normalises its inputs with
:func:`normalize_obs_numpy` and never loads numba); the compiled apply, for the
Python loop and the fused one, is in :mod:`ember_np.ppo.normalize_kernels`, which
:class:`VecNormalizer` imports when it first normalises.

The statistics (:class:`NormStats`, float64) follow SB3 exactly:

* ``RunningMeanStd`` (``common/running_mean_std.py``): mean 0, variance 1 and count
  ``1e-4`` (``RMS_EPSILON``) to start, then per batch of ``n`` samples with mean ``m``
  and population variance ``v``, Chan et al.'s parallel update::

      delta = m - mean;  total = count + n
      mean += delta * n / total
      var = (var * count + v * n + delta**2 * count * n / total) / total
      count = total

* observations: ``clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)``,
  epsilon ``1e-8``, clip_obs 10; the statistics take each step's new observations
  (and the reset's), not the real last observations of ended episodes;
* rewards: each env keeps a discounted return ``R = gamma * R + r`` (reset to 0 when
  its episode ends, terminated or truncated); the returns' statistics take every
  step's ``R`` of all envs, and the reward is scaled as ``clip(r / sqrt(var_R +
  epsilon), -clip_reward, clip_reward)`` (not centred), clip_reward 10;
* ``training`` False freezes the statistics (evaluation, a deployed policy).

With gymnasium's ``NEXT_STEP`` autoreset two rows of a step are not SB3's samples:
the observation an ending step returns is the episode's real last one (SB3 never
counts it), and the next step's row of that env is the reset row (reward 0, no
transition). :meth:`VecNormalizer.normalize_obs` takes the rows to count
(``update_rows``) and :meth:`VecNormalizer.normalize_reward` the rows to skip, so
both modes feed the statistics SB3's samples.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "NORM_EPSILON",
    "RMS_EPSILON",
    "STATE_KEYS",
    "NormStats",
    "VecNormalizer",
    "norm_stats",
    "normalize_obs_numpy",
]

#: SB3's ``RunningMeanStd(epsilon=1e-4)``: the count the statistics start from.
RMS_EPSILON = 1e-4
#: SB3's ``VecNormalize(epsilon=1e-8)``: added to a variance before its square root.
NORM_EPSILON = 1e-8
#: The arrays :meth:`VecNormalizer.state_arrays` returns (a checkpoint's keys).
STATE_KEYS = ("obs_mean", "obs_var", "ret_mean", "ret_var", "counts", "returns")


class NormStats(NamedTuple):
    """Everything the normalisation kernels read and write, as one value.

    obs_mean, obs_var : ndarray of float64, shape (obs_dim,)
        The observations' running mean and (population) variance.
    ret_mean, ret_var : ndarray of float64, shape (1,)
        The discounted returns' running mean and variance.
    counts : ndarray of float64, shape (2,)
        The observations' and the returns' running counts (start: ``RMS_EPSILON``).
    returns : ndarray of float64, shape (n_envs,)
        Each env's discounted return of its episode so far.
    training : ndarray of bool, shape (1,)
        Whether normalising updates the statistics.
    norm_obs, norm_reward : bool
        Whether observations (rewards) are normalised (else passed through).
    clip_obs, clip_reward : float
        The bounds of a normalised observation (reward).
    gamma : float
        The returns' discount (the agent's).
    epsilon : float
        Added to a variance before its square root.
    """

    obs_mean: np.ndarray
    obs_var: np.ndarray
    ret_mean: np.ndarray
    ret_var: np.ndarray
    counts: np.ndarray
    returns: np.ndarray
    training: np.ndarray
    norm_obs: bool
    norm_reward: bool
    clip_obs: float
    clip_reward: float
    gamma: float
    epsilon: float


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValueError(f"{name} must be a positive number, got {value!r}")
    v = float(value)
    if not (np.isfinite(v) and v > 0.0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    return v


def norm_stats(
    obs_dim: int, n_envs: int, norm_obs: bool = True, norm_reward: bool = True,
    clip_obs: float = 10.0, clip_reward: float = 10.0, gamma: float = 0.99,
    epsilon: float = NORM_EPSILON,
) -> NormStats:  # fmt: skip
    """Fresh :class:`NormStats` (SB3's defaults), training on.

    Raises
    ------
    ValueError
        For ``obs_dim`` or ``n_envs`` < 1, a bound or epsilon that is not positive,
        or ``gamma`` outside [0, 1].
    """
    for name, value in (("obs_dim", obs_dim), ("n_envs", n_envs)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)) or not (
        0.0 <= float(gamma) <= 1.0
    ):  # fmt: skip
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    return NormStats(
        obs_mean=np.zeros(int(obs_dim)), obs_var=np.ones(int(obs_dim)),
        ret_mean=np.zeros(1), ret_var=np.ones(1), counts=np.full(2, RMS_EPSILON),
        returns=np.zeros(int(n_envs)), training=np.ones(1, np.bool_),
        norm_obs=bool(norm_obs), norm_reward=bool(norm_reward),
        clip_obs=_positive("clip_obs", clip_obs), clip_reward=_positive("clip_reward", clip_reward),
        gamma=float(gamma), epsilon=_positive("epsilon", epsilon),
    )  # fmt: skip


def normalize_obs_numpy(
    obs: Any, obs_mean: np.ndarray, obs_var: np.ndarray, clip_obs: float = 10.0,
    epsilon: float = NORM_EPSILON,
) -> np.ndarray:  # fmt: skip
    """``clip((obs - mean) / sqrt(var + epsilon), -clip_obs, clip_obs)`` in float64, as
    float32: the deployed policy's normalisation (NumPy only, statistics frozen).

    obs : float (..., obs_dim); obs_mean, obs_var : float64 (obs_dim,). Returns float32
    of obs's shape. The same numbers as the compiled apply (up to the last float32 bit).
    """
    x = np.asarray(obs, dtype=np.float64)
    z = (x - obs_mean) / np.sqrt(obs_var + epsilon)
    return np.clip(z, -clip_obs, clip_obs).astype(np.float32)


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
        from ember_np.ppo.normalize_kernels import normalize_obs_rows

        x = self._obs(obs)
        rows = self._rows(update_rows, x.shape[0], "update_rows", True)
        out = np.empty_like(x)
        normalize_obs_rows(self.stats, x, rows, out)
        return out

    def apply_obs(self, obs: Any) -> np.ndarray:
        """Normalise ``obs`` (float (B, obs_dim)) without updating the statistics:
        float32 (B, obs_dim). For the real last observations of ended episodes."""
        from ember_np.ppo.normalize_kernels import normalize_obs_rows

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
        from ember_np.ppo.normalize_kernels import normalize_rewards

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
        """Restore :meth:`state_arrays`; nothing changes unless every array is valid.

        Raises
        ------
        ValueError
            Naming the first array that is missing, of another shape or dtype, not
            finite, a negative variance or a count that is not positive.
        """
        checked = {}
        for key in STATE_KEYS:
            like = getattr(self.stats, key)
            have = arrays.get(key)
            if have is None or have.shape != like.shape or have.dtype != np.float64:
                got = "missing" if have is None else f"{have.dtype} {have.shape}"
                raise ValueError(f"saved normalisation statistics {key!r}: expected float64 "
                                 f"{like.shape}, got {got}")  # fmt: skip
            if not np.isfinite(have).all():
                raise ValueError(f"saved normalisation statistics {key!r} hold NaN or inf")
            checked[key] = have
        for key, rule in (("obs_var", "negative"), ("ret_var", "negative"),
                          ("counts", "not positive")):  # fmt: skip
            bad = checked[key] <= 0 if key == "counts" else checked[key] < 0
            if bad.any():
                raise ValueError(f"saved normalisation statistics {key!r} are {rule}: "
                                 f"{checked[key]!r}")  # fmt: skip
        for key, value in checked.items():
            getattr(self.stats, key)[:] = value

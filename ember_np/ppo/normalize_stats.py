"""The normalisation statistics of :mod:`ember_np.ppo.normalize`, NumPy only.

What a deployed policy needs (it imports this module and never numba): the
statistics' layout (:class:`NormStats`), their checks when loaded
(:func:`checked_state`), and :func:`normalize_obs_numpy`. The compiled apply is
:mod:`ember_np.ppo.normalize_kernels`; :class:`~ember_np.ppo.normalize.VecNormalizer`
puts the two together for a training loop.

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
transition). ``VecNormalizer.normalize_obs`` takes the rows to count (``update_rows``) and
``VecNormalizer.normalize_reward`` the rows to skip, so both modes feed the
statistics SB3's samples.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

__all__ = [
    "NORM_EPSILON",
    "RMS_EPSILON",
    "STATE_KEYS",
    "NormStats",
    "checked_state",
    "norm_stats",
    "normalize_obs_numpy",
]

#: SB3's ``RunningMeanStd(epsilon=1e-4)``: the count the statistics start from.
RMS_EPSILON = 1e-4
#: SB3's ``VecNormalize(epsilon=1e-8)``: added to a variance before its square root.
NORM_EPSILON = 1e-8
#: The statistics' arrays saved in a checkpoint (``VecNormalizer.state_arrays``' keys).
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


def checked_state(stats: NormStats, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays of :data:`STATE_KEYS` in ``arrays``, checked against ``stats``' shapes.

    Raises
    ------
    ValueError
        Naming the first array that is missing, of another shape or dtype, not
        finite, a negative variance or a count that is not positive.
    """
    checked = {}
    for key in STATE_KEYS:
        like = getattr(stats, key)
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
    return checked

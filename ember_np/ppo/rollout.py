"""PPO's rollout buffer: n_steps vector steps of n_envs envs, GAE(lambda), minibatch order.

One rollout is ``n_steps`` vector steps of ``n_envs`` envs, stored step-major in
arrays of shape ``(n_steps, n_envs, ...)`` (:class:`RolloutArrays`). Three kernels
work on it, each compiled once (one signature) and callable from Python or from a
compiled training loop:

* :func:`store_step` writes one vector step (a row);
* :func:`compute_gae` computes the advantages, GAE(lambda), and the returns
  (``returns = advantages + values``, as Stable-Baselines3's ``RolloutBuffer``);
* :func:`shuffled_indices` gives the rows of an epoch in a random order from an
  :class:`~ember_np.rng.Rng` stream: the minibatches are consecutive slices of it.

:class:`RolloutBuffer` holds the arrays for the Python loop and checks what it is
given; :func:`truncation_bootstrap_obs` finds, in a gymnasium vector env's step, the
real last observations the critic must value.

Episode ends
------------
A terminated episode's last transition has no next value. A truncated one (a time
limit) is cut short, not ended: its return goes on past the cut, so it bootstraps
from the critic's value of its *real* last observation, ``V(s_T)``. As
Stable-Baselines3 does (``OnPolicyAlgorithm.collect_rollouts``), :func:`store_step`
adds ``gamma * V(s_T)`` to the reward of that step and marks the row done, so the
GAE recursion stops there as at a termination. That is exactly the truncated
episode's one-step TD error ``r + gamma V(s_T) - V(s)``, and it keeps GAE one loop
over one next-value array (the next row's values, or ``last_values`` at the end):
no second ``(n_steps, n_envs)`` array of next values is stored or read, and
``compute_gae`` is the same recursion as SB3's. The stored rewards of such rows are
therefore not the env's: a loop logs episode returns from the env's rewards.
An episode both terminated and truncated at once is terminated (no bootstrap), as
SB3's ``TimeLimit.truncated`` is ``truncated and not terminated``.

Where ``V(s_T)`` comes from (``final_values``):

* ``"same"`` autoreset (gymnasium's ``AutoresetMode.SAME_STEP``, and
  :class:`~ember_np.envs.NativeVecEnv`): the step that ends env e's episode returns
  the next episode's first observation; the real last one is
  ``info["final_obs"][e]`` (``NativeVecEnv.final_obs[e]``), which the caller gives
  to the critic (normalised as the policy's inputs are).
* ``"next"`` autoreset (``AutoresetMode.NEXT_STEP``, gymnasium's default): the step
  that ends the episode returns its real last observation, so ``V(s_T)`` is the
  critic's value of that step's next observation, which the loop computes anyway
  to act on it; the loop passes those values. The step after returns the new
  episode's first observation, reward 0, and ignores the action: that row is no
  transition. It is stored with ``valid`` False (reward 0, advantage 0, return =
  value) and left out of the minibatches (:func:`shuffled_indices`), so a rollout
  then holds fewer than ``n_steps * n_envs`` samples; the buffer itself tracks
  which rows those are (``ended``), across rollouts too.

Either way :func:`truncation_bootstrap_obs` returns the rows to value.
"""

from __future__ import annotations

import enum
from typing import Any, NamedTuple

import numpy as np

from ember_np._arrays import as_f32, as_f64, as_i64
from ember_np._jit import entry_point, kernel, ordered_kernel
from ember_np._masks import check_action_masks
from ember_np._validate import check_int
from ember_np.rng import Rng, next_below

__all__ = [
    "FULL",
    "NEXT_STEP",
    "SAME_STEP",
    "FlatRollout",
    "RolloutArrays",
    "RolloutBuffer",
    "autoreset_next",
    "compute_gae",
    "rollout_arrays",
    "shuffled_indices",
    "store_step",
    "truncation_bootstrap_obs",
]

#: gymnasium's ``AutoresetMode.SAME_STEP`` (and ``NativeVecEnv``): reset within the ending step.
SAME_STEP = "same"
#: gymnasium's ``AutoresetMode.NEXT_STEP`` (its default): reset on the step after.
NEXT_STEP = "next"

#: :func:`store_step`'s return when the rollout already holds ``n_steps`` rows.
FULL = -1


class RolloutArrays(NamedTuple):
    """One rollout of ``T = n_steps`` vector steps of ``N = n_envs`` envs, as the kernels
    read and write it (made by :func:`rollout_arrays`).

    obs : ndarray of float32, shape (T, N, obs_dim)
        The observation each env acted on (normalised, as the policy saw it).
    actions : ndarray of int64, shape (T, N)
    rewards : ndarray of float32, shape (T, N)
        The reward (normalised, when rewards are), plus ``gamma * V(s_T)`` on a step
        that truncated an episode (the module docstring); 0 on a row that is no
        transition.
    values : ndarray of float32, shape (T, N)
        The critic's value of ``obs``.
    log_probs : ndarray of float32, shape (T, N)
        The log-probability of ``actions`` under the policy that chose them.
    masks : ndarray of bool, shape (T, N, n_actions) or (T, N, 0)
        The legal actions in ``obs`` (width 0: no masks, every action legal).
    dones : ndarray of bool, shape (T, N)
        Whether the episode ended (terminated or truncated) at this step: GAE's
        recursion stops here.
    valid : ndarray of bool, shape (T, N)
        Whether the row is a transition (False: the reset row of ``"next"``
        autoreset, left out of the minibatches).
    advantages, returns : ndarray of float32, shape (T, N)
        Written by :func:`compute_gae`.
    ended : ndarray of bool, shape (N,)
        Carried from step to step (and rollout to rollout): env e's episode ended at
        the last stored step and its env resets on the next one (``"next"`` only).
    cursor : ndarray of int64, shape (1,)
        Rows stored in this rollout, in [0, T].
    gamma : float
        Discount: the truncation bootstrap and GAE.
    gae_lambda : float
        GAE's lambda.
    next_step : bool
        The envs' autoreset mode is ``"next"`` (else ``"same"``).
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    values: np.ndarray
    log_probs: np.ndarray
    masks: np.ndarray
    dones: np.ndarray
    valid: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    ended: np.ndarray
    cursor: np.ndarray
    gamma: float
    gae_lambda: float
    next_step: bool


class FlatRollout(NamedTuple):
    """A rollout's arrays as ``T * N`` samples (views, no copies): sample ``i`` is step
    ``i // N`` of env ``i % N``. Shapes: (T * N, ...) of :class:`RolloutArrays`'."""

    obs: np.ndarray
    actions: np.ndarray
    log_probs: np.ndarray
    values: np.ndarray
    advantages: np.ndarray
    returns: np.ndarray
    masks: np.ndarray
    valid: np.ndarray


def autoreset_next(autoreset: Any) -> bool:
    """Whether ``autoreset`` is the next-step mode: ``"next"`` or
    ``gymnasium.vector.AutoresetMode.NEXT_STEP`` (True), ``"same"`` or ``SAME_STEP``
    (False). ValueError for anything else (``DISABLED``: the envs must reset themselves).
    """
    value = autoreset.value if isinstance(autoreset, enum.Enum) else autoreset
    if value in (NEXT_STEP, "NextStep"):
        return True
    if value in (SAME_STEP, "SameStep"):
        return False
    raise ValueError(
        f"autoreset must be 'next' or 'same' (gymnasium's AutoresetMode.NEXT_STEP or "
        f"SAME_STEP), got {autoreset!r}: build the vector env with one of those two modes"
    )


def rollout_arrays(
    n_steps: int, n_envs: int, obs_dim: int, n_actions_masked: int = 0,
    gamma: float = 0.99, gae_lambda: float = 0.95, autoreset: Any = NEXT_STEP,
) -> RolloutArrays:  # fmt: skip
    """Zeroed :class:`RolloutArrays` for ``n_steps`` steps of ``n_envs`` envs.

    Parameters
    ----------
    n_steps, n_envs, obs_dim : int
        Each >= 1.
    n_actions_masked : int
        Width of the stored action masks: the number of actions with masks on,
        0 (default) without.
    gamma, gae_lambda : float
        In [0, 1].
    autoreset : str or gymnasium.vector.AutoresetMode
        The envs' autoreset mode (:func:`autoreset_next`).

    Raises
    ------
    ValueError
        Naming the argument that is out of range.
    """
    t = check_int("n_steps", n_steps)
    n = check_int("n_envs", n_envs)
    d = check_int("obs_dim", obs_dim)
    a = check_int("n_actions_masked", n_actions_masked, minimum=0)
    for name, value in (("gamma", gamma), ("gae_lambda", gae_lambda)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or not (
            0.0 <= float(value) <= 1.0
        ):  # fmt: skip
            raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")
    f32 = np.float32
    return RolloutArrays(
        obs=np.zeros((t, n, d), f32), actions=np.zeros((t, n), np.int64),
        rewards=np.zeros((t, n), f32), values=np.zeros((t, n), f32),
        log_probs=np.zeros((t, n), f32), masks=np.zeros((t, n, a), np.bool_),
        dones=np.zeros((t, n), np.bool_), valid=np.zeros((t, n), np.bool_),
        advantages=np.zeros((t, n), f32), returns=np.zeros((t, n), f32),
        ended=np.zeros(n, np.bool_), cursor=np.zeros(1, np.int64),
        gamma=float(gamma), gae_lambda=float(gae_lambda), next_step=autoreset_next(autoreset),
    )  # fmt: skip


@kernel
def store_step(
    buf: RolloutArrays, obs: np.ndarray, actions: np.ndarray, values: np.ndarray,
    log_probs: np.ndarray, masks: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
    truncated: np.ndarray, final_values: np.ndarray,
) -> int:  # fmt: skip
    """Store one vector step as the rollout's next row; return its index, or FULL (-1).

    Parameters
    ----------
    buf : RolloutArrays
        Written: the row ``buf.cursor[0]``, ``ended``, ``cursor``.
    obs : float32 (N, obs_dim)
        The observations acted on.
    actions : int64 (N,)
    values, log_probs : float32 (N,)
        The critic's values of ``obs``; the log-probabilities of ``actions``.
    masks : bool (N, n_actions_masked)
        The legal actions in ``obs`` (width 0 without masks).
    rewards : float64 (N,)
        The step's rewards (normalised, when rewards are).
    terminated, truncated : bool (N,)
        The step's episode ends.
    final_values : float32 (N,)
        For an env truncated (and not terminated) at this step, the critic's value of
        its real last observation (the module docstring); read for no other env.

    Notes
    -----
    A row of an env whose episode ended at the previous step under ``"next"``
    autoreset is stored with ``valid`` False, reward 0 and ``dones`` False: the env
    reset during this step, ignoring the action.
    """
    row = buf.cursor[0]
    if row >= buf.obs.shape[0]:
        return FULL
    n, d = obs.shape
    w = masks.shape[1]
    gamma = buf.gamma
    for e in range(n):
        # element loops, not ``buf.obs[row] = obs``: a slice assignment compiles numba's
        # shape-mismatch error (string formatting), about 3 s of CPU on a cold cache
        for j in range(d):
            buf.obs[row, e, j] = obs[e, j]
        for j in range(w):
            buf.masks[row, e, j] = masks[e, j]
        buf.actions[row, e] = actions[e]
        buf.values[row, e] = values[e]
        buf.log_probs[row, e] = log_probs[e]
        if buf.ended[e]:  # "next" autoreset's reset row: no transition
            buf.valid[row, e] = False
            buf.rewards[row, e] = 0.0
            buf.dones[row, e] = False
            buf.ended[e] = False
            continue
        r = rewards[e]
        if truncated[e] and not terminated[e]:
            r += gamma * np.float64(final_values[e])
        done = terminated[e] or truncated[e]
        buf.valid[row, e] = True
        buf.rewards[row, e] = r
        buf.dones[row, e] = done
        buf.ended[e] = done and buf.next_step
    buf.cursor[0] = row + 1
    return row


@ordered_kernel
def compute_gae(buf: RolloutArrays, last_values: np.ndarray) -> None:
    """Advantages GAE(gamma, lambda) and returns of a full rollout, in place.

    For each env, from the last row back, with ``next = 0`` if row t is done, else 1,
    and ``v'`` the next row's value (``last_values`` after the last row)::

        delta_t = rewards_t + gamma * v' * next - values_t
        A_t = delta_t + gamma * lambda * next * A_{t+1}
        returns_t = A_t + values_t

    Stable-Baselines3's ``compute_returns_and_advantage`` (its ``1 -
    episode_starts[t + 1]`` is our ``not dones[t]``). A row that is no transition gets
    advantage 0 and return = value, and nothing flows through it (the row before it
    is done). Sums in float64, stored as float32.

    Parameters
    ----------
    buf : RolloutArrays
        Full (``cursor[0] == n_steps``); ``advantages`` and ``returns`` written.
    last_values : float32 (N,)
        The critic's values of the observations after the last step (read only for
        envs whose last row is not done).
    """
    t_max, n = buf.rewards.shape
    gamma = buf.gamma
    gl = buf.gamma * buf.gae_lambda
    running = np.zeros(n, np.float64)  # A_{t+1} per env
    for t in range(t_max - 1, -1, -1):
        for e in range(n):
            v = np.float64(buf.values[t, e])
            if not buf.valid[t, e]:
                buf.advantages[t, e] = 0.0
                buf.returns[t, e] = buf.values[t, e]
                running[e] = 0.0
                continue
            if buf.dones[t, e]:
                a = np.float64(buf.rewards[t, e]) - v
            else:
                nv = last_values[e] if t == t_max - 1 else buf.values[t + 1, e]
                a = np.float64(buf.rewards[t, e]) + gamma * np.float64(nv) - v + gl * running[e]
            running[e] = a
            buf.advantages[t, e] = a
            buf.returns[t, e] = a + v


@kernel
def shuffled_indices(rng_state: np.ndarray, valid: np.ndarray, out: np.ndarray) -> int:
    """The indices of the True entries of ``valid``, in a random order; return how many.

    ``out[:k]`` (k returned) is a uniformly random permutation of ``np.flatnonzero(
    valid)``: the indices in increasing order, then a Fisher-Yates shuffle (from the
    back, ``j = next_below(state, i + 1)``). The same state gives the same order.

    rng_state : uint64 (4,), an :class:`~ember_np.rng.Rng` state, advanced (k - 1 draws);
    valid : bool (M,); out : int64 (M,), its first k entries written.
    """
    k = 0
    for i in range(valid.shape[0]):
        if valid[i]:
            out[k] = i
            k += 1
    for i in range(k - 1, 0, -1):
        j = next_below(rng_state, i + 1)
        tmp = out[i]
        out[i] = out[j]
        out[j] = tmp
    return k


def truncation_bootstrap_obs(
    autoreset: Any, next_obs: Any, terminated: Any, truncated: Any, info: Any
) -> tuple[np.ndarray, np.ndarray]:
    """The envs truncated (not terminated) at a step, and their real last observations.

    ``(envs, rows)``: int64 (k,) env indices and their last observations, (k, ...) as
    the env gives them (encode and normalise them as the policy's inputs, then pass
    the critic's values as :func:`store_step`'s ``final_values[envs]``). With
    ``"next"`` autoreset they are ``next_obs[envs]``; with ``"same"``,
    ``info["final_obs"][e]`` (gymnasium's ``SAME_STEP``; for a ``NativeVecEnv`` pass
    ``{"final_obs": env.final_obs}``).

    Raises
    ------
    ValueError
        Under ``"same"`` autoreset, if ``info`` has no ``final_obs`` for a truncated env.
    """
    term = np.asarray(terminated, dtype=np.bool_)
    trunc = np.asarray(truncated, dtype=np.bool_)
    envs = np.flatnonzero(trunc & ~term).astype(np.int64)
    source = np.asarray(next_obs) if autoreset_next(autoreset) else None
    if source is None:
        final = info.get("final_obs") if isinstance(info, dict) else None
        if envs.size and final is None:
            raise ValueError(
                "a truncated episode needs its last observation: under 'same' autoreset "
                "pass the step's info with 'final_obs' (gymnasium's SAME_STEP puts it there; "
                "for a NativeVecEnv pass {'final_obs': env.final_obs})"
            )
        rows = [np.asarray(final[e]) for e in envs] if envs.size else []  # type: ignore[index]
        like = np.asarray(next_obs)
        out = np.stack(rows) if rows else np.zeros((0, *like.shape[1:]), like.dtype)
        return envs, out
    return envs, source[envs]


class RolloutBuffer:
    """A rollout buffer for the Python loop: checked inputs, then the kernels.

    Parameters
    ----------
    n_steps, n_envs, obs_dim : int
        Each >= 1.
    n_actions_masked : int
        The number of actions when action masks are stored, else 0 (default).
    gamma, gae_lambda : float
        In [0, 1] (defaults SB3's PPO's: 0.99, 0.95).
    autoreset : str or gymnasium.vector.AutoresetMode
        ``"next"`` (default, gymnasium's default) or ``"same"``.

    Attributes
    ----------
    arrays : RolloutArrays
        The arrays (the kernels' argument; a compiled loop uses them directly).

    Notes
    -----
    Per rollout: :meth:`reset`, then :meth:`store` ``n_steps`` times, then
    :meth:`compute_gae`, then per epoch :meth:`minibatch_order` and slices of it
    (:meth:`flat` holds the samples). After ``env.reset()`` call :meth:`restart`.
    """

    def __init__(
        self, n_steps: int, n_envs: int, obs_dim: int, n_actions_masked: int = 0,
        gamma: float = 0.99, gae_lambda: float = 0.95, autoreset: Any = NEXT_STEP,
    ) -> None:  # fmt: skip
        self.arrays = rollout_arrays(n_steps, n_envs, obs_dim, n_actions_masked, gamma,
                                     gae_lambda, autoreset)  # fmt: skip
        self.n_steps, self.n_envs, self.obs_dim = int(n_steps), int(n_envs), int(obs_dim)
        self.n_actions_masked = int(n_actions_masked)
        self.gae_done = False
        self._order = np.zeros(self.n_steps * self.n_envs, np.int64)
        self._no_masks = np.zeros((self.n_envs, 0), np.bool_)
        self._store: Any = None  # store_step's entry point, resolved at the first store

    @property
    def pos(self) -> int:
        """Rows stored in this rollout."""
        return int(self.arrays.cursor[0])

    @property
    def full(self) -> bool:
        """Whether ``n_steps`` rows are stored."""
        return self.pos == self.n_steps

    @property
    def n_samples(self) -> int:
        """The transitions stored (rows with ``valid``): the samples of an epoch."""
        return int(np.count_nonzero(self.arrays.valid[: self.pos]))

    def reset(self) -> None:
        """Start a new rollout (the envs' episodes go on: ``ended`` is kept)."""
        self.arrays.cursor[0] = 0
        self.gae_done = False

    def restart(self) -> None:
        """Start a new rollout after the envs were reset (no episode has just ended)."""
        self.reset()
        self.arrays.ended[:] = False

    def _vector(self, x: Any, name: str, cast: Any) -> np.ndarray:
        arr = cast(x, name)
        if arr.shape != (self.n_envs,):
            raise ValueError(f"expected {name} of shape ({self.n_envs},) (one per env), got "
                             f"shape {arr.shape}")  # fmt: skip
        return arr  # type: ignore[no-any-return]

    def _flags(self, x: Any, name: str) -> np.ndarray:
        arr = np.asarray(x)
        if arr.dtype.kind not in "bi" or arr.shape != (self.n_envs,):
            raise ValueError(f"expected {name} as {self.n_envs} booleans (one per env), got "
                             f"dtype {arr.dtype} shape {arr.shape}")  # fmt: skip
        return np.array(arr, dtype=np.bool_, order="C")  # owned, writeable: one kernel type

    def store(self, obs: Any, actions: Any, values: Any, log_probs: Any, rewards: Any,
              terminated: Any, truncated: Any, final_values: Any = None,
              masks: Any = None) -> int:  # fmt: skip
        """Store one vector step (:func:`store_step`); return its row.

        ``final_values`` (float (n_envs,), optional when no env is truncated): the
        critic's values of the truncated envs' real last observations
        (:func:`truncation_bootstrap_obs`); other entries are not read. ``masks``:
        bool (n_envs, n_actions_masked) when the buffer stores masks.

        Raises
        ------
        ValueError
            For an array of the wrong shape or dtype, a non-finite value, a missing
            ``final_values`` or ``masks``, or a full rollout (call :meth:`reset`).
        """
        if self.full:
            raise ValueError(f"the rollout is full ({self.n_steps} steps): compute_gae, "
                             "update, then reset() before storing the next rollout")  # fmt: skip
        x = as_f32(obs, "obs")
        if x.shape != (self.n_envs, self.obs_dim):
            raise ValueError(f"expected obs of shape ({self.n_envs}, {self.obs_dim}), got "
                             f"shape {x.shape}")  # fmt: skip
        a = self._vector(actions, "actions", as_i64)
        v = self._vector(values, "values", as_f32)
        lp = self._vector(log_probs, "log_probs", as_f32)
        r = self._vector(rewards, "rewards", as_f64)
        term = self._flags(terminated, "terminated")
        trunc = self._flags(truncated, "truncated")
        bootstrap = trunc & ~term & ~self.arrays.ended
        if final_values is None:
            if bootstrap.any():
                raise ValueError(
                    f"envs {np.flatnonzero(bootstrap).tolist()} were truncated: pass "
                    "final_values, the critic's values of their real last observations "
                    "(truncation_bootstrap_obs)"
                )
            fv = np.zeros(self.n_envs, np.float32)
        else:
            fv = self._vector(final_values, "final_values", as_f32)
        for name, arr in (("obs", x), ("values", v), ("log_probs", lp), ("rewards", r),
                          ("final_values", np.where(bootstrap, fv, 0.0))):  # fmt: skip
            if not np.isfinite(arr).all():
                raise ValueError(f"{name} holds NaN or inf: {arr!r}")
        if self.n_actions_masked:
            if masks is None:
                raise ValueError("this buffer stores action masks: pass masks of shape "
                                 f"({self.n_envs}, {self.n_actions_masked})")  # fmt: skip
            m = check_action_masks(masks, self.n_envs, self.n_actions_masked, "masks")
        else:
            m = self._no_masks
        args = (self.arrays, x, a, v, lp, m, r, term, trunc, fv)
        if self._store is None:  # every argument is checked and coerced: the same types
            self._store = entry_point(store_step, *args)
        row = self._store(*args)
        self.gae_done = False
        return int(row)

    def compute_gae(self, last_values: Any) -> None:
        """Advantages and returns of the full rollout (:func:`compute_gae`).

        ``last_values``: float (n_envs,), the critic's values of the observations
        after the last step. ValueError if the rollout is not full or the values are
        not n_envs finite numbers.
        """
        if not self.full:
            raise ValueError(f"compute_gae needs a full rollout: {self.pos} of "
                             f"{self.n_steps} steps stored")  # fmt: skip
        lv = self._vector(last_values, "last_values", as_f32)
        if not np.isfinite(lv).all():
            raise ValueError(f"last_values holds NaN or inf: {lv!r}")
        compute_gae(self.arrays, lv)
        self.gae_done = True

    def flat(self) -> FlatRollout:
        """The rollout as ``n_steps * n_envs`` samples (views; :class:`FlatRollout`)."""
        b = self.arrays
        m = self.n_steps * self.n_envs
        return FlatRollout(
            obs=b.obs.reshape(m, self.obs_dim), actions=b.actions.reshape(m),
            log_probs=b.log_probs.reshape(m), values=b.values.reshape(m),
            advantages=b.advantages.reshape(m), returns=b.returns.reshape(m),
            masks=b.masks.reshape(m, self.n_actions_masked), valid=b.valid.reshape(m),
        )  # fmt: skip

    def minibatch_order(self, rng: Rng) -> np.ndarray:
        """An epoch's samples in a random order: int64 (n_samples,) indices into
        :meth:`flat`'s arrays (:func:`shuffled_indices`, drawn from ``rng``).

        Minibatch i is ``order[i * batch_size : (i + 1) * batch_size]``, the last one
        shorter when ``batch_size`` does not divide the samples (as SB3's
        ``RolloutBuffer.get``). ValueError before :meth:`compute_gae`.
        """
        if not self.gae_done:
            raise ValueError("minibatch_order needs the advantages: call compute_gae first")
        valid = self.arrays.valid.reshape(-1)
        k = shuffled_indices(rng.state, valid, self._order)
        return self._order[:k].copy()

    def state_arrays(self) -> dict[str, np.ndarray]:
        """What an exact resume at a rollout boundary needs: ``ended`` (bool (n_envs,))."""
        return {"ended": self.arrays.ended.copy()}

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Continue from :meth:`state_arrays`; ValueError if they are not this buffer's."""
        have = arrays.get("ended")
        if have is None or have.shape != (self.n_envs,) or have.dtype != np.bool_:
            got = "missing" if have is None else f"{have.dtype} {have.shape}"
            raise ValueError(f"saved rollout state 'ended': expected bool ({self.n_envs},), "
                             f"got {got}")  # fmt: skip
        self.reset()
        self.arrays.ended[:] = have

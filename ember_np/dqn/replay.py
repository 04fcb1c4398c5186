"""CircularBuffer: a fixed-capacity replay buffer in one structured NumPy array.

Each stored transition is one record of :func:`transition_dtype`::

    obs       float32 (obs_size,)
    action    int32
    reward    float32
    next_obs  float32 (obs_size,)
    status    uint8   (EpisodeStatus: 0 continuing, 1 terminated, 2 truncated)

The record is packed (no padding): 41 bytes for CartPole's 4-float
observation. Push and sample are ``@njit`` kernels that take the structured
array itself (one argument, the cheapest call numba offers); numba compiles one
version per observation size, cached on disk like every kernel. Sampling
is uniform with replacement over the stored transitions, drawn from an explicit
:class:`~ember_np.rng.Rng`.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple, NoReturn

import numpy as np

from ember_np._jit import kernel
from ember_np.rng import Rng, next_below
from ember_np.types import EpisodeStatus

__all__ = ["Batch", "CircularBuffer", "transition_dtype"]

_F32 = np.dtype(np.float32)
_TERMINATED = int(EpisodeStatus.TERMINATED)


def transition_dtype(obs_size: int) -> np.dtype:
    """The packed structured dtype of one stored transition."""
    return np.dtype(
        [
            ("obs", np.float32, (obs_size,)),
            ("action", np.int32),
            ("reward", np.float32),
            ("next_obs", np.float32, (obs_size,)),
            ("status", np.uint8),
        ]
    )


class Batch(NamedTuple):
    """A sampled mini-batch.

    obs, next_obs : ndarray of float32, shape (batch, obs_size)
    actions : ndarray of int64, shape (batch,)
    rewards : ndarray of float32, shape (batch,)
    masks : ndarray of float32, shape (batch,)
        Bootstrap masks: 0 for terminated transitions, 1 otherwise.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    masks: np.ndarray


# Push error codes (0 = stored).
_BAD_ACTION, _BAD_REWARD, _BAD_OBS, _BAD_NEXT_OBS, _BAD_STATUS = 1, 2, 3, 4, 5


@kernel
def _push(
    storage: np.ndarray,
    cursor: np.ndarray,
    n_actions: int,
    obs: np.ndarray,
    action: int,
    reward: float,
    next_obs: np.ndarray,
    status: int,
) -> int:
    """Validate one transition, then write it at ``cursor[0]`` and advance.

    cursor : int64 (2,) = [next write position, number stored], updated in place.
    Returns 0, or an error code with nothing written.
    """
    if action < 0 or action >= n_actions:
        return _BAD_ACTION
    if not np.isfinite(reward):
        return _BAD_REWARD
    for j in range(obs.shape[0]):
        if not np.isfinite(obs[j]):
            return _BAD_OBS
        if not np.isfinite(next_obs[j]):
            return _BAD_NEXT_OBS
    if status < 0 or status > 2:
        return _BAD_STATUS
    i = cursor[0]
    rec = storage[i]
    for j in range(obs.shape[0]):
        rec.obs[j] = obs[j]
        rec.next_obs[j] = next_obs[j]
    rec.action = action
    rec.reward = reward
    rec.status = status
    capacity = storage.shape[0]
    cursor[0] = i + 1 if i + 1 < capacity else 0
    if cursor[1] < capacity:
        cursor[1] += 1
    return 0


@kernel
def _sample(
    storage: np.ndarray,
    size: int,
    rng_state: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    next_obs: np.ndarray,
    masks: np.ndarray,
) -> None:
    """Gather ``len(actions)`` transitions drawn uniformly from the first ``size``."""
    n = obs.shape[1]
    for k in range(actions.shape[0]):
        rec = storage[next_below(rng_state, size)]
        for j in range(n):
            obs[k, j] = rec.obs[j]
            next_obs[k, j] = rec.next_obs[j]
        actions[k] = rec.action
        rewards[k] = rec.reward
        masks[k] = 0.0 if rec.status == _TERMINATED else 1.0


def _as_obs(x: Any, obs_size: int, name: str) -> np.ndarray:
    """``x`` as a C-contiguous float32 vector of length ``obs_size`` (no copy if it is one)."""
    try:
        arr = np.ascontiguousarray(x, dtype=_F32)
    except (TypeError, ValueError):
        raise ValueError(
            f"expected {name} as {obs_size} numbers convertible to float32, got {x!r}"
        ) from None
    if arr.shape != (obs_size,):
        raise ValueError(f"expected {name} of shape ({obs_size},), got {arr.shape}")
    return arr


def _positive_int(name: str, value: Any) -> int:
    try:
        v = operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be a positive integer, got {value!r}") from None
    if v <= 0:
        raise ValueError(f"{name} must be a positive integer, got {v}")
    return v


class CircularBuffer:
    """Fixed-capacity FIFO replay buffer; the oldest transition is overwritten first.

    Parameters
    ----------
    capacity : int > 0
        Maximum number of transitions kept.
    obs_size : int > 0
        Length of the (flattened) observation vector.
    num_actions : int > 0
        Actions are indices in ``[0, num_actions)``.

    Attributes
    ----------
    storage : ndarray of :func:`transition_dtype`, shape (capacity,)
        All slots; only the first ``len(self)`` hold data until the buffer is full.
    """

    def __init__(self, capacity: int, obs_size: int, num_actions: int) -> None:
        self._capacity = _positive_int("capacity", capacity)
        self._obs_size = _positive_int("obs_size", obs_size)
        self._num_actions = _positive_int("num_actions", num_actions)
        # np.zeros maps pages lazily: memory is committed as the buffer fills.
        self.storage = np.zeros(self._capacity, dtype=transition_dtype(self._obs_size))
        self._cursor = np.zeros(2, dtype=np.int64)  # [next position, size]
        self._obs_shape = (self._obs_size,)

    @property
    def capacity(self) -> int:
        """Maximum number of transitions kept."""
        return self._capacity

    @property
    def obs_size(self) -> int:
        return self._obs_size

    @property
    def num_actions(self) -> int:
        return self._num_actions

    @property
    def position(self) -> int:
        """Slot the next push writes to."""
        return int(self._cursor[0])

    def __len__(self) -> int:
        return int(self._cursor[1])

    @property
    def is_full(self) -> bool:
        """True once ``capacity`` transitions have been pushed (pushes then overwrite)."""
        return int(self._cursor[1]) == self._capacity

    def ready_for(self, batch_size: int) -> bool:
        """True when at least ``batch_size`` transitions are stored."""
        return int(self._cursor[1]) >= batch_size

    @property
    def nbytes_per_transition(self) -> int:
        """Bytes of storage per transition (the record size)."""
        return int(self.storage.dtype.itemsize)

    def push(
        self,
        obs: Any,
        action: int,
        reward: float,
        next_obs: Any,
        status: int | EpisodeStatus = EpisodeStatus.CONTINUING,
    ) -> None:
        """Store one transition, overwriting the oldest when full.

        Parameters
        ----------
        obs, next_obs : array_like of float32, shape (obs_size,)
        action : int in [0, num_actions)
        reward : float, finite
        status : EpisodeStatus or int in {0, 1, 2}

        Raises
        ------
        ValueError
            On a wrong shape, an action out of range, a non-finite value or an
            unknown status. Nothing stored is changed.
        """
        # The fast path (float32 vectors, int action) costs ~0.4 us of Python.
        try:
            o = np.ascontiguousarray(obs, dtype=_F32)
            no = np.ascontiguousarray(next_obs, dtype=_F32)
            a = operator.index(action)
            s = operator.index(status)
            r = float(reward)
        except (TypeError, ValueError):
            self._raise_conversion_error(obs, action, reward, next_obs, status)
        if o.shape != self._obs_shape or no.shape != self._obs_shape:
            _as_obs(obs, self._obs_size, "obs")
            _as_obs(next_obs, self._obs_size, "next_obs")
        code = _push(self.storage, self._cursor, self._num_actions, o, a, r, no, s)
        if code:
            self._raise_push_error(code, a, r, o, no, s)

    def _raise_conversion_error(
        self, obs: Any, action: Any, reward: Any, next_obs: Any, status: Any
    ) -> NoReturn:
        _as_obs(obs, self._obs_size, "obs")
        _as_obs(next_obs, self._obs_size, "next_obs")
        for name, value in (("action", action), ("status", status)):
            try:
                operator.index(value)
            except TypeError:
                raise ValueError(f"{name} must be an integer, got {value!r}") from None
        raise ValueError(f"reward must be a number, got {reward!r}")

    def _raise_push_error(
        self,
        code: int,
        action: int,
        reward: float,
        obs: np.ndarray,
        next_obs: np.ndarray,
        status: int,
    ) -> NoReturn:
        tail = "; nothing was stored"
        if code == _BAD_ACTION:
            raise ValueError(f"action must be in [0, {self._num_actions}), got {action}{tail}")
        if code == _BAD_REWARD:
            raise ValueError(f"reward must be finite, got {reward}{tail}")
        if code == _BAD_OBS:
            raise ValueError(f"obs must be finite, got {obs.tolist()}{tail}")
        if code == _BAD_NEXT_OBS:
            raise ValueError(f"next_obs must be finite, got {next_obs.tolist()}{tail}")
        raise ValueError(
            f"status must be an EpisodeStatus (0 continuing, 1 terminated, 2 truncated), "
            f"got {status}{tail}"
        )

    def sample(self, batch_size: int, rng: Rng, out: Batch | None = None) -> Batch:
        """Draw ``batch_size`` transitions uniformly, with replacement.

        Parameters
        ----------
        batch_size : int > 0, at most ``len(self)``
        rng : Rng
            The stream to draw from (advanced in place).
        out : Batch, optional
            Preallocated arrays to gather into (see :meth:`empty_batch`);
            new arrays are allocated when omitted.

        Returns
        -------
        Batch
            obs (B, obs_size) float32, actions (B,) int64, rewards (B,) float32,
            next_obs (B, obs_size) float32, masks (B,) float32.
        """
        b = _positive_int("batch_size", batch_size)
        size = int(self._cursor[1])
        if b > size:
            raise ValueError(
                f"cannot sample {b} transitions from a buffer holding {size}; "
                f"push at least {b - size} more first (see ready_for())"
            )
        if not isinstance(rng, Rng):
            raise ValueError(f"rng must be an ember_np.Rng, got {type(rng).__name__}")
        if out is None:
            out = self.empty_batch(b)
        elif out.actions.shape != (b,) or out.obs.shape != (b, self._obs_size):
            raise ValueError(f"out holds batches of {out.actions.shape[0]}, but batch_size is {b}")
        _sample(self.storage, size, rng.state, *out)
        return out

    def empty_batch(self, batch_size: int) -> Batch:
        """Uninitialised arrays of the right shapes and dtypes for ``sample(out=...)``."""
        b = _positive_int("batch_size", batch_size)
        return Batch(
            np.empty((b, self._obs_size), dtype=np.float32),
            np.empty(b, dtype=np.int64),
            np.empty(b, dtype=np.float32),
            np.empty((b, self._obs_size), dtype=np.float32),
            np.empty(b, dtype=np.float32),
        )

    def clear(self) -> None:
        """Forget every stored transition."""
        self._cursor[:] = 0

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The stored transitions (oldest slots first, as laid out) and the cursor.

        Keys: ``obs``, ``action``, ``reward``, ``next_obs``, ``status`` (the
        first ``len(self)`` slots of each field) and ``cursor`` = [position,
        size, capacity] (int64).
        """
        n = len(self)
        s = self.storage[:n]
        return {
            "obs": s["obs"].copy(),
            "action": s["action"].copy(),
            "reward": s["reward"].copy(),
            "next_obs": s["next_obs"].copy(),
            "status": s["status"].copy(),
            "cursor": np.array([self._cursor[0], n, self._capacity], dtype=np.int64),
        }

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict` exactly; a mismatch raises ValueError, changing nothing."""
        pos, n = self.check_state_dict(state)
        for key in ("obs", "action", "reward", "next_obs", "status"):
            self.storage[key][:n] = state[key]
        self._cursor[0] = pos
        self._cursor[1] = n

    def check_state_dict(self, state: dict[str, np.ndarray]) -> tuple[int, int]:
        """Raise ValueError unless :meth:`load_state_dict` would accept ``state``.

        Returns the (position, size) it would restore. Reads, never writes.
        """
        for key in ("obs", "action", "reward", "next_obs", "status", "cursor"):
            if key not in state:
                raise ValueError(f"replay buffer state is missing {key!r}")
        cursor = np.asarray(state["cursor"])
        if cursor.shape != (3,) or cursor.dtype.kind not in "iu":
            raise ValueError(
                f"replay buffer 'cursor' must be 3 integers, found shape {cursor.shape}"
            )
        pos, n, cap = (int(c) for c in cursor)
        if cap != self._capacity:
            raise ValueError(
                f"replay buffer capacity mismatch: expected {self._capacity}, found {cap}"
            )
        if not (0 <= n <= cap and 0 <= pos < cap and (n == cap or pos == n)):
            raise ValueError(
                f"replay buffer cursor is inconsistent: position {pos}, size {n}, capacity {cap}"
            )
        expected = {
            "obs": ((n, self._obs_size), np.float32),
            "action": ((n,), np.int32),
            "reward": ((n,), np.float32),
            "next_obs": ((n, self._obs_size), np.float32),
            "status": ((n,), np.uint8),
        }
        for key, (shape, dtype) in expected.items():
            arr = np.asarray(state[key])
            if arr.shape != shape or arr.dtype != dtype:
                raise ValueError(
                    f"replay buffer {key!r}: expected {np.dtype(dtype)} of shape {shape}, "
                    f"found {arr.dtype} of shape {arr.shape}"
                )
        actions = np.asarray(state["action"])
        if n and (actions.min() < 0 or actions.max() >= self._num_actions):
            raise ValueError(f"replay buffer 'action' has values outside [0, {self._num_actions})")
        if n and np.asarray(state["status"]).max() > 2:
            raise ValueError("replay buffer 'status' has values outside {0, 1, 2}")
        return pos, n

    def __repr__(self) -> str:
        return (
            f"CircularBuffer(capacity={self._capacity}, obs_size={self._obs_size}, "
            f"num_actions={self._num_actions}, len={len(self)})"
        )

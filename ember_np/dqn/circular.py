"""CircularBuffer: the uniform (optionally n-step, optionally masked) replay buffer.

The layout, the n-step returns and the masks are described in
``ember_np/dqn/replay.py``; the compiled push and sample are in ``replay_kernels.py``.
"""

from __future__ import annotations

import operator
from typing import Any, NoReturn

import numpy as np

from ember_np._arrays import as_f32
from ember_np._jit import entry_point
from ember_np._masks import ALL_LEGAL, check_action_mask, packed_mask_bytes
from ember_np._validate import check_int
from ember_np.dqn.replay_kernels import (
    BAD_ACTION,
    BAD_NEXT_OBS,
    BAD_OBS,
    BAD_REWARD,
    CURSOR_LEN,
    F32,
    F32_MAX,
    N_FREE,
    NO_F64,
    PENDING,
    POS,
    ROWS,
    SIZE,
    ReplayState,
    push_transition,
    sample_into,
    transition_dtype,
)
from ember_np.rng import Rng
from ember_np.types import Batch, EpisodeStatus

_ND = np.ndarray  # one global lookup in push's hot path, not np + .ndarray


def _as_obs(x: Any, obs_size: int, name: str) -> np.ndarray:
    """``x`` as a C-contiguous float32 vector of length ``obs_size`` (no copy if it is one)."""
    try:
        arr = as_f32(x, name)
    except ValueError:
        raise ValueError(
            f"expected {name} as {obs_size} numbers convertible to float32, got {x!r}"
        ) from None
    if arr.shape != (obs_size,):
        raise ValueError(f"expected {name} of shape ({obs_size},), got {arr.shape}")
    return arr


def _checked_gamma(gamma: Any) -> float:
    """``gamma`` as a float in [0, 1], or ValueError saying so."""
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float, np.floating)):
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    if not 0.0 <= float(gamma) <= 1.0:
        raise ValueError(f"gamma must be a number in [0, 1], got {gamma!r}")
    return float(gamma)


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
    n_step : int >= 1, keyword
        Sample n-step returns (see the module docstring); default 1.
    gamma : float in [0, 1], keyword
        The discount, default 0.99: sampled batches carry ``discounts``
        ``gamma * mask`` (``gamma^m * mask`` for m-step returns). The buffer
        is gamma's one owner: the update reads the discount from the batch.
    action_masks : bool, keyword
        Also keep each transition's next-state action mask, as packed bits
        (ceil(num_actions / 8) bytes per slot); sampled batches then carry
        them in ``next_action_masks``. Default False (no memory, no cost).

    Attributes
    ----------
    storage : ndarray of :func:`transition_dtype`, shape (capacity,)
        All slots; only the first ``len(self)`` hold data until the buffer is full.
    finals : ndarray of float32, shape (capacity, obs_size)
        Next observations that are not the following slot's obs (see the
        module docstring); only rows in use are ever touched.
    """

    def __init__(
        self, capacity: int, obs_size: int, num_actions: int, *, n_step: int = 1,
        gamma: float = 0.99, action_masks: bool = False,
    ) -> None:  # fmt: skip
        self._capacity = check_int("capacity", capacity)
        self._obs_size = check_int("obs_size", obs_size)
        self._num_actions = check_int("num_actions", num_actions)
        self._n_step = check_int("n_step", n_step)
        self._gamma = _checked_gamma(gamma)
        # np.zeros maps pages lazily: memory is committed as the buffer fills.
        dtype = transition_dtype(self._obs_size, self._num_actions)
        self.storage = np.zeros(self._capacity, dtype=dtype)
        self.finals = np.zeros((self._capacity, self._obs_size), dtype=np.float32)
        # The counters POS ... PENDING, then the stack of released finals rows.
        self._cursor = np.zeros(CURSOR_LEN + self._capacity, dtype=np.int64)
        self._obs_shape = (self._obs_size,)
        if not isinstance(action_masks, (bool, np.bool_)):
            raise ValueError(f"action_masks must be True or False, got {action_masks!r}")
        self._action_masks = bool(action_masks)
        n_bytes = packed_mask_bytes(self._num_actions)
        self.next_action_masks = np.zeros(
            (self._capacity if action_masks else 0, n_bytes), dtype=np.uint8
        )
        self._set_kernel_state(NO_F64, 0.0, 0.0)
        # Compiled entry points of push_transition and sample_into, resolved at the first call.
        self._push_entry: Any = None
        self._sample_entry: Any = None

    def _set_kernel_state(self, tree: np.ndarray, alpha: float, eps: float) -> None:
        """The one place a ReplayState is built (fixed Python types: one compiled version).

        A non-empty ``tree`` makes the buffer prioritized. Also sets
        ``_fills_optional``: whether sampled batches have fields beyond Batch's
        first six (weights and indices, next_action_masks), the
        early exit of ``sample``'s plain path.
        """
        self._state = ReplayState(
            self.storage, self.finals, self._cursor, int(self._num_actions), int(self._n_step),
            float(self._gamma), tree, float(alpha), float(eps), self.next_action_masks,
        )  # fmt: skip
        self._fills_optional = self._action_masks or tree.shape[0] > 0

    def _options(self) -> dict[str, Any]:
        """The keyword arguments of ``__init__`` (for copies)."""
        return {"n_step": self._n_step, "gamma": self._gamma, "action_masks": self._action_masks}

    @property
    def n_step(self) -> int:
        """Steps of the sampled returns (1: one-step transitions)."""
        return self._n_step

    @property
    def gamma(self) -> float:
        """The discount the sampled batches carry (gamma * mask, gamma^m * mask)."""
        return self._gamma

    def set_returns(self, n_step: int, gamma: float) -> None:
        """Sample ``n_step``-step returns discounted by ``gamma`` from now on.

        Returns are computed at every sample, so the stored transitions serve
        any ``n_step`` and ``gamma``; a DqnAgent calls this when its config changes.
        """
        n, g = check_int("n_step", n_step), _checked_gamma(gamma)
        if (n, g) == (self._n_step, self._gamma):
            return
        self._n_step, self._gamma = n, g
        s = self._state
        self._set_kernel_state(s.tree, s.alpha, s.eps)
        self._forget_entry_points()  # the batches' discounts dtype may have changed

    def _forget_entry_points(self) -> None:
        """Drop the resolved compiled entry points: the next call resolves them again."""
        self._push_entry = self._sample_entry = None

    @property
    def kernel_state(self) -> ReplayState:
        """The buffer's live arrays as one :class:`ReplayState` (kernels update it in place)."""
        return self._state

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
    def action_masks(self) -> bool:
        """Whether the buffer keeps next-state action masks."""
        return self._action_masks

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
    def nbytes(self) -> int:
        """Bytes of memory the buffer holds: every slot, and the finals rows used so far.

        Each finals row used also has its slot in the free-row stack (8 bytes).
        """
        rows = int(self._cursor[ROWS])
        return int(self.storage.nbytes + rows * (self.finals.itemsize * self._obs_size + 8)
                   + self.next_action_masks.nbytes)  # fmt: skip

    @property
    def nbytes_per_transition(self) -> float:
        """:attr:`nbytes` per slot (the record size plus the finals rows' share)."""
        return self.nbytes / self._capacity

    def transition(self, slot: int) -> tuple[np.ndarray, int, float, np.ndarray, int]:
        """The transition stored in ``slot``: (obs, action, reward, next_obs, status).

        Slots count from 0 in storage order; ``slot`` must be below ``len(self)``.
        """
        size = len(self)
        if not 0 <= slot < size:
            raise ValueError(f"slot must be in [0, {size}), got {slot}")
        rec = self.storage[slot]
        row = int(rec["next_ref"])
        if row < 0:  # as in sample_into: the following slot holds it
            next_obs = self.storage[(slot + 1) % self._capacity]["obs"].copy()
        else:
            next_obs = self.finals[row].copy()
        return (
            rec["obs"].copy(),
            int(rec["action"]),
            float(rec["reward"]),
            next_obs,
            int(rec["status"]),
        )

    def push(
        self,
        obs: Any,
        action: int,
        reward: float,
        next_obs: Any,
        status: int | EpisodeStatus = EpisodeStatus.CONTINUING,
        next_action_mask: Any = None,
    ) -> None:
        """Store one transition, overwriting the oldest when full.

        Parameters
        ----------
        obs, next_obs : array_like of float32, shape (obs_size,)
        action : int in [0, num_actions)
        reward : float, finite as a float32 (what is stored)
        status : EpisodeStatus or int in {0, 1, 2}
        next_action_mask : array_like of bool, shape (num_actions,), optional
            The legal actions in ``next_obs`` (a buffer built with
            ``action_masks=True``); default: all legal.

        Raises
        ------
        ValueError
            On a wrong shape, an action out of range, a non-finite value or an
            unknown status. Nothing stored is changed.
        """
        # The fast path (float32 vectors, int action) costs ~0.4 us of Python.
        try:
            # as_f32 with its no-copy test inlined (a call costs ~0.1 us, 10% of a push)
            o, no = obs, next_obs
            if not (type(o) is _ND and o.dtype is F32 and o.flags.carray):
                o = as_f32(o, "obs")
            if not (type(no) is _ND and no.dtype is F32 and no.flags.carray):
                no = as_f32(no, "next_obs")
            a = operator.index(action)
            s = operator.index(status)
            r = float(reward)
        except (TypeError, ValueError):
            self._raise_conversion_error(obs, action, reward, next_obs, status)
        if o.shape != self._obs_shape or no.shape != self._obs_shape:
            _as_obs(obs, self._obs_size, "obs")
            _as_obs(next_obs, self._obs_size, "next_obs")
        legal = self.check_next_mask(next_action_mask)
        push = self._push_entry
        if push is None:  # same argument types every time: skip numba's dispatch
            push = self._push_entry = entry_point(
                push_transition, self._state, o, a, r, no, s, legal
            )
        code = push(self._state, o, a, r, no, s, legal)
        if code:
            self.raise_push_error(code, a, r, o, no, s)

    def check_next_mask(self, mask: Any) -> np.ndarray:
        """``mask`` as the bool (num_actions,) array :func:`push_transition` takes
        (None: all legal).

        ValueError for a mask given to a buffer built without action masks,
        or one that is not a valid mask (see ``ember_np/_masks.py``).
        """
        if mask is None:
            return ALL_LEGAL
        if not self._action_masks:
            raise ValueError(
                "this replay buffer was built without action masks, got a next_action_mask: "
                "build it with CircularBuffer(..., action_masks=True) (an agent: "
                "DqnConfig(action_masks=True))"
            )
        return check_action_mask(mask, self._num_actions, "next_action_mask")

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

    def raise_push_error(
        self,
        code: int,
        action: int,
        reward: float,
        obs: np.ndarray,
        next_obs: np.ndarray,
        status: int,
    ) -> NoReturn:
        tail = "; nothing was stored"
        if code == BAD_ACTION:
            raise ValueError(f"action must be in [0, {self._num_actions}), got {action}{tail}")
        if code == BAD_REWARD:
            raise ValueError(
                f"reward must be finite, got {reward} (it is stored as a float32: "
                f"|reward| <= {F32_MAX:.7g}){tail}"
            )
        if code == BAD_OBS:
            raise ValueError(f"obs must be finite, got {obs.tolist()}{tail}")
        if code == BAD_NEXT_OBS:
            raise ValueError(f"next_obs must be finite, got {next_obs.tolist()}{tail}")
        raise ValueError(
            f"status must be an EpisodeStatus (0 continuing, 1 terminated, 2 truncated), "
            f"got {status}{tail}"
        )

    def sample(self, batch_size: int, rng: Rng, out: Batch | None = None) -> Batch:
        """Draw ``batch_size`` transitions uniformly, with replacement.

        With ``n_step > 1`` each is an n-step transition (module docstring)
        and ``discounts`` holds gamma^m * mask (else gamma * mask).

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
            next_obs (B, obs_size) float32, masks (B,) float32, discounts (B,)
            float64 (gamma * mask), float32 for n_step > 1 (gamma^m * mask);
            weights and indices of length 0;
            with ``action_masks`` next_action_masks (B, ceil(num_actions / 8))
            uint8 (packed bits; ``np.unpackbits(..., axis=1, count=num_actions)``
            gives the bool masks; the n-step next state's mask for n_step > 1).
        """
        return self._sample_checked(batch_size, rng, out, 1.0)

    def _sample_checked(self, batch_size: int, rng: Rng, out: Batch | None, beta: float) -> Batch:
        """:meth:`sample` with PER's ``beta`` (float in [0, 1]; unused when uniform)."""
        b = check_int("batch_size", batch_size)
        size = int(self._cursor[1])
        if b > size:
            raise ValueError(
                f"cannot sample {b} transitions from a buffer holding {size}; "
                f"push at least {b - size} more first (see ready_for())"
            )
        if not isinstance(rng, Rng):
            raise ValueError(f"rng must be an ember_np.Rng, got {type(rng).__name__}")
        if out is None:
            out = self._new_batch(b)
        else:
            self._check_out(out, b)
        sample = self._sample_entry
        if sample is None:  # same argument types every time: skip numba's dispatch
            sample = self._sample_entry = entry_point(
                sample_into, self._state, rng.state, out, beta
            )
        sample(self._state, rng.state, out, beta)
        return out

    def _check_out(self, out: Any, b: int) -> None:
        """Raise ValueError unless ``out`` is a Batch of exactly :meth:`empty_batch`'s arrays."""
        like = self._new_batch(b)
        if not isinstance(out, Batch):
            raise ValueError(f"out must be a Batch (see empty_batch()), got {type(out).__name__}")
        actions = out.actions
        if isinstance(actions, np.ndarray) and actions.ndim == 1 and actions.shape != (b,):
            raise ValueError(f"out holds batches of {actions.shape[0]}, but batch_size is {b}")
        for name, arr, ref in zip(Batch._fields, out, like):
            if not (
                type(arr) is np.ndarray
                and arr.dtype == ref.dtype
                and arr.shape == ref.shape
                and arr.flags.carray  # C-contiguous, aligned, writeable: the kernel writes in place
            ):
                raise ValueError(
                    f"out.{name} must be a C-contiguous, writeable, aligned {ref.dtype} array "
                    f"of shape {ref.shape} for batch_size {b} (see empty_batch()), got "
                    + (
                        f"{arr.dtype} of shape {arr.shape}"
                        if isinstance(arr, np.ndarray)
                        else type(arr).__name__
                    )
                )

    def empty_batch(self, batch_size: int) -> Batch:
        """Uninitialised arrays of the right shapes and dtypes for ``sample(out=...)``.

        Only the fields this buffer fills get arrays; the others keep Batch's
        shared length-0 defaults (so a plain buffer's batch costs five arrays).
        """
        return self._new_batch(check_int("batch_size", batch_size))

    def _new_batch(self, b: int) -> Batch:
        """:meth:`empty_batch` of a checked ``b`` (``sample`` checked it already)."""
        batch = Batch(
            np.empty((b, self._obs_size), dtype=np.float32),
            np.empty(b, dtype=np.int64),
            np.empty(b, dtype=np.float32),
            np.empty((b, self._obs_size), dtype=np.float32),
            np.empty(b, dtype=np.float32),
            # the TD target's precision: float64 for gamma * mask, float32 for
            # gamma^m * mask (the update computes r + discount * Q in it)
            np.empty(b, dtype=np.float32 if self._n_step > 1 else np.float64),
        )
        if not self._fills_optional:
            return batch
        if self._state.tree.shape[0]:  # prioritized
            batch = batch._replace(weights=np.empty(b, dtype=np.float32),
                                   indices=np.empty(b, dtype=np.int64))  # fmt: skip
        if self._action_masks:
            n_bytes = self.next_action_masks.shape[1]
            batch = batch._replace(next_action_masks=np.empty((b, n_bytes), dtype=np.uint8))
        return batch

    def clear(self) -> None:
        """Forget every stored transition (finals rows are reused from the first)."""
        self._cursor[:CURSOR_LEN] = 0  # the free-row stack is empty; its old rows are unread

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The stored transitions (oldest slots first, as laid out) and the cursor.

        Keys: ``obs``, ``action``, ``reward``, ``next_obs``, ``status`` (the
        first ``len(self)`` slots, with every ``next_obs`` written out, so the
        format does not depend on how the buffer shares them) and ``cursor`` =
        [position, size, capacity] (int64); with ``action_masks`` also
        ``next_action_masks`` (uint8 (len, ceil(num_actions / 8)), packed bits).
        """
        n = len(self)
        s = self.storage[:n]
        # Every slot's following obs (slot n is unused or, when full, slot 0),
        # then the rows that are not shared.
        after = self.storage["obs"]
        last = n % self._capacity
        next_obs = np.concatenate([after[1:n], after[last : last + min(n, 1)]])
        own = np.flatnonzero(s["next_ref"] >= 0)
        next_obs[own] = self.finals[s["next_ref"][own]]
        state = {
            "obs": s["obs"].copy(),
            "action": s["action"].astype(np.int32),
            "reward": s["reward"].copy(),
            "next_obs": next_obs,
            "status": s["status"].copy(),
            "cursor": np.array([self._cursor[POS], n, self._capacity], dtype=np.int64),
        }
        if self._action_masks:  # packed bits, as stored
            state["next_action_masks"] = self.next_action_masks[:n].copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict` exactly; a mismatch raises ValueError, changing nothing.

        Each slot whose ``next_obs`` has the bits of the following slot's
        ``obs`` shares it, as :meth:`push` would have decided; the newest
        slot keeps its own row until the next push. Sampling the restored
        buffer gives the same transitions, with the same random draws.
        """
        pos, n = self.check_state_dict(state)
        for key in ("obs", "action", "reward", "status"):
            self.storage[key][:n] = state[key]
        if self._action_masks:
            self.next_action_masks[:n] = state["next_action_masks"]
        cursor = np.zeros(CURSOR_LEN, dtype=np.int64)
        cursor[POS] = pos
        if n:
            obs = np.ascontiguousarray(state["obs"]).view(np.uint32)
            next_obs = np.ascontiguousarray(state["next_obs"])
            bits = next_obs.view(np.uint32)
            shared = np.empty(n, dtype=bool)  # next_obs[i] has the bits of obs[i + 1 (mod n)]
            shared[:-1] = (bits[:-1] == obs[1:]).all(axis=1)
            shared[-1] = (bits[-1] == obs[0]).all()
            shared[(pos - 1) % n] = False  # the newest slot: its successor is not stored
            own = np.flatnonzero(~shared)
            refs = np.full(n, -1, dtype=np.int32)
            refs[own] = np.arange(own.size, dtype=np.int32)
            self.storage["next_ref"][:n] = refs
            self.finals[: own.size] = next_obs[own]
            cursor[SIZE], cursor[ROWS], cursor[PENDING] = n, own.size, 1
        self._cursor[:CURSOR_LEN] = cursor

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
        self._check_mask_state(state, n)
        actions = np.asarray(state["action"])
        if n and (actions.min() < 0 or actions.max() >= self._num_actions):
            raise ValueError(f"replay buffer 'action' has values outside [0, {self._num_actions})")
        if n and np.asarray(state["status"]).max() > 2:
            raise ValueError("replay buffer 'status' has values outside {0, 1, 2}")
        return pos, n

    def _check_mask_state(self, state: dict[str, np.ndarray], n: int) -> None:
        """ValueError unless ``state`` has next-state masks exactly when this buffer keeps them."""
        if "next_action_masks" not in state:
            if self._action_masks:
                raise ValueError(
                    "replay buffer state has no 'next_action_masks' but this buffer keeps "
                    "action masks: load it into a buffer (agent) built with action_masks=False"
                )
            return
        if not self._action_masks:
            raise ValueError(
                "replay buffer state has 'next_action_masks' but this buffer was built without "
                "action masks: build it with action_masks=True (DqnConfig(action_masks=True))"
            )
        arr = np.asarray(state["next_action_masks"])
        shape = (n, self.next_action_masks.shape[1])
        if arr.shape != shape or arr.dtype != np.uint8:
            raise ValueError(
                f"replay buffer 'next_action_masks': expected uint8 of shape {shape}, "
                f"found {arr.dtype} of shape {arr.shape}"
            )
        if n:
            legal = np.unpackbits(arr, axis=1, count=self._num_actions)
            if not legal.any(axis=1).all():
                raise ValueError(
                    "replay buffer 'next_action_masks' has a mask with no legal action"
                )

    # -- copying and pickling --------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """What ``copy.deepcopy`` and ``pickle`` keep: the parts of the arrays in use.

        Slots past ``len(self)``, finals rows never written and the stale part
        of the free-row stack are left out, so a copy is as small as the data
        and its memory, like the original's, is committed as it fills.
        """
        c = self._cursor
        used = len(self)
        return {
            "capacity": self._capacity,
            "obs_size": self._obs_size,
            "num_actions": self._num_actions,
            "options": self._options(),  # n_step, gamma, action_masks (PER: alpha, eps)
            "next_action_masks": self.next_action_masks[:used],
            "storage": self.storage[:used],
            "finals": self.finals[: c[ROWS]],
            "cursor": c[: CURSOR_LEN + c[N_FREE]],
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["capacity"], state["obs_size"], state["num_actions"], **state.get("options", {})
        )
        for name in ("storage", "finals", "_cursor", "next_action_masks"):
            part = state.get(name.lstrip("_"), ())  # older pickles: no masks
            getattr(self, name)[: len(part)] = part

    def __repr__(self) -> str:
        n_step = f", n_step={self._n_step}, gamma={self._gamma}" if self._n_step > 1 else ""
        return (
            f"{type(self).__name__}(capacity={self._capacity}, obs_size={self._obs_size}, "
            f"num_actions={self._num_actions}{n_step}, "
            + ("action_masks=True, " if self._action_masks else "")
            + f"len={len(self)})"
        )

"""CircularBuffer: the uniform (optionally n-step, optionally masked) replay buffer.

The layout, the n-step returns and the masks are described in
``ember_np/dqn/replay/__init__.py``; the compiled push and sample are in ``replay_kernels.py``.
"""

from __future__ import annotations

import operator
from typing import Any, NoReturn

import numpy as np

from ember_np._arrays import as_f32
from ember_np._jit import entry_point
from ember_np._masks import ALL_LEGAL, check_action_mask, packed_mask_bytes
from ember_np._validate import check_int
from ember_np.dqn.replay.replay_io import (
    check_segments,
    check_transition_arrays,
    clear_cursor,
    load_segments,
    new_cursor,
    segments_of,
    state_arrays,
    stored_slots,
)
from ember_np.dqn.replay.replay_kernels import (
    BAD_ACTION,
    BAD_ENV,
    BAD_NEXT_OBS,
    BAD_OBS,
    BAD_REWARD,
    CURSOR_LEN,
    F32,
    F32_MAX,
    N_FREE,
    NO_F64,
    ROWS,
    ReplayState,
    push_transition,
    sample_into,
    transition_dtype,
)
from ember_np.rng import Rng
from ember_np.types import Batch, EpisodeStatus

_ND = np.ndarray  # one global lookup in push's hot path, not np + .ndarray
_F32, _F64, _I64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)


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
    num_envs : int >= 1, keyword
        Streams of transitions kept apart (the envs of a vectorised env):
        the slots are split into ``num_envs`` segments of consecutive slots,
        each a ring of its own that :meth:`push` ``(..., env=e)`` writes, so
        a transition only ever continues into (and an n-step return only
        ever walks through) the next transition of its own env. Sampling
        stays uniform over every stored transition. Default 1 (one stream:
        the buffer as it always was); at most ``capacity``.

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
        gamma: float = 0.99, action_masks: bool = False, num_envs: int = 1,
    ) -> None:  # fmt: skip
        self._capacity = check_int("capacity", capacity)
        self._num_envs = self._checked_num_envs(num_envs)
        self._obs_size = check_int("obs_size", obs_size)
        self._num_actions = check_int("num_actions", num_actions)
        self._n_step = check_int("n_step", n_step)
        self._gamma = _checked_gamma(gamma)
        # np.zeros maps pages lazily: memory is committed as the buffer fills.
        dtype = transition_dtype(self._obs_size, self._num_actions)
        self.storage = np.zeros(self._capacity, dtype=dtype)
        self.finals = np.zeros((self._capacity, self._obs_size), dtype=np.float32)
        # The counters POS ... PENDING, the stack of released finals rows, the streams.
        self._cursor = new_cursor(self._capacity, self._num_envs)
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
            int(self._num_envs),
        )  # fmt: skip
        self._fills_optional = self._action_masks or tree.shape[0] > 0

    def _options(self) -> dict[str, Any]:
        """The keyword arguments of ``__init__`` (for copies)."""
        return {"n_step": self._n_step, "gamma": self._gamma, "action_masks": self._action_masks,
                "num_envs": self._num_envs}  # fmt: skip

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

    def _checked_num_envs(self, num_envs: int) -> int:
        n = check_int("num_envs", num_envs)
        if n > self._capacity:
            raise ValueError(
                f"num_envs must be at most the capacity ({self._capacity}): each env's "
                f"transitions get a segment of the buffer, got num_envs={n}"
            )
        return n

    @property
    def num_envs(self) -> int:
        """Streams (envs) whose transitions are kept apart (see the class docstring)."""
        return self._num_envs

    def set_num_envs(self, num_envs: int) -> None:
        """Split the slots into ``num_envs`` streams (an empty buffer only).

        Raises ValueError when transitions are stored: they were pushed
        without streams to keep apart (:meth:`clear` first, or build the
        buffer with ``num_envs``).
        """
        n = self._checked_num_envs(num_envs)
        if n == self._num_envs:
            return
        if len(self):
            raise ValueError(
                f"the buffer holds {len(self)} transitions of {self._num_envs} env(s); it can "
                f"only be split into {n} streams while empty (clear() it, or start from a "
                f"checkpoint made with {n} envs)"
            )
        self._num_envs = n
        self._cursor = new_cursor(self._capacity, n)
        s = self._state
        self._set_kernel_state(s.tree, s.alpha, s.eps)
        self._forget_entry_points()

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
        """Slot the next push writes to (of env 0's stream, with several)."""
        return self._segments()[0].pos

    def _segments(self) -> list[Any]:
        """Each stream's :class:`~ember_np.dqn.replay.replay_io.Segment`."""
        return segments_of(self._cursor, self._capacity, self._num_envs)

    def stored_slots(self) -> np.ndarray:
        """The slots holding transitions, int64, in :meth:`state_dict` order (each
        stream's from its first slot; with one stream ``0 .. len(self) - 1``)."""
        return stored_slots(self._segments())

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

        Slots count from 0 in storage order; ``slot`` must hold a transition
        (with one stream: be below ``len(self)``; see :meth:`stored_slots`).
        """
        segments = self._segments()
        seg = next((g for g in segments if g.lo <= slot < g.lo + g.size), None)
        if seg is None:
            size = len(self)
            if self._num_envs == 1:
                raise ValueError(f"slot must be in [0, {size}), got {slot}")
            raise ValueError(f"slot {slot} holds no transition (see stored_slots())")
        rec = self.storage[slot]
        row = int(rec["next_ref"])
        if row < 0:  # as in sample_into: the following slot of its stream holds it
            following = slot + 1 if slot + 1 < seg.hi else seg.lo
            next_obs = self.storage[following]["obs"].copy()
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
        env: int = 0,
    ) -> None:
        """Store one transition, overwriting the oldest (of its stream) when full.

        Parameters
        ----------
        obs, next_obs : array_like of float32, shape (obs_size,)
        action : int in [0, num_actions)
        reward : float, finite as a float32 (what is stored)
        status : EpisodeStatus or int in {0, 1, 2}
        next_action_mask : array_like of bool, shape (num_actions,), optional
            The legal actions in ``next_obs`` (a buffer built with
            ``action_masks=True``); default: all legal.
        env : int in [0, num_envs)
            The stream (env) the transition belongs to; default 0.

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
                push_transition, self._state, 0, o, a, r, no, s, legal
            )
        e = env if type(env) is int else self._checked_env(env)
        code = push(self._state, e, o, a, r, no, s, legal)
        if code:
            self.raise_push_error(code, a, r, o, no, s, e)

    def _checked_env(self, env: Any) -> int:
        try:
            return operator.index(env)
        except TypeError:
            raise ValueError(
                f"env must be an integer in [0, {self._num_envs}), got {env!r}"
            ) from None

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
        env: int = 0,
    ) -> NoReturn:
        """Raise the ValueError of push error ``code`` (a kernel's return value)."""
        tail = "; nothing was stored"
        if code == BAD_ENV:
            raise ValueError(f"env must be in [0, {self._num_envs}), got {env}{tail}")
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
            float64 (gamma * mask, or gamma^m * mask for n_step > 1);
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
        batch = Batch(  # dtype objects, not type names: numpy resolves them ~50 ns sooner
            np.empty((b, self._obs_size), _F32),
            np.empty(b, _I64),
            np.empty(b, _F32),
            np.empty((b, self._obs_size), _F32),
            np.empty(b, _F32),
            np.empty(b, _F64),  # the update computes r + discount * Q in float64
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
        clear_cursor(self._cursor, self._capacity, self._num_envs)

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """The stored transitions (oldest slots first, as laid out) and the cursor.

        Keys: ``obs``, ``action``, ``reward``, ``next_obs``, ``status`` (the
        first ``len(self)`` slots, with every ``next_obs`` written out, so the
        format does not depend on how the buffer shares them) and ``cursor`` =
        [position, size, capacity] (int64); with ``action_masks`` also
        ``next_action_masks`` (uint8 (len, ceil(num_actions / 8)), packed bits).
        With ``num_envs`` > 1 the transitions are each stream's stored slots
        in turn (:meth:`stored_slots`) and ``segments`` (int64 (num_envs, 2))
        holds each stream's [position, size]; ``cursor`` is [0, size, capacity].
        """
        segments = self._segments()
        state = state_arrays(self.storage, self.finals, segments)
        n = len(self)
        pos = segments[0].pos if self._num_envs == 1 else 0
        state["cursor"] = np.array([pos, n, self._capacity], dtype=np.int64)
        if self._num_envs > 1:
            state["segments"] = np.array([[g.pos, g.size] for g in segments], dtype=np.int64)
        if self._action_masks:  # packed bits, as stored
            state["next_action_masks"] = self.next_action_masks[stored_slots(segments)]
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict` exactly; a mismatch raises ValueError, changing nothing.

        Each slot whose ``next_obs`` has the bits of the following slot's
        ``obs`` (in its stream) shares it, as :meth:`push` would have
        decided; each stream's newest slot keeps its own row until the next
        push. Sampling the restored buffer gives the same transitions, with
        the same random draws. The buffer takes the state's number of
        streams (``segments``; none: one).
        """
        self.check_state_dict(state)
        segments = check_segments(state, self._capacity)
        if len(segments) != self._num_envs:
            self._num_envs = len(segments)
            self._cursor = new_cursor(self._capacity, self._num_envs)
            s = self._state
            self._set_kernel_state(s.tree, s.alpha, s.eps)
            self._forget_entry_points()
        slots = load_segments(self.storage, self.finals, self._cursor, state, segments)
        if self._action_masks:
            self.next_action_masks[slots] = state["next_action_masks"]

    def check_state_dict(self, state: dict[str, np.ndarray]) -> tuple[int, int]:
        """Raise ValueError unless :meth:`load_state_dict` would accept ``state``.

        Returns the (position, size) it would restore (position: of the first
        stream). Reads, never writes.
        """
        for key in ("obs", "action", "reward", "next_obs", "status", "cursor"):
            if key not in state:
                raise ValueError(f"replay buffer state is missing {key!r}")
        segments = check_segments(state, self._capacity)
        pos, n = segments[0].pos, sum(g.size for g in segments)
        check_transition_arrays(state, n, self._obs_size, self._num_actions)
        self._check_mask_state(state, n)
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
        used = len(self) if self._num_envs == 1 else self._capacity  # streams: every segment
        stack = CURSOR_LEN + c[N_FREE] if self._num_envs == 1 else len(c)
        return {
            "capacity": self._capacity,
            "obs_size": self._obs_size,
            "num_actions": self._num_actions,
            "options": self._options(),  # n_step, gamma, action_masks (PER: alpha, eps)
            "next_action_masks": self.next_action_masks[:used],
            "storage": self.storage[:used],
            "finals": self.finals[: c[ROWS]],
            "cursor": c[:stack],
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
            + (f"num_envs={self._num_envs}, " if self._num_envs > 1 else "")
            + f"len={len(self)})"
        )

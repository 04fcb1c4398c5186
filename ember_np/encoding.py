"""Observation encoders and action mappers: how env values become network I/O.

An :class:`ObservationEncoder` turns an environment observation into the
float32 vector the Q-network reads; a :class:`DiscreteActionMapper` turns the
network's action index into the environment's action and back. The defaults,
:class:`VecEncoder` and :class:`IndexActionMapper`, cover gymnasium's ``Box``
observation spaces (any shape, flattened) and ``Discrete`` action spaces
(including a nonzero ``start``). Custom ones plug into ``DqnAgent``.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ember_np._arrays import as_f32

__all__ = [
    "DiscreteActionMapper",
    "IndexActionMapper",
    "ObservationEncoder",
    "OneHotEncoder",
    "VecEncoder",
    "describe",
    "encode_batch_for_network",
    "encode_for_network",
    "encoder_for_space",
    "encoder_from_description",
    "indices_to_actions",
    "mapper_from_description",
    "nonfinite_observation",
    "nonfinite_row",
    "single_spaces",
]

_F32 = np.dtype(np.float32)


@runtime_checkable
class ObservationEncoder(Protocol):
    """Encodes environment observations as float32 vectors of length ``obs_size``."""

    @property
    def obs_size(self) -> int: ...

    def encode(self, obs: Any) -> np.ndarray:
        """One observation -> ndarray of float32, shape (obs_size,), C-contiguous."""
        ...

    def encode_batch(self, obs_batch: Any) -> np.ndarray:
        """A batch of observations -> ndarray of float32, shape (batch, obs_size)."""
        ...


@runtime_checkable
class DiscreteActionMapper(Protocol):
    """Maps environment actions to indices in ``[0, num_actions)`` and back."""

    @property
    def num_actions(self) -> int: ...

    def action_to_index(self, action: Any) -> int: ...

    def index_to_action(self, index: int) -> Any: ...


def _space_name(space: Any) -> str:
    return f"{type(space).__name__} {space!r}" if space is not None else "None"


class VecEncoder:
    """Flattens observations of a fixed shape into float32 vectors.

    Parameters
    ----------
    shape : int or tuple of int
        The observation shape (CartPole: ``4`` or ``(4,)``; an image ``(84, 84)``).
    """

    def __init__(self, shape: int | tuple[int, ...]) -> None:
        shp = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        try:
            shp = tuple(operator.index(s) for s in shp)
        except TypeError:
            raise ValueError(f"shape must be integers, got {shape!r}") from None
        if not shp or any(s < 1 for s in shp):
            raise ValueError(f"shape must be one or more positive integers, got {shape!r}")
        self.shape = shp
        self._obs_size = math.prod(shp)
        self._flat = (self._obs_size,)

    @classmethod
    def for_space(cls, space: Any) -> VecEncoder:
        """The encoder for a gymnasium ``Box`` space; any other space -> ValueError."""
        from gymnasium import spaces

        if not isinstance(space, spaces.Box):
            raise ValueError(
                "DQN and PPO need a Box observation space (a fixed-shape array of numbers), "
                f"got {_space_name(space)}; wrap the env (e.g. gymnasium.wrappers."
                "FlattenObservation) or pass a custom ObservationEncoder"
            )
        return cls(space.shape)

    @property
    def obs_size(self) -> int:
        return self._obs_size

    def encode(self, obs: Any) -> np.ndarray:
        arr = obs
        try:  # as_f32 with its no-copy test inlined (DqnPolicy.act's hot path)
            if not (type(arr) is np.ndarray and arr.dtype is _F32 and arr.flags.carray):
                arr = as_f32(arr, "obs")
        except ValueError:
            raise ValueError(
                f"expected an observation of shape {self.shape} (real numbers), got {obs!r}"
            ) from None
        if arr.shape == self._flat:
            return arr
        if arr.shape != self.shape:
            raise ValueError(f"expected an observation of shape {self.shape}, got {arr.shape}")
        return arr.reshape(self._flat)

    def encode_batch(self, obs_batch: Any) -> np.ndarray:
        try:
            arr = as_f32(obs_batch, "obs_batch")
        except ValueError:
            raise ValueError(
                f"expected a batch of observations of shape (batch, *{self.shape}), "
                f"got {obs_batch!r}"
            ) from None
        if arr.shape[1:] == self._flat or arr.shape[1:] == self.shape:
            return arr.reshape(arr.shape[0], self._obs_size)
        raise ValueError(
            f"expected a batch of observations of shape (batch, *{self.shape}), got {arr.shape}"
        )

    def describe(self) -> dict[str, Any]:
        """A JSON-safe description, stored in checkpoints."""
        return {"type": "VecEncoder", "shape": list(self.shape)}

    def __repr__(self) -> str:
        return f"VecEncoder(shape={self.shape})"


class OneHotEncoder:
    """Encodes the states of a ``Discrete(n, start)`` space as one-hot float32 vectors.

    State ``s`` becomes the vector of length ``n`` with a 1 at ``s - start``
    (Taxi-v3's 500 states: 500 inputs). The network then learns one row of
    its first layer per state, a table lookup that it can generalise from.

    Parameters
    ----------
    n : int >= 1
        Number of states.
    start : int
        The first state (gymnasium's ``Discrete(n, start=...)``). Default 0.
    """

    def __init__(self, n: int, start: int = 0) -> None:
        if isinstance(n, bool) or isinstance(start, bool):
            raise ValueError(f"n and start must be integers, got {n!r} and {start!r}")
        try:
            self._n = operator.index(n)
            self.start = operator.index(start)
        except TypeError:
            raise ValueError(f"n and start must be integers, got {n!r} and {start!r}") from None
        if self._n < 1:
            raise ValueError(f"n must be >= 1 (the number of states), got {n!r}")

    @classmethod
    def for_space(cls, space: Any) -> OneHotEncoder:
        """The encoder for a gymnasium ``Discrete`` observation space."""
        from gymnasium import spaces

        if not isinstance(space, spaces.Discrete):
            raise ValueError(f"OneHotEncoder needs a Discrete space, got {_space_name(space)}")
        return cls(int(space.n), int(space.start))

    @property
    def obs_size(self) -> int:
        return self._n

    def _index(self, obs: Any, name: str) -> int:
        try:
            if isinstance(obs, (bool, np.bool_)):
                raise TypeError
            i = operator.index(obs if not isinstance(obs, np.ndarray) or obs.ndim else obs[()])
        except TypeError:
            raise ValueError(
                f"expected {name} as an integer state in [{self.start}, {self.start + self._n}), "
                f"got {obs!r}"
            ) from None
        if not self.start <= i < self.start + self._n:
            raise ValueError(f"expected {name} in [{self.start}, {self.start + self._n}), got {i}")
        return i - self.start

    def encode(self, obs: Any) -> np.ndarray:
        x = np.zeros(self._n, dtype=np.float32)
        x[self._index(obs, "obs")] = 1.0
        return x

    def encode_batch(self, obs_batch: Any) -> np.ndarray:
        states = np.asarray(obs_batch)
        if states.ndim != 1 or states.dtype.kind not in "iu":
            raise ValueError(
                f"expected a batch of integer states of shape (batch,), got {obs_batch!r}"
            )
        out = np.zeros((states.shape[0], self._n), dtype=np.float32)
        for row, s in enumerate(states.tolist()):
            out[row, self._index(s, f"obs_batch[{row}]")] = 1.0
        return out

    def describe(self) -> dict[str, Any]:
        """A JSON-safe description, stored in checkpoints."""
        return {"type": "OneHotEncoder", "n": self._n, "start": self.start}

    def __repr__(self) -> str:
        return f"OneHotEncoder(n={self._n}, start={self.start})"


def single_spaces(env: Any) -> tuple[Any, Any]:
    """(observation space, action space) of one env, or of each copy of a gymnasium
    ``VectorEnv`` (its ``single_*`` spaces); None for a space the object lacks (the
    encoder and the action mapper then say what they need)."""
    return (
        getattr(env, "single_observation_space", getattr(env, "observation_space", None)),
        getattr(env, "single_action_space", getattr(env, "action_space", None)),
    )


def encoder_for_space(space: Any) -> VecEncoder | OneHotEncoder:
    """The default encoder of a gymnasium observation space.

    ``Box``: :class:`VecEncoder` (flattened); ``Discrete``: :class:`OneHotEncoder`.
    Any other space: ValueError saying what to do.
    """
    from gymnasium import spaces

    if isinstance(space, spaces.Discrete):
        return OneHotEncoder.for_space(space)
    if not isinstance(space, spaces.Box):
        raise ValueError(
            "DQN and PPO need a Box observation space (a fixed-shape array of numbers) or a "
            f"Discrete one (one-hot encoded), got {_space_name(space)}; wrap the env (e.g. "
            "gymnasium.wrappers.FlattenObservation) or pass a custom ObservationEncoder"
        )
    return VecEncoder.for_space(space)


class IndexActionMapper:
    """Actions ``start, start + 1, ..., start + num_actions - 1`` <-> indices 0..n-1.

    Parameters
    ----------
    num_actions : int >= 1
    start : int
        The first action (gymnasium's ``Discrete(n, start=...)``). Default 0.
    """

    def __init__(self, num_actions: int, start: int = 0) -> None:
        try:
            n = operator.index(num_actions)
            s = operator.index(start)
        except TypeError:
            raise ValueError(
                f"num_actions and start must be integers, got {num_actions!r} and {start!r}"
            ) from None
        if n < 1:
            raise ValueError(f"num_actions must be >= 1, got {n}")
        self._n = n
        self.start = s

    @classmethod
    def for_space(cls, space: Any) -> IndexActionMapper:
        """The mapper for a gymnasium ``Discrete`` space; any other space -> ValueError."""
        from gymnasium import spaces

        if not isinstance(space, spaces.Discrete):
            raise ValueError(
                "DQN and PPO need a Discrete action space (a finite set of actions), "
                f"got {_space_name(space)}; for continuous actions use an algorithm such "
                "as SAC, or pass a custom DiscreteActionMapper"
            )
        return cls(int(space.n), int(space.start))

    @property
    def num_actions(self) -> int:
        return self._n

    def action_to_index(self, action: Any) -> int:
        try:
            i = operator.index(action) - self.start
        except TypeError:
            raise ValueError(f"an action must be an integer, got {action!r}") from None
        if not 0 <= i < self._n:
            raise ValueError(
                f"action must be in [{self.start}, {self.start + self._n}), got {action!r}"
            )
        return i

    def index_to_action(self, index: int) -> int:
        return self.start + index

    def describe(self) -> dict[str, Any]:
        """A JSON-safe description, stored in checkpoints."""
        return {"type": "IndexActionMapper", "num_actions": self._n, "start": self.start}

    def __repr__(self) -> str:
        return f"IndexActionMapper(num_actions={self._n}, start={self.start})"


def encode_for_network(encoder: ObservationEncoder, obs: Any, shape: tuple[int]) -> np.ndarray:
    """``encoder.encode(obs)`` as the C-contiguous float32 vector of ``shape`` kernels take."""
    x = encoder.encode(obs)
    if type(encoder) is not VecEncoder:  # VecEncoder's output is already in that layout
        if not (type(x) is np.ndarray and x.dtype is _F32 and x.flags.carray):  # as_f32's test
            x = as_f32(x, "the encoder's output")
    if x.shape != shape:
        raise ValueError(f"the encoder returned shape {x.shape}; the network expects {shape}")
    return x


def encode_batch_for_network(
    encoder: ObservationEncoder, obs_batch: Any, obs_size: int
) -> np.ndarray:
    """``encoder.encode_batch(obs_batch)`` as the C-contiguous float32 (N, ``obs_size``)
    array kernels take; ValueError for another shape."""
    x = as_f32(encoder.encode_batch(obs_batch), "the encoder's output")
    if x.ndim != 2 or x.shape[1] != obs_size:
        raise ValueError(
            f"expected a batch of observations encoded to shape (N, {obs_size}), got {x.shape}"
        )
    return x


def indices_to_actions(mapper: DiscreteActionMapper, indices: np.ndarray) -> np.ndarray:
    """The env actions of action indices (int (N,)), as an array (``mapper``'s; an
    :class:`IndexActionMapper` by one addition, not a call per index)."""
    if isinstance(mapper, IndexActionMapper):
        return indices + mapper.start
    return np.array([mapper.index_to_action(int(i)) for i in indices])


def nonfinite_observation(x: np.ndarray, name: str = "obs") -> ValueError:
    """The error for an encoded observation holding NaN or inf (every entry point raises it)."""
    return ValueError(f"observation must be finite (no NaN or inf), got {name}={x.tolist()}")


def nonfinite_row(x: np.ndarray, row: int, name: str) -> ValueError:
    """The error for a batch whose row ``row`` holds NaN or inf (names the parameter and row)."""
    return ValueError(
        f"observation must be finite (no NaN or inf), got {name}[{row}]={x[row].tolist()} "
        f"(row {row} of {x.shape[0]}); nothing was computed"
    )


def describe(obj: Any) -> dict[str, Any]:
    """``obj.describe()`` when it has one, else its class name (rebuilt by the user)."""
    if hasattr(obj, "describe"):
        return dict(obj.describe())
    cls = type(obj)
    return {"type": f"{cls.__module__}.{cls.__qualname__}"}


def encoder_from_description(desc: Any) -> VecEncoder | OneHotEncoder:
    """Rebuild a built-in encoder from :func:`describe`'s output (ValueError if it can't)."""
    kind = desc.get("type") if isinstance(desc, dict) else None
    if kind == "OneHotEncoder":
        n, start = desc.get("n"), desc.get("start", 0)
        if type(n) is not int or type(start) is not int:
            raise ValueError(f"invalid OneHotEncoder description {desc!r}")
        return OneHotEncoder(n, start)
    if kind == "VecEncoder":
        shape = desc.get("shape")
        if not isinstance(shape, list) or not all(isinstance(s, int) for s in shape):
            raise ValueError(f"invalid VecEncoder description {desc!r}")
        return VecEncoder(tuple(shape))
    raise ValueError(f"cannot rebuild observation encoder {kind!r}: pass encoder=... explicitly")


def mapper_from_description(desc: Any) -> IndexActionMapper:
    """Rebuild a built-in action mapper from :func:`describe`'s output (ValueError if it can't)."""
    kind = desc.get("type") if isinstance(desc, dict) else None
    if kind == "IndexActionMapper":
        n, start = desc.get("num_actions"), desc.get("start", 0)
        if not isinstance(n, int) or not isinstance(start, int):
            raise ValueError(f"invalid IndexActionMapper description {desc!r}")
        return IndexActionMapper(n, start)
    raise ValueError(f"cannot rebuild action mapper {kind!r}: pass action_mapper=... explicitly")

"""Core value types shared by the agent, the buffer and the trainer."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = ["EpisodeStatus", "Experience", "Policy", "ReplayBuffer"]


class EpisodeStatus(IntEnum):
    """How a transition left its episode.

    The integer values are what the replay buffer stores (uint8).

    CONTINUING
        The episode goes on.
    TERMINATED
        A terminal state of the MDP (the pole fell): the value of the next
        state is 0, so the TD target does not bootstrap.
    TRUNCATED
        Cut by a time limit or other outside reason: the next state still has
        a value, so the TD target bootstraps from it.
    """

    CONTINUING = 0
    TERMINATED = 1
    TRUNCATED = 2

    @classmethod
    def from_flags(cls, terminated: bool, truncated: bool) -> EpisodeStatus:
        """Status from gymnasium's ``(terminated, truncated)`` pair; terminated wins."""
        if terminated:
            return cls.TERMINATED
        if truncated:
            return cls.TRUNCATED
        return cls.CONTINUING

    @property
    def is_done(self) -> bool:
        """True when the episode ended (terminated or truncated)."""
        return self is not EpisodeStatus.CONTINUING

    @property
    def bootstrap_mask(self) -> float:
        """0.0 for a terminated transition, else 1.0 (truncation still bootstraps)."""
        return 0.0 if self is EpisodeStatus.TERMINATED else 1.0


class Experience(NamedTuple):
    """One environment transition, as the environment produced it.

    observation, next_observation
        Raw observations (encoded by the agent's ObservationEncoder).
    action
        The environment's action (mapped by the agent's DiscreteActionMapper).
    reward : float
    status : EpisodeStatus
        How the transition left the episode.
    """

    observation: Any
    action: Any
    reward: float
    next_observation: Any
    status: EpisodeStatus

    @property
    def bootstrap_mask(self) -> float:
        """0.0 when the episode terminated here, else 1.0."""
        return 0.0 if self.status == EpisodeStatus.TERMINATED else 1.0

    @property
    def is_done(self) -> bool:
        """True when this transition ended the episode (terminated or truncated)."""
        return self.status != EpisodeStatus.CONTINUING


@runtime_checkable
class Policy(Protocol):
    """Anything that maps an observation to an action."""

    def act(self, obs: Any) -> Any:
        """The action to take in ``obs``."""
        ...


@runtime_checkable
class ReplayBuffer(Protocol):
    """What a DqnAgent needs of a replay buffer (CircularBuffer is the default).

    Observations arrive encoded (float32, shape (obs_size,)) and actions as
    indices in [0, num_actions). ``sample`` returns a
    :class:`~ember_np.dqn.replay.Batch` (obs, actions, rewards, next_obs,
    masks) drawn with the given :class:`~ember_np.rng.Rng`, so runs stay
    reproducible. To be saved with ``DqnAgent.save(..., include_buffer=True)``
    a buffer also provides ``state_dict() -> dict[str, ndarray]`` and
    ``load_state_dict(state)``.
    """

    def __len__(self) -> int: ...

    @property
    def capacity(self) -> int: ...

    def ready_for(self, batch_size: int) -> bool: ...

    def push(
        self, obs: np.ndarray, action: int, reward: float, next_obs: np.ndarray, status: int
    ) -> None: ...

    def sample(self, batch_size: int, rng: Any) -> Any: ...

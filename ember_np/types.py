"""Core value types shared by the agent, the buffer and the trainer."""

from __future__ import annotations

import os
from enum import IntEnum
from pathlib import Path
from typing import Any, NamedTuple, Protocol, runtime_checkable

import numpy as np

__all__ = ["Batch", "EpisodeStatus", "Experience", "LearningAgent", "Policy", "ReplayBuffer"]


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


# The default of Batch's optional per-sample fields: length 0, "not given"
# (writeable and C-contiguous like a sampled array, so kernels compile once).
_NO_F32 = np.empty(0, dtype=np.float32)
_NO_F64 = np.empty(0, dtype=np.float64)
_NO_I64 = np.empty(0, dtype=np.int64)
#: ``Batch.next_action_masks`` of a batch without action masks (never written).
NO_ACTION_MASKS = np.zeros((0, 0), dtype=np.uint8)


class Batch(NamedTuple):
    """A mini-batch of transitions (what a replay buffer samples; one numba value in kernels).

    obs, next_obs : ndarray of float32, shape (batch, obs_size)
    actions : ndarray of int64, shape (batch,)
    rewards : ndarray of float32, shape (batch,)
        For an n-step buffer, the discounted sum of up to n rewards.
    masks : ndarray of float32, shape (batch,)
        Bootstrap masks: 0 for terminated transitions, 1 otherwise.
    discounts : ndarray of float64, shape (batch,) (or (0,) unfilled)
        The bootstrap discount of each transition: ``gamma * mask``, or
        ``gamma**m * mask`` for an m-step return. Replay buffers always fill it
        (they own gamma); the update reads the discount from here only, and
        computes the TD target in float64.
    weights : ndarray of float32, shape (batch,) or (0,)
        Importance weights of prioritized replay; length 0 (the default): all 1.
    indices : ndarray of int64, shape (batch,) or (0,)
        The sampled slots (prioritized replay, for ``update_priorities``);
        length 0 (the default) for uniform buffers.
    next_action_masks : ndarray of uint8, shape (batch, ceil(n_actions / 8)), or (0, 0)
        The next states' legal actions as packed bits (``np.packbits`` layout:
        action j is bit ``7 - j % 8`` of byte ``j // 8``), from a buffer built
        for action masks; no rows (the default): every action is legal.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    masks: np.ndarray
    discounts: np.ndarray = _NO_F64
    weights: np.ndarray = _NO_F32
    indices: np.ndarray = _NO_I64
    next_action_masks: np.ndarray = NO_ACTION_MASKS


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


@runtime_checkable
class LearningAgent(Protocol):
    """What :class:`~ember_np.DqnTrainer` needs of an agent (ember-rl 0.3's ``LearningAgent``).

    :class:`~ember_np.DqnAgent` implements it; the trainer uses nothing else
    (its compiled loops over native envs also need an agent's kernels: see
    :class:`~ember_np.training.drivers.FusableAgent`, which DqnAgent implements too).
    The trainer's loop works on encoded observations and action indices, so
    that each observation is encoded once: ``x = encode(obs)``, ``index =
    act_encoded(x)``, ``env.step(index_to_action(index))``, ``observe_encoded``.

    With an env that gives gymnasium's ``info["action_mask"]`` the trainer
    also passes it, by keyword and only then: ``act(obs, action_mask=...)``,
    ``act_encoded(x, action_mask=...)`` and ``observe_encoded(...,
    next_action_mask=...)`` (so agents without masks need not take them).
    An agent whose optional ``action_masks`` attribute is False (a DqnAgent
    with ``config.action_masks=False``) is never passed masks: the env's are
    ignored, in training and in evaluation.
    """

    # -- acting
    def act(self, obs: Any) -> Any:
        """The greedy env action for a raw observation (evaluation)."""
        ...

    def act_epsilon_greedy(self, obs: Any, rng: Any = None) -> Any:
        """The exploring env action for a raw observation."""
        ...

    def encode(self, obs: Any) -> np.ndarray:
        """A raw observation in the form the other ``*_encoded`` methods take."""
        ...

    def act_encoded(self, x: np.ndarray) -> int:
        """The exploring action index for an encoded observation."""
        ...

    def index_to_action(self, index: int) -> Any:
        """The env action of an action index."""
        ...

    # -- learning
    def observe(self, experience: Experience) -> bool:
        """Learn from one raw transition; returns whether it trained."""
        ...

    def observe_encoded(
        self, x: np.ndarray, index: int, reward: Any, nx: np.ndarray, status: int,
        act_next: bool = False,
    ) -> int:  # fmt: skip
        """Learn from one encoded transition; with ``act_next`` returns the exploring
        action index for ``nx`` (else 0)."""
        ...

    @property
    def total_steps(self) -> int:
        """Env steps observed so far."""
        ...

    @property
    def n_updates(self) -> int:
        """Gradient steps taken so far."""
        ...

    @property
    def last_step_trained(self) -> bool:
        """Whether the most recent observed step trained."""
        ...

    @property
    def last_loss(self) -> float:
        """The most recent training loss; NaN before the first (or for an agent
        without one): a training episode's log row then carries no ``loss``."""
        ...

    def epsilon_at(self, step: int) -> float:
        """The exploration rate after ``step`` env steps."""
        ...

    # -- checkpoints
    def save(self, path: str | os.PathLike[str], include_buffer: bool = False) -> Path:
        """Write a checkpoint; returns its path."""
        ...

    def load(self, path: str | os.PathLike[str], include_buffer: bool = True) -> Any:
        """Restore a checkpoint written by :meth:`save`."""
        ...


#: Every member of :class:`LearningAgent` (for error messages).
LEARNING_AGENT_MEMBERS = (
    "act", "act_epsilon_greedy", "encode", "act_encoded", "index_to_action", "observe",
    "observe_encoded", "total_steps", "n_updates", "last_step_trained", "last_loss",
    "epsilon_at", "save", "load",
)  # fmt: skip

"""Core value types shared by the agent, the buffer and the trainer."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["EpisodeStatus"]


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

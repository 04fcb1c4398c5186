"""A second algorithm that lives only in the tests: a uniformly random agent.

It proves the algorithm seam: registered here once, as
``--algo random_algorithm:RANDOM``, it trains, runs many seeds, resumes,
evaluates and reports through the command line with no change to anything
above :mod:`ember_np.algorithms`. It learns nothing; its one setting
(``repeat``) is the probability of taking the previous action again, so that
``--set`` has a field to reach.

Its checkpoints are tagged ``tests.random_agent`` and hold the counters and
both random streams, so a resumed run equals the run straight through.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember_np.algorithms import Algorithm
from ember_np.checkpoint import CheckpointError, Reader, json_array, save_arrays, string_array
from ember_np.encoding import (
    IndexActionMapper,
    describe,
    encoder_for_space,
    encoder_from_description,
    mapper_from_description,
)

FORMAT = "tests.random_agent"


@dataclass(frozen=True)
class RandomConfig:
    """The random agent's one setting."""

    repeat: float = 0.0
    """Probability of repeating the previous action, in [0, 1)."""

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.repeat) < 1.0:
            raise ValueError(f"repeat must be in [0, 1), got {self.repeat!r}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RandomConfig:
        return cls(**data)

    def replace(self, **fields: Any) -> RandomConfig:
        unknown = set(fields) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ValueError(f"unknown RandomConfig fields {sorted(unknown)}; known: ['repeat']")
        return dataclasses.replace(self, **fields)


class RandomAgent:
    """Uniform random actions over a discrete action space; never trains."""

    action_masks = False

    def __init__(
        self, encoder: Any, action_mapper: IndexActionMapper, config: RandomConfig, seed: int = 0
    ) -> None:
        self.encoder = encoder
        self.action_mapper = action_mapper
        self.num_actions = int(action_mapper.num_actions)
        self.config = config
        self.seed = int(seed)
        self._rng = np.random.default_rng([self.seed, 1])
        self._eval_rng = np.random.default_rng([self.seed, 2])
        self._previous = 0
        self._total_steps = 0
        self.last_loss = float("nan")

    # -- acting
    def _draw(self, rng: np.random.Generator) -> int:
        if self.config.repeat and rng.random() < self.config.repeat:
            return self._previous
        self._previous = int(rng.integers(self.num_actions))
        return self._previous

    def act(self, obs: Any) -> int:
        return int(self._eval_rng.integers(self.num_actions))

    def act_epsilon_greedy(self, obs: Any, rng: Any = None) -> int:
        return self._draw(self._rng)

    def encode(self, obs: Any) -> np.ndarray:
        return np.asarray(self.encoder.encode(obs), dtype=np.float32)

    def act_encoded(self, x: np.ndarray) -> int:
        return self._draw(self._rng)

    def index_to_action(self, index: int) -> Any:
        return self.action_mapper.index_to_action(int(index))

    # -- learning (none)
    def observe(self, experience: Any) -> bool:
        self._total_steps += 1
        return False

    def observe_encoded(
        self, x: np.ndarray, index: int, reward: Any, nx: np.ndarray, status: int,
        act_next: bool = False,
    ) -> int:  # fmt: skip
        self._total_steps += 1
        return self._draw(self._rng) if act_next else 0

    @property
    def total_steps(self) -> int:
        return self._total_steps

    @property
    def n_updates(self) -> int:
        return 0

    @property
    def last_step_trained(self) -> bool:
        return False

    def epsilon_at(self, step: int) -> float:
        return 1.0

    # -- checkpoints
    def save(self, path: str | os.PathLike[str], include_buffer: bool = False) -> Path:
        state = {"train": self._rng.bit_generator.state, "eval": self._eval_rng.bit_generator.state}
        save_arrays(path, {
            "format": string_array(FORMAT),
            "format_version": np.int64(1),
            "counters": np.array([self._total_steps, 0], dtype=np.int64),
            "meta": json_array({"seed": self.seed, "previous": self._previous,
                                "config": self.config.to_dict(),
                                "encoder": describe(self.encoder),
                                "mapper": describe(self.action_mapper)}),
            "rng": json_array(state),
        })  # fmt: skip
        return Path(path)

    def load(self, path: str | os.PathLike[str], include_buffer: bool = True) -> RandomAgent:
        reader = Reader(path)
        reader.check_format(FORMAT, 1)
        meta, state = reader.json("meta"), reader.json("rng")
        self._total_steps = int(reader.array("counters", "int64", (2,))[0])
        self._previous = int(meta["previous"])
        self._rng.bit_generator.state = state["train"]
        self._eval_rng.bit_generator.state = state["eval"]
        return self

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str]) -> RandomAgent:
        reader = Reader(path)
        reader.check_format(FORMAT, 1)
        meta = reader.json("meta")
        agent = cls(encoder_from_description(meta["encoder"]),
                    mapper_from_description(meta["mapper"]),
                    RandomConfig.from_dict(meta["config"]), meta["seed"])  # fmt: skip
        return agent.load(path)

    # -- no compiled loop
    def can_fuse(self, env: Any) -> bool:
        return False

    def run_fused(self, env: Any, n_steps: int, loop: Any) -> int:
        raise NotImplementedError("the random agent has no compiled loop")


class RandomPolicy:
    """A random agent's checkpoint as a policy (``eval``): random actions, seeded."""

    def __init__(self, agent: RandomAgent) -> None:
        self.agent = agent
        self.encoder = agent.encoder
        self.action_mapper = agent.action_mapper

    def act(self, obs: Any) -> int:
        return self.agent.act(obs)


def _make_agent(env: Any, config: Any, seed: int) -> RandomAgent:
    obs_space = getattr(env, "single_observation_space", env.observation_space)
    action_space = getattr(env, "single_action_space", env.action_space)
    return RandomAgent(encoder_for_space(obs_space), IndexActionMapper.for_space(action_space),
                       config, seed)  # fmt: skip


def _load_policy(path: Path) -> RandomPolicy:
    try:
        return RandomPolicy(RandomAgent.from_checkpoint(path))
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{path}: not a random agent checkpoint ({exc})") from None


RANDOM = Algorithm(
    name="random",
    config_class=RandomConfig,
    checkpoint_format=FORMAT,
    make_agent=_make_agent,
    load_agent=RandomAgent.from_checkpoint,
    load_policy=_load_policy,
    describe_agent=lambda agent: f"{agent.total_steps:,} random steps",
)

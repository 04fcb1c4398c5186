"""How :class:`~ember_np.DqnTrainer` advances: one protocol, four drivers.

A :class:`StepDriver` steps an environment and an agent together, up to a
bound on the agent's transitions, and returns the episodes that ended, as
columns (:class:`EndedColumns`). It keeps the episodes in progress (their
observation, chosen action, steps and reward so far) and nothing else: the
trainer numbers the ended episodes, folds them into its statistics, logs them,
and alone decides where a run checkpoints (:func:`checkpoints_passed`, the
bounds it gives :meth:`StepDriver.run`).

The four drivers:

* :class:`SingleEnvDriver`: one gymnasium env, stepped through Python (the
  agent's compiled step once per env step);
* :class:`~ember_np.training.vector.VectorDriver`: N envs of a gymnasium
  ``VectorEnv`` or a ``NativeVecEnv``, stepped through Python (one compiled
  agent call per vector step);
* :class:`FusedSingleDriver`: one native env (``ember_np.envs``) in the compiled
  loop ``training/_fused.py: fused_steps``;
* :class:`FusedVectorDriver`: a ``NativeVecEnv`` in the compiled loop
  ``training/_fused.py: fused_vec_steps``, or the agent's own (PPO's
  ``ppo/fused.py: fused_ppo_steps``, through its ``fused_vec_run``).

A fused driver shares its episodes in progress with the Python driver of the
same env (its ``python``), which also takes the single steps of
:meth:`DqnTrainer.steps <ember_np.DqnTrainer.steps>`: the two interleave and
give the same numbers. The compiled loops run on the agent's kernels and
kernel state (:class:`FusableAgent`); the agent never calls the loops.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, cast, runtime_checkable

import numpy as np

from ember_np._masks import warn_if_masks_ignored
from ember_np.training._fused import (
    VEC_N_RECORDS,
    FusedLoop,
    FusedVecLoop,
    fused_steps,
    fused_vec_steps,
)
from ember_np.types import EpisodeStatus, LearningAgent

__all__ = [
    "FUSED_CHUNK",
    "DriverError",
    "EndedColumns",
    "FusableAgent",
    "FusedSingleDriver",
    "FusedVectorDriver",
    "SingleEnvDriver",
    "StepDriver",
    "action_mask_of",
    "checkpoints_passed",
    "next_checkpoint",
]

#: Most transitions per :meth:`StepDriver.run` the trainer asks for (bounds the
#: compiled loops' record arrays; the numbers a run writes do not depend on it).
FUSED_CHUNK = 65_536
#: EpisodeStatus by value (a step's status code).
STATUSES = tuple(EpisodeStatus)


def action_mask_of(info: Any) -> Any:
    """``info["action_mask"]`` when the env gives one (gymnasium's convention), else None."""
    return info.get("action_mask") if isinstance(info, dict) else None


# -- the checkpoint schedule ---------------------------------------------------------


def next_checkpoint(total_steps: int, freq: int) -> int:
    """The first multiple of ``freq`` after ``total_steps``: where the next checkpoint is due."""
    return (total_steps // freq + 1) * freq


def checkpoints_passed(before: int, after: int, freq: int) -> range:
    """The checkpoint steps (multiples of ``freq``) in ``(before, after]``.

    A step (one env step, or a vector step of N transitions that cannot be
    cut) from ``before`` to ``after`` transitions reached or passed these; the
    trainer writes one numbered checkpoint after such a step, named by
    ``after``, when the range is not empty.
    """
    return range(next_checkpoint(before, freq), after + 1, freq)


# -- what a driver returns -------------------------------------------------------------


class EndedColumns(NamedTuple):
    """Episodes that ended, in the order they ended, as columns of plain Python
    numbers (one entry per episode; no NumPy scalar, no object per episode).

    rewards : total rewards; lengths : steps; statuses : EpisodeStatus values;
    total_steps : the agent's transitions counted at each one's last transition;
    envs : the index of the env that played it (0 for a single env);
    losses : the latest training loss at its end (NaN before the first update).
    """

    rewards: list[float]
    lengths: list[int]
    statuses: list[int]
    total_steps: list[int]
    envs: list[int]
    losses: list[float]

    @classmethod
    def empty(cls) -> EndedColumns:
        """No episode yet (the columns are appended to)."""
        return cls([], [], [], [], [], [])

    def append(self, reward: float, length: int, status: int, total_steps: int, env: int,
               loss: float) -> None:  # fmt: skip
        """Add one episode at the end."""
        self.rewards.append(reward)
        self.lengths.append(length)
        self.statuses.append(status)
        self.total_steps.append(total_steps)
        self.envs.append(env)
        self.losses.append(loss)

    def extend(self, other: EndedColumns) -> None:
        """Add ``other``'s episodes at the end."""
        for mine, theirs in zip(self, other, strict=True):
            cast(list[Any], mine).extend(cast(list[Any], theirs))

    def rows(self) -> zip[tuple[float, int, int, int, int, float]]:
        """The episodes as tuples of the fields, in order."""
        return zip(*self, strict=True)


class DriverError(Exception):
    """A step failed after some episodes ended: the trainer records ``ended``,
    then raises ``error`` (what the env or the agent raised)."""

    def __init__(self, error: BaseException, ended: EndedColumns) -> None:
        super().__init__(str(error))
        self.error = error
        self.ended = ended


@runtime_checkable
class StepDriver(Protocol):
    """What the trainer steps an env and an agent with (the four drivers of this module)."""

    @property
    def num_envs(self) -> int:
        """Envs stepped together (1 for a single env)."""
        ...

    def run(self, until: int) -> EndedColumns:
        """Step until the agent has counted ``until`` transitions (with N envs: to
        the first vector step that reaches or passes it); the episodes that ended.

        Raises DriverError (holding the episodes that ended before) when a step fails.
        """
        ...

    def step(self, episode: int) -> tuple[list[tuple[Any, ...]], EndedColumns]:
        """One step (a vector step with N envs) through Python: the fields of
        :class:`~ember_np.training.trainer.StepMetrics` of each of its transitions,
        in env order (``episode``: the index of the first episode in progress),
        and the episodes that ended."""
        ...


@runtime_checkable
class FusableAgent(Protocol):
    """What the compiled loops need of an agent besides :class:`~ember_np.types.LearningAgent`
    (:class:`~ember_np.DqnAgent` implements it).

    An agent with a compiled vector loop of its own (``PPOAgent``) also has
    ``fused_vec_run(until, env_state, loop) -> int``, which :class:`FusedVectorDriver`
    calls instead of ``fused_vec_steps(until, env_state, loop, agent.kernel_state)``.
    """

    def can_fuse(self, env: Any) -> bool:
        """Whether the compiled loops can drive ``env`` (a native env or ``NativeVecEnv``)."""
        ...

    @property
    def kernel_state(self) -> Any:
        """The agent's live kernel state (an ``AgentState``)."""
        ...

    def raise_vec_error(self, code: int, step: Any) -> None:
        """Raise the ValueError of the vector loop's negative return ``code``."""
        ...


# -- one env through Python ----------------------------------------------------------


class SingleEnvDriver:
    """One gymnasium env stepped through Python.

    Each observation is encoded once, and the agent's compiled step stores the
    transition, trains when due and already picks the next action (what
    ``act_epsilon_greedy`` plus ``observe(Experience(...))`` do, in one call).

    Parameters
    ----------
    env : gymnasium.Env
    agent : LearningAgent
    seed : int
        The first ``env.reset(seed=seed)``; later resets continue the env's stream.
    masks : bool
        Pass the env's ``info["action_mask"]`` to the agent (else they are ignored,
        with one warning when the env gives them).
    """

    num_envs = 1

    def __init__(self, env: Any, agent: LearningAgent, seed: int, masks: bool) -> None:
        self.env = env
        self.agent = agent
        self.seed = seed
        self.masks = masks
        self.watch_masks = not masks  # until the warning that they are ignored
        self.first_reset_done = False
        self.x: Any = None  # encoded current observation (None: no episode started)
        self.index = 0  # action index already chosen for it
        self.episode_step = 0
        self.episode_reward = 0.0

    def reset(self) -> None:
        """Start an episode: reset the env, encode the observation, pick the first action."""
        if not self.first_reset_done:
            self.first_reset_done = True
            obs, info = self.env.reset(seed=self.seed)
        else:
            obs, info = self.env.reset()
        self.episode_step = 0
        self.episode_reward = 0.0
        self.x = self.agent.encode(obs)
        if self.watch_masks:
            self.watch_masks = not warn_if_masks_ignored(info)
        mask = action_mask_of(info) if self.masks else None
        if mask is None:
            self.index = self.agent.act_encoded(self.x)
        else:
            # cast: masks go by keyword, only to an agent that takes them (LearningAgent's doc)
            self.index = cast(Any, self.agent).act_encoded(self.x, action_mask=mask)

    def run(self, until: int) -> EndedColumns:
        """Env steps until the agent has counted ``until`` transitions (:class:`StepDriver`)."""
        ended = EndedColumns.empty()
        advance = self.advance
        try:
            for _ in range(until - self.agent.total_steps):
                advance(ended)
        except Exception as exc:
            raise DriverError(exc, ended) from exc
        return ended

    def step(self, episode: int) -> tuple[list[tuple[Any, ...]], EndedColumns]:
        """One env step and its StepMetrics fields (:class:`StepDriver`)."""
        ended = EndedColumns.empty()
        return [self.advance(ended, episode)], ended  # type: ignore[list-item]

    def advance(self, ended: EndedColumns, episode: int = -1) -> tuple[Any, ...] | None:
        """One env step; an episode it ends goes to ``ended``. With ``episode`` >= 0
        (the index of the episode in progress) returns the step's StepMetrics fields."""
        if self.x is None:
            self.reset()
        agent = self.agent
        x = self.x
        index = self.index
        next_obs, reward, terminated, truncated, info = self.env.step(agent.index_to_action(index))
        code = 1 if terminated else (2 if truncated else 0)  # EpisodeStatus values
        nx = agent.encode(next_obs)
        if self.watch_masks:
            self.watch_masks = not warn_if_masks_ignored(info)
        mask = action_mask_of(info) if self.masks else None
        if mask is None:
            next_index = agent.observe_encoded(x, index, reward, nx, code, code == 0)
        else:  # the next state's legal actions: stored for the target, obeyed by the next action
            next_index = cast(Any, agent).observe_encoded(x, index, reward, nx, code, code == 0,
                                                          next_action_mask=mask)  # fmt: skip
        reward = float(reward)
        self.episode_reward += reward
        self.episode_step += 1
        result = None
        if episode >= 0:
            total = agent.total_steps
            result = (
                total, episode, self.episode_step, reward, self.episode_reward,
                # the action was picked before this step was counted
                agent.epsilon_at(total - 1), agent.last_step_trained, code != 0, STATUSES[code], 0,
            )  # fmt: skip
        if code:
            ended.append(self.episode_reward, self.episode_step, code, agent.total_steps, 0,
                         agent.last_loss)  # fmt: skip
            self.reset()
        else:
            self.x = nx
            self.index = next_index
        return result


# -- the compiled loops ---------------------------------------------------------------


class FusedSingleDriver:
    """One native env and the agent in the compiled loop :func:`fused_steps`.

    Parameters
    ----------
    python : SingleEnvDriver
        The Python driver of the same env, whose episode in progress this
        driver continues and updates (and which takes :meth:`step`).
    native : NativeEnv
        The native env under ``python.env`` (its compiled state is stepped).
    agent : FusableAgent
        An agent whose ``can_fuse(native)`` is True.
    """

    num_envs = 1

    def __init__(self, python: SingleEnvDriver, native: Any, agent: Any) -> None:
        self.python = python
        self.native = native
        self.agent = agent

    def step(self, episode: int) -> tuple[list[tuple[Any, ...]], EndedColumns]:
        """One env step through Python (:meth:`SingleEnvDriver.step`)."""
        return self.python.step(episode)

    def run(self, until: int) -> EndedColumns:
        """Env steps in compiled chunks until ``until`` transitions (:class:`StepDriver`)."""
        py = self.python
        if py.x is None:
            py.reset()
        agent = self.agent
        ended = EndedColumns.empty()
        while (total := agent.total_steps) < until:
            chunk = min(until - total, FUSED_CHUNK)
            x = np.array(py.x, dtype=np.float32)
            loop = FusedLoop(
                x, np.empty_like(x), np.array([py.index, py.episode_step, 0, 0], dtype=np.int64),
                np.array([py.episode_reward]), np.empty((chunk, 2)),
                np.empty((chunk, 4), dtype=np.int64),
            )  # fmt: skip
            code = int(fused_steps(chunk, self.native.kernel_state, loop, agent.kernel_state))
            ints = loop.ints
            py.x = x
            py.index = int(ints[0])
            py.episode_step = int(ints[1])
            py.episode_reward = float(loop.episode_reward[0])
            k = int(ints[3])  # records written (their episode index, ints[2]'s, is the trainer's)
            floats, rec = loop.rec_floats[:k].T, loop.rec_ints[:k].T
            ended.extend(EndedColumns(floats[0].tolist(), rec[0].tolist(), rec[1].tolist(),
                                      rec[2].tolist(), [0] * k, floats[1].tolist()))  # fmt: skip
            if code < 0:
                error = ValueError(
                    f"the environment produced a transition the replay buffer rejected "
                    f"(error {-code}: a non-finite observation or reward)"
                )
                raise DriverError(error, ended)
        return ended


class FusedVectorDriver:
    """A ``NativeVecEnv`` and the agent in the compiled loop :func:`fused_vec_steps`, or
    in the agent's own (its ``fused_vec_run``: PPO's, ``ember_np/ppo/fused.py``).

    Parameters
    ----------
    python : VectorDriver
        The Python driver of the same envs, whose episodes in progress and step
        arrays this driver continues and updates (and which takes :meth:`step`).
    agent : FusableAgent
        An agent whose ``can_fuse(env)`` is True, split into ``env.num_envs`` streams.
    """

    def __init__(self, python: Any, agent: Any) -> None:  # python: a vector.VectorDriver
        self.python = python
        self.agent = agent

    @property
    def num_envs(self) -> int:
        """The N copies of the env."""
        return self.python.num_envs

    def step(self, episode: int) -> tuple[list[tuple[Any, ...]], EndedColumns]:
        """One vector step through Python (:meth:`VectorDriver.step`)."""
        return self.python.step(episode)

    def run(self, until: int) -> EndedColumns:
        """Vector steps in compiled chunks until the agent has counted ``until``
        transitions (:class:`StepDriver`); the episodes come out as columns, one
        ``tolist()`` per column."""
        vec = self.python
        if vec.step_arrays is None:
            vec.start()
        agent, env, n = self.agent, vec.env, vec.num_envs
        ended = EndedColumns.empty()
        while (total := agent.total_steps) < until:
            stop = min(until, total + FUSED_CHUNK)
            rows = -(-(stop - total) // n) * n  # whole vector steps, N records each
            loop = FusedVecLoop(
                vec.step_arrays, np.array([0, 0], dtype=np.int64), vec.episode_steps,
                vec.episode_rewards, np.empty((rows, 2)), np.empty((rows, 5), dtype=np.int64),
            )  # fmt: skip
            code = self._call(stop, loop)
            env.obs[:] = vec.step_arrays.obs  # the env object shows where its copies are
            k = int(loop.ints[VEC_N_RECORDS])
            floats, rec = loop.rec_floats[:k].T, loop.rec_ints[:k].T
            chunk = EndedColumns(floats[0].tolist(), rec[0].tolist(), rec[1].tolist(),
                                 rec[2].tolist(), rec[4].tolist(), floats[1].tolist())  # fmt: skip
            if not ended.rewards:
                ended = chunk  # (the usual single chunk: no copy)
            else:
                ended.extend(chunk)
            if code < 0:
                try:
                    agent.raise_vec_error(code, vec.step_arrays)
                except ValueError as exc:
                    raise DriverError(exc, ended) from exc
        return ended

    def _call(self, until: int, loop: FusedVecLoop) -> int:
        """The compiled loop on the envs, until the agent has counted ``until`` transitions:
        ``fused_vec_steps``, or the agent's own (its ``fused_vec_run``)."""
        agent, env = self.agent, self.python.env
        own_loop = getattr(agent, "fused_vec_run", None)
        if own_loop is None:
            return int(fused_vec_steps(until, env.kernel_state, loop, agent.kernel_state))
        return int(own_loop(until, env.kernel_state, loop))

    def compile_loop(self) -> None:
        """Call the compiled loop for zero steps, on step arrays of its own: compiles its
        kernels (or loads them from numba's cache) and steps nothing. For a worker
        process that compiles a run's kernels (``training/precompile.py``): the agent
        reads its counters back from the loop, as after any call."""
        n = self.num_envs
        step = self.agent.new_vec_step(n, masks=False)  # the arrays start() makes on a native env
        loop = FusedVecLoop(
            step, np.zeros(2, dtype=np.int64), np.zeros(n, dtype=np.int64), np.zeros(n),
            np.empty((0, 2)), np.empty((0, 5), dtype=np.int64),
        )  # fmt: skip
        self._call(self.agent.total_steps, loop)

"""DqnTrainer: drives an environment and a DqnAgent (ember-rl's ``training/runner.rs``).

Two ways to use it, as in the original:

* iterator style: ``for m in trainer.steps(): ...`` yields a :class:`StepMetrics`
  after every env step (the iterator is endless; stop with ``itertools.islice``
  or ``break``);
* imperative style: ``trainer.train(n_steps)`` then ``trainer.eval(n_episodes)``.

Both do the same bookkeeping: episode statistics, ``train_episodes.jsonl``,
numbered checkpoints every ``checkpoint_freq`` steps with rotation,
``latest.npz`` and ``metadata.json``.

The trainer advances through one of four drivers (``training/drivers.py``:
one env or N envs, through Python or in a compiled loop), which return the
episodes that ended; the trainer alone numbers, records and logs them and
decides where checkpoints fall (:func:`~ember_np.training.drivers.checkpoints_passed`).

A vectorised env (a gymnasium ``VectorEnv`` or a ``NativeVecEnv``) of N
copies is stepped N at a time (``training/vector.py``): ``total_steps``,
``train(n)``, ``checkpoint_freq`` and every schedule of the agent count env
transitions (SB3's counting: N per vector step), each training episode's log
row carries the index of the env that played it (``"env"``, with N > 1),
and evaluation stays greedy on one single env. A vector step cannot be cut:
``train(n)`` ends at the first vector step that reaches n transitions, and a
numbered checkpoint is written after each vector step that reaches or passes
a multiple of ``checkpoint_freq`` (named by the step count there). With N = 1
the logs and checkpoints are those of the single env, byte for byte.

Two defects of the original are fixed here: the first ``reset`` uses the
trainer's seed (the original hard-coded 0), and evaluation runs on a separate
environment, so the training episode in progress continues exactly where it
stopped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ember_np._validate import check_int
from ember_np.checkpoint import load_arrays, save_arrays
from ember_np.stats import EpisodeRecord, EvalReport, StatsTracker
from ember_np.training.defaults import DEFAULT_CHECKPOINT_FREQ, DEFAULT_KEEP
from ember_np.training.drivers import (
    FUSED_CHUNK,
    STATUSES,
    DriverError,
    EndedColumns,
    FusableAgent,
    FusedSingleDriver,
    FusedVectorDriver,
    SingleEnvDriver,
    StepDriver,
    action_mask_of,
    checkpoints_passed,
    next_checkpoint,
)
from ember_np.training.evaluation import make_eval_env
from ember_np.training.run import TrainingRun
from ember_np.types import LEARNING_AGENT_MEMBERS as _AGENT_MEMBERS
from ember_np.types import EpisodeStatus, LearningAgent

__all__ = [
    "DEFAULT_CHECKPOINT_FREQ",
    "DEFAULT_KEEP_CHECKPOINTS",
    "DqnTrainer",
    "StepMetrics",
    "greedy_episode",
    "make_eval_env",
    "takes_masks",
]

#: Numbered checkpoints kept on disk, unless told otherwise: :class:`RunSpec`'s ``keep``.
DEFAULT_KEEP_CHECKPOINTS = DEFAULT_KEEP

#: The native vector envs' state beside ``latest.npz`` (:meth:`DqnTrainer.restore_env_state`).
ENV_STATE_FILE = "latest_envs.npz"


def takes_masks(agent: Any) -> bool:
    """Whether the trainer passes an env's action masks to ``agent``.

    An agent says so with a boolean ``action_masks`` attribute
    (:attr:`DqnAgent.action_masks <ember_np.DqnAgent.action_masks>`, which is
    ``config.action_masks``); an agent without one takes them.
    """
    return bool(getattr(agent, "action_masks", True))


def greedy_episode(
    env: Any, act: Callable[..., Any], seed: int | None = None, masks: bool = True
) -> EpisodeRecord:
    """Play one episode of ``env`` with ``act`` (an agent's or a policy's greedy ``act``).

    ``env.reset(seed=seed)`` starts it (None: continue the env's stream).
    When the env puts an ``action_mask`` in ``info`` and ``masks`` is True
    (default), ``act(obs, action_mask=mask)`` picks among the legal actions;
    with ``masks`` False the env's masks are ignored (an agent trained
    without them). The one evaluation episode of the trainer and of
    ``ember-np eval``.
    """
    obs, info = env.reset(seed=seed)
    total_reward = 0.0
    length = 0
    while True:
        mask = action_mask_of(info) if masks else None
        action = act(obs) if mask is None else act(obs, action_mask=mask)
        obs, reward, terminated, truncated, info = env.step(action)
        total_reward += float(reward)
        length += 1
        if terminated or truncated:
            return EpisodeRecord(
                total_reward, length, EpisodeStatus.from_flags(terminated, truncated)
            )


class StepMetrics(NamedTuple):
    """What happened in one environment step (yielded by :meth:`DqnTrainer.steps`)."""

    total_steps: int
    """Total environment steps taken so far (this one included)."""
    episode: int
    """Index of the episode this step belongs to (from 0)."""
    episode_step: int
    """Steps taken in this episode so far (this one included, from 1)."""
    reward: float
    """Reward received this step."""
    episode_reward: float
    """Cumulative reward of the episode so far."""
    epsilon: float
    """Exploration rate used to pick this step's action."""
    did_update: bool
    """Whether gradient steps were taken after this step."""
    episode_done: bool
    """Whether this step ended the episode."""
    episode_status: EpisodeStatus
    """How the step left the episode (CONTINUING unless episode_done)."""
    env: int = 0
    """Which env of a vector env took the step (0 for a single env)."""


class DqnTrainer:
    """Runs DQN training and evaluation of ``agent`` on ``env``.

    Parameters
    ----------
    env : gymnasium.Env, gymnasium.vector.VectorEnv or NativeVecEnv
        The training environment (``reset(seed=...)``, ``step(action)``), or
        N of them stepped together: a gymnasium ``VectorEnv`` (``SyncVectorEnv``,
        ``AsyncVectorEnv``, ``gymnasium.make_vec``; autoreset mode NEXT_STEP
        or SAME_STEP) or an ``ember_np.envs.NativeVecEnv`` (compiled loop).
        With N envs the agent's replay buffer is split into N streams
        (:meth:`DqnAgent.set_num_envs <ember_np.DqnAgent.set_num_envs>`).
    agent : LearningAgent
        A :class:`~ember_np.DqnAgent`, or any agent implementing the protocol;
        the trainer uses nothing else of it.
    seed : int
        Seeds the first ``env.reset`` (a vector env's copy i: seed + i) and the
        eval env's first reset, with seed + 1.
    run : TrainingRun, optional
        Where checkpoints, logs and metadata go. A resumed run continues its
        episode numbering and best eval reward.
    checkpoint_freq : int
        Env steps between numbered checkpoints (with a run). Default 10,000.
    keep_checkpoints : int
        Numbered checkpoints kept on disk; older ones are pruned. Default 5.
    stats : StatsTracker, optional
        Training-episode statistics; default episode_reward and episode_length means.
    eval_env : gymnasium.Env, optional
        Environment for :meth:`eval`; by default :func:`make_eval_env` ``(env)``:
        a fresh one made from ``env.spec``, whose ``NormalizeObservation``
        wrappers use the training env's running statistics, frozen.
    save_buffer : bool
        Include the replay buffer in ``latest.npz`` so a resumed run continues
        exactly. Default True.
    fused : bool, optional
        Run ``train`` in compiled chunks (env step, agent step, episode
        bookkeeping) when the env is a native one (``ember_np.envs``, possibly
        behind gymnasium's OrderEnforcing / PassiveEnvChecker) and the agent
        uses the default buffer, encoder and mapper, or when it is a
        ``NativeVecEnv`` (N envs in one compiled loop). None (default) fuses
        whenever possible; True raises ValueError if it is not possible; False
        never fuses. Results are identical either way.
    """

    def __init__(
        self,
        env: Any,
        agent: LearningAgent,
        seed: int = 0,
        run: TrainingRun | None = None,
        checkpoint_freq: int = DEFAULT_CHECKPOINT_FREQ,
        keep_checkpoints: int = DEFAULT_KEEP_CHECKPOINTS,
        stats: StatsTracker | None = None,
        eval_env: Any = None,
        save_buffer: bool = True,
        fused: bool | None = None,
    ) -> None:
        # hasattr, not isinstance(agent, LearningAgent): from Python 3.12 a runtime
        # protocol check reads attributes statically, so it would accept a property
        # that raises AttributeError and refuse members an agent gives by __getattr__
        missing = [name for name in _AGENT_MEMBERS if not hasattr(agent, name)]
        if missing:
            raise ValueError(
                f"agent must be a DqnAgent or implement LearningAgent, got "
                f"{type(agent).__name__} (missing {missing})"
            )
        from ember_np.training.vector import VectorDriver, is_vector_env, vector_agent_error

        vector = is_vector_env(env)
        if vector and vector_agent_error(agent):
            raise ValueError(vector_agent_error(agent))
        for method in ("reset", "step"):
            if not callable(getattr(env, method, None)):
                raise ValueError(
                    f"env must follow gymnasium's Env API (reset and step), got {env!r}"
                )
        self._env = env
        self._agent = agent
        self._masks = takes_masks(agent)  # False: the env's info["action_mask"] is ignored
        self.seed = check_int("seed", seed, minimum=0, maximum=None)  # any size: SeedSequence
        self.run = run
        self.checkpoint_freq = check_int("checkpoint_freq", checkpoint_freq)
        self.keep_checkpoints = check_int("keep_checkpoints", keep_checkpoints, minimum=0)
        self.stats = StatsTracker() if stats is None else stats
        self.save_buffer = bool(save_buffer)
        self._eval_env = eval_env
        self._eval_env_seeded = False
        self._episode = 0
        self._checkpointed_at = -1  # total_steps of the last numbered checkpoint
        self._vec = VectorDriver(env, agent, self.seed, self._masks) if vector else None
        # the Python driver: steps() always, train() unless fused (the fused ones share its state)
        single = None if vector else SingleEnvDriver(env, agent, self.seed, self._masks)
        self._python: StepDriver = self._vec or single  # type: ignore[assignment]
        if run is not None:
            self._attach_run(run)
        native = self._fusable_env()
        if fused and native is None:
            raise ValueError(
                "fused=True needs a native env (ember_np.envs, e.g. gym.make('ember_np/"
                "CartPole-v1'), or a NativeVecEnv) and an agent whose can_fuse(env) is True "
                "(a DqnAgent with the default CircularBuffer, VecEncoder and "
                "IndexActionMapper(start=0); a PPOAgent without action masks on a "
                "NativeVecEnv)"
            )
        self.fused = native is not None and fused is not False
        self._driver: StepDriver = self._python
        self._fold = self.fused and self._vec is not None  # (_record's fold)
        if self.fused and self._vec is not None:
            self._driver = FusedVectorDriver(self._vec, agent)
        elif self.fused and single is not None:
            self._driver = FusedSingleDriver(single, native, agent)
        self._best_eval_reward = run.best_eval_reward if run is not None else -math.inf

    def _attach_run(self, run: TrainingRun) -> None:
        """Line the run's logs up with the agent: a fresh agent needs a fresh run,
        a restored one continues the episode numbering from its checkpoint."""
        run.lock()  # one process trains in a run at a time (RunLockedError otherwise)
        steps = self._agent.total_steps
        if steps == 0:
            logged = run.read_train_episodes()
            if logged:
                raise ValueError(
                    f"{run.dir} already holds {len(logged)} training episodes but the agent has "
                    "taken no steps: resume with DqnAgent.from_checkpoint(run."
                    "latest_checkpoint_path()), or use TrainingRun.create for a new run"
                )
            return
        self._episode = run.rewind_logs(steps)
        run.update_metadata(steps, self._episode)

    def _fusable_env(self) -> Any:
        """The native env the agent's compiled loop can drive, or None."""
        from ember_np.envs.native import NativeVecEnv, unwrap_native

        native: Any  # a NativeVecEnv, a NativeEnv or None
        if self._vec is not None:
            native = self._env if isinstance(self._env, NativeVecEnv) else None
        else:
            native = unwrap_native(self._env)
        agent = self._agent
        if native is None or not isinstance(agent, FusableAgent) or not agent.can_fuse(native):
            return None
        return native

    # -- accessors ----------------------------------------------------------------
    @property
    def agent(self) -> LearningAgent:
        return self._agent

    @property
    def env(self) -> Any:
        return self._env

    def into_agent(self) -> LearningAgent:
        """The trained agent (e.g. ``trainer.into_agent().into_policy()``)."""
        return self._agent

    @property
    def episode(self) -> int:
        """Index of the current episode (= completed training episodes)."""
        return self._episode

    @property
    def best_eval_reward(self) -> float:
        return self._best_eval_reward

    @property
    def eval_env(self) -> Any:
        """The environment :meth:`eval` plays on.

        The ``eval_env`` given to the constructor, else a separate env made at
        first use from the training env's gymnasium spec by
        :func:`make_eval_env` (it follows a ``NormalizeObservation`` wrapper's
        training statistics, frozen).

        Raises
        ------
        ValueError
            If no ``eval_env`` was given and none can be made from the training
            env (it has no spec, or see :func:`make_eval_env`).
        """
        return self._get_eval_env()

    # -- training -----------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        """Envs stepped together (1 for a single env)."""
        return 1 if self._vec is None else self._vec.num_envs

    @property
    def compile_loop(self) -> Callable[[], None] | None:
        """Calls the compiled vector loop for zero steps: compiles its kernels (or loads
        them from numba's cache) and trains nothing; None when the run has no compiled
        vector loop. What a worker process that compiles a run's kernels runs
        (:mod:`ember_np.training.precompile`)."""
        driver = self._driver
        return driver.compile_loop if isinstance(driver, FusedVectorDriver) else None

    def steps(self) -> Iterator[StepMetrics]:
        """An endless iterator: one env step, with all bookkeeping, per ``next()``.

        With a vector env each vector step yields one StepMetrics per
        transition, in env order (``env`` says which); stopping between two
        of them stops after that vector step.
        """
        step, agent, make = self._python.step, self._agent, StepMetrics._make
        while True:
            before = agent.total_steps
            metrics, ended = step(self._episode)
            self._record(ended)
            self._checkpoint_if_passed(before)
            for fields in metrics:
                yield make(fields)

    def train(self, n_steps: int, *, save_latest: bool = True) -> None:
        """Run ``n_steps`` more env steps of training (with checkpoints and logs).

        With a run, numbered checkpoints are written every ``checkpoint_freq``
        steps, and ``latest.npz`` and the metadata are also brought up to date
        when training stops between two of them, unless ``save_latest`` is
        False (a caller that trains on at once and saves at its own end: the
        numbered checkpoints still write both). The driver runs (compiled
        chunks when :attr:`fused`) end at each checkpoint step, so every path
        writes the same logs and checkpoints at the same steps.
        """
        n = check_int("n_steps", n_steps, minimum=0)
        agent, run, freq = self._agent, self.run, self.checkpoint_freq
        end = agent.total_steps + n
        while (before := agent.total_steps) < end:
            until = min(end, before + FUSED_CHUNK)
            if run is not None:
                until = min(until, next_checkpoint(before, freq))
            try:
                ended = self._driver.run(until)
            except DriverError as exc:  # what ended before the failed step is still recorded
                self._record(exc.ended, self._fold)
                raise exc.error from None
            self._record(ended, self._fold)
            self._checkpoint_if_passed(before)
        if save_latest and run is not None and n and agent.total_steps != self._checkpointed_at:
            # End between two numbered checkpoints: keep latest.npz current, so
            # nothing trained here is lost when the process stops.
            self._save_latest()
            run.update_metadata(agent.total_steps, self._episode)

    def _episode_extras(self, total_steps: int, loss: float) -> dict[str, float]:
        """What a finished episode's log row carries besides reward and length.

        ``epsilon`` is the exploration rate after the episode's last step;
        ``loss`` the most recent training loss, left out before the first
        update (JSON has no NaN). The dashboard charts both. An agent with its own
        ``episode_extras(total_steps, loss)`` says what its rows carry instead
        (PPO: its update's losses and statistics, SB3's ``train/`` names).
        """
        own = getattr(self._agent, "episode_extras", None)
        if own is not None:
            return dict(own(total_steps, loss))
        extras = {"epsilon": self._agent.epsilon_at(total_steps)}
        if not math.isnan(loss):
            extras["loss"] = loss
        return extras

    def _record(self, ended: EndedColumns, fold: bool = False) -> None:
        """Number the episodes a driver ended, fold them into the stats, log them.

        ``fold`` (the compiled vector loop's chunks, thousands of episodes each):
        without a run and with statistics of rewards and lengths only, fold them
        as columns (no record per episode, the same statistics).
        """
        if fold and self.run is None and not self.stats.needs_records:
            self.stats.update_columns(ended.rewards, ended.lengths)
            self._episode += len(ended.rewards)
            return
        many, run = self.num_envs > 1, self.run
        update, extras = self.stats.update, self._episode_extras
        entries = []
        for reward, length, status, steps, env, loss in ended.rows():
            record = EpisodeRecord(reward, length, STATUSES[status], extras(steps, loss))
            update(record)
            if run is not None:
                entries.append((record, self._episode, steps, env if many else None))
            self._episode += 1
        if run is not None:
            run.log_train_episodes(entries)  # a driver run's episodes: one write, one fsync

    def _checkpoint_if_passed(self, before: int) -> None:
        """A numbered checkpoint when the last step reached or passed a checkpoint step."""
        if self.run is not None and checkpoints_passed(
            before, self._agent.total_steps, self.checkpoint_freq
        ):
            self.checkpoint()

    def checkpoint(self) -> None:
        """Save ``step_<N>.npz`` and ``latest.npz``, prune, update metadata (needs a run).

        Errors (a full disk, a removed directory) propagate as ``OSError``:
        training stops rather than silently losing checkpoints.
        """
        if self.run is None:
            raise ValueError("checkpoint() needs a TrainingRun: DqnTrainer(..., run=...)")
        total = self._checkpointed_at = self._agent.total_steps
        self._agent.save(self.run.checkpoint_path(total))
        self._save_latest()
        self.run.prune_checkpoints(self.keep_checkpoints)
        self.run.update_metadata(total, self._episode)

    def _save_latest(self) -> None:
        """``latest.npz``; with N > 1 native vector envs also their state (``latest_envs.npz``)."""
        assert self.run is not None
        self._agent.save(self.run.latest_checkpoint_path(), include_buffer=self.save_buffer)
        vec = self._vec  # (one env: the files of a single env, byte for byte)
        if vec is None or not (vec.native and vec.num_envs > 1 and self.save_buffer):
            return
        if vec.step_arrays is not None:
            save_arrays(self.env_state_path(), vec.state_arrays())

    def env_state_path(self) -> Path:
        """``checkpoints/latest_envs.npz`` of the run: the native vector envs' state
        saved with ``latest.npz`` (each copy's physics state, step counters and
        reset stream, its current observation, chosen action and episode so far)."""
        if self.run is None:
            raise ValueError("env_state_path() needs a TrainingRun: DqnTrainer(..., run=...)")
        return self.run.checkpoints_dir / ENV_STATE_FILE

    def restore_env_state(self) -> bool:
        """Continue the episodes in progress where ``latest.npz`` left them (resume).

        With a run, a :class:`~ember_np.envs.NativeVecEnv` and an agent
        restored from ``latest.npz``, the envs' state saved beside it
        (:meth:`env_state_path`, written with every ``latest.npz`` when the
        buffer is saved) is loaded, so training continues exactly as if it
        had not stopped. Returns False (the envs start fresh episodes at the
        first step) for a single env or a gymnasium vector env, whose state
        is not saved, or when no state was saved at the agent's step.

        Raises
        ------
        ember_np.CheckpointError
            The saved file is unreadable; ValueError: it is of other envs.
        """
        vec = self._vec
        if vec is None or not vec.native or self.run is None:
            return False
        path = self.env_state_path()
        if not path.exists():
            return False
        arrays = load_arrays(path)
        if int(arrays.get("total_steps", -1)) != self._agent.total_steps:
            return False
        vec.load_state_arrays(arrays)
        return True

    # -- evaluation ---------------------------------------------------------------
    def _get_eval_env(self) -> Any:
        if self._eval_env is None and self._vec is not None:
            from ember_np.training.vector import make_single_env

            self._eval_env = make_single_env(self._env)
        if self._eval_env is None:
            spec = getattr(self._env, "spec", None)
            if spec is None:
                raise ValueError(
                    "eval needs a separate environment: this env has no gymnasium spec to "
                    "make one from, so pass DqnTrainer(..., eval_env=...)"
                )
            self._eval_env = make_eval_env(self._env)
        return self._eval_env

    def _greedy_episode(self, env: Any) -> EpisodeRecord:
        seed = None
        if not self._eval_env_seeded:
            self._eval_env_seeded = True
            seed = self.seed + 1
        return greedy_episode(env, self._agent.act, seed, masks=self._masks)

    def eval(self, n_episodes: int) -> EvalReport:
        """Run ``n_episodes`` greedy episodes (epsilon 0) on the eval env.

        With a run, each episode goes to ``eval_episodes.jsonl`` and
        ``best.npz`` is saved when the mean reward beats the best so far.
        Training state (the episode in progress, counters, random streams) is
        not touched.
        """
        n = check_int("n_episodes", n_episodes)
        env = self._get_eval_env()
        total_steps = self._agent.total_steps
        tracker = StatsTracker()  # episode_reward and episode_length, as ember-rl
        records = []
        for _ in range(n):
            record = self._greedy_episode(env)
            tracker.update(record)
            records.append(record)
        summary = tracker.summary()
        mean_reward = summary.get("episode_reward", math.nan)
        if mean_reward > self._best_eval_reward:
            self._best_eval_reward = mean_reward
            if self.run is not None:
                self._agent.save(self.run.best_checkpoint_path())
                self.run.update_metadata(
                    total_steps, self._episode, best_eval_reward=mean_reward,
                    best_eval_step=total_steps,
                )  # fmt: skip
        if self.run is not None:
            self.run.log_eval_episodes(records, total_steps)
        return EvalReport(total_steps, n, summary)

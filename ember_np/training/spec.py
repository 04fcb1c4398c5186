"""One owner for a run's settings: :class:`RunSpec`, how one is resolved, built and resumed.

A run is described once, by a frozen :class:`RunSpec`: the env, the
algorithm and its config, the preset it came from, the seed, the budget,
the evaluation and checkpoint schedule and the envs stepped together. Every
default of a run is defined here (:data:`DEFAULT_STEPS` and the others); the
command line's options, :func:`~ember_np.training.multiseed.train_seeds`,
the multi-seed workers (local and Dask) and ``ember-np tune`` read them from
here.

* :func:`resolve` turns what a user types (an env id, a preset, ``--set``
  pairs, ``--steps``) into a spec: the compiled twin of the env, the
  preset's config with its schedules resolved against the budget, the
  overrides, action masks where the env gives them.
* :func:`build` makes the env, the agent and the trainer a spec describes
  (a fresh agent, or one loaded from a checkpoint).
* ``config.json`` is the spec's serialisation (:meth:`RunSpec.to_dict`,
  :meth:`RunSpec.from_dict`); a run directory's spec is :func:`read_spec`.
* :func:`resume` continues a run directory from its ``latest.npz``, as
  ``ember-np resume`` does.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from ember_np._validate import is_int
from ember_np.algorithms import (
    DEFAULT_ALGORITHM,
    algorithm_of_config,
    check_checkpoint_format,
    get_algorithm,
)
from ember_np.training.defaults import (
    DEFAULT_CHECKPOINT_FREQ,
    DEFAULT_EVAL_EPISODES,
    DEFAULT_EVAL_EVERY,
    DEFAULT_KEEP,
    DEFAULT_STEPS,
)
from ember_np.training.setup import (
    NATIVE_IDS,
    VECTORIZATIONS,
    SetupError,
    check_checkpoint_env,
    make_env,
    make_train_env,
    native_to_plain,
    parse_sets,
    vector_settings,
    with_env_masks,
)

__all__ = [
    "DEFAULT_CHECKPOINT_FREQ",
    "DEFAULT_EVAL_EPISODES",
    "DEFAULT_EVAL_EVERY",
    "DEFAULT_KEEP",
    "DEFAULT_STEPS",
    "Resumed",
    "RunSpec",
    "build",
    "open_resumed",
    "read_spec",
    "resolve",
    "resolve_preset",
    "resume",
]


#: The integer fields of a spec and their least value.
_AT_LEAST = {"seed": 0, "steps": 1, "eval_every": 1, "eval_episodes": 1,
             "checkpoint_freq": 1, "keep": 0, "num_envs": 1}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """Everything one training run is: what ``config.json`` records.

    Parameters
    ----------
    env_id : str
        The env actually made: ``"ember_np/CartPole-v1"`` for the compiled
        twin the command line picks for ``CartPole-v1``, or any gymnasium id.
    algorithm : str, default "dqn"
        A name :func:`~ember_np.algorithms.get_algorithm` knows: ``"dqn"`` or
        ``"package.module:NAME"``.
    preset : str or None
        The preset the config came from, as recorded (``"rainbow"``,
        ``"CartPole-v1/zoo"`` for another env's); None: the config's defaults.
    config : DqnConfig or the algorithm's config class
        The algorithm's config (default: its class's defaults).
    seed : int
        The run's seed (a multi-seed run replaces it per seed).
    steps : int
        Env steps to train (N envs: transitions, N per vector step).
    eval_every, eval_episodes : int
        Greedy evaluation every ``eval_every`` steps, of ``eval_episodes`` episodes.
    checkpoint_freq, keep : int
        A numbered checkpoint every ``checkpoint_freq`` steps; ``keep`` of them kept.
    num_envs : int
        Envs stepped together.
    vectorization : str or None
        ``"sync"`` or ``"async"`` for a gymnasium env's copies; None for one
        env or a compiled env's copies (one compiled loop).
    """

    env_id: str
    algorithm: str = "dqn"
    preset: str | None = None
    config: Any = None
    seed: int = 0
    steps: int = DEFAULT_STEPS
    eval_every: int = DEFAULT_EVAL_EVERY
    eval_episodes: int = DEFAULT_EVAL_EPISODES
    checkpoint_freq: int = DEFAULT_CHECKPOINT_FREQ
    keep: int = DEFAULT_KEEP
    num_envs: int = 1
    vectorization: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.env_id, str) or not self.env_id:
            raise ValueError(f"env_id must be a gymnasium id, got {self.env_id!r}")
        config_class = get_algorithm(self.algorithm).config_class
        if self.config is None:
            object.__setattr__(self, "config", config_class())
        if not isinstance(self.config, config_class):
            raise ValueError(f"config must be a {config_class.__name__} for "
                             f"{self.algorithm}, got {type(self.config).__name__}")  # fmt: skip
        if self.preset is not None and not isinstance(self.preset, str):
            raise ValueError(f"preset must be a string or None, got {self.preset!r}")
        for name, least in _AT_LEAST.items():
            value = getattr(self, name)
            if not is_int(value) or value < least:
                raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
        if self.vectorization not in (None, *VECTORIZATIONS):
            raise ValueError(f"vectorization must be None, 'sync' or 'async', got "
                             f"{self.vectorization!r}")  # fmt: skip

    @property
    def env_source(self) -> str:
        """``"compiled"``: ember_np's twin of a gymnasium env; ``"gymnasium"``: the env itself.

        Read from :attr:`env_id` (a twin's id is ``ember_np/<id>``), so the two never disagree.
        """
        return "compiled" if self.env_id in NATIVE_IDS.values() else "gymnasium"

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with some fields changed (checked as a new spec is)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """``config.json``'s contents: the algorithm's config under its name (``"dqn"``);
        ``num_envs`` and ``vectorization`` only with N > 1, ``algorithm`` only when it is
        not DQN (a DQN run's file as before)."""
        out: dict[str, Any] = {
            "env_id": self.env_id, "preset": self.preset, "seed": self.seed,
            "steps": self.steps, "eval_every": self.eval_every,
            "eval_episodes": self.eval_episodes, "checkpoint_freq": self.checkpoint_freq,
            "keep": self.keep,
        }  # fmt: skip
        if self.num_envs > 1:
            out.update(num_envs=self.num_envs, vectorization=self.vectorization)
        if self.algorithm != DEFAULT_ALGORITHM:
            out["algorithm"] = self.algorithm
        out[get_algorithm(self.algorithm).name] = self.config.to_dict()
        return out

    def to_json(self) -> str:
        """``config.json``'s text, as :meth:`TrainingRun.write_config` writes it."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunSpec:
        """Inverse of :meth:`to_dict`; keys an older ``config.json`` lacks take the defaults
        (seed 0, one env, the evaluation and checkpoint defaults, the config's defaults).

        Raises ValueError naming the key that is missing or wrong.
        """
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        if not isinstance(data.get("env_id"), str):
            raise ValueError('does not say which env this run trained on: add "env_id": '
                             '"<gymnasium id>" to it')  # fmt: skip
        algorithm = algorithm_of_config(data)
        known = get_algorithm(algorithm)
        config = known.config_class()
        if known.name in data:
            config = known.config_class.from_dict(data[known.name])
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        settings = {k: data.get(k, defaults[k]) for k in (*_AT_LEAST, "preset", "vectorization")}
        return cls(env_id=data["env_id"], algorithm=algorithm, config=config, **settings)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        """:meth:`from_dict` of ``config.json``'s text."""
        return cls.from_dict(json.loads(text))


# -- from what a user types ----------------------------------------------------------------


def resolve_preset(
    env_id: str,
    preset: str | None = None,
    sets: Sequence[str] = (),
    steps: int | None = None,
    vector: tuple[int | None, str | None] = (None, None),
    gymnasium_env: bool = False,
    say: Callable[[str], None] = print,
    algorithm: str = DEFAULT_ALGORITHM,
) -> tuple[RunSpec, dict[str, Any]]:
    """The spec before ``--set``, and the ``--set`` fields: what :func:`resolve` and
    ``ember-np tune`` (which searches around the preset) both start from.

    ``env_id`` as typed: the compiled twin (``ember_np/<id>``) is trained
    unless ``gymnasium_env``; ``preset`` a name, ``ENV/NAME`` or a file
    (default: the env's own, :func:`~ember_np.presets.default_preset`);
    ``steps`` None: the preset's budget, else :data:`DEFAULT_STEPS`; the
    preset's schedule lengths are fractions of ``steps``. ``vector`` is
    (``num_envs``, ``vectorization``), ``num_envs`` None for the preset's (a PPO
    preset's ``n_envs``; one env without). Action masks are turned on where the env
    gives them and ``sets`` does not choose (``say`` gets the line saying so).
    ``algorithm`` names the algorithm (:func:`~ember_np.algorithms.get_algorithm`):
    its presets, its config class and the fields ``--set`` takes.

    Raises
    ------
    SetupError
        An env gymnasium cannot make, a bad preset, vector setting, ``--set``
        pair or ``steps``.
    """
    try:
        known = get_algorithm(algorithm)
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    native = not gymnasium_env and env_id in NATIVE_IDS
    train_id = NATIVE_IDS[env_id] if native else env_id
    asked, vectorization = vector
    if asked is not None:  # a bad --num-envs or --vectorization first
        vector_settings(train_id, asked, vectorization)
    make_env(train_id).close()  # an unknown id: gymnasium's own message, before the rest
    plain_id = native_to_plain(env_id)
    try:
        if preset is not None:
            chosen = known.preset(preset, plain_id)
        else:
            chosen = known.default_preset(plain_id)
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    if asked is None:  # the preset's envs (PPO's n_envs), else one
        asked = getattr(chosen, "num_envs", 1)
    num_envs, vectorization = vector_settings(train_id, asked, vectorization)
    if steps is None:  # the preset's budget, if it names one
        steps = getattr(chosen, "steps", None) or DEFAULT_STEPS
    try:
        config = chosen.config_for(steps) if chosen is not None else known.config_class()
    except ValueError as exc:  # a schedule length beyond int64 (a huge budget)
        raise SetupError(f"--steps {steps}: {exc}") from None
    overrides = parse_sets(list(sets), known.config_class)
    config = with_env_masks(config, train_id, overrides, say)
    # a preset of another env is recorded and filed as ENV/NAME, never as the env's own
    name = chosen.name_for(plain_id) if chosen is not None else None
    spec = RunSpec(train_id, algorithm, preset=name, config=config, steps=steps,
                   num_envs=num_envs, vectorization=vectorization)  # fmt: skip
    return spec, overrides


def resolve(
    env_id: str,
    preset: str | None = None,
    sets: Sequence[str] = (),
    steps: int | None = None,
    vector: tuple[int | None, str | None] = (None, None),
    gymnasium_env: bool = False,
    say: Callable[[str], None] = print,
    algorithm: str = DEFAULT_ALGORITHM,
) -> RunSpec:
    """The spec ``ember-np train ENV_ID [--preset P] [--steps S] [--set k=v ...]`` trains.

    :func:`resolve_preset` with the ``--set`` fields applied, its replay
    buffer checked against the memory available. The seed and the
    evaluation and checkpoint settings are the defaults: change them with
    :meth:`RunSpec.replace`.

    Raises
    ------
    SetupError
        As :func:`resolve_preset`; a ``--set`` value the config refuses; a
        replay buffer that does not fit in memory.
    """
    spec, overrides = resolve_preset(env_id, preset, sets, steps, vector, gymnasium_env, say,
                                     algorithm)  # fmt: skip
    config = spec.config
    if overrides:
        try:
            config = config.replace(**overrides)
        except (ValueError, TypeError) as exc:
            raise SetupError(f"--set: {exc}") from None
    check_setup = get_algorithm(algorithm).check_setup
    if check_setup is not None:
        probe = make_env(spec.env_id)
        try:
            check_setup(probe, config, 1)
        except ValueError as exc:
            raise SetupError(str(exc)) from None
        finally:
            probe.close()
    return spec.replace(config=config)


# -- what a spec builds --------------------------------------------------------------------


def build(
    spec: RunSpec,
    run: Any = None,
    checkpoint: str | os.PathLike[str] | None = None,
    make: Callable[[str, int, str | None], Any] = make_train_env,
) -> Any:
    """The env, agent and trainer ``spec`` describes, as a :class:`~ember_np.DqnTrainer`.

    Parameters
    ----------
    spec : RunSpec
        What to build.
    run : TrainingRun or callable, optional
        The run the trainer writes to (None: no files). A callable is called
        with no arguments once the env and agent are made, and returns the
        run: a setting the agent refuses then leaves no empty run directory.
    checkpoint : path, optional
        Load the agent from this checkpoint instead of making a fresh one
        (its env must match ``spec.env_id``'s spaces); the trainer is then
        seeded ``spec.seed + agent.total_steps``, a fresh episode stream.
    make : callable, default :func:`~ember_np.training.setup.make_train_env`
        ``make(env_id, num_envs, vectorization)`` makes the env (the command
        line passes its own, which a test can wrap).

    Raises
    ------
    SetupError
        An env that cannot be made, or one the checkpoint was not trained on.
    ValueError
        A config the agent refuses (or :class:`~ember_np.CheckpointError`).
    """
    from ember_np.training.trainer import DqnTrainer

    algorithm = get_algorithm(spec.algorithm)
    env = make(spec.env_id, spec.num_envs, spec.vectorization)
    try:
        if checkpoint is None:
            agent = algorithm.make_agent(env, spec.config, spec.seed)
            seed = spec.seed
        else:
            check_checkpoint_format(Path(checkpoint), spec.algorithm)
            agent = algorithm.load_agent(Path(checkpoint))
            check_checkpoint_env(env, spec.env_id, agent.encoder, agent.action_mapper,
                                 Path(checkpoint))  # fmt: skip
            seed = spec.seed + agent.total_steps
        target = run() if callable(run) else run
        return DqnTrainer(env, agent, seed=seed, run=target, checkpoint_freq=spec.checkpoint_freq,
                          keep_checkpoints=spec.keep)  # fmt: skip
    except BaseException:
        env.close()  # an async vector env's processes stop with the failure
        raise


def read_spec(run: Any, with_config: bool = True) -> RunSpec:
    """The spec of a :class:`~ember_np.TrainingRun`: its ``config.json``.

    ``with_config=False`` leaves the algorithm's config out (the default
    config in its place): a checkpoint holds the config its agent trains with.

    Raises
    ------
    ValueError
        The file is not JSON, or not a spec (naming it and the key).
    OSError
        It cannot be read.
    """
    path = run.dir / "config.json"
    data = run.read_config() or {}  # none at all: as one without env_id
    if not with_config and isinstance(data, dict):
        algorithm = get_algorithm(algorithm_of_config(data))
        data = {k: v for k, v in data.items() if k != algorithm.name}
    try:
        return RunSpec.from_dict(data)
    except (ValueError, TypeError) as exc:
        text = str(exc)
        if text.startswith("does not say"):  # it says what to add
            raise ValueError(f"{path} {text}") from None
        raise ValueError(f"{path}: {text}: set it to what the run trained with") from None


class Resumed(NamedTuple):
    """A run opened to go on (:func:`open_resumed`)."""

    spec: RunSpec
    """The run's spec, its config the checkpoint's."""
    trainer: Any
    """The DqnTrainer, its agent loaded from ``latest.npz``, its run locked."""
    env_restored: bool | None
    """N envs: whether their episodes in progress were restored (None: one env)."""


def open_resumed(
    run_dir: str | os.PathLike[str],
    make: Callable[[str, int, str | None], Any] = make_train_env,
) -> Resumed:
    """The run in ``run_dir``, locked, rebuilt from its spec and ``latest.npz``
    (:func:`build`, ``make`` its env maker).

    N envs continue their episodes where a native env's state was saved.

    Raises
    ------
    ValueError
        Not a run directory, a damaged ``config.json`` or checkpoint, an env
        that does not match the checkpoint.
    ember_np.training.run.RunLockedError
        Another process writes the run.
    OSError
        The run cannot be read or locked.
    """
    from ember_np.checkpoint import CheckpointError
    from ember_np.training.run import TrainingRun

    path = Path(run_dir)
    if not path.is_dir():
        raise ValueError(f"no run directory at {path}")
    run = TrainingRun.resume(path)
    run.lock()  # before anything is read: one writer per run
    spec = read_spec(run, with_config=False)
    trainer = build(spec, run, run.latest_checkpoint_path(), make)
    restored: bool | None = None
    if spec.num_envs > 1:
        try:
            restored = trainer.restore_env_state()
        except (CheckpointError, ValueError) as exc:
            trainer.env.close()
            raise ValueError(f"{trainer.env_state_path()}: {exc}") from None
    return Resumed(spec.replace(config=trainer.agent.config), trainer, restored)


def resume(run_dir: str | os.PathLike[str], steps: int, callbacks: Sequence[Any] = ()) -> Any:
    """Train the run in ``run_dir`` ``steps`` more env steps from its ``latest.npz``.

    The same as ``ember-np resume RUN_DIR --steps STEPS``: the run's own
    evaluation and checkpoint settings (its ``config.json``), the one loop
    (:func:`~ember_np.training.loop.train_and_evaluate`) with ``callbacks``,
    the same files. The run is locked while it trains; its env is closed at
    the end.

    Returns
    -------
    EvalReport
        The final greedy evaluation.

    Raises
    ------
    ValueError
        ``steps`` not a positive integer, or as :func:`open_resumed`.
    """
    from ember_np.training.loop import train_and_evaluate

    if not is_int(steps) or steps < 1:
        raise ValueError(f"steps must be an integer >= 1 (the env steps to add), got {steps!r}")
    spec, trainer, _ = open_resumed(run_dir)
    try:
        return train_and_evaluate(trainer, int(steps), spec.eval_every, spec.eval_episodes,
                                  callbacks)  # fmt: skip
    finally:
        trainer.env.close()
        trainer.run.unlock()

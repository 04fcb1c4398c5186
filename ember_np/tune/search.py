"""A study's settings and objective: what every trial of ``ember-np tune`` trains.

:class:`TuneSettings` (stored in the study, checked by every joiner),
:func:`settings_for` (the command line's options as settings),
:func:`trial_seeds` and :func:`evaluate_config` (K seeds trained side by
side, evaluated after every 1/E of the budget). The search space is the
algorithm's own (:attr:`Algorithm.tune_space
<ember_np.algorithms.Algorithm.tune_space>`; DQN's is
:mod:`ember_np.dqn.search_space`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ember_np.algorithms import DEFAULT_ALGORITHM, algorithm_of_config, get_algorithm
from ember_np.training.setup import SetupError
from ember_np.training.spec import RunSpec, build, resolve_preset

# -- settings ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TuneSettings:
    """What every trial of a study does; stored in the study, checked by joiners.

    Two commands that join one study must agree on all of these, or the
    trials would not be comparable.
    """

    env_id: str
    """The environment as given on the command line (the preset and the report use it)."""
    run: RunSpec
    """What each seed of a trial trains: the env (``ember_np/<env_id>``, compiled, bit for
    bit gymnasium's dynamics, fused training loop, when there is one), the steps per seed,
    the greedy episodes per evaluation, the envs stepped together, and as ``config`` the
    config the search starts from (the env's preset, its schedule lengths resolved
    against the steps): fields neither searched nor fixed keep its values."""
    seeds: int
    """K: seeds trained per trial; the objective is the IQM of their final evaluations."""
    evals: int
    """E: greedy evaluations per seed, after every 1/E of the budget (the last is final)."""
    seed: int
    """Study seed: with a trial's parameters it fixes the trial's K training seeds."""
    fixed: dict[str, Any]
    """Config fields fixed with ``--set`` (not searched)."""

    @property
    def train_env_id(self) -> str:
        """The environment trials train on (``run.env_id``)."""
        return self.run.env_id

    @property
    def steps(self) -> int:
        """Env steps per seed per trial (``run.steps``)."""
        return self.run.steps

    @property
    def base(self) -> dict[str, Any]:
        """The config the search starts from, as a dict (``run.config``)."""
        return self.run.config.to_dict()

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (as stored in the study's user attributes)."""
        run = self.run
        algorithm = {} if run.algorithm == DEFAULT_ALGORITHM else {"algorithm": run.algorithm}
        return json.loads(json.dumps({
            **algorithm,
            "env_id": self.env_id, "train_env_id": run.env_id, "steps": run.steps,
            "seeds": self.seeds, "evals": self.evals, "eval_episodes": run.eval_episodes,
            "seed": self.seed, "fixed": self.fixed, "base": self.base,
            "num_envs": run.num_envs, "vectorization": run.vectorization,
        }))  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TuneSettings:
        """Inverse of :meth:`to_dict` (a study of one env before ``num_envs``: one env)."""
        algorithm = algorithm_of_config(data)
        config = get_algorithm(algorithm).config_class.from_dict(dict(data["base"]))
        run = RunSpec(data["train_env_id"], algorithm, config=config,
                      steps=data["steps"], eval_episodes=data["eval_episodes"],
                      num_envs=data.get("num_envs", 1),
                      vectorization=data.get("vectorization"))  # fmt: skip
        return cls(data["env_id"], run, data["seeds"], data["evals"], data["seed"],
                   data["fixed"])  # fmt: skip


def search_space(settings: TuneSettings) -> Any:
    """The search space of the settings' algorithm (:attr:`Algorithm.tune_space
    <ember_np.algorithms.Algorithm.tune_space>`): ``suggest_config(trial, settings)``
    and ``config_for(settings, values)``.

    Raises
    ------
    SetupError
        The algorithm has none.
    """
    algorithm = settings.run.algorithm
    space = get_algorithm(algorithm).tune_space
    if space is None:
        raise SetupError(f"algorithm {algorithm} has no tune search space: tune a "
                         "different --algo, or train it with --set fields")  # fmt: skip
    return space


def settings_for(
    env_id: str,
    budget: tuple[int | None, int, int, int],
    seed: int,
    sets: list[str],
    say: Callable[[str], None] = print,
    num_envs: int | None = None,
    vectorization: str | None = None,
    gymnasium_env: bool = False,
    algorithm: str = DEFAULT_ALGORITHM,
) -> TuneSettings:
    """The settings of a study on ``env_id``, as ``ember-np tune`` builds them.

    Parameters
    ----------
    env_id : str
        As given on the command line; trials train on its compiled twin
        (``NATIVE_IDS``) where there is one, as ``ember-np train`` does.
    budget : tuple (steps or None, seeds, evals, eval_episodes)
        Env steps per seed (None: the env's preset budget, else
        :data:`~ember_np.training.spec.DEFAULT_STEPS`), K seeds per trial, E evaluations per seed,
        greedy episodes per evaluation.
    seed : int
        The study seed.
    sets : list of str
        ``key=value`` fields of the algorithm's config fixed (not searched).
    say : callable
        Gets the line saying action masks were turned on.
    num_envs, vectorization, gymnasium_env
        ``ember-np train``'s ``--num-envs`` (None: the preset's, else one),
        ``--vectorization`` and ``--gymnasium-env``.
    algorithm : str, default "dqn"
        ``--algo``: an algorithm with a search space (:attr:`Algorithm.tune_space
        <ember_np.algorithms.Algorithm.tune_space>`).

    Raises
    ------
    ember_np.training.setup.SetupError
        An unknown env id or ``key``, ``evals`` > ``steps``, fixed fields
        no config can have, or an algorithm without a search space.
    """
    steps, n_seeds, evals, eval_episodes = budget
    # as ember-np train: the compiled twin, the preset's schedule lengths over the trial's
    # steps, action masks where the env gives them (the --set fields stay apart: fixed)
    spec, fixed = resolve_preset(env_id, None, sets, steps, (num_envs, vectorization),
                                 gymnasium_env, say, algorithm)  # fmt: skip
    fixed = {k: list(v) if isinstance(v, tuple) else v for k, v in fixed.items()}  # JSON's
    if evals > spec.steps:
        raise SetupError(f"--evals must be <= --steps (got {evals} > {spec.steps})")
    run = spec.replace(preset=None, eval_episodes=eval_episodes)  # the study records no preset
    settings = TuneSettings(env_id, run, n_seeds, evals, seed, fixed)
    try:  # what is fixed, with the searched fields adjusted to it as every trial adjusts them
        search_space(settings).config_for(settings, {})
    except (ValueError, TypeError) as exc:
        raise SetupError(f"--set: {exc}") from None
    return settings


def trial_seeds(study_seed: int, params: Mapping[str, Any], k: int) -> list[int]:
    """The K training seeds of a trial: a function of the study seed and the parameters only.

    So a trial run again (a retry after its worker died, or the same
    parameters enqueued twice) trains the same K runs, and gets the same value.
    """
    digest = hashlib.sha256(json.dumps(dict(params), sort_keys=True).encode()).digest()
    entropy = [int(study_seed), int.from_bytes(digest[:8], "little")]
    return [int(s) for s in np.random.SeedSequence(entropy).generate_state(k, dtype=np.uint32)]


# -- the objective -----------------------------------------------------------------


def evaluate_config(
    settings: TuneSettings,
    config: Any,
    seeds: list[int],
    report: Callable[[int, float], bool] | None = None,
) -> list[float]:
    """Train one agent per seed and return each one's final greedy evaluation.

    The K agents train side by side: after every 1/E of ``settings.steps``
    each is evaluated greedily (``settings.run.eval_episodes`` episodes, the mean
    reward), and ``report(step, iqm of the K means)`` is called for every
    evaluation but the last; if it returns True the trial stops
    (``optuna.TrialPruned``). Each stretch of training is the one loop
    (:func:`ember_np.training.loop.train_and_evaluate`, its chunks let other
    threads, Optuna's heartbeat, get the interpreter between compiled calls),
    ending with its evaluation.

    Returns
    -------
    list of float, length K
        The mean reward of each seed's final evaluation.
    """
    import gymnasium as gym

    from ember_np.stats import iqm
    from ember_np.training.loop import train_and_evaluate

    env = gym.make(settings.train_env_id)
    # K buffers fill side by side: refuse before allocating (SetupError) rather
    # than have the trial killed for memory half way through.
    check_setup = get_algorithm(settings.run.algorithm).check_setup
    try:
        if check_setup is not None:
            check_setup(env, config, len(seeds))
    except ValueError as exc:
        raise SetupError(str(exc)) from None
    finally:
        env.close()
    trainers = [build(settings.run.replace(config=config, seed=seed)) for seed in seeds]
    marks = [settings.steps * (i + 1) // settings.evals for i in range(settings.evals)]
    scores: list[float] = []
    for mark in marks:
        # on to the mark from where each agent is (N envs: a stretch ends at the first
        # vector step at or past its mark; the overshoot is not added to later marks)
        scores = [
            float(train_and_evaluate(trainer, max(mark - trainer.agent.total_steps, 0), None,
                                     settings.run.eval_episodes).mean_reward)
            for trainer in trainers
        ]  # fmt: skip
        if report is not None and mark < settings.steps and report(mark, iqm(scores)):
            import optuna

            raise optuna.TrialPruned(f"pruned at step {mark}")
    return scores

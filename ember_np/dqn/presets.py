"""Ready-made DQN configurations, named per environment: ``rainbow``, ``zoo``, ``ember``.

``PRESETS[env_id][name]`` is a :class:`Preset`: a :class:`~ember_np.DqnConfig`,
the environment it was tuned for and its step budget.

* ``rainbow``: this project's presets for CartPole-v1, Acrobot-v1,
  MountainCar-v0 and LunarLander-v3, built from the Rainbow components and
  chosen with the multi-seed protocol on tuning seeds 1000-1019
  (``bench/preset_search.py``; LunarLander: 1000-1005), never on the seeds
  reported in docs/guides/presets.md. The default of ``ember-np train`` for
  those ids.
* ``zoo``: the RL Zoo's tuned rows (rl-baselines3-zoo ``hyperparams/dqn.yml``),
  SB3's arguments translated one to one (table below).
* ``ember``: ember-rl's CartPole example (S1 of the speed comparisons).

:func:`get_preset` finds one by name (and env), :func:`presets_for_env` lists
an env's, :func:`default_preset` is the one ``ember-np train ENV_ID`` uses.
``ENV/NAME`` (``CartPole-v1/zoo``) names any env's preset; the old spelling,
an env id as the name (``get_preset("CartPole-v1")``, ``--preset
CartPole-v1``), still means that env's ``zoo`` preset; :func:`preset_names`
lists every name an env takes. A run of another env's preset records it as
``ENV/NAME`` (:meth:`Preset.name_for`), never as the env's own.

Schedule lengths (epsilon's decay, the learning rate's annealing, PER's beta:
:data:`~ember_np.dqn.config.SCHEDULE_FIELDS`) are fractions of the run
(:attr:`Preset.schedule`); :meth:`Preset.config_for` resolves them against a
run's steps (:func:`resolve_schedule`), and ``Preset.config`` holds them
resolved at the preset's own budget, ``Preset.steps``.

=========================  ======================================================
SB3 / RL Zoo               DqnConfig
=========================  ======================================================
learning_rate              learning_rate
batch_size                 batch_size
buffer_size                buffer_capacity
learning_starts            min_replay_size (at least batch_size)
gamma                      gamma
target_update_interval     target_update_freq
train_freq                 train_freq
gradient_steps             gradient_steps (-1: one per env step)
exploration_fraction       epsilon_decay_steps = fraction * the run's steps
exploration_final_eps      epsilon_end (epsilon_start 1.0)
policy_kwargs.net_arch     hidden_sizes
(SB3 defaults)             tau 1.0, max_grad_norm 10, Huber loss (delta 1)
n_timesteps                Preset.steps
=========================  ======================================================
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ember_np._config import check_file_env, preset_name_for, read_preset_json
from ember_np._config import plain_env_id as _plain
from ember_np._validate import INT64_MAX, too_big_rule
from ember_np.dqn.config import SCHEDULE_FIELDS, DqnConfig

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "Preset",
    "check_schedule",
    "default_preset",
    "get_preset",
    "load_preset_file",
    "preset_for_env",
    "preset_names",
    "presets_for_env",
    "resolve_schedule",
]


@dataclass(frozen=True)
class Preset:
    """A named configuration: what to train, for how long, with which settings."""

    name: str
    env_id: str
    config: DqnConfig
    """The settings of a run of ``steps`` env steps (the schedule resolved against them)."""
    steps: int
    source: str
    sb3_kwargs: dict[str, Any] | None = None
    """The same settings as Stable-Baselines3 DQN arguments (Zoo presets only)."""
    schedule: Mapping[str, float] = field(default_factory=dict)
    """Schedule lengths as fractions of the run: a DqnConfig field of
    :data:`~ember_np.dqn.config.SCHEDULE_FIELDS` -> a fraction >= 0 (SB3's
    ``exploration_fraction``). :meth:`config_for` sets each field to the fraction of
    the run's steps; a field not here keeps ``config``'s value at any length."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "schedule", check_schedule(self.schedule))

    def config_for(self, steps: int) -> DqnConfig:
        """The DqnConfig of a run of ``steps`` env steps: ``config`` with each schedule
        length of :attr:`schedule` resolved against ``steps`` (:func:`resolve_schedule`).
        At the preset's own budget (``steps == self.steps``) it equals ``config``."""
        return self.config.replace(**resolve_schedule(self.schedule, steps))

    def name_for(self, env_id: str) -> str:
        """The preset's name in a run on ``env_id`` (config.json's ``"preset"``): ``name``
        for the env's own preset (or a file made for no env), ``ENV/NAME`` (e.g.
        ``CartPole-v1/zoo``) for a preset borrowed from another env, so a borrowed
        preset is never filed or reported as the env's own."""
        return preset_name_for(self.name, self.env_id, env_id)


def check_schedule(schedule: Any) -> dict[str, float]:
    """``schedule`` as a dict of fractions, or ValueError saying what is wrong: each key
    a field of :data:`~ember_np.dqn.config.SCHEDULE_FIELDS`, each value a finite number
    >= 0 (the length as a fraction of the run; 1.0 is the whole run)."""
    if not isinstance(schedule, Mapping):
        raise ValueError(
            "a schedule must map DqnConfig fields to fractions of the run, e.g. "
            f'{{"epsilon_decay_steps": 0.2}}, got {schedule!r}'
        )
    out: dict[str, float] = {}
    for key, fraction in schedule.items():
        if key not in SCHEDULE_FIELDS:
            raise ValueError(
                f"schedule: {key!r} is not a schedule length; the schedule lengths are "
                f"{', '.join(SCHEDULE_FIELDS)}"
            )
        if (
            isinstance(fraction, bool)
            or not isinstance(fraction, (int, float))
            or not (math.isfinite(fraction) and fraction >= 0)
        ):
            raise ValueError(
                f"schedule: {key} must be a fraction of the run, a finite number >= 0 (1.0 "
                f"is the whole run), got {fraction!r}"
            )
        out[key] = float(fraction)
    return out


def resolve_schedule(schedule: Mapping[str, float], steps: int) -> dict[str, int]:
    """The schedule lengths of a run of ``steps`` env steps: each field of ``schedule``
    (fractions of the run) -> round(fraction * steps), at least 1 when the fraction is
    positive. The one place fractions become steps (``train``, ``tune``, bench scripts).

    ValueError when ``steps`` is not a positive integer, or a length exceeds int64.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive integer, got {steps!r}")
    out = {}
    for key, fraction in schedule.items():
        length = Fraction(fraction) * steps  # exact: 1.0 of 2**63 - 1 steps is 2**63 - 1
        if length > INT64_MAX:
            raise ValueError(
                f"{key}: {fraction:g} of {steps:,} steps is beyond {too_big_rule(INT64_MAX)} "
                "steps; give a smaller fraction or --steps"
            )
        out[key] = max(round(length), 1) if fraction > 0 else 0
    return out


def _preset(
    name: str, env_id: str, steps: int, schedule: dict[str, float], source: str, **dqn: Any
) -> Preset:
    """A preset whose ``config`` holds ``dqn`` with ``schedule`` resolved at ``steps``."""
    lengths: dict[str, Any] = resolve_schedule(schedule, steps)
    config = DqnConfig(**dqn, **lengths)
    return Preset(name, env_id, config, steps, source, schedule=schedule)


def _zoo(env_id: str, n_timesteps: int, **sb3: Any) -> Preset:
    """A Zoo preset from its row of ``hyperparams/dqn.yml``: ``sb3`` holds the
    row's SB3 DQN arguments (learning_rate, batch_size, buffer_size,
    learning_starts, gamma, target_update_interval, train_freq, gradient_steps,
    exploration_fraction, exploration_final_eps; net_arch defaults to (256, 256)).

    The schedule: epsilon over ``exploration_fraction`` of the run, as SB3; the
    learning-rate and PER-beta lengths (unused: no ``learning_rate_end``, no
    prioritized replay) at DqnConfig's 100,000 steps at the row's budget."""
    net_arch = tuple(sb3.pop("net_arch", (256, 256)))
    unused = 100_000 / n_timesteps
    schedule = {
        "epsilon_decay_steps": sb3["exploration_fraction"],
        "learning_rate_decay_steps": unused,
        "per_beta_steps": unused,
    }
    p = _preset(
        "zoo", env_id, n_timesteps, schedule, "rl-baselines3-zoo hyperparams/dqn.yml",
        gamma=sb3["gamma"], learning_rate=sb3["learning_rate"], batch_size=sb3["batch_size"],
        buffer_capacity=sb3["buffer_size"],
        min_replay_size=max(sb3["learning_starts"], sb3["batch_size"]),
        target_update_freq=sb3["target_update_interval"], hidden_sizes=net_arch,
        epsilon_start=1.0, epsilon_end=sb3["exploration_final_eps"],
        train_freq=sb3["train_freq"], gradient_steps=sb3["gradient_steps"], tau=1.0,
        max_grad_norm=10.0, huber_delta=1.0,
    )  # fmt: skip
    sb3_kwargs = dict(sb3, policy_kwargs={"net_arch": list(net_arch)})
    return dataclasses.replace(p, sb3_kwargs=sb3_kwargs)


_ZOO = (
    _zoo(
        "CartPole-v1", n_timesteps=50_000, learning_rate=2.3e-3, batch_size=64,
        buffer_size=100_000, learning_starts=1_000, gamma=0.99, target_update_interval=10,
        train_freq=256, gradient_steps=128, exploration_fraction=0.16,
        exploration_final_eps=0.04,
    ),
    _zoo(
        "Acrobot-v1", n_timesteps=100_000, learning_rate=6.3e-4, batch_size=128,
        buffer_size=50_000, learning_starts=0, gamma=0.99, target_update_interval=250,
        train_freq=4, gradient_steps=-1, exploration_fraction=0.12,
        exploration_final_eps=0.1,
    ),
    _zoo(
        "MountainCar-v0", n_timesteps=120_000, learning_rate=4e-3, batch_size=128,
        buffer_size=10_000, learning_starts=1_000, gamma=0.98, target_update_interval=600,
        train_freq=16, gradient_steps=8, exploration_fraction=0.2,
        exploration_final_eps=0.07,
    ),
    _zoo(
        "LunarLander-v3", n_timesteps=100_000, learning_rate=6.3e-4, batch_size=128,
        buffer_size=50_000, learning_starts=0, gamma=0.99, target_update_interval=250,
        train_freq=4, gradient_steps=-1, exploration_fraction=0.12,
        exploration_final_eps=0.1,
    ),
)  # fmt: skip

# Schedule lengths, as fractions of the preset's budget (Preset.schedule): epsilon,
# learning rate, PER beta. Where a preset does not use one (no learning_rate_end, no
# prioritized replay) its fraction keeps DqnConfig's 100,000 steps at the budget.
_EMBER = _preset(
    "ember", "CartPole-v1", 50_000,
    {"epsilon_decay_steps": 0.2, "learning_rate_decay_steps": 2.0, "per_beta_steps": 2.0},
    "ember-rl's CartPole example",
    hidden_sizes=(64, 64), learning_rate=1e-3, batch_size=64,
    buffer_capacity=10_000, min_replay_size=1_000, target_update_freq=200,
    epsilon_start=1.0, epsilon_end=0.01, gamma=0.99,
)  # fmt: skip

_SEARCH = "bench/preset_search.py on tuning seeds 1000-1019 (bench/results/preset_search_*.json)"

_RAINBOW = (
    _preset(
        "rainbow", "CartPole-v1", 35_000,
        # epsilon over 8,000 of the 35,000 steps; beta over 100,000 (it ends near 0.57)
        {"epsilon_decay_steps": 8 / 35, "learning_rate_decay_steps": 1.0,
         "per_beta_steps": 100 / 35},
        _SEARCH,
        hidden_sizes=(64, 64), learning_rate=2.5e-3, batch_size=128,
        buffer_capacity=50_000, min_replay_size=1_000, target_update_freq=1, tau=0.01,
        epsilon_start=1.0, epsilon_end=0.01, gamma=0.99,
        train_freq=2, gradient_steps=1, double_dqn=True, dueling=True, max_grad_norm=10.0,
        layer_norm=True, learning_rate_end=1e-5, n_step=3,
        prioritized_replay=True,
    ),
    _preset(
        "rainbow", "Acrobot-v1", 100_000,
        {"epsilon_decay_steps": 0.12, "learning_rate_decay_steps": 1.0, "per_beta_steps": 1.0},
        _SEARCH,
        hidden_sizes=(64, 64), learning_rate=1e-3, batch_size=128,
        buffer_capacity=50_000, min_replay_size=1_000, target_update_freq=1, tau=0.01,
        epsilon_start=1.0, epsilon_end=0.01, gamma=0.99,
        train_freq=4, gradient_steps=2, double_dqn=True, dueling=True, max_grad_norm=10.0,
        layer_norm=True, learning_rate_end=1e-5,
        distributional="c51", v_min=-100.0, v_max=0.0,
    ),
    _preset(
        "rainbow", "MountainCar-v0", 120_000,
        # beta over 100,000 of the 120,000 steps
        {"epsilon_decay_steps": 0.2, "learning_rate_decay_steps": 1.0, "per_beta_steps": 5 / 6},
        _SEARCH,
        hidden_sizes=(128, 128), learning_rate=4e-3, batch_size=128,
        buffer_capacity=10_000, min_replay_size=1_000, target_update_freq=600,
        epsilon_start=1.0, epsilon_end=0.07, gamma=0.98,
        train_freq=16, gradient_steps=8, double_dqn=True, dueling=True, max_grad_norm=10.0,
        n_step=3, learning_rate_end=1e-4,
        prioritized_replay=True,
    ),
    _preset(
        "rainbow", "LunarLander-v3", 200_000,
        {"epsilon_decay_steps": 0.12, "learning_rate_decay_steps": 1.0, "per_beta_steps": 0.5},
        "bench/preset_search.py on tuning seeds 1000-1005 (bench/results/preset_search_*.json)",
        hidden_sizes=(128, 128), learning_rate=6.3e-4, batch_size=128,
        buffer_capacity=100_000, min_replay_size=1_000, target_update_freq=1, tau=0.01,
        epsilon_start=1.0, epsilon_end=0.05, gamma=0.99,
        train_freq=4, gradient_steps=2, double_dqn=True, dueling=True, max_grad_norm=10.0,
        layer_norm=True, n_step=3, learning_rate_end=1e-5,
        distributional="c51", v_min=-100.0, v_max=300.0,
    ),
)  # fmt: skip


def _by_env(*presets: Preset) -> dict[str, dict[str, Preset]]:
    out: dict[str, dict[str, Preset]] = {}
    for p in presets:
        out.setdefault(p.env_id, {})[p.name] = p
    return out


PRESETS: dict[str, dict[str, Preset]] = _by_env(*_RAINBOW, *_ZOO, _EMBER)
"""``PRESETS[env_id][name]``: every preset, by the env it was tuned for."""

DEFAULT_PRESET = "rainbow"
"""The preset ``ember-np train ENV_ID`` uses where the env has one (else ``zoo``)."""


def presets_for_env(env_id: str) -> dict[str, Preset]:
    """The presets tuned for ``env_id`` (a gymnasium id), by name; empty if none."""
    return dict(PRESETS.get(env_id, {}))


def default_preset(env_id: str) -> Preset | None:
    """The preset ``ember-np train env_id`` trains with: ``rainbow`` where the env has
    one (CartPole-v1, Acrobot-v1, MountainCar-v0, LunarLander-v3), else ``zoo``, else
    None (the command line then uses ``DqnConfig()``)."""
    presets = PRESETS.get(env_id, {})
    return presets.get(DEFAULT_PRESET) or presets.get("zoo")


preset_for_env = default_preset
"""The old name of :func:`default_preset`."""


def _names() -> list[str]:
    return sorted({name for presets in PRESETS.values() for name in presets})


def preset_names(env_id: str | None = None) -> dict[str, Preset]:
    """Every name :func:`get_preset` takes for ``env_id`` (besides a FILE.json), with the
    preset it means: ``ENV/NAME`` for any env's preset (``CartPole-v1/zoo``), an env id
    alone for that env's ``zoo`` preset (the old spelling), ``env_id``'s own preset
    names, and a name only one env has (``ember``) for that env's preset. The error
    for an unknown name lists exactly these."""
    plain = None if env_id is None else _plain(env_id)
    own = PRESETS.get(plain or "", {})
    out: dict[str, Preset] = dict(own)
    for name in _names():
        envs = [e for e, presets in PRESETS.items() if name in presets]
        if name not in own and len(envs) == 1:
            out[name] = PRESETS[envs[0]][name]
    for e, presets in PRESETS.items():
        out.update({f"{e}/{name}": p for name, p in presets.items()})
    out.update({e: presets["zoo"] for e, presets in PRESETS.items() if "zoo" in presets})
    return out


def get_preset(name: str, env_id: str | None = None) -> Preset:
    """The preset called ``name`` for ``env_id``, or read from ``name`` if it ends in ``.json``.

    ``name`` is one of :func:`preset_names` (``env_id``'s own ``rainbow``, ``zoo``,
    ``ember``; any env's as ``ENV/NAME``; an env id, meaning that env's ``zoo``
    preset; ``ember``, the one name only one env has) or a FILE.json. A name that
    several envs have (``rainbow``, ``zoo``) needs ``env_id`` or the ``ENV/NAME``
    spelling. A preset of another env may be used; a run records it by
    :meth:`Preset.name_for` (``CartPole-v1/zoo``), never as the env's own. Anything
    else raises ValueError listing what ``env_id`` can take.
    """
    if name.endswith(".json"):
        return load_preset_file(name, env_id)
    names = preset_names(env_id)
    if name in names:
        return names[name]
    plain, _, short = name.rpartition("/")
    if plain not in PRESETS:  # not ENV/NAME with a NAME that ENV has not
        plain, short = _plain(env_id or ""), name
    envs = [e for e, presets in PRESETS.items() if short in presets]
    if envs and not plain:
        raise ValueError(
            f"preset {name!r} exists for {', '.join(envs)}: say which env, e.g. "
            f"get_preset({name!r}, env_id={envs[0]!r}) or get_preset('{envs[0]}/{name}')"
        )
    if envs:
        name = short
        have = ", ".join(PRESETS.get(plain, {})) or "none"
        other = ", ".join(f"{e}/{name}" for e in envs)
        raise ValueError(
            f"no {name!r} preset for {plain} (its presets: {have}); another env's is named "
            f"ENV/NAME: {other}; or give a preset FILE.json or --set fields"
        )
    raise ValueError(f"unknown preset {name!r}; known presets: {_listing(env_id)}")


def _listing(env_id: str | None) -> str:
    """What :func:`preset_names` holds for ``env_id``, in words (the error's listing)."""
    names = preset_names(env_id)
    parts = []
    if env_id is not None:
        own = PRESETS.get(_plain(env_id), {})
        parts.append(f"{_plain(env_id)}'s own: {', '.join(own) or 'none'}")
    else:
        own = {}
    single = [n for n in names if "/" not in n and n not in PRESETS and n not in own]
    parts += [f"{n} alone for {names[n].env_id}/{n}" for n in single]
    parts.append("any env's as ENV/NAME: " + ", ".join(n for n in names if "/" in n))
    parts.append("an env id alone for ENV/zoo: " + ", ".join(n for n in names if n in PRESETS))
    return "; ".join(parts) + "; or a preset FILE.json"


#: The top-level keys of a preset file that holds a "dqn" object (what ``ember-np tune`` writes).
PRESET_FILE_KEYS = ("dqn", "env_id", "format", "schedule", "source", "steps")


def load_preset_file(path: str | Path, env_id: str | None = None) -> Preset:
    """A preset from a JSON file: ``{"dqn": {DqnConfig fields}, "env_id": ..., "steps": N,
    "schedule": {field: fraction}}`` (what ``ember-np tune`` writes; all but ``dqn``
    optional) or a plain ``DqnConfig.to_dict()``. ``schedule`` gives schedule lengths
    as fractions of the run (:attr:`Preset.schedule`), which must agree with ``dqn`` at
    ``steps``; without it the file's lengths are kept at any ``--steps``. Anything else
    raises ValueError naming the file: unknown top-level keys, a file that is not UTF-8
    JSON, a schedule that disagrees with ``dqn``, and, when ``env_id`` is given (the env
    about to be trained), a file made for another env."""
    path = Path(path)
    data = read_preset_json(path, 'a preset is an object of DqnConfig fields, e.g. {"gamma": 0.99}')
    if "dqn" in data:
        unknown = sorted(set(data) - set(PRESET_FILE_KEYS))
        if unknown:
            raise ValueError(
                f"preset file {path}: unknown top-level key(s) {unknown}; a preset file has "
                f'{list(PRESET_FILE_KEYS)}, with the DqnConfig fields inside "dqn"'
            )
    body = data.get("dqn", data)
    steps = data.get("steps", 100_000) if "dqn" in data else 100_000
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"preset file {path}: steps must be a positive integer, got {steps!r}")
    try:
        config = DqnConfig.from_dict(body)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"preset file {path}: {exc}") from None
    try:
        schedule = check_schedule(data.get("schedule", {}) if "dqn" in data else {})
    except ValueError as exc:
        raise ValueError(f"preset file {path}: {exc}") from None
    try:
        resolved = resolve_schedule(schedule, steps)
        for key, n in resolved.items():
            if key in body and body[key] != n:
                raise ValueError(
                    f"schedule {key} {schedule[key]:g} of its {steps:,} steps is {n:,}, but "
                    f"dqn {key} is {body[key]!r}: make them agree, or remove schedule {key} "
                    f"to keep {body[key]!r} at any --steps"
                )
        config = config.replace(**resolved)
    except ValueError as exc:
        raise ValueError(f"preset file {path}: {exc}") from None
    file_env = check_file_env(path, data.get("env_id", "") if "dqn" in data else "", env_id)
    return Preset(path.stem, file_env, config, steps, str(data.get("source", path)),
                  schedule=schedule)  # fmt: skip

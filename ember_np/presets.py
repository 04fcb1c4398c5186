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
The old spelling, an env id as the name (``get_preset("CartPole-v1")``,
``--preset CartPole-v1``), still means that env's ``zoo`` preset.

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
exploration_fraction       epsilon_decay_steps = fraction * n_timesteps
exploration_final_eps      epsilon_end (epsilon_start 1.0)
policy_kwargs.net_arch     hidden_sizes
(SB3 defaults)             tau 1.0, max_grad_norm 10, Huber loss (delta 1)
n_timesteps                Preset.steps
=========================  ======================================================
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember_np.dqn.config import DqnConfig

__all__ = [
    "DEFAULT_PRESET",
    "PRESETS",
    "Preset",
    "default_preset",
    "get_preset",
    "load_preset_file",
    "preset_for_env",
    "presets_for_env",
]


@dataclass(frozen=True)
class Preset:
    """A named configuration: what to train, for how long, with which settings."""

    name: str
    env_id: str
    config: DqnConfig
    steps: int
    source: str
    sb3_kwargs: dict[str, Any] | None = None
    """The same settings as Stable-Baselines3 DQN arguments (Zoo presets only)."""


def _zoo(env_id: str, n_timesteps: int, **sb3: Any) -> Preset:
    """A Zoo preset from its row of ``hyperparams/dqn.yml``: ``sb3`` holds the
    row's SB3 DQN arguments (learning_rate, batch_size, buffer_size,
    learning_starts, gamma, target_update_interval, train_freq, gradient_steps,
    exploration_fraction, exploration_final_eps; net_arch defaults to (256, 256))."""
    net_arch = tuple(sb3.pop("net_arch", (256, 256)))
    config = DqnConfig(
        gamma=sb3["gamma"],
        learning_rate=sb3["learning_rate"],
        batch_size=sb3["batch_size"],
        buffer_capacity=sb3["buffer_size"],
        min_replay_size=max(sb3["learning_starts"], sb3["batch_size"]),
        target_update_freq=sb3["target_update_interval"],
        hidden_sizes=net_arch,
        epsilon_start=1.0,
        epsilon_end=sb3["exploration_final_eps"],
        epsilon_decay_steps=int(sb3["exploration_fraction"] * n_timesteps),
        train_freq=sb3["train_freq"],
        gradient_steps=sb3["gradient_steps"],
        tau=1.0,
        max_grad_norm=10.0,
        huber_delta=1.0,
    )
    sb3_kwargs = dict(sb3, policy_kwargs={"net_arch": list(net_arch)})
    return Preset(
        "zoo", env_id, config, n_timesteps, "rl-baselines3-zoo hyperparams/dqn.yml", sb3_kwargs
    )


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

_EMBER = Preset(
    "ember",
    "CartPole-v1",
    DqnConfig(
        hidden_sizes=(64, 64), learning_rate=1e-3, batch_size=64,
        buffer_capacity=10_000, min_replay_size=1_000, target_update_freq=200,
        epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=10_000, gamma=0.99,
    ),
    50_000,
    "ember-rl's CartPole example",
)  # fmt: skip

_SEARCH = "bench/preset_search.py on tuning seeds 1000-1019 (bench/results/preset_search_*.json)"

_RAINBOW = (
    Preset(
        "rainbow",
        "CartPole-v1",
        DqnConfig(
            hidden_sizes=(64, 64), learning_rate=2.5e-3, batch_size=128,
            buffer_capacity=50_000, min_replay_size=1_000, target_update_freq=1, tau=0.01,
            epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=8_000, gamma=0.99,
            train_freq=2, gradient_steps=1, double_dqn=True, dueling=True, max_grad_norm=10.0,
            layer_norm=True, learning_rate_end=1e-5, learning_rate_decay_steps=35_000, n_step=3,
            prioritized_replay=True,
        ),
        35_000,
        _SEARCH,
    ),
    Preset(
        "rainbow",
        "Acrobot-v1",
        DqnConfig(
            hidden_sizes=(64, 64), learning_rate=1e-3, batch_size=128,
            buffer_capacity=50_000, min_replay_size=1_000, target_update_freq=1, tau=0.01,
            epsilon_start=1.0, epsilon_end=0.01, epsilon_decay_steps=12_000, gamma=0.99,
            train_freq=4, gradient_steps=2, double_dqn=True, dueling=True, max_grad_norm=10.0,
            layer_norm=True, learning_rate_end=1e-5, learning_rate_decay_steps=100_000,
            distributional="c51", v_min=-100.0, v_max=0.0,
        ),
        100_000,
        _SEARCH,
    ),
    Preset(
        "rainbow",
        "MountainCar-v0",
        DqnConfig(
            hidden_sizes=(128, 128), learning_rate=4e-3, batch_size=128,
            buffer_capacity=10_000, min_replay_size=1_000, target_update_freq=600,
            epsilon_start=1.0, epsilon_end=0.07, epsilon_decay_steps=24_000, gamma=0.98,
            train_freq=16, gradient_steps=8, double_dqn=True, dueling=True, max_grad_norm=10.0,
            n_step=3, learning_rate_end=1e-4, learning_rate_decay_steps=120_000,
            prioritized_replay=True,
        ),
        120_000,
        _SEARCH,
    ),
    Preset(
        "rainbow",
        "LunarLander-v3",
        DqnConfig(
            hidden_sizes=(128, 128), learning_rate=6.3e-4, batch_size=128,
            buffer_capacity=100_000, min_replay_size=1_000, target_update_freq=1, tau=0.01,
            epsilon_start=1.0, epsilon_end=0.05, epsilon_decay_steps=24_000, gamma=0.99,
            train_freq=4, gradient_steps=2, double_dqn=True, dueling=True, max_grad_norm=10.0,
            layer_norm=True, n_step=3, learning_rate_end=1e-5, learning_rate_decay_steps=200_000,
            distributional="c51", v_min=-100.0, v_max=300.0,
        ),
        200_000,
        "bench/preset_search.py on tuning seeds 1000-1005 (bench/results/preset_search_*.json)",
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


def get_preset(name: str, env_id: str | None = None) -> Preset:
    """The preset called ``name`` for ``env_id``, or read from ``name`` if it ends in ``.json``.

    ``name`` is a preset name (``rainbow``, ``zoo``, ``ember``), a FILE.json, or,
    the old spelling, an env id, meaning that env's ``zoo`` preset. A name that
    several envs have (``rainbow``, ``zoo``) needs ``env_id``; a name only one env
    has (``ember``) is that env's preset whatever ``env_id`` says (it may be used
    on another env). Anything else raises ValueError saying what exists.
    """
    if name.endswith(".json"):
        return load_preset_file(name, env_id)
    if name in PRESETS:  # the old spelling: an env id meant its RL Zoo preset
        return PRESETS[name]["zoo"]
    if env_id is not None and name in PRESETS.get(env_id, {}):
        return PRESETS[env_id][name]
    envs = [e for e, presets in PRESETS.items() if name in presets]
    if len(envs) == 1:
        return PRESETS[envs[0]][name]
    if not envs:
        raise ValueError(
            f"unknown preset {name!r}; known presets: {', '.join(_names())} (per env: "
            f"{_listing()}), an env id for its zoo preset, or a preset FILE.json"
        )
    if env_id is None:
        raise ValueError(
            f"preset {name!r} exists for {', '.join(envs)}: say which env, e.g. "
            f"get_preset({name!r}, env_id={envs[0]!r})"
        )
    have = ", ".join(PRESETS.get(env_id, {})) or "none"
    raise ValueError(
        f"no {name!r} preset for {env_id} (its presets: {have}); {name!r} exists for "
        f"{', '.join(envs)}; give a preset FILE.json or --set fields instead"
    )


def _listing() -> str:
    return "; ".join(f"{env_id}: {', '.join(p)}" for env_id, p in PRESETS.items())


#: The top-level keys of a preset file that holds a "dqn" object (what ``ember-np tune`` writes).
PRESET_FILE_KEYS = ("dqn", "env_id", "format", "source", "steps")


def load_preset_file(path: str | Path, env_id: str | None = None) -> Preset:
    """A preset from a JSON file: ``{"dqn": {DqnConfig fields}, "env_id": ..., "steps": N}``
    (what ``ember-np tune`` writes; ``env_id``, ``steps``, ``source`` and ``format``
    optional) or a plain ``DqnConfig.to_dict()``. Anything else raises ValueError naming
    the file: unknown top-level keys, a file that is not UTF-8 JSON, and, when
    ``env_id`` is given (the env about to be trained), a file made for another env."""
    path = Path(path)
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read preset file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"preset file {path} is not UTF-8 text (byte {exc.start}: {exc.reason}); save it "
            "as UTF-8 JSON"
        ) from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"preset file {path} is not valid JSON: {exc}") from None
    except RecursionError:  # json recurses once per level: 200,000 nested brackets
        raise ValueError(
            f"preset file {path} nests its JSON too deeply to be a preset: a preset is an "
            'object of DqnConfig fields, e.g. {"gamma": 0.99}'
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"preset file {path} must hold a JSON object, got {type(data).__name__}")
    if "dqn" in data:
        unknown = sorted(set(data) - set(PRESET_FILE_KEYS))
        if unknown:
            raise ValueError(
                f"preset file {path}: unknown top-level key(s) {unknown}; a preset file has "
                f"{list(PRESET_FILE_KEYS)}, with the DqnConfig fields inside \"dqn\""
            )
    body = data.get("dqn", data)
    steps = data.get("steps", 100_000) if "dqn" in data else 100_000
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ValueError(f"preset file {path}: steps must be a positive integer, got {steps!r}")
    try:
        config = DqnConfig.from_dict(body)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"preset file {path}: {exc}") from None
    file_env = data.get("env_id", "") if "dqn" in data else ""
    if not isinstance(file_env, str):
        raise ValueError(f"preset file {path}: env_id must be a string, got {file_env!r}")
    plain = file_env.removeprefix("ember_np/")
    if env_id is not None and plain and plain != env_id.removeprefix("ember_np/"):
        raise ValueError(
            f"preset file {path} was made for env_id {file_env!r}, not {env_id!r}: train "
            f"{file_env}, or remove or change \"env_id\" in the file to use it on {env_id}"
        )
    return Preset(path.stem, file_env, config, steps, str(data.get("source", path)))

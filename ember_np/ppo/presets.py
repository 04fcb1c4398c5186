"""PPO's presets: ``ember-np train ENV --algo ppo [--preset NAME]``.

* ``zoo``: the RL Zoo's row for the env (rl-baselines3-zoo, ``hyperparams/ppo.yml``):
  CartPole-v1, Acrobot-v1, MountainCar-v0 and LunarLander-v3 (the Zoo's
  LunarLander-v2 row; v3 changed only bugs in the env). Its ``lin_`` values are
  linear schedules over the run; ``normalize: true`` is SB3's VecNormalize of
  observations and rewards (its ``gamma`` the algorithm's, as the Zoo sets it).
  A preset's ``n_envs`` is the run's number of envs unless ``--num-envs`` says
  otherwise.
* ``ember``: ember_np's own, chosen on tuning seeds (``bench/preset_search.py``):
  CartPole-v1 (the Zoo's row with 10 epochs over 64-step rollouts), Acrobot-v1,
  MountainCar-v0 and LunarLander-v3 (the Zoo's rows with a linear learning rate and
  10 epochs).
* ``sb3``: Stable-Baselines3's ``PPO`` defaults (one env, 2,048 steps a rollout),
  for any env; the default of an env without a ``zoo`` row.

A name of another env's preset, ``ENV/NAME`` (``CartPole-v1/zoo``), borrows it;
the run records it that way, never as the env's own. A ``FILE.json`` is a preset
file, as ``ember-np tune --algo ppo`` writes its best trial.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ember_np._config import check_file_env, preset_name_for, read_preset_json
from ember_np._config import plain_env_id as _plain
from ember_np.ppo.config import PPOConfig

__all__ = ["PPOPreset", "PRESETS", "default_preset", "get_preset", "load_preset_file",
           "presets_for_env"]  # fmt: skip

ZOO_SOURCE = "rl-baselines3-zoo hyperparams/ppo.yml"


@dataclass(frozen=True)
class PPOPreset:
    """A named PPO configuration: the settings, the budget and the number of envs."""

    name: str
    env_id: str
    """The env it was made for ("" for any env)."""
    config: PPOConfig
    """The settings; :meth:`config_for` sets ``schedule_steps`` to the run's budget."""
    steps: int | None
    """Env steps (all envs' transitions) of a run at the preset's own budget; None: the
    run's default (``--steps``' default)."""
    num_envs: int
    """Envs stepped together (the Zoo's ``n_envs``); ``--num-envs`` overrides it."""
    source: str
    sb3_kwargs: dict[str, Any] | None = None
    """The same settings as SB3 ``PPO`` arguments, and ``normalize`` (Zoo presets)."""

    def config_for(self, steps: int) -> PPOConfig:
        """The config of a run of ``steps`` env steps: linear schedules span them."""
        return self.config.replace(schedule_steps=int(steps))

    def name_for(self, env_id: str) -> str:
        """``name`` on its own env (or any env's preset), ``ENV/NAME`` on another env."""
        return preset_name_for(self.name, self.env_id, env_id)


def _zoo(env_id: str, steps: int, n_envs: int, normalize: bool = False,
         **fields: Any) -> PPOPreset:  # fmt: skip
    """A Zoo row: ``fields`` are PPOConfig's, with ``lin_`` values as linear schedules."""
    config = PPOConfig(normalize_obs=normalize, normalize_reward=normalize,
                       schedule_steps=steps, **fields)  # fmt: skip
    sb3: dict[str, Any] = {
        k: (f"lin_{fields[k]}" if fields.get(f"{s}_schedule") == "linear" else fields[k])
        for k, s in (("learning_rate", "lr"), ("clip_range", "clip"))
        if k in fields
    }
    sb3.update({k: v for k, v in fields.items() if k not in sb3 and not k.endswith("schedule")})
    sb3.update(n_envs=n_envs, n_timesteps=steps, normalize=normalize)
    return PPOPreset("zoo", env_id, config, steps, n_envs, ZOO_SOURCE, sb3)


#: env id -> preset name -> preset (the ``zoo`` rows).
PRESETS: dict[str, dict[str, PPOPreset]] = {
    "CartPole-v1": {"zoo": _zoo(
        "CartPole-v1", 100_000, 8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
        n_epochs=20, ent_coef=0.0, learning_rate=1e-3, lr_schedule="linear", clip_range=0.2,
        clip_schedule="linear")},
    "Acrobot-v1": {"zoo": _zoo(
        "Acrobot-v1", 1_000_000, 16, normalize=True, n_steps=256, gae_lambda=0.94,
        gamma=0.99, n_epochs=4, ent_coef=0.0)},
    "MountainCar-v0": {"zoo": _zoo(
        "MountainCar-v0", 1_000_000, 16, normalize=True, n_steps=16, gae_lambda=0.98,
        gamma=0.99, n_epochs=4, ent_coef=0.0)},
    "LunarLander-v3": {"zoo": _zoo(
        "LunarLander-v3", 1_000_000, 16, n_steps=1024, batch_size=64, gae_lambda=0.98,
        gamma=0.999, n_epochs=4, ent_coef=0.01)},
}  # fmt: skip

#: ember_np's own CartPole-v1 preset: the Zoo's row with 10 epochs (not 20) over rollouts
#: of 64 steps per env (not 32), so half the gradient passes per transition.
PRESETS["CartPole-v1"]["ember"] = PPOPreset(
    "ember", "CartPole-v1",
    PRESETS["CartPole-v1"]["zoo"].config.replace(n_epochs=10, n_steps=64), 100_000, 8,
    "ember_np's own: the Zoo's CartPole-v1 row with n_epochs=10, n_steps=64, chosen on "
    "tuning seeds 1000-1019 (never the reported 0-19) among 4 candidates by the IQM of the "
    "final policy on 20 fresh episodes per seed, then wall time to an IQM of 475")  # fmt: skip

#: ember_np's own Acrobot-v1 and MountainCar-v0 presets: the Zoo's rows with a learning
#: rate falling linearly to 0 over the run and 10 epochs per rollout (not 4).
_EMBER_1M = ("ember_np's own: the Zoo's {env} row with lr_schedule=linear, n_epochs=10, "
             "chosen on tuning seeds 1000-1019 (never the reported 0-19) among 4 candidates "
             "by the IQM of the final policy on 20 fresh episodes per seed "
             "(bench/preset_search.py --algo ppo)")  # fmt: skip
for _env in ("Acrobot-v1", "MountainCar-v0"):
    _zoo_row = PRESETS[_env]["zoo"]
    PRESETS[_env]["ember"] = PPOPreset(
        "ember", _env, _zoo_row.config.replace(lr_schedule="linear", n_epochs=10),
        _zoo_row.steps, _zoo_row.num_envs, _EMBER_1M.format(env=_env))  # fmt: skip

#: ember_np's own LunarLander-v3 preset: the same recipe, chosen on fewer tuning seeds (a
#: seed is ~1.4 CPU minutes on gymnasium's Box2D env, against seconds on a compiled one).
_LL_ZOO = PRESETS["LunarLander-v3"]["zoo"]
PRESETS["LunarLander-v3"]["ember"] = PPOPreset(
    "ember", "LunarLander-v3", _LL_ZOO.config.replace(lr_schedule="linear", n_epochs=10),
    _LL_ZOO.steps, _LL_ZOO.num_envs,
    "ember_np's own: the Zoo's LunarLander-v3 row with lr_schedule=linear, n_epochs=10, "
    "chosen on tuning seeds 1000-1009 (never the reported 0-19) against the Zoo's row by "
    "the IQM of the final policy on 20 fresh episodes per seed "
    "(bench/preset_search.py --algo ppo)")  # fmt: skip

#: SB3's PPO defaults, for any env.
SB3_DEFAULTS = PPOPreset("sb3", "", PPOConfig(), None, 1,
                         "Stable-Baselines3 PPO's defaults")  # fmt: skip


def presets_for_env(env_id: str) -> dict[str, PPOPreset]:
    """``env_id``'s own presets by name (``zoo`` where the Zoo has a row) and ``sb3``."""
    return {**PRESETS.get(_plain(env_id), {}), "sb3": SB3_DEFAULTS}


def default_preset(env_id: str) -> PPOPreset:
    """The env's ``zoo`` preset where it has one, else ``sb3``."""
    return PRESETS.get(_plain(env_id), {}).get("zoo", SB3_DEFAULTS)


def get_preset(name: str, env_id: str) -> PPOPreset:
    """The preset ``name`` for ``env_id``: one of :func:`presets_for_env`, another
    env's as ``ENV/NAME``, or a ``FILE.json`` (:func:`load_preset_file`); ValueError
    listing what ``env_id`` takes."""
    if name.endswith(".json"):
        return load_preset_file(name, env_id)
    own: Mapping[str, PPOPreset] = presets_for_env(env_id)
    if name in own:
        return own[name]
    plain, _, short = name.rpartition("/")
    if short in PRESETS.get(plain, {}):
        return PRESETS[plain][short]
    borrowed = ", ".join(f"{e}/{n}" for e, presets in PRESETS.items() for n in presets)
    raise ValueError(
        f"unknown ppo preset {name!r} for {_plain(env_id)} (its presets: {', '.join(own)}; "
        f"other envs': {borrowed}); leave --preset out for the env's default, or use "
        "--set fields, or a preset FILE.json"
    )


#: The top-level keys of a PPO preset file (what ``ember-np tune --algo ppo`` writes).
PRESET_FILE_KEYS = ("algorithm", "env_id", "format", "num_envs", "ppo", "source", "steps")


def load_preset_file(path: str | Path, env_id: str | None = None) -> PPOPreset:
    """A preset from a JSON file: ``{"ppo": {PPOConfig fields}, "env_id": ..., "steps":
    N, "num_envs": N}`` (what ``ember-np tune --algo ppo`` writes; all but ``ppo``
    optional). ValueError naming the file for anything else: unknown top-level keys,
    a file that is not UTF-8 JSON, a bad config, and (``env_id`` given: the env about
    to be trained) a file made for another env."""
    path = Path(path)
    data = read_preset_json(path, 'a PPO preset is {"ppo": {PPOConfig fields}}')
    unknown = sorted(set(data) - set(PRESET_FILE_KEYS))
    if "ppo" not in data or unknown:
        raise ValueError(
            f"preset file {path}: expected the keys {list(PRESET_FILE_KEYS)}, with the "
            f'PPOConfig fields inside "ppo"; got {sorted(data)}'
        )
    if data.get("algorithm", "ppo") != "ppo":
        raise ValueError(f"preset file {path} is a {data['algorithm']!r} preset: train it "
                         f"with --algo {data['algorithm']}")  # fmt: skip
    counts: dict[str, Any] = {}
    for key, default in (("steps", None), ("num_envs", 1)):
        n = data.get(key, default)
        if n is None:
            counts[key] = n
            continue
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"preset file {path}: {key} must be a positive integer, got {n!r}")
        counts[key] = n
    try:
        config = PPOConfig.from_dict(data["ppo"])
    except (ValueError, TypeError) as exc:
        raise ValueError(f"preset file {path}: {exc}") from None
    file_env = check_file_env(path, data.get("env_id", ""), env_id)
    return PPOPreset(path.stem, file_env, config, counts["steps"], counts["num_envs"],
                     str(data.get("source", path)))  # fmt: skip

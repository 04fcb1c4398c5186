"""DQN's presets, by the name the guides and ``ember-np train --preset`` use.

The presets live in DQN's package (:mod:`ember_np.dqn.presets`: the
``rainbow``, ``zoo`` and ``ember`` configs per env, preset files, schedule
fractions), which DQN's registry entry reads; this module keeps
``from ember_np.presets import get_preset`` working.
"""

from __future__ import annotations

from ember_np.dqn.presets import (
    DEFAULT_PRESET,
    PRESETS,
    Preset,
    check_schedule,
    default_preset,
    get_preset,
    load_preset_file,
    preset_for_env,
    preset_names,
    presets_for_env,
    resolve_schedule,
)

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

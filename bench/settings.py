"""The speed-comparison settings S1 and S2, as DqnConfigs.

S1 is ember-rl's CartPole config (one update per env step), the ``ember``
preset; S2 is the RL Zoo's CartPole-v1 DQN, CartPole-v1's ``zoo`` preset.
tests/test_presets.py checks both against ember-rl's CartPole example and
rl-baselines3-zoo's hyperparams/dqn.yml.
"""

from __future__ import annotations

from ember_np.presets import get_preset

S1 = get_preset("ember").config
S2 = get_preset("zoo", "CartPole-v1").config

CONFIGS = {"S1": S1, "S2": S2}

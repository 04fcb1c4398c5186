"""Presets: the RL Zoo's DQN hyperparameters (ANCHORS.md) and ember-rl's config."""

from __future__ import annotations

import pytest

from ember_np import DqnConfig
from ember_np.presets import PRESETS, get_preset, preset_for_env

# rl-baselines3-zoo hyperparams/dqn.yml, as listed in ANCHORS.md:
# n_timesteps, lr, batch, buffer, learning_starts, gamma, target_update, train_freq,
# gradient_steps, exploration_fraction, exploration_final_eps
ZOO = {
    "CartPole-v1": (50_000, 2.3e-3, 64, 100_000, 1_000, 0.99, 10, 256, 128, 0.16, 0.04),
    "Acrobot-v1": (100_000, 6.3e-4, 128, 50_000, 0, 0.99, 250, 4, -1, 0.12, 0.1),
    "MountainCar-v0": (120_000, 4e-3, 128, 10_000, 1_000, 0.98, 600, 16, 8, 0.2, 0.07),
    "LunarLander-v3": (100_000, 6.3e-4, 128, 50_000, 0, 0.99, 250, 4, -1, 0.12, 0.1),
}


@pytest.mark.parametrize("env_id", list(ZOO))
def test_zoo_presets_match_the_table(env_id):
    n, lr, batch, buffer, starts, gamma, target, freq, grad, frac, final = ZOO[env_id]
    p = PRESETS[env_id]
    c = p.config
    assert p.env_id == env_id and p.steps == n
    assert (c.learning_rate, c.batch_size, c.buffer_capacity) == (lr, batch, buffer)
    assert c.min_replay_size == max(starts, batch)
    assert (c.gamma, c.target_update_freq, c.train_freq, c.gradient_steps) == (
        gamma,
        target,
        freq,
        grad,
    )
    assert c.epsilon_decay_steps == int(frac * n) and c.epsilon_end == final
    assert c.epsilon_start == 1.0 and c.hidden_sizes == (256, 256)
    # SB3 defaults the Zoo leaves unset
    assert (c.tau, c.max_grad_norm, c.huber_delta, c.double_dqn) == (1.0, 10.0, 1.0, False)
    assert preset_for_env(env_id) is p


def test_ember_preset_is_ember_rl_cartpole_config():
    c = get_preset("ember").config
    assert c == DqnConfig(
        hidden_sizes=(64, 64), learning_rate=1e-3, batch_size=64, buffer_capacity=10_000,
        min_replay_size=1_000, target_update_freq=200, epsilon_start=1.0, epsilon_end=0.01,
        epsilon_decay_steps=10_000, gamma=0.99,
    )  # fmt: skip


def test_lookup_errors_and_unknown_env():
    with pytest.raises(ValueError, match="unknown preset 'x'; known presets: CartPole-v1"):
        get_preset("x")
    assert preset_for_env("Pong-v5") is None
    assert preset_for_env("ember") is None  # a preset name, not an env id

"""The speed-comparison settings of ANCHORS.md as DqnConfigs (and SB3 kwargs)."""

from __future__ import annotations

from ember_np import DqnConfig

#: S1: ember-rl's CartPole config, one update per env step.
S1 = DqnConfig(
    hidden_sizes=(64, 64),
    learning_rate=1e-3,
    batch_size=64,
    buffer_capacity=10_000,
    min_replay_size=1_000,
    target_update_freq=200,
    epsilon_start=1.0,
    epsilon_end=0.01,
    epsilon_decay_steps=10_000,
    gamma=0.99,
)

#: S2: the RL Zoo's CartPole-v1 DQN (50,000 steps; exploration over 16 % of them).
S2 = DqnConfig(
    hidden_sizes=(256, 256),
    learning_rate=2.3e-3,
    batch_size=64,
    buffer_capacity=100_000,
    min_replay_size=1_000,
    target_update_freq=10,
    train_freq=256,
    gradient_steps=128,
    epsilon_start=1.0,
    epsilon_end=0.04,
    epsilon_decay_steps=8_000,
    gamma=0.99,
    max_grad_norm=10.0,
)

CONFIGS = {"S1": S1, "S2": S2}

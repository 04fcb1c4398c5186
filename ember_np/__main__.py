"""``python -m ember_np``: the smallest real demonstration of the compiled core.

Collects random CartPole-v1 transitions into a CircularBuffer, then fits a
QNetwork to them with DQN updates against a periodically synced target,
printing the loss and the update speed.
"""

from __future__ import annotations

import time

import gymnasium as gym

from ember_np import CircularBuffer, EpisodeStatus, QNetwork, Rng


def main() -> None:
    env = gym.make("CartPole-v1")
    buffer = CircularBuffer(10_000, 4, 2)
    explore = Rng(1)
    obs, _ = env.reset(seed=0)
    for _ in range(5_000):
        action = explore.integers(2)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        status = EpisodeStatus.from_flags(terminated, truncated)
        buffer.push(obs, action, reward, next_obs, status)
        obs = next_obs if not status.is_done else env.reset()[0]
    net = QNetwork((4, 64, 64, 2), seed=0)
    target = net.copy()
    replay = Rng(2)
    start = time.perf_counter()
    for step in range(1, 3_001):
        batch = buffer.sample(64, replay)
        loss = net.update(*batch, target, gamma=0.99, learning_rate=1e-3, max_grad_norm=10.0)
        if step % 200 == 0:
            target.copy_from(net)
        if step % 500 == 0:
            print(f"update {step:5d}  loss {loss:.4f}")
    elapsed = time.perf_counter() - start
    print(f"{3_000 / elapsed:,.0f} updates/s (includes the first call's compile or cache load)")


if __name__ == "__main__":
    main()

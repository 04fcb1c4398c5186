"""``python -m ember_np``: train DQN on CartPole-v1 with ember-rl's config.

Creates a TrainingRun under ``runs/cartpole/v1/``, trains 50,000 env steps
with a greedy evaluation every 10,000 (``best.npz`` keeps the best policy),
then prints the final evaluation and the run directory.
"""

from __future__ import annotations

import time

import gymnasium as gym

from ember_np import DqnAgent, DqnConfig, DqnTrainer, TrainingRun

#: ember-rl's CartPole configuration.
CARTPOLE = DqnConfig(
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


def main(total_steps: int = 50_000, eval_every: int = 10_000, seed: int = 0) -> None:
    env = gym.make("CartPole-v1")
    agent = DqnAgent.for_env(env, CARTPOLE, seed=seed)
    run = TrainingRun.create("cartpole", "v1")
    run.write_config({"env": "CartPole-v1", "seed": seed, "dqn": CARTPOLE.to_dict()})
    trainer = DqnTrainer(env, agent, seed=seed, run=run, checkpoint_freq=eval_every)
    start = time.perf_counter()
    while agent.total_steps < total_steps:
        trainer.train(eval_every)
        report = trainer.eval(10)
        elapsed = time.perf_counter() - start
        print(
            f"step {agent.total_steps:>6}  eval reward {report.mean_reward:6.1f}  "
            f"train reward {trainer.stats.summary()['episode_reward']:6.1f}  "
            f"{agent.total_steps / elapsed:,.0f} steps/s"
        )
    trainer.eval(20).print()
    print(f"best eval reward {trainer.best_eval_reward:.1f}; run directory: {run.dir}")


if __name__ == "__main__":
    main()

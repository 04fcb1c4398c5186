"""A CleanRL-style PPO in eager torch, for bench/ppo_speed.py.

The formulation of CleanRL's single-file ``ppo.py`` (github.com/vwxyzjn/cleanrl,
``cleanrl/ppo.py``), written here for this benchmark: a gymnasium ``SyncVectorEnv``
(same-step autoreset, as the gymnasium version CleanRL targets), rollout tensors
indexed ``[step, env]``, GAE(lambda) by a reverse Python loop, every epoch a fresh
permutation cut into minibatches, advantages normalised per minibatch, the clipped
surrogate, global-norm clipping and Adam, all on one thread. Where the RL Zoo's preset
and CleanRL's defaults differ, the preset wins, so the work matches the other
contestants: the clip range is annealed linearly like the learning rate (SB3's
``lin_0.2``), the value loss is SB3's unclipped mean squared error, and ``ent_coef`` is
0. As in CleanRL, a truncated episode is not bootstrapped (speed does not depend on it).
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical


def layer(n_in: int, n_out: int, gain: float) -> nn.Linear:
    """A linear layer with orthogonal weights (``gain``) and zero biases."""
    lin = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(lin.weight, gain)
    nn.init.zeros_(lin.bias)
    return lin


def mlp(n_in: int, hidden: tuple[int, ...], n_out: int, head_gain: float) -> nn.Sequential:
    """tanh MLP with sqrt(2) hidden gains and ``head_gain`` on the output layer."""
    mods: list[nn.Module] = []
    for width in hidden:
        mods += [layer(n_in, width, np.sqrt(2)), nn.Tanh()]
        n_in = width
    return nn.Sequential(*mods, layer(n_in, n_out, head_gain))


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (SB3's MlpPolicy, CleanRL's ``Agent``)."""

    def __init__(self, obs_size: int, n_actions: int, hidden: tuple[int, ...]) -> None:
        super().__init__()
        self.actor = mlp(obs_size, hidden, n_actions, 0.01)
        self.critic = mlp(obs_size, hidden, 1, 1.0)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x).squeeze(-1)

    def evaluate(
        self, x: torch.Tensor, action: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, its log-probability, the policy's entropy, the value) for ``x``;
        the action is sampled unless given."""
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.value(x)


def greedy_mean(net: ActorCritic, episodes: int, seed: int) -> float:
    """Mean return of ``episodes`` greedy episodes on a fresh CartPole-v1."""
    env = gym.make("CartPole-v1")
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + 10_000 + i)
        done = False
        while not done:
            with torch.no_grad():
                logits = net.actor(torch.as_tensor(obs, dtype=torch.float32))
            obs, reward, terminated, truncated, _ = env.step(int(logits.argmax()))
            total += float(reward)
            done = terminated or truncated
    return total / episodes


def train(z: dict[str, Any], total_steps: int, seed: int, warm: int, episodes: int) -> dict:
    """Train on ``total_steps`` (whole rollouts), time the steady window after ``warm``
    rollouts, and evaluate greedily; the figures bench/ppo_speed.py reports."""
    torch.set_num_threads(1)
    torch.manual_seed(seed)
    np.random.seed(seed)
    n_envs, n_steps = z["n_envs"], z["n_steps"]
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1") for _ in range(n_envs)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    obs_size = int(np.prod(envs.single_observation_space.shape))
    net = ActorCritic(obs_size, int(envs.single_action_space.n), tuple(z["hidden"]))
    opt = torch.optim.Adam(net.parameters(), lr=z["learning_rate"], eps=z["adam_eps"])

    obs = torch.zeros((n_steps, n_envs, obs_size))
    actions = torch.zeros((n_steps, n_envs), dtype=torch.long)
    logprobs = torch.zeros((n_steps, n_envs))
    rewards = torch.zeros((n_steps, n_envs))
    dones = torch.zeros((n_steps, n_envs))
    values = torch.zeros((n_steps, n_envs))

    batch = n_steps * n_envs
    n_updates = total_steps // batch
    next_obs = torch.as_tensor(envs.reset(seed=seed)[0], dtype=torch.float32)
    next_done = torch.zeros(n_envs)
    t0 = time.perf_counter()
    t_mark, steps, steps_mark = t0, 0, 0
    for update in range(n_updates):
        frac = 1.0 - update / n_updates  # SB3's progress_remaining at the rollout's start
        for group in opt.param_groups:
            group["lr"] = frac * z["learning_rate"]
        clip = frac * z["clip_range"]
        for t in range(n_steps):
            obs[t], dones[t] = next_obs, next_done
            with torch.no_grad():
                action, logprob, _, value = net.evaluate(next_obs)
            actions[t], logprobs[t], values[t] = action, logprob, value
            o, r, term, trunc, _ = envs.step(action.numpy())
            rewards[t] = torch.as_tensor(r, dtype=torch.float32)
            next_obs = torch.as_tensor(o, dtype=torch.float32)
            next_done = torch.as_tensor(np.logical_or(term, trunc), dtype=torch.float32)
        steps += batch

        with torch.no_grad():  # GAE(lambda), backwards over the rollout
            next_value = net.value(next_obs)
            advantages = torch.zeros_like(rewards)
            last = torch.zeros(n_envs)
            for t in reversed(range(n_steps)):
                if t == n_steps - 1:
                    nonterminal, following = 1.0 - next_done, next_value
                else:
                    nonterminal, following = 1.0 - dones[t + 1], values[t + 1]
                delta = rewards[t] + z["gamma"] * following * nonterminal - values[t]
                last = delta + z["gamma"] * z["gae_lambda"] * nonterminal * last
                advantages[t] = last
            returns = advantages + values

        b_obs, b_actions = obs.reshape(batch, obs_size), actions.reshape(-1)
        b_logp, b_adv = logprobs.reshape(-1), advantages.reshape(-1)
        b_ret = returns.reshape(-1)
        mb = z["batch_size"]
        for _ in range(z["n_epochs"]):
            order = torch.randperm(batch)
            for start in range(0, batch, mb):
                idx = order[start : start + mb]
                _, new_logp, entropy, new_value = net.evaluate(b_obs[idx], b_actions[idx])
                ratio = (new_logp - b_logp[idx]).exp()
                adv = b_adv[idx]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - clip, 1 + clip)).mean()
                v_loss = ((new_value - b_ret[idx]) ** 2).mean()  # SB3's: no 0.5, no clip
                loss = pg_loss - z["ent_coef"] * entropy.mean() + z["vf_coef"] * v_loss
                opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(net.parameters(), z["max_grad_norm"])
                opt.step()
        if update + 1 == warm:
            t_mark, steps_mark = time.perf_counter(), steps
    t_end = time.perf_counter()
    envs.close()
    return {
        "window_steps": steps - steps_mark, "window_s": t_end - t_mark,
        "steps_per_s": (steps - steps_mark) / (t_end - t_mark), "steps": steps,
        "train_s": t_end - t0, "compile_s": None,
        "eval_mean": greedy_mean(net, episodes, seed),
    }  # fmt: skip

"""PPO's whole update on one rollout: ember_np against torch and against its FLOP floor.

The case is the RL Zoo's CartPole-v1 preset (rl-baselines3-zoo ``hyperparams/ppo.yml``):
8 envs x 32 steps = 256 transitions per rollout, minibatches of 256, 20 epochs, so
20 gradient steps per update, on SB3's MlpPolicy (separate 64x64 tanh actor and
critic). Both sides do the same work per update: every epoch a fresh shuffle, the
minibatch's forward pass through both networks, the categorical log-probabilities
and entropy, the clipped surrogate, the value loss and the entropy bonus, the
backward pass, global-norm clipping at 0.5 and an Adam step (eps 1e-5), in float32
on one thread. The torch side is the eager-mode code a torch user would write (the
formulation of CleanRL's ``ppo.py``, with SB3's unclipped MSE value loss), not a copy
of either.

The *floor* is the time the update's matrix products would take at the single-thread
sgemm rate of the BLAS ember_np's kernels call (``bench/floor.py``'s unit, measured in
the same run): for every minibatch, each layer's forward product, its weight
gradient, and its input gradient (not for the layers that read the observation).
Everything else is counted as free, so no implementation reaches it.

Run: ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/ppo_update.py``
(``--quick`` for a short check; torch is skipped when it is not installed).
``bench/test_bench_ppo.py`` times the same update under pytest-benchmark.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).parent))

from floor import best_seconds, machine, sgemm_rate  # noqa: E402

from ember_np.nn.skinny import product  # noqa: E402
from ember_np.ppo.config import PPOConfig  # noqa: E402
from ember_np.ppo.network import A_OFF, N_IN, N_OUT, SRC, W_OFF, ActorCritic  # noqa: E402
from ember_np.ppo.update import (  # noqa: E402
    N_STATS,
    Rollout,
    train_epochs,
    update,
    update_settings,
)
from ember_np.rng import Rng  # noqa: E402

#: The RL Zoo's CartPole-v1 row of ppo.yml (its learning rate and clip range are
#: linear schedules from these values; an update at the run's start uses them).
ZOO_CARTPOLE = PPOConfig(n_steps=32, batch_size=256, n_epochs=20, gamma=0.98,
                         gae_lambda=0.8, ent_coef=0.0, learning_rate=1e-3,
                         clip_range=0.2)  # fmt: skip
OBS_SIZE, N_ACTIONS = 4, 2  # CartPole-v1
N_ENVS = 8  # the Zoo preset's n_envs


def rollout_arrays(config: PPOConfig, obs_size: int, n_actions: int, seed: int = 0) -> dict:
    """A rollout's flat arrays (float32, int64 actions) of random but plausible values."""
    rng = np.random.default_rng(seed)
    n = config.n_steps * N_ENVS
    logits = rng.standard_normal((n, n_actions)) * 0.1
    actions = rng.integers(n_actions, size=n)
    logp = logits[np.arange(n), actions] - np.log(np.exp(logits).sum(axis=1))
    return {
        "obs": rng.standard_normal((n, obs_size)).astype(np.float32),
        "actions": actions.astype(np.int64),
        "old_logp": logp.astype(np.float32),
        "advantages": rng.standard_normal(n).astype(np.float32),
        "returns": rng.standard_normal(n).astype(np.float32) * 5,
        "old_values": rng.standard_normal(n).astype(np.float32),
    }


def update_flops(net: ActorCritic, batch: int) -> int:
    """The FLOPs of one minibatch's products (see the module docstring)."""
    flops = 0
    for row in net.layers:
        product = 2 * batch * int(row[N_IN]) * int(row[N_OUT])
        flops += 2 * product + (product if row[SRC] >= 0 else 0)
    return flops


def rollout_flops(config: PPOConfig, obs_size: int, n_actions: int) -> int:
    """The FLOPs of one update: every epoch's minibatches (the last one may be smaller)."""
    net = ActorCritic(obs_size, n_actions, config, Rng(0))
    n = config.n_steps * N_ENVS
    sizes = [config.batch_size] * (n // config.batch_size)
    if n % config.batch_size:
        sizes.append(n % config.batch_size)
    return config.n_epochs * sum(update_flops(net, b) for b in sizes)


def ember_update(config: PPOConfig, obs_size: int, n_actions: int) -> Callable[[], Any]:
    """One ember_np update of ``config`` on a fixed rollout, as the training loops run
    it (the compiled ``train_epochs``, called from the compiled loop or the agent), as a
    call without arguments (the parameters move on from call to call, as in training)."""
    net = ActorCritic(obs_size, n_actions, config, Rng(0))
    data = rollout_arrays(config, obs_size, n_actions)
    n = len(data["actions"])
    rollout = Rollout(**data, valid=np.ones(n, dtype=np.bool_),
                      masks=np.zeros((n, 0), dtype=np.bool_))  # fmt: skip
    settings = update_settings(config, config.learning_rate, config.clip_range)
    state, rng, stats = net.state, Rng(1), np.zeros(N_STATS)
    return lambda: train_epochs(state, rollout, settings, rng.state, stats)


@numba.njit  # not cached (nor the two below): they must follow the kernels they call
def _block(flat: np.ndarray, layers: np.ndarray, batch: int, l: int, width: int) -> np.ndarray:
    """Layer ``l``'s (batch, width) block of a flat activation workspace."""
    start = batch * layers[l, A_OFF]
    return flat[start : start + batch * width].reshape((batch, width))


@numba.njit
def _weights(flat: np.ndarray, layers: np.ndarray, l: int) -> np.ndarray:
    """Layer ``l``'s (n_in, n_out) weights in a flat parameter (or gradient) vector."""
    off, n_in, n_out = layers[l, W_OFF], layers[l, N_IN], layers[l, N_OUT]
    return flat[off : off + n_in * n_out].reshape((n_in, n_out))


@numba.njit(nogil=True)
def _products(params: np.ndarray, layers: np.ndarray, x: np.ndarray, acts: np.ndarray,
              dacts: np.ndarray, grads: np.ndarray, minibatches: int) -> None:  # fmt: skip
    """The matrix products of ``minibatches`` forward and backward passes, exactly as
    the network's kernels call them, and nothing else."""
    b = x.shape[0]
    for _ in range(minibatches):
        for l in range(layers.shape[0]):
            src, n_in = layers[l, SRC], layers[l, N_IN]
            h = x if src < 0 else _block(acts, layers, b, src, n_in)
            product(h, _weights(params, layers, l), _block(acts, layers, b, l, layers[l, N_OUT]),
                    False, False, 0.0)  # fmt: skip
        for l in range(layers.shape[0] - 1, -1, -1):
            src, n_in = layers[l, SRC], layers[l, N_IN]
            d = _block(dacts, layers, b, l, layers[l, N_OUT])
            h = x if src < 0 else _block(acts, layers, b, src, n_in)
            product(h, d, _weights(grads, layers, l), True, False, 0.0)
            if src >= 0:
                product(d, _weights(params, layers, l), _block(dacts, layers, b, src, n_in),
                        False, True, 0.0)  # fmt: skip


def ember_products(config: PPOConfig, obs_size: int, n_actions: int) -> Callable[[], Any]:
    """The update's matrix products alone (:func:`_products`), for as many minibatches
    as an update has: what the update would cost if everything else were free."""
    net = ActorCritic(obs_size, n_actions, config, Rng(0))
    n = config.n_steps * N_ENVS
    assert n % config.batch_size == 0, "a whole number of minibatches"
    batch = config.batch_size
    rng = np.random.default_rng(0)
    width = int(sum(row[N_OUT] for row in net.layers))
    x = rng.standard_normal((batch, obs_size)).astype(np.float32)
    acts = rng.standard_normal(batch * width).astype(np.float32) * 0.1
    dacts = rng.standard_normal(batch * width).astype(np.float32) * 0.1
    grads = np.zeros_like(net.params)
    minibatches = config.n_epochs * n // batch
    params, layers = net.params, net.layers
    return lambda: _products(params, layers, x, acts, dacts, grads, minibatches)


def ember_update_checked(config: PPOConfig, obs_size: int, n_actions: int) -> Callable[[], Any]:
    """The same through :func:`ember_np.ppo.update.update`, the Python entry point, which
    checks and converts its arguments on every call."""
    net = ActorCritic(obs_size, n_actions, config, Rng(0))
    rollout = Rollout(**rollout_arrays(config, obs_size, n_actions))
    settings = update_settings(config, config.learning_rate, config.clip_range)
    rng = Rng(1)
    return lambda: update(net, rollout, settings, rng)


class TorchPPO:
    """The same update in eager torch (module docstring)."""

    def __init__(self, torch: Any, config: PPOConfig, obs_size: int, n_actions: int) -> None:
        nn = torch.nn
        self.torch, self.config = torch, config
        torch.manual_seed(0)

        def mlp(n_out: int, gain: float) -> Any:
            layers = [nn.Linear(obs_size, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                      nn.Linear(64, n_out)]  # fmt: skip
            for layer, g in zip(layers[::2], (2**0.5, 2**0.5, gain), strict=True):
                nn.init.orthogonal_(layer.weight, g)
                nn.init.zeros_(layer.bias)
            return nn.Sequential(*layers)

        self.actor, self.critic = mlp(n_actions, 0.01), mlp(1, 1.0)
        self.params = [*self.actor.parameters(), *self.critic.parameters()]
        self.opt = torch.optim.Adam(self.params, lr=config.learning_rate, eps=1e-5)
        self.generator = torch.Generator().manual_seed(1)

    def update(self, data: dict) -> float:
        torch, c = self.torch, self.config
        n = data["obs"].shape[0]
        loss = torch.zeros(())
        for _ in range(c.n_epochs):
            order = torch.randperm(n, generator=self.generator)
            for start in range(0, n, c.batch_size):
                i = order[start : start + c.batch_size]
                logits = self.actor(data["obs"][i])
                values = self.critic(data["obs"][i]).squeeze(-1)
                dist = torch.distributions.Categorical(logits=logits)
                logp = dist.log_prob(data["actions"][i])
                ratio = torch.exp(logp - data["old_logp"][i])
                adv = data["advantages"][i]
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                clipped = torch.clamp(ratio, 1 - c.clip_range, 1 + c.clip_range)
                pg = torch.max(-adv * ratio, -adv * clipped).mean()
                vf = torch.nn.functional.mse_loss(data["returns"][i], values)
                loss = pg + c.vf_coef * vf - c.ent_coef * dist.entropy().mean()
                self.opt.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.params, c.max_grad_norm or 0.5)
                self.opt.step()
        return float(loss.item())


def torch_update(config: PPOConfig, obs_size: int, n_actions: int) -> Callable[[], Any] | None:
    """One torch update as a call without arguments, or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    model = TorchPPO(torch, config, obs_size, n_actions)
    data = {k: torch.from_numpy(v) for k, v in rollout_arrays(config, obs_size, n_actions).items()}
    return lambda: model.update(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few calls (a check, not a measure)")
    args = parser.parse_args(argv)
    calls, rounds = (1, 1) if args.quick else (20, 5)
    config = ZOO_CARTPOLE
    flops = rollout_flops(config, OBS_SIZE, N_ACTIONS)
    ours = ember_update(config, OBS_SIZE, N_ACTIONS)
    checked = ember_update_checked(config, OBS_SIZE, N_ACTIONS)
    theirs = torch_update(config, OBS_SIZE, N_ACTIONS)
    # the rounds alternate (sgemm, ember_np, update(), torch, then again), each the
    # best of its rounds, so a slow minute of the machine falls on all of them
    timed = [ours, checked, ember_products(config, OBS_SIZE, N_ACTIONS)]
    timed += [] if theirs is None else [theirs]
    best = [float("inf")] * len(timed)
    rate = 0.0
    for _ in range(rounds):
        rate = max(rate, sgemm_rate())
        for i, fn in enumerate(timed):
            best[i] = min(best[i], best_seconds(fn, calls, 1))
    t_ours, t_checked = best[0], best[1]
    t_products = best[2]
    t_torch = None if theirs is None else best[3]
    floor = flops / rate
    transitions = config.n_steps * N_ENVS
    print(machine())
    per = flops / transitions / 1e6
    print(f"PPO update, the RL Zoo's CartPole-v1 preset ({transitions} transitions, "
          f"{config.n_epochs} epochs of minibatches of {config.batch_size}): "
          f"{flops / 1e6:.1f} MFLOP, {per:.2f} MFLOP per transition")  # fmt: skip
    print(f"sgemm, one thread: {rate / 1e9:.1f} GFLOP/s; floor {floor * 1e3:.2f} ms per update")
    print(f"ember_np: {t_ours * 1e3:.2f} ms per update, {t_ours / floor:.2f} floors, "
          f"{transitions / t_ours:,.0f} transitions/s of updates (train_epochs, as the "
          "training loops call it)")  # fmt: skip
    print(
        f"ember_np: {t_checked * 1e3:.2f} ms per update, {t_checked / floor:.2f} floors "
        "(update(), from Python: its arguments checked and converted every call)"
    )
    print(
        f"ember_np's matrix products alone (the same calls, nothing else): "
        f"{t_products * 1e3:.2f} ms per update, {t_products / floor:.2f} floors"
    )
    if t_torch is not None:
        print(f"torch:    {t_torch * 1e3:.2f} ms per update, {t_torch / floor:.2f} floors; "
              f"ember_np {t_torch / t_ours:.1f}x torch")  # fmt: skip
    else:
        print("torch: not installed (pip install torch==2.13.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

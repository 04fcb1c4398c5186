"""A PureJaxRL-style PPO on the CPU, for bench/ppo_speed.py.

The formulation of PureJaxRL's ``purejaxrl/ppo.py`` (github.com/luchris429/purejaxrl),
written here for this benchmark: the whole run, gymnax's CartPole-v1 included, is one
jitted JAX program; a rollout is a ``lax.scan`` over vmapped env steps (gymnax resets
finished envs inside ``step``), GAE a reverse ``lax.scan``, the epochs and minibatches
nested ``lax.scan`` s over a fresh permutation, the network a flax ``ActorCritic``
(separate 64x64 tanh MLPs, orthogonal init) with a distrax ``Categorical`` head, and
the optimiser optax's global-norm clip chained with Adam (eps 1e-5) on a linear
learning-rate schedule. It is written against gymnax 0.0.9's API (``step`` returns
``obs, state, reward, done, info``), the one PureJaxRL's code uses. Where the RL Zoo's
preset and PureJaxRL's defaults differ, the preset wins, so the work matches the other
contestants: the clip range is annealed like the learning rate (SB3's ``lin_0.2``), the
value loss is SB3's unclipped mean squared error, ``ent_coef`` is 0; PureJaxRL's
logging wrappers are left out (no contestant logs in the timed window).

Timing: ``jax.jit(train).lower(...).compile()`` is the compile time. While the program
runs, a host callback after each update reads the clock (one ordered
``io_callback`` per update, a few microseconds each), so the steady window starts at
the end of the 2nd update as it does for the others.
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

import distrax
import flax.linen as nn
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant, orthogonal
from flax.training.train_state import TrainState
from jax.experimental import io_callback


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (PureJaxRL's, SB3's MlpPolicy)."""

    n_actions: int
    hidden: tuple[int, ...]

    @nn.compact
    def __call__(self, x: jax.Array) -> tuple[Any, jax.Array]:
        a = x
        for width in self.hidden:
            a = nn.tanh(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)),
                                 bias_init=constant(0.0))(a))  # fmt: skip
        logits = nn.Dense(self.n_actions, kernel_init=orthogonal(0.01),
                          bias_init=constant(0.0))(a)  # fmt: skip
        c = x
        for width in self.hidden:
            c = nn.tanh(nn.Dense(width, kernel_init=orthogonal(np.sqrt(2)),
                                 bias_init=constant(0.0))(c))  # fmt: skip
        value = nn.Dense(1, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(c)
        return distrax.Categorical(logits=logits), jnp.squeeze(value, axis=-1)


class Transition(NamedTuple):
    done: jax.Array
    action: jax.Array
    value: jax.Array
    reward: jax.Array
    log_prob: jax.Array
    obs: jax.Array


def make_train(z: dict[str, Any], n_updates: int, clock: list[tuple[int, float]]) -> Any:
    """The whole run as one function of a PRNG key (to be jitted)."""
    env, params = gymnax.make("CartPole-v1")
    n_envs, n_steps, batch_size = z["n_envs"], z["n_steps"], z["batch_size"]
    rollout = n_envs * n_steps
    n_minibatches = rollout // batch_size
    assert n_minibatches * batch_size == rollout, "minibatches must cut the rollout evenly"
    network = ActorCritic(env.action_space(params).n, tuple(z["hidden"]))

    def frac_left(update: jax.Array) -> jax.Array:
        return 1.0 - update / n_updates  # SB3's progress_remaining at the rollout's start

    def lr_schedule(count: jax.Array) -> jax.Array:
        return z["learning_rate"] * frac_left(count // (n_minibatches * z["n_epochs"]))

    def tick(update: jax.Array) -> None:
        clock.append((int(update), time.perf_counter()))

    def train(rng: jax.Array) -> tuple[Any, jax.Array]:
        rng, init_rng, reset_rng = jax.random.split(rng, 3)
        tx = optax.chain(optax.clip_by_global_norm(z["max_grad_norm"]),
                         optax.adam(learning_rate=lr_schedule, eps=z["adam_eps"]))  # fmt: skip
        state = TrainState.create(
            apply_fn=network.apply,
            params=network.init(init_rng, jnp.zeros(env.observation_space(params).shape)),
            tx=tx,
        )
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(
            jax.random.split(reset_rng, n_envs), params
        )

        def update_step(carry: Any, update: jax.Array) -> tuple[Any, None]:
            def env_step(carry: Any, _: None) -> tuple[Any, Transition]:
                state, env_state, last_obs, rng = carry
                rng, act_rng, step_rng = jax.random.split(rng, 3)
                pi, value = network.apply(state.params, last_obs)
                action = pi.sample(seed=act_rng)
                log_prob = pi.log_prob(action)
                obs, env_state, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                    jax.random.split(step_rng, n_envs), env_state, action, params
                )
                return (state, env_state, obs, rng), Transition(
                    done, action, value, reward, log_prob, last_obs
                )

            carry, traj = jax.lax.scan(env_step, carry, None, n_steps)
            state, env_state, last_obs, rng = carry
            _, last_value = network.apply(state.params, last_obs)

            def gae_step(acc: Any, t: Transition) -> tuple[Any, jax.Array]:
                gae, next_value = acc
                delta = t.reward + z["gamma"] * next_value * (1 - t.done) - t.value
                gae = delta + z["gamma"] * z["gae_lambda"] * (1 - t.done) * gae
                return (gae, t.value), gae

            _, advantages = jax.lax.scan(
                gae_step, (jnp.zeros_like(last_value), last_value), traj, reverse=True,
                unroll=16,
            )  # fmt: skip
            targets = advantages + traj.value
            clip = z["clip_range"] * frac_left(update)

            def loss_fn(p: Any, t: Transition, gae: jax.Array, target: jax.Array) -> jax.Array:
                pi, value = network.apply(p, t.obs)
                log_prob = pi.log_prob(t.action)
                value_loss = jnp.square(value - target).mean()  # SB3's: no 0.5, no clip
                ratio = jnp.exp(log_prob - t.log_prob)
                gae = (gae - gae.mean()) / (gae.std() + 1e-8)
                clipped = jnp.clip(ratio, 1.0 - clip, 1.0 + clip)
                actor_loss = -jnp.minimum(ratio * gae, clipped * gae).mean()
                entropy = pi.entropy().mean()
                return actor_loss + z["vf_coef"] * value_loss - z["ent_coef"] * entropy

            def minibatch_step(state: TrainState, mb: Any) -> tuple[TrainState, jax.Array]:
                loss, grads = jax.value_and_grad(loss_fn)(state.params, *mb)
                return state.apply_gradients(grads=grads), loss

            def epoch_step(carry: Any, _: None) -> tuple[Any, jax.Array]:
                state, rng = carry
                rng, perm_rng = jax.random.split(rng)
                perm = jax.random.permutation(perm_rng, rollout)
                flat = jax.tree_util.tree_map(
                    lambda x: x.reshape((rollout,) + x.shape[2:]), (traj, advantages, targets)
                )
                mbs = jax.tree_util.tree_map(
                    lambda x: jnp.take(x, perm, axis=0).reshape(
                        (n_minibatches, batch_size) + x.shape[1:]
                    ),
                    flat,
                )
                state, losses = jax.lax.scan(minibatch_step, state, mbs)
                return (state, rng), losses

            (state, rng), _ = jax.lax.scan(epoch_step, (state, rng), None, z["n_epochs"])
            # the clock, once this update's parameters exist (the callback waits for them)
            io_callback(tick, None, update + 0 * state.step, ordered=True)
            return (state, env_state, last_obs, rng), None

        carry = (state, env_state, obs, rng)
        carry, _ = jax.lax.scan(update_step, carry, jnp.arange(n_updates))
        return carry[0].params, carry[3]

    return train, env, params, network


def greedy_mean(env: Any, params: Any, network: Any, weights: Any, episodes: int,
                seed: int) -> float:  # fmt: skip
    """Mean return of ``episodes`` greedy episodes (vmapped; each counted until its
    first end, gymnax's CartPole-v1 cuts at 500 steps)."""
    max_steps = int(params.max_steps_in_episode)

    @jax.jit
    def run(key: jax.Array) -> jax.Array:
        keys = jax.random.split(key, episodes + 1)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(keys[1:], params)

        def step(carry: Any, key: jax.Array) -> tuple[Any, None]:
            obs, state, alive, total = carry
            pi, _ = network.apply(weights, obs)
            action = jnp.argmax(pi.logits, axis=-1)
            obs, state, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(key, episodes), state, action, params
            )
            total = total + reward * alive
            return (obs, state, alive * (1 - done), total), None

        init = (obs, state, jnp.ones(episodes), jnp.zeros(episodes))
        (_, _, _, total), _ = jax.lax.scan(step, init, jax.random.split(keys[0], max_steps))
        return total.mean()

    return float(run(jax.random.PRNGKey(seed + 10_000)))


def train(z: dict[str, Any], total_steps: int, seed: int, warm: int, episodes: int) -> dict:
    """Compile, run and evaluate; the figures bench/ppo_speed.py reports."""
    rollout = z["n_envs"] * z["n_steps"]
    n_updates = total_steps // rollout
    clock: list[tuple[int, float]] = []
    fn, env, params, network = make_train(z, n_updates, clock)
    key = jax.random.PRNGKey(seed)
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(key).compile()
    t1 = time.perf_counter()
    weights, _ = compiled(key)
    jax.block_until_ready(weights)
    t_end = time.perf_counter()
    assert [u for u, _ in clock] == list(range(n_updates)), "one tick per update, in order"
    t_mark = clock[warm - 1][1]
    window_steps = (n_updates - warm) * rollout
    return {
        "window_steps": window_steps, "window_s": t_end - t_mark,
        "steps_per_s": window_steps / (t_end - t_mark), "steps": n_updates * rollout,
        "train_s": t_end - t0, "compile_s": t1 - t0,
        "eval_mean": greedy_mean(env, params, network, weights, episodes, seed),
    }  # fmt: skip

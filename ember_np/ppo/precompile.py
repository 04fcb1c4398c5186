"""A first PPO run's kernels, split between two worker processes (PPO's ``compile_jobs``).

:func:`ember_np._precompile.precompile` forks one worker per job; each compiles
its kernels into numba's disk cache and exits, and the run then loads them. A
PPO run's kernels form one tree when it trains in the compiled loop
(``fused_ppo_steps`` over a ``NativeVecEnv``: the envs, the normaliser, the
rollout buffer, the network's acting kernels, and the update ``train_epochs``
with the backward pass and Adam, about two fifths of the compile), so the split
follows numba's cache: the second worker compiles the update tree first, while
the first compiles the env kernels (the run's ``reset_batch``, evaluation's
``reset_env`` and ``step_env``), then types the loop from its top and reaches
``train_epochs`` last of its callees, by when it finds it cached and loads it
instead of compiling it again (when the second worker falls behind, the first
waits for it to cache it: :attr:`CompileJob.awaits
<ember_np._precompile.CompileJob.awaits>`). The second worker then calls
what the run calls from Python (the first actions, evaluation's greedy action),
by then mostly cached by the first.

On the Python loop (a gymnasium env, or one env) the kernels are separate trees
the agent calls one by one: one worker takes the steps' (acting, normalising,
storing, GAE), the other the update and evaluation.

Nothing a worker does reaches the run: a worker is a fork (its agent and envs
are copies), the compiled loop is called for zero steps and the update on a
rollout with no valid row (no epoch runs).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_np._precompile import CompileJob, RunToCompile

__all__ = ["compile_jobs"]


def compile_jobs(run: RunToCompile) -> list[CompileJob]:
    """The two jobs of a PPO run about to train: its training loop or steps, and its
    update and evaluation ([] for an agent that is not a PPOAgent).

    Parameters
    ----------
    run : RunToCompile
        The run: its ``training_loop`` when it trains in the compiled loop, else None.

    Returns
    -------
    list of CompileJob
        The training job first (its top kernel ``fused_ppo_steps``, or ``act_batch``
        on the Python loop), then the update's (``train_epochs``).
    """
    from ember_np.ppo.agent import NO_TRANSITION, PPOAgent

    agent = run.agent
    if not isinstance(agent, PPOAgent):
        return []
    from ember_np.ppo.fused import fused_ppo_steps
    from ember_np.ppo.network import act_batch
    from ember_np.ppo.rollout import compute_gae
    from ember_np.ppo.update import train_epochs

    def training_loop() -> None:
        assert run.training_loop is not None  # (this job is for the compiled loop only)
        # the env kernels first (the run's reset_batch, evaluation's reset_env and
        # step_env, then the loop's): the network's, which the update needs too, come
        # after, by when the other worker has cached the ones they share
        run.env.reset(seed=0)
        env = run.eval_env()
        env.reset(seed=0)
        env.step(agent.index_to_action(0))
        run.training_loop()

    def update() -> None:
        _update(agent)
        _vector_step(agent, NO_TRANSITION)  # the run's first actions, from Python
        _evaluation(run)  # (its env kernels cached by the other worker by now)

    def training_steps() -> None:  # the Python loop's kernels, as the agent calls them
        _vector_step(agent, NO_TRANSITION)  # the first actions
        _vector_step(agent, 0)  # a transition stored, the next actions
        compute_gae(agent.buffer.arrays, np.zeros(agent.num_envs, np.float32))  # (as a full
        # rollout's RolloutBuffer.compute_gae calls it)
        if agent.num_envs == 1:  # a single env: its own kernels, when it is a native one
            obs, _ = run.env.reset(seed=0)
            run.env.step(agent.index_to_action(0))

    def update_and_evaluation() -> None:
        _update(agent)
        _evaluation(run)

    if run.training_loop is not None:
        return [
            CompileJob(
                "training loop", training_loop, (fused_ppo_steps,), 40, awaits=(train_epochs,)
            ),
            CompileJob("update", update, (train_epochs,), 30),
        ]
    return [
        CompileJob("training steps", training_steps, (act_batch,), 20),
        CompileJob("update and evaluation", update_and_evaluation, (train_epochs,), 25),
    ]


def _evaluation(run: RunToCompile) -> None:
    """One greedy step on the eval env, as the trainer's evaluation takes it."""
    env = run.eval_env()
    obs, _ = env.reset(seed=0)
    env.step(run.agent.act(obs))


def _update(agent: Any) -> None:
    """The update (``train_epochs``, from Python as the agent's ``_learn`` calls it) on
    the agent's rollout with no row valid: compiled, and no epoch runs."""
    from ember_np.ppo.update import update, update_settings

    c = agent.config
    rollout = agent.rollout()
    rollout = rollout._replace(valid=np.zeros_like(rollout.valid))
    update(agent.net, rollout, update_settings(c, c.learning_rate, c.clip_range), agent.update_rng)


def _vector_step(agent: Any, status: int) -> None:
    """One vector step of the agent's envs through :meth:`PPOAgent.observe_vector
    <ember_np.ppo.agent.PPOAgent.observe_vector>` (zero observations and rewards; each
    env's step ``status``: NO_TRANSITION for none, 0 for one stored), the next actions
    picked."""
    step = agent.new_vec_step(agent.num_envs, masks=agent.action_masks)
    step.statuses[:] = status
    agent.observe_vector(step)

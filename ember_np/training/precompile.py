"""The compile jobs of a training run: which kernels its worker processes compile.

:func:`ember_np._precompile.precompile` runs jobs; :func:`compile_jobs` says what they
are for a run a trainer is about to start (the training loop's tree and the acting and
evaluation kernels the run calls from Python). An algorithm whose compiled loop it
holds itself says so in its registry entry (:attr:`Algorithm.compile_jobs
<ember_np.algorithms.Algorithm.compile_jobs>`: PPO's, :mod:`ember_np.ppo.precompile`),
given the run as a :class:`~ember_np._precompile.RunToCompile` whose ``training_loop``
calls the trainer's compiled loop for zero steps; DQN's one-env loops are this layer's
(``training/_fused.py``), so are its jobs (:func:`dqn_jobs`). A run whose kernels are
not listed compiles them in its own thread, as before.
"""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np

from ember_np._precompile import CompileJob, PrecompileReport, RunToCompile, precompile

__all__ = ["compile_jobs", "dqn_jobs", "precompile_run", "workers_compile"]


def workers_compile(algorithm: str | None, num_envs: int) -> bool:
    """Whether one run of ``algorithm`` (None: DQN) on ``num_envs`` envs compiles its
    kernels in worker processes (:func:`precompile_run`), which show their own progress
    line: when they may be forked here, for an algorithm with its own ``compile_jobs``
    (PPO: every run) or a DQN run on one env (:func:`dqn_jobs`). A multi-seed run's
    processes never fork them."""
    from ember_np._precompile import enabled
    from ember_np.algorithms import get_algorithm

    if not enabled():
        return False
    return get_algorithm(algorithm).compile_jobs is not None or num_envs == 1


def compile_jobs(trainer: Any, algorithm: str | None = None) -> list[CompileJob]:
    """The jobs that compile what ``trainer`` (a DqnTrainer) will compile, else [].

    ``algorithm`` names the run's algorithm (None: DQN, the default); its registry
    entry's ``compile_jobs`` gives them when it has one, else :func:`dqn_jobs`.
    """
    from ember_np.algorithms import get_algorithm

    own = get_algorithm(algorithm).compile_jobs
    if own is None:
        return dqn_jobs(trainer)
    run = RunToCompile(trainer.agent, trainer.env, lambda: trainer.eval_env,
                       trainer.compile_loop)  # fmt: skip
    return list(own(run))


def dqn_jobs(trainer: Any) -> list[CompileJob]:
    """The jobs that compile what ``trainer`` (a DqnTrainer) will compile, else [].

    Covers one env: a native env in the fused loop (the Quick start's run:
    ``fused_steps``) or any env in the Python loop (``agent_step``), and the
    kernels the run calls from Python to act and evaluate: a DqnAgent's kernels.
    Other runs (N envs, another algorithm's agent) get [] (they compile as before:
    jobs whose kernels such a run never compiles would be forked again every run).
    """
    from ember_np.dqn.agent import DqnAgent
    from ember_np.envs.native import unwrap_native

    agent = trainer.agent
    if trainer.num_envs != 1 or not isinstance(agent, DqnAgent):
        return []
    from ember_np.dqn.agent_kernels import act_explore, agent_step
    from ember_np.dqn.heads.qvalues import greedy_action
    from ember_np.training._fused import FusedLoop, fused_steps

    native = unwrap_native(trainer.env)

    def training_loop() -> None:
        assert native is not None  # (this job is for a native env only)
        obs_size = int(np.asarray(agent.encode(native.observation_space.sample())).shape[0])
        x = np.zeros(obs_size, dtype=np.float32)
        loop = FusedLoop(
            x, np.empty_like(x), np.zeros(4, dtype=np.int64), np.zeros(1),
            np.empty((1, 2)), np.empty((1, 4), dtype=np.int64),
        )  # fmt: skip
        fused_steps(0, native.kernel_state, loop, agent.kernel_state)  # compiles, runs nothing

    def training_step() -> None:  # the Python loop's one call per step, as the trainer's
        x = agent.encode(trainer.env.reset(seed=0)[0])
        agent.observe_encoded(x, 0, 0.0, x, 0, True)

    def acting() -> None:
        obs, _ = trainer.env.reset(seed=0)
        agent.act_encoded(agent.encode(obs))
        env = trainer.eval_env
        obs, _ = env.reset(seed=0)
        env.step(agent.act(obs))

    fused = bool(getattr(trainer, "fused", False)) and native is not None
    return [
        CompileJob("training loop", training_loop, (fused_steps,), 70)
        if fused
        else CompileJob("training step", training_step, (agent_step,), 65),
        CompileJob("acting and evaluation", acting, (act_explore, greedy_action), 45),
    ]


def precompile_run(
    trainer: Any, out: TextIO | None = None, algorithm: str | None = None
) -> PrecompileReport | None:
    """:func:`precompile` the jobs of ``trainer``'s run (:func:`compile_jobs`; ``algorithm``
    names its algorithm, None: DQN)."""
    return precompile(compile_jobs(trainer, algorithm), out)

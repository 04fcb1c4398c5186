"""The trainer's side of N envs stepped together (a vectorised env).

:class:`VectorDriver` steps a gymnasium ``VectorEnv`` (``SyncVectorEnv``,
``AsyncVectorEnv``, ``gymnasium.make_vec``) or a :class:`~ember_np.envs.NativeVecEnv`,
keeps each env's episode in progress, hands every vector step to the
agent's :meth:`~ember_np.DqnAgent.observe_vector` and returns the episodes
that ended: the Python vector driver of :mod:`ember_np.training.drivers`
(whose :class:`~ember_np.training.drivers.FusedVectorDriver` runs a
``NativeVecEnv`` on the same state in the compiled loop).
:class:`~ember_np.DqnTrainer` uses it for a vector env: the logs,
checkpoints and evaluation stay the trainer's.

How an episode end becomes transitions (gymnasium 1.x ``autoreset_mode``):

* ``SAME_STEP`` (and ``NativeVecEnv``): the step that ends env e's episode
  returns the first observation of its next one, the last one in
  ``info["final_obs"][e]``; the transition ends at that real last
  observation and env e acts at once on the new one.
* ``NEXT_STEP`` (gymnasium's default): the step that ends the episode
  returns its last observation; env e's next action is ignored (no random
  number is drawn for it) and the step after returns the new episode's
  first observation with no transition (``NO_TRANSITION``).
* ``DISABLED``: refused (the trainer would have to reset envs itself).

Either way no transition from an episode's last observation to the next
one's first is stored, truncated episodes bootstrap from their real last
observation, and with one env the agent sees exactly what a single env
gives it (same numbers, same random draws).

Reading map, in call order::

    VectorDriver.run / step            this module: env.step, episode ends, masks
      DqnAgent.observe_vector          dqn/agent_vec.py -> agent_vec_step (one kernel)
    FusedVectorDriver.run              a NativeVecEnv: training/_fused.py fused_vec_steps
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_np._masks import warn_if_masks_ignored
from ember_np.dqn.agent_kernels import NO_TRANSITION
from ember_np.training.drivers import STATUSES, DriverError, EndedColumns

__all__ = [
    "VectorDriver",
    "is_vector_env",
    "make_single_env",
    "vector_agent_error",
]

#: Members the trainer needs of an agent for a vector env (besides LearningAgent's).
VECTOR_AGENT_MEMBERS = ("set_num_envs", "new_vec_step", "observe_vector", "encode_batch",
                        "indices_to_actions")  # fmt: skip
#: Keys gymnasium.make_vec adds to a spec's kwargs (not the env's own).
_VECTOR_KWARGS = ("num_envs", "vectorization_mode", "vector_kwargs", "wrappers")


def is_vector_env(env: Any) -> bool:
    """Whether ``env`` is a gymnasium ``VectorEnv`` or a ``NativeVecEnv``."""
    from gymnasium.vector import VectorEnv

    from ember_np.envs.native import NativeVecEnv

    return isinstance(env, (VectorEnv, NativeVecEnv))


def vector_agent_error(agent: Any) -> str | None:
    """Why ``agent`` cannot learn from a vector env (the members it lacks), or None."""
    missing = [name for name in VECTOR_AGENT_MEMBERS if not hasattr(agent, name)]
    if missing:
        return (f"training on a vector env needs an agent with {list(VECTOR_AGENT_MEMBERS)} "
                f"(a DqnAgent has them); {type(agent).__name__} lacks {missing}")  # fmt: skip
    return None


def make_single_env(env: Any) -> Any:
    """A single env like each of vector env ``env``'s copies (for greedy evaluation).

    Made with ``gymnasium.make`` from the vector env's spec (``make_vec``'s,
    without its vector keywords), or its first copy's (``SyncVectorEnv``,
    ``AsyncVectorEnv``, ``NativeVecEnv``). Raises ValueError when there is none.
    """
    import dataclasses

    import gymnasium

    spec = getattr(env, "spec", None)
    if spec is not None and any(k in spec.kwargs for k in _VECTOR_KWARGS):
        kwargs = {k: v for k, v in spec.kwargs.items() if k not in _VECTOR_KWARGS}
        spec = dataclasses.replace(spec, kwargs=kwargs)
    if spec is None and hasattr(env, "envs"):
        spec = getattr(env.envs[0], "spec", None)
    if spec is None and hasattr(env, "get_attr"):
        spec = env.get_attr("spec")[0]
    if spec is None:
        raise ValueError(
            "eval needs a single environment: this vector env has no gymnasium spec to make "
            "one from, so pass DqnTrainer(..., eval_env=...)"
        )
    return gymnasium.make(spec)


def _is_native(env: Any) -> bool:
    from ember_np.envs.native import NativeVecEnv

    return isinstance(env, NativeVecEnv)


def _autoreset_mode(env: Any) -> str:
    """``"same"`` or ``"next"``: when ``env`` resets a finished copy; ValueError for DISABLED."""
    from gymnasium.vector import AutoresetMode

    if _is_native(env):
        return "same"
    mode = getattr(env, "metadata", {}).get("autoreset_mode", AutoresetMode.NEXT_STEP)
    try:
        mode = AutoresetMode(mode)  # (a string in some wrappers' metadata)
    except ValueError:
        pass
    if mode == AutoresetMode.NEXT_STEP:
        return "next"
    if mode == AutoresetMode.SAME_STEP:
        return "same"
    raise ValueError(
        f"the vector env's autoreset_mode is {mode}: the trainer needs the envs to reset "
        "themselves, so build it with autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP "
        "(the default) or SAME_STEP"
    )


class VectorDriver:
    """Steps N envs for the trainer and keeps their episodes in progress.

    Parameters
    ----------
    env : gymnasium.vector.VectorEnv or NativeVecEnv
    agent : DqnAgent
        Or an agent with :data:`VECTOR_AGENT_MEMBERS`; its buffer is split
        into ``env.num_envs`` streams here (``set_num_envs``).
    seed : int
        The first ``env.reset(seed=seed)`` (copy i: seed + i).
    masks : bool
        Pass the envs' ``info["action_mask"]`` (N, n_actions) to the agent.
    """

    def __init__(self, env: Any, agent: Any, seed: int, masks: bool) -> None:
        self.env = env
        self.agent = agent
        self.num_envs = int(env.num_envs)
        self.mode = _autoreset_mode(env)
        self.native = _is_native(env)
        self.seed = seed
        self.masks = masks
        self.warned = False  # whether IGNORED_MASKS was said (masks off, the env gives them)
        agent.set_num_envs(self.num_envs)
        if hasattr(agent, "set_autoreset_mode"):  # an agent that stores whole rollouts
            agent.set_autoreset_mode(self.mode)
        n = self.num_envs
        self.step_arrays: Any = None  # the agent's VecStep, made at the first reset
        self.episode_steps = np.zeros(n, dtype=np.int64)
        self.episode_rewards = np.zeros(n, dtype=np.float64)
        self.ended = np.zeros(n, dtype=np.bool_)  # NEXT_STEP: reset rows come next
        self.transitions = 0  # of the last vector step

    # -- starting ---------------------------------------------------------------
    def start(self) -> None:
        """Reset every env (seeded) and pick their first actions."""
        if self.native:
            obs, info = self.env.reset(seed=self.seed), {}
        else:
            obs, info = self.env.reset(seed=self.seed)
        x = self.agent.encode_batch(obs)
        mask = self._mask_of(info)
        s = self.step_arrays = self.agent.new_vec_step(self.num_envs, masks=mask is not None)
        s.act_obs[:] = x
        if mask is not None:
            s.act_masks[:] = mask
        s.statuses[:] = NO_TRANSITION
        s.acting[:] = True
        self.agent.observe_vector(s)
        s.obs[:] = x
        s.actions[:] = s.next_actions
        self.episode_steps[:] = 0
        self.episode_rewards[:] = 0.0
        self.ended[:] = False

    def _mask_of(self, info: Any) -> np.ndarray | None:
        """``info["action_mask"]`` as bool (N, n_actions) when masks are on and given."""
        if not self.masks or not isinstance(info, dict) or "action_mask" not in info:
            if not self.masks and not self.warned:  # once per driver (per trainer)
                self.warned = warn_if_masks_ignored(info)
            return None
        return np.asarray(info["action_mask"]).astype(np.bool_, copy=False)

    # -- the Python path --------------------------------------------------------
    def run(self, until: int) -> EndedColumns:
        """Vector steps until the agent has counted ``until`` transitions (the
        last one may pass it); the episodes that ended (:class:`StepDriver
        <ember_np.training.drivers.StepDriver>`)."""
        if self.step_arrays is None:
            self.start()
        ended = EndedColumns.empty()
        agent = self.agent
        try:
            while agent.total_steps < until:
                self.step_python(ended)
        except Exception as exc:
            raise DriverError(exc, ended) from exc
        return ended

    def step(self, episode: int) -> tuple[list[tuple[Any, ...]], EndedColumns]:
        """One vector step: the StepMetrics fields of its transitions, in env order
        (``episode``: the index the first episode to end gets), and the episodes
        that ended (:class:`StepDriver <ember_np.training.drivers.StepDriver>`)."""
        if self.step_arrays is None:
            self.start()
        agent = self.agent
        before = agent.total_steps
        steps_in = self.episode_steps.copy()
        rewards_in = self.episode_rewards.copy()
        ended = EndedColumns.empty()
        self.step_python(ended)
        s = self.step_arrays
        out = []
        k = before
        epsilon, trained = agent.epsilon_at(before), agent.last_step_trained
        for e, code in enumerate(s.statuses.tolist()):
            if code == NO_TRANSITION:
                continue
            k += 1
            reward = float(s.rewards[e])
            out.append((k, episode, int(steps_in[e]) + 1, reward, float(rewards_in[e]) + reward,
                        epsilon, trained, code != 0, STATUSES[code], e))  # fmt: skip
            episode += code != 0
        return out, ended

    def step_python(self, ended: EndedColumns) -> None:
        """One vector step through Python (env.step, then one agent kernel call);
        the episodes that ended go to ``ended``, in env order."""
        s = self.step_arrays
        agent = self.agent
        actions = agent.indices_to_actions(s.actions)
        if self.native:
            obs, rewards, terminated, truncated = self.env.step(actions)
            info: Any = {}
        else:
            obs, rewards, terminated, truncated, info = self.env.step(actions)
        x = agent.encode_batch(obs)
        mask = self._mask_of(info)
        s.rewards[:] = rewards
        codes = np.where(terminated, 1, np.where(truncated, 2, 0))
        s.next_obs[:] = x
        s.act_obs[:] = x
        if mask is not None and s.next_masks.shape[1]:
            s.next_masks[:] = mask
            s.act_masks[:] = mask
        if self.mode == "next":
            s.statuses[:] = np.where(self.ended, NO_TRANSITION, codes)
            s.acting[:] = self.ended | (codes == 0)  # a finished env's next action is ignored
            self.ended[:] = ~self.ended & (codes != 0)
        else:
            s.statuses[:] = codes
            self._final_observations(codes, info)
        total = agent.total_steps
        agent.observe_vector(s)
        self._count(total, ended)
        s.obs[:] = s.act_obs
        s.actions[:] = s.next_actions

    def _final_observations(self, codes: np.ndarray, info: Any) -> None:
        """SAME_STEP: each finished env's transition ends at its real last observation."""
        s = self.step_arrays
        done = np.flatnonzero(codes)
        if not done.size:
            return
        if self.native:
            s.next_obs[done] = self.env.final_obs[done]
            return
        final = info["final_obs"]
        s.next_obs[done] = self.agent.encode_batch(np.stack([final[e] for e in done]))
        if s.next_masks.shape[1]:
            final_info = info.get("final_info", {})
            masks = final_info.get("action_mask") if isinstance(final_info, dict) else None
            for e in done:  # the last state's legal actions, when the env gave them
                s.next_masks[e] = True if masks is None else np.asarray(masks[e], bool)

    def _count(self, total_before: int, ended: EndedColumns) -> None:
        """Add the step's rewards to the episodes in progress; those that ended go to ``ended``."""
        s = self.step_arrays
        k = total_before
        loss = float(self.agent.last_loss)
        for e, status in enumerate(s.statuses.tolist()):
            if status == NO_TRANSITION:
                continue
            k += 1
            self.episode_rewards[e] += float(s.rewards[e])
            self.episode_steps[e] += 1
            if status:
                ended.append(float(self.episode_rewards[e]), int(self.episode_steps[e]), status,
                             k, e, loss)  # fmt: skip
                self.episode_rewards[e] = 0.0
                self.episode_steps[e] = 0
        self.transitions = k - total_before

    # -- saving the envs (native only) --------------------------------------------
    def state_arrays(self) -> dict[str, np.ndarray]:
        """What an exact resume needs besides the agent: each native copy's physics
        state, step counters and reset stream, the observation each acts on and
        the action chosen for it, and each episode's steps and reward so far.

        Only for a started ``NativeVecEnv`` (a gymnasium env's state cannot be saved).
        """
        assert self.native and self.step_arrays is not None
        env, s = self.env, self.step_arrays
        return {
            "total_steps": np.array(self.agent.total_steps, dtype=np.int64),
            "env/states": env.states, "env/counters": env.counters,
            "env/rng_states": env.rng_states, "obs": s.obs, "actions": s.actions,
            "episode_steps": self.episode_steps, "episode_rewards": self.episode_rewards,
        }  # fmt: skip

    def load_state_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """Continue from :meth:`state_arrays` (saved at the agent's current step).

        Raises ValueError when the arrays are not of this env's N copies.
        """
        env = self.env
        want = {"env/states": env.states, "env/counters": env.counters,
                "env/rng_states": env.rng_states, "obs": env.obs,
                "actions": self.episode_steps, "episode_steps": self.episode_steps,
                "episode_rewards": self.episode_rewards}  # fmt: skip
        for key, like in want.items():
            have = arrays.get(key)
            if have is None or have.shape != like.shape or have.dtype != like.dtype:
                got = "missing" if have is None else f"{have.dtype} {have.shape}"
                raise ValueError(f"saved env state {key!r}: expected {like.dtype} {like.shape} "
                                 f"({self.num_envs} copies), got {got}")  # fmt: skip
        s = self.step_arrays = self.agent.new_vec_step(self.num_envs, masks=False)
        env.states[:] = arrays["env/states"]
        env.counters[:] = arrays["env/counters"]
        env.rng_states[:] = arrays["env/rng_states"]
        env.obs[:] = arrays["obs"]
        s.obs[:] = arrays["obs"]
        s.actions[:] = arrays["actions"]
        self.episode_steps[:] = arrays["episode_steps"]
        self.episode_rewards[:] = arrays["episode_rewards"]
        self.ended[:] = False

"""The trainer's side of N envs stepped together (a vectorised env).

:class:`VectorDriver` steps a gymnasium ``VectorEnv`` (``SyncVectorEnv``,
``AsyncVectorEnv``, ``gymnasium.make_vec``) or a :class:`~ember_np.envs.NativeVecEnv`,
keeps each env's episode in progress, hands every vector step to the
agent's :meth:`~ember_np.DqnAgent.observe_vector` and returns the episodes
that ended. :class:`~ember_np.DqnTrainer` uses it for a vector env: the
logs, checkpoints and evaluation stay the trainer's.

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

    VectorDriver.start / step_python   this module: env.step, episode ends, masks
      DqnAgent.observe_vector          dqn/agent_vec.py -> agent_vec_step (one kernel)
    VectorDriver.run_fused             a NativeVecEnv: training/_fused.py fused_vec_steps
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from ember_np._masks import warn_if_masks_ignored
from ember_np.dqn.agent_kernels import NO_TRANSITION

__all__ = [
    "EndedColumns",
    "EpisodeEnd",
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


class EpisodeEnd(NamedTuple):
    """An episode that ended during a vector step.

    reward, length, status : the episode's total reward, steps and EpisodeStatus value.
    total_steps : the agent's transitions counted when its last one was.
    env : the index of the env that played it.
    loss : the latest training loss after the vector step (NaN before the first).
    """

    reward: float
    length: int
    status: int
    total_steps: int
    env: int
    loss: float


class EndedColumns(NamedTuple):
    """The episodes a fused chunk ended, as columns of :class:`EpisodeEnd`'s fields
    (lists of Python floats and ints, one entry per episode, in the order they ended)."""

    rewards: list[float]
    lengths: list[int]
    statuses: list[int]
    total_steps: list[int]
    envs: list[int]
    losses: list[float]

    def rows(self) -> Iterator[tuple[float, int, int, int, int, float]]:
        """The episodes one by one, as rows of :class:`EpisodeEnd`'s fields."""
        return zip(*self)


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
    def step_python(self) -> list[EpisodeEnd]:
        """One vector step through Python (env.step, then one agent kernel call).

        Returns the episodes that ended, in env order.
        """
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
        ends = self._count(total)
        s.obs[:] = s.act_obs
        s.actions[:] = s.next_actions
        return ends

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

    def _count(self, total_before: int) -> list[EpisodeEnd]:
        """Add the step's rewards to the episodes in progress; return those that ended."""
        s = self.step_arrays
        ends = []
        k = total_before
        loss = float(getattr(self.agent, "last_loss", float("nan")))
        for e, status in enumerate(s.statuses.tolist()):
            if status == NO_TRANSITION:
                continue
            k += 1
            self.episode_rewards[e] += float(s.rewards[e])
            self.episode_steps[e] += 1
            if status:
                ends.append(EpisodeEnd(float(self.episode_rewards[e]),
                                       int(self.episode_steps[e]), status, k, e, loss))  # fmt: skip
                self.episode_rewards[e] = 0.0
                self.episode_steps[e] = 0
        self.transitions = k - total_before
        return ends

    # -- the fused path ---------------------------------------------------------
    def run_fused(self, until: int, episode: int) -> EndedColumns:
        """Vector steps of a NativeVecEnv in the agent's compiled loop until the
        agent has counted ``until`` transitions; ``episode`` is the index the
        next finished episode gets. Returns the episodes that ended as columns
        of plain Python numbers (one ``tolist()`` per column: no NumPy scalar,
        no object per episode)."""
        from ember_np.training._fused import VEC_N_RECORDS, FusedVecLoop

        agent = self.agent
        n = self.num_envs
        rows = -(-(until - agent.total_steps) // n) * n  # whole vector steps, N records each
        loop = FusedVecLoop(
            self.step_arrays, np.array([episode, 0], dtype=np.int64), self.episode_steps,
            self.episode_rewards, np.empty((rows, 2)), np.empty((rows, 5), dtype=np.int64),
        )  # fmt: skip
        code = agent.run_fused_vector(self.env, until, loop)
        self.env.obs[:] = self.step_arrays.obs  # the env object shows where its copies are
        if code < 0:
            agent.raise_vec_error(code, self.step_arrays)
        ended = int(loop.ints[VEC_N_RECORDS])
        floats, ints = loop.rec_floats[:ended].T, loop.rec_ints[:ended].T
        return EndedColumns(floats[0].tolist(), ints[0].tolist(), ints[1].tolist(),
                            ints[2].tolist(), ints[4].tolist(), floats[1].tolist())  # fmt: skip

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

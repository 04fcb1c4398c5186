"""DqnAgent's collaborator for N envs at once: batched acting and the vector step.

:class:`VectorLearner` holds what :class:`~ember_np.DqnAgent` does for N envs
stepped together (the agent delegates its ``act_batch``,
``act_epsilon_greedy_batch``, ``set_num_envs``, ``new_vec_step``,
``observe_vector``, ``raise_vec_error``, ``can_fuse`` ... to it): it works on
the agent's kernel state (:attr:`DqnAgent.kernel_state
<ember_np.DqnAgent.kernel_state>`) and public members. The compiled training
loops over native envs are the trainer's (``ember_np.training.drivers``), which
call the agent's kernels; nothing here imports the training layer.

Reading map of one vector step (``DqnTrainer`` with N envs), in call order::

    DqnAgent.observe_vector            dqn/agent.py -> VectorLearner.observe_vector
      agent_vec_step                   dqn/agent_kernels.py
        observe_one (env by env)       push into the env's stream, count, sync, train
        act_batch_explore              N epsilon-greedy actions, one forward pass
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_np._jit import entry_point
from ember_np._masks import check_action_masks
from ember_np.dqn.agent_kernels import (
    BAD_ACT_OBS,
    ENV_CODES,
    NO_TRANSITION,
    AgentState,
    VecStep,
    act_batch_explore,
    agent_vec_step,
    epsilon_now,
)
from ember_np.dqn.heads.qvalues import greedy_actions_checked, greedy_actions_legal_checked
from ember_np.encoding import (
    IndexActionMapper,
    encode_batch_for_network,
    indices_to_actions,
    nonfinite_row,
)

__all__ = ["NO_TRANSITION", "VecStep", "VectorLearner"]


class VectorLearner:
    """Batched acting and N-env steps of one :class:`~ember_np.DqnAgent`.

    Parameters
    ----------
    agent : DqnAgent
        The agent it acts and learns for (its buffer, networks, encoder, mapper,
        and for a custom buffer its ``observe_encoded`` / ``act_encoded``).
    state : AgentState
        The agent's kernel state (rebuilt with the agent's config, and so is this).
    fast_buffer : bool
        Whether the agent's buffer is a default one the kernels push into.
    flat_encoder : bool
        Whether the agent's encoder is a VecEncoder of a 1-D shape (a cast).
    """

    def __init__(self, agent: Any, state: AgentState, fast_buffer: bool,
                 flat_encoder: bool) -> None:  # fmt: skip
        self.agent = agent
        self.state = state
        self.fast_buffer = fast_buffer
        self.flat_encoder = flat_encoder
        self.vec_entry: Any = None  # agent_vec_step's compiled entry, at its first call

    # -- acting on a batch ----------------------------------------------------
    def encode_batch(self, obs_batch: Any) -> np.ndarray:
        """The encoder's output for a batch: C-contiguous float32 (N, obs_size)."""
        return encode_batch_for_network(self.agent.encoder, obs_batch, self.agent.online.obs_size)

    def _masks_for(self, masks: Any, n: int) -> np.ndarray:
        """Masks (N, n_actions) as the kernels' bool array; None: width 0 (all legal)."""
        if masks is None:
            return np.zeros((n, 0), dtype=np.bool_)
        return check_action_masks(masks, n, self.agent.online.n_actions)

    def indices_to_actions(self, indices: np.ndarray) -> np.ndarray:
        """The env actions of action indices (int (N,)), as an array (the mapper's)."""
        return indices_to_actions(self.agent.action_mapper, indices)

    def act_batch(self, obs_batch: Any, action_masks: Any = None) -> np.ndarray:
        """Greedy env actions for a batch of observations (N, ...), one forward pass.

        ``action_masks`` (bool or 0/1, shape (N, n_actions)): each row's legal
        actions. Raises ValueError for a row holding NaN or inf.
        """
        x = self.encode_batch(obs_batch)
        out = np.empty(x.shape[0], dtype=np.int64)
        # noisy layers: their means
        mean, sizes = self.agent.online.mean_params, self.state.net.sizes
        if action_masks is None:
            row = greedy_actions_checked(mean, sizes, x, out) if len(x) else -1
        else:
            legal = check_action_masks(action_masks, x.shape[0], self.agent.online.n_actions)
            row = greedy_actions_legal_checked(mean, sizes, x, legal, out)
        if row >= 0:
            raise nonfinite_row(x, row, "obs_batch")
        return self.indices_to_actions(out)

    def act_epsilon_greedy_batch(self, obs_batch: Any, action_masks: Any = None) -> np.ndarray:
        """Exploring env actions for a batch: per row, a random legal action with
        probability :attr:`epsilon`, else the greedy one.

        The rows draw in order from the agent's one exploration stream, and the
        greedy rows go through the network together; one row draws and acts
        exactly as :meth:`act_epsilon_greedy`.
        """
        x = self.encode_batch(obs_batch)
        n = x.shape[0]
        out = np.empty(n, dtype=np.int64)
        eps = epsilon_now(self.state.settings, int(self.state.counters[0]))
        masks = self._masks_for(action_masks, n)
        state = self.state.explore_rng
        row = act_batch_explore(self.state.net, eps, state, x, masks, np.ones(n, np.bool_), out)
        if row >= 0:
            raise nonfinite_row(x, row, "obs_batch")
        return self.indices_to_actions(out)

    # -- N envs -----------------------------------------------------------------
    @property
    def num_envs(self) -> int:
        """Envs whose transitions the replay buffer keeps apart (1 for a custom buffer)."""
        return int(getattr(self.agent.buffer, "num_envs", 1))

    def set_num_envs(self, num_envs: int) -> bool:
        """Split the default buffer into ``num_envs`` streams (see
        :meth:`DqnAgent.set_num_envs <ember_np.DqnAgent.set_num_envs>`); returns
        whether the agent's kernel state must be rebuilt (a new ReplayState).

        Raises
        ------
        ValueError
            When the buffer holds transitions of another number of envs.
        """
        if not self.fast_buffer:
            return False
        self.agent.buffer.set_num_envs(num_envs)
        return True

    def new_vec_step(self, num_envs: int, masks: bool = False) -> VecStep:
        """Zeroed arrays of one :class:`VecStep` of ``num_envs`` envs, for :meth:`observe_vector`.

        ``masks``: room for (N, n_actions) action masks (else width 0: all legal).
        """
        n, k = int(num_envs), self.agent.online.obs_size
        width = self.agent.online.n_actions if masks else 0
        return VecStep(
            np.zeros((n, k), np.float32), np.zeros(n, np.int64), np.zeros(n, np.float64),
            np.zeros((n, k), np.float32), np.zeros(n, np.int64),
            np.ones((n, width), np.bool_), np.zeros((n, k), np.float32),
            np.ones((n, width), np.bool_), np.ones(n, np.bool_), np.zeros(n, np.int64),
        )  # fmt: skip

    def observe_vector(self, step: VecStep) -> np.ndarray:
        """Learn from one step of N envs and pick their next actions.

        Every transition (``step.statuses[e] != NO_TRANSITION``) goes, env by
        env in order, through the per-transition schedule of
        :meth:`observe_encoded` (store in env e's stream, count one step, sync
        and train when due); then the next action of every acting env is
        picked epsilon-greedily at the exploration rate after the last
        transition, from the one exploration stream, the greedy ones in one
        forward pass. With one env this is :meth:`observe_encoded` with
        ``act_next`` (or :meth:`act_encoded` after an episode ended), bit for bit.

        Parameters
        ----------
        step : VecStep
            Arrays from :meth:`new_vec_step`, filled in (see :class:`VecStep`);
            ``step.next_actions`` is written.

        Returns
        -------
        ndarray of int64, shape (N,)
            ``step.next_actions``: the next action indices (0 for envs not acting).

        Raises
        ------
        ValueError
            On a transition the buffer rejects or a non-finite observation to
            act on; the transitions of the envs before it were learnt from.
        """
        if self.fast_buffer and self.num_envs != step.statuses.shape[0]:
            raise ValueError(
                f"the step has {step.statuses.shape[0]} envs but the replay buffer keeps "
                f"{self.num_envs} streams: call set_num_envs({step.statuses.shape[0]}) first"
            )
        if not self.fast_buffer:
            return self._observe_vector_python(step)
        run = self.vec_entry
        if run is None:  # same argument types every time: skip numba's dispatch
            run = self.vec_entry = entry_point(agent_vec_step, self.state, step)
        code = run(self.state, step)
        if code < 0:
            self.raise_vec_error(code, step)
        return step.next_actions

    def raise_vec_error(self, code: int, step: VecStep) -> None:
        """Raise the ValueError of a vector kernel's negative return ``code``."""
        env, kind = divmod(-code, ENV_CODES)
        if kind == BAD_ACT_OBS:
            raise nonfinite_row(step.act_obs, env, "the observations to act on")
        try:
            self.agent.buffer.raise_push_error(kind, int(step.actions[env]),
                                               float(step.rewards[env]), step.obs[env],
                                               step.next_obs[env], int(step.statuses[env]),
                                               env)  # fmt: skip
        except ValueError as exc:
            raise ValueError(f"env {env}: {exc}") from None

    def _observe_vector_python(self, step: VecStep) -> np.ndarray:
        """:meth:`observe_vector` for a custom buffer: env by env through Python."""
        agent = self.agent
        trained = False
        for e, status in enumerate(step.statuses.tolist()):
            if status != NO_TRANSITION:
                mask = step.next_masks[e] if step.next_masks.shape[1] else None
                agent.observe_encoded(step.obs[e], int(step.actions[e]), step.rewards[e],
                                      step.next_obs[e], status, next_action_mask=mask)  # fmt: skip
                trained = trained or agent.last_step_trained
        for e in range(step.statuses.shape[0]):
            step.next_actions[e] = 0
            if step.acting[e]:
                mask = step.act_masks[e] if step.act_masks.shape[1] else None
                step.next_actions[e] = agent.act_encoded(step.act_obs[e], action_mask=mask)
        self.state.out[1] = float(trained)
        return step.next_actions

    # -- the fused compiled loops (the trainer's drivers run them) ----------------
    def can_fuse(self, env: Any) -> bool:
        """Whether the trainer's compiled loops (``ember_np.training.drivers``) can
        drive ``env``, a native env (``ember_np.envs``) or a ``NativeVecEnv``.

        It can with the default CircularBuffer, VecEncoder and
        IndexActionMapper(start=0), for an env of the network's sizes.
        """
        mapper = self.agent.action_mapper
        single = getattr(env, "single", env)  # a NativeVecEnv's copies
        return (
            self.fast_buffer
            and self.flat_encoder
            and type(mapper) is IndexActionMapper
            and mapper.start == 0
            and single.obs_size == self.agent.online.obs_size
            and single.n_actions == self.agent.online.n_actions
        )

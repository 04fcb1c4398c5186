"""The agent's compiled step: exploration, the target-sync and train schedules,
training from the buffer, and one whole env step (numba kernels, public to the package).

:func:`agent_step` is the one kernel both the Python path (``DqnAgent.observe``)
and the fused loop (``ember_np.training._fused.fused_steps``) call for an env
step; :class:`AgentState` carries everything it reads and writes.

Reading map of one env step, in call order::

    agent_step
      push_transition        dqn/replay/replay_kernels.py: validate and store
      target_due, sync_target   copy or Polyak-average the target
      train_due, train_from_buffer
        sample_into          dqn/replay/replay_kernels.py: a batch (n-step: discounts; PER: weights)
        dqn_update           dqn/learner/learn.py: one DQN gradient step
        update_priorities    dqn/replay/replay_kernels.py (PER only)
      epsilon_greedy         the next action
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ember_np._jit import inlined_kernel, kernel
from ember_np.dqn.config import DqnConfig, linear_epsilon
from ember_np.dqn.heads.head_kernels import expected_q
from ember_np.dqn.heads.qvalues import greedy_legal, greedy_unchecked
from ember_np.dqn.learner.learn import (
    NetState,
    PerSample,
    UpdateSettings,
    dqn_update,
    update_settings,
)
from ember_np.dqn.learner.noisy import acting_params
from ember_np.dqn.replay.replay_kernels import (
    ReplayState,
    push_transition,
    sample_into,
    update_priorities,
)
from ember_np.nn.mlp import acts_size, all_finite, argmax_legal, forward_into
from ember_np.nn.optim import copy_into, polyak
from ember_np.nn.shape import head_kind, n_actions, n_layers
from ember_np.rng import next_below, next_double
from ember_np.types import Batch


class AgentSettings(NamedTuple):
    """The agent's scalar settings, passed to kernels as one typed value.

    Built only by :func:`agent_settings` (fixed Python types, so kernels taking
    it compile once). Fields as :class:`DqnConfig`; ``gradient_steps`` is the
    resolved count per training round and ``learning_starts`` the stored
    transitions needed before the first one. ``per_beta_start`` and
    ``per_beta_steps`` are read only with a prioritized buffer.
    """

    update: UpdateSettings
    target_update_freq: int
    train_freq: int
    gradient_steps: int
    learning_starts: int
    batch_size: int
    tau: float
    epsilon_start: float
    epsilon_end: float
    epsilon_decay_steps: int
    learning_rate_end: float  # update.learning_rate when not annealed (a constant schedule)
    learning_rate_decay_steps: int
    per_beta_start: float
    per_beta_steps: int


def agent_settings(config: DqnConfig) -> AgentSettings:
    """The kernels' view of ``config`` (the one place an AgentSettings is built)."""
    c = config
    return AgentSettings(
        update_settings(c.learning_rate, c.huber_delta, c.double_dqn, c.max_grad_norm),
        int(c.target_update_freq), int(c.train_freq), int(c.gradient_steps_per_train),
        int(c.learning_starts), int(c.batch_size), float(c.tau), float(c.epsilon_start),
        float(c.epsilon_end), int(c.epsilon_decay_steps),
        float(c.learning_rate if c.learning_rate_end is None else c.learning_rate_end),
        int(c.learning_rate_decay_steps), float(c.per_beta_start), int(c.per_beta_steps),
    )  # fmt: skip


class AgentState(NamedTuple):
    """Everything the agent's kernels read and write, as one value.

    net : NetState (online network, target parameters, Adam)
    replay : ReplayState, or None for a custom buffer (then no kernel takes it)
    settings : AgentSettings
    counters : ndarray of int64, shape (2,): total_steps, n_updates
    replay_rng, explore_rng : ndarray of uint64, shape (4,): PCG64 states
    out : ndarray of float64, shape (2,): last mean loss, whether the last step trained
    """

    net: NetState
    replay: ReplayState | None
    settings: AgentSettings
    counters: np.ndarray
    replay_rng: np.ndarray
    explore_rng: np.ndarray
    out: np.ndarray


@inlined_kernel
def random_legal(rng_state: np.ndarray, n_actions: int, legal: np.ndarray) -> int:
    """A uniform random action index among the legal ones (one draw from ``rng_state``).

    legal : bool (n_actions,) with at least one True, or (0,): all legal,
    which draws exactly as an unmasked agent does.
    """
    if legal.shape[0] == 0:
        return next_below(rng_state, n_actions)
    count = np.int64(0)  # not 0: a literal start compiles next_below again for Literal[int](0)
    for j in range(n_actions):
        count += legal[j]
    k = next_below(rng_state, count)  # the k-th legal action
    for j in range(n_actions):
        if legal[j]:
            if k == 0:
                return j
            k -= 1
    return -1  # unreachable: count legal actions exist


@inlined_kernel
def epsilon_greedy(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, epsilon: float, rng_state: np.ndarray,
    legal: np.ndarray,
) -> int:  # fmt: skip
    """With probability epsilon a uniform random legal action index, else the greedy legal one.

    Draws u ~ U[0, 1) from ``rng_state`` whenever epsilon > 0, and a second
    number for the random action when u < epsilon.

    Parameters
    ----------
    params : ndarray of float32, shape (num_params,)
    sizes : ndarray of int64, shape (n_layers + 1,)
    obs : ndarray of float32, shape (obs_size,)
    epsilon : float in [0, 1]
    rng_state : ndarray of uint64, shape (4,)
        A PCG64 state, advanced in place.
    legal : ndarray of bool, shape (n_actions,) or (0,)
        At least one True; length 0: every action is legal.

    Returns
    -------
    int
        The action index, or -1 for an observation holding NaN or inf (no
        random number is drawn then).
    """
    if not all_finite(obs):
        return -1  # callers raise; no random number is drawn
    if epsilon > 0.0 and next_double(rng_state) < epsilon:
        return random_legal(rng_state, n_actions(sizes), legal)
    if legal.shape[0] == 0:
        return greedy_unchecked(params, sizes, obs)
    return greedy_legal(params, sizes, obs, legal)


@kernel
def epsilon_now(settings: AgentSettings, step: int) -> float:
    """The exploration rate after ``step`` env steps (:func:`linear_epsilon`).

    Parameters
    ----------
    settings : AgentSettings
    step : int >= 0

    Returns
    -------
    float in [0, 1]
    """
    return linear_epsilon(
        step, settings.epsilon_start, settings.epsilon_end, settings.epsilon_decay_steps
    )


@kernel
def learning_rate_now(settings: AgentSettings, step: int) -> float:
    """Adam's learning rate after ``step`` (int >= 0) env steps: the one home of
    the annealing schedule (:meth:`DqnConfig.learning_rate_at`'s formula).

    lr(t) = lr + (lr_end - lr) * min(t / decay_steps, 1); without annealing
    lr_end = lr, and lr + 0.0 * f is lr exactly (updates bit-identical to a
    constant rate).
    """
    return linear_epsilon(
        step, settings.update.learning_rate, settings.learning_rate_end,
        settings.learning_rate_decay_steps,
    )  # fmt: skip


@kernel
def update_settings_now(settings: AgentSettings, step: int) -> UpdateSettings:
    """``settings.update`` with the learning rate of step ``step`` (:func:`learning_rate_now`)."""
    hp = settings.update
    return UpdateSettings(
        learning_rate_now(settings, step), hp.huber_delta, hp.double_dqn, hp.max_grad_norm
    )


@kernel
def act_explore(net: NetState, settings: AgentSettings, counters: np.ndarray, obs: np.ndarray,
                 rng_state: np.ndarray, legal: np.ndarray) -> int:  # fmt: skip
    """The epsilon-greedy action index for ``obs`` at step ``counters[0]``.

    net : NetState (params and sizes are read); settings : AgentSettings;
    counters : int64 (2,); obs : float32 (obs_size,); rng_state : uint64 (4,);
    legal : bool (n_actions,) or (0,) (see :func:`epsilon_greedy`).
    Returns -1 for a non-finite observation. A noisy network first draws its
    acting noise from ``rng_state`` (:func:`~ember_np.dqn.learner.noisy.acting_params`).
    """
    params = acting_params(net, rng_state)  # noisy layers: perturbed by a new sample
    return epsilon_greedy(
        params, net.sizes, obs, epsilon_now(settings, counters[0]), rng_state, legal
    )


@kernel
def target_due(step: int, settings: AgentSettings) -> bool:
    """Whether the target network is synced after env step ``step`` (int, from 1).

    The one home of the sync schedule: every ``settings.target_update_freq`` (>= 1) steps.
    """
    return step % settings.target_update_freq == 0


@kernel
def train_due(step: int, stored: int, settings: AgentSettings) -> bool:
    """Whether gradient steps are taken after env step ``step`` (int, from 1).

    The one home of the train schedule: every ``settings.train_freq`` (>= 1)
    steps, once ``stored`` (int, transitions in the buffer) reaches
    ``settings.learning_starts``.
    """
    return step % settings.train_freq == 0 and stored >= settings.learning_starts


@kernel
def sync_target(net: NetState, tau: float) -> None:
    """Copy (tau >= 1) or Polyak-average (tau in (0, 1)) ``net.params`` into ``net.target``.

    net : NetState; target is updated in place. tau : float in (0, 1].
    """
    if tau >= 1.0:
        copy_into(net.target, net.params)
    else:
        polyak(net.target, net.params, tau)


@kernel
def per_beta(settings: AgentSettings, step: int) -> float:
    """PER's importance exponent after ``step`` env steps: linear from
    ``per_beta_start`` to 1 over ``per_beta_steps`` (:func:`linear_epsilon`'s schedule)."""
    return linear_epsilon(step, settings.per_beta_start, 1.0, settings.per_beta_steps)


@inlined_kernel
def train_from_buffer(
    replay: ReplayState, rng_state: np.ndarray, net: NetState, n_steps: int, batch_size: int,
    hp: UpdateSettings, beta: float,
) -> float:  # fmt: skip
    """``n_steps`` of (sample a batch, one DQN update); returns their mean loss.

    replay : ReplayState holding at least one transition (read only, but for
        the priorities of a prioritized buffer: each update writes its
        batch's |TD errors| back as priorities).
    rng_state : uint64 (4,), the replay stream, advanced in place.
    net : NetState, updated in place. n_steps, batch_size : int >= 1.
    hp : UpdateSettings. beta : float in [0, 1], PER's importance exponent.

    Every batch carries its per-sample discounts (gamma * mask, or gamma^m *
    mask for n-step: the buffer owns gamma), which the update reads; a
    prioritized buffer's importance weights go to it as the PerSample (length
    0: weight 1). The discounts are float64, one-step or n-step alike (one
    dtype, so the update chain compiles once).
    """
    discounts64 = np.empty(batch_size, dtype=np.float64)
    batch64 = new_batch(replay, net.sizes[0], discounts64)
    return train_on_batches(replay, rng_state, net, n_steps, batch64, hp, beta)


@inlined_kernel
def new_batch(replay: ReplayState, obs_size: int, discounts: np.ndarray) -> Batch:
    """An uninitialised Batch of ``len(discounts)`` rows for ``replay`` to fill.

    discounts : float64 (B,), becomes the batch's discounts. Weights
    and indices have B rows for a prioritized buffer (else 0), next_action_masks
    B rows of packed bits for a masked one (else 0).
    """
    batch_size = discounts.shape[0]
    per_len = batch_size if replay.tree.shape[0] > 0 else 0
    masks = replay.next_action_masks  # no rows: no action masks
    return Batch(
        np.empty((batch_size, obs_size), dtype=np.float32),
        np.empty(batch_size, dtype=np.int64),
        np.empty(batch_size, dtype=np.float32),
        np.empty((batch_size, obs_size), dtype=np.float32),
        np.empty(batch_size, dtype=np.float32),
        discounts,
        np.empty(per_len, dtype=np.float32),
        np.empty(per_len, dtype=np.int64),
        np.empty((batch_size if masks.shape[0] > 0 else 0, masks.shape[1]), dtype=np.uint8),
    )


@inlined_kernel
def train_on_batches(
    replay: ReplayState, rng_state: np.ndarray, net: NetState, n_steps: int, batch: Batch,
    hp: UpdateSettings, beta: float,
) -> float:  # fmt: skip
    """:func:`train_from_buffer`'s loop: ``n_steps`` times sample into ``batch``
    (a :func:`new_batch`) and update; returns the mean loss."""
    per_len = batch.weights.shape[0]
    per = PerSample(batch.weights, np.empty(per_len, dtype=np.float32))
    total = 0.0
    for _ in range(n_steps):
        sample_into(replay, rng_state, batch, beta)
        total += dqn_update(net, batch, per, hp)
        if per_len > 0:
            update_priorities(replay, batch.indices, per.td_errors)
    return total / n_steps


@inlined_kernel
def agent_step(
    agent: AgentState,
    obs: np.ndarray,
    action: int,
    reward: float,
    next_obs: np.ndarray,
    status: int,
    act_next: bool,
    next_mask: np.ndarray,
) -> int:
    """One env step of the agent in one call.

    Store the transition; count the step; sync the target when due
    (:func:`target_due`); train when due (:func:`train_due`); then, if
    ``act_next``, pick the epsilon-greedy action for ``next_obs``.

    Parameters
    ----------
    agent : AgentState
        With a ReplayState; everything in it is updated in place. ``agent.out``
        gets [mean loss of this step's training, 1.0 if it trained else 0.0].
    obs, next_obs : ndarray of float32, shape (obs_size,)
        C-contiguous.
    action : int
    reward : float
    status : int
        An EpisodeStatus value. The transition is validated by :func:`push_transition`.
    act_next : bool
        Whether to pick the next action.
    next_mask : ndarray of bool, shape (n_actions,) or (0,)
        The legal actions in ``next_obs`` (length 0: all legal), stored with the
        transition by a masked buffer and obeyed by the next action.

    Returns
    -------
    int
        The next action index (0 unless ``act_next``), or -code for a rejected
        transition (nothing stored, counted or trained then).
    """
    agent.out[1] = 0.0
    # np.int64(0), not 0: a literal stream index compiles segment_base again for Literal[int](0)
    code = observe_one(agent, np.int64(0), obs, action, reward, next_obs, status, next_mask)
    if code != 0:
        return -code
    if act_next:
        return epsilon_greedy(
            acting_params(agent.net, agent.explore_rng), agent.net.sizes, next_obs,
            epsilon_now(agent.settings, agent.counters[0]), agent.explore_rng, next_mask,
        )  # fmt: skip
    return 0


# agent_vec_step's statuses[e] for an env that produced no transition this step
# (gymnasium's NEXT_STEP autoreset: the step that resets a finished env).
NO_TRANSITION = -1
# agent_vec_step's error code for an observation to act on that holds NaN or inf
# (push codes are 1-6; an error in env e is returned as -(code + ENV_CODES * e)).
BAD_ACT_OBS = 7
ENV_CODES = 8


# act_batch_explore's mark in out[e] for a row left to the network (a real index never < 0).
GREEDY_ROW = -2


class VecStep(NamedTuple):
    """One step of N envs, as :func:`agent_vec_step` reads and writes it.

    obs : ndarray of float32, shape (N, obs_size)
        The observations the actions were chosen for.
    actions : ndarray of int64, shape (N,)
        The action index each env took.
    rewards : ndarray of float64, shape (N,)
    next_obs : ndarray of float32, shape (N, obs_size)
        Each transition's next observation: for an episode that ended, its
        real last observation (truncated episodes bootstrap from it).
    statuses : ndarray of int64, shape (N,)
        An EpisodeStatus value per env, or NO_TRANSITION (nothing stored).
    next_masks : ndarray of bool, shape (N, n_actions) or (N, 0)
        The legal actions in each next_obs (width 0: all legal), stored with
        the transitions by a masked buffer.
    act_obs : ndarray of float32, shape (N, obs_size)
        The observation each env acts on next (next_obs, or the first
        observation of its next episode when the env has reset already).
    act_masks : ndarray of bool, shape (N, n_actions) or (N, 0)
        The legal actions in each act_obs.
    acting : ndarray of bool, shape (N,)
        Whether to pick env e's next action (False: the env ignores it, as
        gymnasium's NEXT_STEP autoreset does on the step after an episode
        ends; 0 is written and no random number drawn).
    next_actions : ndarray of int64, shape (N,)
        Written: the epsilon-greedy action index for each act_obs.
    """

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    statuses: np.ndarray
    next_masks: np.ndarray
    act_obs: np.ndarray
    act_masks: np.ndarray
    acting: np.ndarray
    next_actions: np.ndarray


@inlined_kernel
def observe_one(agent: AgentState, env: int | np.int64, obs: np.ndarray, action: int, reward: float,
                next_obs: np.ndarray, status: int, next_mask: np.ndarray) -> int:  # fmt: skip
    """Store one transition of stream ``env``, count it, sync and train when due.

    The per-transition schedule of :func:`agent_step` (arguments as there;
    ``env`` in [0, replay.num_envs)). Sets ``agent.out[1]`` to 1.0 when it
    trains (never clears it). Returns 0 or a push error code. Never called with
    ``agent.replay`` None (a custom buffer), hence the ignores below.
    """
    code = push_transition(agent.replay, env, obs, action, reward, next_obs, status, next_mask)  # type: ignore[arg-type]
    if code != 0:
        return code
    counters = agent.counters
    settings = agent.settings
    step = counters[0] + 1
    counters[0] = step
    if target_due(step, settings):
        sync_target(agent.net, settings.tau)
    if train_due(step, agent.replay.cursor[1], settings):  # type: ignore[union-attr]
        n = settings.gradient_steps
        agent.out[0] = train_from_buffer(
            agent.replay, agent.replay_rng, agent.net, n, settings.batch_size,  # type: ignore[arg-type]
            update_settings_now(settings, step), per_beta(settings, step),
        )  # fmt: skip
        counters[1] += n
        agent.out[1] = 1.0
    return 0


@kernel
def act_batch_explore(net: NetState, epsilon: float, rng_state: np.ndarray, obs: np.ndarray,
                      masks: np.ndarray, acting: np.ndarray, out: np.ndarray) -> int:  # fmt: skip
    """Epsilon-greedy action indices for the rows of ``obs``, one forward pass for the greedy ones.

    Env by env, in order, from the one stream ``rng_state``: u ~ U[0, 1)
    when epsilon > 0, and a random legal action when u < epsilon (the draws
    of :func:`epsilon_greedy`); the rows left greedy then go through the
    network together (a noisy network: with one acting sample, drawn after
    the rows' draws). One row takes :func:`epsilon_greedy` itself (the
    one-observation forward pass), so one env acts exactly as a single env.

    net : NetState; epsilon : float in [0, 1]; rng_state : uint64 (4,), advanced;
    obs : float32 (N, obs_size); masks : bool (N, n_actions) or (N, 0);
    acting : bool (N,), rows to act for (others get 0, no draw);
    out : int64 (N,), written.
    Returns -1, or the first acting row holding NaN or inf (no draw for it
    or after it).
    """
    n_envs = obs.shape[0]
    n_act = n_actions(net.sizes)  # (not sizes[-1]: a distributional head's suffix ends sizes)
    if n_envs == 1:
        out[0] = 0
        if acting[0]:
            params = acting_params(net, rng_state)
            out[0] = epsilon_greedy(params, net.sizes, obs[0], epsilon, rng_state, masks[0])
            if out[0] < 0:
                return 0
        return -1
    # Greedy rows are marked in out first (no index array), then go through the
    # network from two arrays allocated once per call: the rows and forward_into's
    # workspace, whose Q block is read in place (no copy of it, no q array).
    n_greedy = 0
    for e in range(n_envs):
        out[e] = 0
        if not acting[e]:
            continue
        if not all_finite(obs[e]):
            for g in range(e):  # greedy rows before it get 0, as rows not acted for
                if out[g] == GREEDY_ROW:
                    out[g] = 0
            return e
        if epsilon > 0.0 and next_double(rng_state) < epsilon:
            out[e] = random_legal(rng_state, n_act, masks[e])
        else:
            out[e] = GREEDY_ROW
            n_greedy += 1
    if n_greedy == 0:
        return -1
    n_obs = obs.shape[1]
    x = np.empty((n_greedy, n_obs), dtype=np.float32)
    g = 0
    for e in range(n_envs):
        if out[e] == GREEDY_ROW:
            for k in range(n_obs):
                x[g, k] = obs[e, k]
            g += 1
    params = acting_params(net, rng_state)
    sizes = net.sizes
    acts = np.empty(acts_size(params.shape[0], sizes, n_greedy), dtype=params.dtype)
    q_off = forward_into(params, sizes, x, acts)
    n_out = sizes[n_layers(sizes)]
    q = acts[q_off : q_off + n_greedy * n_out].reshape((n_greedy, n_out))
    if head_kind(sizes) != 0:  # a distributional head's outputs: their expected values
        q = np.empty((n_greedy, n_act), dtype=params.dtype)
        expected_q(acts[q_off : q_off + n_greedy * n_out].reshape((n_greedy, n_out)), sizes, q)
    g = 0
    for e in range(n_envs):
        if out[e] == GREEDY_ROW:
            out[e] = argmax_legal(q[g], masks[e])
            g += 1
    return -1


@kernel
def agent_vec_step(agent: AgentState, step: VecStep) -> int:
    """One step of N envs: every transition through :func:`agent_step`'s schedule,
    then all N next actions at once.

    Env by env, in order (SB3's counting: each transition is one env step),
    store the transition in its env's stream, count it, sync the target and
    train when due; then pick the next actions (:func:`act_batch_explore`,
    at the exploration rate after the last transition). With one env this is
    exactly :func:`agent_step` (and, after an episode ended, the first
    action of the next one).

    Parameters
    ----------
    agent : AgentState
        With a ReplayState of ``num_envs`` N (N streams); updated in place.
        ``agent.out`` gets [latest mean loss, 1.0 if any transition trained].
    step : VecStep
        Read; ``step.next_actions`` written.

    Returns
    -------
    int
        0, or -(code + ENV_CODES * e) for a push error ``code`` (or
        BAD_ACT_OBS) of env e: the transitions of envs before e were stored
        and counted, nothing after.
    """
    agent.out[1] = 0.0
    statuses = step.statuses
    for e in range(statuses.shape[0]):
        if statuses[e] == NO_TRANSITION:
            continue
        code = observe_one(agent, e, step.obs[e], step.actions[e], step.rewards[e],
                           step.next_obs[e], statuses[e], step.next_masks[e])  # fmt: skip
        if code != 0:
            return -(code + ENV_CODES * e)
    epsilon = epsilon_now(agent.settings, agent.counters[0])
    row = act_batch_explore(agent.net, epsilon, agent.explore_rng, step.act_obs, step.act_masks,
                            step.acting, step.next_actions)  # fmt: skip
    if row >= 0:
        return -(BAD_ACT_OBS + ENV_CODES * row)
    return 0

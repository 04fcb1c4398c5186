"""PPOAgent: PPO's actor-critic, rollout buffer and update behind the trainer's agent protocol.

The trainer steps any agent through :class:`~ember_np.types.LearningAgent` (one env)
or the vector members (``set_num_envs``, ``new_vec_step``, ``observe_vector``,
``encode_batch``, ``indices_to_actions``: N envs); PPOAgent implements both, so
``DqnTrainer`` drives it over a gymnasium env or vector env as it drives a DQN agent.
One env is N = 1 of the same path.

A rollout, as Stable-Baselines3's ``PPO.collect_rollouts`` and ``PPO.train``:

1. each env acts on its observation (normalised, when asked, by :class:`VecNormalizer`)
   with an action sampled from the policy; its log-probability and the critic's value
   are kept until the transition comes back;
2. the transition is stored in the :class:`RolloutBuffer` with its (normalised)
   reward; a truncated episode bootstraps from the critic's value of its real last
   observation;
3. after ``n_steps`` vector steps the critic values the observations the envs act on
   next, GAE(lambda) gives advantages and returns, and :func:`update` runs every epoch
   of minibatches; the learning rate and clip range follow their schedules over the
   run (the config's ``schedule_steps``: SB3's ``progress_remaining``);
4. the next actions are sampled by the updated policy.

Randomness: three streams from the seed (:meth:`Rng.streams`): the initialisation,
the actions, the minibatch shuffles.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from ember_np._arrays import as_f32
from ember_np._masks import check_action_mask
from ember_np.checkpoint import (
    COUNTERS_KEY,
    FORMAT_KEY,
    VERSION_KEY,
    Reader,
    json_array,
    save_arrays,
    string_array,
)
from ember_np.encoding import (
    IndexActionMapper,
    describe,
    encode_batch_for_network,
    encoder_for_space,
    encoder_from_description,
    indices_to_actions,
    mapper_from_description,
    single_spaces,
)
from ember_np.ppo.checkpoint_format import (
    BUFFER_KEYS,
    CHECKPOINT_FORMAT,
    CHECKPOINT_VERSION,
    NET_KEYS,
)
from ember_np.ppo.config import PPOConfig
from ember_np.ppo.network import ActorCritic
from ember_np.ppo.normalize import VecNormalizer
from ember_np.ppo.rollout import NEXT_STEP, SAME_STEP, RolloutBuffer
from ember_np.ppo.update import Rollout, update, update_settings
from ember_np.rng import Rng
from ember_np.types import Experience

__all__ = ["LOGGED_STATS", "NO_TRANSITION", "PPOAgent", "PPOStep", "explained_variance"]


#: A VecStep row that is no transition (a reset row under ``NEXT_STEP`` autoreset, or
#: the first observations): the trainer's value (``dqn.agent_kernels.NO_TRANSITION``).
NO_TRANSITION = -1


#: The update's statistics a training episode's log row carries (SB3's ``train/``).
LOGGED_STATS = ("loss", "policy_loss", "value_loss", "entropy_loss", "approx_kl",
                "clip_fraction", "explained_variance", "learning_rate", "clip_range")  # fmt: skip


def explained_variance(values: np.ndarray, returns: np.ndarray) -> float:
    """1 - Var(returns - values) / Var(returns) (SB3's, over a rollout; NaN when the
    returns have no variance)."""
    var = float(np.var(returns.astype(np.float64)))
    if var == 0.0:
        return math.nan
    return 1.0 - float(np.var(returns.astype(np.float64) - values)) / var


class PPOStep(NamedTuple):
    """One step of N envs, as the trainer's vector driver fills it (the fields of DQN's
    ``VecStep``, which the driver reads and writes by name)."""

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


class PPOAgent:
    """PPO (clipped surrogate, GAE, optional VecNormalize) for discrete actions.

    Parameters
    ----------
    encoder : ObservationEncoder
        Observations to float32 vectors (``encoder_for_space``).
    action_mapper : IndexActionMapper
        Action indices to env actions.
    config : PPOConfig
    seed : int
        Derives the initialisation, action and shuffle streams.

    Notes
    -----
    The number of envs is the trainer's (:meth:`set_num_envs`); linear schedules span
    the config's ``schedule_steps``.
    """

    def __init__(self, encoder: Any, action_mapper: Any, config: PPOConfig, seed: int = 0) -> None:
        if not isinstance(config, PPOConfig):
            raise TypeError(f"config must be a PPOConfig, got {type(config).__name__}")
        self.encoder = encoder
        self.action_mapper = action_mapper
        self.config = config
        self.seed = int(seed)
        self.obs_size = int(encoder.obs_size)
        self.n_actions = int(action_mapper.num_actions)
        self._width = self.n_actions if config.action_masks else 0  # stored masks' width
        init_rng, self.act_rng, self.update_rng = Rng.streams(self.seed, 3)
        self.net = ActorCritic(self.obs_size, self.n_actions, config, init_rng)
        self.last_loss = math.nan
        self.last_stats: dict[str, float] = {}
        self._total_steps = 0
        self._n_updates = 0
        self._trained = False
        self._mode = SAME_STEP
        self.num_envs = 0
        self.buffer: RolloutBuffer
        self.normalizer: VecNormalizer | None
        self.set_num_envs(1)
        self._one = self.new_vec_step(1, masks=config.action_masks)  # the one-env step

    @classmethod
    def for_env(cls, env: Any, config: PPOConfig | None = None, seed: int = 0) -> PPOAgent:
        """An agent for a gymnasium env or vector env (its copies' spaces): a Box or
        Discrete observation space (:func:`~ember_np.encoding.encoder_for_space`) and
        a Discrete action space. ``config`` None: :class:`PPOConfig`'s defaults."""
        obs_space, action_space = single_spaces(env)
        return cls(encoder_for_space(obs_space), IndexActionMapper.for_space(action_space),
                   PPOConfig() if config is None else config, seed)  # fmt: skip

    # -- set-up ------------------------------------------------------------------
    def set_num_envs(self, num_envs: int) -> None:
        """Learn from ``num_envs`` envs stepped together: a new rollout buffer of
        ``n_steps`` x ``num_envs`` (and normaliser); the one being filled must be empty."""
        n = int(num_envs)
        if n < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs!r}")
        if n == self.num_envs:
            return
        if self.config.normalize_advantage and self.config.rollout_size(n) < 2:
            raise ValueError(
                f"a rollout of n_steps={self.config.n_steps} x {n} env(s) holds one "
                "transition, whose advantage has no spread: raise n_steps or set "
                "normalize_advantage=False"
            )
        self._refuse_partial_rollout(f"split for {n} envs")
        c = self.config
        self.num_envs = n
        self._new_buffer()
        self.normalizer = (
            VecNormalizer(self.obs_size, n, c.normalize_obs, c.normalize_reward, gamma=c.gamma)
            if c.normalize_obs or c.normalize_reward
            else None
        )
        self._x = np.zeros((n, self.obs_size), np.float32)  # the normalised obs acted on
        self._values = np.zeros(n, np.float32)
        self._logp = np.zeros(n, np.float32)
        self._masks = np.ones((n, self._width), np.bool_)  # the legal actions of _x's rows

    @property
    def action_masks(self) -> bool:
        """Whether this agent takes gymnasium's ``info["action_mask"]``
        (``config.action_masks``); the trainer passes masks only then."""
        return self.config.action_masks

    def set_autoreset_mode(self, mode: str) -> None:
        """``"next"`` or ``"same"``: how the vector env resets (the trainer's driver
        tells). A new mode takes a new rollout buffer (the normaliser's statistics stay);
        the rollout being filled must be empty."""
        if mode not in (NEXT_STEP, SAME_STEP):
            raise ValueError(f"autoreset mode must be 'next' or 'same', got {mode!r}")
        if mode != self._mode:
            self._refuse_partial_rollout(f"refilled under {mode!r} autoreset")
            self._mode = mode
            self._new_buffer()

    def _new_buffer(self) -> None:
        """An empty rollout buffer for ``num_envs`` envs and the autoreset mode."""
        c = self.config
        self.buffer = RolloutBuffer(c.n_steps, self.num_envs, self.obs_size, self._width,
                                    c.gamma, c.gae_lambda, self._mode)  # fmt: skip

    def _refuse_partial_rollout(self, change: str) -> None:
        """ValueError when the buffer holds steps (they would be lost by ``change``)."""
        if self.num_envs and self.buffer.pos:
            raise ValueError(f"the rollout holds {self.buffer.pos} steps of {self.num_envs} "
                             f"envs: it cannot be {change}; finish the rollout first")  # fmt: skip

    def new_vec_step(self, num_envs: int, masks: bool = False) -> PPOStep:
        """Zeroed arrays of one vector step for :meth:`observe_vector` (``masks``: with
        (N, n_actions) masks, all legal, which needs ``config.action_masks``)."""
        if masks and not self.action_masks:
            raise ValueError("this agent takes no action masks (config.action_masks=False): "
                             "train with --set action_masks=true")  # fmt: skip
        n, k, w = int(num_envs), self.obs_size, self.n_actions if masks else 0
        return PPOStep(
            np.zeros((n, k), np.float32), np.zeros(n, np.int64), np.zeros(n, np.float64),
            np.zeros((n, k), np.float32), np.zeros(n, np.int64), np.ones((n, w), np.bool_),
            np.zeros((n, k), np.float32), np.ones((n, w), np.bool_), np.ones(n, np.bool_),
            np.zeros(n, np.int64),
        )  # fmt: skip

    # -- observations and actions ------------------------------------------------
    def encode(self, obs: Any) -> np.ndarray:
        """One raw observation as float32 (obs_size,)."""
        return as_f32(self.encoder.encode(obs), "the encoder's output")

    def encode_batch(self, obs_batch: Any) -> np.ndarray:
        """A batch of raw observations as float32 (N, obs_size)."""
        return encode_batch_for_network(self.encoder, obs_batch, self.obs_size)

    def index_to_action(self, index: int) -> Any:
        return self.action_mapper.index_to_action(int(index))

    def indices_to_actions(self, indices: np.ndarray) -> np.ndarray:
        return indices_to_actions(self.action_mapper, indices)

    def _normalized(self, x: np.ndarray, update_rows: np.ndarray | None = None) -> np.ndarray:
        if self.normalizer is None or not self.config.normalize_obs:
            return x
        return self.normalizer.normalize_obs(x, update_rows)

    def _applied(self, x: np.ndarray) -> np.ndarray:
        if self.normalizer is None or not self.config.normalize_obs:
            return x
        return self.normalizer.apply_obs(x)

    def _one_mask(self, action_mask: Any) -> np.ndarray | None:
        """One state's mask as bool (1, n_actions), or None (every action legal)."""
        if action_mask is None:
            return None
        return check_action_mask(action_mask, self.n_actions)[None, :]

    def act(self, obs: Any, action_mask: Any = None) -> Any:
        """The greedy env action (argmax of the logits, over the legal actions when
        ``action_mask`` is given) for one raw observation."""
        x = self._applied(self.encode(obs)[None, :])
        actions, _, _ = self.net.act(x, self.act_rng, deterministic=True,
                                     action_masks=self._one_mask(action_mask))  # fmt: skip
        return self.index_to_action(int(actions[0]))

    def act_epsilon_greedy(self, obs: Any, rng: Any = None, action_mask: Any = None) -> Any:
        """An action sampled from the policy (the trainer's name for exploring)."""
        x = self._applied(self.encode(obs)[None, :])
        actions, _, _ = self.net.act(x, self.act_rng, action_masks=self._one_mask(action_mask))
        return self.index_to_action(int(actions[0]))

    def _pick(self, rows: np.ndarray, x: np.ndarray, masks: np.ndarray | None = None) -> np.ndarray:
        """Sample actions for normalised ``x`` (N, obs_size), among each row's legal
        actions in ``masks`` (bool (N, n_actions), None: all); keep each row's obs,
        value, log-probability and mask where ``rows`` (bool (N,)) for the transitions
        to come."""
        actions, logp, values = self.net.act(x, self.act_rng, action_masks=masks)
        self._x[rows] = x[rows]
        self._logp[rows] = logp[rows]
        self._values[rows] = values[rows]
        if self._width:
            self._masks[rows] = True if masks is None else masks[rows]
        return actions

    def act_encoded(self, x: np.ndarray, action_mask: Any = None) -> int:
        """The first action of an episode (one env): sampled (among the legal actions
        of ``action_mask``), its obs kept."""
        self._require_envs(1)
        xn = self._normalized(np.asarray(x, np.float32)[None, :])
        return int(self._pick(np.ones(1, np.bool_), xn, self._one_mask(action_mask))[0])

    def _require_envs(self, n: int) -> None:
        if self.num_envs != n:
            raise ValueError(f"this agent learns from {self.num_envs} envs; the one-env "
                             "methods need set_num_envs(1)")  # fmt: skip

    # -- learning ----------------------------------------------------------------
    def observe(self, experience: Experience) -> bool:
        """Learn from one raw transition of one env, its action taken by whoever acted
        (its log-probability and value are the current policy's, at the transition's
        observation); whether an update ran."""
        self._require_envs(1)
        index = int(self.action_mapper.action_to_index(experience.action))
        xn = self._normalized(self.encode(experience.observation)[None, :])
        logp, _, values = self.net.evaluate(xn, np.array([index]))
        self._x[0], self._logp[0], self._values[0] = xn[0], logp[0], values[0]
        status = int(experience.status)
        self.observe_encoded(xn[0], index, experience.reward,
                             self.encode(experience.next_observation), status)  # fmt: skip
        return self._trained

    def observe_encoded(self, x: np.ndarray, index: int, reward: Any, nx: np.ndarray,
                        status: int, act_next: bool = False,
                        next_action_mask: Any = None) -> int:  # fmt: skip
        """Learn from one transition of one env (its action picked by the last
        :meth:`act_encoded` or ``act_next``); with ``act_next`` return the next action,
        among the legal ones of ``next_action_mask``."""
        self._require_envs(1)
        s = self._one
        if s.act_masks.shape[1]:
            mask = self._one_mask(next_action_mask)
            s.act_masks[0] = True if mask is None else mask[0]
        s.actions[0] = index
        s.rewards[0] = float(reward)
        s.next_obs[0] = nx
        s.statuses[0] = int(status)
        s.act_obs[0] = nx
        s.acting[0] = bool(act_next)
        self.observe_vector(s)
        return int(s.next_actions[0]) if act_next else 0

    def observe_vector(self, step: PPOStep) -> np.ndarray:
        """Learn from one step of N envs (store; at a full rollout, GAE and the update)
        and sample the acting envs' next actions into ``step.next_actions``."""
        n = self.num_envs
        codes = step.statuses
        moved = codes != NO_TRANSITION
        self._trained = False
        if moved.any():
            self._store(step, codes, moved)
        acting = np.asarray(step.acting, np.bool_).reshape(n)
        # the observations acted on join the statistics, a finished episode's last one
        # does not (NEXT_STEP's ended rows; one env's terminal step), as SB3's VecNormalize
        x = self._normalized(step.act_obs, None if acting.all() else acting)
        if self.buffer.full:
            self._learn(x)
        if self._mode == SAME_STEP and not acting.any():  # one env's episode ended
            return step.next_actions
        masks = step.act_masks if step.act_masks.shape[1] else None
        step.next_actions[:] = np.where(acting, self._pick(acting, x, masks), 0)
        return step.next_actions

    def _store(self, step: PPOStep, codes: np.ndarray, moved: np.ndarray) -> None:
        terminated, truncated = codes == 1, codes == 2
        rewards = np.where(moved, step.rewards, 0.0)
        if self.normalizer is not None and self.config.normalize_reward:
            rewards = self.normalizer.normalize_reward(rewards, terminated, truncated,
                                                       skip=~moved)  # fmt: skip
        final = np.zeros(self.num_envs, np.float32)
        if truncated.any():
            _, _, v = self.net.act(self._applied(step.next_obs), self.act_rng, deterministic=True)
            final[truncated] = v[truncated]
        self.buffer.store(self._x, step.actions, self._values, self._logp, rewards,
                          terminated, truncated, final,
                          self._masks if self._width else None)  # fmt: skip
        self._total_steps += int(np.count_nonzero(moved))

    def rollout(self) -> Rollout:
        """The rollout buffer's transitions as the update takes them (flat views over
        steps and envs, its masks when the agent takes them), GAE as last computed."""
        f = self.buffer.flat()
        return Rollout(f.obs, f.actions, f.log_probs, f.advantages, f.returns, f.values,
                       f.valid, f.masks if self._width else None)  # fmt: skip

    def _learn(self, x_next: np.ndarray) -> None:
        """GAE with the critic's values of ``x_next``, then every epoch of the update."""
        _, _, last_values = self.net.act(x_next, self.act_rng, deterministic=True)
        self.buffer.compute_gae(last_values)
        c = self.config
        progress = c.progress_remaining(self._total_steps)
        settings = update_settings(c, c.learning_rate_at(progress), c.clip_range_at(progress))
        r = self.rollout()
        self.last_stats = update(self.net, r, settings, self.update_rng)
        self.last_stats.update(
            explained_variance=explained_variance(r.old_values[r.valid], r.returns[r.valid]),
            learning_rate=settings.learning_rate, clip_range=settings.clip_range,
        )  # fmt: skip
        self.last_loss = self.last_stats["loss"]
        self._n_updates += int(self.last_stats["n_epochs"])
        self._trained = True
        self.buffer.reset()

    # -- counters ----------------------------------------------------------------
    @property
    def total_steps(self) -> int:
        """Env transitions observed."""
        return self._total_steps

    @property
    def n_updates(self) -> int:
        """Epochs of updates begun (SB3's ``n_updates``)."""
        return self._n_updates

    @property
    def last_step_trained(self) -> bool:
        """Whether the last observed step ended a rollout (an update ran)."""
        return self._trained

    def episode_extras(self, total_steps: int, loss: float) -> dict[str, float]:
        """What a finished episode's log row (and TensorBoard's ``train/``) carries: the
        last update's :data:`LOGGED_STATS` (SB3's names), none before the first; a NaN
        (explained variance of constant returns) is left out, as JSON has none."""
        stats = ((name, float(self.last_stats[name])) for name in LOGGED_STATS
                 if name in self.last_stats)  # fmt: skip
        return {name: value for name, value in stats if math.isfinite(value)}

    def epsilon_at(self, step: int) -> float:
        """0.0: PPO has no epsilon, it explores by sampling its policy (the trainer's
        logs and progress bar show the column)."""
        return 0.0

    # -- the compiled loop (the trainer's FusedVectorDriver runs it) ---------------
    def can_fuse(self, env: Any) -> bool:
        """Whether the compiled loop (:mod:`ember_np.ppo.fused`) can drive ``env``: a
        ``NativeVecEnv`` of this agent's sizes, with a flat ``VecEncoder`` and
        ``IndexActionMapper(start=0)``. A single native env is stepped through Python
        (``NativeVecEnv(env_id, 1)`` is one env in the compiled loop)."""
        from ember_np.ppo.fused import fusable

        return fusable(self, env)

    @property
    def kernel_state(self) -> Any:
        """The agent's state as the compiled loop takes it (a ``FusedPPO``: views of its
        arrays, its counters copied in)."""
        from ember_np.ppo.fused import fused_state

        return fused_state(self, (self._x, self._values, self._logp))

    def fused_vec_run(self, until: int, env_state: Any, loop: Any) -> int:
        """Vector steps of a ``NativeVecEnv`` (``env_state``, its ``kernel_state``) in the
        compiled loop until :attr:`total_steps` reaches ``until``; ``loop`` is the
        trainer's record (``FusedVecLoop`` of this agent's :class:`PPOStep`). Returns 0,
        or a negative code for :meth:`raise_vec_error`."""
        from ember_np.ppo import fused

        state = self.kernel_state
        code = int(fused.fused_ppo_steps(until, env_state, loop, state))
        self._total_steps = int(state.counters[fused.TOTAL])
        self._n_updates = int(state.counters[fused.UPDATES])
        self.last_loss = float(state.out[fused.LAST_LOSS])
        self._trained = bool(state.out[fused.TRAINED])
        if state.out[fused.ROLLOUTS]:  # an update ran: its statistics, as _learn keeps them
            self.last_stats = fused.last_stats(state, explained_variance)
        return code

    def raise_vec_error(self, code: int, step: Any) -> None:
        """Raise the ValueError of the compiled loop's negative return ``code``."""
        from ember_np.ppo.fused import vec_error

        raise vec_error(code)

    # -- checkpoints -------------------------------------------------------------
    def save(self, path: str | os.PathLike[str], include_buffer: bool = True) -> Path:
        """Write the agent to ``path`` (.npz, atomically): the network and Adam state,
        counters, random streams, normalisation statistics and the rollout in progress
        (so a resumed run equals the run straight through). ``include_buffer`` is the
        trainer's argument; a rollout is always saved (it is small)."""
        arrays: dict[str, np.ndarray] = {
            FORMAT_KEY: string_array(CHECKPOINT_FORMAT),
            VERSION_KEY: np.int64(CHECKPOINT_VERSION),
            COUNTERS_KEY: np.array([self._total_steps, self._n_updates], dtype=np.int64),
            "meta": json_array({
                "seed": self.seed, "config": self.config.to_dict(),
                "encoder": describe(self.encoder), "mapper": describe(self.action_mapper),
                "num_envs": self.num_envs,
                "autoreset": self._mode, "last_loss": self.last_loss,
            }),
            "rng_act": self.act_rng.state.copy(),
            "rng_update": self.update_rng.state.copy(),
            "pending_obs": self._x, "pending_values": self._values, "pending_logp": self._logp,
        }  # fmt: skip
        if self._width:
            arrays["pending_masks"] = self._masks
        for key in NET_KEYS:
            arrays[f"net/{key}"] = getattr(self.net, key)
        rollout = self.buffer.arrays._asdict()
        for key in BUFFER_KEYS:
            arrays[f"buffer/{key}"] = rollout[key]
        if self.normalizer is not None:
            for key, arr in self.normalizer.state_arrays().items():
                arrays[f"normalizer/{key}"] = arr
        save_arrays(path, arrays)
        return Path(path)

    def load(self, path: str | os.PathLike[str], include_buffer: bool = True) -> PPOAgent:
        """Restore :meth:`save`'s state into this agent (same config and sizes)."""
        reader = Reader(path)
        reader.check_format(CHECKPOINT_FORMAT, CHECKPOINT_VERSION)
        meta = reader.json("meta")
        self.buffer.reset()
        self.set_num_envs(int(meta["num_envs"]))
        self.set_autoreset_mode(str(meta["autoreset"]))
        counters = reader.array(COUNTERS_KEY, "int64", (2,))
        for key in NET_KEYS:
            target = getattr(self.net, key)
            saved = reader.array(f"net/{key}", target.dtype, target.shape)
            if key == "layers":  # built from the config: the same network, or refused
                if not np.array_equal(saved, target):
                    raise reader.error("its layer table is not this config's network")
            else:
                target[...] = saved
        rollout = self.buffer.arrays._asdict()
        for key in BUFFER_KEYS:
            rollout[key][...] = reader.array(
                f"buffer/{key}", rollout[key].dtype, rollout[key].shape
            )
        pending: list[tuple[str, np.ndarray]] = [
            ("pending_obs", self._x), ("pending_values", self._values), ("pending_logp", self._logp)
        ]  # fmt: skip
        if self._width:
            pending.append(("pending_masks", self._masks))
        for name, target in pending:
            target[...] = reader.array(name, target.dtype, target.shape)
        self.act_rng.state[:] = reader.array("rng_act", "uint64", (4,))
        self.update_rng.state[:] = reader.array("rng_update", "uint64", (4,))
        if self.normalizer is not None:
            keys = self.normalizer.state_arrays()
            self.normalizer.load_state_arrays(
                {k: reader.array(f"normalizer/{k}", "float64") for k in keys}
            )
        self._total_steps, self._n_updates = int(counters[0]), int(counters[1])
        self.last_loss = float(meta.get("last_loss", math.nan))
        return self

    @classmethod
    def from_checkpoint(cls, path: str | os.PathLike[str]) -> PPOAgent:
        """A new agent restored from :meth:`save`'s file."""
        reader = Reader(path)
        reader.check_format(CHECKPOINT_FORMAT, CHECKPOINT_VERSION)
        meta = reader.json("meta")
        config = dict(meta["config"])
        if "n_envs" in config:  # written before the run's num_envs owned it (2026-12-05)
            del config["n_envs"]
            config["schedule_steps"] = meta.get("total_timesteps")
        agent = cls(encoder_from_description(meta["encoder"]),
                    mapper_from_description(meta["mapper"]),
                    PPOConfig.from_dict(config), int(meta["seed"]))  # fmt: skip
        return agent.load(path)

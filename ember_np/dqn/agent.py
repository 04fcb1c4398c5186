"""DqnAgent: the DQN learner (online + target network, replay, exploration).

The agent follows ember-rl's ``DqnAgent`` and SB3's ordering of one env step:
store the transition; every ``target_update_freq`` steps sync the target
network; every ``train_freq`` steps, once the buffer holds
``max(batch_size, min_replay_size)`` transitions, take ``gradient_steps``
gradient steps. Exploration is epsilon-greedy with a linear schedule.

Randomness comes from three PCG64 streams derived from the seed:
initialisation, replay sampling and exploration. The last two are saved in
checkpoints, so a restored agent continues exactly where it stopped. Noisy
layers (``DqnConfig(noisy=True)``) draw each update's noise from the replay
stream and each exploring action's from the exploration stream.
"""

from __future__ import annotations

import math
import operator
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ember_np._arrays import as_f32
from ember_np._jit import entry_point
from ember_np._masks import ALL_LEGAL, check_action_mask
from ember_np._memory import check_network_memory
from ember_np._validate import check_int
from ember_np.checkpoint import json_array, save_arrays, string_array
from ember_np.dqn.agent_io import (
    buffer_for,
    check_checkpoint_architecture,
    check_config_architecture,
    config_differences,
    configure_buffer,
    read_agent_parts,
    read_learner_state,
    seed_array,
)
from ember_np.dqn.agent_kernels import (
    AgentState,
    act_explore,
    agent_settings,
    agent_step,
    learning_rate_now,
    target_due,
    train_due,
    train_from_buffer,
    update_settings_now,
)
from ember_np.dqn.agent_vec import VecStep, VectorLearner
from ember_np.dqn.checkpoint_format import AGENT_FORMAT, FORMAT_VERSION
from ember_np.dqn.checkpoint_format import AgentKeys as K
from ember_np.dqn.checkpoint_format import AgentReader as Reader
from ember_np.dqn.config import DqnConfig
from ember_np.dqn.heads.forward import refused_observation
from ember_np.dqn.heads.qvalues import greedy_action, greedy_action_legal
from ember_np.dqn.learner.network import QNetwork, UpdateOptions
from ember_np.dqn.policy import DqnPolicy
from ember_np.dqn.replay.circular import CircularBuffer
from ember_np.dqn.replay.prioritized import PrioritizedBuffer
from ember_np.encoding import (
    DiscreteActionMapper,
    IndexActionMapper,
    ObservationEncoder,
    VecEncoder,
    describe,
    encode_for_network,
    encoder_for_space,
    nonfinite_observation,
    single_spaces,
)
from ember_np.rng import Rng
from ember_np.types import Experience, ReplayBuffer

__all__ = ["DqnAgent"]

_F32 = np.dtype(np.float32)


class DqnAgent:
    """A DQN agent: acts epsilon-greedily, stores experience, learns from replay.

    With several envs stepped together (a vectorised env) the agent acts on
    them in one batch and learns from their transitions one by one, each
    env's kept apart in the buffer (``set_num_envs``, ``observe_vector``,
    ``act_epsilon_greedy_batch``: its :class:`~ember_np.dqn.agent_vec.VectorLearner`'s).

    Parameters
    ----------
    encoder : ObservationEncoder
        Turns env observations into float32 vectors (``VecEncoder`` for Box spaces).
    action_mapper : DiscreteActionMapper
        Maps env actions to indices and back (``IndexActionMapper`` for Discrete).
    config : DqnConfig, optional
        Hyperparameters; ``DqnConfig()`` (ember-rl's defaults) when omitted.
    seed : int >= 0
        Seeds initialisation, replay sampling and exploration (separate
        streams). Any size (``SeedSequence`` entropy is 128 bits); checkpoints
        keep it exactly.
    buffer : ReplayBuffer, optional
        A custom replay buffer; by default a ``CircularBuffer`` of
        ``config.buffer_capacity``.

    Attributes
    ----------
    online, target : QNetwork
    buffer : ReplayBuffer
    config : DqnConfig
    """

    def __init__(
        self,
        encoder: ObservationEncoder,
        action_mapper: DiscreteActionMapper,
        config: DqnConfig | None = None,
        seed: int = 0,
        buffer: ReplayBuffer | None = None,
    ) -> None:
        if config is None:
            config = DqnConfig()
        if not isinstance(config, DqnConfig):
            raise ValueError(f"config must be a DqnConfig, got {type(config).__name__}")
        for name, obj, attrs in (
            ("encoder", encoder, ("obs_size", "encode", "encode_batch")),
            ("action_mapper", action_mapper, ("num_actions", "action_to_index", "index_to_action")),
        ):
            missing = [a for a in attrs if not hasattr(obj, a)]
            if missing:
                raise ValueError(
                    f"{name} {obj!r} does not implement the protocol: missing {missing}"
                )
        self.encoder = encoder
        self.action_mapper = action_mapper
        obs_size = int(encoder.obs_size)
        n_actions = int(action_mapper.num_actions)
        init_rng, self._replay_rng, self._explore_rng = Rng.streams(seed, 3)  # checks the seed
        self.seed = int(seed)  # any size: saved losslessly (see seed_array)
        sizes = (obs_size, *config.hidden_sizes, n_actions)
        # online and target networks, Adam and one batch's activations, before allocating
        check_network_memory(sizes, config.batch_size, config.dueling, config.layer_norm, 2,
                             1 if config.head is None else config.head.n_atoms)  # fmt: skip
        self.online = QNetwork(sizes, init_rng, dueling=config.dueling,
                               layer_norm=config.layer_norm, head=config.head,
                               noisy=config.noisy, sigma0=config.noisy_sigma0)  # fmt: skip
        self._obs_shape = (obs_size,)
        self._flat_encoder = type(encoder) is VecEncoder and encoder.shape == self._obs_shape
        self.target = self.online.copy()
        if buffer is None:
            buffer = buffer_for(config, obs_size, n_actions)
        elif config.action_masks:
            raise ValueError(
                "config.action_masks=True needs the default replay buffer (a CircularBuffer "
                "that stores next-state masks); got a custom buffer: drop buffer=..."
            )
        else:
            missing = [
                a for a in ("push", "sample", "ready_for", "__len__") if not hasattr(buffer, a)
            ]
            if missing:
                raise ValueError(f"buffer does not implement ReplayBuffer: missing {missing}")
        self.buffer: Any = buffer  # (a default one or any ReplayBuffer: its kernel members vary)
        self._fast_buffer = type(buffer) in (CircularBuffer, PrioritizedBuffer)
        # Live state shared with the kernels, updated in place.
        self._counters = np.zeros(2, dtype=np.int64)  # total_steps, n_updates
        self._out = np.array([np.nan, 0.0])  # last mean loss, did the last step train
        # Compiled entry points of the per-step kernels, resolved at their first call.
        self._step_entry: Any = None
        self._explore_entry: Any = None
        self.config = config  # sets the kernels' settings and state

    @property
    def config(self) -> DqnConfig:
        """The hyperparameters (assigning a new DqnConfig takes effect at the next step)."""
        return self._config

    @config.setter
    def config(self, config: DqnConfig) -> None:
        if not isinstance(config, DqnConfig):
            raise ValueError(f"config must be a DqnConfig, got {type(config).__name__}")
        if tuple(config.hidden_sizes) != self.online.layer_sizes[1:-1]:
            raise ValueError(
                f"config.hidden_sizes {config.hidden_sizes} does not match the network's "
                f"{self.online.layer_sizes[1:-1]}"
            )
        if config.action_masks != bool(getattr(self.buffer, "action_masks", False)):
            raise ValueError(
                f"config.action_masks={config.action_masks} does not match the replay buffer, "
                f"which was built with action_masks={not config.action_masks}; build a new agent"
            )
        check_config_architecture(config, self.online)
        configure_buffer(self.buffer, config, self._fast_buffer)
        self._config = config
        self._settings = agent_settings(config)
        # (noisy layers draw each update's noise from the replay stream, saved as it is)
        self._net = self.online.kernel_state(self.target, self._replay_rng.state)
        self._state = AgentState(
            self._net, self.buffer.kernel_state if self._fast_buffer else None, self._settings,
            self._counters, self._replay_rng.state, self._explore_rng.state, self._out,
        )  # fmt: skip
        self._vector = VectorLearner(self, self._state, self._fast_buffer, self._flat_encoder)

    @classmethod
    def for_env(cls, env: Any, config: DqnConfig | None = None, seed: int = 0) -> DqnAgent:
        """An agent for a gymnasium env with a Box or Discrete observation space (see
        :func:`~ember_np.encoding.encoder_for_space`) and a Discrete action space;
        for a gymnasium ``VectorEnv``, its copies' (``single_observation_space``)."""
        obs_space, action_space = single_spaces(env)
        return cls(encoder_for_space(obs_space), IndexActionMapper.for_space(action_space),
                   config, seed)  # fmt: skip

    # -- properties ------------------------------------------------------------
    @property
    def action_masks(self) -> bool:
        """Whether this agent takes gymnasium's ``info["action_mask"]`` (``config.action_masks``).

        The trainer passes an env's masks to the agent only when this is True;
        with it False the masks are ignored, in training and in evaluation.
        """
        return self._config.action_masks

    @property
    def total_steps(self) -> int:
        """Env steps observed so far (drives epsilon, target sync and training)."""
        return int(self._counters[0])

    def set_total_steps(self, n: int) -> None:
        """Set the step counter (e.g. when resuming from weights alone)."""
        self._counters[0] = check_int("total_steps", n, minimum=0)

    @property
    def n_updates(self) -> int:
        """Gradient steps taken so far."""
        return int(self._counters[1])

    @property
    def last_step_trained(self) -> bool:
        """Whether the most recent observed step took gradient steps."""
        return bool(self._out[1] != 0.0)

    @property
    def last_loss(self) -> float:
        """Mean loss of the most recent training (NaN before the first)."""
        return float(self._out[0])

    @property
    def kernel_state(self) -> AgentState:
        """The live state the agent's kernels take (the trainer's compiled loops run on it)."""
        return self._state

    @property
    def epsilon(self) -> float:
        """The current exploration rate, ``config.epsilon_at(total_steps)``."""
        return self._config.epsilon_at(int(self._counters[0]))

    def epsilon_at(self, step: int) -> float:
        """The exploration rate after ``step`` env steps, ``config.epsilon_at(step)``."""
        return self._config.epsilon_at(step)

    @property
    def learning_rate(self) -> float:
        """Adam's learning rate for the next updates, :meth:`learning_rate_at` ``(total_steps)``."""
        return self.learning_rate_at(int(self._counters[0]))

    def learning_rate_at(self, step: int) -> float:
        """The learning rate every update after ``step`` env steps uses (the
        compiled schedule the kernels call; ``config.learning_rate_at(step)``
        up to rounding)."""
        return float(learning_rate_now(self._settings, check_int("step", step, minimum=0)))

    @property
    def exploration_rng(self) -> Rng:
        """The exploration stream (used when act_epsilon_greedy gets no rng)."""
        return self._explore_rng

    @property
    def replay_rng(self) -> Rng:
        """The replay-sampling stream."""
        return self._replay_rng

    # -- acting ----------------------------------------------------------------
    def act(self, obs: Any, action_mask: Any = None) -> Any:
        """The greedy action ``argmax_a Q(obs, a)``, as an env action.

        With ``action_mask`` (bool or 0/1 array of shape (n_actions,), as
        gymnasium's ``info["action_mask"]``) the argmax runs over the legal
        actions only. Raises ValueError for an observation holding NaN or inf
        (the rule of every method that reads observations; see
        :class:`~ember_np.DqnPolicy`), when the Q-values come out NaN or inf
        (float32 overflow), and for a mask of the wrong shape or dtype or
        without a legal action.
        """
        x = self.encode(obs)
        if action_mask is None:
            index = greedy_action(self.online.mean_params, self._net.sizes, math.inf, x)
        else:
            legal = self._legal(action_mask)
            index = greedy_action_legal(self.online.mean_params, self._net.sizes, x, legal)
        if index < 0:  # NaN or inf in x, or Q-values not finite: never action 0 from NaN
            raise refused_observation(x, index, math.inf)
        return self.action_mapper.index_to_action(index)

    def _legal(self, mask: Any, name: str = "action_mask") -> np.ndarray:
        """A user's mask as the kernels' bool (n_actions,) array (None: ALL_LEGAL)."""
        if mask is None:
            return ALL_LEGAL
        return check_action_mask(mask, self.online.n_actions, name)

    def act_epsilon_greedy(self, obs: Any, rng: Rng | None = None, action_mask: Any = None) -> Any:
        """A random action with probability :attr:`epsilon`, else the greedy one.

        ``rng`` defaults to the agent's own exploration stream (saved in
        checkpoints); pass another :class:`Rng` to draw from it instead. With
        ``action_mask`` (see :meth:`act`) both the random action (uniform over
        the legal ones) and the greedy one are legal.
        """
        index = self.act_encoded(self.encode(obs), rng, action_mask)
        return self.action_mapper.index_to_action(index)

    def act_encoded(self, x: np.ndarray, rng: Rng | None = None, action_mask: Any = None) -> int:
        """:meth:`act_epsilon_greedy` for an encoded observation; returns the action index.

        ``x`` is what :meth:`encode` returned (float32, shape (obs_size,)).
        """
        state = self._explore_rng.state if rng is None else rng.state
        legal = ALL_LEGAL if action_mask is None else self._legal(action_mask)
        act = self._explore_entry
        if act is None:  # same argument types every time: skip numba's dispatch
            act = self._explore_entry = entry_point(
                act_explore, self._net, self._settings, self._counters, x, state, legal
            )
        index = act(self._net, self._settings, self._counters, x, state, legal)
        if index < 0:
            raise nonfinite_observation(x)
        return index

    def index_to_action(self, index: int) -> Any:
        """The env action of an action index (the action mapper's)."""
        return self.action_mapper.index_to_action(index)

    def encode(self, obs: Any) -> np.ndarray:
        """The encoder's output as a C-contiguous float32 vector of obs_size."""
        if self._flat_encoder:  # VecEncoder of a 1-D shape: encoding is this cast
            if type(obs) is np.ndarray and obs.dtype is _F32 and obs.flags.carray:
                x = obs  # as_f32's no-copy test, inlined on the trainer's hot path
            else:
                try:
                    x = as_f32(obs, "obs")
                except ValueError:
                    x = None
            if x is not None and x.shape == self._obs_shape:
                return x
        return encode_for_network(self.encoder, obs, self._obs_shape)

    # -- N envs at once (VectorLearner's: ember_np.dqn.agent_vec) -----------------
    def encode_batch(self, obs_batch: Any) -> np.ndarray:
        """The encoder's output for a batch: C-contiguous float32 (N, obs_size)."""
        return self._vector.encode_batch(obs_batch)

    def indices_to_actions(self, indices: np.ndarray) -> np.ndarray:
        """The env actions of action indices (int (N,)), as an array (the mapper's)."""
        return self._vector.indices_to_actions(indices)

    def act_batch(self, obs_batch: Any, action_masks: Any = None) -> np.ndarray:
        """Greedy env actions for a batch (:meth:`VectorLearner.act_batch`)."""
        return self._vector.act_batch(obs_batch, action_masks)

    def act_epsilon_greedy_batch(self, obs_batch: Any, action_masks: Any = None) -> np.ndarray:
        """Exploring env actions for a batch (:meth:`VectorLearner.act_epsilon_greedy_batch`)."""
        return self._vector.act_epsilon_greedy_batch(obs_batch, action_masks)

    @property
    def num_envs(self) -> int:
        """Envs whose transitions the replay buffer keeps apart (1 for a custom buffer)."""
        return self._vector.num_envs

    def set_num_envs(self, num_envs: int) -> None:
        """Get ready to learn from ``num_envs`` envs stepped together.

        The default buffer keeps each env's transitions in a stream of its
        own (:class:`~ember_np.CircularBuffer`'s ``num_envs``), so n-step
        returns never mix envs; it must be empty to be split, or already
        split so (else ValueError). A custom buffer is pushed every
        transition in env order.
        """
        if self._vector.set_num_envs(num_envs):
            self.config = self._config  # the kernels' new ReplayState

    def new_vec_step(self, num_envs: int, masks: bool = False) -> VecStep:
        """Zeroed arrays of one VecStep (:meth:`VectorLearner.new_vec_step`)."""
        return self._vector.new_vec_step(num_envs, masks)

    def observe_vector(self, step: VecStep) -> np.ndarray:
        """Learn from one step of N envs, pick their next actions
        (:meth:`VectorLearner.observe_vector`)."""
        return self._vector.observe_vector(step)

    def raise_vec_error(self, code: int, step: VecStep) -> None:
        """Raise the ValueError of a vector kernel's negative return ``code``."""
        self._vector.raise_vec_error(code, step)

    def can_fuse(self, env: Any) -> bool:
        """Whether the trainer's compiled loops can drive native env ``env``
        (:meth:`VectorLearner.can_fuse`)."""
        return self._vector.can_fuse(env)

    # -- learning --------------------------------------------------------------
    def observe(self, experience: Experience, next_action_mask: Any = None) -> bool:
        """Store one transition, sync the target and train when due.

        ``next_action_mask`` (an agent with ``config.action_masks``): the
        legal actions in ``experience.next_observation``, as :meth:`act` takes
        them; the TD targets of this transition maximise over them. Default:
        all legal.

        Returns
        -------
        bool
            Whether gradient steps were taken.

        Raises
        ------
        ValueError
            On an observation of the wrong shape, an action the mapper rejects,
            or a non-finite observation or reward (nothing is stored then).
        """
        obs, action, reward, next_obs, status = experience
        try:
            code = operator.index(status)
        except TypeError:
            raise ValueError(f"status must be an EpisodeStatus, got {status!r}") from None
        self.observe_encoded(
            self.encode(obs),
            self.action_mapper.action_to_index(action),
            reward,
            self.encode(next_obs),
            code,
            next_action_mask=next_action_mask,
        )
        return self._out[1] != 0.0

    def observe_encoded(
        self,
        x: np.ndarray,
        index: int,
        reward: Any,
        nx: np.ndarray,
        status: int,
        act_next: bool = False,
        next_action_mask: Any = None,
    ) -> int:
        """:meth:`observe` for an encoded transition (the trainer's hot path).

        ``index`` and ``status`` are plain ints (an IntEnum would make numba
        type-check slowly and compile another version). ``x`` and ``nx`` are
        what :meth:`encode` returned. With ``act_next`` the epsilon-greedy
        action index for ``nx`` is returned (else 0), legal under
        ``next_action_mask`` (the mask of ``nx``, stored with the transition;
        needs ``config.action_masks``); whether this step trained is
        :attr:`last_step_trained`.
        """
        buf = self.buffer
        if self._fast_buffer:
            legal = ALL_LEGAL if next_action_mask is None else buf.check_next_mask(next_action_mask)
            try:
                r = float(reward)
            except (TypeError, ValueError):
                raise ValueError(f"reward must be a number, got {reward!r}") from None
            step = self._step_entry
            if step is None:  # same argument types every time: skip numba's dispatch
                step = self._step_entry = entry_point(
                    agent_step, self._state, x, index, r, nx, status, act_next, legal
                )
            result = step(self._state, x, index, r, nx, status, act_next, legal)
            if result < 0:
                buf.raise_push_error(-result, index, r, x, nx, status)
            return result
        # A custom buffer: the same schedule as agent_step, through Python.
        if next_action_mask is not None:
            raise ValueError(
                "got a next_action_mask, but action masks need the default replay buffer and "
                "DqnConfig(action_masks=True)"
            )
        settings = self._settings
        buf.push(x, index, reward, nx, status)
        step = int(self._counters[0]) + 1
        self._counters[0] = step
        if target_due.py_func(step, settings):
            self.sync_target()
        self._out[1] = 0.0
        if train_due.py_func(step, len(buf), settings):
            self.train_steps(settings.gradient_steps)
            self._out[1] = 1.0
        return self.act_encoded(nx) if act_next else 0

    def sync_target(self) -> None:
        """Copy (tau = 1) or Polyak-average (tau < 1) the online weights into the target."""
        if self._config.tau >= 1.0:
            self.target.copy_from(self.online)
        else:
            self.target.soft_update_from(self.online, self._config.tau)

    def train_steps(self, n: int) -> float:
        """Take ``n`` gradient steps on replayed batches; returns their mean loss."""
        c = self._config
        on = self.online
        hp = update_settings_now(self._settings, int(self._counters[0]))
        if self._fast_buffer:
            loss = train_from_buffer(
                self.buffer.kernel_state, self._replay_rng.state, self._net, int(n),
                int(c.batch_size), hp, c.per_beta_at(self.total_steps),
            )  # fmt: skip
        else:
            total = 0.0
            options = UpdateOptions(
                c.gamma, hp.learning_rate, c.huber_delta, c.double_dqn, c.max_grad_norm
            )
            noise = self._replay_rng if on.noisy else None
            for _ in range(n):
                batch = self.buffer.sample(c.batch_size, self._replay_rng)
                total += on.update(batch, self.target, options, noise_rng=noise)
            loss = total / n
        self._counters[1] += n
        self._out[0] = loss
        return float(loss)

    # -- policies and checkpoints ------------------------------------------------
    def into_policy(self) -> Any:
        """An inference-only :class:`~ember_np.DqnPolicy` with a copy of the weights."""
        return DqnPolicy(self.online.layer_sizes, self.online.mean_params.copy(),
                         self.encoder, self.action_mapper, dueling=self.online.dueling,
                         layer_norm=self.online.layer_norm, head=self.online.head)  # fmt: skip

    def state_arrays(self, include_buffer: bool = False) -> dict[str, np.ndarray]:
        """Everything :meth:`save` writes, as a dict of arrays (keys: docs/reference/formats.md)."""
        arrays: dict[str, np.ndarray] = {
            K.FORMAT: string_array(AGENT_FORMAT),
            K.VERSION: np.array(FORMAT_VERSION, dtype=np.int64),
            K.CONFIG: json_array(self.config.to_dict()),
            K.ENCODER: json_array(describe(self.encoder)),
            K.MAPPER: json_array(describe(self.action_mapper)),
            K.SEED: seed_array(self.seed),
            K.COUNTERS: self._counters.copy(),
            K.RNG_EXPLORE: self._explore_rng.state.copy(),
            K.RNG_REPLAY: self._replay_rng.state.copy(),
        }
        for key, value in self.online.state_dict().items():
            arrays[K.ONLINE + key] = value
        for key, view in self.target.param_views():  # w<i>, b<i>, ln_*, sigmas sw<i>, sb<i>
            arrays[K.TARGET + key] = view.copy()
        if include_buffer:
            if not hasattr(self.buffer, "state_dict"):
                raise ValueError(
                    f"{type(self.buffer).__name__} has no state_dict(); it cannot be saved"
                )
            for key, value in self.buffer.state_dict().items():
                arrays[K.BUFFER + key] = np.asarray(value)
        return arrays

    def save(self, path: str | os.PathLike[str], include_buffer: bool = False) -> Path:
        """Write one ``.npz`` checkpoint atomically; returns its path.

        Holds online and target weights, Adam state, step counters, both random
        streams, the config, encoder and mapper descriptions and a format
        version; with ``include_buffer=True`` also the replay buffer, so
        training can resume bit for bit. A ``.npz`` suffix is added if missing.
        """
        p = Path(path)
        if p.suffix != ".npz":
            p = p.with_name(p.name + ".npz")
        save_arrays(p, self.state_arrays(include_buffer))
        return p

    def load(self, path: str | os.PathLike[str], include_buffer: bool = True) -> DqnAgent:
        """Load a checkpoint into this agent (same layer sizes) and return it.

        Weights, Adam state, counters and random streams are restored, and the
        replay buffer too when the file has one and ``include_buffer``.

        **Which config wins:** the agent's own. Its config, encoder and mapper
        stay as they are, and the checkpoint's config is not applied; when the
        two differ, a ``UserWarning`` names the fields. To train on with the
        saved config, use :meth:`from_checkpoint`. Everything is checked
        before anything changes: on :class:`CheckpointError` the agent is as
        it was.
        """
        reader = Reader(path)
        self._load_reader(reader, include_buffer)
        self._warn_if_config_differs(reader)
        return self

    def _warn_if_config_differs(self, reader: Reader) -> None:
        differ = config_differences(reader, self.config)
        if differ:
            warnings.warn(
                f"{reader.path} was saved with another config: {', '.join(differ)}; load() keeps "
                "this agent's config (DqnAgent.from_checkpoint uses the saved one)",
                UserWarning,
                stacklevel=3,
            )

    def _load_reader(self, reader: Reader, include_buffer: bool) -> None:
        reader.check_format(AGENT_FORMAT)
        check_checkpoint_architecture(reader, self.online)
        online_state, target_state, counters, explore, replay = read_learner_state(
            reader, self.online, self.target
        )
        buffer_state = None
        buffer_keys = [k for k in reader.arrays if k.startswith(K.BUFFER)]
        if include_buffer and buffer_keys:
            if not hasattr(self.buffer, "load_state_dict"):
                raise reader.error(
                    f"the checkpoint has a replay buffer but {type(self.buffer).__name__} "
                    "has no load_state_dict(); load with include_buffer=False"
                )
            buffer_state = {k[len(K.BUFFER) :]: reader.arrays[k] for k in buffer_keys}
            # Check the buffer before changing anything (custom buffers that
            # lack check_state_dict are checked by their load_state_dict only).
            if hasattr(self.buffer, "check_state_dict"):
                try:
                    self.buffer.check_state_dict(buffer_state)
                except ValueError as exc:
                    raise reader.error(str(exc)) from None
        # -- everything checked: apply -----------------------------------------
        self.online.load_state_dict(online_state)
        for key, view in self.target.param_views():
            view[...] = target_state[key]
        self._counters[:] = counters
        self._explore_rng.state = explore
        self._replay_rng.state = replay
        if buffer_state is not None:
            try:
                self.buffer.load_state_dict(buffer_state)
            except ValueError as exc:
                raise reader.error(str(exc)) from None

    @classmethod
    def from_checkpoint(
        cls,
        path: str | os.PathLike[str],
        encoder: ObservationEncoder | None = None,
        action_mapper: DiscreteActionMapper | None = None,
        buffer: ReplayBuffer | None = None,
    ) -> DqnAgent:
        """Rebuild an agent from a checkpoint alone (config, encoder, mapper, state).

        Custom encoders or mappers (not rebuildable from their description)
        are passed explicitly.
        """
        reader = Reader(path)
        config, encoder, action_mapper, seed = read_agent_parts(reader, encoder, action_mapper)
        try:
            agent = cls(encoder, action_mapper, config, seed=seed, buffer=buffer)
        except (ValueError, MemoryError) as exc:  # e.g. an absurd buffer capacity
            raise reader.error(f"cannot build the agent: {exc!r}") from None
        agent._load_reader(reader, include_buffer=True)
        return agent

    # -- copying and pickling --------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """What ``copy.deepcopy`` and ``pickle`` keep: everything but the kernels' argument tuple.

        The networks and the buffer copy themselves (see theirs); the tuple of
        live arrays the kernels take is rebuilt from the copies, so the copy
        trains its own parameters and nothing is shared with the original.
        """
        state = self.__dict__.copy()
        for derived in ("_settings", "_net", "_state", "_vector"):
            del state[derived]
        state["_step_entry"] = state["_explore_entry"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state.pop("_vec_entry", None)  # (older pickles kept the vector step's entry here)
        self.__dict__.update(state)
        # Own, writeable counters even when unpickled from shared (out-of-band) buffers.
        self._counters = np.array(self._counters, dtype=np.int64)
        self._out = np.array(self._out, dtype=np.float64)
        self.config = self._config  # rebuilds _settings, _net, _state, _vector from the copies

    def __repr__(self) -> str:
        return (
            f"DqnAgent(layer_sizes={self.online.layer_sizes}, total_steps={self.total_steps}, "
            f"buffer={len(self.buffer)}/{self.buffer.capacity})"
        )

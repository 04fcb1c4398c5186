"""DqnAgent: the DQN learner (online + target network, replay, exploration).

The agent follows ember-rl's ``DqnAgent`` and SB3's ordering of one env step:
store the transition; every ``target_update_freq`` steps sync the target
network; every ``train_freq`` steps, once the buffer holds
``max(batch_size, min_replay_size)`` transitions, take ``gradient_steps``
gradient steps. Exploration is epsilon-greedy with a linear schedule.

Randomness comes from three PCG64 streams derived from the seed:
initialisation, replay sampling and exploration. The last two are saved in
checkpoints, so a restored agent continues exactly where it stopped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ember_np._jit import kernel
from ember_np.checkpoint import (
    AGENT_FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    Reader,
    json_array,
    save_arrays,
    string_array,
)
from ember_np.dqn.config import DqnConfig
from ember_np.dqn.network import QNetwork, _greedy_action, _update
from ember_np.dqn.replay import CircularBuffer, _sample
from ember_np.encoding import (
    DiscreteActionMapper,
    IndexActionMapper,
    ObservationEncoder,
    VecEncoder,
    describe,
    encoder_from_description,
    mapper_from_description,
)
from ember_np.rng import Rng, next_below, next_double
from ember_np.types import Experience, ReplayBuffer

__all__ = ["DqnAgent"]


@kernel
def _epsilon_greedy(
    params: np.ndarray, sizes: np.ndarray, obs: np.ndarray, epsilon: float, rng_state: np.ndarray
) -> int:
    """With probability epsilon a uniform random action index, else the greedy one.

    Draws u ~ U[0, 1) from ``rng_state`` whenever epsilon > 0, and a second
    number for the random action when u < epsilon.
    """
    if epsilon > 0.0 and next_double(rng_state) < epsilon:
        return next_below(rng_state, sizes[sizes.shape[0] - 1])
    return _greedy_action(params, sizes, obs)


@kernel
def _train_from_buffer(
    storage: np.ndarray,
    size: int,
    replay_state: np.ndarray,
    n_steps: int,
    params: np.ndarray,
    target: np.ndarray,
    sizes: np.ndarray,
    grads: np.ndarray,
    adam_m: np.ndarray,
    adam_v: np.ndarray,
    adam_t: np.ndarray,
    obs: np.ndarray,
    actions: np.ndarray,
    rewards: np.ndarray,
    next_obs: np.ndarray,
    masks: np.ndarray,
    gamma: float,
    learning_rate: float,
    huber_delta: float,
    double_dqn: bool,
    max_grad_norm: float,
) -> float:
    """``n_steps`` of (sample a batch into the given arrays, one DQN update); mean loss."""
    total = 0.0
    for _ in range(n_steps):
        _sample(storage, size, replay_state, obs, actions, rewards, next_obs, masks)
        total += _update(
            params, target, sizes, grads, adam_m, adam_v, adam_t,
            obs, actions, rewards, next_obs, masks,
            gamma, learning_rate, huber_delta, double_dqn, max_grad_norm,
        )  # fmt: skip
    return total / n_steps


class DqnAgent:
    """A DQN agent: acts epsilon-greedily, stores experience, learns from replay.

    Parameters
    ----------
    encoder : ObservationEncoder
        Turns env observations into float32 vectors (``VecEncoder`` for Box spaces).
    action_mapper : DiscreteActionMapper
        Maps env actions to indices and back (``IndexActionMapper`` for Discrete).
    config : DqnConfig, optional
        Hyperparameters; ``DqnConfig()`` (ember-rl's defaults) when omitted.
    seed : int
        Seeds initialisation, replay sampling and exploration (separate streams).
    buffer : ReplayBuffer, optional
        A custom replay buffer; by default a ``CircularBuffer`` of
        ``config.buffer_capacity``.

    Attributes
    ----------
    online, target : QNetwork
    buffer : ReplayBuffer
    config : DqnConfig
    last_loss : float
        Mean loss of the most recent training (NaN before the first).
    """

    def __init__(
        self,
        encoder: ObservationEncoder,
        action_mapper: DiscreteActionMapper,
        config: DqnConfig | None = None,
        seed: int = 0,
        buffer: ReplayBuffer | None = None,
    ) -> None:
        self.config = DqnConfig() if config is None else config
        if not isinstance(self.config, DqnConfig):
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
        self.seed = seed
        obs_size = int(encoder.obs_size)
        n_actions = int(action_mapper.num_actions)
        init_rng, self._replay_rng, self._explore_rng = Rng.streams(seed, 3)
        sizes = (obs_size, *self.config.hidden_sizes, n_actions)
        self.online = QNetwork(sizes, init_rng)
        self._obs_shape = (obs_size,)
        self.target = self.online.copy()
        if buffer is None:
            buffer = CircularBuffer(self.config.buffer_capacity, obs_size, n_actions)
        else:
            missing = [
                a for a in ("push", "sample", "ready_for", "__len__") if not hasattr(buffer, a)
            ]
            if missing:
                raise ValueError(f"buffer does not implement ReplayBuffer: missing {missing}")
        self.buffer = buffer
        self._fast_buffer = type(buffer) is CircularBuffer
        self._total_steps = 0
        self._n_updates = 0
        self.last_loss = float("nan")
        self._batch: Any = None
        self._train_args: tuple[Any, ...] = ()
        self._refresh_train_args()

    @classmethod
    def for_env(cls, env: Any, config: DqnConfig | None = None, seed: int = 0) -> DqnAgent:
        """An agent for a gymnasium env with a Box observation and Discrete action space."""
        return cls(
            VecEncoder.for_space(getattr(env, "observation_space", None)),
            IndexActionMapper.for_space(getattr(env, "action_space", None)),
            config,
            seed,
        )

    def _refresh_train_args(self) -> None:
        c = self.config
        clip = -1.0 if c.max_grad_norm is None else float(c.max_grad_norm)
        if self._fast_buffer:
            self._batch = self.buffer.empty_batch(c.batch_size)
        self._train_args = (float(c.gamma), float(c.learning_rate), float(c.huber_delta),
                            bool(c.double_dqn), clip)  # fmt: skip

    # -- properties ------------------------------------------------------------
    @property
    def total_steps(self) -> int:
        """Env steps observed so far (drives epsilon, target sync and training)."""
        return self._total_steps

    def set_total_steps(self, n: int) -> None:
        """Set the step counter (e.g. when resuming from weights alone)."""
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"total_steps must be an integer >= 0, got {n!r}")
        self._total_steps = int(n)

    @property
    def n_updates(self) -> int:
        """Gradient steps taken so far."""
        return self._n_updates

    @property
    def epsilon(self) -> float:
        """The current exploration rate, ``config.epsilon_at(total_steps)``."""
        return self.config.epsilon_at(self._total_steps)

    @property
    def exploration_rng(self) -> Rng:
        """The exploration stream (used when act_epsilon_greedy gets no rng)."""
        return self._explore_rng

    @property
    def replay_rng(self) -> Rng:
        """The replay-sampling stream."""
        return self._replay_rng

    # -- acting ----------------------------------------------------------------
    def act(self, obs: Any) -> Any:
        """The greedy action ``argmax_a Q(obs, a)``, as an env action."""
        x = self._encode(obs)
        return self.action_mapper.index_to_action(
            _greedy_action(self.online._params, self.online._sizes, x)
        )

    def act_epsilon_greedy(self, obs: Any, rng: Rng | None = None) -> Any:
        """A random action with probability :attr:`epsilon`, else the greedy one.

        ``rng`` defaults to the agent's own exploration stream (saved in
        checkpoints); pass another :class:`Rng` to draw from it instead.
        """
        x = self._encode(obs)
        state = (self._explore_rng if rng is None else rng).state
        index = _epsilon_greedy(self.online._params, self.online._sizes, x, self.epsilon, state)
        return self.action_mapper.index_to_action(index)

    def _encode(self, obs: Any) -> np.ndarray:
        x = self.encoder.encode(obs)
        if x.shape != self._obs_shape or x.dtype != np.float32:
            x = np.ascontiguousarray(x, dtype=np.float32)
            if x.shape != self._obs_shape:
                raise ValueError(
                    f"the encoder returned shape {x.shape}; the network expects {self._obs_shape}"
                )
        return x

    # -- learning --------------------------------------------------------------
    def observe(self, experience: Experience) -> bool:
        """Store one transition, sync the target and train when due.

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
        self.buffer.push(
            self._encode(obs),
            self.action_mapper.action_to_index(action),
            reward,
            self._encode(next_obs),
            int(status),
        )
        self._total_steps += 1
        c = self.config
        if self._total_steps % c.target_update_freq == 0:
            self.sync_target()
        if self._total_steps % c.train_freq == 0 and len(self.buffer) >= c.learning_starts:
            self.train_steps(c.gradient_steps_per_train)
            return True
        return False

    def sync_target(self) -> None:
        """Copy (tau = 1) or Polyak-average (tau < 1) the online weights into the target."""
        if self.config.tau >= 1.0:
            self.target.copy_from(self.online)
        else:
            self.target.soft_update_from(self.online, self.config.tau)

    def train_steps(self, n: int) -> float:
        """Take ``n`` gradient steps on replayed batches; returns their mean loss."""
        c = self.config
        on = self.online
        if self._fast_buffer:
            loss = _train_from_buffer(
                self.buffer.storage, len(self.buffer), self._replay_rng.state, n,
                on._params, self.target._params, on._sizes, on._grads,
                on._adam_m, on._adam_v, on._adam_t, *self._batch, *self._train_args,
            )  # fmt: skip
        else:
            gamma, lr, delta, double, clip = self._train_args
            total = 0.0
            for _ in range(n):
                batch = self.buffer.sample(c.batch_size, self._replay_rng)
                total += on.update(
                    *batch, self.target, gamma=gamma, learning_rate=lr, huber_delta=delta,
                    double_dqn=double, max_grad_norm=None if clip < 0 else clip,
                )  # fmt: skip
            loss = total / n
        self._n_updates += n
        self.last_loss = float(loss)
        return self.last_loss

    # -- policies and checkpoints ------------------------------------------------
    def into_policy(self) -> Any:
        """An inference-only :class:`~ember_np.DqnPolicy` with a copy of the weights."""
        from ember_np.dqn.policy import DqnPolicy

        return DqnPolicy(self.online.layer_sizes, self.online._params.copy(),
                         self.encoder, self.action_mapper)  # fmt: skip

    def state_arrays(self, include_buffer: bool = False) -> dict[str, np.ndarray]:
        """Everything :meth:`save` writes, as a dict of arrays (see README for keys)."""
        arrays: dict[str, np.ndarray] = {
            "format": string_array(AGENT_FORMAT),
            "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
            "config": json_array(self.config.to_dict()),
            "encoder": json_array(describe(self.encoder)),
            "action_mapper": json_array(describe(self.action_mapper)),
            "seed": np.array(int(self.seed), dtype=np.int64),
            "counters": np.array([self._total_steps, self._n_updates], dtype=np.int64),
            "rng/explore": self._explore_rng.state.copy(),
            "rng/replay": self._replay_rng.state.copy(),
        }
        for key, value in self.online.state_dict().items():
            arrays[f"online/{key}"] = value
        for i, (w, b) in enumerate(zip(self.target.weights, self.target.biases)):
            arrays[f"target/w{i}"] = w.copy()
            arrays[f"target/b{i}"] = b.copy()
        if include_buffer:
            if not hasattr(self.buffer, "state_dict"):
                raise ValueError(
                    f"{type(self.buffer).__name__} has no state_dict(); it cannot be saved"
                )
            for key, value in self.buffer.state_dict().items():
                arrays[f"buffer/{key}"] = np.asarray(value)
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
        replay buffer too when the file has one and ``include_buffer``. The
        agent keeps its own config, encoder and mapper. Everything is checked
        before anything changes: on :class:`CheckpointError` the agent is as
        it was.
        """
        reader = Reader(path)
        self._load_reader(reader, include_buffer)
        return self

    def _load_reader(self, reader: Reader, include_buffer: bool) -> None:
        reader.check_format(AGENT_FORMAT)
        sizes = reader.array("online/layer_sizes", np.int64, ndim=1)
        if tuple(sizes.tolist()) != self.online.layer_sizes:
            raise reader.error(
                f"architecture mismatch: this agent has layer_sizes {self.online.layer_sizes}, "
                f"the checkpoint has {tuple(sizes.tolist())}"
            )
        online_state = {"layer_sizes": sizes}
        for key, value in self.online.state_dict().items():
            if key != "layer_sizes":
                online_state[key] = reader.array(f"online/{key}", value.dtype, value.shape)
        target_state = {}
        for i, (w, b) in enumerate(zip(self.target.weights, self.target.biases)):
            target_state[f"w{i}"] = reader.array(f"target/w{i}", np.float32, w.shape)
            target_state[f"b{i}"] = reader.array(f"target/b{i}", np.float32, b.shape)
        counters = reader.array("counters", np.int64, (2,))
        if counters.min() < 0:
            raise reader.error(f"'counters' must be >= 0, found {counters.tolist()}")
        explore = reader.array("rng/explore", np.uint64, (4,))
        replay = reader.array("rng/replay", np.uint64, (4,))
        for key, st in (("rng/explore", explore), ("rng/replay", replay)):
            if int(st[3]) % 2 == 0:
                raise reader.error(f"{key!r} is not a valid PCG64 state (even increment)")
        for key in ("online/adam_m", "online/adam_v", "online/w0"):
            if not np.isfinite(reader.arrays[key]).all():
                raise reader.error(f"{key!r} holds NaN or infinite values")
        buffer_state = None
        buffer_keys = [k for k in reader.arrays if k.startswith("buffer/")]
        if include_buffer and buffer_keys:
            if not hasattr(self.buffer, "load_state_dict"):
                raise reader.error(
                    f"the checkpoint has a replay buffer but {type(self.buffer).__name__} "
                    "has no load_state_dict(); load with include_buffer=False"
                )
            buffer_state = {k[len("buffer/") :]: reader.arrays[k] for k in buffer_keys}
            # Validate into a scratch buffer first so a bad one changes nothing.
            if isinstance(self.buffer, CircularBuffer):
                scratch = CircularBuffer(
                    self.buffer.capacity, self.buffer.obs_size, self.buffer.num_actions
                )
                try:
                    scratch.load_state_dict(buffer_state)
                except ValueError as exc:
                    raise reader.error(str(exc)) from None
        # -- everything checked: apply -----------------------------------------
        self.online.load_state_dict(online_state)
        for i, (w, b) in enumerate(zip(self.target.weights, self.target.biases)):
            w[...] = target_state[f"w{i}"]
            b[...] = target_state[f"b{i}"]
        self._total_steps, self._n_updates = (int(c) for c in counters)
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
        reader.check_format(AGENT_FORMAT)
        try:
            config = DqnConfig.from_dict(reader.json("config"))
            if encoder is None:
                encoder = encoder_from_description(reader.json("encoder"))
            if action_mapper is None:
                action_mapper = mapper_from_description(reader.json("action_mapper"))
        except CheckpointError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise reader.error(f"invalid config or description: {exc}") from None
        agent = cls(encoder, action_mapper, config, seed=reader.integer("seed"), buffer=buffer)
        agent._load_reader(reader, include_buffer=True)
        return agent

    def __repr__(self) -> str:
        return (
            f"DqnAgent(layer_sizes={self.online.layer_sizes}, total_steps={self._total_steps}, "
            f"buffer={len(self.buffer)}/{self.buffer.capacity})"
        )

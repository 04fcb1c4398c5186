"""What DqnAgent builds from its config and reads from checkpoints: the replay
buffer (and the returns it owns), the seed's checkpoint form, and the networks,
counters and RNG states of a checkpoint, each checked before anything changes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from ember_np.checkpoint import CheckpointError, string_array
from ember_np.dqn.checkpoint_format import (
    AGENT_FORMAT,
    architecture_name,
    layer_norm_name,
    noisy_name,
)
from ember_np.dqn.checkpoint_format import AgentKeys as K
from ember_np.dqn.checkpoint_format import AgentReader as Reader
from ember_np.dqn.config import DqnConfig
from ember_np.dqn.heads.head import head_name
from ember_np.dqn.learner.network import QNetwork
from ember_np.dqn.replay.circular import CircularBuffer
from ember_np.dqn.replay.prioritized import PrioritizedBuffer
from ember_np.encoding import encoder_from_description, mapper_from_description


def buffer_for(config: DqnConfig, obs_size: int, n_actions: int) -> CircularBuffer:
    """The replay buffer ``config`` asks for: prioritized or uniform, n-step or not."""
    c = config
    if c.prioritized_replay:
        return PrioritizedBuffer(c.buffer_capacity, obs_size, n_actions, alpha=c.per_alpha,
                                 eps=c.per_eps, n_step=c.n_step, gamma=c.gamma,
                                 action_masks=c.action_masks)  # fmt: skip
    return CircularBuffer(c.buffer_capacity, obs_size, n_actions, n_step=c.n_step, gamma=c.gamma,
                          action_masks=c.action_masks)  # fmt: skip


def configure_buffer(buffer: Any, config: DqnConfig, built_in: bool) -> None:
    """Hand ``config``'s returns (n_step, gamma) to the agent's own ``buffer``, their
    one owner; ValueError for a replay the buffer cannot become (PER or not,
    per_alpha, per_eps) or for a custom buffer asked for n-step or PER.

    A custom buffer computes its own returns and priorities: the agent cannot
    give it n_step > 1 or prioritized replay.
    """
    c = config
    if not built_in:
        if c.n_step != 1 or c.prioritized_replay:
            raise ValueError(
                f"n_step={c.n_step} and prioritized_replay={c.prioritized_replay} need the "
                f"agent's own buffer, but a custom {type(buffer).__name__} was given: leave "
                "n_step=1 and prioritized_replay=False (the buffer's batches carry their own "
                "discounts and weights) or omit buffer="
            )
        return
    want: tuple[Any, ...] = (c.prioritized_replay,)
    has: tuple[Any, ...] = (isinstance(buffer, PrioritizedBuffer),)
    if c.prioritized_replay and want == has:
        want += (c.per_alpha, c.per_eps)
        has += (buffer.alpha, buffer.eps)
    if want != has:
        raise ValueError(
            f"the config's replay (prioritized_replay[, per_alpha, per_eps]) {want} does not "
            f"match the buffer's {has}: build a new agent for another replay"
        )
    buffer.set_returns(c.n_step, c.gamma)


def check_config_architecture(config: DqnConfig, online: QNetwork) -> None:
    """ValueError when ``config`` asks for another network than ``online`` is
    (dueling, LayerNorm, the value head, noisy layers): a new agent is needed then."""
    # (field, config's value, network's value, how to name a value): values of each kind
    fields: tuple[tuple[str, Any, Any, Callable[[Any], str]], ...] = (
        ("dueling", config.dueling, online.dueling, architecture_name),
        ("layer_norm", config.layer_norm, online.layer_norm, layer_norm_name),
        ("distributional", config.head, online.head, head_name),
        ("noisy", config.noisy, online.noisy, noisy_name),
    )
    for field, wanted, has, name in fields:
        if wanted != has:
            value = getattr(config, field)
            raise ValueError(
                f"config.{field}={value} does not match the network, which is {name(has)}"
                + ("" if field != "distributional" else f" (the config's is {name(wanted)})")
            )


def check_checkpoint_architecture(reader: Reader, online: QNetwork) -> None:
    """CheckpointError when the checkpoint's network is not ``online``'s kind
    (dueling, LayerNorm, the value head, with its atoms and support, noisy layers)."""
    kinds: tuple[tuple[Any, Any, Callable[[Any], str]], ...] = (
        (online.dueling, reader.dueling(), architecture_name),
        (online.layer_norm, reader.layer_norm(), layer_norm_name),
        (online.head, reader.head(), head_name),
        (online.noisy, reader.noisy(), noisy_name),
    )
    for mine, saved, name in kinds:
        if saved != mine:
            raise reader.error(
                f"architecture mismatch: this agent's network is {name(mine)}, "
                f"the checkpoint's is {name(saved)}"
            )


def seed_array(seed: int) -> np.ndarray:
    """The checkpoint's ``seed``: int64 when it fits (below 2**63), else its decimal digits.

    SeedSequence takes any non-negative integer (its own entropy is 128
    bits), so a seed of 2**63 or more is valid; written as int64 it would
    overflow at the first checkpoint and lose the run.
    """
    return np.array(seed, dtype=np.int64) if seed < 2**63 else string_array(str(seed))


def read_seed(reader: Reader) -> int:
    """:func:`seed_array`'s inverse; CheckpointError for anything but a non-negative integer."""
    arr = reader.arrays.get(K.SEED)
    if arr is not None and arr.dtype.kind == "U":
        digits = reader.string(K.SEED)
        if not (digits.isascii() and digits.isdigit() and len(digits) <= 1000):
            raise reader.error(f"'seed' must be a non-negative integer, found {digits[:40]!r}")
        return int(digits)
    seed = reader.integer(K.SEED)
    if seed < 0:
        raise reader.error(f"'seed' must be >= 0, found {seed}")
    return seed


def read_learner_state(reader: Reader, online: QNetwork, target: QNetwork) -> tuple[Any, ...]:
    """The online and target networks' states, the counters and the two RNG states
    of an agent checkpoint, each checked against ``online`` and ``target`` (whose
    architecture the caller has checked); CheckpointError on anything invalid.

    Returns
    -------
    online_state, target_state : dict of str to ndarray
        For ``QNetwork.load_state_dict`` and the target's views.
    counters : ndarray of int64, shape (2,)
    explore, replay : ndarray of uint64, shape (4,)
        PCG64 states.
    """
    sizes = reader.array(K.ONLINE + "layer_sizes", np.int64, ndim=1)
    if tuple(sizes.tolist()) != online.layer_sizes:
        raise reader.error(
            f"architecture mismatch: this agent has layer_sizes {online.layer_sizes}, "
            f"the checkpoint has {tuple(sizes.tolist())}"
        )
    online = online  # its architecture is the checkpoint's (checked above)
    online_state = {"layer_sizes": sizes, "dueling": np.array(online.dueling),
                    "layer_norm": np.array(online.layer_norm)}  # fmt: skip
    if online.head is not None:  # (checked against the checkpoint's by the caller)
        online_state["distributional"] = reader.arrays[K.HEAD]
    if online.noisy:
        online_state["noisy"] = np.array(True)
    for key, value in online.state_dict().items():
        if key not in online_state:
            online_state[key] = reader.array(K.ONLINE + key, value.dtype, value.shape)
    target_state = {}  # w<i>, b<i>, ln_g<i>, ln_b<i>, sw<i>, sb<i>
    for key, view in target.param_views():
        target_state[key] = reader.array(K.TARGET + key, np.float32, view.shape)
    counters = reader.array(K.COUNTERS, np.int64, (2,))
    if counters.min() < 0:
        raise reader.error(f"'counters' must be >= 0, found {counters.tolist()}")
    explore = reader.array(K.RNG_EXPLORE, np.uint64, (4,))
    replay = reader.array(K.RNG_REPLAY, np.uint64, (4,))
    for key, st in ((K.RNG_EXPLORE, explore), (K.RNG_REPLAY, replay)):
        if int(st[3]) % 2 == 0:
            raise reader.error(f"{key!r} is not a valid PCG64 state (even increment)")
    flags = ("layer_sizes", "dueling", "layer_norm", "distributional", "noisy")
    for key in (*(K.ONLINE + k for k in online_state if k not in flags),
                *(K.TARGET + k for k in target_state)):  # fmt: skip
        if not np.isfinite(reader.arrays[key]).all():
            raise reader.error(f"{key!r} holds NaN or infinite values")
    if (reader.arrays[K.ONLINE + "adam_v"] < 0).any() or online_state["adam_t"][0] < 0:
        raise reader.error("the Adam state is invalid (negative second moment or step)")
    return online_state, target_state, counters, explore, replay


def config_differences(reader: Reader, config: DqnConfig) -> list[str]:
    """The fields in which the checkpoint's saved config differs from ``config``, as
    ``"name saved (this agent: mine)"``; empty when it is unreadable (load() never uses it)."""
    try:
        saved = reader.json("config")
    except CheckpointError:
        return []
    if not isinstance(saved, dict):
        return []
    mine = json.loads(json.dumps(config.to_dict()))  # tuples as JSON lists
    # a field added after the file was written (e.g. dueling) had its default then
    saved = {**json.loads(json.dumps(DqnConfig().to_dict())), **saved}
    keys = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
    return [f"{k} {saved.get(k)!r} (this agent: {mine.get(k)!r})" for k in keys]


def read_agent_parts(reader: Reader, encoder: Any, action_mapper: Any) -> tuple[Any, ...]:
    """What :meth:`DqnAgent.from_checkpoint <ember_np.DqnAgent.from_checkpoint>` builds
    the agent from: ``(config, encoder, action_mapper, seed)`` of an agent checkpoint,
    the encoder and mapper rebuilt from their descriptions unless given (not None),
    all checked against the stored layer sizes. Raises CheckpointError.
    """
    reader.check_format(AGENT_FORMAT)
    try:
        config = DqnConfig.from_dict(reader.json(K.CONFIG))
        if encoder is None:
            encoder = encoder_from_description(reader.json(K.ENCODER))
        if action_mapper is None:
            action_mapper = mapper_from_description(reader.json(K.MAPPER))
    except CheckpointError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise reader.error(f"invalid config or description: {exc}") from None
    seed = read_seed(reader)
    stored = tuple(reader.array(K.ONLINE + "layer_sizes", np.int64, ndim=1).tolist())
    expected = (int(encoder.obs_size), *config.hidden_sizes, int(action_mapper.num_actions))
    if stored != expected:
        raise reader.error(
            f"architecture mismatch: the config and encoder describe layer_sizes {expected}, "
            f"the weights have {stored}"
        )
    return config, encoder, action_mapper, seed

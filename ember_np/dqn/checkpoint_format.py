"""DQN's checkpoint format: every key of an agent checkpoint, the network-state
flags (dueling, LayerNorm, noisy layers, a distributional head) and
:class:`AgentReader`, the container's reader with DQN's typed reads.

The container (atomic writes, the bounded, pickle-free reader, validation)
is ``ember_np/checkpoint.py`` and knows no algorithm; this module is what
makes a container a DQN agent's checkpoint.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ember_np.checkpoint import COUNTERS_KEY, FORMAT_KEY, VERSION_KEY, Reader
from ember_np.dqn.heads.head import DistributionalHead

__all__ = ["AGENT_FORMAT", "FORMAT_VERSION", "AgentKeys", "AgentReader"]


#: Identifies an ember_np agent checkpoint; a file without it is foreign.
AGENT_FORMAT = "ember_np.dqn_agent"
#: Bumped whenever the layout changes incompatibly.
FORMAT_VERSION = 1


class AgentKeys:
    """Every key of an agent checkpoint (format version 1): the one place they are spelled.

    Written by ``DqnAgent.state_arrays``, read by ``DqnAgent.load`` /
    ``from_checkpoint``, ``DqnPolicy.load`` and ``ember-np eval``.
    """

    FORMAT = FORMAT_KEY  # unicode scalar, AGENT_FORMAT
    VERSION = VERSION_KEY  # int64 scalar, FORMAT_VERSION
    CONFIG = "config"  # JSON text: DqnConfig.to_dict()
    ENCODER = "encoder"  # JSON text: the encoder's description
    MAPPER = "action_mapper"  # JSON text: the action mapper's description
    SEED = "seed"  # int64 scalar below 2**63, else its decimal digits (a string)
    COUNTERS = COUNTERS_KEY  # int64 (2,): total_steps, n_updates
    RNG_EXPLORE = "rng/explore"  # uint64 (4,): PCG64 state
    RNG_REPLAY = "rng/replay"  # uint64 (4,): PCG64 state
    ONLINE = "online/"  # prefix of QNetwork.state_dict() keys (layer_sizes, w<i>, b<i>, adam_*)
    DUELING = "online/dueling"  # bool scalar: dueling head (absent in older files: plain)
    TARGET = "target/"  # prefix of the target network's w<i>, b<i>
    BUFFER = "buffer/"  # prefix of the replay buffer's state_dict() keys (optional)
    LAYER_NORM = "online/layer_norm"  # bool scalar: LayerNorm (absent in older files: none)
    HEAD = "online/distributional"  # JSON text: a distributional head (absent: a plain Q head)
    NOISY = "online/noisy"  # bool scalar True: noisy layers, sigmas sw<i>, sb<i> (absent: none)

    @staticmethod
    def weight(prefix: str, layer: int) -> str:
        """Key of layer ``layer``'s weight matrix under ``prefix`` (ONLINE or TARGET)."""
        return f"{prefix}w{layer}"

    @staticmethod
    def bias(prefix: str, layer: int) -> str:
        """Key of layer ``layer``'s bias vector under ``prefix`` (ONLINE or TARGET)."""
        return f"{prefix}b{layer}"


def dueling_flag(state: Any, key: str = "dueling") -> bool:
    """Whether a network state (a mapping with ``key``: a bool scalar) is dueling.

    A state without ``key`` was written before the dueling head existed and
    describes a plain network. Raises ValueError on a malformed entry.
    """
    if key not in state:
        return False
    flag = np.asarray(state[key])
    if flag.shape != () or flag.dtype != np.bool_:
        raise ValueError(
            f"{key!r}: expected a bool scalar, found {flag.dtype} of shape {flag.shape}"
        )
    return bool(flag)


def layer_norm_flag(state: Any, key: str = "layer_norm") -> bool:
    """Whether a network state has LayerNorm after its hidden layers: the rule
    of :func:`dueling_flag` (absent in states written before LayerNorm: False)."""
    return dueling_flag(state, key)


def noisy_flag(state: Any, key: str = "noisy") -> bool:
    """Whether a network state has noisy linear layers (its sigmas under ``sw<i>``,
    ``sb<i>``): the rule of :func:`dueling_flag` (written only when True)."""
    return dueling_flag(state, key)


def noisy_name(noisy: bool) -> str:
    """How error messages name the presence of noisy layers."""
    return "with noisy layers" if noisy else "without noisy layers"


def head_of_state(state: Any, key: str = "distributional") -> DistributionalHead | None:
    """The distributional head a network state records (JSON text under ``key``:
    ``DistributionalHead.to_dict()``), or None for a plain Q head (no ``key``).
    Raises ValueError on a malformed entry."""
    if key not in state:
        return None
    text = np.asarray(state[key])
    if text.dtype.kind != "U" or text.shape != ():
        raise ValueError(f"{key!r}: expected JSON text, found {text.dtype} of shape {text.shape}")
    try:
        return DistributionalHead.from_dict(json.loads(str(text[()])))
    except (json.JSONDecodeError, ValueError, TypeError) as exc:
        raise ValueError(f"{key!r}: not a distributional head ({exc})") from None


def layer_norm_name(layer_norm: bool) -> str:
    """How error messages name the presence of LayerNorm."""
    return "with LayerNorm" if layer_norm else "without LayerNorm"


def architecture_name(dueling: bool) -> str:
    """How error messages name an architecture."""
    return "dueling (Q = V + A - mean A)" if dueling else "plain (no dueling head)"


class AgentReader(Reader):
    """The container's :class:`~ember_np.checkpoint.Reader` with the reads of a DQN
    agent checkpoint's network (each raising CheckpointError)."""

    def check_format(self, expected: str, version: int = FORMAT_VERSION) -> int:
        """Check the format tag and version (by default :data:`FORMAT_VERSION`)."""
        return super().check_format(expected, version)

    def dueling(self) -> bool:
        """Whether the checkpoint's network has a dueling head (:func:`dueling_flag`)."""
        try:
            return dueling_flag(self.arrays, AgentKeys.DUELING)
        except ValueError as exc:
            raise self.error(str(exc)) from None

    def layer_norm(self) -> bool:
        """Whether the checkpoint's network has LayerNorm (:func:`layer_norm_flag`)."""
        try:
            return layer_norm_flag(self.arrays, AgentKeys.LAYER_NORM)
        except ValueError as exc:
            raise self.error(str(exc)) from None

    def noisy(self) -> bool:
        """Whether the checkpoint's network has noisy layers (:func:`noisy_flag`)."""
        try:
            return noisy_flag(self.arrays, AgentKeys.NOISY)
        except ValueError as exc:
            raise self.error(str(exc)) from None

    def head(self) -> DistributionalHead | None:
        """The checkpoint's distributional head, None for a plain Q head (:func:`head_of_state`)."""
        try:
            return head_of_state(self.arrays, AgentKeys.HEAD)
        except ValueError as exc:
            raise self.error(str(exc)) from None

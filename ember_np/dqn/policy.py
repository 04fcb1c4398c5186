"""DqnPolicy: a trained Q-network for inference only (no optimiser, no buffer)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember_np.checkpoint import AGENT_FORMAT, CheckpointError, Reader
from ember_np.dqn.network import (
    _forward_batch,
    _forward_one,
    _greedy_action,
    _greedy_actions,
    _nonfinite_observation,
)
from ember_np.encoding import (
    DiscreteActionMapper,
    IndexActionMapper,
    ObservationEncoder,
    encode_for_network,
    encoder_from_description,
    mapper_from_description,
)

__all__ = ["DqnPolicy"]


class DqnPolicy:
    """Greedy actions from a trained Q-network, for embedding in services.

    Build one with ``agent.into_policy()`` or ``DqnPolicy.load(path)`` from
    any agent checkpoint. It holds only the weights, the encoder and the
    action mapper.
    """

    def __init__(
        self,
        layer_sizes: Sequence[int],
        params: np.ndarray,
        encoder: ObservationEncoder,
        action_mapper: DiscreteActionMapper,
    ) -> None:
        self.layer_sizes = tuple(int(s) for s in layer_sizes)
        self._sizes = np.array(self.layer_sizes, dtype=np.int64)
        self._params = np.ascontiguousarray(params, dtype=np.float32)
        n = sum(a * b + b for a, b in zip(self.layer_sizes[:-1], self.layer_sizes[1:]))
        if self._params.shape != (n,):
            raise ValueError(
                f"layer_sizes {self.layer_sizes} need {n} parameters, got {self._params.shape}"
            )
        if encoder.obs_size != self.layer_sizes[0]:
            raise ValueError(
                f"the encoder's obs_size is {encoder.obs_size}, the network's input is "
                f"{self.layer_sizes[0]}"
            )
        if action_mapper.num_actions != self.layer_sizes[-1]:
            raise ValueError(
                f"the mapper has {action_mapper.num_actions} actions, the network "
                f"{self.layer_sizes[-1]}"
            )
        self.encoder = encoder
        self.action_mapper = action_mapper
        self._obs_shape = (self.layer_sizes[0],)

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        encoder: ObservationEncoder | None = None,
        action_mapper: DiscreteActionMapper | None = None,
    ) -> DqnPolicy:
        """Read the online network of any agent checkpoint (``.npz``).

        Raises
        ------
        CheckpointError
            If the file is not a valid agent checkpoint.
        """
        reader = Reader(path)
        reader.check_format(AGENT_FORMAT)
        sizes = tuple(reader.array("online/layer_sizes", np.int64, ndim=1).tolist())
        if len(sizes) < 2 or min(sizes) < 1:
            raise reader.error(f"'online/layer_sizes' is invalid: {sizes}")
        parts = []
        for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            parts.append(reader.array(f"online/w{i}", np.float32, (n_in, n_out)).ravel())
            parts.append(reader.array(f"online/b{i}", np.float32, (n_out,)))
        try:
            if encoder is None:
                encoder = encoder_from_description(reader.json("encoder"))
            if action_mapper is None:
                action_mapper = mapper_from_description(reader.json("action_mapper"))
            return cls(sizes, np.concatenate(parts), encoder, action_mapper)
        except CheckpointError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise reader.error(str(exc)) from None

    def _encode(self, obs: Any) -> np.ndarray:
        return encode_for_network(self.encoder, obs, self._obs_shape)

    def act(self, obs: Any) -> Any:
        """The greedy action for one observation, as an env action."""
        x = self._encode(obs)
        index = _greedy_action(self._params, self._sizes, x)
        if index < 0:
            raise _nonfinite_observation(x)
        return self.action_mapper.index_to_action(index)

    def act_batch(self, obs_batch: Any) -> np.ndarray:
        """Greedy actions for a batch of observations, as an array of env actions."""
        x = np.ascontiguousarray(self.encoder.encode_batch(obs_batch), dtype=np.float32)
        out = np.empty(x.shape[0], dtype=np.int64)
        if x.shape[0]:
            _greedy_actions(self._params, self._sizes, x, out)
        if isinstance(self.action_mapper, IndexActionMapper):
            return out + self.action_mapper.start
        return np.array([self.action_mapper.index_to_action(int(i)) for i in out])

    def q_values(self, obs: Any) -> np.ndarray:
        """Q-values of one observation: ndarray of float32, shape (n_actions,)."""
        q = np.empty(self.layer_sizes[-1], dtype=np.float32)
        _forward_one(self._params, self._sizes, self._encode(obs), q)
        return q

    def q_values_batch(self, obs_batch: Any) -> np.ndarray:
        """Q-values of a batch: ndarray of float32, shape (batch, n_actions)."""
        x = np.ascontiguousarray(self.encoder.encode_batch(obs_batch), dtype=np.float32)
        q = np.empty((x.shape[0], self.layer_sizes[-1]), dtype=np.float32)
        if x.shape[0]:
            _forward_batch(self._params, self._sizes, x, q)
        return q

    def __repr__(self) -> str:
        return f"DqnPolicy(layer_sizes={self.layer_sizes})"

"""PPOPolicy: a trained PPO actor for inference only, in NumPy alone.

Loading a checkpoint and acting never imports numba, llvmlite, gymnasium or tqdm:
the actor's layers are read from the checkpoint's layer table and run as plain
matrix products. The action is the argmax of the logits (the deterministic policy,
as SB3's ``predict(deterministic=True)``), on the observation normalised by the
checkpoint's frozen running statistics when the agent normalised observations.

The compiled forward pass computes float32 tanh by a rational approximation within
3 ulps of NumPy's; the two pick different actions only where two logits are that
close.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ember_np._masks import check_action_masks
from ember_np.checkpoint import Reader
from ember_np.encoding import (
    encode_batch_for_network,
    encoder_from_description,
    indices_to_actions,
    mapper_from_description,
    nonfinite_row,
)
from ember_np.ppo.checkpoint_format import CHECKPOINT_FORMAT, CHECKPOINT_VERSION, LAYER_COLUMNS
from ember_np.ppo.normalize_stats import normalize_obs_numpy

__all__ = ["PPOPolicy"]

_COL = {name: i for i, name in enumerate(LAYER_COLUMNS)}
_TANH, _RELU = 1, 2  # the layer table's activation codes (0: none)
_LOGITS = 1  # the layer table's role of the logits layer


class PPOPolicy:
    """The greedy actor of a PPO checkpoint.

    Parameters
    ----------
    params : ndarray of float32, shape (num_params,)
    layers : ndarray of int64, shape (L, 7)
        The layer table (:data:`~ember_np.ppo.checkpoint_format.LAYER_COLUMNS`).
    encoder, action_mapper
        The agent's (raw observations in, env actions out).
    obs_stats : (mean, var) of float64 (obs_dim,), or None
        The frozen observation statistics, when the agent normalised observations.
    """

    def __init__(self, params: np.ndarray, layers: np.ndarray, encoder: Any,
                 action_mapper: Any, obs_stats: tuple[np.ndarray, np.ndarray] | None = None,
                 clip_obs: float = 10.0) -> None:  # fmt: skip
        self.params = np.asarray(params, dtype=np.float32)
        self.layers = np.asarray(layers, dtype=np.int64)
        self.encoder = encoder
        self.action_mapper = action_mapper
        self.obs_stats = obs_stats
        self.clip_obs = float(clip_obs)
        self.action_masks = False
        """Whether the agent trained with action masks (then pass each state's mask)."""
        roles = self.layers[:, _COL["role"]]
        self._logits = int(np.flatnonzero(roles == _LOGITS)[0])
        # the layers the logits need, in table order (a critic-only layer is skipped)
        needed = {self._logits}
        for l in range(self._logits, -1, -1):
            if l in needed and self.layers[l, _COL["src"]] >= 0:
                needed.add(int(self.layers[l, _COL["src"]]))
        self._path = sorted(needed)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PPOPolicy:
        """The policy of a checkpoint written by ``PPOAgent.save``; CheckpointError
        (naming what was found) for any other file."""
        reader = Reader(path, skip=("buffer/", "net/adam_"))
        reader.check_format(CHECKPOINT_FORMAT, CHECKPOINT_VERSION)
        meta = reader.json("meta")
        try:
            encoder = encoder_from_description(meta["encoder"])
            mapper = mapper_from_description(meta["mapper"])
            normalize_obs = bool(meta["config"]["normalize_obs"])
            masks = bool(meta["config"].get("action_masks", False))
        except (KeyError, TypeError, ValueError) as exc:
            raise reader.error(f"its meta does not describe a PPO agent ({exc})") from None
        params = reader.array("net/params", "float32", ndim=1)
        layers = reader.array("net/layers", "int64", ndim=2)
        if layers.shape[1] != len(LAYER_COLUMNS):
            raise reader.error(f"net/layers: expected {len(LAYER_COLUMNS)} columns, found "
                               f"shape {layers.shape}")  # fmt: skip
        last = layers[-1]
        if int(last[_COL["w_off"]] + last[_COL["n_in"]] * last[_COL["n_out"]]
               + last[_COL["n_out"]]) != params.shape[0]:  # fmt: skip
            raise reader.error("net/params does not hold the layer table's weights")
        if not np.isfinite(params).all():
            raise reader.error("net/params holds NaN or inf")
        stats = None
        if normalize_obs:
            stats = (reader.array("normalizer/obs_mean", "float64", ndim=1),
                     reader.array("normalizer/obs_var", "float64", ndim=1))  # fmt: skip
        policy = cls(params, layers, encoder, mapper, stats)
        policy.action_masks = masks
        return policy

    @property
    def logits_layer(self) -> int:
        """The layer table's row of the logits layer."""
        return self._logits

    def actor_layers(self) -> list[tuple[int, tuple[np.ndarray, np.ndarray, int, int]]]:
        """The layers the logits need, in order: ``(row, (W (in, out), b (out,), src,
        act))``, ``src`` the row feeding it (-1: the observation), ``act`` its
        activation code (0 none, 1 tanh, 2 ReLU); W and b are views of ``params``."""
        out = []
        for l in self._path:
            n_in, n_out, w_off, src, _, act, _ = (int(v) for v in self.layers[l])
            w = self.params[w_off : w_off + n_in * n_out].reshape(n_in, n_out)
            b = self.params[w_off + n_in * n_out : w_off + n_in * n_out + n_out]
            out.append((l, (w, b, src, act)))
        return out

    def logits_batch(self, x: np.ndarray) -> np.ndarray:
        """The actor's logits (float32 (B, n_actions)) of encoded observations (B, obs_dim)."""
        x = np.asarray(x, dtype=np.float32)
        if self.obs_stats is not None:
            x = normalize_obs_numpy(x, *self.obs_stats, clip_obs=self.clip_obs)
        outputs: dict[int, np.ndarray] = {}
        for l, (w, b, src, act) in self.actor_layers():
            h = (x if src < 0 else outputs[src]) @ w + b
            if act == _TANH:
                h = np.tanh(h)
            elif act == _RELU:
                h = np.maximum(h, 0.0)
            outputs[l] = h
        return outputs[self._logits]

    def _encode_batch(self, obs_batch: Any) -> np.ndarray:
        """Encoded float32 (B, obs_dim), every row finite (else ValueError naming it)."""
        x = encode_batch_for_network(self.encoder, obs_batch, int(self.layers[0, _COL["n_in"]]))
        bad = np.flatnonzero(~np.isfinite(x).all(axis=1))
        if bad.size:
            raise nonfinite_row(x, int(bad[0]), "obs_batch")
        return x

    def act_batch(self, obs_batch: Any, action_masks: Any = None) -> np.ndarray:
        """The env actions (argmax of the logits) for a batch of raw observations;
        ``action_masks`` (bool or 0/1, (batch, n_actions)): each row's legal actions,
        the argmax taken over them alone."""
        logits = self.logits_batch(self._encode_batch(obs_batch))
        if action_masks is not None:
            legal = check_action_masks(action_masks, logits.shape[0], logits.shape[1])
            logits = np.where(legal, logits, -np.inf)
        return indices_to_actions(self.action_mapper, np.argmax(logits, axis=1))

    def act(self, obs: Any, action_mask: Any = None) -> Any:
        """The env action (argmax of the logits, over the legal actions of
        ``action_mask`` when given, as gymnasium's ``info["action_mask"]``) for one raw
        observation."""
        masks = None if action_mask is None else [action_mask]
        return self.act_batch([obs], masks)[0]

"""DqnPolicy: a trained Q-network for inference only (no optimiser, no buffer).

This module needs NumPy alone: with ``backend="numpy"`` (what a fresh process
gets by default) loading a checkpoint and acting never imports numba,
llvmlite, gymnasium or tqdm (``ember_np.policy`` is the short import path).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

from ember_np._arrays import as_f32
from ember_np._masks import check_action_mask, check_action_masks
from ember_np.checkpoint import CheckpointError
from ember_np.dqn.checkpoint_format import AGENT_FORMAT, AgentReader
from ember_np.dqn.checkpoint_format import AgentKeys as K
from ember_np.dqn.heads.forward import (
    CompiledForward,
    NumpyForward,
    check_observation,
    layer_views,
    norm_views,
    refused_observation,
    refused_row,
)
from ember_np.dqn.heads.head import DistributionalHead
from ember_np.encoding import (
    DiscreteActionMapper,
    IndexActionMapper,
    ObservationEncoder,
    VecEncoder,
    encode_for_network,
    encoder_from_description,
    mapper_from_description,
)

__all__ = ["Backend", "DqnPolicy"]

_F32 = np.dtype(np.float32)
#: Checkpoint members a policy has no use for: the target network, the optimiser
#: state and the replay buffer (which can be most of the file).
NOT_READ = (K.TARGET, K.BUFFER, K.ONLINE + "adam_")

#: How a policy computes its forward pass (see :class:`DqnPolicy`).
Backend = Literal["auto", "numpy", "numba"]
_BACKENDS = ("auto", "numpy", "numba")


def _resolve_backend(backend: str) -> str:
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if backend == "auto":
        # Compiled code only where numba is already paid for (a training
        # process); elsewhere NumPy acts ~0.4 s sooner in ~130 MB less memory.
        return "numba" if "numba" in sys.modules else "numpy"
    return backend


class DqnPolicy:
    """Greedy actions from a trained Q-network, for embedding in services.

    Build one with ``agent.into_policy()`` or ``DqnPolicy.load(path)`` from
    any agent checkpoint. It holds only the weights, the encoder and the
    action mapper.

    ``backend`` chooses the forward pass; both give the same actions and
    Q-values equal up to float32 rounding:

    * ``"numpy"``: NumPy alone (``ember_np/dqn/heads/forward.py``). A fresh process
      acts within a few tenths of a second, in about 30 MB, at 5 to 7 µs per
      ``act``.
    * ``"numba"``: the compiled kernels. About 2 µs per ``act``, but numba
      and its compiled code cost about 0.4 s more and 130 MB more in a fresh
      process (and numba must be installed).
    * ``"auto"`` (default): ``"numba"`` when numba is already imported in the
      process (a training process, ``agent.into_policy()``), else ``"numpy"``.

    A distributional network (``head``: C51 or QR-DQN, ``dqn/heads/head.py``) acts
    on, and gives as Q-values, the expected values of its distributions.

    One rule for bad observations in every method (``act``, ``act_batch``,
    ``q_values``, ``q_values_batch``): NaN or inf (after the cast to float32),
    or a value beyond :attr:`max_abs_obs` (where float32 could overflow inside
    the network, and the backends would disagree), raises ValueError naming
    the parameter (``obs`` / ``obs_batch``), the limit and, for a batch, the
    first offending row; nothing is returned for the others.
    """

    def __init__(
        self,
        layer_sizes: Sequence[int],
        params: np.ndarray,
        encoder: ObservationEncoder,
        action_mapper: DiscreteActionMapper,
        backend: Backend = "auto",
        *,
        dueling: bool = False,
        layer_norm: bool = False,
        head: DistributionalHead | None = None,
    ) -> None:
        self.layer_sizes = tuple(int(s) for s in layer_sizes)
        if head is not None and not isinstance(head, DistributionalHead):
            raise ValueError(f"head must be None or a DistributionalHead, got {head!r}")
        self.head = head
        atoms = 1 if head is None else head.n_atoms
        if not isinstance(layer_norm, (bool, np.bool_)):
            raise ValueError(f"layer_norm must be True or False, got {layer_norm!r}")
        if layer_norm and (len(self.layer_sizes) < 3 or min(self.layer_sizes[1:-1]) < 2):
            raise ValueError(
                f"layer_norm needs hidden layers of width >= 2, got layer_sizes {self.layer_sizes}"
            )
        self.layer_norm = bool(layer_norm)
        if not isinstance(dueling, (bool, np.bool_)):
            raise ValueError(f"dueling must be True or False, got {dueling!r}")
        if dueling and len(self.layer_sizes) < 3:
            raise ValueError(
                f"a dueling network needs a hidden layer, got layer_sizes {self.layer_sizes}"
            )
        self.dueling = bool(dueling)
        self._params = as_f32(params, "params")
        if not np.isfinite(self._params).all():
            raise ValueError(_nonfinite_weights())
        widths = (*self.layer_sizes[:-1], self.layer_sizes[-1] * atoms)
        n = sum(a * b + b for a, b in zip(widths[:-1], widths[1:]))
        if dueling:
            n += (self.layer_sizes[-2] + 1) * atoms  # the value head
        if layer_norm:
            n += 2 * sum(self.layer_sizes[1:-1])  # each hidden layer's gain and bias
        if self._params.shape != (n,):
            arch = ("dueling " if dueling else "") + ("LayerNorm " if layer_norm else "")
            arch += "" if head is None else f"{head.kind} ({atoms} atoms) "
            raise ValueError(
                f"{arch}layer_sizes {self.layer_sizes} need {n} parameters, "
                f"got {self._params.shape}"
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
        forward = CompiledForward if _resolve_backend(backend) == "numba" else NumpyForward
        self._forward = forward(self.layer_sizes, self._params, self.dueling, self.layer_norm,
                                head)  # fmt: skip

    @property
    def backend(self) -> str:
        """The forward pass in use: ``"numpy"`` or ``"numba"``."""
        return self._forward.name

    @property
    def max_abs_obs(self) -> float:
        """The largest max |value| of an encoded observation this policy acts on
        (``inf``: no bound), computed from the weights (``forward.obs_limit``):
        below it no float32 value inside the network can overflow, so every backend
        and the ONNX export (its ``max_abs_obs`` metadata) give the same action;
        every method refuses an observation beyond it with ValueError."""
        return self._forward.limit

    @property
    def params(self) -> np.ndarray:
        """All weights and biases as one float32 vector, shape (n_params,).

        The layout of :attr:`ember_np.QNetwork.params`: layer by layer, ``W_l``
        row-major ``(in, out)`` then ``b_l``, in the order of :meth:`layers` (a
        dueling policy's value head last), then each hidden layer's LayerNorm
        gain and bias (:meth:`norms`). It is the array the policy acts with, not
        a copy (the ``params`` given to the constructor when that was already a
        C-contiguous float32 array): treat it as read-only. The NumPy backend
        keeps its own copy of the weights, so a write would reach the compiled
        backend and :meth:`layers` but not the NumPy backend's actions; build a
        new ``DqnPolicy`` for other weights.
        """
        return self._params

    def layers(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Copies of each layer's ``(W, b)``: float32 ``(in, out)`` and ``(out,)``.

        Q(x) = h_{L-1} @ W_{L-1} + b_{L-1} with h_0 = x and
        h_{l+1} = ReLU(h_l @ W_l + b_l) (what ``ember-np export`` writes as ONNX).
        A :attr:`dueling` policy has one more pair: the advantage head A is
        the second-last, the value head V (W of shape (hidden, 1)) the last,
        and Q = V + A - mean(A) from the last hidden layer. With a distributional
        :attr:`head` the last layer has n_actions * n_atoms outputs (action-major)
        and V n_atoms, combined per atom; Q is their expected value (``head.py``).
        """
        views = layer_views(self.layer_sizes, self._params, self.dueling, self._atoms())
        return [(w.copy(), b.copy()) for w, b in views]

    def norms(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """Copies of each hidden layer's LayerNorm (gain, bias), float32 (hidden_l,) each;
        empty without :attr:`layer_norm`. With them h_{l+1} = ReLU(LayerNorm_l(h_l @ W_l
        + b_l)), LayerNorm(z) = gain * (z - mean(z)) / sqrt(var(z) + 1e-5) + bias."""
        if not self.layer_norm:
            return []
        views = norm_views(self.layer_sizes, self._params, self.dueling, self._atoms())
        return [(g.copy(), b.copy()) for g, b in views]

    def _atoms(self) -> int:
        return 1 if self.head is None else self.head.n_atoms

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        encoder: ObservationEncoder | None = None,
        action_mapper: DiscreteActionMapper | None = None,
        backend: Backend = "auto",
    ) -> DqnPolicy:
        """Read the online network of any agent checkpoint (``.npz``).

        ``backend`` is ``"auto"``, ``"numpy"`` or ``"numba"`` (see the class).

        Raises
        ------
        CheckpointError
            If the file is not a valid agent checkpoint.
        ValueError
            If ``backend`` is not one of the three names.
        """
        _resolve_backend(backend)  # a bad name is the caller's error, not the file's
        reader = AgentReader(path, skip=NOT_READ)  # checked like the rest, never loaded
        reader.check_format(AGENT_FORMAT)
        sizes = tuple(reader.array(K.ONLINE + "layer_sizes", np.int64, ndim=1).tolist())
        if len(sizes) < 2 or min(sizes) < 1:
            raise reader.error(f"'online/layer_sizes' is invalid: {sizes}")
        dueling = reader.dueling()
        head = reader.head()
        atoms = 1 if head is None else head.n_atoms
        widths = (*sizes[:-1], sizes[-1] * atoms)
        shapes = [(n_in, n_out) for n_in, n_out in zip(widths[:-1], widths[1:])]
        if dueling and len(sizes) >= 3:
            shapes.append((sizes[-2], atoms))  # the value head
        # (key, dtype, shape) of each parameter array, in the flat layout order
        keyed: list[tuple[str, type[np.float32], tuple[int, ...]]] = []
        for i, (n_in, n_out) in enumerate(shapes):
            keyed.append((K.weight(K.ONLINE, i), np.float32, (n_in, n_out)))
            keyed.append((K.bias(K.ONLINE, i), np.float32, (n_out,)))
        layer_norm = reader.layer_norm()
        for i, width in enumerate(sizes[1:-1] if layer_norm else ()):
            for key in (f"ln_g{i}", f"ln_b{i}"):
                keyed.append((K.ONLINE + key, np.float32, (width,)))
        parts = []
        for key, dtype, shape in keyed:
            arr = reader.array(key, dtype, shape)
            if not np.isfinite(arr).all():  # a diverged run: act() would always return 0
                raise reader.error(_nonfinite_weights(key))
            parts.append(arr.ravel())
        try:
            if encoder is None:
                encoder = encoder_from_description(reader.json(K.ENCODER))
            if action_mapper is None:
                action_mapper = mapper_from_description(reader.json(K.MAPPER))
            policy = cls(sizes, np.concatenate(parts), encoder, action_mapper, backend,
                         dueling=dueling, layer_norm=layer_norm, head=head)  # fmt: skip
        except CheckpointError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise reader.error(str(exc)) from None
        return policy

    def _encode(self, obs: Any) -> np.ndarray:
        return encode_for_network(self.encoder, obs, self._obs_shape)

    def act(self, obs: Any, action_mask: Any = None) -> Any:
        """The greedy action for one observation, as an env action.

        With ``action_mask`` (bool or 0/1 array of shape (n_actions,), as
        gymnasium's ``info["action_mask"]``) only legal actions are chosen;
        a mask of the wrong shape or dtype, or without a legal action, raises
        ValueError.
        """
        if (  # the common case, checked inline: already the vector the network takes
            type(obs) is np.ndarray
            and obs.dtype is _F32
            and obs.shape == self._obs_shape
            and obs.flags.carray
            and type(self.encoder) is VecEncoder  # which returns such a vector as it is
        ):
            x = obs
        else:
            x = self._encode(obs)
        if action_mask is None:
            index = self._forward.greedy_one(x)  # which checks x (cheaper in the kernel)
        else:
            legal = check_action_mask(action_mask, self.layer_sizes[-1])
            check_observation(x, self._forward.limit)
            index = self._forward.greedy_one_legal(x, legal)
        if index < 0:
            raise refused_observation(x, index, self._forward.limit)
        return self.action_mapper.index_to_action(index)

    def act_batch(self, obs_batch: Any, action_masks: Any = None) -> np.ndarray:
        """Greedy actions for a batch of observations, as an array of env actions.

        ``action_masks`` (bool or 0/1, shape (batch, n_actions)): each row's
        legal actions, as :meth:`act` takes one.
        """
        x = self._encode_batch(obs_batch)
        if action_masks is None:
            out, _ = self._forward.greedy_batch(x)
        else:
            legal = check_action_masks(action_masks, x.shape[0], self.layer_sizes[-1])
            out, _ = self._forward.greedy_batch_legal(x, legal)
        if isinstance(self.action_mapper, IndexActionMapper):
            return out + self.action_mapper.start
        return np.array([self.action_mapper.index_to_action(int(i)) for i in out])

    def q_values(self, obs: Any) -> np.ndarray:
        """Q-values of one observation: ndarray of float32, shape (n_actions,)."""
        x = self._encode(obs)
        check_observation(x, self._forward.limit)
        q = self._forward.q_one(x)
        assert q is not None  # x was checked
        return q

    def q_values_batch(self, obs_batch: Any) -> np.ndarray:
        """Q-values of a batch: ndarray of float32, shape (batch, n_actions)."""
        q, _ = self._forward.q_batch(self._encode_batch(obs_batch))
        return q

    def _encode_batch(self, obs_batch: Any) -> np.ndarray:
        """The encoded batch, checked (:func:`~ember_np.dqn.heads.forward.refused_row`)."""
        x = as_f32(self.encoder.encode_batch(obs_batch), "the encoder's output")
        err = refused_row(x, self._forward.limit) if x.ndim == 2 else None
        if err is not None:
            raise err
        return x

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies and pickles go through the constructor, with their own parameters."""
        args = (self.layer_sizes, self._params, self.encoder, self.action_mapper, self.backend,
                self.dueling, self.layer_norm, self.head)  # fmt: skip
        return (_unpickle, args)

    def __repr__(self) -> str:
        duel = ", dueling=True" if self.dueling else ""
        duel += ", layer_norm=True" if self.layer_norm else ""
        duel += "" if self.head is None else f", head={self.head!r}"
        return f"DqnPolicy(layer_sizes={self.layer_sizes}{duel}, backend={self.backend!r})"


def _nonfinite_weights(key: str = "") -> str:
    """The message for weights holding NaN or inf: a diverged run (every action would be 0)."""
    what = f"{key!r} holds" if key else "the network's weights hold"
    return (
        f"{what} NaN or infinite values: the run that wrote them diverged (e.g. a learning "
        "rate too large); use an earlier checkpoint (best.npz, step_N.npz) or retrain with a "
        "smaller learning_rate"
    )


def _unpickle(
    layer_sizes: Sequence[int],
    params: np.ndarray,
    encoder: Any,
    action_mapper: Any,
    backend: Backend = "auto",
    dueling: bool = False,
    layer_norm: bool = False,
    head: DistributionalHead | None = None,
) -> DqnPolicy:
    """A policy with a copy of ``params`` (which may be a read-only or shared pickle buffer)."""
    params = np.array(params, dtype=np.float32)
    return DqnPolicy(layer_sizes, params, encoder, action_mapper, backend,  # type: ignore[arg-type]
                     dueling=dueling, layer_norm=layer_norm, head=head)  # fmt: skip

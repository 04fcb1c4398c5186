"""QNetwork's state: ``state_dict`` / ``load_state_dict``, copying and pickling,
and the named views of its parameters (a mixin of :class:`~ember_np.QNetwork`).

Keys of a state: ``layer_sizes`` (int64), ``dueling`` (bool, shape ()), with a
distributional head ``distributional`` (JSON text), with noisy layers ``noisy``
(bool True), then the parameters by :meth:`StateMethods.param_views` (``w<i>``,
``b<i>``, ``ln_g<i>``, ``ln_b<i>``, ``sw<i>``, ``sb<i>``; ``layer_norm`` (bool)
between the weights and LayerNorm's), then Adam's ``adam_m``, ``adam_v``,
``adam_t``. A plain network's state has exactly the keys it had before noisy
layers existed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ember_np.checkpoint import json_array
from ember_np.dqn.checkpoint_format import (
    architecture_name,
    dueling_flag,
    head_of_state,
    layer_norm_flag,
    layer_norm_name,
    noisy_flag,
    noisy_name,
)  # fmt: skip
from ember_np.dqn.heads.head import head_name
from ember_np.dqn.learner.network_inputs import check_layer_sizes

_F32 = np.dtype(np.float32)


class StateMethods:
    """State, copying and pickling of a QNetwork (see the module docstring)."""

    _sizes_tuple: tuple[int, ...]
    _dueling: bool
    _layer_norm: bool
    _noisy: bool
    _head: Any
    _adam_m: np.ndarray
    _adam_v: np.ndarray
    _adam_t: np.ndarray
    weights: list[np.ndarray]
    biases: list[np.ndarray]
    norm_gains: list[np.ndarray]
    norm_biases: list[np.ndarray]
    sigma_weights: list[np.ndarray]
    sigma_biases: list[np.ndarray]

    def _init_storage(self, sizes: tuple[int, ...], dueling: bool, layer_norm: bool, head: Any,
                      noisy: bool) -> None:  # fmt: skip
        raise NotImplementedError  # QNetwork's

    def _architecture(self, dueling: bool, layer_norm: bool, head: Any,
                      noisy: bool) -> list[tuple[Any, ...]]:  # fmt: skip
        """(how messages name it, this network's, the given) of each architectural choice."""
        return [(architecture_name, self._dueling, dueling),
                (layer_norm_name, self._layer_norm, layer_norm), (head_name, self._head, head),
                (noisy_name, self._noisy, noisy)]  # fmt: skip

    def param_views(self) -> list[tuple[str, np.ndarray]]:
        """(state_dict key, live float32 view) of every parameter array, in the flat
        vector's order: ``w<i>``, ``b<i>`` (each linear layer's W and b; with noisy
        layers, their means), ``ln_g<i>``, ``ln_b<i>`` (LayerNorm), ``sw<i>``, ``sb<i>``
        (noisy layers' sigmas)."""
        out = []
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            out += [(f"w{i}", w), (f"b{i}", b)]
        for i, (gain, bias) in enumerate(zip(self.norm_gains, self.norm_biases)):
            out += [(f"ln_g{i}", gain), (f"ln_b{i}", bias)]
        for i, (w, b) in enumerate(zip(self.sigma_weights, self.sigma_biases)):
            out += [(f"sw{i}", w), (f"sb{i}", b)]
        return out

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of everything that defines the network and its optimiser (keys:
        the module docstring's; float32 parameters, ``adam_m``, ``adam_v`` float32
        (num_params,), ``adam_t`` int64 (1,))."""
        state: dict[str, np.ndarray] = {"layer_sizes": np.array(self._sizes_tuple, np.int64)}
        state["dueling"] = np.array(self._dueling)
        if self._head is not None:
            state["distributional"] = json_array(self._head.to_dict())
        if self._noisy:
            state["noisy"] = np.array(True)
        views = self.param_views()
        n_linear = 2 * len(self.weights)  # w<i>, b<i>; then the flag, then LayerNorm's, sigmas
        for key, view in views[:n_linear]:
            state[key] = view.copy()
        state["layer_norm"] = np.array(self._layer_norm)
        for key, view in views[n_linear:]:
            state[key] = view.copy()
        state["adam_m"] = self._adam_m.copy()
        state["adam_v"] = self._adam_v.copy()
        state["adam_t"] = self._adam_t.copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict`; raises ValueError (nothing changed) on a mismatch.

        A state without a ``dueling`` entry (written before the dueling head
        existed) describes a plain network; one without ``layer_norm``, a
        network without LayerNorm; one without ``noisy``, one without noisy layers.
        """
        sizes = tuple(int(s) for s in np.asarray(state["layer_sizes"]).ravel())
        if sizes != self._sizes_tuple:
            raise ValueError(
                f"layer_sizes mismatch: this network has {self._sizes_tuple}, the state has {sizes}"
            )
        flags = (dueling_flag(state), layer_norm_flag(state), head_of_state(state),
                 noisy_flag(state))  # fmt: skip
        for name, mine, stored in self._architecture(*flags):
            if mine != stored:
                raise ValueError(f"architecture mismatch: this network is {name(mine)}, "
                                 f"the state is {name(stored)}")  # fmt: skip
        expected: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for key, view in self.param_views():
            expected[key] = (view.shape, _F32)
        expected["adam_m"] = (self._adam_m.shape, _F32)
        expected["adam_v"] = (self._adam_v.shape, _F32)
        expected["adam_t"] = ((1,), np.dtype(np.int64))
        arrays = {}
        for key, (shape, dtype) in expected.items():
            if key not in state:
                raise ValueError(f"network state is missing {key!r}")
            arr = np.asarray(state[key])
            if arr.shape != shape:
                raise ValueError(
                    f"network state {key!r}: expected shape {shape}, found {arr.shape}"
                )
            if arr.dtype != dtype:
                raise ValueError(
                    f"network state {key!r}: expected dtype {dtype}, found {arr.dtype}"
                )
            arrays[key] = arr
        for key, view in self.param_views():
            view[...] = arrays[key]
        self._adam_m[:] = arrays["adam_m"]
        self._adam_v[:] = arrays["adam_v"]
        self._adam_t[:] = arrays["adam_t"]

    # -- copying and pickling --------------------------------------------------
    # ``weights`` and ``biases`` are views of ``_params``; pickled or deep-copied
    # member by member they would come back as separate arrays that the kernels
    # never train. So a copy carries the state_dict and rebuilds the views.
    def __getstate__(self) -> dict[str, np.ndarray]:
        """What ``copy.deepcopy`` and ``pickle`` keep: :meth:`state_dict`."""
        return self.state_dict()

    def __setstate__(self, state: dict[str, np.ndarray]) -> None:
        dueling = bool(state["dueling"]) if "dueling" in state else False
        sizes = check_layer_sizes(np.asarray(state["layer_sizes"]).tolist())
        self._init_storage(sizes, dueling, layer_norm_flag(state), head_of_state(state),
                           noisy_flag(state))  # fmt: skip
        self.load_state_dict(state)

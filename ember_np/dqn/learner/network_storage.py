"""QNetwork's storage: its parameter and optimiser arrays, their named views, and
their saved state (:class:`NetworkStorage`, which :class:`~ember_np.QNetwork`
holds and delegates its ``weights``, ``state_dict``, ``load_state_dict``,
``param_views``, copying and pickling to).

Layout of the flat parameter vector: each linear layer's W (in, out) then b
(out,), layer by layer (a dueling value head's last); with LayerNorm, each
hidden layer's gain then bias; with noisy layers, a sigma of each linear-layer
parameter, in the same order (``dqn/learner/noisy.py``). Adam's m and v have
its size; its step count t is int64 (1,).

Keys of a state: ``layer_sizes`` (int64), ``dueling`` (bool, shape ()), with a
distributional head ``distributional`` (JSON text), with noisy layers ``noisy``
(bool True), then the parameters by :meth:`NetworkStorage.param_views`
(``w<i>``, ``b<i>``, ``ln_g<i>``, ``ln_b<i>``, ``sw<i>``, ``sb<i>``;
``layer_norm`` (bool) between the weights and LayerNorm's), then Adam's
``adam_m``, ``adam_v``, ``adam_t``. A plain network's state has exactly the
keys it had before noisy layers existed.
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
from ember_np.dqn.heads.head import DistributionalHead, head_name, kernel_sizes
from ember_np.dqn.learner.network_inputs import check_layer_sizes
from ember_np.dqn.learner.noisy import linear_size, noisy_layer_table

__all__ = ["NetworkStorage"]

_F32 = np.dtype(np.float32)


class NetworkStorage:
    """The arrays of one Q-network of a given architecture, zeroed (see the module
    docstring for their layout and their state's keys).

    Parameters
    ----------
    layer_sizes : tuple of int
        ``(obs_size, hidden..., n_actions)``, already checked.
    dueling, layer_norm, noisy : bool
        The architecture's flags (checked by :class:`~ember_np.QNetwork`).
    head : DistributionalHead or None
        A distributional value head: ``head.n_atoms`` outputs per action.

    Attributes
    ----------
    layer_sizes : tuple of int
    dueling, layer_norm, noisy : bool
    head : DistributionalHead or None
    sizes : ndarray of int64
        The kernels' ``sizes`` array (``dqn/heads/head.py``'s ``kernel_sizes``).
    noise_layers : ndarray of int64 or None
        With ``noisy``, each linear layer's (offset, in, out, ...) row
        (``noisy_layer_table``); None otherwise.
    params : ndarray of float32, shape (num_params,)
        Every parameter; the arrays below are views into it.
    mean : ndarray of float32
        ``params`` without noisy layers' sigmas (all of it without them): what
        inference reads.
    grads, adam_m, adam_v : ndarray of float32, shape (num_params,)
    adam_t : ndarray of int64, shape (1,)
    weights, biases : list of ndarray of float32, shapes (in, out) and (out,)
    norm_gains, norm_biases : list of ndarray of float32, shape (hidden_l,)
    sigma_weights, sigma_biases : list of ndarray of float32
    """

    def __init__(
        self, layer_sizes: tuple[int, ...], dueling: bool, layer_norm: bool,
        head: DistributionalHead | None, noisy: bool = False,
    ) -> None:  # fmt: skip
        sizes = layer_sizes
        self.layer_sizes = sizes
        self.noisy = noisy
        self.dueling = dueling
        self.layer_norm = layer_norm
        self.head = head
        self.sizes = kernel_sizes(sizes, head, dueling)
        atoms = 1 if head is None else head.n_atoms
        widths = (*sizes[:-1], sizes[-1] * atoms)  # a distributional head: atoms per action
        n = sum(widths[i] * widths[i + 1] + widths[i + 1] for i in range(len(widths) - 1))
        if dueling:  # the value head follows the plain layout (see layout)
            n += (sizes[-2] + 1) * atoms
        ln_off = n
        if layer_norm:  # then each hidden layer's gain and bias
            n += 2 * sum(sizes[1:-1])
        n_base = n
        self.noise_layers = noisy_layer_table(sizes, atoms, dueling) if noisy else None
        if self.noise_layers is not None:  # then a sigma per linear-layer parameter
            n += linear_size(self.noise_layers)
        self.params = np.zeros(n, dtype=np.float32)
        self.mean = self.params[:n_base] if noisy else self.params  # what inference reads
        self.grads = np.zeros(n, dtype=np.float32)
        self.adam_m = np.zeros(n, dtype=np.float32)
        self.adam_v = np.zeros(n, dtype=np.float32)
        self.adam_t = np.zeros(1, dtype=np.int64)
        self.weights: list[np.ndarray] = []
        self.biases: list[np.ndarray] = []
        off = 0
        for n_in, n_out in zip(widths[:-1], widths[1:]):
            self.weights.append(self.params[off : off + n_in * n_out].reshape(n_in, n_out))
            off += n_in * n_out
            self.biases.append(self.params[off : off + n_out])
            off += n_out
        if dueling:
            n_hid = sizes[-2]
            self.weights.append(self.params[off : off + n_hid * atoms].reshape(n_hid, atoms))
            self.biases.append(self.params[off + n_hid * atoms : off + (n_hid + 1) * atoms])
        self.norm_gains: list[np.ndarray] = []
        self.norm_biases: list[np.ndarray] = []
        for width in sizes[1:-1] if layer_norm else ():
            self.norm_gains.append(self.params[ln_off : ln_off + width])
            self.norm_biases.append(self.params[ln_off + width : ln_off + 2 * width])
            ln_off += 2 * width
        self.sigma_weights: list[np.ndarray] = []
        self.sigma_biases: list[np.ndarray] = []
        for off, n_in, n_out, _ in () if self.noise_layers is None else self.noise_layers:
            off += n_base
            self.sigma_weights.append(self.params[off : off + n_in * n_out].reshape(n_in, n_out))
            self.sigma_biases.append(self.params[off + n_in * n_out : off + (n_in + 1) * n_out])

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> NetworkStorage:
        """Storage of the architecture a :meth:`state_dict` describes, holding it."""
        dueling = bool(state["dueling"]) if "dueling" in state else False
        sizes = check_layer_sizes(np.asarray(state["layer_sizes"]).tolist())
        store = cls(sizes, dueling, layer_norm_flag(state), head_of_state(state),
                    noisy_flag(state))  # fmt: skip
        store.load_state_dict(state)
        return store

    def copy(self) -> NetworkStorage:
        """An independent copy of the parameters and Adam's state (gradients zeroed:
        an update overwrites them before reading)."""
        other = NetworkStorage(self.layer_sizes, self.dueling, self.layer_norm, self.head,
                               self.noisy)  # fmt: skip
        other.params[:] = self.params
        other.adam_m[:] = self.adam_m
        other.adam_v[:] = self.adam_v
        other.adam_t[:] = self.adam_t
        return other

    def architecture(self, dueling: bool, layer_norm: bool, head: Any,
                     noisy: bool) -> list[tuple[Any, ...]]:  # fmt: skip
        """(how messages name it, this network's, the given) of each architectural choice."""
        return [(architecture_name, self.dueling, dueling),
                (layer_norm_name, self.layer_norm, layer_norm), (head_name, self.head, head),
                (noisy_name, self.noisy, noisy)]  # fmt: skip

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
        state: dict[str, np.ndarray] = {"layer_sizes": np.array(self.layer_sizes, np.int64)}
        state["dueling"] = np.array(self.dueling)
        if self.head is not None:
            state["distributional"] = json_array(self.head.to_dict())
        if self.noisy:
            state["noisy"] = np.array(True)
        views = self.param_views()
        n_linear = 2 * len(self.weights)  # w<i>, b<i>; then the flag, then LayerNorm's, sigmas
        for key, view in views[:n_linear]:
            state[key] = view.copy()
        state["layer_norm"] = np.array(self.layer_norm)
        for key, view in views[n_linear:]:
            state[key] = view.copy()
        state["adam_m"] = self.adam_m.copy()
        state["adam_v"] = self.adam_v.copy()
        state["adam_t"] = self.adam_t.copy()
        return state

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict`; raises ValueError (nothing changed) on a mismatch.

        A state without a ``dueling`` entry (written before the dueling head
        existed) describes a plain network; one without ``layer_norm``, a
        network without LayerNorm; one without ``noisy``, one without noisy layers.
        """
        sizes = tuple(int(s) for s in np.asarray(state["layer_sizes"]).ravel())
        if sizes != self.layer_sizes:
            raise ValueError(
                f"layer_sizes mismatch: this network has {self.layer_sizes}, the state has {sizes}"
            )
        flags = (dueling_flag(state), layer_norm_flag(state), head_of_state(state),
                 noisy_flag(state))  # fmt: skip
        for name, mine, stored in self.architecture(*flags):
            if mine != stored:
                raise ValueError(f"architecture mismatch: this network is {name(mine)}, "
                                 f"the state is {name(stored)}")  # fmt: skip
        expected: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        for key, view in self.param_views():
            expected[key] = (view.shape, _F32)
        expected["adam_m"] = (self.adam_m.shape, _F32)
        expected["adam_v"] = (self.adam_v.shape, _F32)
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
        self.adam_m[:] = arrays["adam_m"]
        self.adam_v[:] = arrays["adam_v"]
        self.adam_t[:] = arrays["adam_t"]

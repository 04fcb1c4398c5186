"""QNetwork: an MLP Q-function with hand-written backprop and Adam, compiled.

The network maps an observation to one Q-value per action:
``obs -> Linear -> ReLU -> ... -> Linear -> Q``. All parameters live in one
flat float32 array; ``weights[l]`` (shape ``(in, out)``) and ``biases[l]``
(shape ``(out,)``) are views into it, so writing into them changes the
network, and the optimiser, gradient clipping and target-network sync are
single loops over that array. A dueling network (``dueling=True``) has the
advantage head as its last layer and the value head's ``W_V`` (hidden,) and
``b_V`` after it; with ``layer_norm=True`` each hidden layer is Linear ->
LayerNorm -> ReLU and the LayerNorms' gains and biases come last. A
distributional head (``head=DistributionalHead(...)``, C51 or QR-DQN) has
``n_atoms`` outputs per action (and a value head of ``n_atoms``); its
Q-values are their expected values (``dqn/heads/head.py``).

The compiled code lives by concern: ``ember_np/nn/`` (layout, forward and
backward passes, LayerNorm, dueling head, clipping, Adam), ``dqn/heads/qvalues.py``
(Q-values, greedy actions) and ``dqn/learner/learn.py`` (TD targets, Huber
loss; its docstring has the reading map of one update). This module holds
:class:`QNetwork`, the Python wrapper that checks and coerces its inputs; its
arrays (parameters, gradients, Adam's state, their named views) and their saved
state are its :class:`~ember_np.dqn.learner.network_storage.NetworkStorage`
(``dqn/learner/network_storage.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ember_np._arrays import as_f32, as_i64
from ember_np._jit import entry_point
from ember_np._masks import check_action_masks
from ember_np._memory import check_network_memory
from ember_np.dqn.heads.forward import refused_observation
from ember_np.dqn.heads.head import DistributionalHead
from ember_np.dqn.heads.qvalues import (
    greedy_action,
    greedy_actions_checked,
    q_values_batch_checked,
    q_values_checked,
)
from ember_np.dqn.learner.distributional import head_outputs_checked
from ember_np.dqn.learner.learn import (
    NetState,
    PerSample,
    UpdateSettings,
    checked_update,
    net_state,
    update_settings,
)
from ember_np.dqn.learner.network_inputs import (
    NO_PER_SAMPLE,
    UpdateOptions,
    as_batch,
    as_update_options,
    batch_discounts,
    check_layer_sizes,
    check_positive_float,
    holds_data,
    optional_per_sample,
    td_errors_out_array,
)
from ember_np.dqn.learner.network_storage import NetworkStorage
from ember_np.dqn.learner.noisy import noisy_net_state
from ember_np.encoding import nonfinite_observation, nonfinite_row
from ember_np.nn.init import init_layer_norm, init_linear
from ember_np.nn.optim import polyak
from ember_np.rng import Rng
from ember_np.types import Batch

__all__ = [
    "NetState",
    "PerSample",
    "QNetwork",
    "UpdateOptions",
    "UpdateSettings",
    "update_settings",
]

_F32 = np.dtype(np.float32)


class QNetwork:
    """An MLP Q-network ``obs -> hidden... -> Q-values`` with its Adam state.

    Parameters
    ----------
    layer_sizes : sequence of int
        ``(obs_size, hidden..., n_actions)``, e.g. ``(4, 64, 64, 2)``.
    seed : int or Rng
        Initialisation seed (or stream). Each layer's W and b are drawn
        uniformly from ``±1/sqrt(fan_in)``, like ``torch.nn.Linear``.
    dueling : bool
        Dueling head (Wang et al. 2016): the last hidden layer feeds an
        advantage head A (hidden -> n_actions) and a value head V (hidden -> 1),
        and Q = V + A - mean_a(A). Needs at least one hidden layer. Default False.
    layer_norm : bool
        LayerNorm (Ba et al. 2016) after each hidden layer's Linear, before its
        ReLU, as in Gallici et al. 2024 (PQN): ``Linear -> LayerNorm -> ReLU``,
        each with its own gain (init 1) and bias (init 0), eps 1e-5 as
        ``torch.nn.LayerNorm``. Needs hidden layers at least 2 wide. Default False.
    head : DistributionalHead or None
        A distributional value head (C51 or QR-DQN, ``dqn/heads/head.py``): the
        output layer has ``n_actions * head.n_atoms`` units (and a dueling
        value head ``head.n_atoms``); :meth:`forward` gives their expected
        values, :meth:`distribution` the distributions. Default None: Q-values.
    noisy : bool
        Noisy linear layers (Fortunato et al. 2018, factorised Gaussian noise,
        ``dqn/learner/noisy.py``) on every linear layer: each W and b gets a sigma of its
        shape, after the means in :attr:`params`. Forward passes and greedy
        actions use the means; updates (:meth:`update`) perturb the online and
        target weights by new noise. Default False.
    sigma0 : float
        With ``noisy``, each sigma starts at ``sigma0 / sqrt(fan_in)`` (the means
        as without). Positive, finite. Default 0.5 (the paper's).

    Attributes
    ----------
    layer_sizes : tuple of int
    weights : list of ndarray of float32, shape (in, out)
        Live views into the parameter vector: writing into them changes the
        network. With ``dueling``, ``weights[-2]`` is the advantage head and
        ``weights[-1]`` (shape (hidden, 1), or (hidden, n_atoms)) the value head.
    biases : list of ndarray of float32, shape (out,)
    norm_gains, norm_biases : list of ndarray of float32, shape (hidden_l,)
        With ``layer_norm``, each hidden layer's LayerNorm gain and bias (live
        views, like ``weights``); empty lists otherwise.
    sigma_weights, sigma_biases : list of ndarray of float32
        With ``noisy``, the sigmas of ``weights`` and ``biases`` (same shapes,
        live views); empty lists otherwise.
    """

    def __init__(
        self, layer_sizes: Sequence[int], seed: int | Rng = 0, dueling: bool = False,
        layer_norm: bool = False, head: DistributionalHead | None = None, noisy: bool = False,
        sigma0: float = 0.5,
    ) -> None:  # fmt: skip
        sizes = check_layer_sizes(layer_sizes)
        if not isinstance(noisy, (bool, np.bool_)):
            raise ValueError(f"noisy must be True or False, got {noisy!r}")
        sigma0 = check_positive_float("sigma0", sigma0)
        if head is not None and not isinstance(head, DistributionalHead):
            raise ValueError(
                "head must be None or a DistributionalHead (e.g. DistributionalHead('c51', 51, "
                f"-10.0, 10.0)), got {head!r}"
            )
        if not isinstance(dueling, (bool, np.bool_)):
            raise ValueError(f"dueling must be True or False, got {dueling!r}")
        if dueling and len(sizes) < 3:
            raise ValueError(
                "a dueling network needs at least one hidden layer to feed its two heads "
                f"(e.g. (4, 64, 2)), got layer_sizes {sizes}"
            )
        if not isinstance(layer_norm, (bool, np.bool_)):
            raise ValueError(f"layer_norm must be True or False, got {layer_norm!r}")
        if layer_norm and (len(sizes) < 3 or min(sizes[1:-1]) < 2):
            raise ValueError(
                "layer_norm needs hidden layers of width >= 2 to normalise (over one unit "
                f"LayerNorm outputs its bias alone), got layer_sizes {sizes}"
            )
        atoms = 1 if head is None else head.n_atoms  # (memory checked before allocating)
        check_network_memory(sizes, 1, bool(dueling), bool(layer_norm), 1, atoms)
        self._adopt(NetworkStorage(sizes, bool(dueling), bool(layer_norm), head, bool(noisy)))
        rng = seed if isinstance(seed, Rng) else Rng(seed)
        init_linear(self.weights, self.biases, rng)  # (a dueling value head's too: last)
        for w, b in zip(self.sigma_weights, self.sigma_biases):  # mu as above: U(+-1/sqrt(p))
            w[...] = b[...] = sigma0 / math.sqrt(w.shape[0])
        init_layer_norm(self.norm_gains, self.norm_biases)

    def _adopt(self, store: NetworkStorage) -> None:
        """Hold ``store`` as this network's arrays, with nothing cached from others."""
        self._store = store
        # (target, NetState with it, compiled entry points of checked_update by the
        # discounts dtype, the noise stream's state), resolved at the first update.
        self._cached: tuple[Any, NetState, dict[np.dtype, Any], Any] | None = None
        # The settings of the last update, and the options they were checked from
        # (None: check the next options whatever they are).
        self._hp: UpdateSettings | None = None
        self._hp_options: UpdateOptions | None = None

    # -- storage (NetworkStorage's: dqn/learner/network_storage.py) ------------
    @property
    def weights(self) -> list[np.ndarray]:
        """Each linear layer's W, a live view (see the class docstring)."""
        return self._store.weights

    @property
    def biases(self) -> list[np.ndarray]:
        """Each linear layer's b, a live view."""
        return self._store.biases

    @property
    def norm_gains(self) -> list[np.ndarray]:
        """With ``layer_norm``, each hidden layer's LayerNorm gain (live views)."""
        return self._store.norm_gains

    @property
    def norm_biases(self) -> list[np.ndarray]:
        """With ``layer_norm``, each hidden layer's LayerNorm bias (live views)."""
        return self._store.norm_biases

    @property
    def sigma_weights(self) -> list[np.ndarray]:
        """With ``noisy``, the sigmas of :attr:`weights` (live views)."""
        return self._store.sigma_weights

    @property
    def sigma_biases(self) -> list[np.ndarray]:
        """With ``noisy``, the sigmas of :attr:`biases` (live views)."""
        return self._store.sigma_biases

    def param_views(self) -> list[tuple[str, np.ndarray]]:
        """(state_dict key, live float32 view) of every parameter array, in the flat
        vector's order: ``w<i>``, ``b<i>`` (each linear layer's W and b; with noisy
        layers, their means), ``ln_g<i>``, ``ln_b<i>`` (LayerNorm), ``sw<i>``, ``sb<i>``
        (noisy layers' sigmas)."""
        return self._store.param_views()

    def state_dict(self) -> dict[str, np.ndarray]:
        """Copies of everything that defines the network and its optimiser (keys and
        their order: ``dqn/learner/network_storage.py``'s docstring; float32
        parameters, ``adam_m``, ``adam_v`` float32 (num_params,), ``adam_t`` int64 (1,))."""
        return self._store.state_dict()

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore a :meth:`state_dict`; raises ValueError (nothing changed) on a mismatch.

        A state without a ``dueling`` entry (written before the dueling head
        existed) describes a plain network; one without ``layer_norm``, a
        network without LayerNorm; one without ``noisy``, one without noisy layers.
        """
        self._store.load_state_dict(state)

    # ``weights`` and ``biases`` are views of ``params``; pickled or deep-copied
    # member by member they would come back as separate arrays that the kernels
    # never train. So a copy carries the state_dict and rebuilds the views.
    def __getstate__(self) -> dict[str, np.ndarray]:
        """What ``copy.deepcopy`` and ``pickle`` keep: :meth:`state_dict`."""
        return self._store.state_dict()

    def __setstate__(self, state: dict[str, np.ndarray]) -> None:
        self._adopt(NetworkStorage.from_state(state))

    # -- shape ---------------------------------------------------------------
    @property
    def layer_sizes(self) -> tuple[int, ...]:
        """``(obs_size, hidden..., n_actions)``."""
        return self._store.layer_sizes

    @property
    def dueling(self) -> bool:
        """Whether Q = V + A - mean(A) from two heads (see the class docstring)."""
        return self._store.dueling

    @property
    def layer_norm(self) -> bool:
        """Whether each hidden layer is Linear -> LayerNorm -> ReLU (see the class docstring)."""
        return self._store.layer_norm

    @property
    def head(self) -> DistributionalHead | None:
        """The distributional value head (C51 or QR-DQN), or None for a plain Q head."""
        return self._store.head

    @property
    def noisy(self) -> bool:
        """Whether every linear layer is noisy (see the class docstring)."""
        return self._store.noisy

    @property
    def mean_params(self) -> np.ndarray:
        """The parameters inference uses, a live view: :attr:`params` without the
        sigmas of noisy layers (the means: a plain network's layout)."""
        return self._store.mean

    @property
    def obs_size(self) -> int:
        return self._store.layer_sizes[0]

    @property
    def n_actions(self) -> int:
        return self._store.layer_sizes[-1]

    @property
    def num_params(self) -> int:
        """Total number of weights and biases."""
        return int(self._store.params.size)

    @property
    def adam_step(self) -> int:
        """Number of Adam steps taken so far (the bias-correction ``t``)."""
        return int(self._store.adam_t[0])

    @property
    def params(self) -> np.ndarray:
        """All weights and biases as one live float32 vector (layer by layer, W then b;
        LayerNorm's gains and biases, then noisy layers' sigmas, come last)."""
        return self._store.params

    @property
    def sizes_array(self) -> np.ndarray:
        """:attr:`layer_sizes` as the int64 array kernels take (with a distributional
        head's description: ``head.kernel_sizes``)."""
        return self._store.sizes

    def kernel_state(self, target: QNetwork, noise_rng: Any = None) -> NetState:
        """This network's arrays and ``target``'s parameters as one :class:`NetState`
        (live views: kernels that take it update this network in place); a noisy
        network's is a ``NoisyNetState`` whose updates draw their noise from
        ``noise_rng`` (an :class:`~ember_np.rng.Rng` or its ``state``; required then)."""
        self._check_same_shape(target)
        store = self._store
        net = net_state(
            store.params, target._store.params, store.sizes, store.grads, store.adam_m,
            store.adam_v, store.adam_t, store.head is not None,
        )  # fmt: skip
        if store.noise_layers is None:
            return net
        if noise_rng is None:
            raise ValueError("a noisy network draws new noise for every update: pass the "
                             "stream to draw it from (noise_rng=Rng(seed))")  # fmt: skip
        state = noise_rng.state if isinstance(noise_rng, Rng) else noise_rng
        return noisy_net_state(net, store.mean.size, store.noise_layers, state)  # type: ignore[return-value]

    # -- inference -----------------------------------------------------------
    def _obs(self, obs: Any, name: str = "obs") -> np.ndarray:
        x = obs
        if not (type(x) is np.ndarray and x.dtype is _F32 and x.flags.carray):
            x = as_f32(x, name)  # (its no-copy test inlined above: forward's hot path)
        n_in = self._store.layer_sizes[0]
        if x.ndim == 1 and x.shape[0] == n_in:
            return x
        if x.ndim == 2 and x.shape[1] == n_in:
            return x
        raise ValueError(f"expected {name} of shape ({n_in},) or (batch, {n_in}), got {x.shape}")

    def forward(self, obs: Any) -> np.ndarray:
        """Q-values.

        Parameters
        ----------
        obs : array_like of float32, shape (obs_size,) or (batch, obs_size)

        Returns
        -------
        ndarray of float32, shape (n_actions,) or (batch, n_actions)

        Raises
        ------
        ValueError
            On a wrong shape, or an observation holding NaN or inf (the
            message names the row of a batch); nothing is computed then.
        """
        x = self._obs(obs)
        if x.ndim == 1:
            q = np.empty(self.n_actions, dtype=np.float32)
            if not q_values_checked(self._store.mean, self._store.sizes, x, q):
                raise nonfinite_observation(x)
            return q
        q = np.empty((x.shape[0], self.n_actions), dtype=np.float32)
        if x.shape[0] > 0:
            row = q_values_batch_checked(self._store.mean, self._store.sizes, x, q)
            if row >= 0:
                raise nonfinite_row(x, row, "obs")
        return q

    __call__ = forward

    def distribution(self, obs: Any) -> np.ndarray:
        """A distributional head's distributions: C51's probabilities over its
        support (``head.support()``), or QR-DQN's quantiles, per action.

        Parameters
        ----------
        obs : array_like of float32, shape (obs_size,) or (batch, obs_size)

        Returns
        -------
        ndarray of float32, shape (n_actions, n_atoms) or (batch, n_actions, n_atoms)

        Raises
        ------
        ValueError
            For a plain Q head, and as :meth:`forward` does.
        """
        head = self._store.head
        if head is None:
            raise ValueError("distribution() needs a distributional head; this network has "
                             "a plain Q head (use forward() for its Q-values)")  # fmt: skip
        x = self._obs(obs)
        rows = x.reshape(-1, self.obs_size)
        out = np.empty((rows.shape[0], self.n_actions, head.n_atoms), dtype=np.float32)
        if rows.shape[0] > 0:
            row = head_outputs_checked(self._store.mean, self._store.sizes, rows, out)
            if row >= 0:
                raise nonfinite_row(rows, row, "obs") if x.ndim == 2 else nonfinite_observation(x)
        return out if x.ndim == 2 else out[0]

    def greedy_action(self, obs: Any) -> int:
        """``argmax_a Q(obs, a)`` for one observation (first index on ties).

        Raises ValueError for NaN or inf in ``obs``, as :meth:`forward` does, and
        when the Q-values come out NaN or inf (float32 overflow).
        """
        x = self._obs(obs)
        if x.ndim != 1:
            raise ValueError(f"expected one observation of shape ({self.obs_size},), got {x.shape}")
        action = int(greedy_action(self._store.mean, self._store.sizes, math.inf, x))
        if action < 0:  # NaN or inf in x, or Q-values not finite (never 0 from NaN)
            raise refused_observation(x, action, math.inf)
        return action

    def greedy_actions(self, obs: Any) -> np.ndarray:
        """Greedy action of every row of ``obs`` (batch, obs_size) -> int64 (batch,).

        Raises ValueError naming the first row holding NaN or inf, as :meth:`forward` does.
        """
        x = self._obs(obs)
        if x.ndim != 2:
            raise ValueError(
                f"expected a batch of observations of shape (batch, {self.obs_size}), got {x.shape}"
            )
        out = np.empty(x.shape[0], dtype=np.int64)
        if x.shape[0] > 0:
            row = greedy_actions_checked(self._store.mean, self._store.sizes, x, out)
            if row >= 0:
                raise nonfinite_row(x, row, "obs")
        return out

    # -- target network ------------------------------------------------------
    def copy(self) -> QNetwork:
        """An independent deep copy (parameters and Adam state)."""
        other = QNetwork.__new__(QNetwork)
        other._adopt(self._store.copy())
        return other

    def _check_same_shape(self, other: QNetwork) -> None:
        if not isinstance(other, QNetwork):
            raise ValueError(f"expected a QNetwork, got {type(other).__name__}")
        if other._store.layer_sizes != self._store.layer_sizes:
            raise ValueError(
                f"network shapes differ: this one has layer_sizes {self._store.layer_sizes}, "
                f"the other {other._store.layer_sizes}"
            )
        them = other._store
        flags = (them.dueling, them.layer_norm, them.head, them.noisy)
        for name, mine, theirs in self._store.architecture(*flags):
            if mine != theirs:
                raise ValueError(f"network architectures differ: this one is {name(mine)}, "
                                 f"the other {name(theirs)}")  # fmt: skip

    def copy_from(self, other: QNetwork) -> None:
        """Hard sync: copy ``other``'s parameters into this network."""
        self._check_same_shape(other)
        self._store.params[:] = other._store.params

    def soft_update_from(self, other: QNetwork, tau: float) -> None:
        """Polyak averaging: ``theta <- tau * theta_other + (1 - tau) * theta``."""
        self._check_same_shape(other)
        t = float(tau)
        if not 0.0 < t <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau!r}")
        polyak(self._store.params, other._store.params, t)

    # -- training ------------------------------------------------------------
    def update(
        self, batch: Batch, target: QNetwork, options: UpdateOptions, *,
        td_errors_out: np.ndarray | None = None, next_action_masks: Any = None,
        noise_rng: Rng | None = None,
    ) -> float:  # fmt: skip
        """One DQN gradient step on a batch; returns the loss before the step.

        Parameters
        ----------
        batch : Batch (or a tuple of its first 5 to 9 fields)
            The transitions, as a replay buffer samples them, or
            ``Batch(obs, actions, rewards, next_obs, masks, ...)`` from your own
            arrays (coerced as below):

            - ``obs``, ``next_obs``: array_like of float32, shape (batch, obs_size)
            - ``actions``: array_like of int, shape (batch,), each in [0, n_actions)
            - ``rewards``: array_like of float32, shape (batch,)
            - ``masks``: array_like of float32, shape (batch,); bootstrap masks,
              0 where the episode terminated, else 1.
            - ``discounts``: array_like of float32 or float64, shape (batch,),
              or length 0 (the default): ``gamma * masks``. Given, the target
              is ``y = r + discounts * Q_target(s', a*)`` and ``options.gamma``
              and ``masks`` are not used for it (a replay buffer hands over
              ``gamma * mask``, or ``gamma**m * mask`` for n-step, as float64).
              The target is computed in float64.
            - ``weights``: array_like of float32, shape (batch,), non-negative, or
              length 0 (the default: all 1): the loss is the batch mean of
              ``weight * Huber`` (importance weights of prioritized replay).
            - ``indices``: not used.
            - ``next_action_masks``: ndarray of uint8, shape (batch,
              ceil(n_actions / 8)), packed bits as a masked buffer samples them,
              or no rows (the default): every action is legal.
        target : QNetwork
            The target network (same layer sizes); read only.
        options : UpdateOptions
            ``gamma`` (float in [0, 1]), ``learning_rate`` (float > 0),
            ``huber_delta`` (float > 0), ``double_dqn`` (bool),
            ``max_grad_norm`` (float > 0 or None).
        td_errors_out : ndarray of float32, shape (batch,), optional
            Filled with ``|y - Q(s, a)|`` before the step (new priorities).
        next_action_masks : array_like of bool, shape (batch, n_actions), optional
            The next states' legal actions unpacked (1 / True = legal; each row
            at least one), for a batch without packed ones: the target's max
            (and double DQN's argmax) runs over them only. Default: all legal.
        noise_rng : Rng, optional
            A noisy network's noise stream (required then): the online and the
            target weights are perturbed by new samples drawn from it.

        Returns
        -------
        float
            (Weighted) mean Huber loss of the batch before the step.

        Raises
        ------
        ValueError
            On shapes that disagree with the network or each other, actions out
            of range, non-finite inputs, or out-of-range hyperparameters.
        """
        if type(batch) is not Batch:
            batch = as_batch(batch)
        if type(options) is not UpdateOptions:
            options = as_update_options(options)
        discounts: np.ndarray | None  # None below when the batch leaves them empty
        weights: np.ndarray | None
        packed: np.ndarray | None
        obs, actions, rewards, next_obs, masks, discounts, weights, _, packed = batch
        gamma, learning_rate, huber_delta, double_dqn, max_grad_norm = options
        discounts = discounts if holds_data(discounts) else None
        weights = weights if holds_data(weights) else None
        packed = packed if holds_data(packed) else None
        if packed is not None and next_action_masks is not None:
            raise ValueError("next_action_masks given twice: in the batch and as a keyword")
        self._check_same_shape(target)
        x = self._obs(obs, "obs")
        nx = self._obs(next_obs, "next_obs")
        if x.ndim != 2 or x.shape[0] == 0:
            raise ValueError(
                f"expected obs of shape (batch, {self.obs_size}) with batch >= 1, got {x.shape}"
            )
        rows = x.shape[0]
        if nx.shape != x.shape:
            raise ValueError(f"expected next_obs of shape {x.shape} (like obs), got {nx.shape}")
        a = as_i64(actions, "actions")
        r = as_f32(rewards, "rewards")
        m = as_f32(masks, "masks")
        for name, arr in (("actions", a), ("rewards", r), ("masks", m)):
            if arr.shape != (rows,):
                raise ValueError(f"expected {name} of shape ({rows},), got {arr.shape}")
        if weights is None and td_errors_out is None:
            per = NO_PER_SAMPLE
        else:
            per = PerSample(
                optional_per_sample("weights", weights, rows),
                td_errors_out_array(td_errors_out, rows),
            )
        d = batch_discounts(discounts, gamma, m)
        if options is not self._hp_options:  # (checked once per options object: 3 us a call)
            lr = check_positive_float("learning_rate", learning_rate)
            delta = check_positive_float("huber_delta", huber_delta)
            clip = None if max_grad_norm is None else check_positive_float(
                "max_grad_norm", max_grad_norm)  # fmt: skip
            self._hp = update_settings(lr, delta, bool(double_dqn), clip)
            # Kept only when no field can change after this check (an array could).
            plain = all(type(v) in (float, int, bool, type(None)) for v in options)
            self._hp_options = options if plain else None
        if packed is not None:
            bits = np.ascontiguousarray(packed, dtype=np.uint8)
            if bits.shape != (rows, (self.n_actions + 7) // 8):
                raise ValueError(
                    f"expected the batch's next_action_masks of shape "
                    f"({rows}, {(self.n_actions + 7) // 8}) (packed bits), got {bits.shape}"
                )
            legal = np.unpackbits(bits, axis=1, count=self.n_actions).astype(bool)
            data = Batch(x, a, r, nx, m, d, next_action_masks=np.packbits(check_action_masks(
                legal, rows, self.n_actions, "next_action_masks"), axis=1))  # fmt: skip
        elif next_action_masks is None:
            data = Batch(x, a, r, nx, m, d)
        else:
            legal = check_action_masks(next_action_masks, rows, self.n_actions,
                                       "next_action_masks")  # fmt: skip
            data = Batch(x, a, r, nx, m, d, next_action_masks=np.packbits(legal, axis=1))
        hp = self._hp
        cached = self._cached
        rng = None if noise_rng is None else noise_rng.state
        if cached is None or cached[0] is not target or cached[3] is not rng:  # this target's
            cached = self._cached = (target, self.kernel_state(target, rng), {}, rng)
        net = cached[1]
        update = cached[2].get(d.dtype)  # one compiled update per discounts precision
        if update is None:  # argument types are fixed by the checks above: skip dispatch
            update = cached[2][d.dtype] = entry_point(checked_update, net, data, per, hp)
        bad, loss = update(net, data, per, hp)
        if bad == 1:
            raise ValueError(
                f"actions must be in [0, {self.n_actions}), got values from {a.min()} to {a.max()}"
            )
        if bad == 4:
            raise ValueError(
                f"weights must be >= 0, got a minimum of {per.weights.min()}; "
                "the network was not changed"
            )
        if bad:
            raise ValueError(
                "the batch contains NaN or infinite values; the network was not changed"
            )
        return float(loss)

    def __repr__(self) -> str:
        duel = ", dueling=True" if self._store.dueling else ""
        norm = ", layer_norm=True" if self._store.layer_norm else ""
        head = "" if self._store.head is None else f", head={self._store.head!r}"
        head += ", noisy=True" if self._store.noisy else ""
        return (
            f"QNetwork(layer_sizes={self._store.layer_sizes}{duel}{norm}{head}, "
            f"num_params={self.num_params})"
        )

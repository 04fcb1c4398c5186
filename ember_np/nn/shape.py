"""The kernels' view of a network's shape: decoding ``sizes`` (numba kernels).

``sizes`` is the layer widths, with a grouped output layer followed by the
suffix ``sizes.py`` describes. Every kernel reads the network's shape through
:func:`n_layers`, :func:`n_actions` and :func:`n_atoms`, never through
``sizes.shape`` alone.
"""

from __future__ import annotations

import numpy as np

from ember_np._jit import kernel
from ember_np.nn.sizes import HEAD_SUFFIX


@kernel
def head_kind(sizes: np.ndarray) -> int:
    """0 for a plain output layer, else the code its suffix carries (DQN's
    ``dqn/heads/head.py``: ``C51``, ``QR``).

    sizes : int64 (n,): a plain network's layer widths (all positive), or
    those then the suffix, whose first value is -code (see the module docstring).
    """
    n = sizes.shape[0]
    if n > HEAD_SUFFIX + 1 and sizes[n - HEAD_SUFFIX] < 0:
        return -sizes[n - HEAD_SUFFIX]
    return 0


@kernel
def n_layers(sizes: np.ndarray) -> int:
    """Number of Linear layers of the network ``sizes`` (a dueling value stream's not counted)."""
    n = sizes.shape[0] - 1
    return n - HEAD_SUFFIX if head_kind(sizes) != 0 else n


@kernel
def n_atoms(sizes: np.ndarray) -> int:
    """Outputs per group (action): 1 for a plain output layer, else the suffix's
    units per group (DQN: atoms or quantiles)."""
    if head_kind(sizes) == 0:
        return 1
    return sizes[sizes.shape[0] - HEAD_SUFFIX + 1]


@kernel
def head_dueling(sizes: np.ndarray) -> bool:
    """Whether a grouped output layer is two-stream (dueling); False for a plain
    one, whose parameter count says it (``mlp.layout``)."""
    if head_kind(sizes) == 0:
        return False
    return sizes[sizes.shape[0] - HEAD_SUFFIX + 2] != 0


@kernel
def n_actions(sizes: np.ndarray) -> int:
    """Number of groups (DQN: actions): the output width over :func:`n_atoms`."""
    return sizes[n_layers(sizes)] // n_atoms(sizes)

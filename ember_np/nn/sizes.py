"""The int64 ``sizes`` array every network kernel takes (NumPy only, no numba).

A network is ``(params, sizes)``: a flat float vector (``mlp.py``'s layout) and
int64 ``sizes``. For a plain MLP, ``sizes`` is its layer widths
``(n_in, hidden..., n_out)``. An algorithm whose output layer groups its units
(``n_out = n_groups * per_group``, group-major, e.g. DQN's C51 and QR-DQN heads:
``n_actions`` groups of ``n_atoms``) appends :data:`HEAD_SUFFIX` int64 words to
the widths:

====  =====================================================================
word  meaning
====  =====================================================================
0     ``-code``: negative (unlike any width), so it marks the suffix; the
      code (>= 1) is the algorithm's (``dqn/heads/head.py``: C51, QR)
1     units per group (``n_atoms``)
2     1 if the network has a two-stream (dueling) output, else 0
3, 4  the algorithm's own (C51: its support bounds as float64 bits)
====  =====================================================================

The kernels read the shape through ``shape.py`` (:func:`~ember_np.nn.shape.n_layers`,
:func:`~ember_np.nn.shape.n_actions`, ...), never through ``sizes.shape``
alone. This module holds the constant so that code without numba (the
NumPy deployment path) can build a ``sizes`` array.
"""

from __future__ import annotations

__all__ = ["HEAD_SUFFIX"]

#: Length of the suffix after the widths when the output layer is grouped.
HEAD_SUFFIX = 5

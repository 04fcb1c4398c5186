"""``from ember_np.policy import DqnPolicy``: the inference-only policy, with NumPy alone.

The import path for deployments: it loads ``ember_np.dqn.policy`` (NumPy
only) and never numba, llvmlite, gymnasium or tqdm. The class is the one of
``ember_np.DqnPolicy`` and ``ember_np.dqn.policy.DqnPolicy``.
"""

from ember_np.checkpoint import CheckpointError
from ember_np.dqn.policy import Backend, DqnPolicy

__all__ = ["Backend", "CheckpointError", "DqnPolicy"]

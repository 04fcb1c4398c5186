"""ember_np: DQN on a plain CPU, compiled with numba, no deep-learning framework."""

from ember_np.dqn.network import QNetwork
from ember_np.dqn.replay import Batch, CircularBuffer, transition_dtype
from ember_np.rng import Rng
from ember_np.types import EpisodeStatus

__all__ = ["Batch", "CircularBuffer", "EpisodeStatus", "QNetwork", "Rng", "transition_dtype"]
__version__ = "0.1.0"

"""ember_np: DQN on a plain CPU, compiled with numba, no deep-learning framework.

A Python port of the Rust crate ember-rl: ``DqnAgent``, ``CircularBuffer``,
``DqnTrainer`` (step iterator, ``train``, ``eval``), ``TrainingRun``
directories with checkpoint rotation, stats and the inference-only
``DqnPolicy``.
"""

from ember_np.checkpoint import CheckpointError
from ember_np.dqn.agent import DqnAgent
from ember_np.dqn.config import DqnConfig
from ember_np.dqn.network import QNetwork
from ember_np.dqn.policy import DqnPolicy
from ember_np.dqn.replay import Batch, CircularBuffer, transition_dtype
from ember_np.encoding import (
    DiscreteActionMapper,
    IndexActionMapper,
    ObservationEncoder,
    VecEncoder,
)
from ember_np.rng import Rng
from ember_np.stats import (
    Aggregator,
    EpisodeRecord,
    EvalReport,
    Last,
    Max,
    Mean,
    Min,
    RollingMean,
    StatsTracker,
    Std,
)
from ember_np.training.run import TrainingRun
from ember_np.training.trainer import DqnTrainer, StepMetrics
from ember_np.types import EpisodeStatus, Experience, Policy, ReplayBuffer

# Registers the native environments (ember_np/CartPole-v1, ...) with gymnasium.
from ember_np import envs  # noqa: E402  isort: skip

__all__ = [
    "Aggregator",
    "envs",
    "Batch",
    "CheckpointError",
    "CircularBuffer",
    "DiscreteActionMapper",
    "DqnAgent",
    "DqnConfig",
    "DqnPolicy",
    "DqnTrainer",
    "EpisodeRecord",
    "EpisodeStatus",
    "EvalReport",
    "Experience",
    "IndexActionMapper",
    "Last",
    "Max",
    "Mean",
    "Min",
    "ObservationEncoder",
    "Policy",
    "QNetwork",
    "ReplayBuffer",
    "RollingMean",
    "Rng",
    "StatsTracker",
    "Std",
    "StepMetrics",
    "TrainingRun",
    "VecEncoder",
    "transition_dtype",
]
__version__ = "0.1.0"

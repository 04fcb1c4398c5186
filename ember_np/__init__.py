"""ember_np: DQN and PPO on a plain CPU, compiled with numba, no deep-learning framework.

A Python port of the Rust crate ember-rl: ``DqnAgent``, ``CircularBuffer``,
``DqnTrainer`` (step iterator, ``train``, ``eval``; it drives a ``PPOAgent``
the same way), ``TrainingRun`` directories with checkpoint rotation, stats and
the inference-only ``DqnPolicy`` and ``PPOPolicy``.

The public names are imported on first use (PEP 562 module ``__getattr__``),
so ``import ember_np`` costs NumPy alone and a deployed ``DqnPolicy`` never
loads numba or gymnasium; ``from ember_np import X`` works as usual. The
native environments (``ember_np/CartPole-v1``, ...) are registered with
gymnasium when gymnasium is imported (see ``ember_np/_registration.py``).
(Hand-written rather than the ``lazy_loader`` package: a dozen lines are not
worth a dependency.)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ember_np._registration import register_when_gymnasium_loads

if TYPE_CHECKING:  # what type checkers and IDEs see; at run time __getattr__ imports
    from ember_np import envs
    from ember_np.checkpoint import CheckpointError
    from ember_np.dqn.agent import DqnAgent
    from ember_np.dqn.config import DqnConfig
    from ember_np.dqn.learner.network import QNetwork, UpdateOptions
    from ember_np.dqn.policy import DqnPolicy
    from ember_np.dqn.replay import Batch, CircularBuffer, PrioritizedBuffer, transition_dtype
    from ember_np.encoding import (
        DiscreteActionMapper,
        IndexActionMapper,
        ObservationEncoder,
        OneHotEncoder,
        VecEncoder,
    )
    from ember_np.nn._blas import kernel_threads, set_kernel_threads
    from ember_np.ppo.agent import PPOAgent
    from ember_np.ppo.config import PPOConfig
    from ember_np.ppo.policy import PPOPolicy
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
    from ember_np.training.loop import LoopCallback, train_and_evaluate
    from ember_np.training.multiseed import MultiSeedResult, SeedResult, train_seeds
    from ember_np.training.run import TrainingRun
    from ember_np.training.spec import RunSpec, resolve, resume
    from ember_np.training.tensorboard import TensorBoardCallback
    from ember_np.training.trainer import DqnTrainer, StepMetrics
    from ember_np.types import EpisodeStatus, Experience, Policy, ReplayBuffer

#: Where each public name lives (imported on first access).
_HOMES = {
    "kernel_threads": "ember_np.nn._blas",
    "set_kernel_threads": "ember_np.nn._blas",
    "CheckpointError": "ember_np.checkpoint",
    "DqnAgent": "ember_np.dqn.agent",
    "DqnConfig": "ember_np.dqn.config",
    "QNetwork": "ember_np.dqn.learner.network",
    "UpdateOptions": "ember_np.dqn.learner.network",
    "DqnPolicy": "ember_np.dqn.policy",
    "Batch": "ember_np.dqn.replay",
    "CircularBuffer": "ember_np.dqn.replay",
    "transition_dtype": "ember_np.dqn.replay",
    "PrioritizedBuffer": "ember_np.dqn.replay",
    "DiscreteActionMapper": "ember_np.encoding",
    "IndexActionMapper": "ember_np.encoding",
    "ObservationEncoder": "ember_np.encoding",
    "VecEncoder": "ember_np.encoding",
    "OneHotEncoder": "ember_np.encoding",
    "PPOAgent": "ember_np.ppo.agent",
    "PPOConfig": "ember_np.ppo.config",
    "PPOPolicy": "ember_np.ppo.policy",
    "Rng": "ember_np.rng",
    "Aggregator": "ember_np.stats",
    "EpisodeRecord": "ember_np.stats",
    "EvalReport": "ember_np.stats",
    "Last": "ember_np.stats",
    "Max": "ember_np.stats",
    "Mean": "ember_np.stats",
    "Min": "ember_np.stats",
    "RollingMean": "ember_np.stats",
    "StatsTracker": "ember_np.stats",
    "Std": "ember_np.stats",
    "LoopCallback": "ember_np.training.loop",
    "train_and_evaluate": "ember_np.training.loop",
    "MultiSeedResult": "ember_np.training.multiseed",
    "SeedResult": "ember_np.training.multiseed",
    "train_seeds": "ember_np.training.multiseed",
    "TrainingRun": "ember_np.training.run",
    "RunSpec": "ember_np.training.spec",
    "resolve": "ember_np.training.spec",
    "resume": "ember_np.training.spec",
    "TensorBoardCallback": "ember_np.training.tensorboard",
    "DqnTrainer": "ember_np.training.trainer",
    "StepMetrics": "ember_np.training.trainer",
    "EpisodeStatus": "ember_np.types",
    "Experience": "ember_np.types",
    "Policy": "ember_np.types",
    "ReplayBuffer": "ember_np.types",
}
_SUBMODULES = {"envs"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later accesses skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


# ``import ember_np; gymnasium.make("ember_np/CartPole-v1")`` keeps working.
register_when_gymnasium_loads()

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
    "LoopCallback",
    "MultiSeedResult",
    "Max",
    "Mean",
    "Min",
    "ObservationEncoder",
    "PPOAgent",
    "PPOConfig",
    "PPOPolicy",
    "Policy",
    "PrioritizedBuffer",
    "QNetwork",
    "ReplayBuffer",
    "RollingMean",
    "Rng",
    "RunSpec",
    "SeedResult",
    "StatsTracker",
    "Std",
    "StepMetrics",
    "TensorBoardCallback",
    "TrainingRun",
    "UpdateOptions",
    "VecEncoder",
    "OneHotEncoder",
    "kernel_threads",
    "resolve",
    "resume",
    "set_kernel_threads",
    "train_and_evaluate",
    "train_seeds",
    "transition_dtype",
]
__version__ = "0.1.0"

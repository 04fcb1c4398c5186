"""PpoConfig: every PPO hyperparameter, validated, with Stable-Baselines3's defaults.

The seed is not a field, as with DQN: the agent takes it (``DqnAgent(..., seed=)``)
and derives its :class:`~ember_np.rng.Rng` streams from it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ember_np._config import (
    config_from_dict,
    config_to_dict,
    is_integral,
    is_real,
    normalize_fields,
)
from ember_np._validate import F32_RULE, INT64_MAX, positive_in_f32, too_big_rule

__all__ = ["ACTIVATIONS", "SCHEDULES", "PPOConfig"]

#: The hidden layers' activation functions.
ACTIVATIONS = ("tanh", "relu")
#: How the learning rate and the clip range change over a run (SB3's constant and ``lin_``).
SCHEDULES = ("constant", "linear")


@dataclass(frozen=True)
class PPOConfig:
    """Hyperparameters of a PPO agent (Stable-Baselines3's ``PPO`` defaults).

    Every field is validated on construction; an invalid value raises a
    ``ValueError`` naming the field, the value and the valid range.

    Minibatches: each epoch shuffles the ``n_steps * n_envs`` transitions of a
    rollout and cuts them into minibatches of ``batch_size``; when
    ``batch_size`` does not divide the rollout, the last minibatch is smaller
    (SB3 does the same and warns), and a ``batch_size`` above the rollout makes
    one minibatch of it all.
    """

    hidden_sizes: tuple[int, ...] = (64, 64)
    """Widths of the hidden layers, each >= 1, of the actor and of the critic (or of
    the shared trunk); () for linear heads. Default (64, 64), SB3's MlpPolicy."""

    activation: str = "tanh"
    """Activation of the hidden layers: ``"tanh"`` or ``"relu"``. Default tanh (SB3's)."""

    shared_trunk: bool = False
    """False: separate actor and critic MLPs (SB3's MlpPolicy). True: one trunk
    feeding a policy head and a value head (ember-rl's). Default False."""

    learning_rate: float = 3e-4
    """Adam step size at the start of the run, > 0. Typical 1e-4 to 1e-3. Default 3e-4."""

    lr_schedule: str = "constant"
    """``"constant"``, or ``"linear"``: learning_rate times the fraction of the run
    left (SB3's ``lin_``). Default constant."""

    schedule_steps: int | None = None
    """The env steps (all envs' transitions) a linear schedule spans, >= 1: SB3's
    ``total_timesteps``. A preset sets it to the run's budget (``--steps``); None
    suits constant schedules only. Past it a linear schedule stays at 0. Default None."""

    n_steps: int = 2048
    """Env steps per env in each rollout, >= 1. Typical 32-2048. Default 2048."""

    batch_size: int = 64
    """Transitions per minibatch, >= 2 when advantages are normalised (one
    advantage has no spread). Typical 32-256. Default 64."""

    n_epochs: int = 10
    """Passes over each rollout, >= 1. Typical 3-20. Default 10."""

    gamma: float = 0.99
    """Discount factor, in [0, 1]. Default 0.99."""

    gae_lambda: float = 0.95
    """GAE(lambda)'s lambda, in [0, 1]. Default 0.95."""

    clip_range: float = 0.2
    """PPO's clip on the probability ratio, > 0, at the start of the run. Default 0.2."""

    clip_schedule: str = "constant"
    """``"constant"`` or ``"linear"`` (clip_range times the fraction of the run left,
    SB3's ``lin_``). Default constant."""

    clip_range_vf: float | None = None
    """Clip the new value prediction to within this (> 0) of the rollout's (SB3's
    ``clip_range_vf``, constant), or None for no value clipping. Default None."""

    normalize_advantage: bool = True
    """Normalise the advantages of each minibatch to mean 0, std 1. Default True."""

    ent_coef: float = 0.0
    """Weight of the entropy bonus, >= 0. Typical 0-0.01. Default 0."""

    vf_coef: float = 0.5
    """Weight of the value loss, >= 0. Default 0.5."""

    max_grad_norm: float | None = 0.5
    """Clip the global gradient norm to this (> 0), or None for no clipping. Default 0.5."""

    target_kl: float | None = None
    """Stop a rollout's updates once a minibatch's approximate KL divergence exceeds
    1.5 * target_kl (> 0), SB3's rule; None never stops early. Default None."""

    adam_eps: float = 1e-5
    """Adam's epsilon, > 0. Default 1e-5 (SB3's PPO; torch's own default is 1e-8)."""

    normalize_obs: bool = False
    """Running normalisation of the observations (SB3's VecNormalize). Default False."""

    normalize_reward: bool = False
    """Running normalisation of the rewards by the return's std (SB3's VecNormalize).
    Default False."""

    action_masks: bool = False
    """Whether the env restricts actions through ``info["action_mask"]`` (gymnasium's
    convention, e.g. Taxi-v3): actions are sampled among the legal ones, each
    transition keeps its state's mask, and the update's log-probabilities and
    entropy are over the legal actions (MaskablePPO's). ``ember-np train`` turns it
    on for an env that gives masks. Default False."""

    def __post_init__(self) -> None:
        normalize_fields(self)
        self._validate()

    def _validate(self) -> None:
        def fail(name: str, rule: str) -> None:
            raise ValueError(f"{name} must be {rule}, got {getattr(self, name)!r}")

        def positive(name: str, rule: str) -> None:
            v = getattr(self, name)
            if not is_real(v) or not (v > 0 and math.isfinite(v)):
                fail(name, rule)
            if not positive_in_f32(v):
                fail(name, F32_RULE)

        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if is_integral(v) and v > INT64_MAX:
                fail(f.name, f"at most {too_big_rule(INT64_MAX)}")
        if self.activation not in ACTIVATIONS:
            fail("activation", "'tanh' or 'relu'")
        for name in ("lr_schedule", "clip_schedule"):
            if getattr(self, name) not in SCHEDULES:
                fail(name, "'constant' or 'linear' (times the fraction of the run left)")
        for name in ("shared_trunk", "normalize_advantage", "normalize_obs", "normalize_reward",
                     "action_masks"):  # fmt: skip
            if not isinstance(getattr(self, name), bool):
                fail(name, "True or False")
        for name in ("n_steps", "batch_size", "n_epochs"):
            v = getattr(self, name)
            if not is_integral(v) or v < 1:
                fail(name, "a positive integer")
        if self.normalize_advantage and self.batch_size < 2:
            raise ValueError(
                "batch_size must be >= 2 when normalize_advantage is True (the advantages "
                "of one transition have no standard deviation), got 1; raise batch_size "
                "or set normalize_advantage=False"
            )
        if self.schedule_steps is not None and (
            not is_integral(self.schedule_steps) or self.schedule_steps < 1
        ):
            fail("schedule_steps", "a positive integer (the run's env steps) or None")
        if self.schedule_steps is None and "linear" in (self.lr_schedule, self.clip_schedule):
            raise ValueError(
                "a linear lr_schedule or clip_schedule spans the run: set schedule_steps "
                "to the run's env steps (a preset does), or use constant schedules"
            )
        for name in ("gamma", "gae_lambda"):
            v = getattr(self, name)
            if not is_real(v) or not 0.0 <= v <= 1.0:
                fail(name, "a number in [0, 1]")
        positive("learning_rate", "a positive finite number")
        positive("clip_range", "a positive finite number (typical 0.1-0.3)")
        positive("adam_eps", "a positive finite number (SB3's PPO: 1e-5)")
        for name in ("ent_coef", "vf_coef"):
            v = getattr(self, name)
            if not is_real(v) or not (v >= 0 and math.isfinite(v)):
                fail(name, "a finite number >= 0")
        if self.clip_range_vf is not None:
            positive("clip_range_vf", "a positive finite number or None (no value clipping)")
        if self.max_grad_norm is not None:
            positive("max_grad_norm", "a positive finite number or None (no clipping)")
        if self.target_kl is not None:
            positive("target_kl", "a positive finite number or None (never stop early)")

    # -- schedules ------------------------------------------------------------
    def learning_rate_at(self, progress_remaining: float) -> float:
        """Adam's learning rate when ``progress_remaining`` (1 at the start of the run,
        0 at its end; SB3's ``1 - num_timesteps / total_timesteps``) of the run is left."""
        return _scheduled(self.learning_rate, self.lr_schedule, progress_remaining)

    def clip_range_at(self, progress_remaining: float) -> float:
        """The ratio clip range when ``progress_remaining`` of the run is left
        (as :meth:`learning_rate_at`)."""
        return _scheduled(self.clip_range, self.clip_schedule, progress_remaining)

    def progress_remaining(self, steps: int) -> float:
        """The fraction of the run left after ``steps`` env steps (SB3's
        ``1 - num_timesteps / total_timesteps``, never below 0): 1.0 without
        ``schedule_steps``."""
        if self.schedule_steps is None:
            return 1.0
        return max(1.0 - steps / self.schedule_steps, 0.0)

    def rollout_size(self, num_envs: int) -> int:
        """Transitions per rollout of ``num_envs`` envs: ``n_steps * num_envs``."""
        return self.n_steps * int(num_envs)

    def minibatches_per_epoch(self, num_envs: int) -> int:
        """Minibatches in one epoch: ceil(rollout_size / batch_size) (the last may be smaller)."""
        return -(-self.rollout_size(num_envs) // self.batch_size)

    # -- serialisation --------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every field (hidden_sizes as a list)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PPOConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError naming them."""
        return config_from_dict(cls, data)

    def replace(self, **changes: Any) -> PPOConfig:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)


def _scheduled(start: float, schedule: str, progress_remaining: float) -> float:
    if not is_real(progress_remaining) or not 0.0 <= progress_remaining <= 1.0:
        raise ValueError(
            "progress_remaining must be a number in [0, 1] (the fraction of the run left), "
            f"got {progress_remaining!r}"
        )
    if schedule == "linear":
        return float(progress_remaining) * float(start)
    return float(start)

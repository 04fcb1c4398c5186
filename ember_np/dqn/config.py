"""DqnConfig: every DQN hyperparameter, validated, with ember-rl's defaults."""

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
from ember_np._jit import kernel
from ember_np._validate import F32_RULE, INT64_MAX, positive_in_f32, too_big_rule
from ember_np.dqn.heads.head import DistributionalHead

__all__ = ["SCHEDULE_FIELDS", "DqnConfig", "linear_epsilon"]

#: The fields that are lengths of a schedule in env steps: a preset gives each as a
#: fraction of the run (``ember_np.presets.Preset.schedule``), resolved against the run's
#: steps by ``Preset.config_for``.
SCHEDULE_FIELDS = ("epsilon_decay_steps", "learning_rate_decay_steps", "per_beta_steps")


@kernel
def linear_epsilon(step: int, start: float, end: float, decay_steps: int) -> float:
    """The epsilon schedule, the one definition of it (Python calls ``.py_func``);
    the learning-rate annealing uses it too.

    step : int >= 0, env steps taken; start, end : float in [0, 1];
    decay_steps : int >= 0.
    eps(t) = start + (end - start) * min(t / decay_steps, 1): linear decay, then flat.
    """
    if step >= decay_steps:
        return end
    return start + (end - start) * (step / decay_steps)


_linear_epsilon = linear_epsilon.py_func  # the same function, run by Python


@dataclass(frozen=True)
class DqnConfig:
    """Hyperparameters of a DQN agent (ember-rl's ``DqnConfig`` plus SB3's extras).

    Every field is validated on construction; an invalid value raises a
    ``ValueError`` naming the field, the value and the valid range.
    """

    gamma: float = 0.99
    """Discount factor, in [0, 1]. Typical 0.95-0.999. Default 0.99."""

    learning_rate: float = 1e-4
    """Adam step size, > 0. Typical 1e-4 to 3e-3. Default 1e-4."""

    batch_size: int = 32
    """Transitions per gradient step, >= 1. Typical 32-256. Default 32."""

    buffer_capacity: int = 100_000
    """Replay buffer size, >= min_replay_size. Typical 1e4-1e6. Default 100,000."""

    min_replay_size: int = 10_000
    """Transitions stored before learning starts, >= batch_size. Default 10,000."""

    target_update_freq: int = 1_000
    """Env steps between target-network syncs, >= 1. Typical 10-10,000. Default 1,000."""

    hidden_sizes: tuple[int, ...] = (128, 128)
    """Widths of the hidden layers, each >= 1 (may be empty). Default (128, 128)."""

    epsilon_start: float = 1.0
    """Exploration rate at step 0, in [0, 1]. Default 1.0."""

    epsilon_end: float = 0.05
    """Exploration rate after the decay, in [0, 1]. Typical 0.01-0.1. Default 0.05."""

    epsilon_decay_steps: int = 50_000
    """Env steps of linear decay from epsilon_start to epsilon_end, >= 0. Default 50,000."""

    train_freq: int = 1
    """Train every this many env steps, >= 1. Default 1 (SB3 ``train_freq``)."""

    gradient_steps: int = 1
    """Gradient steps per training, >= 1, or -1 for one per env step since the last
    training (i.e. train_freq steps; SB3's ``gradient_steps=-1``). Default 1."""

    double_dqn: bool = False
    """Pick the bootstrap action with the online network (Double DQN). Default False."""

    tau: float = 1.0
    """Target sync coefficient in (0, 1]: 1.0 copies, < 1 is Polyak averaging. Default 1.0."""

    max_grad_norm: float | None = None
    """Clip the global gradient norm to this (> 0), or None for no clipping.
    SB3 uses 10. Default None (ember-rl does not clip)."""

    huber_delta: float = 1.0
    """Huber loss threshold, > 0 (``torch.nn.HuberLoss(delta)``). Default 1.0."""

    dueling: bool = False
    """Dueling head (Wang et al. 2016): the last hidden layer feeds an advantage
    head A and a value head V, Q = V + A - mean_a(A). Needs at least one hidden
    layer. Default False."""

    learning_rate_end: float | None = None
    """Learning rate reached by linear annealing from ``learning_rate`` (> 0),
    or None for a constant rate. Typical learning_rate / 10 to / 100. Default None."""

    learning_rate_decay_steps: int = 100_000
    """Env steps over which the learning rate anneals to ``learning_rate_end``
    (then held), >= 1; unused when that is None. Default 100,000: the length of
    a classic-control run (the step budget of issue 14's bars and of the PER
    beta schedule), so the rate reaches its end as the run does."""

    layer_norm: bool = False
    """LayerNorm after each hidden layer's Linear, before its ReLU (Ba et al.
    2016; Gallici et al. 2024 show it stabilizes TD learning), with its own gain
    and bias. Needs hidden layers at least 2 wide. Default False."""
    n_step: int = 1
    """Steps of the bootstrapped return, >= 1: the target is
    sum_{k<m} gamma^k r_{t+k} + gamma^m Q_target(s_{t+m}, a*), with m = n, or
    fewer at an episode's end (computed by the replay buffer at sample time).
    Typical 1-5. Default 1 (one-step DQN)."""

    prioritized_replay: bool = False
    """Sample transitions in proportion to their TD errors (proportional
    prioritized replay, Schaul et al. 2016). Default False (uniform)."""

    per_alpha: float = 0.6
    """Priority exponent of prioritized replay, >= 0 (0 is uniform): p = (|td| +
    per_eps)^per_alpha. Typical 0.4-0.7. Default 0.6."""

    per_beta_start: float = 0.4
    """Importance-sampling exponent of prioritized replay at step 0, in [0, 1],
    annealed linearly to 1 over per_beta_steps. Typical 0.4-0.6. Default 0.4."""

    per_beta_steps: int = 100_000
    """Env steps over which per_beta_start is annealed to 1, >= 0. Default 100,000."""

    per_eps: float = 1e-6
    """Added to |td| in prioritized replay's priority, > 0. Default 1e-6."""

    action_masks: bool = False
    """Whether the env restricts actions through ``info["action_mask"]``
    (gymnasium's convention, e.g. Taxi-v3): the replay buffer then keeps each
    transition's next-state mask (packed bits) and the TD target maximises
    over the next state's legal actions only. Acting with a mask works either
    way. ``ember-np train`` turns it on for envs that give masks. Default False."""

    distributional: str | None = None
    """Distributional value head: None (one Q-value per action), ``"c51"`` (a
    categorical distribution over ``n_atoms`` returns from ``v_min`` to ``v_max``,
    cross-entropy loss; Bellemare et al. 2017) or ``"qr"`` (``n_quantiles``
    quantiles, quantile Huber loss with kappa = ``huber_delta``; Dabney et al.
    2018). Acting, double DQN and the dueling streams use the expected value.
    Default None."""

    n_atoms: int = 51
    """C51's atoms per action, >= 2 (used with distributional="c51"). Default 51."""

    v_min: float = -10.0
    """C51's lowest return, finite and < v_max; returns below it count as it.
    Set it to the env's range (discounted). Default -10."""

    v_max: float = 10.0
    """C51's highest return, finite and > v_min. Default 10."""

    n_quantiles: int = 50
    """QR-DQN's quantiles per action, >= 1 (used with distributional="qr").
    Typical 50-200. Default 50."""

    noisy: bool = False
    """Noisy networks (Fortunato et al. 2018): every linear layer (hidden, output,
    a dueling value head, a distributional head's) gets factorised Gaussian noise
    with learned scales, resampled for every update and every exploring action;
    greedy evaluation and policies use the mean weights. Exploration then comes
    from the noise, so ``epsilon_start = epsilon_end = 0`` is the usual setting
    (Rainbow's). Default False."""

    noisy_sigma0: float = 0.5
    """Initial noise scale of noisy layers, > 0: each sigma starts at
    noisy_sigma0 / sqrt(fan_in). Typical 0.1-0.5. Default 0.5 (the paper's);
    unused without ``noisy``."""

    def __post_init__(self) -> None:
        normalize_fields(self)
        self._validate()

    def _validate(self) -> None:
        def fail(name: str, rule: str) -> None:
            raise ValueError(f"{name} must be {rule}, got {getattr(self, name)!r}")

        def positive(name: str, rule: str) -> None:
            """The rule ``rule`` (a positive finite number...), then in float32: the
            kernels apply these settings to float32 weights."""
            v = getattr(self, name)
            if not is_real(v) or not (v > 0 and math.isfinite(v)):
                fail(name, rule)
            if not positive_in_f32(v):
                fail(name, F32_RULE)

        # Every integer field reaches the kernels as an int64 (counts, sizes, steps).
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if is_integral(v) and v > INT64_MAX:
                fail(f.name, f"at most {too_big_rule(INT64_MAX)}")

        for name in ("gamma", "epsilon_start", "epsilon_end"):
            v = getattr(self, name)
            if not is_real(v) or not 0.0 <= v <= 1.0:
                fail(name, "a number in [0, 1]")
        for name in ("learning_rate", "huber_delta"):
            positive(name, "a positive finite number")
        for name in (
            "batch_size",
            "buffer_capacity",
            "min_replay_size",
            "target_update_freq",
            "train_freq",
        ):
            v = getattr(self, name)
            if not is_integral(v) or v < 1:
                fail(name, "a positive integer")
        if not is_integral(self.epsilon_decay_steps) or self.epsilon_decay_steps < 0:
            fail("epsilon_decay_steps", "an integer >= 0")
        if not is_integral(self.gradient_steps) or not (
            self.gradient_steps >= 1 or self.gradient_steps == -1
        ):
            fail("gradient_steps", "a positive integer or -1 (one per env step)")
        if not isinstance(self.double_dqn, bool):
            fail("double_dqn", "True or False")
        if not isinstance(self.dueling, bool):
            fail("dueling", "True or False")
        if not isinstance(self.action_masks, bool):
            fail("action_masks", "True or False")
        if self.dueling and not self.hidden_sizes:
            raise ValueError(
                "dueling=True needs at least one hidden layer to feed its two heads "
                "(set hidden_sizes, e.g. (64, 64)), got hidden_sizes ()"
            )
        if self.learning_rate_end is not None:
            positive("learning_rate_end", "a positive finite number or None (no annealing)")
        if not is_integral(self.learning_rate_decay_steps) or self.learning_rate_decay_steps < 1:
            fail("learning_rate_decay_steps", "a positive integer")
        if not isinstance(self.layer_norm, bool):
            fail("layer_norm", "True or False")
        if self.layer_norm and (not self.hidden_sizes or min(self.hidden_sizes) < 2):
            raise ValueError(
                "layer_norm=True needs hidden layers of width >= 2 to normalise (set "
                f"hidden_sizes, e.g. (64, 64)), got hidden_sizes {self.hidden_sizes}"
            )
        if not is_integral(self.n_step) or self.n_step < 1:
            fail("n_step", "a positive integer (1 for one-step DQN)")
        if not isinstance(self.prioritized_replay, bool):
            fail("prioritized_replay", "True or False")
        alpha = self.per_alpha
        if not is_real(alpha) or not (alpha >= 0 and math.isfinite(alpha)):
            fail("per_alpha", "a finite number >= 0")
        if not is_real(self.per_beta_start) or not 0.0 <= self.per_beta_start <= 1.0:
            fail("per_beta_start", "a number in [0, 1]")
        if not is_integral(self.per_beta_steps) or self.per_beta_steps < 0:
            fail("per_beta_steps", "an integer >= 0")
        if not is_real(self.per_eps) or not (self.per_eps > 0 and math.isfinite(self.per_eps)):
            fail("per_eps", "a positive finite number")
        if not is_real(self.tau) or not 0.0 < self.tau <= 1.0:
            fail("tau", "a number in (0, 1]")
        positive("tau", "a number in (0, 1]")
        if self.max_grad_norm is not None:
            positive("max_grad_norm", "a positive finite number or None")
        if self.min_replay_size < self.batch_size:
            raise ValueError(
                f"min_replay_size must be >= batch_size "
                f"(got {self.min_replay_size} < {self.batch_size})"
            )
        self._validate_head()
        if not isinstance(self.noisy, bool):
            fail("noisy", "True or False")
        positive("noisy_sigma0", "a positive finite number (typical 0.1-0.5)")
        if self.buffer_capacity < self.min_replay_size:
            raise ValueError(
                f"buffer_capacity must be >= min_replay_size, or learning never starts "
                f"(got {self.buffer_capacity} < {self.min_replay_size})"
            )

    def _validate_head(self) -> None:
        if self.distributional not in (None, "c51", "qr"):
            raise ValueError(
                f"distributional must be None, 'c51' or 'qr', got {self.distributional!r}"
            )
        # each field is checked whichever head is chosen (a typo fails at once)
        DistributionalHead("c51", self.n_atoms, self.v_min, self.v_max)
        DistributionalHead("qr", self.n_quantiles)

    @property
    def head(self) -> DistributionalHead | None:
        """The distributional head the config asks for (``dqn/heads/head.py``), or None."""
        if self.distributional == "c51":
            return DistributionalHead("c51", self.n_atoms, self.v_min, self.v_max)
        if self.distributional == "qr":
            return DistributionalHead("qr", self.n_quantiles)
        return None

    # -- schedule -----------------------------------------------------------
    def epsilon_at(self, step: int) -> float:
        """Exploration rate after ``step`` env steps: linear decay, then flat.

        eps(t) = start + (end - start) * min(t / decay_steps, 1) (:func:`linear_epsilon`).
        """
        return float(
            _linear_epsilon(
                step, float(self.epsilon_start), float(self.epsilon_end), self.epsilon_decay_steps
            )
        )

    def learning_rate_at(self, step: int) -> float:
        """Adam's learning rate for updates after ``step`` env steps.

        lr(t) = lr + (lr_end - lr) * min(t / learning_rate_decay_steps, 1), the
        schedule of :func:`linear_epsilon`; ``learning_rate`` at every step when
        ``learning_rate_end`` is None. The agent's kernels compute the same
        value (``learning_rate_now`` in agent.py).
        """
        end = self.learning_rate if self.learning_rate_end is None else self.learning_rate_end
        return float(
            _linear_epsilon(
                step, float(self.learning_rate), float(end), self.learning_rate_decay_steps
            )
        )

    def per_beta_at(self, step: int) -> float:
        """Prioritized replay's importance exponent after ``step`` env steps.

        beta(t) = start + (1 - start) * min(t / per_beta_steps, 1) (:func:`linear_epsilon`).
        """
        return float(_linear_epsilon(step, float(self.per_beta_start), 1.0, self.per_beta_steps))

    @property
    def learning_starts(self) -> int:
        """Stored transitions needed before the first update: max(batch, min_replay)."""
        return max(self.batch_size, self.min_replay_size)

    @property
    def gradient_steps_per_train(self) -> int:
        """Gradient steps each time training happens (resolves -1 to train_freq)."""
        return self.train_freq if self.gradient_steps == -1 else self.gradient_steps

    # -- serialisation ------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict of every field (hidden_sizes as a list)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DqnConfig:
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError naming them."""
        return config_from_dict(cls, data)

    def replace(self, **changes: Any) -> DqnConfig:
        """A copy with some fields changed (validated)."""
        return dataclasses.replace(self, **changes)

"""CartPole-v1 dynamics as compiled kernels, bit for bit gymnasium's ``CartPoleEnv``.

State slots (float64[8]): x, x_dot, theta, theta_dot, steps_beyond_terminated
(-1 for gymnasium's None). Every expression keeps gymnasium's operation order;
the kernels are compiled without fast-math so the float64 results agree.
"""

from __future__ import annotations

import math

import numpy as np

from ember_np._jit import exact_kernel
from ember_np.rng import next_double

GRAVITY = 9.8
MASSCART = 1.0
MASSPOLE = 0.1
TOTAL_MASS = MASSPOLE + MASSCART
LENGTH = 0.5  # half the pole's length
POLEMASS_LENGTH = MASSPOLE * LENGTH
FORCE_MAG = 10.0
TAU = 0.02  # seconds between state updates
THETA_THRESHOLD_RADIANS = 12 * 2 * math.pi / 360
X_THRESHOLD = 2.4
RESET_LOW, RESET_HIGH = -0.05, 0.05
OBS_SIZE = 4


@exact_kernel
def _write_obs(state: np.ndarray, obs: np.ndarray) -> None:
    """obs (float32 (4,)) <- the first four slots of state (float64 (8,)), rounded."""
    for i in range(OBS_SIZE):
        obs[i] = state[i]


@exact_kernel
def cartpole_reset(state: np.ndarray, rng_state: np.ndarray, obs: np.ndarray) -> None:
    """``np_random.uniform(-0.05, 0.05, size=(4,))``: low + (high - low) * u, in order.

    state : float64 (8,), written; rng_state : uint64 (4,), PCG64, four doubles
    drawn; obs : float32 (4,), written.
    """
    span = RESET_HIGH - RESET_LOW
    for i in range(OBS_SIZE):
        state[i] = RESET_LOW + span * next_double(rng_state)
    state[4] = -1.0
    _write_obs(state, obs)


@exact_kernel
def cartpole_step(state: np.ndarray, action: int, obs: np.ndarray) -> tuple[float, bool]:
    """One Euler step of the cart-pole; returns (reward, terminated).

    state : float64 (8,), updated in place; action : int, 0 (push left) or 1
    (push right), any other value counts as 0 (callers check); obs : float32 (4,), written.
    """
    x = state[0]
    x_dot = state[1]
    theta = state[2]
    theta_dot = state[3]
    force = FORCE_MAG if action == 1 else -FORCE_MAG
    costheta = math.cos(theta)
    sintheta = math.sin(theta)
    temp = (force + POLEMASS_LENGTH * (theta_dot * theta_dot) * sintheta) / TOTAL_MASS
    thetaacc = (GRAVITY * sintheta - costheta * temp) / (
        LENGTH * (4.0 / 3.0 - MASSPOLE * (costheta * costheta) / TOTAL_MASS)
    )
    xacc = temp - POLEMASS_LENGTH * thetaacc * costheta / TOTAL_MASS
    x = x + TAU * x_dot
    x_dot = x_dot + TAU * xacc
    theta = theta + TAU * theta_dot
    theta_dot = theta_dot + TAU * thetaacc
    state[0] = x
    state[1] = x_dot
    state[2] = theta
    state[3] = theta_dot
    terminated = (
        x < -X_THRESHOLD
        or x > X_THRESHOLD
        or theta < -THETA_THRESHOLD_RADIANS
        or theta > THETA_THRESHOLD_RADIANS
    )
    if not terminated:
        reward = 1.0
    elif state[4] < 0.0:  # the pole just fell
        state[4] = 0.0
        reward = 1.0
    else:  # stepping after termination: undefined in gymnasium, which returns 0
        state[4] += 1.0
        reward = 0.0
    _write_obs(state, obs)
    return reward, terminated

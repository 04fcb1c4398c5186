"""MountainCar-v0 dynamics as compiled kernels, bit for bit gymnasium's ``MountainCarEnv``.

State slots (float64[8]): position, velocity; the other slots are unused. Every
expression keeps gymnasium's operation order and the kernels are compiled without
fast-math, so the float64 states agree exactly.
"""

from __future__ import annotations

import math

import numpy as np

from ember_np._jit import exact_kernel
from ember_np.rng import next_double

MIN_POSITION = -1.2
MAX_POSITION = 0.6
MAX_SPEED = 0.07
GOAL_POSITION = 0.5
GOAL_VELOCITY = 0.0
FORCE = 0.001
MC_GRAVITY = 0.0025
MC_RESET_LOW, MC_RESET_HIGH = -0.6, -0.4
MC_OBS_SIZE = 2


@exact_kernel
def mountaincar_reset(state: np.ndarray, rng_state: np.ndarray, obs: np.ndarray) -> None:
    """Start a MountainCar episode: position ``uniform(-0.6, -0.4)``, velocity 0.

    Parameters
    ----------
    state : ndarray of float64, shape (8,)
        Receives position and velocity in slots 0-1.
    rng_state : ndarray of uint64, shape (4,)
        PCG64 state (``Rng.state``); one double is drawn.
    obs : ndarray of float32, shape (2,)
        Receives the observation gymnasium's ``reset`` returns.
    """
    state[0] = MC_RESET_LOW + (MC_RESET_HIGH - MC_RESET_LOW) * next_double(rng_state)
    state[1] = 0.0
    obs[0] = state[0]
    obs[1] = state[1]


@exact_kernel
def mountaincar_step(state: np.ndarray, action: int, obs: np.ndarray) -> tuple[float, bool]:
    """One step of the car: push, gravity, speed and position limits.

    Parameters
    ----------
    state : ndarray of float64, shape (8,)
        Position and velocity in slots 0-1, updated in place.
    action : int
        0, 1 or 2: accelerate left, don't accelerate, accelerate right.
    obs : ndarray of float32, shape (2,)
        Receives the new observation.

    Returns
    -------
    reward : float
        Always -1.0.
    terminated : bool
        The car reached position 0.5 with a non-negative velocity.
    """
    position = state[0]
    velocity = state[1]
    velocity = velocity + ((action - 1) * FORCE + math.cos(3 * position) * (-MC_GRAVITY))
    # np.clip, spelled out: the same value for every non-NaN input.
    velocity = min(max(velocity, -MAX_SPEED), MAX_SPEED)
    position = position + velocity
    position = min(max(position, MIN_POSITION), MAX_POSITION)
    if position == MIN_POSITION and velocity < 0:
        # the car hits the left wall and stops
        velocity = 0.0
    terminated = position >= GOAL_POSITION and velocity >= GOAL_VELOCITY
    state[0] = position
    state[1] = velocity
    obs[0] = position
    obs[1] = velocity
    return -1.0, terminated

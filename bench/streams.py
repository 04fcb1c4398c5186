"""Transition streams for filling replay buffers in the benchmarks.

Imports only NumPy, so the SB3 side of a comparison loads nothing of ember_np.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def episode_stream(
    n: int, obs_size: int, length: int = 50, chunk: int = 65_536
) -> Iterator[tuple[np.ndarray, int, float, np.ndarray, int]]:
    """``n`` transitions as an env gives them, in episodes of ``length`` steps.

    Within an episode each next_obs is the following transition's obs; an
    episode ends terminated, with its own final observation, and the next one
    starts from a reset observation. Random float32 observations, made in
    chunks (no full-size temporary array). Yields (obs, action, reward,
    next_obs, status).
    """
    rng = np.random.default_rng(0)
    obs = rng.standard_normal(obs_size, dtype=np.float32)
    for lo in range(0, n, chunk):
        block = rng.standard_normal((min(chunk, n - lo), obs_size), dtype=np.float32)
        for k, next_obs in enumerate(block):
            end = (lo + k + 1) % length == 0
            yield obs, k % 2, 1.0, next_obs, int(end)
            obs = -next_obs if end else next_obs  # a reset: not the final observation


def fill(buffer, n: int, obs_size: int) -> None:  # noqa: ANN001 (any buffer with push)
    """Push the first ``n`` transitions of :func:`episode_stream` into ``buffer``."""
    for transition in episode_stream(n, obs_size):
        buffer.push(*transition)

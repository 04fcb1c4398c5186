"""PPO's whole update on one rollout (the RL Zoo's CartPole-v1 preset), ember_np against
torch, side by side; ``extra_info["flops"]`` is the update's floor FLOPs (``ppo_update.py``
says what both sides do and what the floor counts).

Run with ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m pytest bench -k ppo``
beside ``-k sgemm`` (the floor's unit); torch's side is skipped without torch.
"""

from __future__ import annotations

import pytest
from ppo_update import N_ACTIONS, OBS_SIZE, ZOO_CARTPOLE, ember_update, rollout_flops, torch_update


@pytest.mark.parametrize("library", ["ember_np", "torch"])
def test_ppo_update_vs_torch(benchmark, library):
    """20 epochs of one 256-row minibatch: shuffle, forward, loss, backward, clip, Adam."""
    if library == "torch":
        pytest.importorskip("torch")
        update = torch_update(ZOO_CARTPOLE, OBS_SIZE, N_ACTIONS)
    else:
        update = ember_update(ZOO_CARTPOLE, OBS_SIZE, N_ACTIONS)
    assert update is not None
    update()  # compile / load, and torch's first-call costs, outside the timed region
    benchmark.extra_info.update(library=library,
                                flops=rollout_flops(ZOO_CARTPOLE, OBS_SIZE, N_ACTIONS))  # fmt: skip
    benchmark(update)

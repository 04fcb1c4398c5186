import sys
from pathlib import Path

import pytest

# tests import their plain-NumPy references as ``import naive``
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory):
    """A run directory from a real short training (CartPole-v1, S1 network 4-64-64-2)."""
    from ember_np.cli import main

    root = tmp_path_factory.mktemp("runs")
    code = main(
        ["train", "CartPole-v1", "--steps", "600", "--eval-every", "300", "--eval-episodes", "1",
         "--checkpoint-freq", "300", "--root", str(root), "--preset", "ember",
         "--set", "min_replay_size=100", "hidden_sizes=[64,64]", "--quiet"]
    )  # fmt: skip
    assert code == 0
    (run_dir,) = (root / "CartPole-v1" / "ember").iterdir()
    return run_dir

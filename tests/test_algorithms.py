"""The algorithm registry, and a second algorithm that lives only in the tests.

``random_algorithm.RANDOM`` (tests/random_algorithm.py) is registered in that
one file; everything here reaches it through the command line, as a user's
own algorithm would be, to show that nothing above the registry is DQN's.
"""

from __future__ import annotations

import json

import pytest
from helpers import files_of

from ember_np.algorithms import DEFAULT_ALGORITHM, Algorithm, get_algorithm, known_algorithms
from ember_np.cli import main
from ember_np.dqn.config import DqnConfig

ALGO = "random_algorithm:RANDOM"


def test_dqn_is_built_in_and_the_default():
    dqn = get_algorithm()
    assert DEFAULT_ALGORITHM == "dqn" and dqn is get_algorithm("dqn")
    assert dqn.config_class is DqnConfig and dqn.checkpoint_format == "ember_np.dqn_agent"
    assert "dqn" in known_algorithms()
    assert dqn.default_preset("CartPole-v1").name == "rainbow"
    assert dqn.preset("zoo", "CartPole-v1").env_id == "CartPole-v1"


def test_a_module_algorithm_is_imported_once_and_remembered():
    algorithm = get_algorithm(ALGO)
    assert isinstance(algorithm, Algorithm) and algorithm.name == "random"
    assert get_algorithm(ALGO) is algorithm and ALGO in known_algorithms()


@pytest.mark.parametrize(
    "name, words",
    [
        ("ppo2", ["unknown algorithm 'ppo2'", "built in: dqn", "package.module:NAME"]),
        ("no_such_module_xyz:A", ["cannot import 'no_such_module_xyz'"]),
        ("random_algorithm:RandomConfig", ["must be an ember_np.algorithms.Algorithm", "type"]),
        ("", ["non-empty string"]),
    ],
)
def test_a_bad_name_says_what_exists(name, words):
    with pytest.raises(ValueError) as info:
        get_algorithm(name)
    for word in words:
        assert word in str(info.value)


def test_presets_of_an_algorithm_without_any_are_refused_by_name():
    algorithm = get_algorithm(ALGO)
    with pytest.raises(ValueError, match="unknown random preset 'zoo' for CartPole-v1"):
        algorithm.preset("zoo", "CartPole-v1")


def _run_dir(root) -> str:
    (config,) = root.rglob("config.json")
    return str(config.parent)


def test_the_test_algorithm_trains_resumes_and_evaluates_from_the_command_line(tmp_path, capsys):
    root = tmp_path / "runs"
    args = ["train", "CartPole-v1", "--algo", ALGO, "--steps", "1200", "--eval-every", "600",
            "--eval-episodes", "2", "--checkpoint-freq", "400", "--keep", "2", "--set",
            "repeat=0.25", "--root", str(root), "--quiet"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"algorithm {ALGO}, preset (none: RandomConfig defaults)" in out
    run = _run_dir(root)
    saved = json.loads((tmp_path / run / "config.json").read_text())
    assert saved["algorithm"] == ALGO and saved["random"] == {"repeat": 0.25}
    assert "dqn" not in saved
    assert main(["resume", run, "--steps", "400", "--quiet"]) == 0
    assert "(1,200 random steps)" in capsys.readouterr().out
    logged = [json.loads(line) for line in open(f"{run}/eval_episodes.jsonl")]
    assert logged[-1]["total_steps_at_eval"] == 1_600
    assert main(["eval", run, "--episodes", "2", "--checkpoint", "latest"]) == 0
    assert "Eval at step 1600 (2 episodes)" in capsys.readouterr().out


def test_the_test_algorithm_runs_seeds_in_worker_processes_and_reports(tmp_path, capsys):
    root = tmp_path / "runs"
    args = ["train", "CartPole-v1", "--algo", ALGO, "--seeds", "2", "--workers", "2",
            "--steps", "800", "--eval-every", "400", "--eval-episodes", "2",
            "--root", str(root), "--quiet"]  # fmt: skip
    assert main(args) == 0
    (seeds_json,) = root.rglob("seeds.json")
    parent = seeds_json.parent
    assert json.loads(seeds_json.read_text())["spec"]["algorithm"] == ALGO
    capsys.readouterr()
    assert main(["report", str(parent)]) == 0
    assert "2 of 2 seeds finished, 800 steps each" in capsys.readouterr().out
    # the same seed trained alone writes the same files (the workers built it the same way)
    alone = tmp_path / "alone"
    args = ["train", "CartPole-v1", "--algo", ALGO, "--seed", "1", "--steps", "800",
            "--eval-every", "400", "--eval-episodes", "2", "--root", str(alone), "--quiet"]  # fmt: skip
    assert main(args) == 0
    one, other = files_of(parent / "seed_1"), files_of(alone.joinpath(_run_dir(alone)))
    shared = {"train_episodes.jsonl", "eval_episodes.jsonl", "checkpoints/latest.npz"}
    assert {k: one[k] for k in shared} == {k: other[k] for k in shared}


def test_a_checkpoint_of_another_algorithm_is_refused_naming_both(tmp_path, capsys):
    root = tmp_path / "runs"
    args = ["train", "CartPole-v1", "--algo", ALGO, "--steps", "400", "--eval-every", "400",
            "--eval-episodes", "1", "--root", str(root), "--quiet"]  # fmt: skip
    assert main(args) == 0
    run = _run_dir(root)
    config = tmp_path / run / "config.json"
    saved = json.loads(config.read_text())
    del saved["algorithm"], saved["random"]  # now it claims to be a DQN run
    config.write_text(json.dumps(saved))
    capsys.readouterr()
    for command in (["eval", run], ["resume", run, "--steps", "10", "--quiet"]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"a {ALGO} checkpoint (format 'tests.random_agent')" in err
        assert "this run's algorithm is dqn (format 'ember_np.dqn_agent')" in err


def test_an_unknown_algo_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["train", "CartPole-v1", "--algo", "ppo2", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown algorithm 'ppo2'" in err[0]
    assert not list(tmp_path.iterdir())


def test_tune_refuses_an_algorithm_without_a_search_space(tmp_path, capsys):
    pytest.importorskip("optuna")
    args = ["tune", "CartPole-v1", "--algo", ALGO, "--trials", "1", "--dir", str(tmp_path / "t")]
    assert main(args) == 2
    assert f"algorithm {ALGO} has no tune search space" in capsys.readouterr().err


_DQN_ONLY = """
import sys, tempfile
from ember_np.cli import main

status = main(["train", "CartPole-v1", "--steps", "300", "--eval-episodes", "1", "--quiet",
               "--root", tempfile.mkdtemp()])
print(status, sorted(m for m in sys.modules if m.startswith(("ember_np.ppo", "ember_np.dqn"))))
"""


def test_a_dqn_run_never_imports_another_algorithm():
    """A default DQN run imports (so compiles) nothing of PPO: each algorithm's package
    is reached only through the registry, by name, when a command asks for it."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _DQN_ONLY], capture_output=True, text=True,
                         timeout=600)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    status, modules = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert status == "0"
    assert "ember_np.dqn.agent" in modules  # (the check sees the algorithm that ran)
    assert "ember_np.ppo" not in modules, modules

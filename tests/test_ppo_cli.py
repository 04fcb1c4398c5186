"""PPO through the algorithm registry: ``ember-np ... --algo ppo`` and its presets.

Every command a DQN run has: train (the Zoo's preset and its ``n_envs``), resume
(byte for byte the run straight through), eval, export (ONNX equal to the NumPy
policy), ``--seeds`` and report, tune (its best trial as a preset file), TensorBoard.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import files_of

from ember_np.algorithms import get_algorithm
from ember_np.cli import main
from ember_np.ppo.agent import LOGGED_STATS
from ember_np.ppo.config import PPOConfig
from ember_np.ppo.policy import PPOPolicy
from ember_np.ppo.presets import PPOPreset, get_preset, load_preset_file

FAST = ["--eval-every", "1000", "--eval-episodes", "2", "--checkpoint-freq", "1000", "--quiet"]


def run_dir(root: Path) -> Path:
    (config,) = root.rglob("config.json")
    return config.parent


def train(root: Path, *args: str) -> Path:
    """The run directory of ``ember-np train CartPole-v1 --algo ppo ARGS`` (one seed)."""
    assert main(["train", "CartPole-v1", "--algo", "ppo", *args, *FAST, "--root", str(root)]) == 0
    return root if "--seeds" in args else run_dir(root)


# -- the registry entry and presets ------------------------------------------------------


def test_ppo_is_built_in_with_the_zoo_rows():
    ppo = get_algorithm("ppo")
    assert ppo.config_class is PPOConfig and ppo.checkpoint_format == "ember_np.ppo"
    cartpole = ppo.default_preset("CartPole-v1")
    assert (cartpole.name, cartpole.num_envs, cartpole.steps) == ("zoo", 8, 100_000)
    c = cartpole.config
    # rl-baselines3-zoo hyperparams/ppo.yml, CartPole-v1
    assert (c.n_steps, c.batch_size, c.n_epochs, c.gamma, c.gae_lambda, c.ent_coef) == (
        32, 256, 20, 0.98, 0.8, 0.0)  # fmt: skip
    assert (c.learning_rate, c.lr_schedule, c.clip_range, c.clip_schedule) == (
        1e-3, "linear", 0.2, "linear")  # fmt: skip
    assert cartpole.sb3_kwargs["learning_rate"] == "lin_0.001"
    for env_id in ("Acrobot-v1", "MountainCar-v0"):
        row = ppo.preset("zoo", env_id)
        assert row.num_envs == 16 and row.steps == 1_000_000
        assert row.config.normalize_obs and row.config.normalize_reward
    lunar = ppo.preset("zoo", "LunarLander-v3")
    assert (lunar.config.n_steps, lunar.config.ent_coef, lunar.config.gamma) == (1024, 0.01, 0.999)
    assert ppo.default_preset("Taxi-v3").name == "sb3"  # no Zoo row: SB3's defaults
    assert ppo.default_preset("Taxi-v3").config == PPOConfig()


def test_ppo_ember_preset_is_cartpoles_own_beside_the_zoo_row():
    """CartPole-v1's ``ember`` preset: the Zoo's row with fewer epochs over longer
    rollouts, listed for the env (the default stays ``zoo``), borrowable elsewhere."""
    ppo = get_algorithm("ppo")
    assert list(ppo.presets("CartPole-v1")) == ["zoo", "ember", "sb3"]
    assert ppo.default_preset("CartPole-v1").name == "zoo"
    ember, zoo = ppo.preset("ember", "CartPole-v1"), ppo.preset("zoo", "CartPole-v1")
    assert (ember.num_envs, ember.steps) == (zoo.num_envs, zoo.steps)
    mine, theirs = ember.config.to_dict(), zoo.config.to_dict()
    assert {k: mine[k] for k in mine if mine[k] != theirs[k]} == {"n_epochs": 10, "n_steps": 64}
    assert ember.config_for(5_000).schedule_steps == 5_000
    assert "1000-1019" in ember.source
    assert "ember" not in ppo.presets("Taxi-v4")
    assert ppo.preset("CartPole-v1/ember", "Taxi-v4") is ember


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "MountainCar-v0", "LunarLander-v3"])
def test_ppo_ember_presets_of_the_1m_step_envs_are_the_zoo_rows_linear_and_10_epochs(env_id):
    """The 1M-step envs' ``ember`` presets: the Zoo's row with a linear learning rate
    and 10 epochs, at its budget and number of envs (the default stays ``zoo``)."""
    ppo = get_algorithm("ppo")
    assert list(ppo.presets(env_id)) == ["zoo", "ember", "sb3"]
    assert ppo.default_preset(env_id).name == "zoo"
    ember, zoo = ppo.preset("ember", env_id), ppo.preset("zoo", env_id)
    assert (ember.num_envs, ember.steps) == (zoo.num_envs, zoo.steps) == (16, 1_000_000)
    mine, theirs = ember.config.to_dict(), zoo.config.to_dict()
    assert {k: mine[k] for k in mine if mine[k] != theirs[k]} == {
        "lr_schedule": "linear", "n_epochs": 10}  # fmt: skip
    assert ember.config.learning_rate_at(0.5) == pytest.approx(zoo.config.learning_rate / 2)
    assert "tuning seeds 1000-10" in ember.source and env_id in ember.source


def test_a_preset_spans_its_schedules_over_the_run_and_names_a_borrowed_one():
    zoo = get_preset("zoo", "CartPole-v1")
    assert zoo.config_for(50_000).schedule_steps == 50_000
    assert zoo.config_for(zoo.steps) == zoo.config
    borrowed = get_preset("CartPole-v1/zoo", "Acrobot-v1")
    assert borrowed is zoo and borrowed.name_for("Acrobot-v1") == "CartPole-v1/zoo"
    assert zoo.name_for("ember_np/CartPole-v1") == "zoo"
    with pytest.raises(
        ValueError, match="unknown ppo preset 'rainbow' for CartPole-v1.*zoo, ember, sb3"
    ):
        get_preset("rainbow", "CartPole-v1")


def test_preset_files_are_checked_naming_the_file(tmp_path):
    good = tmp_path / "mine.json"
    good.write_text(json.dumps({"algorithm": "ppo", "env_id": "CartPole-v1", "steps": 5000,
                                "num_envs": 4, "ppo": {"n_steps": 64}}))  # fmt: skip
    preset = load_preset_file(good, "CartPole-v1")
    assert isinstance(preset, PPOPreset)
    assert (preset.name, preset.steps, preset.num_envs, preset.config.n_steps) == (
        "mine", 5000, 4, 64)  # fmt: skip
    cases = {
        "dqn.json": ({"dqn": {"gamma": 0.9}}, "expected the keys"),
        "algo.json": ({"algorithm": "dqn", "ppo": {}}, "a 'dqn' preset: train it with --algo dqn"),
        "bad.json": ({"ppo": {"n_steps": 0}}, "n_steps must be a positive integer"),
        "envs.json": ({"ppo": {}, "num_envs": 0}, "num_envs must be a positive integer"),
        "other.json": ({"ppo": {}, "env_id": "Acrobot-v1"}, "made for env_id 'Acrobot-v1'"),
    }
    for name, (data, says) in cases.items():
        path = tmp_path / name
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=f"preset file {path}.*{says}|{says}"):
            load_preset_file(path, "CartPole-v1")
    (tmp_path / "nojson.json").write_text("{")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_preset_file(tmp_path / "nojson.json")


def test_the_search_space_samples_valid_configs_and_keeps_fixed_fields():
    optuna = pytest.importorskip("optuna")
    from ember_np.ppo import search_space
    from ember_np.tune import settings_for

    settings = settings_for("CartPole-v1", (4000, 1, 2, 2), 0, ["n_epochs=3"], say=str,
                            algorithm="ppo")  # fmt: skip
    assert settings.run.num_envs == 8  # the zoo preset's
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(12):
        trial = study.ask()
        config = search_space.suggest_config(trial, settings)
        assert config.n_epochs == 3 and "n_epochs" not in trial.params
        assert config.schedule_steps == 4000 and config.lr_schedule == "linear"
        assert config.gamma == 1.0 - trial.params["one_minus_gamma"]
        assert config.hidden_sizes == search_space.NET_ARCHS[trial.params["net_arch"]]
        seen.add(config.batch_size)
    assert len(seen) > 1


# -- the commands --------------------------------------------------------------------------


def test_train_uses_the_zoo_preset_and_its_envs_and_logs_the_update(tmp_path):
    run = train(tmp_path / "runs", "--steps", "2000")
    saved = json.loads((run / "config.json").read_text())
    assert saved["algorithm"] == "ppo" and saved["preset"] == "zoo"
    assert saved["num_envs"] == 8 and saved["env_id"] == "ember_np/CartPole-v1"
    assert saved["ppo"]["schedule_steps"] == 2000 and "dqn" not in saved
    rows = [json.loads(line) for line in open(run / "train_episodes.jsonl")]
    logged = [r["extras"] for r in rows if r["extras"]]
    assert logged and set(logged[-1]) == set(LOGGED_STATS)
    assert 0.0 < logged[-1]["learning_rate"] < 1e-3  # linear, part of the run gone
    fewer = train(tmp_path / "four", "--steps", "1000", "--num-envs", "4")
    assert json.loads((fewer / "config.json").read_text())["num_envs"] == 4


def test_a_stopped_run_resumed_equals_the_run_straight_through(tmp_path, capsys):
    straight = train(tmp_path / "a", "--steps", "3000")
    # stopped at step 1,000 of the same run: its schedules span the 3,000 steps
    stopped = train(tmp_path / "b", "--steps", "1000", "--set", "schedule_steps=3000")
    capsys.readouterr()
    assert main(["resume", str(stopped), "--steps", "2000", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "8 envs continue their episodes in progress" in out
    assert "epochs of updates" in out and "steps of the rollout filled" in out
    a, b = files_of(straight), files_of(stopped)
    for name in ("train_episodes.jsonl", "checkpoints/latest.npz", "checkpoints/step_3000.npz",
                 "checkpoints/latest_envs.npz"):  # fmt: skip
        assert a[name] == b[name], name


def test_seeds_run_in_workers_as_they_run_alone_and_report(tmp_path, capsys):
    root = tmp_path / "runs"
    args = ["--seeds", "2", "--workers", "2", "--steps", "1000"]
    train(root, *args)
    (seeds_json,) = root.rglob("seeds.json")
    assert json.loads(seeds_json.read_text())["spec"]["algorithm"] == "ppo"
    capsys.readouterr()
    assert main(["report", str(seeds_json.parent)]) == 0
    assert "2 of 2 seeds finished, 1,000 steps each" in capsys.readouterr().out
    alone = train(tmp_path / "alone", "--seed", "1", "--steps", "1000")
    one, other = files_of(seeds_json.parent / "seed_1"), files_of(alone)
    for name in ("train_episodes.jsonl", "eval_episodes.jsonl", "checkpoints/latest.npz"):
        assert one[name] == other[name], name


@pytest.mark.parametrize("normalize", [False, True])
def test_eval_and_the_onnx_export_act_as_the_numpy_policy(tmp_path, capsys, normalize):
    ort = pytest.importorskip("onnxruntime")
    sets = ["--set", "normalize_obs=true", "normalize_reward=true"] if normalize else []
    run = train(tmp_path / "runs", "--steps", "1000", *sets)
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2", "--checkpoint", "latest"]) == 0
    assert "Eval at step 1000 (2 episodes)" in capsys.readouterr().out
    out = tmp_path / "policy.onnx"
    assert main(["export", str(run), "--checkpoint", "latest", "-o", str(out)]) == 0
    assert "4 inputs -> 2 logits" in capsys.readouterr().out
    policy = PPOPolicy.load(run / "checkpoints" / "latest.npz")
    assert (policy.obs_stats is not None) == normalize
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map
    assert json.loads(meta["normalize_obs"]) == normalize and meta["outputs"] == "logits"
    obs = np.random.default_rng(0).normal(0, 2, (256, 4)).astype(np.float32)
    (logits,) = session.run(["logits"], {"obs": obs})
    np.testing.assert_allclose(logits, policy.logits_batch(obs), rtol=1e-5, atol=1e-6)
    assert (np.argmax(logits, 1) == policy.act_batch(obs)).mean() > 0.99


def test_tensorboard_gets_the_update_statistics(tmp_path):
    pytest.importorskip("tensorboardX")
    from test_callbacks import read_events

    train(tmp_path / "runs", "--steps", "1000", "--tensorboard", str(tmp_path / "tb"))
    scalars = read_events(tmp_path / "tb")
    for name in ("policy_loss", "value_loss", "entropy_loss", "approx_kl", "clip_fraction",
                 "explained_variance"):  # fmt: skip
        assert scalars[f"train/{name}"], name
    assert "train/epsilon" not in scalars


def test_tune_writes_a_ppo_preset_file_that_train_takes(tmp_path, capsys):
    pytest.importorskip("optuna")
    tune_dir = tmp_path / "tune"
    assert main(["tune", "CartPole-v1", "--algo", "ppo", "--trials", "2", "--steps", "800",
                 "--seeds", "1", "--evals", "1", "--eval-episodes", "1",
                 "--dir", str(tune_dir)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "--algo ppo --preset" in out
    saved = json.loads((tune_dir / "best_preset.json").read_text())
    assert saved["algorithm"] == "ppo" and saved["num_envs"] == 8
    run = train(tmp_path / "runs", "--preset", str(tune_dir / "best_preset.json"),
                "--steps", "1000")  # fmt: skip
    config = json.loads((run / "config.json").read_text())
    assert config["preset"] == "best_preset" and config["num_envs"] == 8
    searched = {k: v for k, v in saved["ppo"].items() if k != "schedule_steps"}
    assert {k: config["ppo"][k] for k in searched} == searched
    assert config["ppo"]["schedule_steps"] == 1000


def test_a_dqn_run_is_refused_as_ppo_naming_both(tmp_path, capsys):
    root = tmp_path / "runs"
    assert main(["train", "CartPole-v1", "--steps", "600", *FAST, "--root", str(root)]) == 0
    run = run_dir(root)
    from ember_np.algorithms import check_checkpoint_format
    from ember_np.checkpoint import CheckpointError

    with pytest.raises(CheckpointError, match="a dqn checkpoint.*this run's algorithm is ppo"):
        check_checkpoint_format(run / "checkpoints" / "latest.npz", "ppo")


def test_the_first_compile_notice_checks_the_runs_own_algorithms_kernel(monkeypatch):
    """Said when a run compiles in its own thread (no workers: --seeds, N-env DQN, or the
    precompile off), for the kernel of the run's own algorithm and loop."""
    import ember_np._jit
    import ember_np._precompile
    from ember_np.ppo.fused import fused_ppo_steps
    from ember_np.ppo.update import train_epochs
    from ember_np.training.setup import first_compile_notice

    checked = []

    def nothing_cached(kernel):  # noqa: ANN001, ANN202
        checked.append(kernel)
        return False

    monkeypatch.setattr(ember_np._jit, "cached_on_disk", nothing_cached)
    # with the precompile on, a PPO run's workers say it on their own line, whatever its
    # loop, and so do a one-env DQN run's
    monkeypatch.setattr(ember_np._precompile, "enabled", lambda: True)
    assert first_compile_notice(True, 8, "ppo") is None
    assert first_compile_notice(False, 1, "ppo") is None
    assert first_compile_notice(True, 1, "dqn") is None
    assert checked == []
    # but no --seeds run forks workers, and DQN has none for N envs: the notice is said
    assert first_compile_notice(True, 8, "ppo", single_run=False) is not None
    assert first_compile_notice(False, 1, "dqn", single_run=False) is not None
    assert first_compile_notice(True, 8, "dqn") is not None
    assert [k.__name__ for k in checked] == ["fused_ppo_steps", "agent_step", "fused_vec_steps"]
    checked.clear()
    monkeypatch.undo()
    monkeypatch.setattr(ember_np._jit, "cached_on_disk", nothing_cached)
    monkeypatch.setenv("EMBER_NP_PRECOMPILE", "0")
    assert first_compile_notice(True, 8, "ppo").startswith("compiling ember_np's kernels")
    assert first_compile_notice(True, 1, "ppo") is not None  # one env: the Python loop
    assert checked == [fused_ppo_steps, train_epochs]  # 8 native envs: the compiled loop
    assert first_compile_notice(True, 1, "random_algorithm:RANDOM") is None  # compiles nothing
    assert first_compile_notice(True, 1, "dqn") is not None
    assert checked[-1].__name__ == "fused_steps"

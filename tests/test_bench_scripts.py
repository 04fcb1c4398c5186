"""The benchmark scripts in bench/ run end to end (tiny budgets; the figures come from full runs)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ember_np.presets import get_preset
from ember_np.stats import iqm

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

from streams import episode_stream  # noqa: E402

HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None


def run(*args: str, timeout: int = 300) -> str:
    out = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=BENCH.parent
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_episode_stream_is_episodic():
    items = list(episode_stream(120, 3, length=50))
    assert len(items) == 120
    for i, (_, _, _, next_obs, status) in enumerate(items[:-1]):
        following = items[i + 1][0]
        assert status == int((i + 1) % 50 == 0)
        # within an episode the next transition starts where this one ended
        assert np.array_equal(following, next_obs) == (status == 0)


def test_learning_bench_writes_its_results_and_table(tmp_path):
    results = tmp_path / "results"
    run("bench/learning.py", "--envs", "CartPole-v1", "--preset", "rainbow", "--seeds", "2",
        "--workers", "2", "--steps", "2000", "--results", str(results))  # fmt: skip
    path = results / "learning_ember_np-rainbow_CartPole-v1.json"
    data = json.loads(path.read_text())
    assert data["steps"] == 2000 and data["workers"] == 2 and "--steps 2000" in data["command"]
    assert data["preset"] == "rainbow" and "--preset rainbow" in data["command"]
    assert sorted(r["seed"] for r in data["runs"]) == [0, 1]
    for r in data["runs"]:
        assert [p[0] for p in r["curve"]] == [200 * k for k in range(1, 11)] + [2000]
        # final and best: each the mean return of 20 whole CartPole episodes (a multiple
        # of 1/20; a mean over 19 of them is not), of latest.npz and best.npz
        for key in ("final", "best"):
            assert 8.0 <= r[key] <= 500.0 and abs(r[key] * 20 - round(r[key] * 20)) < 1e-6, r
    # the same runs saved as the zoo preset too: the report gives each preset its row;
    # and as a 4-env row of an earlier rainbow preset, which the report marks as such
    zoo = json.loads(path.read_text()) | {
        "preset": "zoo",
        "config": get_preset("zoo", "CartPole-v1").config_for(2000).to_dict(),
    }
    (results / "learning_ember_np-zoo_CartPole-v1.json").write_text(json.dumps(zoo))
    old = json.loads(path.read_text())
    old = old | {"preset": "rainbow-n4", "config": old["config"] | {"n_step": 1, "tau": 0.5}}
    (results / "learning_ember_np-rainbow-n4_CartPole-v1.json").write_text(json.dumps(old))
    out = tmp_path / "learning.md"
    run("bench/learning.py", "--report", "--results", str(results), "--out", str(out),
        "--plot", str(tmp_path / "curves.png"))  # fmt: skip
    table = out.read_text()
    assert "| CartPole-v1 | ember_np rainbow (2,000) | 2 |" in table
    assert "| CartPole-v1 | ember_np zoo (2,000) | 2 |" in table
    assert ("| CartPole-v1 | ember_np rainbow, compiled env x 4, earlier preset: n_step, tau "
            "since changed (2,000) | 2 |") in table  # fmt: skip
    assert "Not run: sb3 zoo CartPole-v1" in table
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_learning_bench_ppo_rows_beside_dqns(tmp_path):
    """--algo ppo: ember_np's PPO preset on its n_envs compiled envs, evaluated with
    PPOPolicy; its own result file and its own table section."""
    from ember_np.ppo.presets import get_preset as ppo_preset

    results = tmp_path / "results"
    run("bench/learning.py", "--algo", "ppo", "--envs", "CartPole-v1", "--seeds", "2",
        "--workers", "2", "--steps", "2048", "--results", str(results))  # fmt: skip
    assert sorted(f.name for f in results.iterdir()) == [
        "learning_ember_np-ppo-zoo_CartPole-v1.json"
    ]
    path = results / "learning_ember_np-ppo-zoo_CartPole-v1.json"
    data = json.loads(path.read_text())
    preset = ppo_preset("zoo", "CartPole-v1")
    assert (data["algo"], data["train_env"], data["num_envs"]) == (
        "ppo", "ember_np/CartPole-v1", preset.num_envs)  # fmt: skip
    assert data["config"] == preset.config_for(2048).to_dict()
    assert "--algo ppo --preset zoo" in data["command"]
    for r in data["runs"]:
        assert r["curve"][0][0] == 208  # 10 evaluations: every 204 steps, 8 envs a step
        for key in ("final", "best"):  # means of 20 whole CartPole episodes
            assert 8.0 <= r[key] <= 500.0 and abs(r[key] * 20 - round(r[key] * 20)) < 1e-6, r
    # the same runs as SB3's PPO: a row compared with itself is even (P = 0.5)
    (results / "learning_sb3-ppo_CartPole-v1.json").write_text(path.read_text())
    out = tmp_path / "learning.md"
    run("bench/learning.py", "--report", "--results", str(results), "--out", str(out),
        "--plot", str(tmp_path / "curves.png"))  # fmt: skip
    assert "Not run: ember_np rainbow CartPole-v1" in out.read_text()  # DQN's: none saved
    table = (tmp_path / "learning_ppo.md").read_text()
    assert "| CartPole-v1 | ember_np PPO zoo, compiled env x 8 (2,048) | 2 |" in table
    row = next(line for line in table.splitlines() if "ember_np PPO zoo" in line)
    assert "| 0.50 [" in row
    assert "| CartPole-v1 | sb3 PPO zoo, gymnasium env x 8 (2,048) | 2 |" in table
    assert (tmp_path / "curves_ppo.png").read_bytes()[:4] == b"\x89PNG"
    assert not (tmp_path / "curves.png").exists()


def test_learning_bench_refuses_a_preset_of_the_other_algorithm(tmp_path):
    out = subprocess.run(
        [sys.executable, "bench/learning.py", "--algo", "ppo", "--preset", "rainbow",
         "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=BENCH.parent,
    )  # fmt: skip
    assert out.returncode == 2 and "--algo ppo takes zoo or ember" in out.stderr
    assert not list(tmp_path.iterdir())


def test_learning_ppo_zoo_arguments_for_sb3():
    """The Zoo's ``lin_X`` is SB3's callable ``progress_remaining * X``; n_envs and
    normalize are not PPO's arguments."""
    from learning_ppo import sb3_arguments

    from ember_np.ppo.presets import get_preset as ppo_preset

    kwargs, n_envs, normalize = sb3_arguments(ppo_preset("zoo", "CartPole-v1").sb3_kwargs)
    assert (n_envs, normalize) == (8, False)
    assert kwargs["learning_rate"](1.0) == 1e-3 and kwargs["learning_rate"](0.25) == 0.25e-3
    assert kwargs["clip_range"](0.5) == 0.1
    assert {"n_envs", "n_timesteps", "normalize"}.isdisjoint(kwargs)
    assert (kwargs["n_steps"], kwargs["batch_size"], kwargs["n_epochs"]) == (32, 256, 20)
    kwargs, n_envs, normalize = sb3_arguments(ppo_preset("zoo", "Acrobot-v1").sb3_kwargs)
    assert (n_envs, normalize, kwargs["gamma"]) == (16, True, 0.99)


@pytest.mark.skipif(not HAS_SB3, reason="needs stable-baselines3 (the bench extra)")
def test_learning_bench_sb3_ppo_writes_its_own_file(tmp_path):
    results = tmp_path / "results"
    run("bench/learning.py", "--algo", "ppo", "--library", "sb3", "--envs", "CartPole-v1",
        "--seeds", "1", "--workers", "1", "--steps", "512", "--results", str(results))  # fmt: skip
    assert [f.name for f in results.iterdir()] == ["learning_sb3-ppo_CartPole-v1.json"]
    (r,) = json.loads((results / "learning_sb3-ppo_CartPole-v1.json").read_text())["runs"]
    assert len(r["curve"]) == 10 and r["curve"][-1][0] <= 512
    for key in ("final", "best"):
        assert 8.0 <= r[key] <= 500.0 and abs(r[key] * 20 - round(r[key] * 20)) < 1e-6, r


@pytest.mark.skipif(not HAS_SB3, reason="needs stable-baselines3 (the bench extra)")
def test_learning_bench_sb3_finishes_a_partial_result_file_on_another_runs_root(tmp_path):
    """With --runs-root, the seeds in the env's result file count as finished (another
    session's, whose runs root is gone): only the others train, and the file then
    holds both."""
    results = tmp_path / "results"
    common = ("bench/learning.py", "--algo", "ppo", "--library", "sb3", "--envs",
              "CartPole-v1", "--workers", "1", "--steps", "512", "--results", str(results))  # fmt: skip
    run(*common, "--seeds", "1", "--runs-root", str(tmp_path / "first"))
    path = results / "learning_sb3-ppo_CartPole-v1.json"
    (first,) = json.loads(path.read_text())["runs"]
    out = subprocess.run([sys.executable, *common, "--seeds", "2", "--runs-root",
                          str(tmp_path / "second")], capture_output=True, text=True,
                         timeout=300, cwd=BENCH.parent)  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "seed 0:" not in out.stderr and "seed 1:" in out.stderr, out.stderr
    data = json.loads(path.read_text())
    assert [r["seed"] for r in data["runs"]] == [0, 1] and data["missing_seeds"] == []
    assert data["runs"][0] == first and data["wall_estimated"] is True


def test_preset_search_refuses_the_reported_seeds(tmp_path):
    out = subprocess.run(
        [sys.executable, "bench/preset_search.py", "--env", "CartPole-v1", "--grid", "cartpole",
         "--seeds", "15-24", "--results", str(tmp_path)],
        capture_output=True, text=True, timeout=120, cwd=BENCH.parent,
    )  # fmt: skip
    assert out.returncode != 0 and "seeds 0-19 are the reported seeds" in out.stderr
    assert not list(tmp_path.iterdir())


def test_ablation_bench_removes_one_component_per_row(tmp_path):
    results = tmp_path / "results"
    run("bench/ablation.py", "--envs", "CartPole-v1", "--seeds", "2", "--steps", "1000",
        "--only", "double DQN off", "--results", str(results))  # fmt: skip
    data = json.loads((results / "ablation_CartPole-v1.json").read_text())
    assert data["steps"] == 1000 and data["seeds"] == [0, 1]
    (row,) = data["variants"].values()
    assert row["overrides"] == {"double_dqn": False}
    # each final is the mean return of 20 whole CartPole episodes: a multiple of 1/20
    finals = row["finals"]
    assert len(finals) == 2 and all(8.0 <= f <= 500.0 for f in finals)
    assert all(abs(f * 20 - round(f * 20)) < 1e-6 for f in finals), finals
    out = tmp_path / "ablation.md"
    run("bench/ablation.py", "--report", "--results", str(results), "--out", str(out))
    # the report's row is these finals' IQM over the 2 seeds (their mean)
    assert f"| CartPole-v1 (1,000, 2) | double DQN off | {iqm(finals):.1f} [" in out.read_text()
    # rows of a preset that has changed since are marked, with the fields that changed
    data["config"] |= {"n_step": 1, "dueling": False}
    (results / "ablation_CartPole-v1.json").write_text(json.dumps(data))
    run("bench/ablation.py", "--report", "--results", str(results), "--out", str(out))
    table = out.read_text()
    assert "| CartPole-v1 (1,000, 2) (earlier preset) | double DQN off |" in table
    assert ("CartPole-v1: these rows are of an earlier `rainbow` preset, not re-run since its "
            "dueling, n_step changed") in table  # fmt: skip


def test_multiseed_scaling_bench_runs(tmp_path):
    out = run("bench/multiseed.py", "--steps", "300", "--seeds", "2", "--rounds", "2")
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if "env steps/s" in line}
    assert set(rows) == {"processes", "threads"}
    for row in rows.values():  # the ratio of medians, then one ratio per round
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[3].endswith("x") and len(cells[4].split(", ")) == 2


def test_vector_stages_bench_prints_the_side_by_side_split_and_every_stage():
    out = run("bench/vector_stages.py", "--quick")
    rows = {line.split("|")[1].strip() for line in out.splitlines() if line.startswith("| ")}
    assert {"1", "16"} <= rows and "N=16 / N=1:" in out
    for stage in ("env steps", "acting, 16 obs", "acting, 16 x one obs", "pushes", "one update"):
        assert any(row.startswith(stage) for row in rows), stage


@pytest.mark.parametrize("lib", ["ember_np", "ember_np-fused"])
def test_compare_sb3_speed_worker(lib):
    result = json.loads(
        run("bench/compare_sb3.py", "--worker", "speed", lib, "S1").splitlines()[-1]
    )
    assert np.isfinite(result["steps_per_s"]) and result["steps_per_s"] > 0
    # a process holding NumPy, numba and compiled kernels: tens to hundreds of MB, in MB
    assert 20 < result["peak_rss_mb"] < 4_096


def test_compare_sb3_memory_worker_counts_bytes_of_an_episodic_buffer():
    result = json.loads(run("bench/compare_sb3.py", "--worker", "memory", "ember_np", "8"))
    # 8 floats, uint8 action, reward, status, next_ref; a finals row and its
    # free-stack slot (32 + 8 bytes) per episode
    assert result["bytes_per_transition"] == pytest.approx(32 + 1 + 4 + 1 + 4 + 40 / 50, abs=0.05)


@pytest.mark.skipif(not HAS_SB3, reason="needs the bench extra (torch, stable-baselines3)")
def test_compare_sb3_memory_worker_for_sb3():
    result = json.loads(run("bench/compare_sb3.py", "--worker", "memory", "sb3", "8"))
    assert result["bytes_per_transition"] == 84.0


class _CountingArray(np.ndarray):
    """An array that adds 2 * m * k * n to ``FLOPS[0]`` for every matrix product it takes
    part in (numpy's ``@`` is the ``np.matmul`` ufunc); other ufuncs pass through."""

    FLOPS = [0]

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):  # noqa: ANN001, ANN204
        plain = [x.view(np.ndarray) if isinstance(x, _CountingArray) else x for x in inputs]
        if ufunc is np.matmul:
            a, b = plain
            _CountingArray.FLOPS[0] += 2 * a.shape[0] * a.shape[1] * b.shape[1]
        out = getattr(ufunc, method)(*plain, **kwargs)
        return out.view(_CountingArray) if isinstance(out, np.ndarray) else out


@pytest.mark.parametrize("double_dqn", [False, True])
@pytest.mark.parametrize("hidden", [(64, 64), (32,), (256, 128, 16)])
def test_floor_counts_the_flops_of_the_reference_update(hidden, double_dqn):
    """bench/floor.py's FLOP count of an update equals the matrix products that the plain
    NumPy reference (tests/naive.py: forward passes, then backprop) actually takes."""
    from floor import update_flops
    from naive import dqn_loss_and_grads

    from ember_np import DqnConfig

    config = DqnConfig(hidden_sizes=hidden, batch_size=48, double_dqn=double_dqn)
    obs_size, n_actions = 5, 3
    rng = np.random.default_rng(0)
    sizes = [obs_size, *hidden, n_actions]

    def arrays(*shapes):  # noqa: ANN202
        return [rng.standard_normal(s).astype(np.float32).view(_CountingArray) for s in shapes]

    weights = arrays(*zip(sizes[:-1], sizes[1:]))
    biases = arrays(*[(o,) for o in sizes[1:]])
    t_weights = arrays(*zip(sizes[:-1], sizes[1:]))
    t_biases = arrays(*[(o,) for o in sizes[1:]])
    obs, next_obs = arrays((48, obs_size), (48, obs_size))
    actions = rng.integers(0, n_actions, 48)
    rewards, masks = np.ones(48, np.float32), np.ones(48, np.float32)
    _CountingArray.FLOPS[0] = 0
    dqn_loss_and_grads(weights, biases, t_weights, t_biases, obs, actions, rewards, next_obs,
                       masks, 0.99, double_dqn=double_dqn)  # fmt: skip
    assert _CountingArray.FLOPS[0] > 0
    assert update_flops(config, obs_size, n_actions) == _CountingArray.FLOPS[0]


def test_floor_counts_the_updates_of_a_run_as_the_agent_takes_them():
    """bench/floor.py's schedule arithmetic gives the agent's own update count."""
    import gymnasium as gym
    from floor import updates_per_run

    from ember_np import DqnAgent, DqnConfig, DqnTrainer

    config = DqnConfig(hidden_sizes=(8,), batch_size=8, buffer_capacity=300, min_replay_size=40,
                       train_freq=3, gradient_steps=2)  # fmt: skip
    env = gym.make("CartPole-v1")
    agent = DqnAgent.for_env(env, config, seed=0)
    DqnTrainer(env, agent, seed=0).train(500)
    assert agent.n_updates == updates_per_run(config, 500) > 0


def test_learning_preset_keys_round_trip():
    from learning import preset_key, row_name, split_preset_key

    for preset, n in [("rainbow", None), ("rainbow", 4), ("zoo", 16), ("my-noisy", None)]:
        assert split_preset_key(preset_key(preset, n)) == (preset, n)
    assert row_name("ember_np", "rainbow-n4") == "ember_np rainbow, compiled env x 4"
    assert row_name("ember_np", "my-noisy") == "ember_np my-noisy"  # "-n" not a suffix


@pytest.mark.parametrize("batch", [256, 37])
def test_ppo_floor_counts_the_products_torch_runs_for_a_minibatch(batch):
    """bench/ppo_update.py's FLOPs of a minibatch equal the matrix products torch's
    autograd runs for the same forward and backward pass (torch's own FLOP counter:
    each Linear's product, its weight gradient, and its input gradient where the input
    needs one, so not for layers that read the observation)."""
    torch = pytest.importorskip("torch")
    from ppo_update import ZOO_CARTPOLE, TorchPPO, update_flops
    from torch.utils.flop_counter import FlopCounterMode

    from ember_np.ppo.network import ActorCritic
    from ember_np.rng import Rng

    model = TorchPPO(torch, ZOO_CARTPOLE, 4, 2)
    obs = torch.randn(batch, 4)
    with FlopCounterMode(display=False) as counter:
        logits, values = model.actor(obs), model.critic(obs)
        (logits.sum() + values.sum()).backward()
    net = ActorCritic(4, 2, ZOO_CARTPOLE, Rng(0))
    assert counter.get_total_flops() > 0
    assert update_flops(net, batch) == counter.get_total_flops()


def test_ppo_update_bench_runs():
    out = run("bench/ppo_update.py", "--quick")
    assert "MFLOP per transition" in out and "floors" in out


def test_ppo_speed_bench_writes_one_row_per_contestant(tmp_path):
    """bench/ppo_speed.py on a tiny budget: every contestant whose packages are here runs
    twice in fresh processes, and the JSON and the table hold its medians and ratios;
    one whose packages (or fused loop) are missing is a "not available" row."""
    import statistics
    from importlib.util import find_spec

    from ppo_speed import LABELS

    names = ["ember_np", "ember_np-fused"]
    names += ["sb3"] * HAS_SB3 + ["cleanrl"] * (find_spec("torch") is not None)
    names += ["purejaxrl"] * all(find_spec(m) for m in ("jax", "gymnax", "flax", "optax"))
    out, results = tmp_path / "speed.md", tmp_path / "speed.json"
    run("bench/ppo_speed.py", "--steps", "1024", "--reps", "2", "--only", ",".join(names),
        "--out", str(out), "--json", str(results), timeout=900)  # fmt: skip
    data = json.loads(results.read_text())
    assert list(data["contestants"]) == names and data["meta"]["steps"] == 1024
    assert data["meta"]["threads"]["OPENBLAS_NUM_THREADS"] == "1"
    table = out.read_text()
    for name, c in data["contestants"].items():
        (row,) = [line for line in table.splitlines() if line.startswith(f"| {LABELS[name]} |")]
        if not c["available"]:
            assert name == "ember_np-fused" and "not available" in row and c["reason"]
            continue
        runs = c["runs"]
        assert len(runs) == 2
        for r in runs:
            # the window starts after the 2nd rollout's update: 2 x 8 envs x 32 steps, less
            # any reset rows, before it; the run ends once the budget is spent
            assert 0 < r["steps"] - r["window_steps"] <= 512 < 1024 <= r["steps"] + 256
            assert r["steps_per_s"] == pytest.approx(r["window_steps"] / r["window_s"])
            assert r["wall_s"] > r["window_s"] > 0 and r["cpu_s"] > 0
            assert 8 <= r["eval_mean"] <= 500  # a mean of whole CartPole episodes
        med = c["median"]
        assert med["steps_per_s"] == statistics.median(r["steps_per_s"] for r in runs)
        assert med["wall_s"] == statistics.median(r["wall_s"] for r in runs)
        assert f"| {med['steps_per_s']:,.0f} |" in row and f"| {med['wall_s']:.1f} |" in row
        if "sb3" in names:
            sb3 = data["contestants"]["sb3"]["median"]
            assert c["vs_sb3"]["steady"] == pytest.approx(med["steps_per_s"] / sb3["steps_per_s"])
            assert c["vs_sb3"]["whole"] == pytest.approx(sb3["wall_s"] / med["wall_s"])
            pairs = zip(runs, data["contestants"]["sb3"]["runs"])
            assert c["vs_sb3"]["steady_per_rep"] == [r["steps_per_s"] / q["steps_per_s"]
                                                     for r, q in pairs]  # fmt: skip
    ember = data["contestants"]["ember_np"]["median"]
    assert ember["compile_s"] is None and "OpenBLAS" in data["contestants"]["ember_np"]["blas"]


def test_ppo_speed_bench_refuses_an_unknown_contestant():
    out = subprocess.run([sys.executable, "bench/ppo_speed.py", "--only", "ember_np,rllib"],
                         capture_output=True, text=True, timeout=60, cwd=BENCH.parent)  # fmt: skip
    assert out.returncode == 2 and "unknown contestants ['rllib']" in out.stderr

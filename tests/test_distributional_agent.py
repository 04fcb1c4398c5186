"""Distributional heads (C51, QR-DQN) in the agent: the Python and fused loops
agree bit for bit (with dueling, LayerNorm, double DQN, 3-step returns and
prioritized replay at once), resume is exact, checkpoints record the head and
refuse another, DqnPolicy (both backends) and ONNX give the expected values and
the agent's actions, and a short CartPole run learns with each head.

The kernels themselves are tests/test_distributional.py's.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import helpers
import naive
import numpy as np
import pytest
from helpers import CARTPOLE_AGENT, cartpole_trainer

import ember_np.envs  # noqa: F401  (registers ember_np/CartPole-v1)
from ember_np import CheckpointError, DqnAgent, DqnConfig, DqnPolicy

HEADS = {
    "c51": dict(distributional="c51", n_atoms=21, v_min=0.0, v_max=60.0),
    "qr": dict(distributional="qr", n_quantiles=16),
}
#: Every other component at once: the heads must compose with all of them.
RAINBOW = dict(dueling=True, layer_norm=True, double_dqn=True, n_step=3, prioritized_replay=True)

# one pytest-xdist worker for this module and tests/test_distributional.py (see there)
pytestmark = pytest.mark.xdist_group("distributional")


def config_for(head, **kw):
    return CARTPOLE_AGENT.replace(**HEADS[head], **kw)


@pytest.fixture(scope="module", params=list(HEADS))
def trained(request):
    """The same agent trained by the fused loop and by the Python loop."""
    config = config_for(request.param, **RAINBOW)
    fused, python = cartpole_trainer(config), cartpole_trainer(config, fused=False)
    losses = helpers.train_both_loops(fused, python)
    return request.param, fused, python, losses


def test_both_loops_train_identically(trained):
    head, fused, python, losses = trained
    agent = fused.agent
    assert agent.online.head == agent.config.head and agent.online.head.kind == head
    assert agent.n_updates > 1_000 and np.isfinite(losses).all()
    assert helpers.saved_state(fused.agent) == helpers.saved_state(python.agent)  # priorities too
    # prioritized replay got the head's priorities: not all at the initial maximum
    priorities = agent.buffer.priorities()
    assert np.unique(priorities).size > 100
    assert agent.online.weights[-1].shape == (32, agent.online.head.n_atoms)  # V per atom


def test_config_setter_and_cli_override(trained):
    from ember_np.training.setup import parse_sets

    agent = trained[1].agent
    for change in ({"distributional": None}, {"distributional": "qr" if trained[0] == "c51"
                                               else "c51"}):  # fmt: skip
        with pytest.raises(ValueError, match="config.distributional=.* does not match the network"):
            agent.config = agent.config.replace(**change)
    assert DqnConfig(**parse_sets(["distributional=c51", "v_max=200"])).head.v_max == 200.0
    assert DqnConfig(**parse_sets(["distributional=null"])).head is None


@pytest.mark.parametrize("head", list(HEADS))
def test_exact_resume(tmp_path, head):
    a = cartpole_trainer(config_for(head, **RAINBOW))
    a.train(700)
    original = a.agent
    restored = helpers.check_exact_resume(original, tmp_path / "a.npz", 400, helpers.saved_state)
    assert restored.online.head == original.online.head
    assert original.total_steps == restored.total_steps == 1_100


def test_checkpoints_record_the_head_and_refuse_another(tmp_path):
    agents = {
        "c51": cartpole_trainer(config_for("c51")).agent,
        "c51 wider": cartpole_trainer(config_for("c51").replace(v_max=100.0)).agent,
        "qr": cartpole_trainer(config_for("qr")).agent,
        "plain": cartpole_trainer(CARTPOLE_AGENT).agent,
    }
    paths = {name: agent.save(tmp_path / f"{name}.npz") for name, agent in agents.items()}
    names = {"c51": "with a C51 head \\(21 atoms on \\[0, 60\\]\\)",
             "c51 wider": "with a C51 head \\(21 atoms on \\[0, 100\\]\\)",
             "qr": "with a QR-DQN head \\(16 quantiles\\)",
             "plain": "with a plain Q head \\(not distributional\\)"}  # fmt: skip
    for mine, agent in agents.items():
        for theirs, path in paths.items():
            if mine == theirs:
                continue
            before = agent.online.params.copy()
            with pytest.raises(
                CheckpointError,
                match=f"this agent's network is {names[mine]}, the checkpoint's is {names[theirs]}",
            ):
                agent.load(path)
            np.testing.assert_array_equal(agent.online.params, before)  # nothing changed
    with np.load(paths["qr"]) as z:
        assert json.loads(str(z["online/distributional"])) == {
            "kind": "qr", "n_atoms": 16, "v_min": 0.0, "v_max": 0.0}  # fmt: skip
    assert "online/distributional" not in np.load(paths["plain"]).files  # plain files unchanged
    assert DqnAgent.from_checkpoint(paths["c51 wider"]).online.head.v_max == 100.0
    assert DqnPolicy.load(paths["qr"]).head.kind == "qr"


# -- inference: DqnPolicy and ONNX ------------------------------------------------------


def expected_q(agent, x):
    net = agent.online
    head = net.head
    out = naive.dist_outputs(net.params, net.layer_sizes, net.dueling, net.layer_norm,
                             head.n_atoms, x)  # fmt: skip
    return naive.dist_expected((head.kind, head.n_atoms, head.v_min, head.v_max), out)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_policy_gives_expected_values_and_the_agents_actions(trained, tmp_path, backend):
    agent = trained[1].agent
    policy = DqnPolicy.load(agent.save(tmp_path / "agent.npz"), backend=backend)
    assert policy.head == agent.online.head and policy.backend == backend
    x = np.random.default_rng(0).normal(0.0, 1.5, (200, 4)).astype(np.float32)
    expected = expected_q(agent, x)
    for p in (policy, agent.into_policy(), pickle.loads(pickle.dumps(policy))):
        np.testing.assert_allclose(p.q_values_batch(x), expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(p.q_values(x[3]), expected[3], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(p.act_batch(x), agent.online.greedy_actions(x))
        assert [p.act(row) for row in x[:20]] == [agent.act(row) for row in x[:20]]
        legal = np.array([False, True])
        assert p.act(x[0], action_mask=legal) == agent.act(x[0], action_mask=legal) == 1
        with pytest.raises(ValueError, match="NaN or inf"):
            p.act(np.array([0.0, np.nan, 0.0, 0.0]))
    np.testing.assert_allclose(agent.online.forward(x), expected, rtol=1e-5, atol=1e-5)
    assert np.ptp(agent.online.greedy_actions(x)) > 0  # both actions occur: not vacuous


def test_numpy_policy_of_a_distributional_head_never_imports_numba(trained, tmp_path):
    path = trained[1].agent.save(tmp_path / "agent.npz")
    code = textwrap.dedent(f"""
        import sys
        import numpy as np
        from ember_np.policy import DqnPolicy
        policy = DqnPolicy.load({str(path)!r}, backend="numpy")
        policy.q_values_batch(np.zeros((3, 4), np.float32))
        print(policy.head.kind, "numba" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)  # fmt: skip
    assert out.stdout.split() == [trained[0], "False"]


@pytest.mark.parametrize("dueling", [False, True], ids=["plain", "dueling"])
@pytest.mark.parametrize("head", list(HEADS))
def test_onnx_export_matches_onnxruntime(tmp_path, head, dueling):
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from ember_np.export import export_onnx

    agent = cartpole_trainer(config_for(head, dueling=dueling, layer_norm=True)).agent
    agent.online.params[...] *= np.float32(2.0)  # wider outputs than at initialisation
    path = tmp_path / "model.onnx"
    meta = export_onnx(agent.save(tmp_path / "agent.npz"), path)
    assert json.loads(meta["distributional"]) == agent.online.head.to_dict()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((40, 4)).astype(np.float32)
    q, dist = session.run(["q_values", "distribution"], {"obs": x})
    policy = agent.into_policy()
    np.testing.assert_allclose(q, policy.q_values_batch(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(q, expected_q(agent, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dist, agent.online.distribution(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.argmax(q, axis=1), policy.act_batch(x))


# -- learning ------------------------------------------------------------------------------


@pytest.mark.parametrize("head", list(HEADS))
def test_short_cartpole_run_learns(head):
    """With each head a short fused run balances CartPole far longer than chance
    (a random policy lasts about 22 steps)."""
    config = config_for(head, hidden_sizes=(64, 64), buffer_capacity=10_000,
                        min_replay_size=1_000, target_update_freq=200, epsilon_end=0.01,
                        epsilon_decay_steps=10_000, double_dqn=True)  # fmt: skip
    t = cartpole_trainer(config)
    best = -np.inf
    for _ in range(4):
        t.train(6_000)
        best = max(best, t.eval(10).mean_reward)
    assert best >= 150


def test_ablation_replaces_a_distributional_head_by_the_plain_one():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from ablation import variants

    for head in ("c51", "qr"):
        rows = dict(variants(DqnConfig(distributional=head)))
        assert rows["distributional off"] == {"distributional": None}
        plain = DqnConfig(distributional=head).replace(**rows["distributional off"])
        assert plain.distributional is None
    assert "distributional off" not in dict(variants(DqnConfig()))

"""PPOPolicy: a PPO checkpoint's greedy actor in NumPy alone, acting as the agent does."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
from test_policy_numpy import BLOCK_HEAVY

from ember_np import DqnTrainer
from ember_np.checkpoint import CheckpointError
from ember_np.encoding import IndexActionMapper, encoder_for_space
from ember_np.ppo.agent import PPOAgent
from ember_np.ppo.checkpoint_format import LAYER_COLUMNS
from ember_np.ppo.config import PPOConfig
from ember_np.ppo.network import A_OFF, ACT, N_IN, N_OUT, ROLE, SRC, W_OFF
from ember_np.ppo.policy import PPOPolicy


@pytest.fixture(scope="module", params=[(False, "tanh"), (True, "relu")], ids=["tanh", "relu"])
def saved(request, tmp_path_factory):  # noqa: ANN001, ANN201
    """A trained agent (observations normalised; shared trunk with ReLU, or not) and its
    checkpoint."""
    shared, activation = request.param
    env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(2)])
    config = PPOConfig(n_steps=32, batch_size=32, n_epochs=2, normalize_obs=True,
                       shared_trunk=shared, activation=activation)  # fmt: skip
    agent = PPOAgent(encoder_for_space(env.single_observation_space),
                     IndexActionMapper.for_space(env.single_action_space), config, seed=0)  # fmt: skip
    DqnTrainer(env, agent, seed=0).train(300)
    path = agent.save(tmp_path_factory.mktemp("ppo") / "agent.npz")
    return agent, path


def test_the_layer_table_columns_are_the_networks():
    assert [N_IN, N_OUT, W_OFF, SRC, A_OFF, ACT, ROLE] == list(range(len(LAYER_COLUMNS)))


def test_the_policy_gives_the_agents_logits_and_greedy_actions(saved):
    """On 500 observations: logits within float32 rounding of the compiled forward pass
    (normalisation included), and the same argmax wherever two logits are not within
    that rounding of each other."""
    agent, path = saved
    policy = PPOPolicy.load(path)
    obs = np.random.default_rng(0).uniform(-2.5, 2.5, (500, 4)).astype(np.float32)
    x = agent.normalizer.apply_obs(obs)
    logits, _ = agent.net.forward(x)
    np.testing.assert_allclose(policy.logits_batch(obs), logits, rtol=1e-4, atol=1e-5)
    clear = np.abs(logits[:, 0] - logits[:, 1]) > 1e-4
    assert clear.sum() > 400
    greedy = agent.net.act(x, agent.act_rng, deterministic=True)[0]
    np.testing.assert_array_equal(policy.act_batch(obs)[clear], greedy[clear])
    assert policy.act(obs[0]) == policy.act_batch(obs[:1])[0]
    assert agent.act(obs[0]) == greedy[0] or not clear[0]


def test_the_policy_needs_numpy_alone(saved):
    """With numba, llvmlite, gymnasium and tqdm made unimportable, a policy loads and acts."""
    _, path = saved
    code = BLOCK_HEAVY + textwrap.dedent(
        f"""
        import json
        from ember_np.ppo.policy import PPOPolicy

        policy = PPOPolicy.load({str(path)!r})
        print(json.dumps([int(policy.act([0.01 * i, 0.0, 0.02, -0.01])) for i in range(5)]))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert set(json.loads(out.stdout.strip().splitlines()[-1])) <= {0, 1}


def test_another_file_is_refused_naming_what_it_is(tmp_path):
    path = tmp_path / "other.npz"
    np.savez(path, format=np.array("ember_np.dqn"), format_version=np.int64(1))
    with pytest.raises(CheckpointError, match="ember_np.dqn"):
        PPOPolicy.load(path)


def test_a_nonfinite_or_misshapen_observation_is_refused(saved):
    _, path = saved
    policy = PPOPolicy.load(path)
    with pytest.raises(ValueError, match=r"obs_batch\[1\]"):
        policy.act_batch([[0.0, 0.0, 0.0, 0.0], [0.0, float("nan"), 0.0, 0.0]])
    with pytest.raises(ValueError, match=r"observations of shape \(batch, \*\(4,\)\)"):
        policy.act_batch([[0.0, 0.0, 0.0]])

"""``action_masks=False`` with an env that hands out ``info["action_mask"]``: the mask is ignored.

The README's opt-out (``--set action_masks=false``) must train, evaluate and
tune on Taxi, whose every ``info`` carries a mask; and ``ember-np tune``
turns masks on for such an env exactly as ``ember-np train`` does.
"""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from helpers import SMALL_SLOW_TARGET
from test_action_masks import taxi_id

from ember_np import DqnAgent, DqnTrainer
from ember_np.cli import main

SMALL = SMALL_SLOW_TARGET


class OnlyFirstLegal(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Taxi whose masks allow action 0 only; records each (observation, action) it is given."""

    def __init__(self, env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self.seen: list[tuple[int, int]] = []

    def _masked(self, info):
        mask = np.zeros(6, dtype=np.int8)
        mask[0] = 1
        return {**info, "action_mask": mask}

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.obs = obs
        return obs, self._masked(info)

    def step(self, action):
        self.seen.append((int(self.obs), int(action)))
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.obs = obs
        return obs, reward, terminated, truncated, self._masked(info)


def test_an_agent_without_masks_trains_and_evaluates_ignoring_the_envs_masks():
    env = OnlyFirstLegal(gym.make(taxi_id()))
    eval_env = OnlyFirstLegal(gym.make(taxi_id()))
    agent = DqnAgent.for_env(env, SMALL, seed=2)
    trainer = DqnTrainer(env, agent, seed=2, eval_env=eval_env)
    trainer.train(300)
    assert agent.total_steps == 300 and agent.n_updates > 0
    assert agent.buffer.next_action_masks.shape[0] == 0  # no masks stored
    assert any(a != 0 for _, a in env.seen)  # exploration ignored the "only 0" mask
    trainer.eval(1)
    # greedy evaluation picks the unmasked argmax, not the only "legal" action
    assert [a for _, a in eval_env.seen] == [int(agent.act(o)) for o, _ in eval_env.seen]
    assert any(a != 0 for _, a in eval_env.seen)


def test_an_agent_without_masks_warns_once_that_the_envs_masks_are_ignored():
    import warnings

    from ember_np import DqnConfig

    agent = DqnAgent.for_env(OnlyFirstLegal(gym.make(taxi_id())), SMALL, seed=2)
    trainer = DqnTrainer(OnlyFirstLegal(gym.make(taxi_id())), agent, seed=2)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        trainer.train(250)  # a Taxi episode is 200 steps: two resets, 250 steps with masks
    ignored = [w for w in said if "action_masks=False" in str(w.message)]
    assert len(ignored) == 1, [str(w.message) for w in said]
    assert ignored[0].category is UserWarning
    assert "the env puts an action_mask in info" in str(ignored[0].message)
    assert "DqnConfig(action_masks=True)" in str(ignored[0].message)
    # masks on, or an env without masks: no such warning
    masked = DqnAgent.for_env(gym.make(taxi_id()), SMALL.replace(action_masks=True), seed=2)
    plain = DqnAgent.for_env(gym.make("CartPole-v1"), DqnConfig(hidden_sizes=(8,)), seed=2)
    for env_id, other in ((taxi_id(), masked), ("CartPole-v1", plain)):
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            DqnTrainer(gym.make(env_id), other, seed=2).train(50)
        assert not [w for w in said if "action_masks=False" in str(w.message)]


def test_a_vector_trainer_without_masks_warns_once_too():
    import warnings

    env = gym.make_vec(taxi_id(), 2, vectorization_mode="sync", wrappers=[OnlyFirstLegal])
    agent = DqnAgent.for_env(gym.make(taxi_id()), SMALL, seed=2)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        DqnTrainer(env, agent, seed=2).train(100)
    assert len([w for w in said if "action_masks=False" in str(w.message)]) == 1


def test_cli_train_with_masks_off_trains_and_evaluates_taxi(tmp_path, capsys):
    env_id = taxi_id()
    assert (
        main(
            [
                "train",
                env_id,
                "--steps",
                "300",
                "--eval-every",
                "300",
                "--eval-episodes",
                "1",
                "--root",
                str(tmp_path),
                "--set",
                "action_masks=false",
                "min_replay_size=32",
                "batch_size=16",
                "buffer_capacity=1000",
                "hidden_sizes=[16]",
                "--quiet",
            ]
        )
        == 0
    )
    assert "training with action masks" not in capsys.readouterr().out
    (run_dir,) = (tmp_path / env_id / "default").iterdir()
    assert json.loads((run_dir / "config.json").read_text())["dqn"]["action_masks"] is False
    assert main(["eval", str(run_dir), "--episodes", "1"]) == 0


def test_tune_builds_taxi_configs_as_train_does_and_its_trials_run(capsys):
    pytest.importorskip("optuna")
    from ember_np.cli import build_parser
    from ember_np.cli.tune import settings_from_args
    from ember_np.tune import config_for, evaluate_config

    tiny = [
        "--steps",
        "200",
        "--seeds",
        "1",
        "--evals",
        "1",
        "--eval-episodes",
        "1",
        "--set",
        "hidden_sizes=[16]",
        "batch_size=16",
        "min_replay_size=32",
        "buffer_capacity=1000",
    ]
    for sets, masks in [([], True), (["action_masks=false"], False)]:
        args = build_parser().parse_args(["tune", taxi_id(), *tiny, *sets])
        settings = settings_from_args(args)
        config = config_for(settings, {})
        assert config.action_masks is masks  # train turns them on for Taxi too
        assert ("training with action masks" in capsys.readouterr().out) is masks
        (score,) = evaluate_config(settings, config, [0])  # a trial's training and evaluation
        assert -2000.0 <= score <= 20.0  # 200 steps of -1, or -10 for an illegal move


@pytest.mark.parametrize("env_id", ["ember_np/CartPole-v1", "ember_np/Acrobot-v1",
                                    "ember_np/MountainCar-v0"])  # fmt: skip
def test_native_envs_give_no_masks_and_are_not_made_to_say_so(env_id):
    from ember_np.training.setup import NATIVE_IDS, gives_masks
    from ember_np.training.trainer import action_mask_of

    assert env_id in NATIVE_IDS.values()
    env = gym.make(env_id)
    for seed in range(3):  # the answer the shortcut gives is the env's own
        _, info = env.reset(seed=seed)
        assert action_mask_of(info) is None
        _, _, _, _, info = env.step(env.action_space.sample())
        assert action_mask_of(info) is None

    def refuse(name):
        raise AssertionError(f"{name} was made to probe its reset")

    assert gives_masks(env_id, refuse) is False
    assert gives_masks(taxi_id(), gym.make) is True  # a Python env is still probed

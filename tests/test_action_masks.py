"""Action masks: no illegal action is ever chosen, explored or bootstrapped from.

References are plain NumPy: the masked argmax is ``np.where(legal, q, -inf).argmax()``
and the masked TD target is written out per row. The Taxi env (Discrete
observations, ``info["action_mask"]``) exercises the one-hot encoder and the
trainer's mask plumbing end to end.
"""

from __future__ import annotations

import pickle
import warnings
from functools import partial

import gymnasium as gym
import numpy as np
import pytest
from helpers import MASKED
from helpers import make_agent as shared_make_agent

from ember_np import (
    Batch,
    CircularBuffer,
    DqnAgent,
    DqnConfig,
    DqnPolicy,
    DqnTrainer,
    IndexActionMapper,
    OneHotEncoder,
    PrioritizedBuffer,
    QNetwork,
    Rng,
    UpdateOptions,
    VecEncoder,
)

N_OBS, N_ACT = 5, 11  # 11 actions: two bytes of packed bits, 5 padding bits

SMALL = MASKED


def taxi_id() -> str:
    """Taxi-v3, or Taxi-v4 where gymnasium has retired v3 (gymnasium >= 1.3)."""
    return "Taxi-v3" if "Taxi-v3" in gym.registry and _makes("Taxi-v3") else "Taxi-v4"


def _makes(env_id: str) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            gym.make(env_id)
        return True
    except gym.error.Error:
        return False


def random_masks(rng: np.random.Generator, n: int, n_actions: int = N_ACT) -> np.ndarray:
    """``n`` random bool masks, each with at least one legal action."""
    masks = rng.random((n, n_actions)) < 0.4
    masks[np.arange(n), rng.integers(n_actions, size=n)] = True
    return masks


def masked_argmax(q: np.ndarray, legal: np.ndarray) -> np.ndarray:
    """The reference: first maximum of q over the legal actions, per row."""
    return np.where(legal, q, -np.inf).argmax(axis=-1)


make_agent = partial(shared_make_agent, config=SMALL, obs_size=N_OBS, n_actions=N_ACT)


def masks_excluding_argmax(q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Random masks under which each row's unmasked argmax is illegal."""
    masks = random_masks(rng, q.shape[0], q.shape[1])
    best = q.argmax(axis=1)
    masks[np.arange(q.shape[0]), best] = False
    other = (best + 1 + rng.integers(q.shape[1] - 1, size=q.shape[0])) % q.shape[1]
    masks[np.arange(q.shape[0]), other] = True
    return masks


# -- acting ----------------------------------------------------------------------------


def test_greedy_agent_never_picks_an_illegal_action():
    agent = make_agent()
    data = np.random.default_rng(1)
    obs = data.standard_normal((200, N_OBS)).astype(np.float32)
    q = agent.online.forward(obs)
    masks = masks_excluding_argmax(q, data)
    want = masked_argmax(q, masks)
    got = np.array([agent.act(o, action_mask=m) for o, m in zip(obs, masks)])
    assert masks[np.arange(200), got].all()
    np.testing.assert_array_equal(got, want)
    assert (got != q.argmax(axis=1)).all()  # the masks mattered
    # gymnasium's int8 masks give the same actions
    got8 = [agent.act(o, action_mask=m.astype(np.int8)) for o, m in zip(obs, masks)]
    np.testing.assert_array_equal(got8, want)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_policy_act_and_act_batch_obey_masks(backend):
    agent = make_agent(seed=2)
    policy = DqnPolicy(agent.online.layer_sizes, agent.online.params.copy(), agent.encoder,
                       IndexActionMapper(N_ACT, start=3), backend)  # fmt: skip
    assert policy.backend == backend
    data = np.random.default_rng(3)
    obs = data.standard_normal((64, N_OBS)).astype(np.float32)
    q = agent.online.forward(obs)
    masks = masks_excluding_argmax(q, data)
    want = masked_argmax(q, masks) + 3
    np.testing.assert_array_equal(policy.act_batch(obs, action_masks=masks), want)
    np.testing.assert_array_equal([policy.act(o, action_mask=m) for o, m in zip(obs, masks)], want)
    np.testing.assert_array_equal(policy.act_batch(obs), q.argmax(axis=1) + 3)  # no masks


def test_exploration_is_uniform_over_the_legal_actions_only():
    agent = make_agent(config=SMALL.replace(epsilon_start=1.0, epsilon_end=1.0), seed=4)
    obs = np.zeros(N_OBS, dtype=np.float32)
    legal = np.zeros(N_ACT, dtype=bool)
    legal[[0, 3, 4, 10]] = True
    draws = np.array([agent.act_epsilon_greedy(obs, action_mask=legal) for _ in range(4000)])
    counts = np.bincount(draws, minlength=N_ACT)
    assert counts[~legal].sum() == 0
    assert (counts[legal] > 0).all()
    # uniform: each of the 4 legal actions ~1000 times (binomial sd ~27)
    assert np.abs(counts[legal] - 1000).max() < 150
    # act_encoded with another stream draws the same way
    rng = Rng(9)
    idx = [agent.act_encoded(obs, rng, action_mask=legal) for _ in range(500)]
    assert set(idx) == {0, 3, 4, 10}


def test_the_next_action_obeys_the_next_mask_while_exploring_and_greedy():
    data = np.random.default_rng(5)
    for eps in (1.0, 0.0):
        config = SMALL.replace(epsilon_start=eps, epsilon_end=eps)
        agent = make_agent(config=config, seed=6)
        for _ in range(150):
            x = data.standard_normal(N_OBS).astype(np.float32)
            nx = data.standard_normal(N_OBS).astype(np.float32)
            mask = random_masks(data, 1)[0]
            index = agent.observe_encoded(x, int(data.integers(N_ACT)), 1.0, nx, 0, True,
                                          next_action_mask=mask)  # fmt: skip
            assert mask[index]


# -- the TD target -----------------------------------------------------------------------


def reference_targets(online, target, batch, legal, gamma, double):
    """y_i = r_i + gamma * mask_i * Q_target(s'_i, a*_i), a* over the legal actions."""
    q_target = target.forward(batch["next_obs"]).astype(np.float64)
    chooser = online.forward(batch["next_obs"]) if double else q_target
    best = masked_argmax(chooser, legal)
    rows = np.arange(len(best))
    y = batch["rewards"] + gamma * batch["masks"] * q_target[rows, best]
    return y, best, chooser.argmax(axis=1)


@pytest.mark.parametrize("double", [False, True])
def test_td_target_maximises_over_the_next_legal_actions(double):
    data = np.random.default_rng(7 + double)
    online = QNetwork((N_OBS, 16, N_ACT), seed=1)
    target = QNetwork((N_OBS, 16, N_ACT), seed=2)
    b = 32
    batch = {
        "obs": data.standard_normal((b, N_OBS)).astype(np.float32),
        "actions": data.integers(N_ACT, size=b),
        "rewards": data.standard_normal(b).astype(np.float32),
        "next_obs": data.standard_normal((b, N_OBS)).astype(np.float32),
        "masks": (data.random(b) < 0.8).astype(np.float32),
    }
    chooser = online if double else target
    legal = masks_excluding_argmax(chooser.forward(batch["next_obs"]), data)
    y, best, unmasked_best = reference_targets(online, target, batch, legal, 0.9, double)
    assert (best != unmasked_best).all()  # every row would bootstrap elsewhere unmasked
    q = online.forward(batch["obs"]).astype(np.float64)[np.arange(b), batch["actions"]]
    td = np.empty(b, dtype=np.float32)
    online.update(Batch(batch["obs"], batch["actions"], batch["rewards"], batch["next_obs"], batch["masks"]), target, UpdateOptions(gamma=0.9, learning_rate=1e-3, double_dqn=double), next_action_masks=legal, td_errors_out=td)  # fmt: skip
    np.testing.assert_allclose(td, np.abs(q - y), rtol=1e-5, atol=1e-5)
    # and without masks the target would have been another one
    y_free, *_ = reference_targets(online, target, batch, np.ones_like(legal), 0.9, double)
    live = batch["masks"] > 0
    assert not np.allclose(y[live], y_free[live])


def test_the_agent_trains_on_the_masks_its_buffer_stored():
    """The agent's compiled update (sample + update) equals sampling the buffer with the
    same stream and calling QNetwork.update with the unpacked next-state masks."""
    agent = make_agent(config=SMALL.replace(double_dqn=True, min_replay_size=40), seed=8)
    data = np.random.default_rng(9)
    for _ in range(39):
        x = data.standard_normal(N_OBS).astype(np.float32)
        nx = data.standard_normal(N_OBS).astype(np.float32)
        agent.observe_encoded(x, int(data.integers(N_ACT)), float(data.standard_normal()), nx,
                              int(data.integers(3)), next_action_mask=random_masks(data, 1)[0])  # fmt: skip
    assert agent.n_updates == 0
    online, target = agent.online.copy(), agent.target.copy()
    before = agent.online.copy()
    replay = Rng(0)
    replay.state = agent.replay_rng.state.copy()
    batch = agent.buffer.sample(SMALL.batch_size, replay)
    legal = np.unpackbits(batch.next_action_masks, axis=1, count=N_ACT).astype(bool)
    online.update(batch[:5], target, UpdateOptions(gamma=SMALL.gamma, learning_rate=SMALL.learning_rate, double_dqn=True), next_action_masks=legal)  # fmt: skip
    unmasked, target2 = before.copy(), agent.target.copy()
    unmasked.update(batch[:5], target2, UpdateOptions(gamma=SMALL.gamma, learning_rate=SMALL.learning_rate, double_dqn=True))  # fmt: skip
    agent.train_steps(1)
    np.testing.assert_array_equal(agent.online.params, online.params)
    assert not np.array_equal(agent.online.params, unmasked.params)  # the masks mattered


# -- storage --------------------------------------------------------------------------------


def fill(buf: CircularBuffer, n: int, seed: int) -> np.ndarray:
    data = np.random.default_rng(seed)
    masks = random_masks(data, n, buf.num_actions)
    for i in range(n):
        x = data.standard_normal(buf.obs_size).astype(np.float32)
        mask = masks[i] if buf.action_masks else None
        buf.push(x, int(data.integers(buf.num_actions)), 1.0, x + 1, 0, next_action_mask=mask)
    return masks


def test_masks_are_stored_as_packed_bits_across_wraparound():
    buf = CircularBuffer(20, N_OBS, N_ACT, action_masks=True)
    assert buf.next_action_masks.shape == (20, 2)  # ceil(11 / 8) bytes per slot
    masks = fill(buf, 47, seed=10)
    # slot i holds push number 40 + i for i < 7, else 20 + i (47 pushes into 20 slots)
    newest = np.concatenate([masks[40:], masks[27:40]])
    np.testing.assert_array_equal(buf.next_action_masks, np.packbits(newest, axis=1))
    plain = CircularBuffer(20, N_OBS, N_ACT)
    fill(plain, 47, seed=10)
    assert plain.next_action_masks.size == 0
    assert buf.nbytes - plain.nbytes == 20 * 2  # the only cost of masks
    # a push without a mask stores "all legal"
    buf.push(np.zeros(N_OBS, np.float32), 0, 0.0, np.zeros(N_OBS, np.float32), 1)
    np.testing.assert_array_equal(
        buf.next_action_masks[buf.position - 1], np.packbits(np.ones(N_ACT, bool))
    )


def test_sampled_batches_carry_each_transitions_mask():
    buf = CircularBuffer(30, N_OBS, N_ACT, action_masks=True)
    fill(buf, 30, seed=11)
    batch = buf.sample(30, Rng(1))
    stored = {bytes(buf.storage["obs"][i].tobytes()): buf.next_action_masks[i] for i in range(30)}
    for obs, bits in zip(batch.obs, batch.next_action_masks):
        np.testing.assert_array_equal(bits, stored[obs.tobytes()])
    assert buf.sample(4, Rng(1), out=buf.empty_batch(4)).next_action_masks.shape == (4, 2)


def test_masked_buffer_state_round_trips_exactly():
    buf = CircularBuffer(25, N_OBS, N_ACT, action_masks=True)
    fill(buf, 33, seed=12)
    state = buf.state_dict()
    assert state["next_action_masks"].dtype == np.uint8
    again = CircularBuffer(25, N_OBS, N_ACT, action_masks=True)
    again.load_state_dict(state)
    np.testing.assert_array_equal(again.next_action_masks, buf.next_action_masks)
    a, b = buf.sample(25, Rng(3)), again.sample(25, Rng(3))
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    copy = pickle.loads(pickle.dumps(buf))
    assert copy.action_masks
    np.testing.assert_array_equal(copy.next_action_masks, buf.next_action_masks)
    with pytest.raises(ValueError, match="built without action masks"):
        CircularBuffer(25, N_OBS, N_ACT).load_state_dict(state)
    with pytest.raises(ValueError, match="no 'next_action_masks'"):
        again.load_state_dict(CircularBuffer(25, N_OBS, N_ACT).state_dict())
    bad = dict(state, next_action_masks=np.zeros_like(state["next_action_masks"]))
    with pytest.raises(ValueError, match="no legal action"):
        again.check_state_dict(bad)


# -- errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (np.zeros(N_ACT, dtype=bool), "allows no action"),
        (np.ones(N_ACT - 1, dtype=bool), r"action_mask of shape \(11,\)"),
        (np.ones(N_ACT, dtype=np.float32), "boolean-like"),
        (np.full(N_ACT, 2, dtype=np.int8), "only 0 and 1"),
        (np.array([-1] + [1] * (N_ACT - 1), dtype=np.int8), "only 0 and 1"),
        (["yes"] * N_ACT, "boolean-like"),
    ],
)
def test_bad_masks_are_clear_errors_everywhere(mask, message):
    agent = make_agent()
    obs = np.zeros(N_OBS, dtype=np.float32)
    policy = agent.into_policy()
    for call in (
        lambda: agent.act(obs, action_mask=mask),
        lambda: agent.act_epsilon_greedy(obs, action_mask=mask),
        lambda: policy.act(obs, action_mask=mask),
        lambda: agent.observe_encoded(obs, 0, 0.0, obs, 0, True, next_action_mask=mask),
    ):
        with pytest.raises(ValueError, match=message):
            call()
    assert len(agent.buffer) == 0  # nothing stored


def test_mask_errors_of_batches_and_unmasked_agents():
    agent = make_agent(config=SMALL.replace(action_masks=False))
    obs = np.zeros(N_OBS, dtype=np.float32)
    legal = np.ones(N_ACT, dtype=bool)
    assert agent.act(obs, action_mask=legal) == agent.act(obs)  # acting with a mask: any agent
    frozen = np.zeros(N_ACT, dtype=np.int8)
    frozen[3] = 1
    frozen.flags.writeable = False  # read-only masks are copied, not a second compiled version
    assert agent.act(obs, action_mask=frozen) == 3
    assert agent.act(obs, action_mask=frozen.astype(bool)) == 3
    with pytest.raises(ValueError, match=r"without action masks.*action_masks=True"):
        agent.observe_encoded(obs, 0, 0.0, obs, 0, next_action_mask=legal)
    policy = agent.into_policy()
    masks = np.ones((3, N_ACT), dtype=bool)
    masks[1] = False
    with pytest.raises(ValueError, match=r"action_masks\[1\] allows no action"):
        policy.act_batch(np.zeros((3, N_OBS), np.float32), action_masks=masks)
    with pytest.raises(ValueError, match=r"shape \(2, 11\)"):
        policy.act_batch(np.zeros((2, N_OBS), np.float32), action_masks=masks)
    with pytest.raises(ValueError, match="custom buffer"):
        DqnAgent(VecEncoder(N_OBS), IndexActionMapper(N_ACT), SMALL,
                 buffer=CircularBuffer(64, N_OBS, N_ACT))  # fmt: skip
    with pytest.raises(ValueError, match="action_masks"):
        DqnConfig(action_masks=1)


# -- Discrete observations and the trainer (Taxi) --------------------------------------------


def test_one_hot_encoder():
    enc = OneHotEncoder(4, start=2)
    np.testing.assert_array_equal(enc.encode(3), [0, 1, 0, 0])
    np.testing.assert_array_equal(enc.encode(np.int64(5)), [0, 0, 0, 1])
    np.testing.assert_array_equal(enc.encode_batch([2, 5]), [[1, 0, 0, 0], [0, 0, 0, 1]])
    for bad in (1, 6, 2.5, True, "3"):
        with pytest.raises(ValueError, match=r"\[2, 6\)"):
            enc.encode(bad)
    env = gym.make(taxi_id())
    agent = DqnAgent.for_env(env, DqnConfig(hidden_sizes=(8,)))
    assert isinstance(agent.encoder, OneHotEncoder)
    assert agent.online.layer_sizes == (500, 8, 6)


class LegalOnly(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Fails the test on any action the last info's mask made illegal.

    ``checked`` counts the steps of every instance (also those gymnasium
    rebuilds from the spec, e.g. the trainer's eval env).
    """

    checked = 0

    def __init__(self, env):
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.legal = info["action_mask"].astype(bool)
        return obs, info

    def step(self, action):
        assert self.legal[action], f"illegal action {action} under mask {self.legal}"
        self.steps = getattr(self, "steps", 0) + 1
        LegalOnly.checked += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.legal = info["action_mask"].astype(bool)
        return obs, reward, terminated, truncated, info


TAXI = DqnConfig(hidden_sizes=(32,), learning_rate=1e-3, batch_size=16, buffer_capacity=2000,
                 min_replay_size=64, target_update_freq=100, epsilon_decay_steps=400,
                 action_masks=True)  # fmt: skip


def test_taxi_trains_through_the_trainer_without_an_illegal_action(tmp_path):
    env = LegalOnly(gym.make(taxi_id()))
    eval_env = LegalOnly(gym.make(taxi_id()))
    agent = DqnAgent.for_env(env, TAXI, seed=1)
    trainer = DqnTrainer(env, agent, seed=1, eval_env=eval_env)
    assert not trainer.fused
    trainer.train(600)
    assert env.steps == 600 and agent.n_updates > 0
    trainer.eval(1)  # greedy, through the eval env's masks
    assert eval_env.steps > 0
    # every stored next-state mask is the env's: Taxi always allows some actions, rarely all
    legal = np.unpackbits(agent.buffer.next_action_masks[:600], axis=1, count=6)
    assert legal.any(axis=1).all() and not legal.all()
    # the checkpoint describes the one-hot encoder, so a policy loads from it alone
    path = agent.save(tmp_path / "taxi")
    for backend in ("numpy", "numba"):
        policy = DqnPolicy.load(path, backend=backend)
        obs, info = gym.make(taxi_id()).reset(seed=3)
        mask = info["action_mask"]
        assert mask[policy.act(obs, action_mask=mask)]
        assert policy.act(obs, action_mask=mask) == agent.act(obs, action_mask=mask)


def masked_stream(n: int, seed: int) -> list[tuple]:
    data = np.random.default_rng(seed)
    stream = []
    for i in range(n):
        x = data.standard_normal(N_OBS).astype(np.float32)
        nx = data.standard_normal(N_OBS).astype(np.float32)
        status = 1 if i % 9 == 8 else 0
        stream.append((x, float(data.standard_normal()), nx, status, random_masks(data, 1)[0]))
    return stream


def test_resume_with_masks_is_exact(tmp_path):
    config = SMALL.replace(double_dqn=True, epsilon_decay_steps=300)
    a = make_agent(config=config, seed=11)
    stream = masked_stream(260, seed=12)
    index = 0
    for x, r, nx, status, mask in stream[:130]:
        index = a.observe_encoded(x, index, r, nx, status, True, next_action_mask=mask)
    path = a.save(tmp_path / "a", include_buffer=True)
    b = DqnAgent.from_checkpoint(path)
    assert b.config.action_masks
    np.testing.assert_array_equal(b.buffer.next_action_masks, a.buffer.next_action_masks)
    ia = ib = index
    for x, r, nx, status, mask in stream[130:]:
        ia = a.observe_encoded(x, ia, r, nx, status, True, next_action_mask=mask)
        ib = b.observe_encoded(x, ib, r, nx, status, True, next_action_mask=mask)
        assert ia == ib and mask[ia]
    assert a.n_updates > 100
    np.testing.assert_array_equal(a.online.params, b.online.params)
    np.testing.assert_array_equal(a.buffer.next_action_masks, b.buffer.next_action_masks)


def test_update_takes_a_whole_masked_batch():
    """``net.update(batch, target, options)`` uses a masked buffer's packed masks, as the keyword does."""
    buf = CircularBuffer(40, N_OBS, N_ACT, action_masks=True, gamma=0.9)  # discounts 0.9 * mask
    fill(buf, 40, seed=13)
    batch = buf.sample(16, Rng(2))
    legal = np.unpackbits(batch.next_action_masks, axis=1, count=N_ACT).astype(bool)
    a, b = QNetwork((N_OBS, 8, N_ACT), seed=3), QNetwork((N_OBS, 8, N_ACT), seed=3)
    target = QNetwork((N_OBS, 8, N_ACT), seed=4)
    loss_a = a.update(batch, target, UpdateOptions(gamma=0.9, learning_rate=1e-2))
    loss_b = b.update(
        batch[:5], target, UpdateOptions(gamma=0.9, learning_rate=1e-2), next_action_masks=legal
    )
    assert loss_a == loss_b
    np.testing.assert_array_equal(a.params, b.params)
    with pytest.raises(ValueError, match="given twice"):
        a.update(
            batch, target, UpdateOptions(gamma=0.9, learning_rate=1e-2), next_action_masks=legal
        )


def test_cli_trains_and_evaluates_taxi_with_masks(tmp_path, capsys, monkeypatch):
    from ember_np import cli
    from ember_np.cli import common

    real_make = common.make_env
    # every action the CLI's trainer (and its eval env, rebuilt from the spec) takes is checked
    monkeypatch.setattr(common, "make_env", lambda env_id: LegalOnly(real_make(env_id)))
    monkeypatch.setattr(LegalOnly, "checked", 0)
    env_id = taxi_id()
    assert cli.main(["train", env_id, "--steps", "300", "--eval-every", "300", "--eval-episodes",
                     "1", "--root", str(tmp_path), "--set", "min_replay_size=32", "batch_size=16",
                     "buffer_capacity=1000", "hidden_sizes=[16]", "--quiet"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "training with action masks" in out
    assert LegalOnly.checked > 300  # 300 training steps and the eval episode's
    (run_dir,) = (tmp_path / env_id / "default").iterdir()
    before = LegalOnly.checked
    assert cli.main(["eval", str(run_dir), "--episodes", "1"]) == 0
    assert LegalOnly.checked > before


# -- with n-step returns and prioritized replay ----------------------------------------------


def n_step_reference(buf: CircularBuffer, slot: int, pushes: list[tuple]) -> tuple[float, int]:
    """Plain-Python walk of an n-step return from ``slot``: (its reward, the last slot t+m-1).

    ``pushes`` holds (obs, reward, next_obs, status) per push; slot s holds the
    push numbered p with p % capacity == s among the newest ``capacity``.
    """
    cap, n = buf.capacity, len(pushes)
    newest = (buf.position - 1) % cap
    push_of = {p % cap: p for p in range(max(0, n - cap), n)}
    total, discount, last = 0.0, 1.0, slot
    for m in range(buf.n_step):
        _, reward, next_obs, status = pushes[push_of[last]]
        total += discount * np.float32(reward)
        discount *= buf.gamma
        following = push_of.get((last + 1) % cap)
        continues = (
            status == 0
            and following == push_of[last] + 1
            and np.array_equal(pushes[following][0].view(np.uint32), next_obs.view(np.uint32))
        )
        if m + 1 == buf.n_step or not continues or last == newest:
            break
        last = (last + 1) % cap
    return total, last


def test_n_step_batches_carry_the_mask_of_the_state_they_bootstrap_from():
    """A masked PrioritizedBuffer(n_step=3): each row's next_action_masks is slot t+m-1's."""
    buf = PrioritizedBuffer(50, N_OBS, N_ACT, n_step=3, gamma=0.9, action_masks=True)
    data = np.random.default_rng(21)
    pushes, masks = [], random_masks(data, 73)
    x = data.standard_normal(N_OBS).astype(np.float32)
    for i in range(73):  # episodes of 7 steps (terminated or truncated), wrapping the buffer
        nx = data.standard_normal(N_OBS).astype(np.float32)
        status = 0 if i % 7 != 6 else 1 + (i // 7) % 2
        reward = float(data.standard_normal())
        buf.push(x, int(data.integers(N_ACT)), reward, nx, status, next_action_mask=masks[i])
        pushes.append((x, reward, nx, status))
        x = nx if status == 0 else data.standard_normal(N_OBS).astype(np.float32)
    buf.update_priorities(np.arange(50), data.random(50) * 3)  # non-uniform draws
    batch = buf.sample(48, Rng(5), beta=0.5)
    later = 0
    for k, slot in enumerate(batch.indices):
        reward, last = n_step_reference(buf, int(slot), pushes)
        np.testing.assert_allclose(batch.rewards[k], reward, rtol=1e-6)
        np.testing.assert_array_equal(batch.next_action_masks[k], buf.next_action_masks[last])
        later += not np.array_equal(buf.next_action_masks[last], buf.next_action_masks[slot])
    assert later > 10  # most rows bootstrap from a later state whose mask differs from slot t's


def test_taxi_trains_with_masks_n_step_and_prioritized_replay():
    env = LegalOnly(gym.make(taxi_id()))
    agent = DqnAgent.for_env(env, TAXI.replace(n_step=3, prioritized_replay=True), seed=2)
    assert isinstance(agent.buffer, PrioritizedBuffer) and agent.buffer.action_masks
    trainer = DqnTrainer(env, agent, seed=2)
    trainer.train(400)
    assert env.steps == 400 and agent.n_updates > 0
    assert np.ptp(agent.buffer.priorities()) > 0  # the updates wrote TD errors back
    legal = np.unpackbits(agent.buffer.next_action_masks[:400], axis=1, count=6)
    assert legal.any(axis=1).all() and not legal.all()

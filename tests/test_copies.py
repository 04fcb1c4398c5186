"""copy.deepcopy and pickle give independent, working objects (QNetwork, DqnAgent,
CircularBuffer, DqnPolicy).

Property tests (hypothesis) over how an object is copied (deepcopy, pickle
protocols 2 to 5, protocol 5 with out-of-band buffers, which hand the
original's memory to the copy) and when (after any amount of training): the
copy's weights are views of the parameters its kernels train, training the
copy leaves the original as it was and the other way round, each continues
bit for bit like an uncopied twin fed the same data, and saving and loading
work on the copy. Before the fix a copied agent's ``weights`` were separate
arrays: ``save()`` wrote stale weights beside current Adam state, and
``load()`` changed the counters but not the network it acts with.
"""

from __future__ import annotations

import copy
import multiprocessing
import pickle
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
from helpers import TINY
from helpers import make_agent as shared_make_agent
from helpers import saved_state as agent_state
from hypothesis import given, settings
from hypothesis import strategies as st

from ember_np import (
    CircularBuffer,
    DqnAgent,
    DqnPolicy,
    EpisodeStatus,
    Experience,
    QNetwork,
    Rng,
    UpdateOptions,
)
from ember_np.dqn.replay.replay_kernels import CURSOR_LEN, N_FREE


def _pickled(protocol: int):  # noqa: ANN202
    return lambda obj: pickle.loads(pickle.dumps(obj, protocol=protocol))


def _out_of_band(obj):  # noqa: ANN001, ANN202
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return pickle.loads(data, buffers=buffers)  # the copy is handed the original's memory


COPIERS = {"deepcopy": copy.deepcopy, "out-of-band": _out_of_band}
COPIERS.update({f"pickle{p}": _pickled(p) for p in range(2, pickle.HIGHEST_PROTOCOL + 1)})
SETTINGS = settings(max_examples=15, deadline=None)

SMALL = TINY
make_agent = partial(shared_make_agent, config=SMALL, seed=3)


def transitions(n: int, seed: int) -> list[Experience]:
    """Episodes as an env gives them: each next_obs is the following obs until an episode ends."""
    data = np.random.default_rng(seed)
    out = []
    obs = data.standard_normal(3).astype(np.float32)
    for _ in range(n):
        status = EpisodeStatus(int(data.choice(3, p=[0.85, 0.1, 0.05])))
        next_obs = (obs + data.standard_normal(3) * 0.1).astype(np.float32)
        out.append(Experience(obs, int(data.integers(2)), float(data.standard_normal()),
                              next_obs, status))  # fmt: skip
        obs = next_obs if status == EpisodeStatus.CONTINUING else data.standard_normal(3)
        obs = obs.astype(np.float32)
    return out


def network_state(net: QNetwork) -> dict[str, bytes]:
    return {k: v.tobytes() for k, v in net.state_dict().items()}


def buffer_state(buf: CircularBuffer) -> tuple[bytes, ...]:
    """The buffer's arrays bit for bit (the free-row stack up to its live length)."""
    cursor = buf.kernel_state.cursor
    live = CURSOR_LEN + int(cursor[N_FREE])  # the counters and the released rows
    return (buf.storage.tobytes(), buf.finals.tobytes(), cursor[:live].tobytes())


def assert_views(net: QNetwork) -> None:
    """weights and biases are views of the parameter vector the kernels train."""
    offset = 0
    for w, b in zip(net.weights, net.biases):
        for arr in (w, b):
            assert arr.base is net.params or np.shares_memory(arr, net.params)
            assert arr.__array_interface__["data"][0] == net.params[offset:].ctypes.data
            offset += arr.size


def batches(sizes: tuple[int, ...], n: int, seed: int) -> list[tuple[np.ndarray, ...]]:
    data = np.random.default_rng(seed)
    return [
        (data.standard_normal((4, sizes[0])).astype(np.float32), data.integers(0, sizes[-1], 4),
         data.standard_normal(4).astype(np.float32),
         data.standard_normal((4, sizes[0])).astype(np.float32),
         data.integers(0, 2, 4).astype(np.float32))
        for _ in range(n)
    ]  # fmt: skip


# -- QNetwork ----------------------------------------------------------------------


@SETTINGS
@given(how=st.sampled_from(sorted(COPIERS)), before=st.integers(0, 5), after=st.integers(1, 5))
def test_copied_network_trains_its_own_weights_like_an_uncopied_twin(how, before, after):
    sizes = (3, 6, 5, 2)
    target = QNetwork(sizes, seed=9)
    net, twin, other = (QNetwork(sizes, seed=1) for _ in range(3))
    kw = dict(gamma=0.9, learning_rate=1e-2, max_grad_norm=5.0)
    for batch in batches(sizes, before, seed=0):
        for n in (net, twin, other):
            n.update(batch, target, UpdateOptions(**kw))
    clone = COPIERS[how](net)
    assert_views(clone)
    assert network_state(clone) == network_state(net)
    original = network_state(net)
    w_before = clone.weights[0].copy()
    for batch in batches(sizes, after, seed=1):  # the copy and its twin train on one stream
        assert clone.update(batch, target, UpdateOptions(**kw)) == twin.update(
            batch, target, UpdateOptions(**kw)
        )
    assert not np.array_equal(clone.weights[0], w_before)  # weights are what trains
    assert network_state(net) == original  # the original did not move
    trained = network_state(clone)
    for batch in batches(sizes, after, seed=2):  # the original and its twin on another
        net.update(batch, target, UpdateOptions(**kw))
        other.update(batch, target, UpdateOptions(**kw))
    assert network_state(clone) == trained == network_state(twin)
    assert network_state(net) == network_state(other)
    x = np.random.default_rng(3).standard_normal((5, 3)).astype(np.float32)
    assert clone.forward(x).tobytes() == twin.forward(x).tobytes()
    clone.load_state_dict(net.state_dict())  # loading into the copy changes what it computes
    assert clone.forward(x).tobytes() == net.forward(x).tobytes()
    assert_views(clone)


# -- DqnAgent --------------------------------------------------------------------


@SETTINGS
@given(how=st.sampled_from(sorted(COPIERS)), before=st.integers(0, 60), after=st.integers(1, 60))
def test_copied_agent_is_independent_and_continues_like_an_uncopied_twin(how, before, after):
    agent, twin, other = make_agent(), make_agent(), make_agent()
    stream = transitions(before + after, seed=1)
    for e in stream[:before]:
        for a in (agent, twin, other):
            a.observe(e)
    clone = COPIERS[how](agent)
    assert_views(clone.online)
    assert_views(clone.target)
    assert agent_state(clone) == agent_state(agent)
    original = agent_state(agent)
    x = np.zeros(3, np.float32)
    for e in stream[before:]:  # the copy and its twin on one stream
        assert clone.observe(e) == twin.observe(e)
        assert clone.act_epsilon_greedy(x) == twin.act_epsilon_greedy(x)
    assert agent_state(agent) == original  # training the copy left the original alone
    trained = agent_state(clone)
    for e in transitions(after, seed=2):  # the original and its twin on another
        for a in (agent, other):
            a.observe(e)
            a.act_epsilon_greedy(x)
    assert agent_state(clone) == trained == agent_state(twin)
    assert agent_state(agent) == agent_state(other)
    with tempfile.TemporaryDirectory() as tmp:
        saved = np.load(clone.save(Path(tmp) / "copy.npz", include_buffer=True))
        for i, w in enumerate(clone.online.weights):  # save() writes the weights that act
            assert (
                saved[f"online/w{i}"].tobytes() == w.tobytes() == twin.online.weights[i].tobytes()
            )
        clone.load(agent.save(Path(tmp) / "original.npz", include_buffer=True))
    assert agent_state(clone) == agent_state(agent)  # load() into the copy: the network too
    obs = np.random.default_rng(4).standard_normal((20, 3)).astype(np.float32)
    assert [clone.act(o) for o in obs] == [agent.act(o) for o in obs]
    assert clone.online.forward(obs).tobytes() == agent.online.forward(obs).tobytes()


# -- CircularBuffer ----------------------------------------------------------------


@SETTINGS
@given(how=st.sampled_from(sorted(COPIERS)), before=st.integers(0, 30), after=st.integers(1, 30))
def test_copied_buffer_is_independent_and_continues_like_an_uncopied_twin(how, before, after):
    buf, twin, other = (CircularBuffer(12, 3, 2) for _ in range(3))
    stream = transitions(before + after, seed=5)
    for e in stream[:before]:
        for b in (buf, twin, other):
            b.push(*e)
    clone = COPIERS[how](buf)
    assert buffer_state(clone) == buffer_state(buf)
    assert clone.nbytes == buf.nbytes
    original = buffer_state(buf)
    for e in stream[before:]:
        clone.push(*e)
        twin.push(*e)
    assert buffer_state(buf) == original
    pushed = buffer_state(clone)
    for e in transitions(after, seed=6):
        buf.push(*e)
        other.push(*e)
    assert buffer_state(clone) == pushed == buffer_state(twin)
    assert buffer_state(buf) == buffer_state(other)
    k = len(clone)
    for got, want in zip(clone.sample(k, Rng(7)), twin.sample(k, Rng(7))):
        assert got.tobytes() == want.tobytes()
    clone.load_state_dict(buf.state_dict())
    for got, want in zip(clone.state_dict().values(), buf.state_dict().values()):
        assert got.tobytes() == want.tobytes()


def test_a_copy_holds_only_the_buffer_in_use():
    """A pickled buffer is as large as its data, not its capacity."""
    buf = CircularBuffer(1_000_000, 3, 2)
    for e in transitions(100, seed=0):
        buf.push(*e)
    data = pickle.dumps(buf)
    assert len(data) < 10_000  # the full storage alone is 22 MB
    assert buffer_state(pickle.loads(data))[2] == buffer_state(buf)[2]


# -- DqnPolicy ------------------------------------------------------------------


@SETTINGS
@given(how=st.sampled_from(sorted(COPIERS)), before=st.integers(8, 60),
       backend=st.sampled_from(["numpy", "numba"]))  # fmt: skip
def test_copied_policy_acts_like_the_original_and_shares_nothing(how, before, backend):
    agent = make_agent()
    for e in transitions(before, seed=8):
        agent.observe(e)
    params = agent.online.params.copy()
    policy = DqnPolicy(agent.online.layer_sizes, params, agent.encoder, agent.action_mapper,
                       backend)  # fmt: skip
    assert policy.params is params  # the policy acts with the array it was given
    clone = COPIERS[how](policy)
    assert isinstance(clone, DqnPolicy) and clone.layer_sizes == policy.layer_sizes
    assert clone.backend == policy.backend == backend
    assert not np.shares_memory(clone.params, policy.params)
    assert clone.params.flags.writeable and clone.params.flags.c_contiguous
    obs = np.random.default_rng(9).standard_normal((16, 3)).astype(np.float32)
    assert clone.act_batch(obs).tolist() == policy.act_batch(obs).tolist()
    assert [clone.act(o) for o in obs] == [policy.act(o) for o in obs]
    assert clone.q_values_batch(obs).tobytes() == policy.q_values_batch(obs).tobytes()
    q = clone.q_values_batch(obs)
    params[:] = 0.0  # the original's parameters change; the copy's do not
    assert clone.q_values_batch(obs).tobytes() == q.tobytes()
    assert not np.shares_memory(clone.params, policy.params)


# -- across processes -------------------------------------------------------------


def _train_in_child(agent: DqnAgent, seed: int, n: int) -> DqnAgent:
    for e in transitions(n, seed=seed):
        agent.observe(e)
    return agent


def test_agent_trains_in_a_spawned_process_and_comes_back():
    """What multi-seed workers and tuning trials do: send an agent, train there, send it back."""
    agent, twin = make_agent(seed=4), make_agent(seed=4)
    for e in transitions(30, seed=0):
        agent.observe(e)
        twin.observe(e)
    sent = agent_state(agent)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        back = pool.apply(_train_in_child, (agent, 1, 80))
    _train_in_child(twin, 1, 80)
    assert agent_state(agent) == sent
    assert back.n_updates > 0
    assert agent_state(back) == agent_state(twin)
    assert_views(back.online)
    _train_in_child(back, 2, 40)  # and it keeps training here
    _train_in_child(twin, 2, 40)
    assert agent_state(back) == agent_state(twin)

"""Every public entry point gives the same result for any layout of the same values.

Property tests (hypothesis) over the class of inputs: for random shapes and
values, each array argument is handed in as one of many layouts of the same
numbers (a view of a batch of one built with ``[None]``, broadcasts, Fortran
order, negative strides, strided slices, read-only, unaligned, byte-swapped,
other dtypes, nested lists). The result must be bit-identical to that of
the C-contiguous float32 copy, and no layout may compile another version of
any kernel (numba types read-only, unaligned and strided arrays apart).

Before the fix a batch of one from ``x[None]`` or ``np.broadcast_to`` reached
BLAS with a leading dimension of 0 ("On entry to SGEMM parameter number 10
had an illegal value") and came back NaN or uninitialised.
"""

from __future__ import annotations

import importlib

import numba
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba.core import types

from ember_np import (
    CircularBuffer,
    DqnAgent,
    DqnConfig,
    DqnPolicy,
    Experience,
    IndexActionMapper,
    QNetwork,
    Rng,
    UpdateOptions,
    VecEncoder,
)
from ember_np.dqn.replay.sumtree import SumTree
from ember_np.envs import NativeVecEnv

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- layouts -----------------------------------------------------------------

FLOAT_LAYOUTS = [
    "copy", "list", "newaxis", "broadcast", "fortran", "negative", "strided",
    "readonly", "unaligned", "bigendian", "float64", "float16", "int8", "bool",
]  # fmt: skip
INT_LAYOUTS = ["copy", "list", "tuple", "negative", "strided", "readonly", "int32", "uint8"]


def represent(kind: str, values: np.ndarray) -> tuple[object, np.ndarray]:
    """(``values`` in layout ``kind``, the float32 or int64 C-contiguous copy it stands for).

    ``values`` holds small multiples of 1/4 (exact in float16 and float32).
    The integer and bool layouts stand for the integers they hold.
    """
    a = np.array(values)
    if kind == "int8":
        a = np.round(a * 4)
        return a.astype(np.int8), a
    if kind == "bool":
        a = (a > 0).astype(a.dtype)
        return a.astype(bool), a
    if kind in ("int32", "uint8"):
        return a.astype(kind), a
    if kind == "copy":
        return a.copy(), a
    if kind == "list":
        return a.tolist(), a
    if kind == "tuple":
        return tuple(a.tolist()), a
    if kind == "newaxis":  # the leading axis a length-1 view: stride 0, flagged C-contiguous
        return (a[0][None] if a.ndim > 1 and a.shape[0] == 1 else a[None][0]), a
    if kind == "broadcast":  # read-only; stride 0 on the leading axis, whose rows are made equal
        if a.ndim == 1:
            return np.broadcast_to(a, a.shape), a
        a = np.repeat(a[:1], a.shape[0], axis=0)
        return np.broadcast_to(a[:1], a.shape), a
    if kind == "fortran":
        return np.asfortranarray(a), a
    if kind == "negative":
        return np.flip(np.flip(a).copy()), a
    if kind == "strided":
        big = np.zeros(tuple(2 * s + 1 for s in a.shape), dtype=a.dtype)
        window = tuple(slice(1, None, 2) for _ in a.shape)
        big[window] = a
        return big[window], a
    if kind == "readonly":
        b = a.copy()
        b.flags.writeable = False
        return b, a
    if kind == "unaligned":
        raw = np.zeros(a.nbytes + 1, dtype=np.uint8)[1:]
        b = raw.view(a.dtype).reshape(a.shape)
        b[...] = a
        assert not b.flags.aligned or a.nbytes == 0
        return b, a
    if kind == "bigendian":
        return a.astype(a.dtype.newbyteorder(">")), a
    if kind in ("float64", "float16"):
        return a.astype(kind), a
    raise AssertionError(kind)


def f32(shape: tuple[int, ...]) -> st.SearchStrategy[np.ndarray]:
    return st.lists(
        st.integers(-8, 8), min_size=int(np.prod(shape)), max_size=int(np.prod(shape))
    ).map(lambda v: (np.array(v, dtype=np.float32) / 4).reshape(shape))


def dispatchers() -> list:
    """Every compiled kernel of the modules array arguments reach."""
    names = ["nn._blas", "rng", "nn.mlp", "nn.backprop", "nn.optim", "dqn.heads.qvalues",
             "dqn.learner.learn", "dqn.learner.network", "dqn.replay", "dqn.agent",
             "dqn.replay.sumtree", "envs._dispatch", "training._fused"]  # fmt: skip
    found = {}
    for name in names:
        for value in vars(importlib.import_module(f"ember_np.{name}")).values():
            if isinstance(value, numba.core.registry.CPUDispatcher):
                found[id(value)] = value
    return list(found.values())


def compiled_versions() -> dict[str, int]:
    """How many versions of each kernel are compiled; no layout may add one.

    Also checks, whatever ran before in this process, that no version takes
    an array that is not C-contiguous, writeable and aligned (the replay
    storage, a packed record array, is unaligned by design; ``gemm`` itself
    takes row views, and test_blas calls it with some).
    """
    odd = [
        f"{d.py_func.__qualname__}{sig}"
        for d in dispatchers()
        if d.py_func.__name__ not in ("gemm", "_leading_dim")
        for sig in d.signatures
        for arg in sig
        if isinstance(arg, types.Array)
        and not isinstance(arg.dtype, types.Record)
        and (arg.layout != "C" or not arg.mutable or not arg.aligned)
    ]
    assert not odd, f"kernels compiled for strided, read-only or unaligned arrays: {odd}"
    return {d.py_func.__qualname__: len(d.signatures) for d in dispatchers()}


def every_layout(data: st.DataObject, layouts: list[str], n: int | None = None) -> list[str]:
    """Every layout in a random order, cycled to ``n`` items: each example covers them all."""
    order = data.draw(st.permutations(layouts))
    return [order[k % len(order)] for k in range(len(order) if n is None else n)]


@st.composite
def layer_sizes(draw: st.DrawFn) -> tuple[int, ...]:
    hidden = draw(st.lists(st.integers(1, 9), min_size=0, max_size=2))
    return (draw(st.integers(1, 5)), *hidden, draw(st.integers(1, 4)))


# -- QNetwork ------------------------------------------------------------------


@SETTINGS
@given(data=st.data(), sizes=layer_sizes(), batch=st.integers(1, 4))
def test_network_forward_and_greedy_any_layout(data, sizes, batch):
    net = QNetwork(sizes, seed=data.draw(st.integers(0, 9)))
    one, many = data.draw(f32((sizes[0],))), data.draw(f32((batch, sizes[0])))
    for k1, kb in zip(every_layout(data, FLOAT_LAYOUTS), every_layout(data, FLOAT_LAYOUTS)):
        (x1, ref1), (xb, refb) = represent(k1, one), represent(kb, many)
        expected = (net.forward(ref1), net.forward(refb), net.greedy_action(ref1),
                    net.greedy_actions(refb))  # fmt: skip
        before = compiled_versions()
        got = (net.forward(x1), net.forward(xb), net.greedy_action(x1), net.greedy_actions(xb))
        for e, g in zip(expected, got):
            assert np.asarray(e).tobytes() == np.asarray(g).tobytes(), (k1, kb)
        assert compiled_versions() == before


@SETTINGS
@given(data=st.data(), sizes=layer_sizes(), batch=st.integers(1, 4))
def test_network_update_any_layout(data, sizes, batch):
    """The same step from any layout of obs, actions, rewards, next_obs and masks."""
    obs = data.draw(f32((batch, sizes[0])))
    next_obs = data.draw(f32((batch, sizes[0])))
    rewards = data.draw(f32((batch,)))
    masks = data.draw(st.lists(st.sampled_from([0.0, 1.0]), min_size=batch, max_size=batch))
    masks = np.array(masks, dtype=np.float32)
    actions = np.array(data.draw(st.lists(st.integers(0, sizes[-1] - 1), min_size=batch,
                                          max_size=batch)), dtype=np.int64)  # fmt: skip
    masks_layouts = ["copy", "negative", "readonly", "strided", "float64", "list", "newaxis"]
    values = [obs, actions, rewards, next_obs, masks]
    layouts = [FLOAT_LAYOUTS, INT_LAYOUTS, FLOAT_LAYOUTS, FLOAT_LAYOUTS, masks_layouts]
    focus = data.draw(st.integers(0, 4))  # every layout of this argument, random ones of the rest
    target = QNetwork(sizes, seed=2)
    kw = dict(gamma=0.9, learning_rate=1e-2, max_grad_norm=1.0)
    for kind in every_layout(data, layouts[focus]):
        args, refs = [], []
        for i, (value, choices) in enumerate(zip(values, layouts)):
            x, ref = represent(kind if i == focus else data.draw(st.sampled_from(choices)), value)
            args.append(x)
            refs.append(ref.astype(np.int64) if i == 1 else ref)
        net, twin = QNetwork(sizes, seed=1), QNetwork(sizes, seed=1)
        expected = twin.update(refs, target, UpdateOptions(**kw))
        before = compiled_versions()
        assert net.update(args, target, UpdateOptions(**kw)) == expected
        got, want = net.state_dict(), twin.state_dict()  # weights and Adam's m, v and t
        for name in want:
            assert got[name].tobytes() == want[name].tobytes(), (name, kind)
        assert compiled_versions() == before


def test_batch_of_one_view_gives_the_rows_q_values():
    """The reported case: ``q_values_batch(o[None])`` was ``[[nan, nan]]`` and
    ``act_batch(x[None])`` disagreed with ``act(x)`` on 212 of 500 observations."""
    net = QNetwork((4, 64, 64, 2), seed=0)
    policy = DqnAgent(VecEncoder(4), IndexActionMapper(2), DqnConfig(hidden_sizes=(64, 64)),
                      seed=0).into_policy()  # fmt: skip
    obs = np.random.default_rng(0).standard_normal((500, 4)).astype(np.float32)
    for o in obs:
        one = policy.q_values(o)  # the single-observation path (no BLAS)
        for view in (o[None], np.broadcast_to(o, (1, 4)), o[::-1][None][:, ::-1]):
            assert net.forward(view).tobytes() == net.forward(o[None].copy()).tobytes()
            q = policy.q_values_batch(view)
            assert q.tobytes() == policy.q_values_batch(o[None].copy()).tobytes()
            np.testing.assert_allclose(q[0], one, rtol=1e-5, atol=1e-6)  # BLAS sums in its order
            if abs(one[0] - one[1]) > 1e-5:
                assert policy.act_batch(view)[0] == policy.act(o)


# -- DqnPolicy and DqnAgent ------------------------------------------------------

OBS_SHAPES = [(3,), (1, 3), (3, 1)]  # one obs_size: the buffer compiles per obs_size
CONFIG = DqnConfig(
    hidden_sizes=(8,), learning_rate=1e-2, batch_size=4, buffer_capacity=16, min_replay_size=4,
    target_update_freq=3, epsilon_decay_steps=20,
)  # fmt: skip


@SETTINGS
@given(data=st.data(), shape=st.sampled_from(OBS_SHAPES), batch=st.integers(1, 4),
       backend=st.sampled_from(["numpy", "numba"]))  # fmt: skip
def test_policy_any_layout(data, shape, batch, backend):
    agent = DqnAgent(VecEncoder(shape), IndexActionMapper(3, start=2), CONFIG,
                     seed=data.draw(st.integers(0, 9)))  # fmt: skip
    policy = DqnPolicy(agent.online.layer_sizes, agent.online.params, agent.encoder,
                       agent.action_mapper, backend)  # fmt: skip
    one = data.draw(f32(shape))
    many = data.draw(f32((batch, *shape)))
    for k1, kb in zip(every_layout(data, FLOAT_LAYOUTS), every_layout(data, FLOAT_LAYOUTS)):
        (x1, ref1), (xb, refb) = represent(k1, one), represent(kb, many)
        expected = (policy.act(ref1), policy.q_values(ref1), policy.act_batch(refb),
                    policy.q_values_batch(refb))  # fmt: skip
        before = compiled_versions()
        got = (policy.act(x1), policy.q_values(x1), policy.act_batch(xb),
               policy.q_values_batch(xb))  # fmt: skip
        for e, g in zip(expected, got):
            assert np.asarray(e).tobytes() == np.asarray(g).tobytes(), (k1, kb)
        assert compiled_versions() == before


@SETTINGS
@given(data=st.data(), shape=st.sampled_from(OBS_SHAPES), extra=st.integers(0, 6))
def test_agent_act_and_observe_any_layout(data, shape, extra):
    """An agent fed any layouts and its twin fed contiguous copies stay bit-identical."""
    agent = DqnAgent(VecEncoder(shape), IndexActionMapper(2), CONFIG, seed=5)
    twin = DqnAgent(VecEncoder(shape), IndexActionMapper(2), CONFIG, seed=5)
    zero = np.zeros(shape, np.float32)
    for a in (agent, twin):  # compile (or load) every kernel before counting versions
        a.act(zero), a.act_epsilon_greedy(zero), a.observe(Experience(zero, 0, 0.0, zero, 0))
    before = compiled_versions()
    n = len(FLOAT_LAYOUTS) + extra
    for kind, next_kind in zip(every_layout(data, FLOAT_LAYOUTS, n),
                               every_layout(data, FLOAT_LAYOUTS, n)):  # fmt: skip
        obs, next_obs = data.draw(f32(shape)), data.draw(f32(shape))
        x, ref = represent(kind, obs)
        nx, nref = represent(next_kind, next_obs)
        action, status = data.draw(st.integers(0, 1)), data.draw(st.integers(0, 2))
        reward = data.draw(st.sampled_from([0.0, 1.0, -0.5]))
        assert agent.act(x) == twin.act(ref)
        assert agent.act_epsilon_greedy(x) == twin.act_epsilon_greedy(ref)
        assert agent.observe(Experience(x, action, reward, nx, status)) == twin.observe(
            Experience(ref, action, reward, nref, status)
        )
    a, b = agent.state_arrays(include_buffer=True), twin.state_arrays(include_buffer=True)
    for key in a:
        assert a[key].tobytes() == b[key].tobytes(), key
    assert compiled_versions() == before


# -- CircularBuffer and NativeVecEnv -----------------------------------------------


@SETTINGS
@given(data=st.data(), extra=st.integers(0, 6))
def test_buffer_push_any_layout(data, extra):
    buf, twin = CircularBuffer(6, 3, 2), CircularBuffer(6, 3, 2)
    twin.push(np.zeros(3, np.float32), 0, 0.0, np.zeros(3, np.float32), 0)
    buf.push(np.zeros(3, np.float32), 0, 0.0, np.zeros(3, np.float32), 0)
    before = compiled_versions()
    n = len(FLOAT_LAYOUTS) + extra
    for kind, next_kind in zip(every_layout(data, FLOAT_LAYOUTS, n),
                               every_layout(data, FLOAT_LAYOUTS, n)):  # fmt: skip
        obs, next_obs = data.draw(f32((3,))), data.draw(f32((3,)))
        x, ref = represent(kind, obs)
        nx, nref = represent(next_kind, next_obs)
        action, status = data.draw(st.integers(0, 1)), data.draw(st.integers(0, 2))
        buf.push(x, action, 0.5, nx, status)
        twin.push(ref, action, 0.5, nref, status)
    for name in ("storage", "finals", "cursor"):
        got, want = getattr(buf.kernel_state, name), getattr(twin.kernel_state, name)
        assert got.tobytes() == want.tobytes(), name
    assert compiled_versions() == before


def test_sample_into_arrays_it_cannot_write_raises():
    """``sample(out=...)`` writes in place, so it checks its arrays instead of copying them."""
    buf = CircularBuffer(10, 3, 2)
    for i in range(5):
        buf.push(np.full(3, i, np.float32), i % 2, 1.0, np.full(3, i + 1, np.float32), 0)
    good = buf.empty_batch(4)
    assert buf.sample(4, Rng(0), out=good) is good
    for field, bad in [
        ("obs", np.asfortranarray(np.empty((4, 3), np.float32))),
        ("obs", np.empty((4, 3), np.float64)),
        ("actions", np.empty(4, np.int32)),
        ("rewards", np.empty(8, np.float32)[::2]),
        ("masks", np.broadcast_to(np.float32(0), (4,))),
    ]:
        with pytest.raises(ValueError, match=f"out.{field} must be a C-contiguous, writeable"):
            buf.sample(4, Rng(0), out=good._replace(**{field: bad}))


@SETTINGS
@given(data=st.data(), num_envs=st.integers(1, 4), extra=st.integers(0, 20))
def test_native_vec_env_step_any_layout(data, num_envs, extra):
    env, twin = (
        NativeVecEnv("CartPole-v1", num_envs, seed=3),
        NativeVecEnv("CartPole-v1", num_envs, seed=3),
    )
    env.reset(), twin.reset()
    twin.step(np.zeros(num_envs, np.int64))
    env.step(np.zeros(num_envs, np.int64))
    before = compiled_versions()
    for kind in every_layout(data, INT_LAYOUTS, len(INT_LAYOUTS) + extra):
        actions = np.array(data.draw(st.lists(st.integers(0, 1), min_size=num_envs,
                                              max_size=num_envs)), dtype=np.int64)  # fmt: skip
        a, ref = represent(kind, actions)
        for x, y in zip(env.step(a), twin.step(ref.astype(np.int64))):
            assert x.tobytes() == y.tobytes()
    assert env.final_obs.tobytes() == twin.final_obs.tobytes()
    assert compiled_versions() == before


@SETTINGS
@given(data=st.data(), n=st.integers(1, 6))
def test_sum_tree_set_any_layout(data, n):
    tree, twin = SumTree(8), SumTree(8)
    tree.set([0], [1.0]), twin.set([0], [1.0])
    before = compiled_versions()
    steps = len(FLOAT_LAYOUTS)
    for ki, kp in zip(every_layout(data, INT_LAYOUTS, steps), every_layout(data, FLOAT_LAYOUTS)):
        indices = np.array(data.draw(st.lists(st.integers(0, 7), min_size=n, max_size=n)))
        priorities = data.draw(f32((n,))) + 2.0  # >= 0
        (i, iref), (p, pref) = represent(ki, indices), represent(kp, priorities)
        tree.set(i, p)
        twin.set(iref.astype(np.int64), pref.astype(np.float64))
        assert tree.tree.tobytes() == twin.tree.tobytes(), (ki, kp)
        assert tree.get(i).tobytes() == twin.get(iref.astype(np.int64)).tobytes()
    assert compiled_versions() == before


@pytest.mark.parametrize("bad", [[0.9, 1.0], np.array([1.0, 0.0]), [1 + 0j, 0j], ["0", "1"]])
def test_actions_that_are_not_integers_raise(bad):
    """A float action array was truncated to integers without a word."""
    with pytest.raises(ValueError, match="actions must be an array of integers"):
        NativeVecEnv("CartPole-v1", 2, seed=0).step(bad)
    net = QNetwork((2, 3, 2), seed=0)
    batch = (np.zeros((2, 2)), bad, np.zeros(2), np.zeros((2, 2)), np.ones(2))
    with pytest.raises(ValueError, match="actions must be an array of integers"):
        net.update(batch, net.copy(), UpdateOptions(gamma=0.9, learning_rate=1e-3))


@pytest.mark.parametrize(
    "bad",
    [[1 + 2j, 0j], np.array(["a", "b"]), np.array(["2026-01-01"] * 2, "M8[D]"), [[0], [1, 0]]],
)
def test_observations_that_are_not_real_numbers_raise(bad):
    """A complex observation lost its imaginary part without a word."""
    net = QNetwork((2, 3, 2), seed=0)
    with pytest.raises(ValueError, match="obs must be an array of real numbers"):
        net.forward(bad)
    buf = CircularBuffer(4, 2, 2)
    with pytest.raises(ValueError, match="expected obs as 2 numbers convertible to float32"):
        buf.push(bad, 0, 0.0, np.zeros(2), 0)
    assert len(buf) == 0

"""What the test files share besides the references in ``naive.py``: the small configs
and the agents and trainers they build, the ways they compare two agents' states and
runs' files, torch twins of a network, and helpers for tests that drive processes.

A test imports it as ``import helpers`` or ``from helpers import ...`` (conftest.py
puts this directory on ``sys.path``). Only ember_np's public API is used here.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from ember_np import (
    Batch,
    DqnAgent,
    DqnConfig,
    DqnTrainer,
    IndexActionMapper,
    UpdateOptions,
    VecEncoder,
)


def make_batch(sizes, batch=16, seed=0, dtype=np.float32, terminal_every=5):
    """A random DQN batch (obs, actions, rewards, next_obs, masks) for a network of ``sizes``."""
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((batch, sizes[0])).astype(dtype)
    next_obs = rng.standard_normal((batch, sizes[0])).astype(dtype)
    actions = rng.integers(0, sizes[-1], batch).astype(np.int64)
    rewards = (rng.standard_normal(batch) * 2).astype(dtype)
    masks = np.ones(batch, dtype=dtype)
    masks[::terminal_every] = 0.0
    return obs, actions, rewards, next_obs, masks


def torch_and_ours(torch, t_net, t_target, net, target, steps=5):
    """The same ``steps`` DQN updates (Huber, gamma 0.99, Adam lr 1e-3, clip 0.5) in torch
    and on ``net``, each on a fresh batch; returns the pairs (our loss, torch's loss)."""
    opt = torch.optim.Adam(t_net.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        obs, actions, rewards, next_obs, masks = make_batch(net.layer_sizes, batch=64, seed=step)
        with torch.no_grad():
            q_next = t_target(torch.from_numpy(next_obs)).max(dim=1).values
            y = torch.from_numpy(rewards) + 0.99 * torch.from_numpy(masks) * q_next
        q = t_net(torch.from_numpy(obs)).gather(1, torch.from_numpy(actions)[:, None]).squeeze(1)
        t_loss = torch.nn.functional.smooth_l1_loss(q, y)
        opt.zero_grad()
        t_loss.backward()
        torch.nn.utils.clip_grad_norm_(t_net.parameters(), 0.5)
        opt.step()
        loss = net.update(Batch(obs, actions, rewards, next_obs, masks), target, UpdateOptions(gamma=0.99, learning_rate=1e-3, max_grad_norm=0.5))  # fmt: skip
        losses.append((loss, t_loss.item()))
    return losses


# ---------------------------------------------------------------- shared by the tests
# One definition of each small config the tests train or save. The variants are
# named for what differs from SMALL; a test depends on the values it was written
# with (buffer sizes that fill, epsilon at a given step), so they are not merged.

SMALL = DqnConfig(
    hidden_sizes=(16,), learning_rate=1e-3, batch_size=16, buffer_capacity=500,
    min_replay_size=32, target_update_freq=20, epsilon_decay_steps=300,
)  # fmt: skip
SMALL_BUFFER_1K = SMALL.replace(buffer_capacity=1_000)
SMALL_SLOW_TARGET = SMALL.replace(buffer_capacity=1_000, target_update_freq=50,
                                  epsilon_decay_steps=200)  # fmt: skip
# SMALL's sizes with DqnConfig's default rates and schedules.
SMALL_DEFAULT_RATES = DqnConfig(hidden_sizes=(16,), batch_size=16, buffer_capacity=500,
                                min_replay_size=32)  # fmt: skip
TWO_LAYER = DqnConfig(
    hidden_sizes=(16, 16), learning_rate=1e-3, batch_size=8, buffer_capacity=200,
    min_replay_size=20, target_update_freq=10, epsilon_decay_steps=100,
)  # fmt: skip
MASKED = DqnConfig(
    hidden_sizes=(16,), learning_rate=1e-3, batch_size=8, buffer_capacity=64,
    min_replay_size=16, target_update_freq=10, epsilon_decay_steps=50, action_masks=True,
)  # fmt: skip
TINY = DqnConfig(
    hidden_sizes=(8,), learning_rate=1e-2, batch_size=4, buffer_capacity=40, min_replay_size=8,
    target_update_freq=5, epsilon_decay_steps=50,
)  # fmt: skip
TINY_MIN4 = TINY.replace(min_replay_size=4)

# The command line's small network: `ember-np train ENV *SMALL_ARGS`. The schedule lengths
# are fixed at the ember preset's step counts, not fractions of --steps, so a run of N steps
# and one of N/2 resumed for N/2 more train alike (a resumed run keeps its schedule).
FIXED_SCHEDULE = ["epsilon_decay_steps=10000", "learning_rate_decay_steps=100000",
                  "per_beta_steps=100000"]  # fmt: skip
SMALL_ARGS = ["--preset", "ember", "--set", "min_replay_size=200", "hidden_sizes=[32]",
              *FIXED_SCHEDULE, "--quiet"]  # fmt: skip
SMALL_ARGS_16 = ["--preset", "ember", "--set", "min_replay_size=64", "hidden_sizes=[16]",
                 *FIXED_SCHEDULE, "--quiet"]  # fmt: skip


def product_case(m, n, k, trans_a, trans_b, dtype, seed=0):
    """Random operands of ``c <- op(a) @ op(b) + beta * c`` (c is m x n, the inner length
    k), as the kernels' ``gemm`` and ``product`` take them."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, m) if trans_a else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(dtype)
    return a, b, rng.standard_normal((m, n)).astype(dtype)


def product_expected(a, b, c, trans_a, trans_b, beta):
    """``op(a) @ op(b) + beta * c`` in float64 (no c term when beta is 0, as BLAS)."""
    op_a = (a.T if trans_a else a).astype(np.float64)
    op_b = (b.T if trans_b else b).astype(np.float64)
    return op_a @ op_b + (beta * c.astype(np.float64) if beta != 0.0 else 0.0)


def make_agent(
    config: DqnConfig = SMALL, seed: int = 0, obs_size: int = 3, n_actions: int = 2, **kw: Any
) -> DqnAgent:
    """A DqnAgent on plain vectors: ``VecEncoder(obs_size)``, ``IndexActionMapper(n_actions)``."""
    return DqnAgent(VecEncoder(obs_size), IndexActionMapper(n_actions), config, seed, **kw)


def agent_state(agent) -> list[bytes]:
    """What must match, as bytes, for two agents to continue identically: both
    networks, Adam's moments, the counters, both random streams, the buffer."""
    online = agent.online.state_dict()
    counters = np.array([agent.total_steps, agent.n_updates], dtype=np.int64)
    return [agent.online.params.tobytes(), agent.target.params.tobytes(),
            online["adam_m"].tobytes(), online["adam_v"].tobytes(),
            counters.tobytes(), agent.exploration_rng.state.tobytes(),
            agent.replay_rng.state.tobytes(), agent.buffer.storage.tobytes()]  # fmt: skip


def agent_state_with_cursor(agent) -> list[bytes]:
    """:func:`agent_state` and the buffer's write cursor (with its stack of free rows)."""
    return agent_state(agent) + [agent.buffer.kernel_state.cursor.tobytes()]


def weights_rngs_and_counts(agent, include_buffer: bool = True) -> list:
    """Both networks, both random streams, (the buffer's storage,) the update and step counts."""
    buffer = [agent.buffer.storage.tobytes()] if include_buffer else []
    return [agent.online.params.tobytes(), agent.target.params.tobytes(),
            agent.replay_rng.state.tobytes(), agent.exploration_rng.state.tobytes(),
            *buffer, agent.n_updates, agent.total_steps]  # fmt: skip


def saved_state(agent: DqnAgent) -> dict[str, bytes]:
    """Everything that defines an agent, as bytes (what ``save`` writes, buffer included)."""
    return {k: v.tobytes() for k, v in agent.state_arrays(include_buffer=True).items()}


#: metadata.json fields that are times of day (run_id is the start time, YYYYMMDD_HHMMSS)
WALL_CLOCK = ("run_id", "started_at", "last_updated")


def files_of(run_dir: Path) -> dict[str, bytes]:
    """Every file under ``run_dir`` by relative path (metadata.json without its times)."""
    out = {}
    for path in sorted(p for p in run_dir.rglob("*") if p.is_file() and p.name != ".lock"):
        data = path.read_bytes()
        if path.name == "metadata.json":
            meta = json.loads(data)
            for key in WALL_CLOCK:
                assert key in meta  # the exclusion names fields that exist
                meta.pop(key)
            data = json.dumps(meta, sort_keys=True).encode()
        out[path.relative_to(run_dir).as_posix()] = data
    return out


def torch_layers(torch, q):  # noqa: ANN001, ANN201
    """``q``'s layers as torch modules holding copies of its values: (trunk, norms, heads),
    each a ModuleList; trunk and norms have one entry per hidden layer (LayerNorm, eps
    1e-5, or Identity without), heads the output layer(s) (dueling: advantages, value)."""
    lins = []
    for w, b in zip(q.weights, q.biases):
        lin = torch.nn.Linear(w.shape[0], w.shape[1])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w.T.copy()))
            lin.bias.copy_(torch.from_numpy(b.copy()))
        lins.append(lin)
    n_hidden = len(q.layer_sizes) - 2
    norms = [torch.nn.Identity() for _ in range(n_hidden)]
    for i, (g, b) in enumerate(zip(q.norm_gains, q.norm_biases)):
        norms[i] = torch.nn.LayerNorm(g.size)
        with torch.no_grad():
            norms[i].weight.copy_(torch.from_numpy(g.copy()))
            norms[i].bias.copy_(torch.from_numpy(b.copy()))
    lists = torch.nn.ModuleList
    return lists(lins[:n_hidden]), lists(norms), lists(lins[n_hidden:])


def check_exact_resume(agent: DqnAgent, path: Path, steps: int, state=agent_state) -> DqnAgent:
    """Save ``agent`` with its buffer to ``path`` and load it back; assert that both hold the
    same ``state`` (a function of an agent), train each ``steps`` more env steps on
    ``ember_np/CartPole-v1`` started from one seed, and assert it again. Returns the
    restored agent."""
    import gymnasium as gym

    from ember_np import DqnTrainer

    restored = DqnAgent.from_checkpoint(agent.save(path, include_buffer=True))
    assert state(agent) == state(restored)
    for a in (agent, restored):
        DqnTrainer(gym.make("ember_np/CartPole-v1"), a, seed=3).train(steps)
    assert state(agent) == state(restored)
    return restored


def still_running(proc: subprocess.Popen, deadline: float, waiting_for: str) -> None:
    """Fails the test with ``proc``'s output once it has exited or ``deadline`` (a
    ``time.time()``) has passed while the test was ``waiting_for`` something. A process
    still running then is killed first: reading the output of a live process would wait
    for as long as it runs, and a stuck one for ever."""
    alive = proc.poll() is None
    if alive and time.time() < deadline:
        return
    how = "still running" if alive else f"exited with {proc.returncode}"
    if alive:
        proc.kill()
    try:
        out, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # a child of its holds the pipes open
        out = err = "(unread: a child of the process holds its pipes open)"
    raise AssertionError(f"waiting for {waiting_for}, the process was {how}:\n{out}\n{err}")


def read_line(proc: subprocess.Popen, timeout: float = 120.0) -> str:
    """The next line ``proc`` writes to its stdout pipe, waited for at most ``timeout``
    seconds: then ``proc`` is killed and the test fails, instead of waiting for ever
    on a child that is stuck."""
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if reader.is_alive():
        proc.kill()
        raise AssertionError(f"no line from {proc.args} within {timeout} s; killed it")
    return line[0]


def interruptible() -> None:
    """A ``preexec_fn`` giving a child process the default SIGINT action, so Python
    turns Ctrl-C into KeyboardInterrupt there: a test suite started in the background
    of a shell without job control (``pytest &``) inherits SIGINT ignored, and a
    child started with SIGINT ignored keeps ignoring it."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


# ---------------------------------------------------------------- CartPole agents
# The agent the component tests (dueling, LayerNorm, noisy, distributional heads) train
# on ember_np/CartPole-v1, each with its component: CARTPOLE_AGENT.replace(...).
CARTPOLE_AGENT = DqnConfig(
    hidden_sizes=(32, 32), learning_rate=1e-3, batch_size=32, buffer_capacity=3_000,
    min_replay_size=100, target_update_freq=50, epsilon_end=0.05, epsilon_decay_steps=2_000,
    max_grad_norm=10.0,
)  # fmt: skip


def cartpole_trainer(config: DqnConfig, seed: int = 0, **kw: Any) -> DqnTrainer:
    """A DqnTrainer of a new agent with ``config`` on ``ember_np/CartPole-v1`` (the
    compiled env: the fused loop unless ``fused=False``), ``seed`` for both."""
    env = gym.make("ember_np/CartPole-v1")
    return DqnTrainer(env, DqnAgent.for_env(env, config, seed=seed), seed=seed, **kw)


def train_both_loops(fused, python, rounds: int = 3, steps: int = 500) -> list[float]:
    """Train a fused trainer and its Python-loop twin ``rounds`` times ``steps`` steps
    each (asserting which is which); returns the fused agent's loss after each round."""
    assert fused.fused and not python.fused
    losses = []
    for _ in range(rounds):
        fused.train(steps)
        python.train(steps)
        losses.append(fused.agent.last_loss)
    return losses

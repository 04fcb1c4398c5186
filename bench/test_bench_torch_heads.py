"""The S1 update of each value head, ember_np against torch, side by side.

Run with ``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m pytest bench -k heads_vs_torch``
(needs torch: ``pip install torch==2.13.0``; skipped without it). Issue 26's bar:
ember_np's C51 and QR-DQN updates at least 10x torch's at S1.

Both sides do the same work per update: a double-DQN target (the online
network picks the next action by its expected value, the target network
gives that action's distribution), the head's loss (plain: Huber; C51: the
categorical projection and cross-entropy; QR: the quantile Huber loss with
kappa 1), the backward pass, global-norm clipping at 10 and one Adam step, in
float32 on one thread. The torch side is the usual eager-mode code a torch
user would write (as in CleanRL's C51 and Tianshou's QR-DQN policies), not a
copy of either.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import BATCH, SETTINGS

from ember_np import Batch, QNetwork, UpdateOptions
from ember_np.dqn.heads.head import DistributionalHead

HEADS = {"plain": None, "c51": DistributionalHead("c51", 51, -10.0, 10.0),
         "qr": DistributionalHead("qr", 50)}  # fmt: skip
GAMMA = 0.99


def _batch(sizes: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    obs = rng.standard_normal((BATCH, sizes[0])).astype(np.float32)
    next_obs = rng.standard_normal((BATCH, sizes[0])).astype(np.float32)
    actions = rng.integers(0, sizes[-1], BATCH).astype(np.int64)
    rewards = rng.standard_normal(BATCH).astype(np.float32)
    masks = (rng.random(BATCH) > 0.05).astype(np.float32)
    return obs, actions, rewards, next_obs, masks


class TorchDqn:
    """An S1 network with a plain, C51 or QR head and its update, in torch."""

    def __init__(self, torch, sizes: tuple[int, ...], head: DistributionalHead | None) -> None:  # noqa: ANN001
        self.torch, self.head = torch, head
        self.n_actions = sizes[-1]
        self.width = 1 if head is None else head.n_atoms
        layers = []
        for i in range(len(sizes) - 2):
            layers += [torch.nn.Linear(sizes[i], sizes[i + 1]), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(sizes[-2], self.n_actions * self.width))
        self.net = torch.nn.Sequential(*layers)
        self.target = torch.nn.Sequential(*[type(m)() if isinstance(m, torch.nn.ReLU)
                                            else torch.nn.Linear(m.in_features, m.out_features)
                                            for m in layers])  # fmt: skip
        self.target.load_state_dict(self.net.state_dict())
        self.opt = torch.optim.Adam(self.net.parameters(), lr=1e-4)
        if head is not None and head.kind == "c51":
            self.support = torch.linspace(head.v_min, head.v_max, head.n_atoms)
        if head is not None and head.kind == "qr":
            self.tau = (torch.arange(head.n_atoms, dtype=torch.float32) + 0.5) / head.n_atoms

    def _out(self, net, x):  # noqa: ANN001, ANN202
        return net(x).view(len(x), self.n_actions, self.width)

    def _c51_loss(self, obs, actions, rewards, next_obs, masks):  # noqa: ANN001, ANN202
        torch, head = self.torch, self.head
        rows = torch.arange(BATCH)
        with torch.no_grad():
            q_next = (torch.softmax(self._out(self.net, next_obs), -1) * self.support).sum(-1)
            p = torch.softmax(self._out(self.target, next_obs)[rows, q_next.argmax(1)], -1)
            tz = rewards[:, None] + GAMMA * masks[:, None] * self.support
            tz = tz.clamp(head.v_min, head.v_max)
            b = (tz - head.v_min) / ((head.v_max - head.v_min) / (head.n_atoms - 1))
            low, up = b.floor().long(), b.ceil().long()
            m = torch.zeros_like(p)
            m.scatter_add_(1, low, p * (up.float() - b + (low == up).float()))
            m.scatter_add_(1, up, p * (b - low.float()))
        logits = self._out(self.net, obs)[rows, actions]
        return -(m * torch.log_softmax(logits, -1)).sum(-1).mean()

    def _qr_loss(self, obs, actions, rewards, next_obs, masks):  # noqa: ANN001, ANN202
        torch = self.torch
        rows = torch.arange(BATCH)
        with torch.no_grad():
            best = self._out(self.net, next_obs).mean(-1).argmax(1)
            next_quantiles = self._out(self.target, next_obs)[rows, best]
            target = rewards[:, None] + GAMMA * masks[:, None] * next_quantiles
        quantiles = self._out(self.net, obs)[rows, actions]
        u = target[:, None, :] - quantiles[:, :, None]
        huber = torch.where(u.abs() <= 1.0, 0.5 * u * u, u.abs() - 0.5)
        weight = (self.tau[None, :, None] - (u.detach() < 0).float()).abs()
        return (weight * huber).sum(1).mean(1).mean()

    def _plain_loss(self, obs, actions, rewards, next_obs, masks):  # noqa: ANN001, ANN202
        torch = self.torch
        rows = torch.arange(BATCH)
        with torch.no_grad():
            best = self.net(next_obs).argmax(1)
            y = rewards + GAMMA * masks * self.target(next_obs)[rows, best]
        q = self.net(obs)[rows, actions]
        return torch.nn.functional.smooth_l1_loss(q, y)

    def update(self, batch) -> float:  # noqa: ANN001
        loss_of = {None: self._plain_loss, "c51": self._c51_loss, "qr": self._qr_loss}
        loss = loss_of[None if self.head is None else self.head.kind](*batch)
        self.opt.zero_grad()
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(self.net.parameters(), 10.0)
        self.opt.step()
        return loss.item()


@pytest.mark.parametrize("library", ["ember_np", "torch"])
@pytest.mark.parametrize("head", list(HEADS))
def test_update_heads_vs_torch(benchmark, head, library):
    """One S1 double-DQN update of each head (plain, C51 51 atoms, QR 50 quantiles)."""
    batch = _batch(SETTINGS["S1"])
    benchmark.extra_info.update(head=head, library=library)
    if library == "torch":
        torch = pytest.importorskip("torch")
        torch.set_num_threads(1)
        model = TorchDqn(torch, SETTINGS["S1"], HEADS[head])
        tensors = tuple(torch.from_numpy(a) for a in batch)
        assert np.isfinite(model.update(tensors))  # warm-up
        benchmark(model.update, tensors)
        return
    net = QNetwork(SETTINGS["S1"], seed=0, head=HEADS[head])
    target = net.copy()
    options = UpdateOptions(gamma=GAMMA, learning_rate=1e-4, double_dqn=True, max_grad_norm=10.0)
    b = Batch(*batch)
    assert np.isfinite(net.update(b, target, options))  # compile / load outside the timed region
    benchmark(net.update, b, target, options)

"""CircularBuffer: a fixed-capacity replay buffer in one structured NumPy array.

Each stored transition is one record of :func:`transition_dtype`::

    obs       float32 (obs_size,)
    action    uint8 (int32 for more than 256 actions)
    reward    float32
    status    uint8   (EpisodeStatus: 0 continuing, 1 terminated, 2 truncated)
    next_ref  int32   where next_obs is: -1 = the next slot's obs, else a row of ``finals``

The next observation of a transition is, almost always, the observation of
the transition pushed right after it, so it is stored once: in the next
slot. Only where it is not (an episode's last step, terminated or truncated,
or a stream that jumps) does it go to a row of a separate ``finals`` array.
A push writes its ``next_obs`` to a finals row; the next push, if its ``obs``
has the same bits, releases that row and marks the previous slot
``next_ref = -1``. Rows are recycled through a free list, so ``finals`` only
ever holds (in memory that is touched) the rows in use at once: about one per
episode in the buffer. A CartPole transition costs 26 bytes (41 with
``next_obs`` in every record and an int32 action; SB3's ``ReplayBuffer``
52). Unlike SB3's ``optimize_memory_usage``, a truncated transition keeps
its true final observation.

Push and sample are ``@njit`` kernels that take the arrays themselves; numba
compiles one version per observation size, cached on disk like every kernel.
Sampling is uniform with replacement over the stored transitions, drawn from
an explicit :class:`~ember_np.rng.Rng` (:class:`PrioritizedBuffer`: in
proportion to priorities, from a sum tree).

n-step returns (``n_step > 1``) are computed at sample time from this layout,
so nothing is stored twice. A transition in slot t *continues* into slot t+1
when its status is CONTINUING and its next_obs is slot t+1's obs (``next_ref
== -1``, the rule above: bitwise equal); that is what an episode stream is
here. A buffer built with ``num_envs`` N > 1 (vectorised envs) splits its
slots into N segments, one ring per env with its own cursor
(``replay_io.py``): ``push(..., env=e)`` writes env e's segment, so
continuation and the n-step walk below never leave one env's stream, even
when two envs' observations are bitwise equal; sampling stays uniform over
every stored transition. For slot t, the walk takes m = 1 + the number of
continuing links from t, at most n, stopping at a terminated or truncated
transition, at a jump, and at the newest stored transition (the write
cursor). Then

    reward    = sum_{k<m} gamma^k r_{t+k}
    next_obs  = the next observation of slot t+m-1
    discount  = gamma^m * (0 if slot t+m-1 terminated else 1)

A transition whose n steps are not all stored yet (the newest n-1 of a
running episode) uses what is stored, with its smaller m; as returns are
computed at every sample, a later sample sees the longer return.

A buffer built with ``action_masks=True`` also keeps each transition's
next-state action mask in ``next_action_masks``, ceil(num_actions / 8) bytes
of packed bits per slot (Taxi-v3: 1 byte), and sampled batches carry them to
the TD target; otherwise that array has no rows and push and sample skip it.
An n-step return's mask is that of the state it bootstraps from: the next
state of slot t+m-1.

The module is split by concern: ``replay_kernels.py`` (transition dtype,
ReplayState, compiled push / sample / priorities), ``circular.py``
(CircularBuffer) and ``prioritized.py`` (PrioritizedBuffer); their public
names are re-exported here.
"""

from __future__ import annotations

from ember_np.dqn.replay.circular import CircularBuffer
from ember_np.dqn.replay.prioritized import PrioritizedBuffer
from ember_np.dqn.replay.replay_kernels import (  # noqa: F401  (re-exported)
    BAD_ACTION,
    CURSOR_LEN,
    F32,
    F32_MAX,
    MAX_PRIORITY,
    NO_F64,
    POS,
    TERMINATED,
    ReplayState,
    draw_prioritized,
    gather_n_step,
    gather_one_step,
    pack_mask,
    push_transition,
    release_row,
    sample_into,
    transition_dtype,
    update_priorities,
)  # fmt: skip
from ember_np.types import Batch

__all__ = ["Batch", "CircularBuffer", "PrioritizedBuffer", "transition_dtype"]

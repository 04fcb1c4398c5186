"""What a PPO checkpoint holds, by name: NumPy only, read by the agent and the policy.

An ``.npz`` written by :meth:`PPOAgent.save <ember_np.ppo.agent.PPOAgent.save>`:

* ``format`` ``"ember_np.ppo"``, ``format_version`` 1, ``counters`` int64 (2,): the
  env transitions observed and the epochs of updates;
* ``meta``: JSON (seed, config, encoder, action mapper, ``num_envs``, autoreset mode,
  last loss); the config's ``schedule_steps`` is the span of its linear schedules;
* ``net/params``, ``net/adam_m``, ``net/adam_v``, ``net/adam_t``: the actor-critic and its
  Adam state; ``net/layers``: its layer table (int64 (L, 7), columns :data:`LAYER_COLUMNS`),
  so a policy runs the network without rebuilding it;
* ``buffer/...``: the rollout in progress, ``pending_*``: the observations, values and
  log-probabilities of the actions picked last; ``rng_act``, ``rng_update``: the streams;
* ``normalizer/...``: the running statistics, when observations or rewards are normalised.
"""

from __future__ import annotations

__all__ = ["CHECKPOINT_FORMAT", "CHECKPOINT_VERSION", "LAYER_COLUMNS", "NET_KEYS", "BUFFER_KEYS"]

#: The format tag of a PPO checkpoint (a DQN checkpoint is refused by it, by name).
CHECKPOINT_FORMAT = "ember_np.ppo"
CHECKPOINT_VERSION = 1
#: The network's arrays a checkpoint holds, under ``net/`` (ActorCritic's attributes).
NET_KEYS = ("params", "adam_m", "adam_v", "adam_t", "layers")
#: The rollout buffer's arrays (RolloutArrays fields) under ``buffer/``.
BUFFER_KEYS = ("obs", "actions", "rewards", "values", "log_probs", "masks", "dones", "valid",
               "advantages", "returns", "ended", "cursor")  # fmt: skip
#: The layer table's columns, in order (``ember_np.ppo.network``'s ``N_IN`` ... ``ROLE``).
LAYER_COLUMNS = ("n_in", "n_out", "w_off", "src", "a_off", "act", "role")

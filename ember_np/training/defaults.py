"""Every default of a training run, in one place: :class:`~ember_np.training.spec.RunSpec`'s.

A module of its own so that the trainer, which :func:`~ember_np.training.spec.build`
imports, can take its defaults from here without importing the spec.
"""

#: Env steps of a run whose preset names no budget (or that has no preset).
DEFAULT_STEPS = 100_000
#: Env steps between greedy evaluations.
DEFAULT_EVAL_EVERY = 10_000
#: Greedy episodes per evaluation.
DEFAULT_EVAL_EPISODES = 10
#: Env steps between numbered checkpoints.
DEFAULT_CHECKPOINT_FREQ = 10_000
#: Numbered checkpoints kept (older ones are deleted).
DEFAULT_KEEP = 5

"""How a Q-network learns: :class:`~ember_np.QNetwork` and its state, the update's
NamedTuples, TD targets and the Huber loss, the distributional losses (C51,
QR-DQN) and noisy layers. Built on ``ember_np/nn/`` (forward and backward
passes, Adam) and ``ember_np/dqn/heads/`` (what the outputs mean).
"""

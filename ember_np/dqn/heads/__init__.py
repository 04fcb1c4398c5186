"""What a Q-network's outputs mean and how actions are read from them: the value
head's description (plain, C51, QR-DQN), expected Q-values, greedy actions,
and the NumPy / compiled forward passes a deployed policy runs. Nothing here
learns (``ember_np/dqn/learner/``). Imports nothing, so that ``head.py`` and
``forward.py`` stay NumPy-only for the deployment path.
"""

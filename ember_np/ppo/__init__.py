"""PPO (proximal policy optimisation) on ember_np's compiled engine."""

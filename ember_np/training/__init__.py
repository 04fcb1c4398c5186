"""Training drivers: DqnTrainer and TrainingRun."""

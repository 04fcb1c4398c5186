"""``ember-np report`` and ``ember-np plot`` for multi-seed runs.

``report`` prints, for each multi-seed run (the parent directory that
``ember-np train ENV --seeds K`` makes), the IQM [95% CI], median and mean of
the final and best evaluation rewards over its seeds, then the probability of
improvement of the first run over each other one. ``plot`` draws the IQM
learning curves with their 95% CI bands and the performance profiles of the
final rewards (needs matplotlib, the ``plot`` extra).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from ember_np.training.multiseed import MultiSeedResult, is_multiseed, load_multiseed

__all__ = ["cmd_plot_multiseed", "cmd_report", "curve_matrix"]


def _load(paths: list[str]) -> list[MultiSeedResult]:
    from ember_np.cli import UsageError

    results = []
    for path in paths:
        if not Path(path).is_dir():
            raise UsageError(f"no run directory at {path}")
        if not is_multiseed(path):
            raise UsageError(
                f"{path} is not a multi-seed run (no seeds.json): give the parent directory "
                "that 'ember-np train ENV_ID --seeds K' printed"
            )
        try:
            result = load_multiseed(path)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        if not result.runs:
            raise UsageError(f"{path}: no seed has finished yet (ember-np resume {path})")
        results.append(result)
    return results


def cmd_report(args: argparse.Namespace) -> int:
    """Print each run's summary and P(first run > each other run)."""
    from ember_np import tune
    from ember_np.stats import probability_of_improvement

    tune_dirs = [p for p in args.run_paths if tune.is_tune_dir(p)]
    for path in tune_dirs:  # a tune directory: its study's best trials and importances
        status = tune.cmd_tune(argparse.Namespace(
            env_id=None, study=None, dir=path, show=True, storage=None))  # fmt: skip
        if status:
            return status
    run_paths = [p for p in args.run_paths if p not in tune_dirs]
    if not run_paths:
        return 0
    results = _load(run_paths)
    for k, result in enumerate(results, 1):
        print(f"[{k}] {result.summary()}")
    if len(results) > 1:
        print("Probability of improvement over seeds, P(X > Y) + 0.5 P(X = Y) [95% CI]:")
        first = results[0]
        for k, other in enumerate(results[1:], 2):
            parts = []
            for which in ("final", "best"):
                p, (low, high) = probability_of_improvement(first.scores(which),
                                                            other.scores(which))  # fmt: skip
                parts.append(f"{which} {p:.2f} [{low:.2f}, {high:.2f}]")
            print(f"  [1] over [{k}]: " + "; ".join(parts))
    return 0


def curve_matrix(result: MultiSeedResult) -> tuple[np.ndarray, np.ndarray]:
    """Evaluation steps (points,) and rewards (seeds, points) at the steps every seed has.

    Where a step has two evaluations (the last periodic one and the final
    one), the final one counts. ValueError when the curves share no step.
    """
    per_seed = [{step: reward for step, reward, _ in r.curve} for r in result.runs]
    steps = sorted(set.intersection(*(set(c) for c in per_seed)))
    if not steps:
        raise ValueError(
            f"{result.parent}: the seeds' curves share no evaluation step (every seed's "
            f"result.json ends at step {result.spec.steps:,}, its final evaluation)"
        )
    return np.array(steps), np.array([[c[s] for s in steps] for c in per_seed])


def cmd_plot_multiseed(args: argparse.Namespace) -> int:
    """IQM curves with 95% CI bands and performance profiles, one figure."""
    from ember_np.cli import UsageError, plot_output, save_plot
    from ember_np.stats import iqm_curve, performance_profile

    results = _load(args.run_paths)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("ember-np plot needs matplotlib: pip install 'ember-np[plot]'", file=sys.stderr)
        return 1
    fig, (curves, profiles) = plt.subplots(1, 2, figsize=(11, 4.2))
    out = plot_output(args.output, fig)  # as the single-run plot: checked before drawing
    finals = [np.array(r.scores("final")) for r in results]
    lowest = min(float(f.min()) for f in finals)
    highest = max(float(f.max()) for f in finals)
    taus = np.linspace(lowest - 1e-9, highest, 101)
    for k, (result, final) in enumerate(zip(results, finals), 1):
        label = f"[{k}] {result.spec.name}/{result.spec.version}/{result.parent.name}"
        try:
            steps, rewards = curve_matrix(result)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        band = iqm_curve(rewards)
        (line,) = curves.plot(steps, band.value, label=f"{label} ({rewards.shape[0]} seeds)")
        curves.fill_between(steps, band.low, band.high, color=line.get_color(), alpha=0.25, lw=0)
        profile = performance_profile(final, taus)
        profiles.plot(taus, profile.value, color=line.get_color(), label=label)
        profiles.fill_between(taus, profile.low, profile.high, color=line.get_color(),
                              alpha=0.25, lw=0)  # fmt: skip
    curves.set_xlabel("env steps")
    curves.set_ylabel("IQM of greedy eval reward over seeds (95% CI)")
    profiles.set_xlabel("final eval reward tau")
    profiles.set_ylabel("fraction of seeds with reward > tau (95% CI)")
    for ax in (curves, profiles):
        ax.grid(alpha=0.3)
    curves.legend(fontsize="small")
    fig.tight_layout()
    save_plot(fig, out, dpi=110)
    return 0

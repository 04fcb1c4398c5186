"""What ``ember-np report`` and ``plot`` compute over multi-seed runs.

``report`` prints, for each multi-seed run (the parent directory that
``ember-np train ENV --seeds K`` makes), the IQM [95% CI], median and mean of
the final and best evaluation rewards over its seeds, then the probability of
improvement of the first run over each other one. ``plot`` draws the IQM
learning curves with their 95% CI bands and the performance profiles of the
final rewards. This module loads the runs and lines their curves up; the
printing and drawing are the command line's (``ember_np.cli.inspection``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ember_np.training.loop import eval_mark
from ember_np.training.seeds import MultiSeedResult, SeedSpec, is_multiseed, load_multiseed

__all__ = ["ReportError", "curve_matrix", "improvement_lines", "load_results"]


class ReportError(ValueError):
    """A path that is not a finished multi-seed run; the message says what to give instead."""


def load_results(paths: list[str]) -> list[MultiSeedResult]:
    """The multi-seed runs at ``paths``, each with at least one finished seed.

    Raises
    ------
    ReportError
        A path that is not a directory, not a multi-seed run, unreadable, or
        with no finished seed yet.
    """
    results = []
    for path in paths:
        if not Path(path).is_dir():
            raise ReportError(f"no run directory at {path}")
        if not is_multiseed(path):
            raise ReportError(
                f"{path} is not a multi-seed run (no seeds.json): give the parent directory "
                "that 'ember-np train ENV_ID --seeds K' printed"
            )
        try:
            result = load_multiseed(path)
        except ValueError as exc:
            raise ReportError(str(exc)) from None
        if not result.runs:
            raise ReportError(f"{path}: no seed has finished yet (ember-np resume {path})")
        results.append(result)
    return results


def improvement_lines(results: list[MultiSeedResult]) -> list[str]:
    """P(first run > each other run) over seeds, final and best rewards, one line each."""
    from ember_np.stats import probability_of_improvement

    first = results[0]
    lines = []
    for k, other in enumerate(results[1:], 2):
        parts = []
        for which in ("final", "best"):
            p, (low, high) = probability_of_improvement(first.scores(which),
                                                        other.scores(which))  # fmt: skip
            parts.append(f"{which} {p:.2f} [{low:.2f}, {high:.2f}]")
        lines.append(f"  [1] over [{k}]: " + "; ".join(parts))
    return lines


def curve_matrix(result: MultiSeedResult) -> tuple[np.ndarray, np.ndarray]:
    """Evaluation steps (points,) and rewards (seeds, points) at the steps every seed has.

    Each evaluation stands at the step it was asked for: a multiple of
    ``eval_every``, and ``--steps`` for the final one. With N envs the
    evaluation itself ran at the first vector-step boundary at or past it
    (up to N - 1 steps later; with gymnasium's envs a different step per
    seed), so the seeds' curves line up. Where a step has two evaluations
    (the last periodic one and the final one), the final one counts.
    ValueError when the curves share no step.

    Returns
    -------
    steps : ndarray of int64, shape (points,)
    rewards : ndarray of float64, shape (seeds, points)
    """
    per_seed = [_at_marks(r.curve, result.spec) for r in result.runs]
    steps = sorted(set.intersection(*(set(c) for c in per_seed)))
    if not steps:
        raise ValueError(
            f"{result.parent}: the seeds' curves share no evaluation step (every seed's "
            f"result.json ends at step {result.spec.steps:,}, its final evaluation)"
        )
    return np.array(steps), np.array([[c[s] for s in steps] for c in per_seed])


def _at_marks(curve: list[tuple[int, float, float]], spec: SeedSpec) -> dict[int, float]:
    """A seed's curve keyed by the step each evaluation was asked for (see :func:`curve_matrix`)."""
    stops = spec.stop_steps()
    out = {}
    for k, (step, reward, _) in enumerate(curve):
        if k == len(curve) - 1 and step in stops:
            out[spec.steps] = reward
            continue
        mark = eval_mark(step, spec.eval_every, spec.num_envs)
        out[step if mark is None else min(mark, spec.steps)] = reward
    return out

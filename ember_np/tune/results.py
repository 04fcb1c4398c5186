"""What a tune study found: its best trials, the hyperparameter importances, the best preset.

``ember-np tune`` prints :func:`summary` when the workers end (and for
``--show`` / ``ember-np report TUNE_DIR``) and writes :func:`best_preset` as
``best_preset.json``, a preset file for ``ember-np train --preset``.
"""

from __future__ import annotations

import textwrap
import warnings
from typing import Any

from ember_np.dqn.config import SCHEDULE_FIELDS
from ember_np.tune.storage import SETTINGS_ATTR

__all__ = ["best_preset", "importances", "summary"]


def _finished(study: Any) -> list[Any]:
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    return sorted(trials, key=lambda t: (-t.value, t.number))


def importances(study: Any) -> dict[str, float] | None:
    """Each searched parameter's importance (PED-ANOVA), or None with < 2 complete trials.

    PED-ANOVA (``optuna.importance.PedAnovaImportanceEvaluator``) needs only
    NumPy; Optuna's default, fANOVA, needs scikit-learn.
    """
    import optuna

    if len(_finished(study)) < 2:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "too few trials" notes: the caller says how many
        evaluator = optuna.importance.PedAnovaImportanceEvaluator()
        return optuna.importance.get_param_importances(study, evaluator=evaluator)


def summary(study: Any, top: int = 5) -> str:
    """The study's state, its best ``top`` trials and the hyperparameter importances."""
    from optuna.trial import TrialState

    settings = study.user_attrs[SETTINGS_ATTR]  # TuneSettings.to_dict()
    trials = study.get_trials(deepcopy=False)
    counts = {s: sum(t.state == s for t in trials) for s in TrialState}
    surplus = sum(bool(t.user_attrs.get("surplus")) for t in trials)
    lines = [
        f"study {study.study_name}: {counts[TrialState.COMPLETE]} complete, "
        f"{counts[TrialState.PRUNED]} pruned, {counts[TrialState.FAIL] - surplus} failed, "
        f"{counts[TrialState.RUNNING]} running, {counts[TrialState.WAITING]} waiting"
        + (f" ({surplus} surplus trials not run)" if surplus else ""),
        f"objective: IQM of {settings['seeds']} seeds' final greedy evaluations "
        f"({settings['eval_episodes']} episodes each) after {settings['steps']:,} steps on "
        f"{settings['train_env_id']}",
    ]
    best = _finished(study)[:top]
    if not best:
        lines.append("no complete trial yet")
        return "\n".join(lines)
    lines.append(f"best {len(best)} trials:")
    for t in best:
        scores = ", ".join(f"{s:.1f}" for s in t.user_attrs.get("scores", []))
        params = " ".join(f"{k}={_fmt(v)}" for k, v in sorted(t.params.items()))
        lines.append(f"  trial {t.number:>4}  IQM {t.value:9.2f}  seeds [{scores}]")
        lines += textwrap.wrap(params, 96, initial_indent=" " * 14, subsequent_indent=" " * 14)
    found = importances(study)
    if found is None:
        lines.append("importances: need at least 2 complete trials")
    else:
        n = counts[TrialState.COMPLETE]
        lines.append(f"hyperparameter importance (PED-ANOVA over {n} complete trials):")
        for name, value in found.items():
            lines.append(f"  {name:<26} {value:6.3f}  {'#' * round(40 * value)}")
    return "\n".join(lines)


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def best_preset(study: Any) -> dict[str, Any] | None:
    """The best complete trial as a preset (``ember-np train ENV --preset FILE.json``)."""
    best = _finished(study)
    if not best:
        return None
    t = best[0]
    settings = study.user_attrs[SETTINGS_ATTR]  # TuneSettings.to_dict()
    config, steps = t.user_attrs["config"], settings["steps"]
    source = (f"ember-np tune: study {study.study_name}, trial {t.number}, "
              f"IQM {t.value:.2f} over {settings['seeds']} seeds")  # fmt: skip
    algorithm = settings.get("algorithm", "dqn")
    if algorithm != "dqn":  # its preset file: the config under its name, the run's envs
        return {"format": "ember_np.preset", "algorithm": algorithm,
                "env_id": settings["env_id"], "steps": steps,
                "num_envs": settings.get("num_envs", 1), "source": source,
                algorithm: config}  # fmt: skip
    # the schedule lengths the trial trained with, as fractions of its budget, so that
    # `train --preset FILE --steps N` scales them (at N = steps: exactly "dqn"'s); one
    # fixed with --set stays as given at any --steps
    schedule = {
        key: config[key] / steps
        for key in SCHEDULE_FIELDS
        if key in config and key not in settings.get("fixed", {})
    }
    return {
        "format": "ember_np.preset",
        "env_id": settings["env_id"],
        "steps": settings["steps"],
        "source": source,
        "dqn": config,
        "schedule": schedule,
    }

"""``ember-np tune``: the command's options, its workers and its printed results.

The search itself (space, objective, workers) is :mod:`ember_np.tune`; the
storage and study handling :mod:`ember_np.tune.storage`; this module turns
options into :class:`~ember_np.tune.TuneSettings`, starts the worker
processes and prints what the study found.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ember_np.algorithms import DEFAULT_ALGORITHM
from ember_np.cli.common import UsageError, add_vector_arguments, non_negative, positive
from ember_np.training.multiseed import check_workers, default_workers
from ember_np.training.spec import DEFAULT_EVAL_EPISODES
from ember_np.tune import (
    DEFAULT_HEARTBEAT,
    INSTALL_HINT,
    TuneSettings,
    best_preset,
    is_tune_dir,
    settings_for,
    spawn_workers,
    stop_workers,
    summary,
)
from ember_np.tune.storage import (
    absolute_storage,
    check_storage,
    local_file,
    masked,
    open_storage,
    open_study,
    recorded_storage,
    write_json,
)

__all__ = ["add_tune_parser", "cmd_tune", "print_results", "settings_from_args", "show"]


def add_tune_parser(sub: Any) -> None:
    """Register ``ember-np tune`` on the CLI's subparsers."""
    p = sub.add_parser("tune", help="hyperparameter search on Optuna (needs the tune extra)")
    p.add_argument("env_id", help="gymnasium id, e.g. CartPole-v1")
    p.add_argument(
        "--trials", type=positive, default=50, help="complete + pruned trials (default 50)"
    )
    p.add_argument("--seeds", type=positive, default=3, help="K seeds per trial (default 3)")
    p.add_argument("--steps", type=positive, help="env steps per seed (default: preset budget)")
    p.add_argument(
        "--workers", type=positive, help="processes on this machine (default: one per core)"
    )
    p.add_argument("--storage", help="SQLAlchemy URL or journal file .log (default: SQLite)")
    p.add_argument("--study", help="study name (default: the env id)")
    p.add_argument("--dir", help="tune directory (default: tunes/<study>)")
    p.add_argument("--sampler", choices=("tpe", "random"), default="tpe")
    p.add_argument("--pruner", choices=("median", "none"), default="median")
    p.add_argument("--timeout", type=positive, help="seconds after which no trial starts")
    p.add_argument("--seed", type=non_negative, default=0, help="study seed (default 0)")
    p.add_argument("--evals", type=positive, default=5, help="evaluations per seed (default 5)")
    p.add_argument("--eval-episodes", type=positive, default=DEFAULT_EVAL_EPISODES)
    p.add_argument(
        "--heartbeat", type=positive, default=DEFAULT_HEARTBEAT,
        help="seconds between heartbeats; a silent trial is failed and retried after 3x",
    )  # fmt: skip
    add_vector_arguments(p)
    p.add_argument("--gymnasium-env", action="store_true",
                   help="train on gymnasium's own env, not ember_np's compiled twin of "
                   "CartPole-v1, Acrobot-v1 or MountainCar-v0 (as train's)")  # fmt: skip
    p.add_argument("--algo", default=DEFAULT_ALGORITHM, metavar="NAME",
                   help=f"the algorithm whose search space is searched (default "
                   f"{DEFAULT_ALGORITHM}), as train's --algo")  # fmt: skip
    p.add_argument("--set", nargs="+", metavar="KEY=VALUE",
                   help="fix fields of the algorithm's config (DqnConfig for dqn)")  # fmt: skip
    p.add_argument("--show", action="store_true", help="only print the study's results")
    p.add_argument("--quiet", action="store_true", help="no line per trial")
    p.set_defaults(func=cmd_tune)


def settings_from_args(args: argparse.Namespace) -> TuneSettings:
    """``tune``'s options as the study's :class:`~ember_np.tune.TuneSettings`."""
    return settings_for(args.env_id, (args.steps, args.seeds, args.evals, args.eval_episodes),
                        args.seed, args.set or [], num_envs=args.num_envs,
                        vectorization=args.vectorization,
                        gymnasium_env=args.gymnasium_env, algorithm=args.algo)  # fmt: skip


def cmd_tune(args: argparse.Namespace) -> int:
    """``ember-np tune``: start or join a study, run W workers, print the results."""
    try:
        import optuna
    except ImportError:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    name = args.study or args.env_id
    tune_dir = Path(args.dir) if args.dir else Path("tunes") / str(name).replace("/", "_")
    if args.show:  # the study named in the tune directory, unless named here.
        return show(tune_dir, args.storage, args.study or (None if is_tune_dir(tune_dir) else name))
    settings = settings_from_args(args)  # bad arguments fail before anything is created
    try:
        workers = check_workers(args.workers) if args.workers else default_workers()
    except ValueError as exc:
        raise UsageError(f"--{exc}") from None
    if args.storage:
        check_storage(args.storage)
    try:
        tune_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the tune directory {tune_dir}: {exc}") from None
    # Absolute: tune.json then names this study from any directory.
    storage_url = absolute_storage(args.storage or f"sqlite:///{tune_dir / 'study.db'}")
    study = open_study(open_storage(storage_url, args.heartbeat), name, settings)
    write_json(
        tune_dir / "tune.json",
        {"study": name, "storage": masked(storage_url), "settings": settings.to_dict()},
    )
    print(
        f"study {name!r} in {masked(storage_url)}: {args.trials} trials, {settings.seeds} "
        f"seeds x {settings.steps:,} steps on {settings.train_env_id}"
        f"{f' ({settings.run.num_envs} envs)' if settings.run.num_envs > 1 else ''}, "
        f"{workers} workers"
    )
    spec = {
        "storage": storage_url, "study": name, "trials": args.trials,
        "timeout": args.timeout, "heartbeat": args.heartbeat, "sampler": args.sampler,
        "pruner": args.pruner, "quiet": args.quiet,
    }  # fmt: skip
    procs = spawn_workers(spec, workers)
    try:
        codes = [p.wait() for p in procs]
    except KeyboardInterrupt:  # each worker fails its running trial before it ends
        stop_workers(procs)
        print("ember-np tune: interrupted; the running trials were marked failed: run the "
              "same command again to finish the study", file=sys.stderr)  # fmt: skip
        raise
    bad = [f"worker {i}: status {c}" for i, c in enumerate(codes) if c != 0]
    if bad:
        print(f"ember-np tune: {'; '.join(bad)}", file=sys.stderr)
    say_if_stuck(study, args.trials)
    print_results(study, tune_dir)
    return 1 if bad else 0


def say_if_stuck(study: Any, n_trials: int) -> None:
    """Say why a study ended short of its trials: running trials no heartbeat can fail."""
    from optuna.trial import TrialState

    states = [t.state for t in study.get_trials(deepcopy=False)]
    done = sum(s in (TrialState.COMPLETE, TrialState.PRUNED) for s in states)
    running = states.count(TrialState.RUNNING)
    if done < n_trials and running:
        print(
            f"ember-np tune: {done} of {n_trials} trials finished; {running} are marked running "
            "by workers this command cannot check (a journal file has no heartbeat, so a "
            "killed worker's trial stays running): they count towards --trials until they end",
            file=sys.stderr,
        )


def print_results(study: Any, tune_dir: Path) -> None:
    """Print the summary and write the best trial's preset into the tune directory."""
    print(summary(study))
    preset = best_preset(study)
    if preset is not None:
        path = tune_dir / "best_preset.json"
        try:
            tune_dir.mkdir(parents=True, exist_ok=True)
            write_json(path, preset)
        except OSError as exc:
            raise UsageError(f"cannot write {path}: {exc}") from None
        algo = f" --algo {preset['algorithm']}" if "algorithm" in preset else ""
        print(f"best trial as a preset: {path} (ember-np train {preset['env_id']}{algo} "
              f"--preset {path})")  # fmt: skip


def show(tune_dir: str | Path, storage: str | None = None, study_name: str | None = None) -> int:
    """Print a tune directory's results (``--show``; ``ember-np report TUNE_DIR``).

    The study and its storage come from ``tune.json`` unless given; a storage
    URL stored with its password masked must be given again.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tune_dir = Path(tune_dir)
    info_path = tune_dir / "tune.json"
    info: dict[str, Any] = {}
    if storage is None or study_name is None:
        if not info_path.is_file():
            raise UsageError(
                f"no tune directory at {tune_dir} (no tune.json): check --dir or --study"
            )
        try:
            info = json.loads(info_path.read_text())
            info["storage"], info["study"]  # noqa: B018  both must be there
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise UsageError(f"cannot read {info_path}: {exc!r}") from None
    if storage is None:
        storage = recorded_storage(str(info["storage"]), tune_dir, info_path)
    if "***" in storage:
        env_id = (info.get("settings") or {}).get("env_id", "ENV_ID")
        raise UsageError(
            f"{info_path} names {storage} (the password is not recorded): run "
            f"ember-np tune {env_id} --dir {tune_dir} --show --storage FULL_URL"
        )
    check_storage(storage)
    local = local_file(storage)
    if local is not None and not local.is_file():  # opening it would create an empty one
        raise UsageError(
            f"no study database at {local}"
            + (f" (named in {info_path})" if info else "")
            + ": check the path, or run ember-np tune first"
        )
    study = open_study(open_storage(storage), study_name or info["study"], None)
    print_results(study, tune_dir)
    return 0

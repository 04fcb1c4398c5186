"""``ember-np eval``, ``report``, ``plot``, ``dashboard`` and ``export``: reading runs back.

None of these trains: they open a run (or a multi-seed run, or a tune
directory), evaluate, summarise, draw, serve or convert what it holds.
"""

from __future__ import annotations

import argparse
from typing import Any

from ember_np.cli import common
from ember_np.cli.common import (
    UsageError,
    non_negative,
    open_run,
    plot_output,
    positive,
    read_config,
    save_plot,
)
from ember_np.training.setup import check_checkpoint_env

__all__ = [
    "PLOT_INSTALL_HINT",
    "add_dashboard_parser",
    "add_eval_parser",
    "add_export_parser",
    "add_plot_parser",
    "add_report_parser",
    "cmd_dashboard",
    "cmd_eval",
    "cmd_export",
    "cmd_plot",
    "cmd_report",
    "smooth",
]


def cmd_eval(args: argparse.Namespace) -> int:
    """``ember-np eval``: greedy episodes of a run's checkpoint, as it was trained."""
    from ember_np import CheckpointError, EvalReport, StatsTracker
    from ember_np.algorithms import check_checkpoint_format, get_algorithm
    from ember_np.checkpoint import COUNTERS_KEY, Reader
    from ember_np.training.spec import read_spec
    from ember_np.training.trainer import greedy_episode

    run = open_run(args.run_path)
    which = args.checkpoint
    try:
        path = run.named_checkpoint_path(which)
    except ValueError:
        raise UsageError(f"--checkpoint must be best, latest or step_N, got {which!r}") from None
    if not path.exists():
        raise UsageError(f"no checkpoint {path}")
    saved = read_config(run)
    try:
        spec = read_spec(run)
        check_checkpoint_format(path, spec.algorithm)
        policy = get_algorithm(spec.algorithm).load_policy(path)
        total_steps = int(Reader(path).array(COUNTERS_KEY, "int64", (2,))[0])
    except (CheckpointError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    env = common.make_env(saved["env_id"])
    check_checkpoint_env(env, saved["env_id"], policy.encoder, policy.action_mapper, path)
    masks = getattr(spec.config, "action_masks", True) is not False  # as trained
    tracker = StatsTracker()
    for episode in range(args.episodes):
        tracker.update(greedy_episode(env, policy.act, seed=args.seed + episode, masks=masks))
    report = EvalReport(total_steps, args.episodes, tracker.summary())
    print(f"{path}")
    report.print()
    return 0


def smooth(values: list[float], window: int) -> list[float]:
    """The running mean of ``values`` over the last ``window`` (fewer at the start)."""
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


#: The one line (exit status 2, as every missing extra) when matplotlib is missing.
PLOT_INSTALL_HINT = 'ember-np plot needs matplotlib: pip install "ember-np[plot]"'


def pyplot() -> Any:
    """matplotlib.pyplot on the Agg backend; UsageError (:data:`PLOT_INSTALL_HINT`) without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError(PLOT_INSTALL_HINT) from None
    return plt


def cmd_plot(args: argparse.Namespace) -> int:
    """``ember-np plot``: learning curves of runs (multi-seed runs: IQM bands and profiles)."""
    from ember_np.training.seeds import is_multiseed

    if any(is_multiseed(p) for p in args.run_paths):
        return plot_multiseed(args)
    runs = [open_run(p) for p in args.run_paths]
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    out = plot_output(args.output, fig)
    for run in runs:
        label = f"{run.name}/{run.version}/{run.dir.name}"
        rows = [r for r in run.read_train_episodes() if "total_steps" in r]
        if rows:
            xs = [r["total_steps"] for r in rows]
            ys = smooth([r["total_reward"] for r in rows], args.smooth)
            (line,) = ax.plot(xs, ys, label=f"{label} (train, mean of {args.smooth})")
            color = line.get_color()
        else:
            color = None
        evals: dict[int, list[float]] = {}
        for r in run.read_eval_episodes():
            evals.setdefault(int(r["total_steps_at_eval"]), []).append(float(r["total_reward"]))
        if evals:
            steps = sorted(evals)
            means = [sum(evals[s]) / len(evals[s]) for s in steps]
            ax.plot(steps, means, "o--", color=color, label=f"{label} (greedy eval)")
    ax.set_xlabel("env steps")
    ax.set_ylabel("episode reward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    save_plot(fig, out, dpi=120)
    return 0


def load_results(paths: list[str]) -> list[Any]:
    """:func:`ember_np.report.load_results`, its refusal as a :class:`UsageError`."""
    from ember_np.report import ReportError
    from ember_np.report import load_results as load

    try:
        return load(paths)
    except ReportError as exc:
        raise UsageError(str(exc)) from None


def plot_multiseed(args: argparse.Namespace) -> int:
    """IQM curves with 95% CI bands and performance profiles, one figure."""
    import numpy as np

    from ember_np.report import curve_matrix
    from ember_np.stats import iqm_curve, performance_profile

    results = load_results(args.run_paths)
    plt = pyplot()
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


def cmd_report(args: argparse.Namespace) -> int:
    """``ember-np report``: each run's summary and P(first run > each other run)."""
    from ember_np.cli.tune import cmd_tune
    from ember_np.report import improvement_lines
    from ember_np.tune import is_tune_dir

    tune_dirs = [p for p in args.run_paths if is_tune_dir(p)]
    for path in tune_dirs:  # a tune directory: its study's best trials and importances
        status = cmd_tune(argparse.Namespace(
            env_id=None, study=None, dir=path, show=True, storage=None))  # fmt: skip
        if status:
            return status
    run_paths = [p for p in args.run_paths if p not in tune_dirs]
    if not run_paths:
        return 0
    results = load_results(run_paths)
    for k, result in enumerate(results, 1):
        print(f"[{k}] {result.summary()}")
    if len(results) > 1:
        print("Probability of improvement over seeds, P(X > Y) + 0.5 P(X = Y) [95% CI]:")
        for line in improvement_lines(results):
            print(line)
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """``ember-np dashboard``: serve live training charts until Ctrl-C."""
    from ember_np.dashboard import serve

    if args.port > 65535:
        raise UsageError(f"--port must be 0..65535 (0 picks a free port), got {args.port}")
    try:
        serve(args.runs_root, host=args.host, port=args.port, allow_hosts=args.allow_host)
    except ValueError as exc:  # a bad --allow-host
        raise UsageError(str(exc)) from None
    except (FileNotFoundError, OSError) as exc:
        raise UsageError(f"dashboard: {exc}") from None
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    """``ember-np export``: a checkpoint's network (DQN's Q-network, PPO's actor) as ONNX."""
    from ember_np.export import export_onnx, resolve_checkpoint

    try:
        meta = export_onnx(resolve_checkpoint(args.source, args.checkpoint), args.output)
    except (ImportError, ValueError) as exc:  # no onnx; bad path; CheckpointError
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    outputs = meta.get("outputs", "Q-values")  # a PPO actor's: logits
    print(f"wrote {args.output} ({meta['obs_size']} inputs -> {meta['n_actions']} {outputs})")
    return 0


# -- parsers ------------------------------------------------------------------------------


def add_eval_parser(sub: Any) -> None:
    """Register ``eval``."""
    p = sub.add_parser("eval", help="evaluate a run's checkpoint greedily")
    p.add_argument("run_path")
    p.add_argument("--episodes", type=positive, default=20)
    p.add_argument("--checkpoint", default="best", help="best, latest or step_N (default: best)")
    p.add_argument("--seed", type=non_negative, default=0)
    p.set_defaults(func=cmd_eval)


def add_report_parser(sub: Any) -> None:
    """Register ``report``."""
    p = sub.add_parser(
        "report",
        help="IQM [95%% CI] and more over the seeds of multi-seed runs; "
        "a tune directory's best trials and importances",
    )
    p.add_argument("run_paths", nargs="+", metavar="RUN_DIR")
    p.set_defaults(func=cmd_report)


def add_plot_parser(sub: Any) -> None:
    """Register ``plot``."""
    p = sub.add_parser("plot", help="learning curves of one or more runs")
    p.add_argument("run_paths", nargs="+", metavar="RUN_PATH")
    p.add_argument("-o", "--output", required=True, help="output image, e.g. curves.png")
    p.add_argument("--smooth", type=positive, default=20, help="episodes in the moving mean")
    p.set_defaults(func=cmd_plot)


def add_dashboard_parser(sub: Any) -> None:
    """Register ``dashboard``."""
    p = sub.add_parser("dashboard", help="live training charts in the browser")
    p.add_argument("runs_root", nargs="?", default="runs", help="runs directory (default: runs)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=non_negative, default=6006, help="0 picks a free port")
    p.add_argument(
        "--allow-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this host name (repeatable); others get 403",
    )
    p.set_defaults(func=cmd_dashboard)


def add_export_parser(sub: Any) -> None:
    """Register ``export``."""
    p = sub.add_parser(
        "export", help="write a checkpoint's network (DQN's Q-network, PPO's actor) as ONNX"
    )
    p.add_argument("source", metavar="RUN_PATH_OR_CHECKPOINT")
    p.add_argument("--checkpoint", help="best, latest or step_N of a run (default: best)")
    p.add_argument("-o", "--output", required=True, help="output model, e.g. policy.onnx")
    p.set_defaults(func=cmd_export)

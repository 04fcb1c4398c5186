"""The ``ember-np`` command line (also ``python -m ember_np``).

Subcommands::

    ember-np train ENV_ID [--preset NAME] [--steps N] [--seed S | --seeds K [--workers W]]
                   [--gymnasium-env] [--name NAME]
                   [--version V] [--root DIR] [--eval-every N] [--eval-episodes K]
                   [--checkpoint-freq N] [--keep K] [--set key=value ...]
    ember-np eval RUN_PATH [--episodes K] [--checkpoint best|latest|step_N] [--seed S]
    ember-np resume RUN_PATH --steps N    (a multi-seed parent: ember-np resume PARENT)
    ember-np report RUN_DIR [RUN_DIR ...]
    ember-np plot RUN_PATH [RUN_PATH ...] -o FILE.png
    ember-np dashboard [RUNS_ROOT] [--host 127.0.0.1] [--port 6006] [--allow-host NAME ...]
    ember-np export RUN_PATH_OR_CHECKPOINT [--checkpoint best|latest|step_N] -o FILE.onnx
    ember-np tune ENV_ID [--trials N] [--seeds K] [--steps N] [--workers W] [--storage URL]
                  [--study NAME] [--sampler tpe|random] [--pruner median|none] [--timeout S]
                  [--gymnasium-env] [--num-envs N [--vectorization sync|async]]
                  (needs the tune extra)

Bad arguments print one line and exit with status 2.

The package: this module holds the parser and :func:`main`;
``training`` (train, resume, multi-seed), ``inspection`` (eval, report,
plot, dashboard, export) and ``tune`` hold the commands; ``common`` holds
what they share. The library (``ember_np`` outside this package) never
imports it: its errors are ``ValueError`` subclasses (``SetupError``,
``TuneError``, ``ReportError``, ...) that :func:`main` prints as one line.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import Any

from ember_np.cli.common import Parser, UsageError
from ember_np.training.setup import SetupError, one_line

__all__ = ["UsageError", "build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The ``ember-np`` parser: every subcommand, each with its ``func``."""
    from ember_np.cli import inspection, training
    from ember_np.cli.tune import add_tune_parser  # Optuna loads lazily, in the command

    parser = Parser(prog="ember-np", description="DQN and PPO on a plain CPU (ember_np).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    training.add_train_parser(sub)
    inspection.add_eval_parser(sub)
    training.add_resume_parser(sub)
    inspection.add_report_parser(sub)
    inspection.add_plot_parser(sub)
    inspection.add_dashboard_parser(sub)
    inspection.add_export_parser(sub)
    add_tune_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad arguments)."""
    from ember_np.tune.storage import TuneError

    parser = build_parser()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            args = parser.parse_args(argv)
            return int(args.func(args))
    except (UsageError, SetupError, TuneError) as exc:
        print(f"ember-np: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. a full disk while writing a run file: one line, naming it
        print(f"ember-np: error: {one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def show_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    """Warnings (a skipped torn log line, ...) as one line each."""
    print(f"ember-np: warning: {message}", file=sys.stderr)

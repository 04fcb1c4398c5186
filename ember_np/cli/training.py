"""``ember-np train`` and ``ember-np resume``, single runs and multi-seed runs.

Both build their trainer and hand it to the one training loop
(:func:`ember_np.training.loop.train_and_evaluate`) with a progress bar
and a line per evaluation as callbacks; ``--seeds`` hands the same options
to :func:`ember_np.training.multiseed.train_seeds`, whose workers (local
processes, or with ``--scheduler`` the tasks of a Dask cluster) run the same
loop.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ember_np.algorithms import BUILT_IN, DEFAULT_ALGORITHM, get_algorithm
from ember_np.cli import common
from ember_np.cli.common import (
    Progress,
    UsageError,
    add_vector_arguments,
    non_negative,
    positive,
    seeds_argument,
)
from ember_np.stats import EvalReport
from ember_np.training.loop import LoopCallback, train_and_evaluate
from ember_np.training.multiseed import (
    default_workers,
    format_seeds,
    is_multiseed,
    load_multiseed,
    parent_lock,
    resume_seeds,
    train_seeds,
)
from ember_np.training.precompile import precompile_run
from ember_np.training.setup import first_compile_notice, run_name
from ember_np.training.spec import (
    DEFAULT_CHECKPOINT_FREQ,
    DEFAULT_EVAL_EPISODES,
    DEFAULT_EVAL_EVERY,
    DEFAULT_KEEP,
    RunSpec,
    build,
    open_resumed,
    resolve,
)

__all__ = [
    "ProgressCallback",
    "add_resume_parser",
    "add_train_parser",
    "cmd_resume",
    "cmd_train",
    "train_loop",
]


class ProgressCallback(LoopCallback):
    """The command line's view of the loop: a tqdm bar and a line per periodic evaluation.

    It also keeps the rolling mean of the last 100 training rewards the bar shows.
    """

    def __init__(self, trainer: Any, steps: int, quiet: bool) -> None:
        from ember_np.stats import RollingMean

        self.recent = RollingMean(100)
        trainer.stats.add("recent_reward", "reward", self.recent)
        self.progress = Progress(steps, trainer.agent.total_steps, disable=quiet)
        self.steps = steps
        self.start = trainer.agent.total_steps
        self.t0 = time.perf_counter()
        self.ended = False

    def on_chunk(self, trainer: Any, steps: int) -> None:
        """Advance the bar."""
        self.progress.update(trainer, steps, self.recent)

    def on_eval(self, trainer: Any, report: EvalReport, final: bool) -> None:
        """Write the step, the evaluation and the best so far above the bar."""
        if not final:
            self.progress.bar.write(
                f"step {trainer.agent.total_steps:>9,}  eval reward {report.mean_reward:9.2f}  "
                f"best {trainer.best_eval_reward:9.2f}"
            )

    def on_training_end(self, trainer: Any) -> None:
        """Close the bar and say how fast training went."""
        self.ended = True
        self.progress.close()
        elapsed = time.perf_counter() - self.t0
        trained = trainer.agent.total_steps - self.start  # N envs: whole vector steps
        past = (
            ""
            if trained == self.steps
            else (f" ({self.steps:,} asked; a step of {trainer.num_envs} envs is never cut)")
        )
        print(f"trained {trained:,} steps{past} in {elapsed:.1f} s "
              f"({trained / max(elapsed, 1e-9):,.0f} steps/s)")  # fmt: skip


def train_loop(
    trainer: Any, steps: int, eval_every: int, eval_episodes: int, quiet: bool,
    callbacks: Sequence[LoopCallback] = (),
) -> None:  # fmt: skip
    """Train and evaluate (the one loop) with the progress bar; print the final evaluation.

    ``callbacks`` are told of the loop's events after the progress bar. A full
    disk while training is one line naming the file and what to do; Ctrl-C
    saves a checkpoint (with a run) before the interrupt goes on.
    """
    callback = ProgressCallback(trainer, steps, quiet)
    agent = trainer.agent
    try:
        report = train_and_evaluate(trainer, steps, eval_every, eval_episodes,
                                    [callback, *callbacks])  # fmt: skip
    except OSError as exc:  # a full disk: the files written so far are intact
        callback.progress.close()
        if callback.ended:  # the final evaluation: as any other command's error
            raise
        where = f" {exc.filename}" if exc.filename else ""
        run = trainer.run
        then = (
            f"then `ember-np resume {run.dir}`"
            if run is not None and run.latest_checkpoint_path().exists()
            else "then train again (no checkpoint was written yet)"
        )
        raise UsageError(
            f"cannot write{where}: {exc.strerror or exc}; stopped at step {agent.total_steps:,}, "
            f"the checkpoints written before are intact: free space, {then}"
        ) from None
    except KeyboardInterrupt:
        callback.progress.close()
        if trainer.run is not None and not callback.ended:
            trainer.checkpoint()
            print(
                f"interrupted at step {agent.total_steps:,}; saved {trainer.run.dir}",
                file=sys.stderr,
            )
        raise
    finally:
        for other in callbacks:  # (a TensorBoardCallback: its files flushed and closed)
            close = getattr(other, "close", None)
            if callable(close):
                close()
    report.print()
    print(f"best eval reward {trainer.best_eval_reward:.2f}; run directory: {trainer.run.dir}")


def preset_text(spec: Any) -> str:
    """The start line's preset: its name, or what the config is without one."""
    if spec.preset:
        return str(spec.preset)
    return f"(none: {type(spec.config).__name__} defaults)"


def algorithm_text(spec: Any) -> str:
    """The start line's algorithm, said only when it is not the default (DQN)."""
    return "" if spec.algorithm == DEFAULT_ALGORITHM else f"algorithm {spec.algorithm}, "


def env_id_and_sets(env_id: str | None, sets: list[str]) -> tuple[str, list[str]]:
    """``train --set k=v ENV_ID``: argparse gives the id to ``--set``; take it back."""
    if env_id is None and sets and "=" not in sets[-1]:
        return sets[-1], sets[:-1]
    if env_id is None:
        raise UsageError("the following arguments are required: env_id")
    return env_id, sets


def cmd_train(args: argparse.Namespace) -> int:
    """``ember-np train``: one run (or ``--seeds``: many) with a preset and overrides."""
    from ember_np import TrainingRun
    from ember_np.nn._blas import set_blas_threads

    set_blas_threads(1)  # the same numbers on any core count (and in --seeds workers)
    args.env_id, args.set = env_id_and_sets(args.env_id, args.set or [])
    check_scheduler_options(args, args.seeds is not None)
    board = tensorboard_callback(args.tensorboard)  # exit 2 without tensorboardX, at once
    try:
        spec = resolve(args.env_id, args.preset, args.set, args.steps,
                       (args.num_envs, args.vectorization), args.gymnasium_env,
                       algorithm=args.algo)  # fmt: skip
        spec = spec.replace(seed=args.seed, eval_every=args.eval_every,
                            eval_episodes=args.eval_episodes,
                            checkpoint_freq=args.checkpoint_freq, keep=args.keep)  # fmt: skip
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    # said once the env, preset and overrides are known to be good (a mistyped env id
    # gets its one-line error alone), before the first kernel runs
    notice = first_compile_notice(spec.env_source == "compiled", spec.num_envs, spec.algorithm,
                                  single_run=args.seeds is None)  # fmt: skip
    if notice:
        print(notice, file=sys.stderr, flush=True)
    if spec.env_id != args.env_id:
        print(f"{args.env_id}: training on {spec.env_id}, the compiled env (bit for bit "
              "gymnasium's); --gymnasium-env uses gymnasium's own")  # fmt: skip
    name = args.name or run_name(args.env_id)
    version = args.version or (run_name(spec.preset) if spec.preset else "default")
    if args.seeds is not None:
        return train_many(args, spec, name, version)

    def new_run() -> TrainingRun:
        run = TrainingRun.create(name, version, root=args.root)
        run.write_config(spec.to_dict())
        return run

    try:
        trainer = build(spec, new_run, make=common.make_train_env)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(f"run directory: {trainer.run.dir}")
    print(f"{args.env_id}: {algorithm_text(spec)}preset {preset_text(spec)}, "
          f"{spec.steps:,} steps, seed {spec.seed}"
          f"{envs_text(spec.num_envs, spec.vectorization)}")  # fmt: skip
    precompile_run(trainer, algorithm=spec.algorithm)  # a first run: 2 processes compile
    train_loop(trainer, spec.steps, spec.eval_every, spec.eval_episodes, args.quiet,
               [board] if board is not None else [])  # fmt: skip
    return 0


def tensorboard_callback(log_dir: str | None) -> Any:
    """``--tensorboard DIR``'s callback (None without it); UsageError without tensorboardX."""
    if log_dir is None:
        return None
    from ember_np.training.tensorboard import TensorBoardCallback

    try:
        return TensorBoardCallback(log_dir)
    except ImportError as exc:
        raise UsageError(str(exc)) from None


def cmd_resume(args: argparse.Namespace) -> int:
    """``ember-np resume``: continue a run from latest.npz, or finish a multi-seed run."""
    from ember_np import CheckpointError
    from ember_np.nn._blas import set_blas_threads
    from ember_np.training.run import RunLockedError

    board = tensorboard_callback(args.tensorboard)  # exit 2 without tensorboardX, at once
    if is_multiseed(args.run_path):
        return resume_many(args)
    check_scheduler_options(args, False)
    if args.steps is None:
        raise UsageError("the following arguments are required: --steps")
    set_blas_threads(1)  # as train: the same numbers on any core count
    try:  # what the library's resume() trains, with the progress bar and its messages
        spec, trainer, restored = open_resumed(args.run_path, common.make_train_env)
    except (RunLockedError, CheckpointError, OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    agent = trainer.agent
    if spec.num_envs > 1:
        say_env_state(trainer, spec.num_envs, spec.vectorization, restored)
    state = get_algorithm(spec.algorithm).describe_agent(agent)
    print(f"resuming {trainer.run.dir} at step {agent.total_steps:,} ({state}): "
          f"{args.steps:,} more steps, to step {agent.total_steps + args.steps:,}")  # fmt: skip
    train_loop(trainer, args.steps, spec.eval_every, spec.eval_episodes, args.quiet,
               [board] if board is not None else [])  # fmt: skip
    return 0


# -- N envs (--num-envs) ------------------------------------------------------------------


def envs_text(num_envs: int, vectorization: str | None) -> str:
    """``", 4 envs (async)"`` for the start line; empty for one env."""
    if num_envs == 1:
        return ""
    return f", {num_envs} envs ({vectorization or 'compiled, one loop'})"


def say_env_state(trainer: Any, num_envs: int, vectorization: str | None,
                  restored: bool | None) -> None:  # fmt: skip
    """Resume of N envs: say whether they continue their episodes (native, state saved) or
    start afresh."""
    if restored:
        print(f"{num_envs} envs continue their episodes in progress (saved with latest.npz)")
    elif vectorization is None:
        print(f"{num_envs} envs start fresh episodes: no env state was saved at step "
              f"{trainer.agent.total_steps:,} (run without the replay buffer, or stopped "
              "between the two files)")  # fmt: skip
    else:
        print(f"{num_envs} gymnasium envs ({vectorization}) start fresh episodes: a gymnasium "
              "vector env's state cannot be saved, so the episodes in progress are "
              "dropped")  # fmt: skip


# -- many seeds ---------------------------------------------------------------------------


def train_many(args: Any, spec: RunSpec, name: str, version: str) -> int:
    """``ember-np train ENV_ID --seeds K``: the spec ``cmd_train`` resolved; exit status."""
    client = connect_scheduler(args.scheduler)  # before anything is written
    if client is not None:
        workers = None
        on = describe_cluster(client)
    else:
        workers = args.workers or default_workers()
        on = f"{min(workers, len(args.seeds))} worker processes"
    seeds = args.seeds
    started: list[Path] = []

    def announce(parent: Path) -> None:
        started.append(parent)
        print(f"{len(seeds)} seeds ({format_seeds(seeds)}) of {spec.env_id}, "
              f"{algorithm_text(spec)}preset {preset_text(spec)}, {spec.steps:,} steps each"
              f"{envs_text(spec.num_envs, spec.vectorization)}, on {on}; "
              f"runs: {parent}/seed_<s>/")  # fmt: skip
        sys.stdout.flush()

    with seeds_command(client, lambda: started[0] if started else None):
        result = train_seeds(
            spec, seeds, workers=workers, root=args.root, name=name, version=version,
            progress=not args.quiet, on_start=announce, scheduler=client,
        )  # fmt: skip
    print(result.summary())
    seed_events(args.tensorboard, result.runs)
    return 1 if result.failed else 0


def seed_events(log_dir: str | None, runs: list[Any]) -> None:
    """``--tensorboard DIR`` of many seeds: the finished ``runs``' event files, DIR/seed_<s>/."""
    if log_dir is None or not runs:
        return
    from ember_np.training.tensorboard import write_seed_events

    write_seed_events(runs, log_dir)
    print(f"TensorBoard: {log_dir}/seed_<s>/ (tensorboard --logdir {log_dir})")


@contextmanager
def seeds_command(client: Any, parent: Callable[[], Path | None]) -> Iterator[None]:
    """The edges of a multi-seed command's training: a refused lock, a full disk or a
    bad setting is a UsageError; Ctrl-C says which seeds finished under ``parent()``
    (None: nothing started) before it goes on; the Dask ``client`` (or None) is closed
    whatever happens."""
    from ember_np.training.run import RunLockedError

    try:
        yield
    except (RunLockedError, OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    except KeyboardInterrupt:
        where = parent()
        if where is not None:
            say_interrupted(where)
        raise
    finally:
        if client is not None:
            client.close()


def check_scheduler_options(args: Any, many: bool) -> None:
    """``--scheduler`` goes with many seeds and without ``--workers``: UsageError if not."""
    if args.scheduler is None:
        return
    if not many:
        raise UsageError(
            "--scheduler trains the seeds of a multi-seed run on a Dask cluster: give --seeds K "
            "(train) or a multi-seed run's directory (resume)"
        )
    if args.workers is not None:
        raise UsageError(
            "--workers counts processes on this machine; with --scheduler the cluster's "
            "workers train (start them with `dask worker ADDRESS --nworkers N --nthreads 1`): "
            "drop --workers"
        )


def connect_scheduler(address: str | None) -> Any:
    """A Dask client of ``--scheduler`` (None without it); one line and exit 2 if unreachable."""
    if address is None:
        return None
    from ember_np.training.cluster import ClusterError, connect

    try:
        return connect(address)
    except ClusterError as exc:
        raise UsageError(f"--scheduler {address}: {exc}") from None


def describe_cluster(client: Any) -> str:
    """The cluster as the announcement names it (workers and threads now)."""
    from ember_np.training.cluster import describe

    return describe(client)


def resume_many(args: Any) -> int:
    """``ember-np resume PARENT``: train the seeds that did not finish; exit status."""

    if args.steps is not None:
        raise UsageError(
            f"{args.run_path} is a multi-seed run: resume trains its unfinished seeds to their "
            "budget, so drop --steps (to train longer, start a new run with --steps)"
        )

    check_scheduler_options(args, True)
    client = connect_scheduler(args.scheduler)  # before anything is printed or moved
    with seeds_command(client, lambda: Path(args.run_path)):
        with parent_lock(args.run_path):  # refused before anything is printed or moved
            before = load_multiseed(args.run_path)
            if before.failed:
                print(f"{before.parent}: {len(before.runs)} seeds finished; training seeds "
                      f"{format_seeds(before.failed)} again from the start")  # fmt: skip
            else:
                print(f"{before.parent}: all {len(before.runs)} seeds already finished")
            if before.failed and client is not None:
                print(f"training them on {describe_cluster(client)}")
            sys.stdout.flush()
            result = resume_seeds(args.run_path, workers=args.workers, progress=not args.quiet,
                                  scheduler=client)  # fmt: skip
    print(result.summary())
    trained_before = {r.seed for r in before.runs}  # their files: written when they finished
    seed_events(args.tensorboard, [r for r in result.runs if r.seed not in trained_before])
    return 1 if result.failed else 0


def say_interrupted(parent: Path) -> None:
    """Ctrl-C: which seeds finished, where the runs are and how to go on (one line, stderr).

    Said once the workers have stopped, from the files on disk: a seed counts
    as finished when its ``result.json`` is there.
    """
    how = f"runs: {parent}/seed_<s>/; `ember-np resume {parent}` trains the unfinished seeds"
    try:
        state = load_multiseed(parent)
    except ValueError:  # seeds.json not written yet, or damaged: say where to look
        print(f"interrupted; {how}", file=sys.stderr)
        return
    n = len(state.runs) + len(state.failed)
    done = format_seeds(r.seed for r in state.runs) or "none"
    lost = f", {format_seeds(state.failed)} did not" if state.failed else ""
    print(f"interrupted: {len(state.runs)} of {n} seeds finished ({done}){lost}; {how}",
          file=sys.stderr)  # fmt: skip


# -- parsers ------------------------------------------------------------------------------

SCHEDULER_HELP = (
    "a Dask scheduler, e.g. tcp://HOST:8786: each seed of --seeds is one task on its workers "
    "instead of a local process (pip install 'ember-np[dask]')"
)


def add_train_parser(sub: Any) -> None:
    """Register ``train`` on the command line's subparsers (its defaults: :class:`RunSpec`'s)."""

    p = sub.add_parser("train", help="train an agent (DQN by default) on a gymnasium env")
    p.add_argument(
        "env_id", nargs="?", help="gymnasium id, e.g. CartPole-v1, ember_np/CartPole-v1, module:Id"
    )
    p.add_argument(
        "--algo", default=DEFAULT_ALGORITHM, metavar="NAME",
        help=f"the algorithm: {', '.join(sorted(BUILT_IN))} (default {DEFAULT_ALGORITHM}), or "
        "package.module:NAME for one defined elsewhere (ember_np.algorithms)",
    )  # fmt: skip
    p.add_argument(
        "--preset",
        help="rainbow, zoo or ember (ember_np.presets; the env's own), ENV/NAME for another "
        "env's (recorded as such), or a preset FILE.json, e.g. from ember-np tune (default: "
        "rainbow where the env has one, else zoo)",
    )
    p.add_argument(
        "--steps",
        type=positive,
        help="env steps (default: the preset's budget); the preset's schedules "
        "(epsilon, learning rate, PER beta) last the same fraction of them",
    )
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=non_negative, default=0)
    seeds.add_argument(
        "--seeds", type=seeds_argument,
        help="many seeds: 20, 0-19 or 1,4,7 (at most 10,000 seeds, each 0..2**63-1)",
    )  # fmt: skip
    p.add_argument("--workers", type=positive, help="processes for --seeds (default: cores)")
    p.add_argument("--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP)
    p.add_argument("--gymnasium-env", action="store_true",
                   help="train on gymnasium's env even where a compiled one exists")  # fmt: skip
    add_vector_arguments(p)
    p.add_argument("--name", help="run name (default: the env id)")
    p.add_argument("--version", help="run version (default: the preset name)")
    p.add_argument("--root", default="runs", help="runs directory (default: runs)")
    p.add_argument("--eval-every", type=positive, default=DEFAULT_EVAL_EVERY)
    p.add_argument("--eval-episodes", type=positive, default=DEFAULT_EVAL_EPISODES)
    p.add_argument("--checkpoint-freq", type=positive, default=DEFAULT_CHECKPOINT_FREQ)
    p.add_argument(
        "--keep", type=non_negative, default=DEFAULT_KEEP,
        help="numbered checkpoints kept",
    )  # fmt: skip
    p.add_argument("--set", nargs="+", metavar="KEY=VALUE",
                   help="override the algorithm's config fields (DqnConfig for dqn)")  # fmt: skip
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--tensorboard", metavar="DIR",
        help="also write the logs' scalars as TensorBoard event files into DIR (with --seeds: "
        "DIR/seed_<s>/, written once the seeds finish); pip install 'ember-np[tensorboard]'",
    )  # fmt: skip
    p.set_defaults(func=cmd_train)


def add_resume_parser(sub: Any) -> None:
    """Register ``resume`` on the command line's subparsers."""
    p = sub.add_parser(
        "resume", help="continue a run from latest.npz, or finish a multi-seed run's seeds"
    )
    p.add_argument("run_path")
    p.add_argument("--steps", type=positive, metavar="N",
                   help="N more env steps, on top of the run's own (a single run): a run at "
                   "step 50,000 resumed with --steps 100000 ends at 150,000")  # fmt: skip
    p.add_argument("--workers", type=positive, help="processes (a multi-seed run)")
    p.add_argument("--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP)
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--tensorboard", metavar="DIR",
        help="as train's: the resumed steps' scalars into DIR (a multi-seed run: the seeds "
        "trained now, into DIR/seed_<s>/)",
    )  # fmt: skip
    p.set_defaults(func=cmd_resume)

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
                  (ember_np/tune.py; needs the tune extra)

Bad arguments print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

__all__ = ["main"]

#: gymnasium ids that have a compiled twin: ``train`` uses it unless --gymnasium-env.
NATIVE_IDS = {e: f"ember_np/{e}" for e in ("CartPole-v1", "Acrobot-v1", "MountainCar-v0")}
DEFAULT_EVAL_EVERY = 10_000
DEFAULT_EVAL_EPISODES = 10
PROGRESS_CHUNK = 1_000  # env steps between progress-bar refreshes


class UsageError(Exception):
    """A bad argument: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


# -- helpers ------------------------------------------------------------------------


def _make_env(env_id: str) -> Any:
    """``gym.make(env_id)``: any id gymnasium takes, ``module:EnvId`` included.

    gymnasium's own message is kept (its "Did you mean ...?" and "use v1
    instead" hints), on one line.
    """
    import gymnasium as gym

    try:
        with warnings.catch_warnings(record=True) as said:  # repeated only if make succeeds
            warnings.simplefilter("always")
            env = gym.make(env_id)
        for w in said:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        return env
    except (gym.error.NameNotFound, gym.error.NamespaceNotFound) as exc:
        raise UsageError(f"unknown environment {env_id!r}: {_one_line(exc)}") from None
    except Exception as exc:  # a bad version, a missing optional dependency such as box2d
        raise UsageError(f"cannot make {env_id!r}: {_one_line(exc)}") from None


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _native_to_plain(env_id: str) -> str:
    """The gymnasium id a native or ``module:`` id stands for (its presets' key)."""
    env_id = env_id.rpartition(":")[2]
    return env_id[len("ember_np/") :] if env_id.startswith("ember_np/") else env_id


def _run_name(env_id: str) -> str:
    """A run-directory name for an env id: path separators (and ``:``) become ``_``."""
    return re.sub(r"[/\\:]", "_", env_id)


def _check_checkpoint_env(env: Any, env_id: str, encoder: Any, mapper: Any, path: Path) -> None:
    """Refuse an env whose spaces differ from the ones the checkpoint was trained on."""
    from ember_np.encoding import IndexActionMapper, describe, encoder_for_space

    try:
        want = (describe(encoder_for_space(env.observation_space)),
                describe(IndexActionMapper.for_space(env.action_space)))  # fmt: skip
    except ValueError as exc:
        raise UsageError(f"{env_id!r}: {exc}") from None
    have = (describe(encoder), describe(mapper))
    if want != have:
        raise UsageError(
            f"{path} was trained on {have[0]} and {have[1]}, but config.json's env {env_id!r} "
            f"has {want[0]} and {want[1]}: set env_id in config.json to the env the run "
            "trained on"
        )


def _parse_sets(pairs: Sequence[str]) -> dict[str, Any]:
    from ember_np.dqn.config import DqnConfig

    fields = set(DqnConfig().to_dict())
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--set expects key=value, got {pair!r}")
        if key not in fields:
            raise UsageError(f"unknown config key {key!r}; valid keys: {', '.join(sorted(fields))}")
        power = re.fullmatch(r"\s*(\d+)\s*\*\*\s*(\d{1,3})\s*", raw)
        try:
            value = int(power[1]) ** int(power[2]) if power else json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        if isinstance(value, list):
            value = tuple(value)
        out[key] = value
    return out


def _run_path(path: str) -> Path:
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"no run directory at {p}")
    return p


def _open_run(path: str) -> Any:
    from ember_np.training.run import TrainingRun

    try:
        return TrainingRun.resume(_run_path(path))
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def _read_config(run: Any) -> dict[str, Any]:
    """The run's config.json, which must name its env."""
    try:
        saved = run.read_config() or {}
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    if not isinstance(saved.get("env_id"), str):
        raise UsageError(
            f"{run.dir / 'config.json'} does not say which env this run trained on: "
            'add "env_id": "<gymnasium id>" to it'
        )
    return saved


class _Progress:
    """tqdm bar over env steps with rolling reward, epsilon and loss."""

    def __init__(self, total: int, initial_steps: int, disable: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, unit="step", unit_scale=True, dynamic_ncols=True, disable=disable,
            desc="train", smoothing=0.1,
        )  # fmt: skip
        self.start = initial_steps

    def update(self, trainer: Any, steps: int, recent: Any) -> None:
        agent = trainer.agent
        loss = agent.last_loss
        # The postfix first: update() redraws the line, with the postfix it has then.
        self.bar.set_postfix(
            reward=f"{recent.value():.1f}",
            eps=f"{agent.epsilon:.3f}",
            loss="-" if math.isnan(loss) else f"{loss:.4f}",  # "-": no training yet
            refresh=False,
        )
        self.bar.update(steps)

    def close(self) -> None:
        self.bar.close()


def _train_loop(trainer: Any, steps: int, eval_every: int, eval_episodes: int, quiet: bool) -> None:
    """Train ``steps`` env steps in chunks, evaluating every ``eval_every`` steps."""
    from ember_np.stats import RollingMean

    recent = RollingMean(100)
    trainer.stats.add("recent_reward", "reward", recent)
    agent = trainer.agent
    start = agent.total_steps
    end = start + steps
    progress = _Progress(steps, start, disable=quiet)
    next_eval = (start // eval_every + 1) * eval_every
    t0 = time.perf_counter()
    try:
        while agent.total_steps < end:
            chunk = min(PROGRESS_CHUNK, end - agent.total_steps, next_eval - agent.total_steps)
            trainer.train(chunk)
            progress.update(trainer, chunk, recent)
            if agent.total_steps >= next_eval:
                report = trainer.eval(eval_episodes)
                progress.bar.write(
                    f"step {agent.total_steps:>9,}  eval reward {report.mean_reward:9.2f}  "
                    f"best {trainer.best_eval_reward:9.2f}"
                )
                next_eval += eval_every
    except OSError as exc:  # a full disk: the files written so far are intact
        progress.close()
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
        progress.close()
        if trainer.run is not None:
            trainer.checkpoint()
            print(
                f"interrupted at step {agent.total_steps:,}; saved {trainer.run.dir}",
                file=sys.stderr,
            )
        raise
    finally:
        progress.close()
    elapsed = time.perf_counter() - t0
    print(f"trained {steps:,} steps in {elapsed:.1f} s ({steps / max(elapsed, 1e-9):,.0f} steps/s)")


# -- subcommands ------------------------------------------------------------------


def cmd_train(args: argparse.Namespace) -> int:
    from ember_np import DqnAgent, DqnConfig, DqnTrainer, TrainingRun
    from ember_np._blas import set_blas_threads
    from ember_np.presets import default_preset, get_preset

    set_blas_threads(1)  # the same numbers on any core count (and in --seeds workers)
    args.env_id, args.set = _env_id_and_sets(args.env_id, args.set or [])
    env_id = args.env_id
    if not args.gymnasium_env and env_id in NATIVE_IDS:
        env_id = NATIVE_IDS[env_id]
        print(f"{args.env_id}: training on {env_id}, the compiled env (bit for bit "
              "gymnasium's); --gymnasium-env uses gymnasium's own")  # fmt: skip
    env = _make_env(env_id)
    if args.preset is not None:
        try:
            preset = get_preset(args.preset, _native_to_plain(args.env_id))
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    else:
        preset = default_preset(_native_to_plain(args.env_id))
    config = preset.config if preset is not None else DqnConfig()
    overrides = _parse_sets(args.set or [])
    if overrides:
        try:
            config = config.replace(**overrides)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--set: {exc}") from None
    config = _with_env_masks(config, env_id, overrides)
    steps = args.steps if args.steps is not None else (preset.steps if preset else 100_000)
    try:
        _check_replay_memory(env, config)
        agent = DqnAgent.for_env(env, config, seed=args.seed)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    name = args.name or _run_name(args.env_id)
    version = args.version or (preset.name if preset else "default")
    if args.seeds is not None:
        from ember_np.training.multiseed import cli_train

        return cli_train(args, env_id, preset.name if preset else None, config, steps, name,
                         version)  # fmt: skip
    try:
        run = TrainingRun.create(name, version, root=args.root)
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    run.write_config(
        {
            "env_id": env_id,
            "preset": preset.name if preset else None,
            "seed": args.seed,
            "steps": steps,
            "eval_every": args.eval_every,
            "eval_episodes": args.eval_episodes,
            "checkpoint_freq": args.checkpoint_freq,
            "keep": args.keep,
            "dqn": config.to_dict(),
        }
    )
    print(f"run directory: {run.dir}")
    print(f"{args.env_id}: preset {preset.name if preset else '(none: DqnConfig defaults)'}, "
          f"{steps:,} steps, seed {args.seed}")  # fmt: skip
    trainer = DqnTrainer(
        env, agent, seed=args.seed, run=run,
        checkpoint_freq=args.checkpoint_freq, keep_checkpoints=args.keep,
    )  # fmt: skip
    _train_loop(trainer, steps, args.eval_every, args.eval_episodes, args.quiet)
    report = trainer.eval(args.eval_episodes)
    report.print()
    print(f"best eval reward {trainer.best_eval_reward:.2f}; run directory: {run.dir}")
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    from ember_np import CheckpointError, DqnAgent, DqnTrainer
    from ember_np.training.multiseed import cli_resume, is_multiseed
    from ember_np.training.run import RunLockedError
    from ember_np.training.trainer import DEFAULT_CHECKPOINT_FREQ, DEFAULT_KEEP_CHECKPOINTS

    if is_multiseed(args.run_path):
        return cli_resume(args)
    if args.steps is None:
        raise UsageError("the following arguments are required: --steps")
    from ember_np._blas import set_blas_threads

    set_blas_threads(1)  # as train: the same numbers on any core count
    run = _open_run(args.run_path)
    try:
        run.lock()  # before anything is read: one writer per run
    except (RunLockedError, OSError) as exc:
        raise UsageError(str(exc)) from None
    saved = _read_config(run)
    env = _make_env(saved["env_id"])
    latest = run.latest_checkpoint_path()
    try:
        agent = DqnAgent.from_checkpoint(latest)
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    _check_checkpoint_env(env, saved["env_id"], agent.encoder, agent.action_mapper, latest)
    seed = int(saved.get("seed", 0)) + agent.total_steps  # a fresh episode stream
    trainer = DqnTrainer(
        env, agent, seed=seed, run=run,
        checkpoint_freq=int(saved.get("checkpoint_freq", DEFAULT_CHECKPOINT_FREQ)),
        keep_checkpoints=int(saved.get("keep", DEFAULT_KEEP_CHECKPOINTS)),
    )  # fmt: skip
    eval_every = int(saved.get("eval_every", DEFAULT_EVAL_EVERY))
    eval_episodes = int(saved.get("eval_episodes", DEFAULT_EVAL_EPISODES))
    print(f"resuming {run.dir} at step {agent.total_steps:,} (epsilon {agent.epsilon:.3f}, "
          f"{len(agent.buffer):,} transitions in the replay buffer)")  # fmt: skip
    _train_loop(trainer, args.steps, eval_every, eval_episodes, args.quiet)
    report = trainer.eval(eval_episodes)
    report.print()
    print(f"best eval reward {trainer.best_eval_reward:.2f}; run directory: {run.dir}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from ember_np import CheckpointError, DqnPolicy, EvalReport, StatsTracker
    from ember_np.checkpoint import AgentKeys, Reader
    from ember_np.training.trainer import greedy_episode

    run = _open_run(args.run_path)
    which = args.checkpoint
    try:
        path = run.named_checkpoint_path(which)
    except ValueError:
        raise UsageError(f"--checkpoint must be best, latest or step_N, got {which!r}") from None
    if not path.exists():
        raise UsageError(f"no checkpoint {path}")
    saved = _read_config(run)
    try:
        policy = DqnPolicy.load(path)
        total_steps = int(Reader(path).array(AgentKeys.COUNTERS, "int64", (2,))[0])
    except CheckpointError as exc:
        raise UsageError(str(exc)) from None
    env = _make_env(saved["env_id"])
    _check_checkpoint_env(env, saved["env_id"], policy.encoder, policy.action_mapper, path)
    dqn = saved.get("dqn")
    masks = not isinstance(dqn, dict) or dqn.get("action_masks") is not False  # as trained
    tracker = StatsTracker()
    for episode in range(args.episodes):
        tracker.update(greedy_episode(env, policy.act, seed=args.seed + episode, masks=masks))
    report = EvalReport(total_steps, args.episodes, tracker.summary())
    print(f"{path}")
    report.print()
    return 0


def _smooth(values: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= window:
            acc -= values[i - window]
        out.append(acc / min(i + 1, window))
    return out


def cmd_plot(args: argparse.Namespace) -> int:
    from ember_np.report import cmd_plot_multiseed
    from ember_np.training.multiseed import is_multiseed

    if any(is_multiseed(p) for p in args.run_paths):
        return cmd_plot_multiseed(args)
    runs = [_open_run(p) for p in args.run_paths]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("ember-np plot needs matplotlib: pip install 'ember-np[plot]'", file=sys.stderr)
        return 1
    fig, ax = plt.subplots(figsize=(8, 4.5))
    out = plot_output(args.output, fig)
    for run in runs:
        label = f"{run.name}/{run.version}/{run.dir.name}"
        rows = [r for r in run.read_train_episodes() if "total_steps" in r]
        if rows:
            xs = [r["total_steps"] for r in rows]
            ys = _smooth([r["total_reward"] for r in rows], args.smooth)
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


def cmd_dashboard(args: argparse.Namespace) -> int:
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
    from ember_np.export import export_onnx, resolve_checkpoint

    try:
        meta = export_onnx(resolve_checkpoint(args.source, args.checkpoint), args.output)
    except (ImportError, ValueError) as exc:  # no onnx; bad path; CheckpointError
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {args.output}: {exc.strerror or exc}") from None
    print(f"wrote {args.output} ({meta['obs_size']} inputs -> {meta['n_actions']} Q-values)")
    return 0


def plot_output(output: str, fig: Any) -> Path:
    """The file ``plot -o OUTPUT`` writes (single- and multi-seed alike).

    A known image format of ``fig``'s canvas, ``.png`` added when none is
    given (``-o curves`` writes ``curves.png``); a new or regular file
    (``_files.check_output``: not a symlink, FIFO, device or directory).
    UsageError otherwise, one line listing the formats or naming the problem.
    """
    from ember_np._files import check_output

    out = Path(output)
    formats = fig.canvas.get_supported_filetypes()
    if not out.suffix:
        out = out.with_name(out.name + ".png")  # what savefig itself would write
    elif out.suffix[1:].lower() not in formats:
        raise UsageError(
            f"-o {out}: unknown image format {out.suffix!r}; use one of "
            f"{', '.join('.' + f for f in sorted(formats))} (e.g. -o curves.png)"
        )
    try:
        check_output(out)
    except (OSError, ValueError) as exc:
        raise UsageError(f"-o {out}: {exc}" if isinstance(exc, OSError) else str(exc)) from None
    return out


def save_plot(fig: Any, out: Path, dpi: int) -> None:
    """Render ``fig`` in ``out``'s format and write it there atomically; print "wrote OUT".

    ``out`` comes from :func:`plot_output`, so the message names the file
    actually written.
    """
    import io

    from ember_np._files import write_output

    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=out.suffix[1:].lower(), dpi=dpi)
    except Exception as exc:  # noqa: BLE001  e.g. .pgf without LaTeX, .jpg without Pillow
        raise UsageError(f"-o {out}: cannot render {out.suffix!r}: {_one_line(exc)}; "
                         "-o curves.png always works") from None  # fmt: skip
    try:
        write_output(out, buffer.getvalue())
    except ValueError as exc:  # became a symlink, FIFO, ... since plot_output looked
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}")


def _env_id_and_sets(env_id: str | None, sets: list[str]) -> tuple[str, list[str]]:
    """``train --set k=v ENV_ID``: argparse gives the id to ``--set``; take it back."""
    if env_id is None and sets and "=" not in sets[-1]:
        return sets[-1], sets[:-1]
    if env_id is None:
        raise UsageError("the following arguments are required: env_id")
    return env_id, sets


def _gives_masks(env_id: str) -> bool:
    """Whether a fresh ``env_id`` env puts an ``action_mask`` in the info of its reset."""
    from ember_np.training.trainer import action_mask_of

    probe = _make_env(env_id)
    try:
        _, info = probe.reset(seed=0)
        return action_mask_of(info) is not None
    finally:
        probe.close()


def _with_env_masks(config: Any, env_id: str, overrides: dict[str, Any]) -> Any:
    """``config`` with action masks on when ``env_id`` gives them, unless ``--set`` chose.

    The one place ``train`` and ``tune`` decide it, so both build the same config.
    """
    if "action_masks" in overrides or config.action_masks or not _gives_masks(env_id):
        return config
    print(f"{env_id}: the env gives info['action_mask']: training with action masks "
          "(--set action_masks=false turns this off)")  # fmt: skip
    return config.replace(action_masks=True)


def _check_replay_memory(env: Any, config: Any) -> None:
    """Refuse a replay buffer that does not fit in the memory available, before allocating it."""
    from ember_np._memory import available_memory, format_bytes
    from ember_np.dqn.replay import transition_dtype
    from ember_np.encoding import IndexActionMapper, encoder_for_space

    obs_size = encoder_for_space(env.observation_space).obs_size
    n_actions = IndexActionMapper.for_space(env.action_space).num_actions
    per_row = transition_dtype(obs_size, n_actions).itemsize
    need = config.buffer_capacity * per_row
    free = available_memory()
    if free is not None and need > free:
        raise UsageError(
            f"buffer_capacity={config.buffer_capacity} needs {format_bytes(need)} for the replay "
            f"buffer ({per_row} bytes a transition), more than the {format_bytes(free)} of "
            f"memory available: use --set buffer_capacity=N with N <= {free // per_row:,}"
        )


# -- parser -----------------------------------------------------------------------


def _int_at_least(minimum: int):  # noqa: ANN202
    """An argparse type: an integer >= ``minimum``."""
    from ember_np._validate import int_rule

    rule = int_rule(minimum)

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {rule}, got {text!r}") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"expected {rule}, got {v}")
        return v

    return parse


_positive = _int_at_least(1)
_non_negative = _int_at_least(0)


def _seeds(text: str) -> list[int]:
    from ember_np.training.multiseed import parse_seeds

    try:
        return parse_seeds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--seeds ")) from None


def _cmd_report(args: argparse.Namespace) -> int:
    from ember_np.report import cmd_report

    return cmd_report(args)


def build_parser() -> argparse.ArgumentParser:
    from ember_np.training.trainer import DEFAULT_CHECKPOINT_FREQ, DEFAULT_KEEP_CHECKPOINTS

    parser = _Parser(prog="ember-np", description="DQN on a plain CPU (ember_np).")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("train", help="train DQN on a gymnasium env, with a TrainingRun")
    p.add_argument(
        "env_id", nargs="?", help="gymnasium id, e.g. CartPole-v1, ember_np/CartPole-v1, module:Id"
    )
    p.add_argument(
        "--preset",
        help="rainbow, zoo or ember (ember_np.presets; the env's own) or a preset FILE.json, "
        "e.g. from ember-np tune (default: rainbow where the env has one, else zoo)",
    )
    p.add_argument("--steps", type=_positive, help="env steps (default: the preset's budget)")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=_non_negative, default=0)
    seeds.add_argument(
        "--seeds", type=_seeds,
        help="many seeds: 20, 0-19 or 1,4,7 (at most 10,000 seeds, each 0..2**63-1)",
    )  # fmt: skip
    p.add_argument("--workers", type=_positive, help="processes for --seeds (default: cores)")
    p.add_argument("--gymnasium-env", action="store_true",
                   help="train on gymnasium's env even where a compiled one exists")  # fmt: skip
    p.add_argument("--name", help="run name (default: the env id)")
    p.add_argument("--version", help="run version (default: the preset name)")
    p.add_argument("--root", default="runs", help="runs directory (default: runs)")
    p.add_argument("--eval-every", type=_positive, default=DEFAULT_EVAL_EVERY)
    p.add_argument("--eval-episodes", type=_positive, default=DEFAULT_EVAL_EPISODES)
    p.add_argument("--checkpoint-freq", type=_positive, default=DEFAULT_CHECKPOINT_FREQ)
    p.add_argument(
        "--keep", type=_non_negative, default=DEFAULT_KEEP_CHECKPOINTS,
        help="numbered checkpoints kept",
    )  # fmt: skip
    p.add_argument("--set", nargs="+", metavar="KEY=VALUE", help="override DqnConfig fields")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("eval", help="evaluate a run's checkpoint greedily")
    p.add_argument("run_path")
    p.add_argument("--episodes", type=_positive, default=20)
    p.add_argument("--checkpoint", default="best", help="best, latest or step_N (default: best)")
    p.add_argument("--seed", type=_non_negative, default=0)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "resume", help="continue a run from latest.npz, or finish a multi-seed run's seeds"
    )
    p.add_argument("run_path")
    p.add_argument("--steps", type=_positive, help="more env steps (a single run)")
    p.add_argument("--workers", type=_positive, help="processes (a multi-seed run)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_resume)

    p = sub.add_parser(
        "report",
        help="IQM [95%% CI] and more over the seeds of multi-seed runs; "
        "a tune directory's best trials and importances",
    )
    p.add_argument("run_paths", nargs="+", metavar="RUN_DIR")
    p.set_defaults(func=_cmd_report)

    p = sub.add_parser("plot", help="learning curves of one or more runs")
    p.add_argument("run_paths", nargs="+", metavar="RUN_PATH")
    p.add_argument("-o", "--output", required=True, help="output image, e.g. curves.png")
    p.add_argument("--smooth", type=_positive, default=20, help="episodes in the moving mean")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("dashboard", help="live training charts in the browser")
    p.add_argument("runs_root", nargs="?", default="runs", help="runs directory (default: runs)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=_non_negative, default=6006, help="0 picks a free port")
    p.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                   help="also answer requests for this host name (repeatable); others get 403")
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser("export", help="write a checkpoint's Q-network as an ONNX model")
    p.add_argument("source", metavar="RUN_PATH_OR_CHECKPOINT")
    p.add_argument("--checkpoint", help="best, latest or step_N of a run (default: best)")
    p.add_argument("-o", "--output", required=True, help="output model, e.g. policy.onnx")
    p.set_defaults(func=cmd_export)

    from ember_np.tune import add_tune_parser  # its logic lives there; Optuna loads lazily

    add_tune_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (2 for bad arguments)."""
    parser = build_parser()
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            args = parser.parse_args(argv)
            return int(args.func(args))
    except UsageError as exc:
        print(f"ember-np: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # e.g. a full disk while writing a run file: one line, naming it
        print(f"ember-np: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _show_warning(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
    """Warnings (a skipped torn log line, ...) as one line each."""
    print(f"ember-np: warning: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())

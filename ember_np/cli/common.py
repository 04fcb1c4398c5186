"""What every group of ``ember-np`` commands shares: the usage error, argument types,
opening a run, the progress bar, writing a plot.

The library builds envs and configs (:mod:`ember_np.training.setup`); this
module only turns strings into arguments and errors into one line.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

from ember_np.training import setup
from ember_np.training.setup import one_line

__all__ = [
    "Parser",
    "Progress",
    "UsageError",
    "add_vector_arguments",
    "int_at_least",
    "make_env",
    "make_train_env",
    "non_negative",
    "open_run",
    "plot_output",
    "positive",
    "read_config",
    "run_path",
    "save_plot",
    "seeds_argument",
]


class UsageError(Exception):
    """A bad argument: reported as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are :class:`UsageError` (one line, exit 2, from ``main``)."""

    def error(self, message: str) -> NoReturn:
        """Raise the message as a :class:`UsageError` instead of printing the usage."""
        raise UsageError(message)


def make_env(env_id: str) -> Any:
    """:func:`ember_np.training.setup.make_env`, its refusal as a :class:`UsageError`.

    The commands call it as ``common.make_env`` so a test can wrap every env
    the command line makes.
    """
    try:
        return setup.make_env(env_id)
    except setup.SetupError as exc:
        raise UsageError(str(exc)) from None


def make_train_env(env_id: str, num_envs: int = 1, vectorization: str | None = None) -> Any:
    """:func:`ember_np.training.setup.make_train_env` (``--num-envs``, ``--vectorization``),
    its refusal as a :class:`UsageError`; one env is :func:`make_env`'s."""
    if num_envs == 1 and vectorization is None:
        return make_env(env_id)
    try:
        return setup.make_train_env(env_id, num_envs, vectorization)
    except setup.SetupError as exc:
        raise UsageError(str(exc)) from None


def add_vector_arguments(p: Any) -> None:
    """``--num-envs N`` and ``--vectorization sync|async`` (train and tune)."""
    from ember_np.training.setup import VECTORIZATIONS

    p.add_argument(
        "--num-envs", type=positive, default=None,
        help="envs stepped together (default: the preset's, e.g. PPO's zoo n_envs, else 1); "
        "steps count env transitions, N per step",
    )  # fmt: skip
    p.add_argument(
        "--vectorization", choices=VECTORIZATIONS,
        help="a gymnasium env's N copies: sync (one process, default) or async (one process "
        "each); a compiled env's copies always run in one compiled loop",
    )  # fmt: skip


def int_at_least(minimum: int) -> Callable[[str], int]:
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


positive = int_at_least(1)
non_negative = int_at_least(0)


def seeds_argument(text: str) -> list[int]:
    """An argparse type: ``--seeds 20``, ``0-19`` or ``1,4,7`` (``multiseed.parse_seeds``)."""
    from ember_np.training.seeds import parse_seeds

    try:
        return parse_seeds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("--seeds ")) from None


def run_path(path: str) -> Path:
    """``path`` as a Path; UsageError when it is not a directory."""
    p = Path(path)
    if not p.is_dir():
        raise UsageError(f"no run directory at {p}")
    return p


def open_run(path: str) -> Any:
    """The TrainingRun at ``path`` (``TrainingRun.resume``), its problems one line."""
    from ember_np.training.run import TrainingRun

    try:
        return TrainingRun.resume(run_path(path))
    except (OSError, ValueError) as exc:
        raise UsageError(str(exc)) from None


def read_config(run: Any) -> dict[str, Any]:
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


class Progress:
    """tqdm bar over env steps with rolling reward, epsilon and loss."""

    def __init__(self, total: int, initial_steps: int, disable: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, unit="step", unit_scale=True, dynamic_ncols=True, disable=disable,
            desc="train", smoothing=0.1,
        )  # fmt: skip
        self.start = initial_steps

    def update(self, trainer: Any, steps: int, recent: Any) -> None:
        """Advance by ``steps``, showing ``recent``'s value and the agent's epsilon and loss."""
        agent = trainer.agent
        loss = agent.last_loss
        # The postfix first: update() redraws the line, with the postfix it has then.
        self.bar.set_postfix(
            reward=f"{recent.value():.1f}",
            eps=f"{agent.epsilon_at(agent.total_steps):.3f}",
            loss="-" if math.isnan(loss) else f"{loss:.4f}",  # "-": no training yet
            refresh=False,
        )
        self.bar.update(steps)

    def close(self) -> None:
        """Close the bar (idempotent)."""
        self.bar.close()


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
        raise UsageError(f"-o {out}: cannot render {out.suffix!r}: {one_line(exc)}; "
                         "-o curves.png always works") from None  # fmt: skip
    try:
        write_output(out, buffer.getvalue())
    except ValueError as exc:  # became a symlink, FIFO, ... since plot_output looked
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write {out}: {exc.strerror or exc}") from None
    print(f"wrote {out}")

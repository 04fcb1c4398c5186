"""Export a trained policy: ``ember-np export RUN_OR_CHECKPOINT -o policy.onnx``.

:func:`export_onnx` reads the checkpoint's format tag, finds the algorithm
that wrote it in the registry (:func:`ember_np.algorithms.algorithm_for_format`)
and calls its export (DQN's: :mod:`ember_np.dqn.onnx`, whose model layout and
metadata that module describes). :func:`resolve_checkpoint` turns a run
directory into its checkpoint file. DQN's :func:`policy_to_onnx` and
:func:`onnx_greedy_actions` are re-exported here, where the deployment guide
imports them. Needs the ``onnx`` extra: ``pip install "ember-np[onnx]"``.
"""

from __future__ import annotations

import os
from pathlib import Path

from ember_np._files import check_output
from ember_np.algorithms import algorithm_for_format, get_algorithm
from ember_np.checkpoint import CheckpointError, format_tag
from ember_np.dqn.onnx import INSTALL_HINT, onnx_greedy_actions, policy_to_onnx
from ember_np.training.run import checkpoint_file_name

__all__ = [
    "INSTALL_HINT",
    "export_onnx",
    "onnx_greedy_actions",
    "policy_to_onnx",
    "resolve_checkpoint",
]


def resolve_checkpoint(path: str | os.PathLike[str], which: str | None = None) -> Path:
    """The checkpoint file named by a ``.npz`` path, or by a run directory and ``which``.

    ``which`` is ``best`` (default for a run), ``latest`` or ``step_N``; it
    only applies to a run directory. Raises ValueError naming what is wrong.
    """
    p = Path(path)
    if p.is_file():
        if which is not None:
            raise ValueError(f"--checkpoint applies to a run directory; {p} is a file")
        return p
    if not p.is_dir():
        raise ValueError(f"no checkpoint file or run directory at {p}")
    try:
        name = checkpoint_file_name("best" if which is None else which)
    except ValueError:
        raise ValueError(f"--checkpoint must be best, latest or step_N, got {which!r}") from None
    found = p / "checkpoints" / name
    if not found.is_file():
        raise ValueError(f"no checkpoint {found} (is {p} a run directory?)")
    return found


def export_onnx(
    checkpoint: str | os.PathLike[str], output: str | os.PathLike[str]
) -> dict[str, str]:
    """Write the ONNX model of an agent checkpoint's policy to ``output``, with the
    export of the algorithm that wrote it.

    Returns the model's metadata. Raises ImportError without onnx,
    :class:`CheckpointError` for a corrupted or foreign checkpoint or one whose
    algorithm has no ONNX export, ValueError for an output path refused (see
    :func:`ember_np.dqn.onnx.export_onnx`), OSError if ``output`` cannot be
    written; in every case no partial file is left.
    """
    # the output's refusals first, before the checkpoint is read (the export checks again)
    check_output(output, [checkpoint], "the checkpoint being exported")
    tag = format_tag(checkpoint)
    name = algorithm_for_format(tag)
    if name is None:
        raise CheckpointError(checkpoint, f"no known algorithm writes {tag!r} checkpoints")
    export = get_algorithm(name).export_onnx
    if export is None:
        raise CheckpointError(checkpoint, f"a {name} checkpoint: {name} has no ONNX export")
    return export(Path(checkpoint), Path(output))

"""Output files a command writes at a path the user names (``export -o``, ``plot -o``).

Such a path gets a new regular file, or replaces an existing regular file,
and nothing else: never a symbolic link (or what it points to), a FIFO, a
device node or a directory, and never one of the command's own inputs (the
checkpoint being exported), however it is spelled (``./x``, ``a/../x``, a
hard link), and never a file of a run: nothing inside a run's
``checkpoints/`` directory, no ``.npz`` file (the checkpoint format), and
none of the files a run, a multi-seed run or a tune directory keeps beside
them (:data:`RUN_FILES`), wherever the path's links and ``..`` lead. The
data are written to a temporary file in the same directory and renamed over
the path (``checkpoint.atomic_write``), and the path is checked again just
before the rename, so a file that appears meanwhile is not clobbered unseen
either.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from ember_np.checkpoint import atomic_write

__all__ = ["RUN_FILES", "check_output", "check_not_run_file", "write_output"]

#: The files a run directory (``metadata.json``, ``config.json``, the logs), a
#: multi-seed parent (``seeds.json``, a seed's ``result.json``) or a tune directory
#: (``tune.json``, ...) keeps, and each one's lock: an output never replaces one.
RUN_FILES = frozenset({
    "metadata.json", "config.json", "train_episodes.jsonl", "eval_episodes.jsonl",
    "result.json", "seeds.json", ".lock", "tune.json", "best_preset.json", "study.db",
})  # fmt: skip
#: What makes a directory a run's (or a multi-seed parent's, or a tune directory's).
_MARKS = ("metadata.json", "config.json", "seeds.json", "tune.json", "checkpoints")

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def check_output(
    path: str | os.PathLike[str],
    inputs: Iterable[str | os.PathLike[str]] = (),
    input_is: str = "an input of the command",
) -> None:
    """Refuse ``path`` unless it is missing or an existing regular file that is none of ``inputs``.

    Raises
    ------
    ValueError
        Naming the path, what it is and the fix: a run's file
        (:func:`check_not_run_file`), a symbolic link, not a
        regular file (FIFO, device, directory, socket), or one of ``inputs``
        (the same file: compared by device and inode, so hard links and other
        spellings count).
    OSError
        If ``path`` cannot be examined (e.g. a parent is not a directory).
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:  # a new file (a missing directory is the write's own error)
        check_not_run_file(path)
        return
    if stat.S_ISLNK(info.st_mode):
        raise ValueError(
            f"output {path} is a symbolic link: the output is written as a new regular file, "
            "never through a link; give the link's target or another path"
        )
    if not stat.S_ISREG(info.st_mode):
        what = next((name for is_kind, name in _KINDS if is_kind(info.st_mode)), "not a file")
        raise ValueError(
            f"output {path} is {what}, not a regular file: give the path of a new or regular file"
        )
    for source in inputs:
        try:
            same = os.path.samefile(path, source)
        except OSError:  # the input is gone: it cannot be overwritten
            continue
        if same:
            raise ValueError(
                f"output {path} is {input_is} ({source}): writing it would "
                "destroy the input; give another path"
            )
    check_not_run_file(path)


def _is_run_dir(directory: str, marks: tuple[str, ...] = _MARKS) -> bool:
    return any(os.path.exists(os.path.join(directory, mark)) for mark in marks)


def check_not_run_file(path: str | os.PathLike[str]) -> None:
    """Refuse ``path`` if writing it could replace a file of a run.

    ``path``'s directory is resolved (links, ``..``, a relative path) and
    checked: no directory on the way is a run's ``checkpoints/`` (a
    ``checkpoints`` directory beside ``metadata.json``, ``config.json``,
    ...), the name does not end in ``.npz`` (the checkpoint format: an output
    is an ONNX model or an image), and in a run's, multi-seed parent's or
    tune directory the name is none of :data:`RUN_FILES`.

    Raises
    ------
    ValueError
        One line naming the path, the run file it would replace, and the fix.
    """
    name = os.path.basename(os.fspath(path))
    directory = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    where = directory
    while True:
        up = os.path.dirname(where)
        if os.path.basename(where) == "checkpoints" and _is_run_dir(up, _MARKS[:2]):
            raise ValueError(
                f"output {path} is inside the run {up}'s checkpoints/ ({directory}): writing "
                "it could replace a checkpoint the run resumes from; give a path outside the "
                "run's checkpoints/, e.g. policy.onnx"
            )
        if up == where:
            break
        where = up
    if name.lower().endswith(".npz"):
        raise ValueError(
            f"output {path} ends in .npz, the checkpoint format: an output never replaces a "
            "checkpoint; give another name, e.g. policy.onnx or curves.png"
        )
    if name in RUN_FILES and _is_run_dir(directory):
        raise ValueError(
            f"output {path} is {name} of the run in {directory}: writing it would replace the "
            "run's own file; give another path, e.g. policy.onnx or curves.png"
        )


def write_output(
    path: str | os.PathLike[str],
    data: bytes,
    inputs: Iterable[str | os.PathLike[str]] = (),
    input_is: str = "an input of the command",
) -> Path:
    """Write ``data`` to ``path`` atomically, after :func:`check_output`; returns the path.

    On any error nothing at ``path`` changes and no temporary file is left.
    """
    inputs = list(inputs)
    check_output(path, inputs, input_is)

    def write(f: IO[bytes]) -> None:
        f.write(data)
        check_output(path, inputs, input_is)  # again, just before the rename

    atomic_write(path, write)
    return Path(path)

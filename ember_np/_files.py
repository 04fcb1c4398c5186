"""Output files a command writes at a path the user names (``export -o``, ``plot -o``).

Such a path gets a new regular file, or replaces an existing regular file,
and nothing else: never a symbolic link (or what it points to), a FIFO, a
device node or a directory, and never one of the command's own inputs (the
checkpoint being exported), however it is spelled (``./x``, ``a/../x``, a
hard link). The data are written to a temporary file in the same directory
and renamed over the path (``checkpoint.atomic_write``), and the path is
checked again just before the rename, so a file that appears meanwhile is
not clobbered unseen either.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from ember_np.checkpoint import atomic_write

__all__ = ["check_output", "write_output"]

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
        Naming the path, what it is and the fix: a symbolic link, not a
        regular file (FIFO, device, directory, socket), or one of ``inputs``
        (the same file: compared by device and inode, so hard links and other
        spellings count).
    OSError
        If ``path`` cannot be examined (e.g. a parent is not a directory).
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return  # a new file (a missing directory is the write's own error, naming it)
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

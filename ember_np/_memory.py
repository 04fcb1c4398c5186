"""How much memory the machine has free: checked before large allocations.

A replay buffer or a checkpoint that cannot fit is refused with a message
saying how much it needs and how much there is, instead of a ``MemoryError``
(or the kernel's out-of-memory killer) half way through.
"""

from __future__ import annotations

import os

__all__ = ["available_memory", "format_bytes"]


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation, or None when unknown.

    Linux's ``MemAvailable`` (free memory plus what the kernel can reclaim);
    elsewhere the free physical pages.
    """
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the file counts kB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - no sysconf names
        return None


def format_bytes(n: int) -> str:
    """``n`` bytes in binary units: ``23.6 TiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover

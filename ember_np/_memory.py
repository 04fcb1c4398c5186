"""How much memory the machine has free: checked before large allocations.

A replay buffer, a network (with its optimiser) or a checkpoint that cannot
fit is refused with a message saying how much it needs and how much there
is, instead of a ``MemoryError`` (or the kernel's out-of-memory killer) half
way through.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

__all__ = ["available_memory", "check_network_memory", "format_bytes", "network_bytes"]

_F32_BYTES = 4


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


def network_bytes(
    layer_sizes: Sequence[int], batch_size: int = 1, dueling: bool = False,
    layer_norm: bool = False, networks: int = 1, atoms: int = 1,
) -> int:  # fmt: skip
    """Bytes a Q-network of ``layer_sizes`` takes while it learns, before any is allocated.

    Per network (``networks``: 2 for an agent's online and target networks):
    its float32 parameters, and for the one that learns the gradient and
    Adam's two moments (4 arrays of ``num_params`` values in all, the
    target adds 1); then the activations of one ``batch_size`` update, kept
    for the backward pass (every layer's output; with LayerNorm also its
    normalised values and 1 / std), for the online and target forward passes.
    ``atoms``: a distributional head's outputs per action (1 for a plain Q head).
    """
    sizes = [int(s) for s in layer_sizes]
    sizes[-1] *= atoms
    n = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
    if dueling and len(sizes) >= 3:
        n += (sizes[-2] + 1) * atoms
    if layer_norm:
        n += 2 * sum(sizes[1:-1])
    acts = sum(sizes[1:]) + (sum(s + 1 for s in sizes[1:-1]) if layer_norm else 0)
    arrays = 4 + (networks - 1)  # params, grads, Adam m and v; params of each other network
    return _F32_BYTES * (arrays * n + 2 * batch_size * acts)


def check_network_memory(
    layer_sizes: Sequence[int], batch_size: int = 1, dueling: bool = False,
    layer_norm: bool = False, networks: int = 1, atoms: int = 1,
) -> None:  # fmt: skip
    """Raise ValueError when :func:`network_bytes` exceeds the memory available.

    The message says what the network needs, what is free, and to narrow
    ``hidden_sizes`` (or ``batch_size`` when the activations dominate).
    """
    need = network_bytes(layer_sizes, batch_size, dueling, layer_norm, networks, atoms)
    free = available_memory()
    if free is None or need <= free:
        return
    sizes = tuple(int(s) for s in layer_sizes)
    raise ValueError(
        f"layer_sizes {sizes} with batch_size {batch_size} need {format_bytes(need)} for the "
        f"network{'s' if networks > 1 else ''}, gradients, Adam moments and activations, more "
        f"than the {format_bytes(free)} of memory available: use smaller hidden_sizes "
        "(e.g. (64, 64)) or batch_size"
    )

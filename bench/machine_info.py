"""The CPU a benchmark ran on, for the scripts' reports (one reader of /proc/cpuinfo)."""

from __future__ import annotations


def cpu_model() -> str | None:
    """``/proc/cpuinfo``'s first "model name" (e.g. "AMD EPYC ..."), or None where there
    is none (not Linux, or a CPU that does not say)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(
                line.split(":", 1)[1].strip() for line in f if line.startswith("model name")
            )
    except (OSError, StopIteration):
        return None

"""Where a cold-cache first run spends its compile time, kernel by kernel.

Runs an ``ember-np`` command in this process with an empty numba cache (a fresh
``NUMBA_CACHE_DIR``, unless ``--cache DIR`` names one to reuse) and listens to
numba's ``numba:compile`` events. For every kernel compiled it prints the CPU
time (``time.process_time``: other processes' load does not count) spent
compiling it, exclusive of the kernels compiled while typing it (its callees,
listed on their own rows), and inclusive; then the cache files' sizes and the
total CPU time of the command::

    PYTHONPATH=$PWD python bench/compile_profile.py train CartPole-v1 --steps 2000
    PYTHONPATH=$PWD python bench/compile_profile.py --passes train CartPole-v1 --steps 2000

``--passes`` adds the numba compiler passes that took the most time (all kernels
together); the LLVM optimisation and machine-code generation of a kernel's whole
module, its callees' code linked in, happen in ``NativeLowering`` (and when the
module is finalized, charged to the kernel). A second run with the same
``--cache`` shows the warm start-up. The table goes to stderr, after the command's
own output.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

#: numba's own modules whose functions show up as compiled (overload implementations).
NUMBA_MODULES = {"arrayobj", "builtins", "unicode", "listobj", "npyfuncs", "arraymath"}


class CompileRecorder:
    """Exclusive and inclusive CPU seconds per compiled (kernel, signature), and per pass.

    One stack of open compiles and passes: a kernel's compile time excludes the
    compiles nested in it (its callees, typed while it is), and so does each pass's.
    """

    def __init__(self) -> None:
        self.stack: list[list[Any]] = []  # [name, start, nested compile seconds]
        self.rows: list[tuple[str, float, float, str]] = []  # kernel, excl, incl, caller
        self.passes: dict[str, float] = defaultdict(float)  # pass name: exclusive seconds
        self.signatures: dict[str, list[tuple[Any, ...]]] = defaultdict(list)
        self.stages: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))

    def on_compile(self, event: Any) -> None:
        if event.is_start:
            fn = event.data["dispatcher"].py_func
            name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"
            self.stack.append([name, time.process_time(), 0.0])
            self.signatures[name].append(tuple(event.data["args"]))
            return
        name, start, nested = self.stack.pop()
        incl = time.process_time() - start
        caller = next((f[0] for f in reversed(self.stack) if "." in f[0]), "(Python)")
        self.rows.append((name, incl - nested, incl, caller))
        if self.stack:
            self.stack[-1][2] += incl

    def on_pass(self, event: Any) -> None:
        if event.is_start:
            self.stack.append([event.data["name"].split(" [")[0], time.process_time(), 0.0])
            return
        name, start, nested = self.stack.pop()
        self.passes[name] += time.process_time() - start - nested
        if self.stack:
            self.stack[-1][2] += nested


def install(recorder: CompileRecorder, passes: bool) -> None:
    """Listen to numba's compile (and, with ``passes``, compiler-pass) events."""
    from numba.core import event

    class Forward(event.Listener):
        def __init__(self, callback: Any) -> None:
            self.callback = callback

        def on_start(self, ev: Any) -> None:
            self.callback(ev)

        def on_end(self, ev: Any) -> None:
            self.callback(ev)

    event.register("numba:compile", Forward(recorder.on_compile))
    if passes:
        event.register("numba:run_pass", Forward(recorder.on_pass))
        time_stages(recorder)


#: numba's methods timed by ``--passes`` (per kernel): LLVM's work on a kernel's module
#: with its callees linked in, and the Python-callable wrapper numba builds for it.
STAGES = {
    "llvm O3 (linked module)": ("numba.core.codegen", "CPUCodeLibrary", "_optimize_final_module"),
    "machine code (linked module)": (
        "numba.core.codegen",
        "CPUCodeLibrary",
        "_finalize_final_module",
    ),  # fmt: skip
    "llvm function passes": ("numba.core.codegen", "CPUCodeLibrary", "_optimize_functions"),
    "cpython wrapper (lowering)": ("numba.core.cpu", "CPUContext", "create_cpython_wrapper"),
}


def time_stages(recorder: CompileRecorder) -> None:
    """Wrap the :data:`STAGES` methods to add their CPU time to the kernel compiling."""
    import importlib

    def timed(stage: str, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.process_time()
            try:
                return method(*args, **kwargs)
            finally:
                kernel = next((f[0] for f in reversed(recorder.stack) if "." in f[0]), "?")
                recorder.stages[kernel][stage] += time.process_time() - start

        return wrapper

    for stage, (module, cls, name) in STAGES.items():
        owner = getattr(importlib.import_module(module), cls)
        setattr(owner, name, timed(stage, getattr(owner, name)))


def report(recorder: CompileRecorder, cache: Path, top: int) -> str:
    """The per-kernel table (summed over a kernel's signatures, sorted by exclusive
    time, the ``top`` first), the passes and the cache's size."""
    excl: dict[str, float] = defaultdict(float)
    incl: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    callers: dict[str, set[str]] = defaultdict(set)
    for name, e, i, caller in recorder.rows:
        callers[name].add(caller.split(".")[-1])
        excl[name] += e
        incl[name] += i
        count[name] += 1
    lines = [f"{'kernel':<50} {'sigs':>4} {'excl s':>7} {'incl s':>7}  compiled from"]
    names = sorted(excl, key=lambda n: -excl[n])
    for name in names[:top]:
        lines.append(f"{name:<50} {count[name]:4d} {excl[name]:7.2f} {incl[name]:7.2f}  "
                     + ", ".join(sorted(callers[name])))  # fmt: skip
    rest = names[top:]
    lines.append(f"{f'{len(rest)} others (numba internals, small kernels)':<50} "
                 f"{sum(count[n] for n in rest):4d} {sum(excl[n] for n in rest):7.2f}")  # fmt: skip
    lines.append(f"{'all compiles':<50} {len(recorder.rows):4d} {sum(excl.values()):7.2f}")
    lines.append("\nour kernels compiled for more than one signature (arguments that differ):")
    for name, sigs in recorder.signatures.items():
        if len(sigs) < 2 or "<locals>" in name or name.split(".")[0] in NUMBA_MODULES:
            continue
        lines.append(f"  {name}")
        for sig in sigs:
            differ = [f"{i}: {t}" for i, t in enumerate(sig) if any(
                len(o) != len(sig) or o[i] != t for o in sigs)]  # fmt: skip
            lines.append(f"    {'; '.join(differ)[:200]}")
    if recorder.passes:
        lines.append("\ncompiler passes, all kernels (exclusive CPU s):")
        for name, sec in sorted(recorder.passes.items(), key=lambda kv: -kv[1])[:8]:
            lines.append(f"  {name:<48} {sec:7.2f}")
        lines.append("\nstages of the top kernels (CPU s; inside native_lowering):")
        lines.append(f"  {'kernel':<40}" + "".join(f"{s[:14]:>15}" for s in STAGES))
        for name in names[:8]:
            row = recorder.stages.get(name, {})
            lines.append(f"  {name[:40]:<40}" + "".join(f"{row.get(s, 0.0):15.2f}" for s in STAGES))
        lines.append(
            f"  {'all kernels':<40}"
            + "".join(
                f"{sum(r.get(s, 0.0) for r in recorder.stages.values()):15.2f}" for s in STAGES
            )
        )
    files = list(cache.rglob("*.nbc"))
    size = sum(f.stat().st_size for f in files)
    lines.append(f"\ncache {cache}: {len(files)} .nbc files, {size / 1e6:.1f} MB")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, help="NUMBA_CACHE_DIR to use (default: a new one)")
    parser.add_argument("--top", type=int, default=30, help="kernels listed (default 30)")
    parser.add_argument("--passes", action="store_true", help="also time numba's passes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="ember-np arguments")
    args = parser.parse_args(argv)
    cache = args.cache or Path(tempfile.mkdtemp(prefix="numba-cold-"))
    os.environ["NUMBA_CACHE_DIR"] = str(cache)  # before numba is imported
    if "numba" in sys.modules:
        raise SystemExit("numba was imported before NUMBA_CACHE_DIR could be set")
    recorder = CompileRecorder()
    install(recorder, args.passes)
    from ember_np.cli import main as ember_main

    start = time.process_time()
    status = ember_main(args.command or ["train", "CartPole-v1", "--steps", "2000"])
    cpu = time.process_time() - start
    print(report(recorder, cache, args.top), file=sys.stderr)
    print(f"command CPU time (after imports): {cpu:.2f} s; load average "
          f"{os.getloadavg()[0]:.2f}", file=sys.stderr)  # fmt: skip
    return int(status)


if __name__ == "__main__":
    raise SystemExit(main())

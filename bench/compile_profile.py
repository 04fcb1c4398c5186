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
        # stage: pass it ran in (innermost) -> exclusive CPU seconds
        self.stage_in_pass: dict[tuple[str, str], float] = defaultdict(float)
        self.links: list[tuple[int, int]] = []  # (caller library, callee library) by id
        self.library_names: dict[int, str] = {}
        self.libraries: list[Any] = []  # kept alive, so their ids stay unique

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
    "cache write": ("numba.core.caching", "Cache", "save_overload"),
    "cache load": ("numba.core.caching", "Cache", "load_overload"),
}


def time_stages(recorder: CompileRecorder) -> None:
    """Wrap the :data:`STAGES` methods to add their CPU time to the kernel compiling."""
    import importlib

    def timed(stage: str, method: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            recorder.stack.append([f"stage:{stage}", time.process_time(), 0.0])
            try:
                return method(*args, **kwargs)
            finally:
                _, start, nested = recorder.stack.pop()
                spent = time.process_time() - start - nested  # its own, nested compiles not
                kernel = next((f[0] for f in reversed(recorder.stack) if "." in f[0]), "?")
                passes = [f[0] for f in recorder.stack if "." not in f[0]]
                inside = next((n for n in reversed(passes) if not n.startswith("stage:")), "-")
                recorder.stages[kernel][stage] += spent
                recorder.stage_in_pass[(stage, inside)] += spent
                if recorder.stack:
                    recorder.stack[-1][2] += nested

        return wrapper

    for stage, (module, cls, name) in STAGES.items():
        owner = getattr(importlib.import_module(module), cls)
        setattr(owner, name, timed(stage, getattr(owner, name)))

    from numba.core.codegen import CPUCodeLibrary

    link = CPUCodeLibrary.add_linking_library

    def add_linking_library(self: Any, library: Any) -> None:
        for lib in (self, library):
            if id(lib) not in recorder.library_names:
                recorder.library_names[id(lib)] = lib.name
                recorder.libraries.append(lib)
        recorder.links.append((id(self), id(library)))
        link(self, library)

    CPUCodeLibrary.add_linking_library = add_linking_library  # type: ignore[method-assign]


def phases(recorder: CompileRecorder) -> list[str]:
    """All compiles' CPU by phase: numba's front end (bytecode to typed IR), lowering
    to LLVM IR, LLVM's optimisation and machine code, and the disk cache."""
    stage_total: dict[str, float] = defaultdict(float)
    stage_in: dict[str, float] = defaultdict(float)  # by pass
    for (stage, inside), sec in recorder.stage_in_pass.items():
        stage_total[stage] += sec
        stage_in[inside] += sec
    lowering = recorder.passes.get("native_lowering", 0.0) - stage_in["native_lowering"]
    front = sum(s - stage_in[n] for n, s in recorder.passes.items() if n != "native_lowering")
    rows = [
        ("numba front end: bytecode, inlining, type inference", front),
        ("numba lowering to LLVM IR (wrappers' IR included)", lowering),
        ("LLVM function passes (each new function)", stage_total["llvm function passes"]),
        ("LLVM O3 of each kernel's linked module", stage_total["llvm O3 (linked module)"]),
        ("LLVM machine code of each linked module", stage_total["machine code (linked module)"]),
        ("cache write (pickling, files)", stage_total["cache write"]),
        ("cache load (lookups; hits load code)", stage_total["cache load"]),
    ]
    out = ["\nphases, all compiles (exclusive CPU s):"]
    out += [f"  {name:<54} {sec:7.2f}" for name, sec in rows]
    out.append(f"  {'sum':<54} {sum(sec for _, sec in rows):7.2f}")
    return out


def link_counts(recorder: CompileRecorder, top: int) -> list[str]:
    """How many linked modules (each optimised and turned into machine code again)
    hold each library's code: its own and every library that links it, directly or not."""
    callees: dict[int, set[int]] = defaultdict(set)
    for caller, callee in recorder.links:
        callees[caller].add(callee)

    def reach(lib: int, seen: set[int]) -> set[int]:
        for c in callees[lib]:
            if c not in seen:
                seen.add(c)
                reach(c, seen)
        return seen

    held: dict[int, int] = defaultdict(int)
    for lib in recorder.library_names:
        for c in reach(lib, set()):
            held[c] += 1
    names = recorder.library_names
    libs = [lib for lib in names if names[lib] not in ("nrt", "")]
    copies = sum(held[lib] for lib in libs)
    out = [
        f"\nlibraries {len(libs)}; links {len(recorder.links)}; code copies re-optimised in "
        f"callers: {copies}. Most copied (callers holding it):"
    ]
    for lib in sorted(libs, key=lambda lib: -held[lib])[:top]:
        out.append(f"  {names[lib][:60]:<60} {held[lib]:4d}")
    return out


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
    if recorder.stage_in_pass:
        lines += phases(recorder)
    if recorder.links:
        lines += link_counts(recorder, 25)
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

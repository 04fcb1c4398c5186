"""A first run's kernels, compiled in parallel by worker processes into numba's cache.

numba compiles in the calling thread, one kernel tree at a time, holding a
process-wide lock: a first run of ``ember-np train CartPole-v1`` compiles
about 110 kernels one after the other on one core while the others idle. The
run's kernels fall into independent trees: the fused training loop
(``fused_steps``: the env, the replay buffer, the loss, the backward pass,
Adam, ~65% of the work; ``agent_step`` in the Python loop of a gymnasium
env) and the acting and evaluation kernels the run calls from Python
(``act_explore``, ``greedy_action``, the env's ``reset_env`` /
``step_env``). :func:`precompile` forks one worker per tree, each compiles
its tree into numba's disk cache (``_jit.py`` says where) and exits; the run
then loads every kernel from the cache, as a second run does.

The two trees share the acting kernels (``greedy_unchecked``, ``forward_one``):
the training loop types its training kernels first, so by the time it needs
the acting ones the other worker has cached them and it loads them instead of
compiling them again. A job can also name a kernel another job compiles as one
it awaits (:attr:`CompileJob.awaits`): reaching it first, its worker waits for
the other's to cache it rather than compile it too. Nothing runs in a worker
but compiling (the training loop is called for zero steps): the run's objects
are the parent's, untouched.

While the workers compile, the run shows one line counting the kernels
compiled and the time left; the training progress bar starts after it, so its
rate and ETA count training alone. Nothing is done (no process, no line)
when the kernels are cached already, when caching is off (a worker's work
would be lost), without ``os.fork`` (the workers are forks: they start in
milliseconds with the run's objects), when the process runs other threads (a
fork copies their locks held), or with ``EMBER_NP_PRECOMPILE=0``; the run
then compiles in its own thread as before.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TextIO

from ember_np._jit import PLAN, cached_on_disk

__all__ = ["CompileJob", "PrecompileReport", "RunToCompile", "enabled", "precompile"]

#: Set to ``0`` to compile in the run's own thread (no worker processes).
ENV_SWITCH = "EMBER_NP_PRECOMPILE"


class CompileJob(NamedTuple):
    """One worker's share of a run's kernels."""

    name: str
    """What it compiles, for the progress line."""
    run: Callable[[], object]
    """Called in the worker: triggers the compiles (results are thrown away)."""
    entries: tuple[Any, ...]
    """The job's top-level kernels (dispatchers): it is needed when one is not cached."""
    kernels: int
    """About how many compiles it makes from an empty cache (for the time left; measured
    2026-12-04: 69 for the fused loop, 64 for the Python loop's step, 45 for acting)."""
    awaits: tuple[Any, ...] = ()
    """Kernels (dispatchers) among another job's ``entries`` that this job's tree calls:
    when its worker reaches one before the other worker has cached it, it waits for that
    worker to cache it (or to exit) and loads it, instead of compiling it a second
    time."""


class RunToCompile(NamedTuple):
    """A run about to train, as an algorithm's ``compile_jobs`` sees it
    (:attr:`Algorithm.compile_jobs <ember_np.algorithms.Algorithm.compile_jobs>`): what
    it needs to compile the run's kernels in a worker, without the layer that trains."""

    agent: Any
    """The run's agent (a worker's copy: a job may call its kernels)."""
    env: Any
    """The training env: a gymnasium env or vector env, or a ``NativeVecEnv``."""
    eval_env: Callable[[], Any]
    """Makes (or gives) the env evaluation plays on: called in the worker only."""
    training_loop: Callable[[], object] | None
    """Calls the run's compiled training loop for zero steps (compiles its tree, trains
    nothing), or None when the run steps its env through Python."""


class PrecompileReport(NamedTuple):
    """What :func:`precompile` did."""

    jobs: tuple[str, ...]
    """The jobs run, one worker each."""
    compiled: tuple[int, ...]
    """Kernels (and signatures) each worker compiled."""
    distinct: int
    """Kernels (and signatures) compiled by any worker, each counted once: when both
    workers compiled a shared kernel (the other had not cached it yet), once."""
    seconds: float
    """Wall time from the first fork to the last worker's exit."""
    failed: tuple[str, ...]
    """Jobs whose worker failed (the run compiles their kernels itself)."""
    cpu: tuple[float, ...]
    """Each worker's CPU seconds (user and system): the longest is the wait on an idle
    machine, their sum the compile's cost."""


def enabled() -> bool:
    """Whether workers may be forked here (see the module docstring)."""
    return (
        os.environ.get(ENV_SWITCH, "1") != "0"
        and PLAN.cache
        and hasattr(os, "fork")
        and threading.active_count() == 1
    )


def precompile(jobs: Sequence[CompileJob], out: TextIO | None = None) -> PrecompileReport | None:
    """Run the ``jobs`` whose kernels are not cached, each in a forked worker, and wait.

    Shows the progress line on ``out`` (default: stderr). Returns None when
    nothing was run (all cached, or :func:`enabled` is False).
    """
    todo = [job for job in jobs if any(cached_on_disk(e) is False for e in job.entries)]
    if not todo or not enabled():
        return None
    stream = sys.stderr if out is None else out
    line = ProgressLine(stream, [job.kernels for job in todo])
    start = time.perf_counter()
    workers: list[tuple[int, int]] = []
    status: list[int | None] = [None] * len(todo)
    handoffs = _handoffs(todo)
    try:
        try:
            workers.extend(_fork(job, i, handoffs) for i, job in enumerate(todo))
        finally:  # the workers hold their ends now: the run holds none
            for h in handoffs:
                os.close(h.read_fd)
                os.close(h.write_fd)
        counts, cpu, names = _wait(workers, status, line, start)
    finally:  # interrupted (Ctrl-C): the workers go too, the run compiles nothing more
        for (pid, _), done in zip(workers, status, strict=False):
            if done is None:
                os.kill(pid, signal.SIGTERM)
                os.waitpid(pid, 0)
    seconds = time.perf_counter() - start
    failed = tuple(job.name for job, s in zip(todo, status, strict=True) if s != 0)
    line.done(len(names), seconds, len(todo), sum(cpu))
    jobs_run = tuple(job.name for job in todo)
    return PrecompileReport(jobs_run, tuple(counts), len(names), seconds, failed, tuple(cpu))


def _wait(
    workers: list[tuple[int, int]], status: list[int | None], line: ProgressLine, start: float
) -> tuple[list[int], list[float], set[bytes]]:
    """Count each worker's compiles until all have exited: their counts, CPU seconds, and
    the kernels (with signatures) compiled by any of them.

    ``status`` gets each worker's exit code as it exits.
    """
    counts = [0] * len(workers)
    cpu = [0.0] * len(workers)
    pending = [b""] * len(workers)  # a line not read whole yet, per worker
    names: set[bytes] = set()
    while any(s is None for s in status):
        readers = [w[1] for w, s in zip(workers, status, strict=True) if s is None]
        ready, _, _ = select.select(readers, [], [], 0.5)
        for i, (pid, fd) in enumerate(workers):
            if status[i] is not None:
                continue
            if fd in ready:
                data = os.read(fd, 65536)
                if data:
                    *lines, pending[i] = (pending[i] + data).split(b"\n")
                    counts[i] += len(lines)
                    names.update(lines)
                    continue
                os.close(fd)  # the worker's end closed: it exited
                _, wait_status, usage = os.wait4(pid, 0)
                status[i] = os.waitstatus_to_exitcode(wait_status)
                cpu[i] = usage.ru_utime + usage.ru_stime
        line.show(counts, time.perf_counter() - start)
    return counts, cpu, names


class _Handoff(NamedTuple):
    """A kernel one job awaits (:attr:`CompileJob.awaits`) and another compiles (its
    ``entries``): a pipe whose write end only the compiling worker keeps, and closes
    once the kernel is cached (or when it exits, whatever happened), so that a read of
    it in the awaiting worker returns then (nothing is ever written)."""

    kernel: Any
    maker: int
    """The index of the job that compiles it."""
    read_fd: int
    write_fd: int


def _handoffs(todo: Sequence[CompileJob]) -> list[_Handoff]:
    """A handoff for each kernel a job of ``todo`` awaits and another has among its
    entries (none when that job is not run: its kernels are cached)."""
    found: list[_Handoff] = []
    for i, job in enumerate(todo):
        for kernel in job.awaits:
            makers = [m for m, other in enumerate(todo) if m != i and kernel in other.entries]
            if makers and all(h.kernel is not kernel for h in found):
                found.append(_Handoff(kernel, makers[0], *os.pipe()))
    return found


def _take_handoffs(index: int, job: CompileJob, handoffs: list[_Handoff]) -> None:
    """In the worker of ``job`` (``todo[index]``): keep the ends of ``handoffs`` it uses,
    close the rest, and make its kernels' ``compile`` close or wait on them.

    numba compiles a kernel through its dispatcher's ``compile(sig)`` (first from the
    disk cache), called from Python or when typing a caller: replaced in this worker
    only (a fork), it closes the maker's end once the kernel is cached and waits, in
    an awaiting worker, before it looks in the cache."""
    for h in handoffs:
        if h.maker == index:
            os.close(h.read_fd)
            _around_compile(h.kernel, after=_once(os.close, h.write_fd))
            continue
        os.close(h.write_fd)
        if h.kernel in job.awaits:
            _around_compile(h.kernel, before=_once(_wait_for_close, h.read_fd))
        else:
            os.close(h.read_fd)


def _around_compile(
    dispatcher: Any, before: Callable[[], None] | None = None,
    after: Callable[[], None] | None = None,
) -> None:  # fmt: skip
    """Call ``before`` ahead of each of ``dispatcher``'s compiles, ``after`` once it ends."""
    original = dispatcher.compile

    def compile_around(sig: Any) -> Any:
        if before is not None:
            before()
        try:
            return original(sig)
        finally:
            if after is not None:
                after()

    dispatcher.compile = compile_around


def _once(fn: Callable[[int], object], fd: int) -> Callable[[], None]:
    """``fn(fd)`` on the first call, nothing on later ones."""
    pending = [fd]

    def call() -> None:
        if pending:
            fn(pending.pop())

    return call


def _wait_for_close(fd: int) -> None:
    """Block until every write end of the pipe ``fd`` reads from is closed, then close it."""
    while os.read(fd, 1):
        pass
    os.close(fd)


def _fork(job: CompileJob, index: int, handoffs: list[_Handoff]) -> tuple[int, int]:
    """Start ``job`` (``todo[index]``, given ``handoffs``) in a forked worker; its pid and the
    pipe it writes a line to per compile."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: compile, report each compile, never return
        code = 1
        try:
            os.close(read_fd)
            _take_handoffs(index, job, handoffs)
            _count_compiles(write_fd)
            job.run()
            code = 0
        except BaseException:  # noqa: BLE001  (the run compiles this job itself, and says why)
            pass
        finally:
            os._exit(code)
    os.close(write_fd)
    return pid, read_fd


def _count_compiles(fd: int) -> None:
    """Write a line to ``fd`` each time numba finishes compiling a kernel here: the
    kernel's module and name, and a checksum of its argument types (a line for each
    signature)."""
    from numba.core import event

    class Tick(event.Listener):  # type: ignore[misc]
        def on_start(self, ev: Any) -> None:
            pass

        def on_end(self, ev: Any) -> None:
            fn = ev.data["dispatcher"].py_func
            args = zlib.crc32(str(ev.data["args"]).encode())  # a state's type is long
            name = f"{fn.__module__}.{fn.__qualname__}:{args:08x}"
            os.write(fd, name.encode() + b"\n")

    event.register("numba:compile", Tick())


class ProgressLine:
    """The line shown while workers compile: kernels compiled, time spent and left.

    On a terminal it is redrawn in place; elsewhere (a log, CI) only its first
    and last states are written, one line each.
    """

    #: Share of a worker's time spent once its count is complete: each tree's
    #: top kernel compiles last, its callees inlined and optimised with it.
    TAIL = 0.3

    def __init__(self, stream: TextIO, expected: list[int]) -> None:
        self.stream = stream
        self.expected = expected
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.width = 0
        total = sum(expected)
        workers = f"{len(expected)} processes" if len(expected) > 1 else "1 process"
        self._write(
            f"compiling ember_np's kernels for this machine ({workers}, about {total} kernels; "
            "later runs load them from numba's cache)",
            final=not self.tty,
        )

    def left(self, counts: list[int], elapsed: float) -> float | None:
        """Seconds left, from the slowest worker's share of its expected compiles."""
        worst = None
        for done, expected in zip(counts, self.expected, strict=True):
            if done == 0:
                return None
            share = (1 - self.TAIL) * min(done / max(expected, 1), 1.0)
            rest = elapsed * (1 - share) / share
            worst = rest if worst is None else max(worst, rest)
        return worst

    def show(self, counts: list[int], elapsed: float) -> None:
        """Redraw (terminal only)."""
        if not self.tty:
            return
        left = self.left(counts, elapsed)
        eta = "" if left is None else f", about {left:.0f} s left"
        self._write(
            f"compiling ember_np's kernels: {sum(counts)} of about {sum(self.expected)} "
            f"compiled, {elapsed:.0f} s{eta}",
            final=False,
        )

    def done(self, compiled: int, seconds: float, workers: int, cpu: float) -> None:
        """The last state, on a line of its own (``cpu``: the workers' CPU seconds)."""
        self._write(
            f"compiled {compiled} kernels in {seconds:.1f} s ("
            + (f"{workers} processes at once" if workers > 1 else "1 process")
            + f", {cpu:.1f} s of CPU)",
            final=True,
        )

    def _write(self, text: str, final: bool) -> None:
        if self.tty:
            pad = max(self.width - len(text), 0)
            self.width = len(text)
            self.stream.write("\r" + text + " " * pad + ("\n" if final else ""))
            if final:
                self.width = 0
        elif final:
            self.stream.write(text + "\n")
        self.stream.flush()

"""Many seeds in one call: K independent training runs on W worker processes.

:func:`train_seeds` (and ``ember-np train ENV_ID --seeds K --workers W``)
trains every seed as an ordinary :class:`~ember_np.TrainingRun` under one
parent directory::

    <root>/<name>/<version>/<YYYYMMDD_HHMMSS>/
        seeds.json              what to train: env, config, steps, the seeds
        seed_<s>/               exactly the run ``ember-np train ... --seed s`` makes
            ...                 (config.json, checkpoints/, *.jsonl, metadata.json)
            result.json         written last: the seed finished

Each seed runs :func:`~ember_np.training.seed_run.train_seed`, the same
steps in the same order as the single-seed command line:
:func:`ember_np.training.loop.train_and_evaluate`, a greedy evaluation every
``eval_every`` steps, a final one. Same
seed, same options: the same numbers in the logs and checkpoints
(``tests/test_multiseed.py`` compares the files).

Why processes, not threads or numba's parallel loops in one process: the
kernels release the GIL, but everything between compiled chunks (episode
records, JSONL, checkpoints, every evaluation on the Python path) holds it;
and a process that dies (a SIGKILL, the OOM killer) takes only its own seed
with it. Workers are spawned (no fork of a process that may hold OpenBLAS
threads or locks), with one BLAS thread each (``OPENBLAS_NUM_THREADS=1`` and
friends, set in the environment the child starts with, before NumPy loads).
``bench/multiseed.py`` measures both ways (docs/guides/many-seeds.md).

A worker that dies leaves the other seeds untouched (every file of a run is
written atomically); its seed has no ``result.json``, and
:func:`resume_seeds` (``ember-np resume PARENT``) trains the seeds that did
not finish again from the start (a partial attempt is kept, renamed
``seed_<s>.interrupted``), so every seed is still exactly the run
``--seed s`` makes.

With ``scheduler=`` (``--scheduler tcp://HOST:PORT``) the seeds are tasks
on a Dask cluster instead of local processes, and each seed's run directory
comes back to this process, which writes it here the same way
(:mod:`ember_np.training.cluster`, imported only then).

The files a multi-seed run leaves (``seeds.json``, ``result.json``) are read
and written by :mod:`ember_np.training.seeds`; its public names are
re-exported here.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ember_np.checkpoint import atomic_write_text
from ember_np.training.run import DirectoryLock, check_name
from ember_np.training.seed_run import train_seed
from ember_np.training.seeds import (
    MAX_SEED,
    MAX_SEEDS,
    SPEC_FILE,
    MultiSeedResult,
    SeedResult,
    SeedSpec,
    format_seeds,
    is_multiseed,
    load_multiseed,
    parse_seeds,
    read_spec,
)
from ember_np.training.setup import vector_settings
from ember_np.training.spec import RunSpec

__all__ = [
    "MAX_SEED",
    "MAX_SEEDS",
    "MultiSeedResult",
    "SeedResult",
    "SeedSpec",
    "WORKERS_PER_CORE",
    "check_workers",
    "default_workers",
    "format_seeds",
    "is_multiseed",
    "load_multiseed",
    "parent_lock",
    "parse_seeds",
    "resume_seeds",
    "train_seed",
    "train_seeds",
]

#: Environment of every worker: one thread per BLAS / OpenMP library, so W
#: workers use W cores and do not oversubscribe them.
WORKER_THREADS = {
    var: "1"
    for var in (
        "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
        "NUMBA_NUM_THREADS", "VECLIB_MAXIMUM_THREADS",
    )
}  # fmt: skip


# -- the local worker ---------------------------------------------------------------


def _worker_main(conn: Any, spec_dict: dict[str, Any]) -> None:
    """A worker process: train the seeds the parent sends until it sends None."""
    from ember_np.nn._blas import set_blas_threads

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the parent decides
    set_blas_threads(1)  # already so from OPENBLAS_NUM_THREADS; this BLAS may not read it
    spec = SeedSpec.from_dict(spec_dict)
    try:
        while True:
            job = conn.recv()
            if job is None:
                return
            seed, run_dir = job
            try:
                result = train_seed(spec, seed, run_dir, lambda n: conn.send(("steps", n)))
                conn.send(("done", result.to_dict()))
            except (BrokenPipeError, ConnectionResetError):
                raise
            except BaseException:  # noqa: BLE001  reported to the parent, which goes on
                conn.send(("error", seed, traceback.format_exc(limit=5)))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        # The parent is gone (killed): stop quietly. The seed in progress has no
        # result.json, so ``ember-np resume`` trains it again.
        return


# -- many seeds -------------------------------------------------------------------


def _make_parent(root: str | os.PathLike[str], name: str, version: str) -> Path:
    """``root/name/version/<YYYYMMDD_HHMMSS>[_k]/``, as TrainingRun.create names runs."""
    check_name("name", name)
    check_name("version", version)
    base = Path(root) / name / version
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot create the run directory under {base}: "
                      f"{exc.strerror}") from exc  # fmt: skip
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    k = 0
    while True:
        parent = base / (stamp if k == 0 else f"{stamp}_{k}")
        try:
            parent.mkdir()
            return parent
        except FileExistsError:
            k += 1


def default_workers() -> int:
    """One worker per core this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


#: Worker processes allowed per core: the seeds are CPU-bound, so more workers
#: than cores only share them; a few per core is room for a machine whose
#: affinity mask undercounts, not a reason to start thousands of processes.
WORKERS_PER_CORE = 4


def check_workers(workers: Any) -> int:
    """``workers`` as an int in 1 .. WORKERS_PER_CORE x cores, or ValueError saying why."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"workers must be a positive integer, got {workers!r}")
    limit = WORKERS_PER_CORE * default_workers()
    if workers > limit:
        raise ValueError(
            f"workers must be at most {limit} ({WORKERS_PER_CORE} per core on "
            f"{default_workers()} cores), got {workers}: each worker trains on one core, "
            "so more only share the cores; leave --workers out for one per core"
        )
    return int(workers)


def train_seeds(
    run: RunSpec,
    seeds: Iterable[int],
    *,
    workers: int | None = None,
    root: str | os.PathLike[str] = "runs",
    name: str | None = None,
    version: str = "default",
    progress: bool = True,
    on_start: Callable[[Path], None] | None = None,
    scheduler: Any = None,
) -> MultiSeedResult:
    """Train ``run`` once per seed of ``seeds``, on ``workers`` processes; returns their results.

    Each seed is the run :func:`train_seed` makes (``ember-np train env_id
    --seed s`` with the same options), in ``<root>/<name>/<version>/<time>/seed_<s>/``.

    Parameters
    ----------
    run : RunSpec
        What every seed trains (its ``seed`` is replaced by each seed's):
        the env (e.g. ``"ember_np/CartPole-v1"``, compiled, fused training),
        the config, the steps per seed, the evaluation and checkpoint settings,
        the envs stepped together (:func:`~ember_np.training.spec.resolve`
        builds one as ``ember-np train`` does).
    seeds : iterable of int
        Distinct seeds in ``0..MAX_SEED`` (2**63 - 1), at most ``MAX_SEEDS`` (10,000).
    workers : int, optional
        Worker processes (default: one per core; never more than the seeds).
    root, name, version
        Where the parent directory goes (name defaults to ``run.env_id`` with
        ``/`` replaced by ``-``).
    progress : bool
        One tqdm bar over all seeds' env steps (stderr).
    on_start : callable, optional
        Called with the parent directory once it exists, before training.
    scheduler : str or distributed.Client, optional
        A Dask scheduler's address (``"tcp://HOST:8786"``) or a connected
        client: each seed is one task on that cluster instead of a local
        worker process (:mod:`ember_np.training.cluster`; ``workers`` must be
        left out). An address that does not answer raises
        :class:`~ember_np.training.cluster.ClusterError` before anything is
        written. Without it, Dask is not imported.

    Returns
    -------
    MultiSeedResult
        ``failed`` lists the seeds whose worker died or raised; their partial
        runs stay on disk, and :func:`resume_seeds` finishes them.
    """
    if not isinstance(run, RunSpec):
        raise ValueError(f"run must be a RunSpec (e.g. RunSpec({run!r}, steps=...) for an "
                         f"env id), got {type(run).__name__}")  # fmt: skip
    seeds = [int(s) for s in itertools.islice(seeds, MAX_SEEDS + 1)]  # never a huge list
    if not seeds:
        raise ValueError("seeds must name at least one seed, got none")
    if len(seeds) > MAX_SEEDS:
        raise ValueError(f"seeds must be at most {MAX_SEEDS:,} seeds, got more: train them "
                         "in several runs")  # fmt: skip
    if min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct non-negative integers, got "
                         f"{format_seeds(seeds)}")  # fmt: skip
    if max(seeds) > MAX_SEED:
        raise ValueError(f"seeds must be at most {MAX_SEED} (2**63 - 1), got {max(seeds)}")
    spec = SeedSpec(run, name or run.env_id.replace("/", "-"), version)
    vector_settings(run.env_id, run.num_envs, run.vectorization)  # SetupError if bad
    if workers is not None:
        _check_not_both(workers, scheduler)
        workers = check_workers(workers)
    with _cluster(scheduler) as client:  # reached before anything is written
        parent = _make_parent(root, spec.name, spec.version)
        with parent_lock(parent):  # one writer: a `resume PARENT` meanwhile is refused
            spec_text = json.dumps({"spec": spec.to_dict(), "seeds": seeds}, indent=1)
            atomic_write_text(parent / SPEC_FILE, spec_text)
            if on_start is not None:
                on_start(parent)
            return _run(parent, spec, seeds, workers, progress, client)


def _check_not_both(workers: int | None, scheduler: Any) -> None:
    if workers is not None and scheduler is not None:
        raise ValueError(
            f"workers ({workers}) counts local processes and cannot go with a scheduler: on a "
            "Dask cluster every worker trains (start them with `dask worker ADDRESS "
            "--nworkers N --nthreads 1`); leave workers out"
        )


@contextmanager
def _cluster(scheduler: Any) -> Iterator[Any]:
    """None (local workers), or a Dask client: connected here from an address and closed
    at the end, or the caller's own client, left open."""
    if scheduler is None:
        yield None
        return
    if not isinstance(scheduler, str):
        yield scheduler
        return
    from ember_np.training.cluster import connect

    client = connect(scheduler)
    try:
        yield client
    finally:
        client.close()


def parent_lock(parent: str | os.PathLike[str]) -> DirectoryLock:
    """The writer lock of a multi-seed run's parent directory (use it as ``with``).

    The same :class:`~ember_np.training.run.DirectoryLock` a single run
    takes: :func:`train_seeds` and :func:`resume_seeds` hold it while they
    train, so a second writer gets :class:`~ember_np.training.run.RunLockedError`
    naming the holder's PID.
    """
    return DirectoryLock(parent, "the multi-seed run")


def resume_seeds(
    parent: str | os.PathLike[str],
    workers: int | None = None,
    progress: bool = True,
    scheduler: Any = None,
) -> MultiSeedResult:
    """Train the seeds of ``parent`` that did not finish; returns all its results.

    A seed without ``result.json`` is trained again from the start, so it is
    exactly the run ``--seed s`` makes; its partial directory is kept,
    renamed ``seed_<s>.interrupted`` (``..._1``, ... for later attempts).
    ``scheduler``: as :func:`train_seeds`' (the run may have trained on
    local workers or a cluster either way).
    """
    parent = Path(parent)
    _check_not_both(workers, scheduler)
    with _cluster(scheduler) as client, parent_lock(parent):  # one writer per parent
        spec, _ = read_spec(parent)
        missing = load_multiseed(parent).failed
        for seed in missing:
            partial = parent / f"seed_{seed}"
            if partial.exists():
                # A worker of a killed parent may still be in it for a moment.
                with DirectoryLock(partial, "the run"):
                    k, target = 0, parent / f"seed_{seed}.interrupted"
                    while target.exists():
                        k += 1
                        target = parent / f"seed_{seed}.interrupted_{k}"
                    partial.rename(target)
        if missing:
            _run(parent, spec, missing, workers, progress, client)
        return load_multiseed(parent)


def _run(
    parent: Path,
    spec: SeedSpec,
    seeds: list[int],
    workers: int | None,
    progress: bool,
    client: Any = None,
) -> MultiSeedResult:
    t0 = time.perf_counter()
    if client is not None:
        from ember_np.training.cluster import run_seeds

        run_seeds(client, parent, spec, seeds, progress)
    else:
        workers = default_workers() if workers is None else check_workers(workers)
        _Pool(parent, spec, seeds, min(workers, len(seeds)), progress).run()
    result = load_multiseed(parent)
    result.wall_seconds = time.perf_counter() - t0
    return result


class _Pool:
    """Worker processes fed one seed at a time through a pipe each.

    Pipes rather than a shared task queue: a worker killed while it holds a
    queue's lock would block every other worker; here a dead worker only
    closes its own pipe, its seed is marked failed and a new worker takes
    over the seeds still waiting.
    """

    def __init__(
        self, parent: Path, spec: SeedSpec, seeds: list[int], workers: int, progress: bool
    ) -> None:
        self.parent = parent
        self.spec = spec
        self.pending = list(seeds)
        self.n_workers = workers
        self.failed: list[int] = []
        self.finished = 0
        from tqdm import tqdm

        self.bar = tqdm(total=spec.steps * len(seeds), unit="step", unit_scale=True,
                        dynamic_ncols=True, disable=not progress, desc=f"{len(seeds)} seeds",
                        smoothing=0.1)  # fmt: skip

    def _start_worker(self, ctx: Any) -> tuple[Any, Any]:
        conn, child = ctx.Pipe()
        saved = {var: os.environ.get(var) for var in WORKER_THREADS}
        os.environ.update(WORKER_THREADS)  # the child starts with them, before NumPy loads
        try:
            # Not daemonic: a daemonic process may not start processes, and a seed with
            # --vectorization async starts one per env copy. The workers are stopped
            # all the same: run()'s finally terminates them whatever ends it, and a
            # worker whose parent was killed sees its pipe close and returns.
            process = ctx.Process(target=_worker_main, args=(child, self.spec.to_dict()),
                                  daemon=False)  # fmt: skip
            process.start()
        finally:
            for var, value in saved.items():
                if value is None:
                    os.environ.pop(var, None)
                else:
                    os.environ[var] = value
        child.close()
        return process, conn

    def _assign(self, conn: Any) -> int | None:
        if not self.pending:
            conn.send(None)
            return None
        seed = self.pending.pop(0)
        conn.send((seed, str(self.parent / f"seed_{seed}")))
        return seed

    def _lost(self, seed: int, why: str) -> None:
        self.failed.append(seed)
        message = (f"seed {seed} did not finish: {why}; the other seeds go on "
                   f"(ember-np resume {self.parent} trains it again)")  # fmt: skip
        self.bar.write(message, file=sys.stderr)

    def run(self) -> list[int]:
        import multiprocessing as mp
        from multiprocessing.connection import wait

        ctx = mp.get_context("spawn")
        live: dict[Any, tuple[Any, int | None]] = {}  # conn -> (process, its seed)
        try:
            for _ in range(self.n_workers):
                process, conn = self._start_worker(ctx)
                live[conn] = (process, self._assign(conn))
            while live:
                for conn in wait(list(live)):
                    process, seed = live[conn]
                    try:
                        message = conn.recv()  # type: ignore[union-attr, call-arg]  # a Connection
                    except (EOFError, OSError):  # the worker died
                        process.join()
                        del live[conn]
                        if seed is not None:
                            self._lost(seed, _exit_reason(process.exitcode))
                        if self.pending:
                            process, conn = self._start_worker(ctx)
                            live[conn] = (process, self._assign(conn))
                        continue
                    kind = message[0]
                    if kind == "steps":
                        self.bar.update(message[1])
                        continue
                    if kind == "done":
                        self.finished += 1
                    else:  # "error": the worker is fine, the seed raised
                        self._lost(message[1], f"it raised\n{message[2]}")
                    self.bar.set_postfix(done=self.finished, failed=len(self.failed),
                                         refresh=False)  # fmt: skip
                    live[conn] = (process, self._assign(conn))
                    if live[conn][1] is None:
                        process.join()
                        del live[conn]
        finally:
            self.bar.close()
            for conn, (process, _) in live.items():  # interrupted: stop the rest
                process.terminate()
                process.join()
                conn.close()
        return self.failed


def _exit_reason(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"its worker was killed by {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"its worker exited with status {code}"
